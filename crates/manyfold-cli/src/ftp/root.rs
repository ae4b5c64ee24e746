//! The served directory tree (spec §17.6). Every path a client names is
//! resolved by the kernel beneath the root's directory descriptor
//! (openat2 with RESOLVE_BENEATH): `..`, absolute paths and symbolic links
//! that lead outside fail there, with no window between a check and the
//! use. Operations that change a name work on the parent's descriptor and a
//! single final component, and recursive walks never follow links.

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{
    fstat, fstatvfs, mkdirat, openat, openat2, readlinkat, renameat, renameat_with, statat, symlinkat, unlinkat,
    AtFlags, FileType, Mode, OFlags, RenameFlags, ResolveFlags, Stat,
};
use rustix::io::Errno;

use super::wire::{shown, Code, Entry, Failure, Kind, LIST_PART};
use crate::fsutil::{install_at, partial_name, InstallError, PARTIAL_SUFFIX};

pub type FsResult<T> = Result<T, Failure>;

/// Deepest directory nesting a recursive copy or removal walks.
const MAX_DEPTH: usize = 256;

/// Splits a client's path into its components. Paths are relative to the
/// root, `/`-separated, without `..`; `.` and empty components are
/// skipped. The empty path is the root itself.
pub fn components(path: &str) -> FsResult<Vec<&str>> {
    if path.starts_with('/') {
        return Err(Failure::new(Code::OutsideRoot, format!("{path} (absolute paths are refused)")));
    }
    if path.contains('\0') {
        return Err(Failure::new(Code::BadRequest, "a path contains a NUL byte"));
    }
    // Newlines and terminal escapes in names would be written raw onto
    // other users' terminals by listings: refused in every path.
    if path.chars().any(char::is_control) {
        return Err(Failure::new(Code::BadRequest, format!("{} contains a control character", shown(path))));
    }
    let mut out = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => return Err(Failure::new(Code::OutsideRoot, format!("{path} (`..` is refused)"))),
            c => out.push(c),
        }
    }
    Ok(out)
}

/// An errno as the failure the client sees, naming `path`.
fn fail(e: Errno, path: &str) -> Failure {
    let code = match e {
        Errno::NOENT => Code::NotFound,
        Errno::EXIST => Code::AlreadyExists,
        Errno::NOTEMPTY => Code::NotEmpty,
        Errno::ACCESS | Errno::PERM => Code::PermissionDenied,
        // openat2 with RESOLVE_BENEATH: the path (a link in it) leads out.
        Errno::XDEV => Code::OutsideRoot,
        Errno::NOTDIR => Code::NotADirectory,
        Errno::ISDIR => Code::IsADirectory,
        Errno::NOSPC | Errno::DQUOT => Code::NoSpace,
        Errno::FBIG => Code::TooLarge,
        Errno::ROFS => Code::ReadOnly,
        _ => return Failure::new(Code::Io, format!("{}: {e}", shown(path))),
    };
    Failure::new(code, shown(path))
}

fn io_fail(e: &io::Error, path: &str) -> Failure {
    match Errno::from_io_error(e) {
        Some(errno) => fail(errno, path),
        None => Failure::new(Code::Io, format!("{}: {e}", shown(path))),
    }
}

fn kind_of(st: &Stat) -> Kind {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => Kind::File,
        FileType::Directory => Kind::Dir,
        FileType::Symlink => Kind::Symlink,
        _ => Kind::Other,
    }
}

fn entry_of(name: String, st: &Stat) -> Entry {
    Entry {
        name,
        kind: kind_of(st),
        size: u64::try_from(st.st_size).unwrap_or(0),
        mtime: mtime_of(st),
        mode: st.st_mode & 0o7777,
    }
}

/// The modification time in seconds (`st_mtime` is i64 or c_long by target).
#[allow(clippy::useless_conversion)]
fn mtime_of(st: &Stat) -> i64 {
    i64::from(st.st_mtime)
}

fn is_partial(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(PARTIAL_SUFFIX)
}

/// The names in a directory, `.` and `..` left out.
fn names(dir: &OwnedFd) -> Result<Vec<std::ffi::CString>, Errno> {
    let mut d = rustix::fs::Dir::read_from(dir)?;
    let mut out = Vec::new();
    while let Some(e) = d.read() {
        let e = e?;
        let n = e.file_name();
        if n != c"." && n != c".." {
            out.push(n.to_owned());
        }
    }
    Ok(out)
}

fn lossy(n: &CStr) -> String {
    n.to_string_lossy().into_owned()
}

/// A regular file opened for reading, with what a `stat` says of it.
pub struct Source {
    pub file: File,
    pub size: u64,
    pub mtime: i64,
}

/// An upload's partial file inside the root (spec §17.5).
pub struct Upload {
    pub file: File,
    /// Bytes an earlier attempt left.
    pub have: u64,
    dir: File,
    part: String,
    name: String,
    path: String,
}

impl Upload {
    /// Moves the verified file into place.
    pub fn commit(self, force: bool, mtime: i64) -> FsResult<()> {
        if let Some(t) = std::time::UNIX_EPOCH.checked_add(std::time::Duration::from_secs(mtime.max(0) as u64)) {
            let _ = self.file.set_modified(t);
        }
        install_at(&self.dir, &self.file, &self.part, &self.name, force).map_err(|e| match e {
            InstallError::Exists => Failure::new(Code::AlreadyExists, shown(&self.path)),
            InstallError::Io(e) => io_fail(&e, &self.path),
        })
    }

    pub fn discard(self) {
        let _ = unlinkat(&self.dir, self.part.as_str(), AtFlags::empty());
    }
}

pub struct Root {
    dir: OwnedFd,
    pub read_only: bool,
    pub max_file: u64,
}

impl Root {
    pub fn open(dir: &Path, read_only: bool, max_file: u64) -> io::Result<Root> {
        let dir = openat(rustix::fs::CWD, dir, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
        // The kernel must resolve beneath a descriptor (Linux 5.6 and later).
        openat2(&dir, ".", OFlags::PATH | OFlags::CLOEXEC, Mode::empty(), ResolveFlags::BENEATH)
            .map_err(|e| io::Error::other(format!("the kernel cannot confine paths to the root (openat2: {e})")))?;
        Ok(Root { dir, read_only, max_file })
    }

    /// Opens `path` beneath the root, following links that stay inside.
    fn beneath(&self, path: &str, flags: OFlags) -> FsResult<OwnedFd> {
        let rel = components(path)?.join("/");
        let rel = if rel.is_empty() { ".".to_string() } else { rel };
        let how = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
        loop {
            match openat2(&self.dir, rel.as_str(), flags | OFlags::CLOEXEC, Mode::empty(), how) {
                Err(Errno::AGAIN) | Err(Errno::INTR) => continue,
                r => return r.map_err(|e| fail(e, path)),
            }
        }
    }

    /// The parent directory of `path` (opened) and its last component.
    /// The root itself has no parent: naming it is refused.
    fn parent<'p>(&self, path: &'p str) -> FsResult<(OwnedFd, &'p str)> {
        let mut c = components(path)?;
        let Some(name) = c.pop() else {
            return Err(Failure::new(Code::BadRequest, "the root itself cannot be changed"));
        };
        let dir = self.beneath(&c.join("/"), OFlags::RDONLY | OFlags::DIRECTORY)?;
        Ok((dir, name))
    }

    fn writable(&self, path: &str) -> FsResult<()> {
        if self.read_only {
            return Err(Failure::new(Code::ReadOnly, shown(path)));
        }
        Ok(())
    }

    /// What `path` is, a symbolic link followed (inside the root only).
    pub fn stat(&self, path: &str) -> FsResult<Entry> {
        let fd = self.beneath(path, OFlags::PATH)?;
        let st = fstat(&fd).map_err(|e| fail(e, path))?;
        let name = components(path)?.last().map_or("/", |n| n).to_string();
        Ok(entry_of(name, &st))
    }

    /// Whether `path` is a directory, following links inside the root.
    fn is_dir(&self, path: &str) -> bool {
        self.beneath(path, OFlags::PATH | OFlags::DIRECTORY).is_ok()
    }

    /// Lists `path` (a directory's entries, or a file itself) in parts of
    /// at most [`LIST_PART`] encoded bytes; `part` returns false to stop.
    /// Partial files of uploads are left out.
    pub fn list(&self, path: &str, part: &mut dyn FnMut(Vec<Entry>) -> bool) -> FsResult<()> {
        let dir = match self.beneath(path, OFlags::RDONLY | OFlags::DIRECTORY) {
            Ok(d) => d,
            Err(f) if f.code == Code::NotADirectory => {
                part(vec![self.stat(path)?]);
                return Ok(());
            }
            Err(f) => return Err(f),
        };
        let mut d = rustix::fs::Dir::read_from(&dir).map_err(|e| fail(e, path))?;
        let (mut batch, mut bytes) = (Vec::new(), 0);
        while let Some(e) = d.read() {
            let e = e.map_err(|e| fail(e, path))?;
            let n = e.file_name();
            if n == c"." || n == c".." {
                continue;
            }
            let name = lossy(n);
            if is_partial(&name) {
                continue;
            }
            // Gone since the read: skip it.
            let Ok(st) = statat(&dir, n, AtFlags::SYMLINK_NOFOLLOW) else { continue };
            let entry = entry_of(name, &st);
            bytes += super::wire::entry_len(&entry);
            batch.push(entry);
            if bytes >= LIST_PART - 4096 && !part(std::mem::take(&mut batch)) {
                return Ok(());
            }
            if batch.is_empty() {
                bytes = 0;
            }
        }
        part(batch);
        Ok(())
    }

    pub fn mkdir(&self, path: &str, parents: bool) -> FsResult<()> {
        self.writable(path)?;
        if !parents {
            let (dir, name) = self.parent(path)?;
            return mkdirat(&dir, name, Mode::from_raw_mode(0o755)).map_err(|e| fail(e, path));
        }
        let c = components(path)?;
        for i in 1..=c.len() {
            let sub = c[..i].join("/");
            let (dir, name) = self.parent(&sub)?;
            match mkdirat(&dir, name, Mode::from_raw_mode(0o755)) {
                Ok(()) => {}
                Err(Errno::EXIST) if self.is_dir(&sub) => {}
                Err(e) => return Err(fail(e, &sub)),
            }
        }
        Ok(())
    }

    pub fn rmdir(&self, path: &str) -> FsResult<()> {
        self.writable(path)?;
        let (dir, name) = self.parent(path)?;
        match unlinkat(&dir, name, AtFlags::REMOVEDIR) {
            // Listings hide partial uploads: say why an "empty" directory is not.
            Err(Errno::NOTEMPTY) if self.holds_only_partials(path) => Err(Failure::new(
                Code::NotEmpty,
                format!(
                    "{}: directory not empty (it holds only partial uploads, which ls hides; rm -r removes them)",
                    shown(path)
                ),
            )),
            r => r.map_err(|e| fail(e, path)),
        }
    }

    fn holds_only_partials(&self, path: &str) -> bool {
        let Ok(fd) = self.beneath(path, OFlags::RDONLY | OFlags::DIRECTORY) else { return false };
        names(&fd).is_ok_and(|n| !n.is_empty() && n.iter().all(|c| is_partial(&lossy(c))))
    }

    /// Removes a file or link; with `recursive`, a directory and all in it.
    pub fn remove(&self, path: &str, recursive: bool) -> FsResult<()> {
        self.writable(path)?;
        let (dir, name) = self.parent(path)?;
        let st = statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(|e| fail(e, path))?;
        if kind_of(&st) == Kind::Dir {
            if !recursive {
                return Err(Failure::new(
                    Code::IsADirectory,
                    format!("{} is a directory (use rm -r or rmdir)", shown(path)),
                ));
            }
            return remove_tree(&dir, name, 0).map_err(|e| fail(e, path));
        }
        unlinkat(&dir, name, AtFlags::empty()).map_err(|e| fail(e, path))
    }

    /// Where `from` goes when told to go to `to`: into `to` if that is an
    /// existing directory, as `mv` and `cp` do.
    fn target(&self, from: &str, to: &str) -> FsResult<String> {
        let src = components(from)?;
        let Some(&base) = src.last() else {
            return Err(Failure::new(Code::BadRequest, "the root itself cannot be moved or copied"));
        };
        let dst = components(to)?;
        let into = if self.is_dir(to) { [dst.as_slice(), &[base]].concat() } else { dst };
        // A directory into itself: its copy would never end.
        if into.len() > src.len() && into[..src.len()] == src[..] {
            return Err(Failure::new(Code::BadRequest, format!("cannot put {} inside itself", shown(from))));
        }
        Ok(into.join("/"))
    }

    pub fn rename(&self, from: &str, to: &str, force: bool) -> FsResult<()> {
        self.writable(from)?;
        let to = self.target(from, to)?;
        let (sdir, sname) = self.parent(from)?;
        let (ddir, dname) = self.parent(&to)?;
        let r = if force {
            renameat(&sdir, sname, &ddir, dname)
        } else {
            renameat_with(&sdir, sname, &ddir, dname, RenameFlags::NOREPLACE)
        };
        r.map_err(|e| match e {
            Errno::XDEV => {
                Failure::new(Code::Unsupported, format!("{} to {}: across file systems", shown(from), shown(&to)))
            }
            Errno::INVAL => Failure::new(Code::BadRequest, format!("cannot put {} inside itself", shown(from))),
            Errno::EXIST | Errno::NOTEMPTY => fail(e, &to),
            e => fail(e, from),
        })
    }

    /// Copies a file (or with `recursive` a directory tree) inside the
    /// root. The copy is made under a temporary name and appears whole.
    pub fn copy(&self, from: &str, to: &str, recursive: bool, force: bool) -> FsResult<()> {
        self.writable(to)?;
        let to = self.target(from, to)?;
        let (sdir, sname) = self.parent(from)?;
        let st = statat(&sdir, sname, AtFlags::SYMLINK_NOFOLLOW).map_err(|e| fail(e, from))?;
        let (ddir, dname) = self.parent(&to)?;
        match statat(&ddir, dname, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(_) if !force => return Err(Failure::new(Code::AlreadyExists, shown(&to))),
            Ok(dst) if kind_of(&dst) == Kind::Dir => return Err(Failure::new(Code::IsADirectory, shown(&to))),
            _ => {}
        }
        let tmp = crate::fsutil::hidden_name(dname, &format!(".{:016x}{PARTIAL_SUFFIX}", crate::net::random_u64()));
        match kind_of(&st) {
            Kind::Dir if !recursive => {
                Err(Failure::new(Code::IsADirectory, format!("{} is a directory (use cp -r)", shown(from))))
            }
            Kind::Dir => {
                mkdirat(&ddir, tmp.as_str(), Mode::from_raw_mode(st.st_mode & 0o7777)).map_err(|e| fail(e, &to))?;
                let copied = (|| {
                    let top = openat(
                        &ddir,
                        tmp.as_str(),
                        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW,
                        Mode::empty(),
                    )?;
                    let me = fstat(&top)?;
                    let src =
                        openat(&sdir, sname, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW, Mode::empty())?;
                    copy_tree(&src, &top, (me.st_dev, me.st_ino), 0)
                })();
                let placed =
                    copied.and_then(|()| renameat_with(&ddir, tmp.as_str(), &ddir, dname, RenameFlags::NOREPLACE));
                if let Err(e) = placed {
                    let _ = remove_tree(&ddir, &tmp, 0);
                    return Err(if e == Errno::EXIST { fail(e, &to) } else { fail(e, from) });
                }
                Ok(())
            }
            Kind::File => {
                let src = self.beneath(from, OFlags::RDONLY | OFlags::NOFOLLOW)?;
                let out = copy_file(&src, &ddir, &tmp, st.st_mode & 0o7777).map_err(|e| fail(e, &to))?;
                let ddir = File::from(ddir);
                install_at(&ddir, &out, &tmp, dname, force).map_err(|e| {
                    let _ = unlinkat(&ddir, tmp.as_str(), AtFlags::empty());
                    match e {
                        InstallError::Exists => Failure::new(Code::AlreadyExists, shown(&to)),
                        InstallError::Io(e) => io_fail(&e, &to),
                    }
                })
            }
            Kind::Symlink => {
                let target = readlinkat(&sdir, sname, Vec::new()).map_err(|e| fail(e, from))?;
                symlinkat(target.as_c_str(), &ddir, dname).map_err(|e| fail(e, &to))
            }
            Kind::Other => Err(Failure::new(Code::Unsupported, format!("{} is not a file or directory", shown(from)))),
        }
    }

    /// Opens a regular file for a download.
    pub fn open_read(&self, path: &str) -> FsResult<Source> {
        let fd = self.beneath(path, OFlags::RDONLY)?;
        let st = fstat(&fd).map_err(|e| fail(e, path))?;
        match kind_of(&st) {
            Kind::File => {}
            Kind::Dir => return Err(Failure::new(Code::IsADirectory, shown(path))),
            _ => return Err(Failure::new(Code::Unsupported, format!("{} is not a regular file", shown(path)))),
        }
        Ok(Source { file: File::from(fd), size: u64::try_from(st.st_size).unwrap_or(0), mtime: mtime_of(&st) })
    }

    /// Prepares an upload of `size` bytes to `path`: checks it may be
    /// written, opens and locks its partial file (an earlier attempt's, to
    /// resume, or a new one) and checks the space it still needs.
    pub fn begin_upload(&self, path: &str, size: u64, force: bool) -> FsResult<Upload> {
        self.writable(path)?;
        if size > self.max_file {
            return Err(Failure::new(
                Code::TooLarge,
                format!("{} is too large ({size} bytes; this server takes at most {})", shown(path), self.max_file),
            ));
        }
        let (dir, name) = self.parent(path)?;
        match statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if kind_of(&st) == Kind::Dir => return Err(Failure::new(Code::IsADirectory, shown(path))),
            Ok(_) if !force => {
                return Err(Failure::new(
                    Code::AlreadyExists,
                    format!("{} already exists (use -f to replace it)", shown(path)),
                ))
            }
            Ok(_) | Err(Errno::NOENT) => {}
            Err(e) => return Err(fail(e, path)),
        }
        let part = partial_name(name);
        let busy = || Failure::new(Code::Busy, format!("{} is busy (another upload of it is running)", shown(path)));
        let mut tries = 0;
        let fd = loop {
            let fd = openat(
                &dir,
                part.as_str(),
                OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o644),
            )
            .map_err(|e| fail(e, path))?;
            if rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
                return Err(busy());
            }
            // The upload that held the lock may have removed the file
            // (verified and moved into place, discarded) between our open
            // and our lock: a lock on a file no longer named is no lock.
            let ours = fstat(&fd).map_err(|e| fail(e, path))?;
            match statat(&dir, part.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) if (st.st_dev, st.st_ino) == (ours.st_dev, ours.st_ino) => break fd,
                _ if tries < 8 => tries += 1,
                _ => return Err(busy()),
            }
        };
        let file = File::from(fd);
        let mut have = file.metadata().map_err(|e| io_fail(&e, path))?.len();
        if have > size {
            file.set_len(0).map_err(|e| io_fail(&e, path))?;
            have = 0;
        }
        if let Ok(vfs) = fstatvfs(&dir) {
            let free = vfs.f_bavail.saturating_mul(vfs.f_frsize);
            if free < size - have {
                // A partial file made for this refusal goes with it; one an
                // earlier attempt filled stays for a resume.
                if have == 0 {
                    let _ = unlinkat(&dir, part.as_str(), AtFlags::empty());
                }
                return Err(Failure::new(
                    Code::NoSpace,
                    format!("{} needs {} more bytes, {free} are free", shown(path), size - have),
                ));
            }
        }
        Ok(Upload { file, have, dir: File::from(dir), part, name: name.to_string(), path: path.to_string() })
    }
}

/// Removes `name` in `dir`, a directory with everything in it; links are
/// removed, never followed.
fn remove_tree(dir: &impl AsFd, name: &str, depth: usize) -> Result<(), Errno> {
    let st = statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
    if kind_of(&st) != Kind::Dir {
        return unlinkat(dir, name, AtFlags::empty());
    }
    if depth >= MAX_DEPTH {
        return Err(Errno::LOOP);
    }
    let sub =
        openat(dir, name, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
    for n in names(&sub)? {
        remove_tree(&sub, &lossy_exact(&n)?, depth + 1)?;
    }
    unlinkat(dir, name, AtFlags::REMOVEDIR)
}

/// A name read from a directory, as the `&str` the *at calls take here.
/// Names that are not UTF-8 cannot be named by clients; walks refuse them.
fn lossy_exact(n: &CStr) -> Result<String, Errno> {
    n.to_str().map(str::to_owned).map_err(|_| Errno::ILSEQ)
}

/// Copies the contents of directory `src` into directory `dst`, links as
/// links; `skip` is the copy's own top directory (a copy inside its source).
fn copy_tree(src: &OwnedFd, dst: &OwnedFd, skip: (u64, u64), depth: usize) -> Result<(), Errno> {
    if depth >= MAX_DEPTH {
        return Err(Errno::LOOP);
    }
    for n in names(src)? {
        let name = lossy_exact(&n)?;
        let st = statat(src, name.as_str(), AtFlags::SYMLINK_NOFOLLOW)?;
        if (st.st_dev, st.st_ino) == skip {
            continue;
        }
        let mode = Mode::from_raw_mode(st.st_mode & 0o7777);
        match kind_of(&st) {
            Kind::Dir => {
                mkdirat(dst, name.as_str(), mode)?;
                let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                let s = openat(src, name.as_str(), flags, Mode::empty())?;
                let d = openat(dst, name.as_str(), flags, Mode::empty())?;
                copy_tree(&s, &d, skip, depth + 1)?;
            }
            Kind::File => {
                let s = openat(src, name.as_str(), OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
                copy_file(&s, dst, &name, st.st_mode & 0o7777)?;
            }
            Kind::Symlink => {
                let target = readlinkat(src, name.as_str(), Vec::new())?;
                symlinkat(target.as_c_str(), dst, name.as_str())?;
            }
            Kind::Other => {}
        }
    }
    Ok(())
}

/// Copies the open file `src` to a new file `name` in `dir`.
fn copy_file(src: &OwnedFd, dir: &impl AsFd, name: &str, mode: u32) -> Result<File, Errno> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let out = File::from(openat(dir, name, flags, Mode::from_raw_mode(mode))?);
    let mut input = File::from(src.try_clone().map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))?);
    let mut w = &out;
    io::copy(&mut input, &mut w).map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))?;
    Ok(out)
}

pub use crate::fsutil::hash_prefix;

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::io::Write;
    use std::os::unix::fs::FileExt;

    fn root(read_only: bool) -> (tempfile::TempDir, Root) {
        let t = tempfile::tempdir().unwrap();
        let r = Root::open(t.path(), read_only, u64::MAX).unwrap();
        (t, r)
    }

    fn code<T>(r: FsResult<T>) -> Code {
        match r {
            Ok(_) => panic!("expected a refusal"),
            Err(f) => f.code,
        }
    }

    #[test]
    fn dot_dot_and_absolute_paths_are_refused_before_any_lookup() {
        assert_eq!(components("a/./b//c").unwrap(), ["a", "b", "c"]);
        assert!(components("").unwrap().is_empty());
        assert_eq!(code(components("/etc/passwd")), Code::OutsideRoot);
        assert_eq!(code(components("a/../../x")), Code::OutsideRoot);
        assert_eq!(code(components("a/..")), Code::OutsideRoot);
        assert_eq!(code(components("a\0b")), Code::BadRequest);
    }

    #[test]
    fn symlinks_that_leave_the_root_are_refused_and_those_inside_followed() {
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret"), b"x").unwrap();
        let (t, r) = root(false);
        fs::create_dir(t.path().join("d")).unwrap();
        fs::write(t.path().join("d/f"), b"inside").unwrap();
        std::os::unix::fs::symlink(outside.path(), t.path().join("out")).unwrap();
        std::os::unix::fs::symlink("../../", t.path().join("d/up")).unwrap();
        std::os::unix::fs::symlink("d", t.path().join("in")).unwrap();
        assert_eq!(code(r.open_read("out/secret")), Code::OutsideRoot);
        assert_eq!(code(r.open_read("d/up/etc/passwd")), Code::OutsideRoot);
        assert_eq!(code(r.list("out", &mut |_| true)), Code::OutsideRoot);
        assert_eq!(code(r.begin_upload("out/new", 1, false)), Code::OutsideRoot);
        assert_eq!(code(r.mkdir("out/x", false)), Code::OutsideRoot);
        assert!(!outside.path().join("x").exists() && !outside.path().join("new").exists());
        assert_eq!(r.open_read("in/f").unwrap().size, 6);
        // Removing the link removes the link, not what it points to.
        r.remove("out", false).unwrap();
        assert!(outside.path().join("secret").exists());
    }

    #[test]
    fn a_read_only_root_refuses_every_change() {
        let (t, r) = root(true);
        fs::write(t.path().join("f"), b"x").unwrap();
        assert_eq!(code(r.mkdir("d", false)), Code::ReadOnly);
        assert_eq!(code(r.remove("f", false)), Code::ReadOnly);
        assert_eq!(code(r.rename("f", "g", false)), Code::ReadOnly);
        assert_eq!(code(r.copy("f", "g", false, false)), Code::ReadOnly);
        assert_eq!(code(r.begin_upload("g", 1, false)), Code::ReadOnly);
        assert_eq!(code(r.rmdir("f")), Code::ReadOnly);
        assert!(r.open_read("f").is_ok());
    }

    #[test]
    fn directory_operations_report_what_went_wrong() {
        let (t, r) = root(false);
        r.mkdir("a/b/c", true).unwrap();
        r.mkdir("a/b/c", true).unwrap();
        assert_eq!(code(r.mkdir("a", false)), Code::AlreadyExists);
        assert_eq!(code(r.mkdir("x/y", false)), Code::NotFound);
        fs::write(t.path().join("a/b/c/f"), b"data").unwrap();
        assert_eq!(code(r.rmdir("a")), Code::NotEmpty);
        assert_eq!(code(r.remove("a", false)), Code::IsADirectory);
        assert_eq!(code(r.rmdir("a/b/c/f")), Code::NotADirectory);
        fs::create_dir(t.path().join("up")).unwrap();
        fs::write(t.path().join("up/.big.iso.manyfold-partial"), b"part").unwrap();
        let f = r.rmdir("up").unwrap_err();
        assert!(f.code == Code::NotEmpty && f.text.contains("only partial uploads"), "{f}");
        r.remove("up", true).unwrap();
        assert_eq!(code(r.remove("", true)), Code::BadRequest);
        r.copy("a", "copy", true, false).unwrap();
        assert_eq!(fs::read(t.path().join("copy/b/c/f")).unwrap(), b"data");
        assert_eq!(code(r.copy("a", "a/b", true, false)), Code::BadRequest);
        assert_eq!(code(r.copy("copy/b/c/f", "a/b/c/f", false, false)), Code::AlreadyExists);
        r.rename("copy", "moved", false).unwrap();
        // Into an existing directory, as mv does.
        r.rename("moved", "a", false).unwrap();
        assert!(t.path().join("a/moved/b/c/f").exists());
        r.remove("a", true).unwrap();
        assert_eq!(code(r.stat("a")), Code::NotFound);
        assert!(fs::read_dir(t.path()).unwrap().next().is_none(), "no temporary left");
    }

    #[test]
    fn listings_come_in_bounded_parts_and_hide_partial_uploads() {
        let (t, r) = root(false);
        for i in 0..3000 {
            fs::write(t.path().join(format!("file-with-a-longish-name-{i:05}")), b"").unwrap();
        }
        fs::write(t.path().join(".x.manyfold-partial"), b"").unwrap();
        let mut parts = Vec::new();
        r.list("", &mut |p| {
            parts.push(p);
            true
        })
        .unwrap();
        assert!(parts.len() > 1);
        for p in &parts {
            assert!(p.iter().map(super::super::wire::entry_len).sum::<usize>() < LIST_PART);
        }
        assert_eq!(parts.iter().map(Vec::len).sum::<usize>(), 3000);
    }

    #[test]
    fn an_upload_keeps_its_partial_file_for_the_next_attempt_and_locks_it() {
        let (t, r) = root(false);
        let u = r.begin_upload("f", 10, false).unwrap();
        assert_eq!(u.have, 0);
        (&u.file).write_all(b"hello").unwrap();
        assert_eq!(code(r.begin_upload("f", 10, false)), Code::Busy);
        drop(u);
        let u = r.begin_upload("f", 10, false).unwrap();
        assert_eq!(u.have, 5);
        u.file.write_all_at(b"world", 5).unwrap();
        u.commit(false, 1_000_000).unwrap();
        assert_eq!(fs::read(t.path().join("f")).unwrap(), b"helloworld");
        assert_eq!(code(r.begin_upload("f", 10, false)), Code::AlreadyExists);
        assert_eq!(code(r.begin_upload("g", u64::MAX, false)), Code::NoSpace);
        assert!(!t.path().join(".g.manyfold-partial").exists(), "a refused upload left an empty partial file");
        let small = Root::open(t.path(), false, 4).unwrap();
        assert_eq!(code(small.begin_upload("h", 5, false)), Code::TooLarge);
    }
}
