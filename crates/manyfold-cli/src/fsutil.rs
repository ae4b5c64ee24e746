//! Files that appear whole or not at all: a [`PartFile`] is written under a
//! hidden temporary name beside its destination (`.NAME.manyfold-part-<hex>`),
//! synced, then moved to its final name; dropped without a commit, it is
//! deleted. Also the free-space check the receiver makes before accepting.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// A temporary file that becomes `final_path` on [`PartFile::commit`] and is
/// removed if dropped before.
#[derive(Debug)]
pub struct PartFile {
    file: File,
    tmp: PathBuf,
    final_path: PathBuf,
    committed: bool,
}

impl PartFile {
    /// Creates the temporary file in `final_path`'s directory.
    pub fn create(final_path: &Path) -> Result<PartFile> {
        let dir = parent_dir(final_path);
        let name = final_path
            .file_name()
            .with_context(|| format!("{} has no file name", final_path.display()))?
            .to_string_lossy()
            .into_owned();
        // create_new: never reuse or clobber another writer's temporary file.
        for _ in 0..8 {
            let tmp = dir.join(format!(".{name}.manyfold-part-{:016x}", crate::net::random_u64()));
            match OpenOptions::new().read(true).write(true).create_new(true).open(&tmp) {
                Ok(file) => return Ok(PartFile { file, tmp, final_path: final_path.to_path_buf(), committed: false }),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot create a temporary file in {}", dir.display()))
                }
            }
        }
        bail!("cannot create a temporary file in {}", dir.display())
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// The temporary path being written.
    pub fn path(&self) -> &Path {
        &self.tmp
    }

    /// Changes the name the file will get on commit (same directory).
    pub fn retarget(&mut self, final_path: &Path) {
        self.final_path = final_path.to_path_buf();
    }

    /// Syncs the data and moves the file to its final name. Without
    /// `overwrite`, an existing file of that name is an error and is left
    /// alone, even if it appeared while we were writing.
    pub fn commit(mut self, overwrite: bool) -> Result<()> {
        self.file.sync_all().with_context(|| format!("cannot sync {}", self.tmp.display()))?;
        if overwrite {
            fs::rename(&self.tmp, &self.final_path)
                .with_context(|| format!("cannot rename {} to {}", self.tmp.display(), self.final_path.display()))?;
        } else {
            // A hard link fails atomically if the name is taken, where
            // "check, then rename" would race with a concurrent writer.
            match fs::hard_link(&self.tmp, &self.final_path) {
                Ok(()) => {
                    let _ = fs::remove_file(&self.tmp);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    bail!("file exists: {}", self.final_path.display())
                }
                // File systems without hard links: the racy way.
                Err(_) => {
                    if self.final_path.exists() {
                        bail!("file exists: {}", self.final_path.display());
                    }
                    fs::rename(&self.tmp, &self.final_path).with_context(|| {
                        format!("cannot rename {} to {}", self.tmp.display(), self.final_path.display())
                    })?;
                }
            }
        }
        self.committed = true;
        // Make the new directory entry durable too.
        if let Ok(dir) = File::open(parent_dir(&self.final_path)) {
            let _ = dir.sync_all();
        }
        Ok(())
    }
}

impl Drop for PartFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Bytes available to an unprivileged writer in the file system holding
/// `dir`, where the platform can tell.
#[cfg(unix)]
pub fn available_space(dir: &Path) -> Option<u64> {
    let st = rustix::fs::statvfs(dir).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

#[cfg(not(unix))]
pub fn available_space(_dir: &Path) -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<_> =
            fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    #[test]
    fn dropped_part_file_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let part = PartFile::create(&dir.path().join("x")).unwrap();
        assert!(part.path().file_name().unwrap().to_string_lossy().starts_with(".x.manyfold-part-"));
        drop(part);
        assert!(entries(dir.path()).is_empty());
    }

    #[test]
    fn commit_refuses_existing_unless_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("x");
        fs::write(&target, b"old").unwrap();

        let part = PartFile::create(&target).unwrap();
        part.file().write_all(b"new").unwrap();
        let err = part.commit(false).unwrap_err().to_string();
        assert!(err.contains("file exists"), "{err}");
        assert_eq!(fs::read(&target).unwrap(), b"old");
        assert_eq!(entries(dir.path()), ["x"]);

        let part = PartFile::create(&target).unwrap();
        part.file().write_all(b"new").unwrap();
        part.commit(true).unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"new");
        assert_eq!(entries(dir.path()), ["x"]);
    }

    #[test]
    fn free_space_is_known_on_unix() {
        if cfg!(unix) {
            assert!(available_space(Path::new(".")).is_some());
        }
    }
}
