//! Messages of the file-transfer application protocol (see the layout in
//! [`super`]): the request header, the status reply, and the rules a file
//! name must meet.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::tree::wire::VERSION_TREE;

/// First bytes of every request: "manyfold file transfer".
pub const MAGIC: [u8; 4] = *b"MFXF";
pub const VERSION: u8 = 1;
/// A request for a spread file: its blocks go to some receivers each.
pub const VERSION_BLOCKS: u8 = 2;
/// Smallest and largest block of a spread file.
pub const MIN_BLOCK: u32 = 4096;
pub const MAX_BLOCK: u32 = 8 << 20;
/// Longest file name, in bytes of UTF-8 (the usual file-system limit).
pub const MAX_NAME: usize = 255;
/// Longest status message, in bytes of UTF-8.
pub const MAX_MESSAGE: usize = 4096;
/// Length of the BLAKE3 trailer.
pub const HASH_LEN: usize = 32;

/// Field offsets of the fixed part of a request (big-endian integers).
mod field {
    use std::ops::Range;
    pub const MAGIC: Range<usize> = 0..4;
    pub const VERSION: usize = 4;
    pub const NAME_LEN: Range<usize> = 5..7;
    pub const SIZE: Range<usize> = 7..15;
    pub const FIXED_LEN: usize = 15;
}

/// What the sender asks to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub name: String,
    pub size: u64,
    /// The file comes as blocks of this size (version 2, `super::shard`),
    /// not as one byte stream.
    pub block: Option<u32>,
}

/// Why a request could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("not a manyfold file transfer (bad magic bytes)")]
    BadMagic,
    #[error("unsupported transfer protocol version {0} (this receiver speaks versions {VERSION} to {VERSION_TREE})")]
    Version(u8),
    #[error("block size {0} refused (from {MIN_BLOCK} to {MAX_BLOCK} bytes)")]
    BlockSize(u32),
    #[error("name refused: the name is empty")]
    EmptyName,
    #[error("name refused: longer than {MAX_NAME} bytes")]
    NameTooLong,
    #[error("name refused: not valid UTF-8")]
    NameNotUtf8,
    #[error("connection ended before the request was complete")]
    Truncated,
    #[error("{0}")]
    Io(std::io::Error),
}

impl From<std::io::Error> for RequestError {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            RequestError::Truncated
        } else {
            RequestError::Io(e)
        }
    }
}

impl Request {
    pub fn encode(&self) -> Vec<u8> {
        let name = self.name.as_bytes();
        let mut buf = vec![0u8; field::FIXED_LEN];
        buf[field::MAGIC].copy_from_slice(&MAGIC);
        buf[field::VERSION] = if self.block.is_some() { VERSION_BLOCKS } else { VERSION };
        buf[field::NAME_LEN].copy_from_slice(&(name.len() as u16).to_be_bytes());
        buf[field::SIZE].copy_from_slice(&self.size.to_be_bytes());
        buf.extend_from_slice(name);
        if let Some(block) = self.block {
            buf.extend_from_slice(&block.to_be_bytes());
        }
        buf
    }

    /// Reads one request of version 1 or 2; the name is checked for length
    /// and encoding here and for safety by [`check_name`].
    pub async fn read<R: AsyncRead + Unpin>(r: &mut R) -> Result<Request, RequestError> {
        match read_version(r).await? {
            VERSION_TREE => Err(RequestError::Version(VERSION_TREE)),
            version => Request::read_after(version, r).await,
        }
    }

    /// Reads the rest of a request of `version` (1 or 2), after the
    /// magic and version [`read_version`] took.
    pub async fn read_after<R: AsyncRead + Unpin>(version: u8, r: &mut R) -> Result<Request, RequestError> {
        let mut fixed = [0u8; field::FIXED_LEN];
        r.read_exact(&mut fixed[field::NAME_LEN.start..]).await?;
        let name_len = usize::from(u16::from_be_bytes([fixed[5], fixed[6]]));
        let mut size = [0u8; 8];
        size.copy_from_slice(&fixed[field::SIZE]);
        let size = u64::from_be_bytes(size);
        if name_len == 0 {
            return Err(RequestError::EmptyName);
        }
        if name_len > MAX_NAME {
            return Err(RequestError::NameTooLong);
        }
        let mut name = vec![0u8; name_len];
        r.read_exact(&mut name).await?;
        let name = String::from_utf8(name).map_err(|_| RequestError::NameNotUtf8)?;
        let block = if version == VERSION_BLOCKS {
            let mut b = [0u8; 4];
            r.read_exact(&mut b).await?;
            let b = u32::from_be_bytes(b);
            if !(MIN_BLOCK..=MAX_BLOCK).contains(&b) {
                return Err(RequestError::BlockSize(b));
            }
            Some(b)
        } else {
            None
        };
        Ok(Request { name, size, block })
    }
}

/// Reads the magic bytes and the version of a request: 1 (one file), 2
/// (a spread file) or 3 (a list, [`super::tree`]).
pub async fn read_version<R: AsyncRead + Unpin>(r: &mut R) -> Result<u8, RequestError> {
    let mut head = [0u8; field::NAME_LEN.start];
    r.read_exact(&mut head).await?;
    if head[field::MAGIC] != MAGIC {
        return Err(RequestError::BadMagic);
    }
    match head[field::VERSION] {
        v @ (VERSION | VERSION_BLOCKS | VERSION_TREE) => Ok(v),
        v => Err(RequestError::Version(v)),
    }
}

/// Refuses any name that is not a plain base name: it must not be empty,
/// `.` or `..`, nor hold a path separator, a NUL or another control
/// character (which could rewrite the receiver's terminal).
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("name refused: the name is empty".into());
    }
    if name == "." || name == ".." {
        return Err(format!("name refused: {name:?} is not a file name"));
    }
    if name.contains('/') || name.contains('\\') {
        return Err(format!("name refused: {name:?} contains a path separator (only a base name is accepted)"));
    }
    if name.contains('\0') {
        return Err(format!("name refused: {name:?} contains a NUL byte"));
    }
    if name.chars().any(char::is_control) {
        return Err(format!("name refused: {name:?} contains a control character"));
    }
    if name.len() > MAX_NAME {
        return Err(format!("name refused: longer than {MAX_NAME} bytes"));
    }
    Ok(())
}

/// A message of a spread file (version 2), after the request: a block of
/// the file, or the end with the whole file's hash.
///
/// ```text
/// block: 'B' | offset (8) | BLAKE3 of the data (32) | data (1..=block size)
/// end:   'E' | BLAKE3 of the whole file (32)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockMsg<'a> {
    Block { offset: u64, hash: [u8; HASH_LEN], data: &'a [u8] },
    End { hash: [u8; HASH_LEN] },
}

/// Bytes before a block's data.
pub const BLOCK_HEADER: usize = 1 + 8 + HASH_LEN;

impl<'a> BlockMsg<'a> {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            BlockMsg::Block { offset, hash, data } => {
                let mut v = Vec::with_capacity(BLOCK_HEADER + data.len());
                v.push(b'B');
                v.extend_from_slice(&offset.to_be_bytes());
                v.extend_from_slice(hash);
                v.extend_from_slice(data);
                v
            }
            BlockMsg::End { hash } => {
                let mut v = vec![b'E'];
                v.extend_from_slice(hash);
                v
            }
        }
    }

    pub fn decode(m: &'a [u8]) -> Result<BlockMsg<'a>, String> {
        let hash_at = |at: usize| -> Result<[u8; HASH_LEN], String> {
            m.get(at..at + HASH_LEN)
                .and_then(|h| h.try_into().ok())
                .ok_or_else(|| format!("truncated message of {} bytes", m.len()))
        };
        match m.first() {
            Some(b'B') if m.len() > BLOCK_HEADER => {
                let offset = u64::from_be_bytes(m[1..9].try_into().expect("length checked"));
                Ok(BlockMsg::Block { offset, hash: hash_at(9)?, data: &m[BLOCK_HEADER..] })
            }
            Some(b'E') if m.len() == 1 + HASH_LEN => Ok(BlockMsg::End { hash: hash_at(1)? }),
            Some(&t) => Err(format!("malformed block message (type {t:#04x}, {} bytes)", m.len())),
            None => Err("empty block message".into()),
        }
    }
}

/// The receiver's answer: to the request (go ahead, or why not) and after
/// the trailer (saved, or why not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Ok(String),
    Error(String),
}

impl Reply {
    pub fn encode(&self) -> Vec<u8> {
        let (status, text) = match self {
            Reply::Ok(t) => (0u8, t),
            Reply::Error(t) => (1u8, t),
        };
        let mut end = text.len().min(MAX_MESSAGE);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let text = &text.as_bytes()[..end];
        let mut buf = Vec::with_capacity(3 + text.len());
        buf.push(status);
        buf.extend_from_slice(&(text.len() as u16).to_be_bytes());
        buf.extend_from_slice(text);
        buf
    }

    pub async fn write<W: AsyncWrite + Unpin>(&self, w: &mut W) -> std::io::Result<()> {
        w.write_all(&self.encode()).await?;
        w.flush().await
    }

    pub async fn read<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Reply> {
        let invalid = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
        let mut head = [0u8; 3];
        r.read_exact(&mut head).await?;
        let len = usize::from(u16::from_be_bytes([head[1], head[2]]));
        if len > MAX_MESSAGE {
            return Err(invalid("status reply too long"));
        }
        let mut text = vec![0u8; len];
        r.read_exact(&mut text).await?;
        let text = String::from_utf8_lossy(&text).into_owned();
        match head[0] {
            0 => Ok(Reply::Ok(text)),
            1 => Ok(Reply::Error(text)),
            s => Err(invalid(&format!("unknown status {s} in reply"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
    }

    #[test]
    fn request_literal_bytes() {
        let req = Request { name: "a.bin".into(), size: 0x0102, block: None };
        assert_eq!(
            req.encode(),
            [
                b'M', b'F', b'X', b'F', 1, // magic, version
                0, 5, // name length
                0, 0, 0, 0, 0, 0, 1, 2, // size
                b'a', b'.', b'b', b'i', b'n',
            ]
        );
        let mut bytes = &req.encode()[..];
        assert_eq!(block_on(Request::read(&mut bytes)).unwrap(), req);
    }

    #[test]
    fn every_truncated_request_is_rejected() {
        for block in [None, Some(1 << 20)] {
            let bytes = Request { name: "file".into(), size: 9, block }.encode();
            for n in 0..bytes.len() {
                let mut prefix = &bytes[..n];
                let err = block_on(Request::read(&mut prefix)).unwrap_err();
                assert!(matches!(err, RequestError::Truncated), "{n}: {err}");
            }
        }
    }

    #[test]
    fn bad_magic_and_version_are_named() {
        let mut bytes = Request { name: "f".into(), size: 1, block: None }.encode();
        bytes[4] = 9;
        let err = block_on(Request::read(&mut &bytes[..])).unwrap_err();
        assert!(err.to_string().contains("version 9"), "{err}");
        bytes[0] = b'X';
        let err = block_on(Request::read(&mut &bytes[..])).unwrap_err();
        assert!(matches!(err, RequestError::BadMagic));
    }

    #[test]
    fn a_spread_request_carries_its_block_size_after_the_name() {
        let req = Request { name: "a".into(), size: 5, block: Some(0x1000) };
        let bytes = req.encode();
        assert_eq!((bytes[4], &bytes[bytes.len() - 4..]), (VERSION_BLOCKS, &[0u8, 0, 0x10, 0][..]));
        assert_eq!(block_on(Request::read(&mut &bytes[..])).unwrap(), req);
        let tiny = Request { block: Some(16), ..req }.encode();
        assert!(matches!(block_on(Request::read(&mut &tiny[..])), Err(RequestError::BlockSize(16))));
    }

    #[test]
    fn block_messages_round_trip_and_malformed_ones_are_named() {
        let block = BlockMsg::Block { offset: 7, hash: [3; HASH_LEN], data: b"xyz" };
        let bytes = block.encode();
        assert_eq!((bytes[0], &bytes[1..9], bytes.len()), (b'B', &7u64.to_be_bytes()[..], BLOCK_HEADER + 3));
        assert_eq!(BlockMsg::decode(&bytes), Ok(block));
        let end = BlockMsg::End { hash: [9; HASH_LEN] };
        assert_eq!(BlockMsg::decode(&end.encode()), Ok(end));
        for bad in [&bytes[..BLOCK_HEADER], &end.encode()[..10], b"", b"Zzz"] {
            assert!(BlockMsg::decode(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn reply_round_trip_and_literal() {
        assert_eq!(Reply::Ok("ok".into()).encode(), [0, 0, 2, b'o', b'k']);
        for reply in [Reply::Ok("saved".into()), Reply::Error("file exists: x".into())] {
            let bytes = reply.encode();
            assert_eq!(block_on(Reply::read(&mut &bytes[..])).unwrap(), reply);
            for n in 0..bytes.len() {
                assert!(block_on(Reply::read(&mut &bytes[..n])).is_err());
            }
        }
    }

    #[test]
    fn names_must_be_plain_base_names() {
        for good in ["a", "report.pdf", ".hidden", "a..b", "spaces are fine", "naïve"] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        for (bad, why) in [
            ("", "empty"),
            (".", "not a file name"),
            ("..", "not a file name"),
            ("../etc/passwd", "path separator"),
            ("a/b", "path separator"),
            ("a\\b", "path separator"),
            ("a\0b", "NUL"),
            ("a\x1b[2J", "control character"),
        ] {
            let err = check_name(bad).unwrap_err();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
        assert!(check_name(&"x".repeat(256)).unwrap_err().contains("longer"));
    }
}
