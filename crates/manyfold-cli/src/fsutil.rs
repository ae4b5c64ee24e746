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
        let name = base_name(final_path)?;
        // create_new: never reuse or clobber another writer's temporary file.
        for _ in 0..8 {
            let tmp = dir.join(hidden_name(&name, &format!(".manyfold-part-{:016x}", crate::net::random_u64())));
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
        let (dir, tmp, name) = split_dir(&self.tmp, &self.final_path)?;
        install_at(&dir, &self.file, &tmp, &name, overwrite)
            .map_err(|e| anyhow::anyhow!("{}", e.describe(&self.final_path)))?;
        self.committed = true;
        Ok(())
    }
}

/// The directory of `tmp` (opened) and the base names of `tmp` and
/// `final_path`, which must share it.
fn split_dir(tmp: &Path, final_path: &Path) -> Result<(File, String, String)> {
    let dir_path = parent_dir(final_path);
    let dir = File::open(&dir_path).with_context(|| format!("cannot open the directory {}", dir_path.display()))?;
    Ok((dir, base_name(tmp)?, base_name(final_path)?))
}

/// Why [`install_at`] failed.
#[derive(Debug)]
pub enum InstallError {
    /// The final name is taken and overwriting was not asked for.
    Exists,
    Io(io::Error),
}

impl InstallError {
    pub fn describe(&self, final_path: &Path) -> String {
        match self {
            InstallError::Exists => format!("file exists: {}", final_path.display()),
            InstallError::Io(e) => format!("cannot move the finished file into place as {}: {e}", final_path.display()),
        }
    }
}

/// Makes the written temporary file `tmp` (in directory `dir`) durable and
/// gives it the name `name` in the same directory; the directory entry is
/// made durable too. Without `overwrite` an existing `name` is an error and
/// is left alone, even if it appeared while we were writing: a hard link
/// fails atomically where "check, then rename" would race. On an error the
/// temporary file stays.
pub fn install_at(dir: &File, file: &File, tmp: &str, name: &str, overwrite: bool) -> Result<(), InstallError> {
    use rustix::fs::{linkat, renameat, unlinkat, AtFlags};
    file.sync_all().map_err(InstallError::Io)?;
    let errno = |e: rustix::io::Errno| InstallError::Io(io::Error::from_raw_os_error(e.raw_os_error()));
    if overwrite {
        renameat(dir, tmp, dir, name).map_err(errno)?;
    } else {
        match linkat(dir, tmp, dir, name, AtFlags::empty()) {
            Ok(()) => {
                let _ = unlinkat(dir, tmp, AtFlags::empty());
            }
            Err(rustix::io::Errno::EXIST) => return Err(InstallError::Exists),
            // File systems without hard links: NOREPLACE, where it exists.
            Err(_) => match rustix::fs::renameat_with(dir, tmp, dir, name, rustix::fs::RenameFlags::NOREPLACE) {
                Ok(()) => {}
                Err(rustix::io::Errno::EXIST) => return Err(InstallError::Exists),
                Err(e) => return Err(errno(e)),
            },
        }
    }
    let _ = dir.sync_all();
    Ok(())
}

/// A download's or upload's partial file, kept across interruptions so that
/// the transfer can resume: `.NAME.manyfold-partial` beside the destination,
/// locked (flock) while a transfer writes it. Dropped without
/// [`commit`](Self::commit) or [`discard`](Self::discard), it stays.
#[derive(Debug)]
pub struct ResumeFile {
    file: File,
    dir: File,
    part: String,
    name: String,
    final_path: PathBuf,
}

/// The suffix of partial files; listings hide them.
pub const PARTIAL_SUFFIX: &str = ".manyfold-partial";

/// The partial file's name for a destination named `name`.
pub fn partial_name(name: &str) -> String {
    hidden_name(name, PARTIAL_SUFFIX)
}

/// The longest file name the usual file systems take (NAME_MAX).
const NAME_MAX: usize = 255;

/// `.NAME<suffix>`, the hidden name of a temporary file beside NAME. When
/// that would pass NAME_MAX, a prefix of NAME and a hash of the whole
/// (`.PREFIX~HASH<suffix>`) keep it within the limit, still the same for
/// the same NAME (a resume finds it): a legal NAME never fails because of
/// its temporary file's name.
pub fn hidden_name(name: &str, suffix: &str) -> String {
    let full = format!(".{name}{suffix}");
    if full.len() <= NAME_MAX {
        return full;
    }
    let hash = blake3::hash(name.as_bytes()).to_hex();
    let tag = &hash.as_str()[..16];
    // '.' + PREFIX + '~' + 16 hex digits + suffix.
    let mut cut = NAME_MAX.saturating_sub(2 + tag.len() + suffix.len()).min(name.len());
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(".{}~{tag}{suffix}", &name[..cut])
}

/// A file read from an offset that moves on with each read, on a
/// blocking thread and straight into the caller's buffer: tokio's `File`
/// reads into a buffer of its own and copies out of it, one more pass
/// over every byte sent (RESULTS §44).
#[derive(Debug)]
pub struct FileAt {
    pub file: std::sync::Arc<File>,
    pub offset: u64,
}

impl FileAt {
    /// One read into `buf[at..]`: `buf` back and how many bytes came (0
    /// at the end of the file; fewer than asked is not the end).
    pub async fn read(&mut self, mut buf: bytes::BytesMut, at: usize) -> io::Result<(bytes::BytesMut, usize)> {
        use std::os::unix::fs::FileExt;
        let (file, offset) = (std::sync::Arc::clone(&self.file), self.offset);
        let (buf, n) = tokio::task::spawn_blocking(move || loop {
            match file.read_at(&mut buf[at..], offset) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                read => return read.map(|n| (buf, n)),
            }
        })
        .await
        .map_err(io::Error::other)??;
        self.offset += n as u64;
        Ok((buf, n))
    }
}

/// BLAKE3 state after the first `len` bytes of `file` (fewer if it is
/// shorter; the count read is returned too): how both ends of a resume
/// check that a partial file holds the start of the same data.
pub fn hash_prefix(file: &File, len: u64) -> io::Result<(blake3::Hasher, u64)> {
    let mut h = blake3::Hasher::new();
    let n = hash_range(file, &mut h, 0, len)?;
    Ok((h, n))
}

/// Feeds `h` the `len` bytes of `file` at `offset` (fewer if it ends
/// before); returns how many it read.
fn hash_range(file: &File, h: &mut blake3::Hasher, offset: u64, len: u64) -> io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; (1 << 20).min(len) as usize];
    let mut at = 0u64;
    while at < len {
        let want = (len - at).min(buf.len() as u64) as usize;
        let n = file.read_at(&mut buf[..want], offset + at)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        at += n as u64;
    }
    Ok(at)
}

/// Below this a whole-file hash is one thread's work.
const SPLIT_HASH_MIN: u64 = 8 << 20;

/// The BLAKE3 of the first `len` bytes of `file`, `None` if it holds
/// fewer: the sender's second read of a file before its end is sent (the
/// change check, `transfer::tree::source`), which the whole transfer
/// waits for. Two threads share it, each reading and hashing its part of
/// BLAKE3's tree: the root's left subtree (a power of two of 1 KiB chunks)
/// is cut in its two halves, the first hashed on a thread of its own, the
/// second together with the root's right subtree, and the chaining values
/// are merged as the tree joins them (`blake3::hazmat`). A 625 MB file
/// read again from the page cache took 0.21–0.31 s on one thread here, a
/// pause at the end of every transfer of it (RESULTS §42).
pub fn hash_file(file: &File, len: u64) -> io::Result<Option<blake3::Hash>> {
    hash_file_split(file, len, SPLIT_HASH_MIN)
}

fn hash_file_split(file: &File, len: u64, split_min: u64) -> io::Result<Option<blake3::Hash>> {
    use blake3::hazmat::{left_subtree_len, merge_subtrees_non_root, merge_subtrees_root, Mode};
    if len < split_min.max(4 * blake3::CHUNK_LEN as u64) {
        let (h, n) = hash_prefix(file, len)?;
        return Ok((n == len).then(|| h.finalize()));
    }
    let left = left_subtree_len(len);
    let half = left / 2;
    let (first, rest) = std::thread::scope(|s| {
        let first = s.spawn(|| subtree_cv(file, 0, half));
        let second = subtree_cv(file, half, half);
        let right = subtree_cv(file, left, len - left);
        (first.join(), second.and_then(|a| Ok(a.zip(right?))))
    });
    let first = first.map_err(|_| io::Error::other("the hashing thread panicked"))??;
    let (Some(first), Some((second, right))) = (first, rest?) else { return Ok(None) };
    let left_cv = merge_subtrees_non_root(&first, &second, Mode::Hash);
    Ok(Some(merge_subtrees_root(&left_cv, &right, Mode::Hash)))
}

/// The chaining value of the `len` bytes of `file` at `offset`, a subtree
/// of BLAKE3's tree; `None` if the file ends before them.
fn subtree_cv(file: &File, offset: u64, len: u64) -> io::Result<Option<blake3::hazmat::ChainingValue>> {
    use blake3::hazmat::HasherExt;
    let mut h = blake3::Hasher::new();
    h.set_input_offset(offset);
    let n = hash_range(file, &mut h, offset, len)?;
    Ok((n == len).then(|| h.finalize_non_root()))
}

impl ResumeFile {
    /// Opens (or creates) the partial file of `final_path`; returns it and
    /// how many bytes it already holds. Fails if another transfer holds it.
    pub fn open(final_path: &Path) -> Result<(ResumeFile, u64)> {
        Self::open_tagged(final_path, "")
    }

    /// As [`open`](Self::open), for a partial file named after `tag` too
    /// (`.NAME.manyfold-partial-TAG`), so that only a transfer of the same
    /// version of a file (its size and mtime in the tag) finds it.
    pub fn open_tagged(final_path: &Path, tag: &str) -> Result<(ResumeFile, u64)> {
        use std::os::unix::fs::OpenOptionsExt;
        let dir_path = parent_dir(final_path);
        let name = base_name(final_path)?;
        let part =
            if tag.is_empty() { partial_name(&name) } else { hidden_name(&name, &format!("{PARTIAL_SUFFIX}-{tag}")) };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(dir_path.join(&part))
            .with_context(|| format!("cannot create a partial file in {}", dir_path.display()))?;
        if rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            bail!("another transfer is writing {} (its partial file {part} is locked)", final_path.display());
        }
        let have = file.metadata()?.len();
        let dir = File::open(&dir_path).with_context(|| format!("cannot open the directory {}", dir_path.display()))?;
        Ok((ResumeFile { file, dir, part, name, final_path: final_path.to_path_buf() }, have))
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// Syncs, sets the modification time, and moves the file into place.
    pub fn commit(self, overwrite: bool, mtime: Option<std::time::SystemTime>) -> Result<()> {
        if let Some(t) = mtime {
            let _ = self.file.set_modified(t);
        }
        install_at(&self.dir, &self.file, &self.part, &self.name, overwrite)
            .map_err(|e| anyhow::anyhow!("{}", e.describe(&self.final_path)))
    }

    /// Deletes the partial file.
    pub fn discard(self) {
        let _ = rustix::fs::unlinkat(&self.dir, self.part.as_str(), rustix::fs::AtFlags::empty());
    }
}

impl Drop for PartFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// The last component of `path`, as text.
fn base_name(path: &Path) -> Result<String> {
    let name = path.file_name().with_context(|| format!("{} has no file name", path.display()))?;
    Ok(name.to_string_lossy().into_owned())
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Removes, under `dir` (recursively, links never followed), the hidden
/// partial and temporary files of transfers (`.NAME.manyfold-partial-TAG`,
/// `.NAME.manyfold-part-HEX`) not written for `max_age` and not locked by
/// a transfer: what a killed receiver or a sender that never came back
/// left. Returns how many files and bytes went.
pub fn remove_stale_partials(dir: &Path, max_age: std::time::Duration) -> (u64, u64) {
    fn walk(dir: &Path, max_age: std::time::Duration, depth: usize, gone: &mut (u64, u64)) {
        let Ok(list) = fs::read_dir(dir) else { return };
        for entry in list.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if meta.is_dir() && depth < 64 {
                walk(&entry.path(), max_age, depth + 1, gone);
                continue;
            }
            let ours = name.starts_with('.')
                && (name.contains(&format!("{PARTIAL_SUFFIX}-")) || name.contains(".manyfold-part-"));
            let old = meta.modified().ok().and_then(|t| t.elapsed().ok()).is_some_and(|age| age > max_age);
            if !(ours && old && meta.is_file()) {
                continue;
            }
            // A transfer that holds it (locked) is still using it.
            let Ok(file) = File::open(entry.path()) else { continue };
            if rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_ok()
                && fs::remove_file(entry.path()).is_ok()
            {
                gone.0 += 1;
                gone.1 += meta.len();
            }
        }
    }
    let mut gone = (0, 0);
    walk(dir, max_age, 0, &mut gone);
    gone
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

    /// Batches of many small buffers (more than one `writev` takes) and
    /// of a few large ones land in order after what the file held at its
    /// position, whatever the writes in flight.
    #[test]
    fn a_chunk_writer_puts_every_buffer_in_order_from_the_files_position() {
        use std::io::{Read, Seek, SeekFrom};
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut file = File::options().read(true).write(true).create_new(true).open(dir.path().join("f")).unwrap();
        file.write_all(b"held").unwrap();
        let mut expect = b"held".to_vec();
        let batches: Vec<Vec<bytes::Bytes>> = vec![
            (0..3000u32).map(|i| bytes::Bytes::from(vec![(i % 251) as u8; 1 + (i % 7) as usize])).collect(),
            (0..3u8).map(|i| bytes::Bytes::from(vec![i; 300_000])).collect(),
            vec![bytes::Bytes::from_static(b"end")],
        ];
        for b in &batches {
            b.iter().for_each(|p| expect.extend_from_slice(p));
        }
        rt.block_on(async {
            let mut w = ChunkWriter::new(&file).unwrap();
            for b in batches {
                let mut parts = b;
                w.write(&mut parts).await.unwrap();
                assert!(parts.is_empty(), "the batch is taken");
            }
            w.flush().await.unwrap();
        });
        let mut got = Vec::new();
        file.seek(SeekFrom::Start(0)).unwrap();
        file.read_to_end(&mut got).unwrap();
        assert_eq!(got.len(), expect.len());
        assert!(got == expect, "the bytes differ");
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
    fn hidden_names_of_long_names_stay_within_name_max_and_distinct() {
        let long = "é".repeat(127); // 254 bytes
        let other = format!("{}x", "é".repeat(126));
        let a = hidden_name(&long, PARTIAL_SUFFIX);
        assert!(a.len() <= 255 && a.starts_with(".é") && a.ends_with(PARTIAL_SUFFIX), "{a}");
        assert_eq!(a, partial_name(&long), "the same name gives the same partial file");
        assert_ne!(a, hidden_name(&other, PARTIAL_SUFFIX));
        assert_eq!(hidden_name("x", PARTIAL_SUFFIX), ".x.manyfold-partial");
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
    fn stale_partial_files_go_and_fresh_or_locked_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("sub")).unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        for name in
            [".a.manyfold-partial-0011", "sub/.b.manyfold-part-22", "c.manyfold-partial-1", ".held.manyfold-partial-3"]
        {
            let f = File::create(dir.path().join(name)).unwrap();
            f.set_modified(old).unwrap();
        }
        File::create(dir.path().join(".fresh.manyfold-partial-44")).unwrap();
        let held = File::open(dir.path().join(".held.manyfold-partial-3")).unwrap();
        rustix::fs::flock(&held, rustix::fs::FlockOperation::NonBlockingLockExclusive).unwrap();
        let (count, _) = remove_stale_partials(dir.path(), std::time::Duration::from_secs(60));
        assert_eq!(count, 2);
        assert_eq!(
            entries(dir.path()),
            [".fresh.manyfold-partial-44", ".held.manyfold-partial-3", "c.manyfold-partial-1", "sub"]
        );
        assert!(entries(&dir.path().join("sub")).is_empty());
    }

    #[test]
    fn a_file_hashed_on_two_threads_has_blake3s_hash_at_every_cut_of_the_tree() {
        // Pseudo-random bytes (xorshift), written once; prefixes of it are
        // hashed with the split threshold at 4 chunks, so that every length
        // takes the two-thread path: lengths at and around powers of two
        // of the 1 KiB chunk (where the root's left subtree changes), odd
        // ones, and the whole file.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let data: Vec<u8> = (0..300_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        fs::write(&path, &data).unwrap();
        let file = File::open(&path).unwrap();
        let chunk = blake3::CHUNK_LEN as u64;
        let mut lengths = vec![4 * chunk, 4 * chunk + 1, 5 * chunk - 1, 6 * chunk + 7, 131_071, 299_999, 300_000];
        for p in 3..8 {
            lengths.extend([(chunk << p) - 1, chunk << p, (chunk << p) + 1, (chunk << p) + (chunk << (p - 1))]);
        }
        for len in lengths {
            let want = blake3::hash(&data[..len as usize]);
            assert_eq!(hash_file_split(&file, len, 4 * chunk).unwrap(), Some(want), "length {len}");
        }
        // Below the threshold: one thread, the same hash.
        assert_eq!(hash_file_split(&file, 1000, 4 * chunk).unwrap(), Some(blake3::hash(&data[..1000])));
        assert_eq!(hash_file(&file, 300_000).unwrap(), Some(blake3::hash(&data)));
        // A file shorter than the length asked for (it shrank): no hash,
        // whichever part of the tree runs out.
        for len in [300_001, 400_000, 600_000] {
            assert_eq!(hash_file_split(&file, len, 4 * chunk).unwrap(), None, "length {len}");
        }
    }

    #[test]
    fn a_writeback_starts_its_thread_only_once_a_sync_is_due() {
        let dir = tempfile::tempdir().unwrap();
        let file = File::create(dir.path().join("f")).unwrap();
        let mut w = Writeback::new(&file).unwrap();
        w.wrote(Writeback::EVERY - 1);
        assert!(matches!(w.state, Syncer::Idle(_)), "a smaller file costs no thread: {:?}", w.state);
        w.wrote(1);
        assert!(matches!(w.state, Syncer::Running(_)), "the first sync starts it: {:?}", w.state);
        w.wrote(Writeback::EVERY);
        assert!(matches!(w.state, Syncer::Running(_)));
    }

    #[test]
    fn free_space_is_known_on_unix() {
        if cfg!(unix) {
            assert!(available_space(Path::new(".")).is_some());
        }
    }
}

/// Writes a file's data to disk in the background while it is still being
/// written, so that the `sync_all` before it is installed ([`install_at`])
/// finds little left to write: after every [`Writeback::EVERY`] bytes
/// written, a thread of its own calls `sync_data` (one at a time; a
/// request while one runs waits for it, further ones are dropped). The
/// thread starts with the first sync, so a file smaller than that costs
/// none. Errors there (and a thread that cannot start) are ignored: the
/// final `sync_all` reports any. Dropping it lets the thread end after the
/// sync it is in. Every receiver of a file uses it (unicast, multicast,
/// ftp): without it the final sync of 625 MB took 0.34 s here, all of it
/// between the last byte and the receiver's answer (RESULTS §42).
#[derive(Debug)]
pub struct Writeback {
    state: Syncer,
    since: u64,
}

/// Where a [`Writeback`]'s syncs go.
#[derive(Debug)]
enum Syncer {
    /// None was due yet: the file, for the thread to come.
    Idle(File),
    /// The syncing thread's requests.
    Running(std::sync::mpsc::SyncSender<()>),
    /// The thread could not start: the final sync does it all.
    Off,
}

impl Writeback {
    /// Bytes written between two background syncs.
    pub const EVERY: u64 = 16 << 20;

    pub fn new(file: &File) -> io::Result<Writeback> {
        Ok(Writeback { state: Syncer::Idle(file.try_clone()?), since: 0 })
    }

    /// `n` more bytes were written.
    pub fn wrote(&mut self, n: u64) {
        self.since += n;
        if self.since < Self::EVERY {
            return;
        }
        self.since = 0;
        self.state = match std::mem::replace(&mut self.state, Syncer::Off) {
            Syncer::Idle(file) => Syncer::start(file),
            other => other,
        };
        if let Syncer::Running(ask) = &self.state {
            // Full: a sync is asked for already, and covers these bytes.
            let _ = ask.try_send(());
        }
    }
}

impl Syncer {
    /// The thread that syncs `file` each time it is asked.
    fn start(file: File) -> Syncer {
        let (ask, asked) = std::sync::mpsc::sync_channel::<()>(1);
        let started = std::thread::Builder::new().name("writeback".into()).spawn(move || {
            while asked.recv().is_ok() {
                let _ = file.sync_data();
            }
        });
        match started {
            Ok(_) => Syncer::Running(ask),
            Err(_) => Syncer::Off,
        }
    }
}

/// Writes a received file's data in order, straight from the buffers it
/// arrived in (most of them slices of their datagrams, `read_chunk`):
/// `writev` on a blocking thread at the file's position, one write in
/// flight while the next data is read, and a [`Writeback`] behind it.
/// A `tokio::fs::File` copied every byte into a buffer of its own first
/// and the reader copied it out of the connection before that: two
/// passes over the data fewer per byte received (RESULTS §44).
#[derive(Debug)]
pub struct ChunkWriter {
    file: std::sync::Arc<File>,
    writeback: Writeback,
    /// The write in flight.
    pending: Option<tokio::task::JoinHandle<io::Result<()>>>,
}

impl ChunkWriter {
    /// A writer at `file`'s current position.
    pub fn new(file: &File) -> io::Result<ChunkWriter> {
        Ok(ChunkWriter {
            file: std::sync::Arc::new(file.try_clone()?),
            writeback: Writeback::new(file)?,
            pending: None,
        })
    }

    /// Queues `parts` (left empty) to be written after everything queued
    /// before; waits for the write before them, whose error it returns.
    pub async fn write(&mut self, parts: &mut Vec<bytes::Bytes>) -> io::Result<()> {
        self.flush().await?;
        let batch = std::mem::take(parts);
        let n: usize = batch.iter().map(|b| b.len()).sum();
        let file = std::sync::Arc::clone(&self.file);
        self.pending = Some(tokio::task::spawn_blocking(move || write_all_vectored(&file, &batch)));
        self.writeback.wrote(n as u64);
        Ok(())
    }

    /// Waits until everything queued is written.
    pub async fn flush(&mut self) -> io::Result<()> {
        match self.pending.take() {
            Some(write) => write.await.map_err(io::Error::other)?,
            None => Ok(()),
        }
    }
}

/// Writes every byte of `parts` at `file`'s position, as few `writev`
/// calls as the kernel allows (at most 1,024 buffers each).
fn write_all_vectored(file: &File, parts: &[bytes::Bytes]) -> io::Result<()> {
    use std::io::{IoSlice, Write};
    const IOV_MAX: usize = 1024;
    for group in parts.chunks(IOV_MAX) {
        let mut slices: Vec<IoSlice<'_>> = group.iter().map(|b| IoSlice::new(b)).collect();
        let mut slices = &mut slices[..];
        while !slices.is_empty() {
            match (&mut &*file).write_vectored(slices) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "the file took no more bytes")),
                Ok(n) => IoSlice::advance_slices(&mut slices, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}
