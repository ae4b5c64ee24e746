//! Directory bundles (spec §16.10): several files, directories and
//! symbolic links in one multicast session. The session's object is the
//! bundle's header (magic, manifest length, manifest) followed by the
//! files' bytes in manifest order; ANNOUNCE's hash is the header's
//! BLAKE3, and the manifest names each file's size and BLAKE3.
//!
//! The sender builds the header from its arguments ([`Bundle::build`])
//! and reads the object through [`Bundle`] as an [`McastSource`]; the
//! receiver recognises a bundle by its header ([`Manifest::detect`]),
//! checks every name before writing anything ([`Manifest::check`]), then
//! writes each file under a temporary name and renames it only once its
//! hash matches ([`Manifest::unpack`]).

use std::cell::RefCell;
use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt as _, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use manyfold::mcast::McastSource;
use serde_json::{json, Value};

use crate::fsutil::PartFile;

/// The first bytes of a bundle (PNG-style: a high byte, the name, CR LF,
/// ^Z, LF), 16 bytes.
pub const MAGIC: &[u8; 16] = b"\x89manyfold-dir\r\n\x1a";
/// Bytes of the header before the manifest: magic and a big-endian u32 length.
const PREFIX: usize = MAGIC.len() + 4;
/// Largest manifest a receiver accepts (spec §16.10).
pub const MAX_MANIFEST: usize = 16 << 20;
/// Most entries a receiver accepts.
pub const MAX_ENTRIES: usize = 1_000_000;
/// Longest path in a bundle, bytes (PATH_MAX).
const MAX_PATH: usize = 4096;
/// Longest component of a path (NAME_MAX).
const MAX_NAME: usize = 255;

/// What one manifest entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File { size: u64, blake3: [u8; 32] },
    Symlink { target: String },
}

/// One file, directory or symbolic link of a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Relative, `/`-separated, UTF-8.
    pub path: String,
    pub kind: Kind,
    /// Permission bits (0o777 at most; set-id and sticky bits never travel).
    pub mode: u32,
    /// Modification time, seconds and nanoseconds since the epoch.
    pub mtime: (i64, u32),
}

/// A bundle's table of contents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    pub entries: Vec<Entry>,
}

/// The sender's side: the header and the files to read after it.
pub struct Bundle {
    header: Vec<u8>,
    /// Each file's offset in the object, its length and its path.
    files: Vec<(u64, u64, PathBuf)>,
    /// The file being read (its index): one open at a time, whatever the
    /// bundle's size (a directory may hold more files than a process may
    /// open).
    open: RefCell<Option<(usize, File)>>,
    pub manifest: Manifest,
}

impl Bundle {
    /// Walks `paths` (files, directories, symbolic links, not followed):
    /// each keeps its path relative to its argument's parent, so `photos`
    /// gives `photos/…` and `a/b.txt` gives `b.txt`. Hashes every file.
    pub fn build(paths: &[PathBuf], on_progress: &mut dyn FnMut(u64)) -> Result<Bundle> {
        let mut manifest = Manifest::default();
        let mut sources = Vec::new();
        let mut seen = HashSet::new();
        for p in paths {
            // `.` or `..`: the directory's own name.
            let canonical = if p.file_name().is_none() { std::fs::canonicalize(p).ok() } else { None };
            let name = canonical
                .as_deref()
                .unwrap_or(p)
                .file_name()
                .with_context(|| format!("{} has no file name to keep in the bundle", p.display()))?;
            let name = name.to_str().with_context(|| format!("{}: the name is not UTF-8", p.display()))?.to_string();
            walk(p, name, &mut manifest, &mut sources, &mut seen)?;
        }
        let mut files = Vec::new();
        let mut done = 0u64;
        for (entry, path) in manifest.entries.iter_mut().zip(sources) {
            let Some(path) = path else { continue };
            let file = File::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
            let size = file.metadata()?.len();
            let mut hasher = blake3::Hasher::new();
            let mut buf = vec![0u8; 1 << 20];
            let mut at = 0u64;
            while at < size {
                let n = file.read_at(&mut buf, at).with_context(|| format!("cannot read {}", path.display()))?;
                if n == 0 {
                    bail!("{} ended at {at} bytes, before its size of {size}", path.display());
                }
                hasher.update(&buf[..n]);
                at += n as u64;
                done += n as u64;
                on_progress(done);
            }
            entry.kind = Kind::File { size, blake3: *hasher.finalize().as_bytes() };
            files.push((0, size, path));
        }
        let header = manifest.header();
        let mut offset = header.len() as u64;
        for f in &mut files {
            f.0 = offset;
            offset += f.1;
        }
        Ok(Bundle { header, files, open: RefCell::new(None), manifest })
    }

    /// The object's size: header and files.
    pub fn size(&self) -> u64 {
        self.header.len() as u64 + self.files.iter().map(|f| f.1).sum::<u64>()
    }

    /// What ANNOUNCE carries as the object's hash (spec §16.10).
    pub fn hash(&self) -> [u8; 32] {
        *blake3::hash(&self.header).as_bytes()
    }
}

impl McastSource for Bundle {
    /// Fills `out` across the header and file boundaries (the engine
    /// expects whole blocks); short only at the object's end.
    fn copy_at(&self, offset: u64, out: &mut [u8]) -> io::Result<usize> {
        let mut got = 0;
        while got < out.len() {
            let at = offset + got as u64;
            if at < self.header.len() as u64 {
                let from = &self.header[at as usize..];
                let n = from.len().min(out.len() - got);
                out[got..got + n].copy_from_slice(&from[..n]);
                got += n;
                continue;
            }
            // The file holding `at`: the last starting at or before it.
            let Some(i) = self.files.partition_point(|f| f.0 <= at).checked_sub(1) else { break };
            let (start, len, path) = &self.files[i];
            if at >= start + len {
                // Past the last file: the end of the object.
                break;
            }
            let mut open = self.open.borrow_mut();
            if open.as_ref().is_none_or(|(k, _)| *k != i) {
                let f = File::open(path)
                    .map_err(|e| io::Error::new(e.kind(), format!("cannot open {}: {e}", path.display())))?;
                *open = Some((i, f));
            }
            let file = &open.as_ref().expect("just opened").1;
            let want = ((start + len - at) as usize).min(out.len() - got);
            let n = file.read_at(&mut out[got..got + want], at - start)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("{} shrank while being sent", path.display()),
                ));
            }
            got += n;
        }
        Ok(got)
    }
}

/// Adds `path` (named `rel` in the bundle) and, for a directory, what it
/// holds, sorted by name.
fn walk(
    path: &Path,
    rel: String,
    m: &mut Manifest,
    sources: &mut Vec<Option<PathBuf>>,
    seen: &mut HashSet<String>,
) -> Result<()> {
    let meta = std::fs::symlink_metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    if !seen.insert(rel.clone()) {
        bail!("{} would be {rel:?} in the bundle, a name given twice", path.display());
    }
    if m.entries.len() >= MAX_ENTRIES {
        bail!("more than {MAX_ENTRIES} entries: too many for one bundle");
    }
    check_path(&rel).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mode = meta.mode() & 0o777;
    let mtime = (meta.mtime(), meta.mtime_nsec().clamp(0, 999_999_999) as u32);
    let ft = meta.file_type();
    if ft.is_symlink() {
        let target = std::fs::read_link(path)?;
        let target =
            target.to_str().with_context(|| format!("{}: the link's target is not UTF-8", path.display()))?.to_string();
        m.entries.push(Entry { path: rel, kind: Kind::Symlink { target }, mode, mtime });
        sources.push(None);
    } else if ft.is_dir() {
        m.entries.push(Entry { path: rel.clone(), kind: Kind::Dir, mode, mtime });
        sources.push(None);
        let mut names = Vec::new();
        for e in std::fs::read_dir(path).with_context(|| format!("cannot list {}", path.display()))? {
            let e = e?;
            let name = e.file_name();
            let name =
                name.to_str().with_context(|| format!("{}: the name is not UTF-8", e.path().display()))?.to_string();
            names.push(name);
        }
        names.sort();
        for name in names {
            walk(&path.join(&name), format!("{rel}/{name}"), m, sources, seen)?;
        }
    } else if ft.is_file() {
        m.entries.push(Entry { path: rel, kind: Kind::File { size: 0, blake3: [0; 32] }, mode, mtime });
        sources.push(Some(path.to_path_buf()));
    } else {
        bail!("{} is neither a file, a directory nor a symbolic link; it cannot go in a bundle", path.display());
    }
    Ok(())
}

/// Why a bundle path is refused, or `Ok`: relative, `/`-separated, no
/// empty, `.` or `..` component, no NUL, within PATH_MAX and NAME_MAX.
pub fn check_path(p: &str) -> Result<(), String> {
    if p.is_empty() {
        return Err("an empty path".into());
    }
    if p.starts_with('/') {
        return Err(format!("{p:?} is an absolute path"));
    }
    if p.len() > MAX_PATH || p.contains('\0') {
        return Err(format!("{p:?} is longer than {MAX_PATH} bytes or holds a NUL"));
    }
    for c in p.split('/') {
        match c {
            "" => return Err(format!("{p:?} has an empty component")),
            "." | ".." => return Err(format!("{p:?} has a {c:?} component")),
            c if c.len() > MAX_NAME => return Err(format!("{p:?} has a component longer than {MAX_NAME} bytes")),
            _ => {}
        }
    }
    Ok(())
}

/// Whether a symbolic link at `path` pointing at `target` stays inside
/// the bundle's directory: a relative target whose `..` never climb above
/// it.
fn target_stays_inside(path: &str, target: &str) -> bool {
    if target.is_empty() || target.starts_with('/') || target.contains('\0') {
        return false;
    }
    // Depth of the link's directory below the root.
    let mut depth = path.split('/').count() as i64 - 1;
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            _ => depth += 1,
        }
    }
    true
}

fn hex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

impl Manifest {
    /// The header: magic, manifest length, manifest (JSON).
    pub fn header(&self) -> Vec<u8> {
        let entries: Vec<Value> = self
            .entries
            .iter()
            .map(|e| {
                let mut v = json!({"path": e.path, "mode": e.mode, "mtime": [e.mtime.0, e.mtime.1]});
                match &e.kind {
                    Kind::Dir => v["type"] = json!("dir"),
                    Kind::File { size, blake3 } => {
                        v["type"] = json!("file");
                        v["size"] = json!(size);
                        v["blake3"] = json!(manyfold_proto::secure::hex(blake3));
                    }
                    Kind::Symlink { target } => {
                        v["type"] = json!("symlink");
                        v["target"] = json!(target);
                    }
                }
                v
            })
            .collect();
        let body = serde_json::to_vec(&json!({"version": 1, "entries": entries})).expect("JSON of plain values");
        let mut out = Vec::with_capacity(PREFIX + body.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(&body);
        out
    }

    /// The bundle's manifest and header length if `file` (an object of
    /// `size` bytes whose announced hash is `hash`) starts with a bundle
    /// header whose BLAKE3 is `hash`; `Ok(None)`: a plain file. A header
    /// that matches but does not parse, or whose files do not add up to
    /// `size`, is an error naming the fault.
    pub fn detect(file: &File, size: u64, hash: &[u8; 32]) -> Result<Option<(Manifest, u64)>> {
        let mut prefix = [0u8; PREFIX];
        if size < PREFIX as u64 || file.read_exact_at(&mut prefix, 0).is_err() || &prefix[..MAGIC.len()] != MAGIC {
            return Ok(None);
        }
        let len = u32::from_be_bytes(prefix[MAGIC.len()..].try_into().expect("4 bytes")) as usize;
        if len > MAX_MANIFEST || (PREFIX + len) as u64 > size {
            return Ok(None);
        }
        let mut header = vec![0u8; PREFIX + len];
        file.read_exact_at(&mut header, 0)?;
        if blake3::hash(&header).as_bytes() != hash {
            return Ok(None);
        }
        let m = Manifest::parse(&header[PREFIX..])?;
        let files: u64 = m
            .entries
            .iter()
            .map(|e| if let Kind::File { size, .. } = e.kind { size } else { 0 })
            .try_fold(0u64, |a, b| a.checked_add(b))
            .context("the bundle's file sizes overflow")?;
        if header.len() as u64 + files != size {
            bail!(
                "the bundle's manifest lists {files} bytes of files, but the session holds {} after it",
                size - header.len() as u64
            );
        }
        Ok(Some((m, header.len() as u64)))
    }

    /// Parses a manifest (untrusted: every field checked, nothing panics).
    pub fn parse(body: &[u8]) -> Result<Manifest> {
        let v: Value = serde_json::from_slice(body).context("the bundle's manifest is not JSON")?;
        if v["version"] != json!(1) {
            bail!("the bundle's manifest is of version {}, not 1", v["version"]);
        }
        let list = v["entries"].as_array().context("the bundle's manifest has no entries list")?;
        if list.len() > MAX_ENTRIES {
            bail!("the bundle lists {} entries, more than {MAX_ENTRIES}", list.len());
        }
        let mut entries = Vec::with_capacity(list.len());
        for (i, e) in list.iter().enumerate() {
            let bad = |what: &str| anyhow::anyhow!("the bundle's entry {i} {what}");
            let path = e["path"].as_str().ok_or_else(|| bad("has no path"))?.to_string();
            let mode = e["mode"].as_u64().filter(|m| *m <= 0o7777).ok_or_else(|| bad("has no valid mode"))? as u32;
            let mtime = match e["mtime"].as_array().map(|a| (a.first().and_then(Value::as_i64), a.get(1))) {
                Some((Some(s), Some(ns))) => {
                    (s, ns.as_u64().filter(|n| *n < 1_000_000_000).ok_or_else(|| bad("has a bad mtime"))? as u32)
                }
                _ => return Err(bad("has no mtime")),
            };
            let kind = match e["type"].as_str() {
                Some("dir") => Kind::Dir,
                Some("file") => Kind::File {
                    size: e["size"].as_u64().ok_or_else(|| bad("has no size"))?,
                    blake3: e["blake3"].as_str().and_then(hex32).ok_or_else(|| bad("has no BLAKE3"))?,
                },
                Some("symlink") => {
                    Kind::Symlink { target: e["target"].as_str().ok_or_else(|| bad("has no target"))?.to_string() }
                }
                _ => return Err(bad("has no known type")),
            };
            entries.push(Entry { path, kind, mode: mode & 0o777, mtime });
        }
        Ok(Manifest { entries })
    }

    /// Refuses, before anything is written, a bundle that would write
    /// outside `root`: an absolute path, a `..`, a link whose target
    /// leaves the bundle's directory, an entry under one of the bundle's
    /// links, an existing link or file on the way; and (without
    /// `overwrite`) one that would replace an existing file.
    pub fn check(&self, root: &Path, overwrite: bool) -> Result<()> {
        let mut paths = HashSet::new();
        let links: HashSet<&str> =
            self.entries.iter().filter(|e| matches!(e.kind, Kind::Symlink { .. })).map(|e| e.path.as_str()).collect();
        for e in &self.entries {
            let refuse = |why: String| anyhow::anyhow!("refused the bundle: {why}");
            check_path(&e.path).map_err(refuse)?;
            if !paths.insert(e.path.as_str()) {
                return Err(refuse(format!("{:?} is listed twice", e.path)));
            }
            if let Kind::Symlink { target } = &e.kind {
                if !target_stays_inside(&e.path, target) {
                    return Err(refuse(format!("the link {:?} points outside the bundle, to {target:?}", e.path)));
                }
            }
            // Every directory on the way: not one of the bundle's links,
            // and on disk a real directory (a link there would lead out).
            let parts: Vec<&str> = e.path.split('/').collect();
            let mut at = root.to_path_buf();
            for (k, c) in parts.iter().enumerate() {
                at.push(c);
                let prefix = parts[..=k].join("/");
                let last = k + 1 == parts.len();
                if !last && links.contains(prefix.as_str()) {
                    return Err(refuse(format!("{:?} lies under the bundle's link {prefix:?}", e.path)));
                }
                let Ok(meta) = std::fs::symlink_metadata(&at) else { break };
                if !last && !meta.file_type().is_dir() {
                    let what = if meta.file_type().is_symlink() { "a symbolic link" } else { "not a directory" };
                    return Err(refuse(format!("{} is {what}, on the way to {:?}", at.display(), e.path)));
                }
                if last {
                    let is_dir = meta.file_type().is_dir();
                    match e.kind {
                        Kind::Dir if is_dir => {}
                        Kind::Dir if meta.file_type().is_symlink() => {
                            return Err(refuse(format!(
                                "{} is a symbolic link where the bundle has a directory",
                                at.display()
                            )))
                        }
                        Kind::Dir => return Err(refuse(format!("{} exists and is not a directory", at.display()))),
                        _ if is_dir => return Err(refuse(format!("{} exists as a directory", at.display()))),
                        _ if !overwrite => {
                            return Err(refuse(format!("file exists: {} (use --overwrite)", at.display())))
                        }
                        _ => {}
                    }
                }
            }
        }
        Ok(())
    }

    /// Writes the bundle held in `spool` (its files from `offset` on)
    /// under `root`: directories first, each file under a temporary name
    /// renamed once its BLAKE3 matches, links, then the directories' modes
    /// and times. Returns whether every file matched; one that did not is
    /// not kept.
    pub fn unpack(&self, spool: &File, mut offset: u64, root: &Path, overwrite: bool) -> Result<bool> {
        self.check(root, overwrite)?;
        let mut all = true;
        let mut buf = vec![0u8; 1 << 20];
        for e in &self.entries {
            let path = root.join(&e.path);
            match &e.kind {
                Kind::Dir => {
                    if !path.is_dir() {
                        std::fs::create_dir_all(&path).with_context(|| format!("cannot create {}", path.display()))?;
                    }
                }
                Kind::File { size, blake3 } => {
                    if let Some(parent) = path.parent() {
                        std::fs::create_dir_all(parent)
                            .with_context(|| format!("cannot create {}", parent.display()))?;
                    }
                    let part = PartFile::create(&path)?;
                    let mut hasher = blake3::Hasher::new();
                    let mut at = 0u64;
                    while at < *size {
                        let n = ((*size - at) as usize).min(buf.len());
                        spool.read_exact_at(&mut buf[..n], offset + at).context("cannot read the spool")?;
                        part.file()
                            .write_all_at(&buf[..n], at)
                            .with_context(|| format!("cannot write {}", part.path().display()))?;
                        hasher.update(&buf[..n]);
                        at += n as u64;
                    }
                    offset += size;
                    if hasher.finalize().as_bytes() != blake3 {
                        all = false;
                        continue;
                    }
                    part.file().set_permissions(std::fs::Permissions::from_mode(e.mode))?;
                    part.file().set_modified(time_of(e.mtime))?;
                    part.commit(overwrite)?;
                }
                Kind::Symlink { target } => {
                    if let Some(parent) = path.parent() {
                        std::fs::create_dir_all(parent)
                            .with_context(|| format!("cannot create {}", parent.display()))?;
                    }
                    if overwrite && std::fs::symlink_metadata(&path).is_ok() {
                        std::fs::remove_file(&path).with_context(|| format!("cannot replace {}", path.display()))?;
                    }
                    std::os::unix::fs::symlink(target, &path)
                        .with_context(|| format!("cannot create the link {}", path.display()))?;
                }
            }
        }
        // Last, so that writing their contents does not change them.
        for e in self.entries.iter().rev().filter(|e| e.kind == Kind::Dir) {
            let path = root.join(&e.path);
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(e.mode | 0o700))?;
            File::open(&path)?.set_modified(time_of(e.mtime))?;
        }
        Ok(all)
    }

    /// Files in the bundle and their bytes.
    pub fn totals(&self) -> (usize, u64) {
        self.entries.iter().fold((0, 0), |(n, b), e| match e.kind {
            Kind::File { size, .. } => (n + 1, b + size),
            _ => (n, b),
        })
    }
}

fn time_of((secs, nanos): (i64, u32)) -> SystemTime {
    let d = Duration::new(secs.unsigned_abs(), nanos);
    if secs >= 0 {
        UNIX_EPOCH + d
    } else {
        UNIX_EPOCH.checked_sub(d).unwrap_or(UNIX_EPOCH)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, kind: Kind) -> Entry {
        Entry { path: path.into(), kind, mode: 0o644, mtime: (1_700_000_000, 5) }
    }

    #[test]
    fn bad_paths_are_refused_by_name() {
        for p in ["", "/etc/passwd", "a/../b", "..", "a//b", "./a", "a/.", "a\0b"] {
            assert!(check_path(p).is_err(), "{p:?} accepted");
        }
        for p in ["a", "a/b/c", ".hidden/x", "a..b"] {
            assert!(check_path(p).is_ok(), "{p:?} refused");
        }
    }

    #[test]
    fn link_targets_must_stay_inside_the_bundle() {
        assert!(target_stays_inside("d/l", "x"));
        assert!(target_stays_inside("d/e/l", "../x"));
        assert!(target_stays_inside("d/l", "../x"));
        assert!(!target_stays_inside("l", "../x"));
        assert!(!target_stays_inside("d/l", "../../x"));
        assert!(!target_stays_inside("d/l", "/etc"));
        assert!(!target_stays_inside("d/l", ""));
    }

    #[test]
    fn a_manifest_round_trips_through_its_header() {
        let m = Manifest {
            entries: vec![
                entry("d", Kind::Dir),
                entry("d/f", Kind::File { size: 3, blake3: *blake3::hash(b"abc").as_bytes() }),
                entry("d/l", Kind::Symlink { target: "f".into() }),
            ],
        };
        let h = m.header();
        assert_eq!(&h[..16], MAGIC);
        assert_eq!(Manifest::parse(&h[PREFIX..]).unwrap(), m);
    }

    #[test]
    fn a_malformed_manifest_is_an_error_not_a_panic() {
        for body in [
            &b"{"[..],
            b"[]",
            b"{\"version\":1}",
            b"{\"version\":2,\"entries\":[]}",
            b"{\"version\":1,\"entries\":[{\"path\":\"a\",\"type\":\"file\",\"mode\":420,\"mtime\":[0,0]}]}",
            b"{\"version\":1,\"entries\":[{\"path\":\"a\",\"type\":\"pipe\",\"mode\":420,\"mtime\":[0,0]}]}",
            b"{\"version\":1,\"entries\":[{\"path\":\"a\",\"type\":\"dir\",\"mode\":99999,\"mtime\":[0,0]}]}",
        ] {
            assert!(Manifest::parse(body).is_err(), "{}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn check_refuses_escapes_before_writing_anything() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("esc")).unwrap();
        let cases = [
            vec![entry("../x", Kind::Dir)],
            vec![entry("/abs", Kind::Dir)],
            vec![entry("l", Kind::Symlink { target: "/etc".into() })],
            vec![entry("l", Kind::Symlink { target: "sub".into() }), entry("l/f", Kind::Dir)],
            vec![entry("esc/f", Kind::File { size: 0, blake3: [0; 32] })],
            vec![entry("a", Kind::Dir), entry("a", Kind::Dir)],
        ];
        for entries in cases {
            let m = Manifest { entries: entries.clone() };
            let e = m.check(root.path(), true).expect_err(&format!("{entries:?} accepted"));
            assert!(e.to_string().starts_with("refused the bundle"), "{e}");
        }
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_bundle_of_many_files_reads_back_whole_with_one_file_open_at_a_time() {
        let src = tempfile::tempdir().unwrap();
        let d = src.path().join("many");
        std::fs::create_dir(&d).unwrap();
        // More than the common limit of 1,024 open files: one is open at a time.
        for i in 0..1500u32 {
            std::fs::write(d.join(format!("f{i:04}")), i.to_be_bytes()).unwrap();
        }
        let b = Bundle::build(std::slice::from_ref(&d), &mut |_| {}).unwrap();
        let mut object = vec![0u8; b.size() as usize];
        assert_eq!(b.copy_at(0, &mut object).unwrap(), object.len());
        let files = &object[b.header.len()..];
        assert_eq!(files.len(), 1500 * 4);
        assert_eq!(&files[4 * 1499..], &1499u32.to_be_bytes());
        assert_eq!(b.open.borrow().as_ref().map(|(i, _)| *i), Some(1499));
    }

    #[test]
    fn a_bundle_read_back_is_the_header_then_the_files_and_unpacks_with_modes_and_times() {
        let src = tempfile::tempdir().unwrap();
        let d = src.path().join("top");
        std::fs::create_dir_all(d.join("sub")).unwrap();
        std::fs::write(d.join("a.txt"), b"hello").unwrap();
        std::fs::write(d.join("sub/empty"), b"").unwrap();
        std::fs::write(d.join("sub/b.bin"), vec![7u8; 3000]).unwrap();
        std::fs::set_permissions(d.join("a.txt"), std::fs::Permissions::from_mode(0o640)).unwrap();
        File::options().write(true).open(d.join("a.txt")).unwrap().set_modified(time_of((1_600_000_000, 0))).unwrap();
        std::os::unix::fs::symlink("a.txt", d.join("link")).unwrap();
        let b = Bundle::build(std::slice::from_ref(&d), &mut |_| {}).unwrap();
        assert_eq!(b.manifest.totals(), (3, 3005));
        // Read the object in odd-sized pieces, across every boundary.
        let mut object = Vec::new();
        let mut buf = [0u8; 97];
        loop {
            let n = b.copy_at(object.len() as u64, &mut buf).unwrap();
            object.extend_from_slice(&buf[..n]);
            if n < buf.len() {
                break;
            }
        }
        assert_eq!(object.len() as u64, b.size());
        let spool_dir = tempfile::tempdir().unwrap();
        let spool_path = spool_dir.path().join("spool");
        std::fs::write(&spool_path, &object).unwrap();
        let spool = File::open(&spool_path).unwrap();
        let (m, offset) = Manifest::detect(&spool, b.size(), &b.hash()).unwrap().expect("a bundle");
        assert_eq!(m, b.manifest);
        let out = tempfile::tempdir().unwrap();
        assert!(m.unpack(&spool, offset, out.path(), false).unwrap());
        let got = out.path().join("top");
        assert_eq!(std::fs::read(got.join("a.txt")).unwrap(), b"hello");
        assert_eq!(std::fs::read(got.join("sub/b.bin")).unwrap(), vec![7u8; 3000]);
        assert_eq!(std::fs::read(got.join("sub/empty")).unwrap(), b"");
        assert_eq!(std::fs::read_link(got.join("link")).unwrap(), Path::new("a.txt"));
        let meta = std::fs::metadata(got.join("a.txt")).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o640);
        assert_eq!(meta.mtime(), 1_600_000_000);
        // Again without --overwrite: refused, naming the file.
        let e = m.unpack(&spool, offset, out.path(), false).unwrap_err();
        assert!(e.to_string().contains("file exists"), "{e}");
        // A plain file is not a bundle.
        assert!(Manifest::detect(&spool, b.size(), &[1; 32]).unwrap().is_none());
    }
}
