//! The file service's control messages (spec §17.2). Each is one whole
//! message on the control stream: a type byte, a request id (u32), then
//! fields. Integers are big-endian; text is a u16 length and UTF-8.
//! Requests are upper-case letters, replies lower-case; a reply carries
//! the id of the request it answers, and a request may get several
//! (listings come in parts). Parsing checks every length against the
//! message it came in: nothing a peer sends makes it panic or allocate
//! more than that message.

use std::fmt;

pub const VERSION: u8 = 1;
/// The stream requests and replies travel on; transfers use others.
pub const CONTROL_STREAM: u16 = 1;
/// The first stream a client gives a transfer (spec §17.3).
pub const FIRST_TRANSFER_STREAM: u16 = 2;
/// Longest path or token, in bytes.
pub const MAX_PATH: usize = 4096;
/// Longest error text.
pub const MAX_TEXT: usize = 1024;
/// A listing part stays below this size (the rest follows in more parts).
pub const LIST_PART: usize = 60 * 1024;
pub const HASH_LEN: usize = 32;
/// Reset code of a transfer stream the other side abandoned.
pub const STREAM_ABANDONED: u16 = 0x4654;

/// How a path (relative to the root, as on the wire) is shown to a
/// person: from the root, as `/a/b`.
pub fn shown(path: &str) -> String {
    format!("/{}", printable(path.trim_start_matches('/')))
}

/// `name` safe to print on a terminal: control characters (newlines,
/// escape sequences) written as `\n`, `\u{1b}`; the rest as is.
pub fn printable(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Why a request failed: each a distinct code on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Code {
    NotFound = 1,
    AlreadyExists = 2,
    NotEmpty = 3,
    PermissionDenied = 4,
    OutsideRoot = 5,
    ReadOnly = 6,
    NotADirectory = 7,
    IsADirectory = 8,
    TooLarge = 9,
    NoSpace = 10,
    Busy = 11,
    Corrupted = 12,
    BadRequest = 13,
    Unauthorized = 14,
    Unsupported = 15,
    Io = 16,
}

impl Code {
    pub fn from_u16(v: u16) -> Code {
        use Code::*;
        match v {
            1 => NotFound,
            2 => AlreadyExists,
            3 => NotEmpty,
            4 => PermissionDenied,
            5 => OutsideRoot,
            6 => ReadOnly,
            7 => NotADirectory,
            8 => IsADirectory,
            9 => TooLarge,
            10 => NoSpace,
            11 => Busy,
            12 => Corrupted,
            13 => BadRequest,
            14 => Unauthorized,
            15 => Unsupported,
            _ => Io,
        }
    }

    /// What a person reads first (the text says the rest).
    pub fn describe(self) -> &'static str {
        use Code::*;
        match self {
            NotFound => "not found",
            AlreadyExists => "already exists",
            NotEmpty => "directory not empty",
            PermissionDenied => "permission denied",
            OutsideRoot => "outside the served root",
            ReadOnly => "the server is read-only",
            NotADirectory => "not a directory",
            IsADirectory => "is a directory",
            TooLarge => "too large",
            NoSpace => "no space left on the server",
            Busy => "busy",
            Corrupted => "hash mismatch",
            BadRequest => "bad request",
            Unauthorized => "not authorized",
            Unsupported => "not supported",
            Io => "I/O error",
        }
    }
}

/// A failure as the server reports it: code and the path or detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub code: Code,
    pub text: String,
}

impl Failure {
    pub fn new(code: Code, text: impl Into<String>) -> Failure {
        Failure { code, text: text.into() }
    }
}

/// "PATH: what happened" (`/a.bin: not found`), or a text that says
/// what happened itself before a hint in parentheses as it is (`/a.bin
/// already exists (use -f to replace it)`, not `/a.bin (use -f to
/// replace it): already exists`).
impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = self.code.describe();
        if self.text.is_empty() {
            f.write_str(what)
        } else if self.text.contains(&format!(" {what} (")) {
            f.write_str(&self.text)
        } else {
            write!(f, "{}: {what}", self.text)
        }
    }
}

impl std::error::Error for Failure {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Other,
}

/// One directory entry or `stat` answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub kind: Kind,
    pub size: u64,
    /// Seconds since the Unix epoch.
    pub mtime: i64,
    /// Permission bits.
    pub mode: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Hello {
        version: u8,
        token: Vec<u8>,
    },
    Stat {
        path: String,
    },
    List {
        path: String,
    },
    Mkdir {
        path: String,
        parents: bool,
    },
    Rmdir {
        path: String,
    },
    Remove {
        path: String,
        recursive: bool,
    },
    Move {
        from: String,
        to: String,
        force: bool,
    },
    Copy {
        from: String,
        to: String,
        recursive: bool,
        force: bool,
    },
    /// The file's bytes from `offset` on `stream` if the server's first
    /// `offset` bytes hash to `prefix`, else from 0 (spec §17.4).
    Get {
        path: String,
        stream: u16,
        offset: u64,
        prefix: [u8; HASH_LEN],
    },
    /// A file of `size` bytes follows on `stream` (spec §17.5).
    Put {
        path: String,
        stream: u16,
        size: u64,
        mtime: i64,
        force: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Welcome {
        version: u8,
        read_only: bool,
        max_file: u64,
    },
    Error(Failure),
    Done,
    Stat(Entry),
    /// A listing part; the last has `more` false.
    Entries {
        more: bool,
        entries: Vec<Entry>,
    },
    /// The file is `size` bytes; its bytes from `from` follow on the stream,
    /// then its BLAKE3.
    GetStart {
        size: u64,
        mtime: i64,
        from: u64,
    },
    /// The server holds `have` bytes of an earlier attempt, hashing to `prefix`.
    PutReady {
        have: u64,
        prefix: [u8; HASH_LEN],
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("empty message")]
    Empty,
    #[error("unknown message type {0:#04x}")]
    UnknownType(u8),
    #[error("message ends early")]
    Short,
    #[error("{0} bytes after the end of the message")]
    Trailing(usize),
    #[error("{0} is not valid UTF-8")]
    NotUtf8(&'static str),
    #[error("{0} longer than allowed")]
    TooLong(&'static str),
}

struct Writer(Vec<u8>);

impl Writer {
    fn new(kind: u8, id: u32) -> Writer {
        let mut v = Vec::with_capacity(64);
        v.push(kind);
        v.extend_from_slice(&id.to_be_bytes());
        Writer(v)
    }
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn bytes(&mut self, v: &[u8]) -> &mut Self {
        // Callers bound their text; a longer one is cut, never wrapped.
        let n = v.len().min(u16::MAX as usize);
        self.u16(n as u16);
        self.0.extend_from_slice(&v[..n]);
        self
    }
    fn text(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }
    fn raw(&mut self, v: &[u8]) -> &mut Self {
        self.0.extend_from_slice(v);
        self
    }
    fn entry(&mut self, e: &Entry) -> &mut Self {
        let kind = match e.kind {
            Kind::File => b'f',
            Kind::Dir => b'd',
            Kind::Symlink => b'l',
            Kind::Other => b'o',
        };
        self.u8(kind).u64(e.size).u64(e.mtime as u64).u32(e.mode).text(&e.name)
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.0.len() < n {
            return Err(WireError::Short);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn flag(&mut self) -> Result<bool, WireError> {
        Ok(self.u8()? != 0)
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_be_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn hash(&mut self) -> Result<[u8; HASH_LEN], WireError> {
        Ok(self.take(HASH_LEN)?.try_into().expect("HASH_LEN bytes"))
    }
    fn bytes(&mut self, what: &'static str, max: usize) -> Result<&'a [u8], WireError> {
        let n = self.u16()? as usize;
        if n > max {
            return Err(WireError::TooLong(what));
        }
        self.take(n)
    }
    fn text(&mut self, what: &'static str, max: usize) -> Result<String, WireError> {
        let b = self.bytes(what, max)?;
        std::str::from_utf8(b).map(str::to_owned).map_err(|_| WireError::NotUtf8(what))
    }
    fn path(&mut self) -> Result<String, WireError> {
        self.text("path", MAX_PATH)
    }
    fn entry(&mut self) -> Result<Entry, WireError> {
        let kind = match self.u8()? {
            b'f' => Kind::File,
            b'd' => Kind::Dir,
            b'l' => Kind::Symlink,
            _ => Kind::Other,
        };
        let size = self.u64()?;
        let mtime = self.u64()? as i64;
        let mode = self.u32()?;
        let name = self.text("name", MAX_PATH)?;
        Ok(Entry { name, kind, size, mtime, mode })
    }
    fn end(&self) -> Result<(), WireError> {
        match self.0.len() {
            0 => Ok(()),
            n => Err(WireError::Trailing(n)),
        }
    }
}

/// The type byte and id every message starts with.
fn head(m: &[u8]) -> Result<(u8, u32, Reader<'_>), WireError> {
    let (&kind, rest) = m.split_first().ok_or(WireError::Empty)?;
    let mut r = Reader(rest);
    let id = r.u32()?;
    Ok((kind, id, r))
}

impl Request {
    pub fn encode(&self, id: u32) -> Vec<u8> {
        let mut w;
        match self {
            Request::Hello { version, token } => {
                w = Writer::new(b'H', id);
                w.u8(*version).bytes(token);
            }
            Request::Stat { path } => {
                w = Writer::new(b'S', id);
                w.text(path);
            }
            Request::List { path } => {
                w = Writer::new(b'L', id);
                w.text(path);
            }
            Request::Mkdir { path, parents } => {
                w = Writer::new(b'D', id);
                w.u8(*parents as u8).text(path);
            }
            Request::Rmdir { path } => {
                w = Writer::new(b'R', id);
                w.text(path);
            }
            Request::Remove { path, recursive } => {
                w = Writer::new(b'X', id);
                w.u8(*recursive as u8).text(path);
            }
            Request::Move { from, to, force } => {
                w = Writer::new(b'M', id);
                w.u8(*force as u8).text(from).text(to);
            }
            Request::Copy { from, to, recursive, force } => {
                w = Writer::new(b'C', id);
                w.u8(*recursive as u8).u8(*force as u8).text(from).text(to);
            }
            Request::Get { path, stream, offset, prefix } => {
                w = Writer::new(b'G', id);
                w.u16(*stream).u64(*offset).raw(prefix).text(path);
            }
            Request::Put { path, stream, size, mtime, force } => {
                w = Writer::new(b'P', id);
                w.u16(*stream).u64(*size).u64(*mtime as u64).u8(*force as u8).text(path);
            }
        }
        w.0
    }

    /// The request and its id.
    pub fn parse(m: &[u8]) -> Result<(u32, Request), WireError> {
        let (kind, id, mut r) = head(m)?;
        let req = match kind {
            b'H' => Request::Hello { version: r.u8()?, token: r.bytes("token", MAX_PATH)?.to_vec() },
            b'S' => Request::Stat { path: r.path()? },
            b'L' => Request::List { path: r.path()? },
            b'D' => {
                let parents = r.flag()?;
                Request::Mkdir { path: r.path()?, parents }
            }
            b'R' => Request::Rmdir { path: r.path()? },
            b'X' => {
                let recursive = r.flag()?;
                Request::Remove { path: r.path()?, recursive }
            }
            b'M' => {
                let force = r.flag()?;
                Request::Move { from: r.path()?, to: r.path()?, force }
            }
            b'C' => {
                let recursive = r.flag()?;
                let force = r.flag()?;
                Request::Copy { from: r.path()?, to: r.path()?, recursive, force }
            }
            b'G' => {
                let stream = r.u16()?;
                let offset = r.u64()?;
                let prefix = r.hash()?;
                Request::Get { path: r.path()?, stream, offset, prefix }
            }
            b'P' => {
                let stream = r.u16()?;
                let size = r.u64()?;
                let mtime = r.u64()? as i64;
                let force = r.flag()?;
                Request::Put { path: r.path()?, stream, size, mtime, force }
            }
            other => return Err(WireError::UnknownType(other)),
        };
        r.end()?;
        Ok((id, req))
    }
}

impl Reply {
    pub fn encode(&self, id: u32) -> Vec<u8> {
        let mut w;
        match self {
            Reply::Welcome { version, read_only, max_file } => {
                w = Writer::new(b'w', id);
                w.u8(*version).u8(*read_only as u8).u64(*max_file);
            }
            Reply::Error(f) => {
                w = Writer::new(b'e', id);
                let mut text = f.text.as_str();
                while text.len() > MAX_TEXT {
                    let mut cut = MAX_TEXT;
                    while !text.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    text = &text[..cut];
                }
                w.u16(f.code as u16).text(text);
            }
            Reply::Done => w = Writer::new(b'o', id),
            Reply::Stat(e) => {
                w = Writer::new(b's', id);
                w.entry(e);
            }
            Reply::Entries { more, entries } => {
                w = Writer::new(b'l', id);
                w.u8(*more as u8).u32(entries.len() as u32);
                for e in entries {
                    w.entry(e);
                }
            }
            Reply::GetStart { size, mtime, from } => {
                w = Writer::new(b'g', id);
                w.u64(*size).u64(*mtime as u64).u64(*from);
            }
            Reply::PutReady { have, prefix } => {
                w = Writer::new(b'p', id);
                w.u64(*have).raw(prefix);
            }
        }
        w.0
    }

    pub fn parse(m: &[u8]) -> Result<(u32, Reply), WireError> {
        let (kind, id, mut r) = head(m)?;
        let reply = match kind {
            b'w' => Reply::Welcome { version: r.u8()?, read_only: r.flag()?, max_file: r.u64()? },
            b'e' => {
                let code = Code::from_u16(r.u16()?);
                Reply::Error(Failure { code, text: r.text("error text", MAX_TEXT)? })
            }
            b'o' => Reply::Done,
            b's' => Reply::Stat(r.entry()?),
            b'l' => {
                let more = r.flag()?;
                let count = r.u32()? as usize;
                // Each entry takes at least 23 bytes: the count cannot ask
                // for more than the message holds.
                if count > r.0.len() / 23 {
                    return Err(WireError::Short);
                }
                let mut entries = Vec::with_capacity(count);
                for _ in 0..count {
                    entries.push(r.entry()?);
                }
                Reply::Entries { more, entries }
            }
            b'g' => Reply::GetStart { size: r.u64()?, mtime: r.u64()? as i64, from: r.u64()? },
            b'p' => Reply::PutReady { have: r.u64()?, prefix: r.hash()? },
            other => return Err(WireError::UnknownType(other)),
        };
        r.end()?;
        Ok((id, reply))
    }
}

/// Encoded size of an entry in a listing part.
pub fn entry_len(e: &Entry) -> usize {
    23 + e.name.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str) -> Entry {
        Entry { name: name.into(), kind: Kind::Dir, size: 4096, mtime: -5, mode: 0o755 }
    }

    #[test]
    fn every_message_round_trips() {
        let requests = [
            Request::Hello { version: VERSION, token: b"secret".to_vec() },
            Request::Stat { path: "a/b".into() },
            Request::List { path: String::new() },
            Request::Mkdir { path: "x/y".into(), parents: true },
            Request::Rmdir { path: "x".into() },
            Request::Remove { path: "f".into(), recursive: true },
            Request::Move { from: "a".into(), to: "b".into(), force: false },
            Request::Copy { from: "a".into(), to: "ü".into(), recursive: true, force: true },
            Request::Get { path: "big".into(), stream: 9, offset: 1 << 40, prefix: [7; HASH_LEN] },
            Request::Put { path: "up".into(), stream: 65535, size: 12, mtime: 1_700_000_000, force: true },
        ];
        for (i, r) in requests.iter().enumerate() {
            assert_eq!(Request::parse(&r.encode(i as u32)).unwrap(), (i as u32, r.clone()));
        }
        let replies = [
            Reply::Welcome { version: 1, read_only: true, max_file: u64::MAX },
            Reply::Error(Failure::new(Code::OutsideRoot, "../etc")),
            Reply::Done,
            Reply::Stat(entry("d")),
            Reply::Entries { more: true, entries: vec![entry("a"), entry("bb")] },
            Reply::Entries { more: false, entries: vec![] },
            Reply::GetStart { size: 10, mtime: 3, from: 4 },
            Reply::PutReady { have: 5, prefix: [1; HASH_LEN] },
        ];
        for (i, r) in replies.iter().enumerate() {
            assert_eq!(Reply::parse(&r.encode(i as u32)).unwrap(), (i as u32, r.clone()));
        }
        assert_eq!(
            entry_len(&entry("abc")),
            Reply::Entries { more: false, entries: vec![entry("abc")] }.encode(0).len() - 10
        );
    }

    #[test]
    fn every_truncation_and_extension_of_a_message_is_refused() {
        let messages = [
            Request::Put { path: "up".into(), stream: 3, size: 12, mtime: 0, force: false }.encode(1),
            Request::Copy { from: "a".into(), to: "b".into(), recursive: true, force: false }.encode(1),
            Reply::Entries { more: false, entries: vec![entry("a")] }.encode(1),
        ];
        for m in &messages {
            for cut in 0..m.len() {
                assert!(Request::parse(&m[..cut]).is_err() && Reply::parse(&m[..cut]).is_err(), "{cut}");
            }
            let mut long = m.clone();
            long.push(0);
            assert!(Request::parse(&long).is_err() && Reply::parse(&long).is_err());
        }
    }

    #[test]
    fn a_listing_count_larger_than_its_message_is_refused_before_allocating() {
        let mut m = Reply::Entries { more: false, entries: vec![] }.encode(1);
        m[6..10].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(Reply::parse(&m), Err(WireError::Short));
    }

    #[test]
    fn long_error_text_is_cut_at_a_character_boundary() {
        let f = Failure::new(Code::Io, "é".repeat(MAX_TEXT));
        let (_, r) = Reply::parse(&Reply::Error(f).encode(0)).unwrap();
        let Reply::Error(f) = r else { panic!() };
        assert!(f.text.len() <= MAX_TEXT && f.text.chars().all(|c| c == 'é'));
    }

    #[test]
    fn a_failure_reads_path_what_happened_then_the_hint() {
        assert_eq!(Failure::new(Code::NotFound, "/a.bin").to_string(), "/a.bin: not found");
        let exists = Failure::new(Code::AlreadyExists, "/a.bin already exists (use -f to replace it)");
        assert_eq!(exists.to_string(), "/a.bin already exists (use -f to replace it)");
        // A path with parentheses is still a path.
        assert_eq!(Failure::new(Code::NotFound, "/b (1)").to_string(), "/b (1): not found");
        assert_eq!(Failure::new(Code::Busy, "").to_string(), "busy");
    }
}
