//! Messages of a tree transfer (protocol version 3, layout in
//! [`super`]): the entry list, the framing of each file's data, and the
//! receiver's rules for the paths and link targets it accepts.

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::transfer::wire::{check_name, MAGIC};

/// A request for a list of entries (files, directories, links).
pub const VERSION_TREE: u8 = 3;
/// Most entries one transfer may list.
pub const MAX_ENTRIES: u32 = 1_000_000;
/// Longest relative path or link target, in bytes (the usual PATH_MAX).
pub const MAX_PATH: usize = 4096;
/// Most bytes of paths and link targets one list may hold, so that a
/// request never makes the receiver hold more than this in memory.
pub const MAX_LIST_BYTES: usize = 64 << 20;
/// Largest chunk of file data.
pub const MAX_CHUNK: u32 = 1 << 20;
/// A chunk length saying "the sender gives up", followed by the reason.
pub const ABANDON: u32 = u32::MAX;
/// The size of a file whose length is not known in advance (stdin).
pub const UNKNOWN_SIZE: u64 = u64::MAX;
/// Permission bits kept: rwx for user, group, others. Set-id and sticky
/// bits are not carried (a received file never becomes set-uid).
pub const MODE_BITS: u32 = 0o777;

/// Bytes of an entry before its path.
const ENTRY_FIXED: usize = 1 + 2 + 8 + 4 + 8 + 2;

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    /// A symbolic link and its target, sent as a link (never followed).
    Link(String),
}

/// One entry of the list: what the receiver learns before any data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub kind: Kind,
    /// Relative, `/`-separated, UTF-8.
    pub path: String,
    /// Permission bits (at most [`MODE_BITS`]).
    pub mode: u32,
    /// Modification time: seconds since 1970 (signed) and nanoseconds.
    pub mtime: (i64, u32),
    /// A file's size, [`UNKNOWN_SIZE`] for standard input; 0 otherwise.
    pub size: u64,
}

impl Entry {
    pub fn is_file(&self) -> bool {
        self.kind == Kind::File
    }

    /// The size, when known in advance.
    pub fn known_size(&self) -> Option<u64> {
        (self.size != UNKNOWN_SIZE).then_some(self.size)
    }

    pub fn encode(&self, buf: &mut Vec<u8>) {
        let (kind, target) = match &self.kind {
            Kind::File => (b'F', ""),
            Kind::Dir => (b'D', ""),
            Kind::Link(t) => (b'L', t.as_str()),
        };
        buf.push(kind);
        buf.extend_from_slice(&((self.mode & MODE_BITS) as u16).to_be_bytes());
        buf.extend_from_slice(&self.mtime.0.to_be_bytes());
        buf.extend_from_slice(&self.mtime.1.to_be_bytes());
        buf.extend_from_slice(&self.size.to_be_bytes());
        buf.extend_from_slice(&(self.path.len() as u16).to_be_bytes());
        buf.extend_from_slice(self.path.as_bytes());
        buf.extend_from_slice(&(target.len() as u16).to_be_bytes());
        buf.extend_from_slice(target.as_bytes());
    }
}

/// Encodes the whole request: magic, version 3, entry count, entries.
pub fn encode_request(entries: &[Entry]) -> Vec<u8> {
    let mut buf = Vec::with_capacity(9 + entries.len() * 64);
    buf.extend_from_slice(&MAGIC);
    buf.push(VERSION_TREE);
    buf.extend_from_slice(&(entries.len() as u32).to_be_bytes());
    for e in entries {
        e.encode(&mut buf);
    }
    buf
}

/// Why an entry list could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    #[error("the list has no entry")]
    Empty,
    #[error("the list has {0} entries; at most {MAX_ENTRIES} are accepted")]
    TooManyEntries(u32),
    #[error("the list's paths and link targets pass {} MiB", MAX_LIST_BYTES >> 20)]
    TooLarge,
    #[error("entry {0}: unknown kind {1:#04x}")]
    Kind(u32, u8),
    #[error("entry {0}: a path or link target is longer than {MAX_PATH} bytes")]
    PathTooLong(u32),
    #[error("entry {0}: a path or link target is not valid UTF-8")]
    NotUtf8(u32),
    #[error("entry {0}: only a link has a target")]
    StrayTarget(u32),
    #[error("entry {0}: nanoseconds {1} out of range")]
    Nanos(u32, u32),
    #[error("connection ended before the list was complete")]
    Truncated,
    #[error("{0}")]
    Io(std::io::Error),
}

impl From<std::io::Error> for ListError {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            ListError::Truncated
        } else {
            ListError::Io(e)
        }
    }
}

/// Reads the entry list that follows magic and version; every length is
/// checked before anything is allocated for it. Paths are checked for
/// safety by [`check_entries`].
pub async fn read_list<R: AsyncRead + Unpin>(r: &mut R) -> Result<Vec<Entry>, ListError> {
    let count = r.read_u32().await?;
    if count == 0 {
        return Err(ListError::Empty);
    }
    if count > MAX_ENTRIES {
        return Err(ListError::TooManyEntries(count));
    }
    let mut entries = Vec::new();
    let mut total = 0usize;
    for i in 0..count {
        let mut fixed = [0u8; ENTRY_FIXED];
        r.read_exact(&mut fixed).await?;
        let be64 = |at: usize| u64::from_be_bytes(fixed[at..at + 8].try_into().expect("8 bytes"));
        let kind = fixed[0];
        let mode = u32::from(u16::from_be_bytes([fixed[1], fixed[2]])) & MODE_BITS;
        let secs = be64(3) as i64;
        let nanos = u32::from_be_bytes(fixed[11..15].try_into().expect("4 bytes"));
        if nanos >= 1_000_000_000 {
            return Err(ListError::Nanos(i, nanos));
        }
        let size = be64(15);
        let path_len = usize::from(u16::from_be_bytes([fixed[23], fixed[24]]));
        let path = read_text(r, path_len, i, &mut total).await?;
        let target_len = usize::from(r.read_u16().await?);
        let target = read_text(r, target_len, i, &mut total).await?;
        let kind = match (kind, target_len) {
            (b'F', 0) => Kind::File,
            (b'D', 0) => Kind::Dir,
            (b'L', _) => Kind::Link(target),
            (b'F' | b'D', _) => return Err(ListError::StrayTarget(i)),
            (k, _) => return Err(ListError::Kind(i, k)),
        };
        let size = if kind == Kind::File { size } else { 0 };
        entries.push(Entry { kind, path, mode, mtime: (secs, nanos), size });
    }
    Ok(entries)
}

async fn read_text<R: AsyncRead + Unpin>(
    r: &mut R,
    len: usize,
    entry: u32,
    total: &mut usize,
) -> Result<String, ListError> {
    if len > MAX_PATH {
        return Err(ListError::PathTooLong(entry));
    }
    *total += len;
    if *total > MAX_LIST_BYTES {
        return Err(ListError::TooLarge);
    }
    let mut bytes = vec![0u8; len];
    r.read_exact(&mut bytes).await?;
    String::from_utf8(bytes).map_err(|_| ListError::NotUtf8(entry))
}

/// Refuses a path that is not relative and plain: every `/`-separated
/// component must be a name [`check_name`] accepts (no `.`, `..`, empty
/// component, leading `/`, control character).
pub fn check_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("path refused: the path is empty".into());
    }
    if path.len() > MAX_PATH {
        return Err(format!("path refused: longer than {MAX_PATH} bytes"));
    }
    if path.starts_with('/') {
        return Err(format!(
            "path refused: {path:?} is absolute (only paths inside the receiving directory are accepted)"
        ));
    }
    for part in path.split('/') {
        if part == ".." {
            return Err(format!("path refused: {path:?} leaves the receiving directory (\"..\")"));
        }
        check_name(part).map_err(|why| format!("path {path:?}: {why}"))?;
    }
    Ok(())
}

/// Refuses a link target that is absolute or leads out of the receiving
/// directory from where the link `path` is, read as the kernel would:
/// each `..` goes up from the link's directory.
pub fn check_link(path: &str, target: &str) -> Result<(), String> {
    let refused = |why: &str| Err(format!("link {path:?} -> {target:?} refused: {why}"));
    if target.is_empty() || target.len() > MAX_PATH {
        return refused(&format!("the target must be 1 to {MAX_PATH} bytes long"));
    }
    if target.starts_with('/') {
        return refused("an absolute target points outside the receiving directory");
    }
    if target.chars().any(char::is_control) {
        return refused("the target contains a control character");
    }
    // Depth of the link's directory below the receiving directory.
    let mut depth = path.split('/').count() as i64 - 1;
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => depth -= 1,
            _ => depth += 1,
        }
        if depth < 0 {
            return refused("the target leads out of the receiving directory");
        }
    }
    Ok(())
}

/// Checks a whole list as the receiver must before accepting it: safe
/// paths and targets, no path twice, and every entry inside a directory
/// listed before it (or at the top), so nothing is written through a
/// directory the list did not declare.
pub fn check_entries(entries: &[Entry]) -> Result<(), String> {
    let mut dirs = std::collections::HashSet::new();
    let mut seen = std::collections::HashSet::new();
    for e in entries {
        check_path(&e.path)?;
        if let Kind::Link(target) = &e.kind {
            check_link(&e.path, target)?;
        }
        if !seen.insert(e.path.as_str()) {
            return Err(format!("path refused: {:?} is listed twice", e.path));
        }
        if let Some((parent, _)) = e.path.rsplit_once('/') {
            if !dirs.contains(parent) {
                return Err(format!("path refused: {:?} is not inside a directory listed before it", e.path));
            }
        }
        if e.kind == Kind::Dir {
            dirs.insert(e.path.as_str());
        }
    }
    Ok(())
}

/// The receiver's offer to resume the file at `index` of the list: it
/// holds `have` bytes of an earlier attempt at the same file (same path,
/// size and mtime), hashing to `prefix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offer {
    pub index: u32,
    pub have: u64,
    pub prefix: [u8; 32],
}

/// Bytes of one offer on the wire.
const OFFER_LEN: usize = 4 + 8 + 32;

/// Encodes the offers that follow the receiver's "go ahead".
pub fn encode_offers(offers: &[Offer]) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + offers.len() * OFFER_LEN);
    v.extend_from_slice(&(offers.len() as u32).to_be_bytes());
    for o in offers {
        v.extend_from_slice(&o.index.to_be_bytes());
        v.extend_from_slice(&o.have.to_be_bytes());
        v.extend_from_slice(&o.prefix);
    }
    v
}

/// Reads the offers for a list of `entries` entries: at most one per
/// entry, in increasing order of index, each within the list.
pub async fn read_offers<R: AsyncRead + Unpin>(r: &mut R, entries: usize) -> std::io::Result<Vec<Offer>> {
    let invalid = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    let count = r.read_u32().await? as usize;
    if count > entries {
        return Err(invalid(format!("{count} resume offers for {entries} entries")));
    }
    let mut offers: Vec<Offer> = Vec::with_capacity(count);
    for _ in 0..count {
        let mut b = [0u8; OFFER_LEN];
        r.read_exact(&mut b).await?;
        let index = u32::from_be_bytes(b[..4].try_into().expect("4 bytes"));
        let have = u64::from_be_bytes(b[4..12].try_into().expect("8 bytes"));
        if index as usize >= entries || offers.last().is_some_and(|o| o.index >= index) {
            return Err(invalid(format!("resume offer for entry {index} out of order or outside the list")));
        }
        offers.push(Offer { index, have, prefix: b[12..].try_into().expect("32 bytes") });
    }
    Ok(offers)
}

/// A chunk's head (see the framing in [`super`]): data, or what ends a
/// file's data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chunk {
    /// This many bytes of the file follow (at most [`MAX_CHUNK`]); the
    /// caller reads them.
    Data(usize),
    /// The end of the file and the BLAKE3 of all of it.
    End([u8; 32]),
    /// The sender gives up on the whole transfer, saying why.
    Abandon(String),
}

/// Encodes the header of a data chunk of `len` bytes.
pub fn data_header(len: usize) -> [u8; 4] {
    (len as u32).to_be_bytes()
}

/// Encodes the end of a file.
pub fn end(hash: &blake3::Hash) -> Vec<u8> {
    let mut v = vec![0u8; 4];
    v.extend_from_slice(hash.as_bytes());
    v
}

/// Encodes the sender's giving up.
pub fn abandon(why: &str) -> Vec<u8> {
    let mut cut = why.len().min(crate::transfer::wire::MAX_MESSAGE);
    while !why.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut v = ABANDON.to_be_bytes().to_vec();
    v.extend_from_slice(&(cut as u16).to_be_bytes());
    v.extend_from_slice(&why.as_bytes()[..cut]);
    v
}

/// Reads the next chunk's head: for data, its length (its bytes are next
/// on the stream), else the end or the sender's reason.
pub async fn read_chunk_head<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Chunk> {
    let len = r.read_u32().await?;
    match len {
        0 => {
            let mut hash = [0u8; 32];
            r.read_exact(&mut hash).await?;
            Ok(Chunk::End(hash))
        }
        ABANDON => {
            let n = usize::from(r.read_u16().await?);
            let mut text = vec![0u8; n.min(crate::transfer::wire::MAX_MESSAGE)];
            r.read_exact(&mut text).await?;
            Ok(Chunk::Abandon(String::from_utf8_lossy(&text).into_owned()))
        }
        n if n > MAX_CHUNK => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a data chunk of {n} bytes (at most {MAX_CHUNK})"),
        )),
        n => Ok(Chunk::Data(n as usize)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
    }

    fn entry(kind: Kind, path: &str) -> Entry {
        Entry { kind, path: path.into(), mode: 0o640, mtime: (1_700_000_000, 5), size: 3 }
    }

    #[test]
    fn an_entry_in_literal_bytes() {
        let bytes = encode_request(&[entry(Kind::File, "d/f")]);
        assert_eq!(
            bytes,
            [
                b'M', b'F', b'X', b'F', 3, // magic, version
                0, 0, 0, 1, // entry count
                b'F', 0x01, 0xa0, // kind, mode 0o640
                0, 0, 0, 0, 0x65, 0x53, 0xf1, 0x00, // mtime seconds
                0, 0, 0, 5, // nanoseconds
                0, 0, 0, 0, 0, 0, 0, 3, // size
                0, 3, b'd', b'/', b'f', // path
                0, 0, // no target
            ]
        );
    }

    #[test]
    fn lists_round_trip_and_every_truncated_prefix_is_rejected() {
        let list = vec![
            Entry { size: 0, mode: 0o755, ..entry(Kind::Dir, "d") },
            entry(Kind::File, "d/f"),
            Entry { size: 0, mode: 0o777, ..entry(Kind::Link("f".into()), "d/l") },
            Entry { size: UNKNOWN_SIZE, ..entry(Kind::File, "stdin") },
        ];
        let bytes = encode_request(&list);
        assert_eq!(block_on(read_list(&mut &bytes[5..])).unwrap(), list);
        for n in 5..bytes.len() {
            let err = block_on(read_list(&mut &bytes[5..n])).unwrap_err();
            assert!(matches!(err, ListError::Truncated), "{n}: {err}");
        }
    }

    #[test]
    fn malformed_lists_are_named() {
        let mut bytes = encode_request(&[entry(Kind::File, "f")])[5..].to_vec();
        bytes[4] = b'X';
        assert!(matches!(block_on(read_list(&mut &bytes[..])), Err(ListError::Kind(0, b'X'))));
        assert!(matches!(block_on(read_list(&mut &[0u8, 0, 0, 0][..])), Err(ListError::Empty)));
        let many = (MAX_ENTRIES + 1).to_be_bytes();
        assert!(matches!(block_on(read_list(&mut &many[..])), Err(ListError::TooManyEntries(_))));
        let mut long = encode_request(&[entry(Kind::File, "f")])[5..].to_vec();
        long[27..29].copy_from_slice(&(MAX_PATH as u16 + 1).to_be_bytes());
        assert!(matches!(block_on(read_list(&mut &long[..])), Err(ListError::PathTooLong(0))));
    }

    #[test]
    fn paths_must_stay_inside_the_receiving_directory() {
        for good in ["a", "a/b/c", ".hidden/x", "a..b/c"] {
            assert_eq!(check_path(good), Ok(()), "{good}");
        }
        for (bad, why) in [
            ("", "empty"),
            ("../x", "leaves the receiving directory"),
            ("a/../../x", "leaves the receiving directory"),
            ("/etc/passwd", "absolute"),
            ("a//b", "empty"),
            ("a/./b", "not a file name"),
            ("a/b/", "empty"),
            ("a/\x1b[2J", "control character"),
        ] {
            let err = check_path(bad).unwrap_err();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
    }

    #[test]
    fn link_targets_must_stay_inside_the_receiving_directory() {
        for (path, good) in [("l", "f"), ("d/l", "../f"), ("d/e/l", "../../f"), ("d/l", "./x/../y")] {
            assert_eq!(check_link(path, good), Ok(()), "{path} -> {good}");
        }
        for (path, bad, why) in [
            ("l", "../outside", "leads out"),
            ("d/l", "../../etc", "leads out"),
            ("d/l", "x/../../../y", "leads out"),
            ("l", "/etc/passwd", "absolute"),
            ("l", "", "1 to"),
        ] {
            let err = check_link(path, bad).unwrap_err();
            assert!(err.contains(why), "{path} -> {bad}: {err}");
        }
    }

    #[test]
    fn a_list_declares_every_directory_before_its_contents() {
        let dir = |p: &str| Entry { size: 0, ..entry(Kind::Dir, p) };
        assert_eq!(check_entries(&[dir("d"), entry(Kind::File, "d/f"), entry(Kind::File, "g")]), Ok(()));
        let err = check_entries(&[entry(Kind::File, "d/f")]).unwrap_err();
        assert!(err.contains("not inside a directory listed before it"), "{err}");
        let err = check_entries(&[entry(Kind::File, "f"), entry(Kind::File, "f")]).unwrap_err();
        assert!(err.contains("listed twice"), "{err}");
        let err = check_entries(&[dir("d"), entry(Kind::Link("../../x".into()), "d/l")]).unwrap_err();
        assert!(err.contains("leads out"), "{err}");
    }

    #[test]
    fn offers_round_trip_and_bad_ones_are_refused() {
        let offers = [Offer { index: 1, have: 300, prefix: [7; 32] }, Offer { index: 4, have: 1, prefix: [1; 32] }];
        let bytes = encode_offers(&offers);
        assert_eq!(&bytes[..8], &[0, 0, 0, 2, 0, 0, 0, 1]);
        assert_eq!(block_on(read_offers(&mut &bytes[..], 5)).unwrap(), offers);
        for n in 0..bytes.len() {
            assert!(block_on(read_offers(&mut &bytes[..n], 5)).is_err(), "{n}");
        }
        assert!(block_on(read_offers(&mut &bytes[..], 4)).is_err(), "index 4 of a 4-entry list");
        let backwards = encode_offers(&[offers[1], offers[0]]);
        assert!(block_on(read_offers(&mut &backwards[..], 5)).is_err());
        assert!(block_on(read_offers(&mut &bytes[..], 1)).is_err(), "more offers than entries");
    }

    #[test]
    fn chunks_round_trip_and_oversized_ones_are_refused() {
        let hash = blake3::hash(b"abc");
        let mut bytes = data_header(3).to_vec();
        bytes.extend_from_slice(b"abc");
        bytes.extend_from_slice(&end(&hash));
        bytes.extend_from_slice(&abandon("changed"));
        let mut r = &bytes[..];
        assert_eq!(block_on(read_chunk_head(&mut r)).unwrap(), Chunk::Data(3));
        let mut buf = [0u8; 3];
        block_on(r.read_exact(&mut buf)).unwrap();
        assert_eq!(&buf, b"abc");
        assert_eq!(block_on(read_chunk_head(&mut r)).unwrap(), Chunk::End(*hash.as_bytes()));
        assert_eq!(block_on(read_chunk_head(&mut r)).unwrap(), Chunk::Abandon("changed".into()));
        let huge = (MAX_CHUNK + 1).to_be_bytes();
        assert!(block_on(read_chunk_head(&mut &huge[..])).is_err());
        let largest = MAX_CHUNK.to_be_bytes();
        assert_eq!(block_on(read_chunk_head(&mut &largest[..])).unwrap(), Chunk::Data(MAX_CHUNK as usize));
    }
}
