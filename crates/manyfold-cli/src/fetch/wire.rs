//! Messages of the segmented download (layout in [`super`]): each is one
//! whole message on stream 0 (spec §13.5), starting with a type byte.
//! Requests go from `fetch` to `serve`, replies back. Every message has an
//! exact length that its fields imply, checked once, up front; nothing a
//! peer sends can make [`Request::parse`] or [`Reply::parse`] panic or
//! allocate more than the message it came in.

use std::ops::Range;

pub use crate::transfer::wire::{check_name, HASH_LEN, MAX_NAME};

/// Version of the manifest request (the only message that carries one:
/// everything else on the connection follows from it).
pub const VERSION: u8 = 1;
/// Smallest and largest segment: large segments keep per-message costs
/// small, and the largest leaves room under the transport's 16 MiB
/// `max_message` (spec §13.5).
pub const MIN_SEGMENT: u32 = 4096;
pub const MAX_SEGMENT: u32 = 8 << 20;
/// Most segments in a manifest: 8 MiB of hashes, so the manifest too fits
/// one message. With the largest segments that is 2 TiB.
pub const MAX_SEGMENTS: u32 = 1 << 18;
/// Longest error text, in bytes of UTF-8.
pub const MAX_TEXT: usize = 4096;

/// Type bytes: upper case from the client, lower case from the server.
pub mod kind {
    pub const MANIFEST_REQUEST: u8 = b'M';
    pub const SEGMENT_REQUEST: u8 = b'S';
    pub const MANIFEST: u8 = b'm';
    pub const SEGMENT: u8 = b'd';
    pub const ERROR: u8 = b'e';
}

/// Field ranges of each message (big-endian integers).
mod field {
    use std::ops::Range;
    // manifest request: 'M' | version | name length | name
    pub const MR_VERSION: usize = 1;
    pub const MR_NAME_LEN: Range<usize> = 2..4;
    pub const MR_FIXED: usize = 4;
    // segment request: 'S' | index
    pub const SR_INDEX: Range<usize> = 1..5;
    pub const SR_LEN: usize = 5;
    // manifest: 'm' | name length | size | segment size | count | file hash | name | hashes
    pub const M_NAME_LEN: Range<usize> = 1..3;
    pub const M_SIZE: Range<usize> = 3..11;
    pub const M_SEGMENT: Range<usize> = 11..15;
    pub const M_COUNT: Range<usize> = 15..19;
    pub const M_HASH: Range<usize> = 19..51;
    pub const M_FIXED: usize = 51;
    // segment: 'd' | index | length | data
    pub const S_INDEX: Range<usize> = 1..5;
    pub const S_LEN: Range<usize> = 5..9;
    pub const S_FIXED: usize = 9;
    // error: 'e' | length | text
    pub const E_LEN: Range<usize> = 1..3;
    pub const E_FIXED: usize = 3;
}

/// Bytes before a segment's data.
pub const SEGMENT_HEADER: usize = field::S_FIXED;

/// Why a message could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("empty message")]
    Empty,
    #[error("unknown message type {0:#04x}")]
    UnknownType(u8),
    #[error("{what} of {len} bytes, expected {expected}")]
    Length { what: &'static str, len: usize, expected: usize },
    #[error("unsupported fetch protocol version {0} (this side speaks version {VERSION})")]
    Version(u8),
    #[error("file name of {0} bytes (1 to {MAX_NAME} allowed)")]
    NameLength(usize),
    #[error("{0} is not valid UTF-8")]
    NotUtf8(&'static str),
    #[error("segment size {0} refused (from {MIN_SEGMENT} to {MAX_SEGMENT} bytes)")]
    SegmentSize(u32),
    #[error("{count} segments do not fit a file of {size} bytes in segments of {segment} (at most {MAX_SEGMENTS})")]
    SegmentCount { count: u32, size: u64, segment: u32 },
    #[error("segment data of {0} bytes (1 to {MAX_SEGMENT} allowed)")]
    SegmentLength(u32),
    #[error("error text of {0} bytes (at most {MAX_TEXT})")]
    TextLength(usize),
}

/// What the client asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// The manifest of the file `name`; later segment requests on this
    /// connection are for that file.
    Manifest { name: String },
    /// One segment of the file of the last manifest given on this connection.
    Segment { index: u32 },
}

/// What a server says about a file: enough to fetch it from anyone who
/// gives the same manifest and to check every segment on arrival.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub name: String,
    pub size: u64,
    pub segment_size: u32,
    /// BLAKE3 of the whole file.
    pub hash: [u8; HASH_LEN],
    /// BLAKE3 of each segment, in order.
    pub segments: Vec<[u8; HASH_LEN]>,
}

/// What a server answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply<'a> {
    Manifest(Manifest),
    Segment {
        index: u32,
        data: &'a [u8],
    },
    /// The request could not be served; the text says why.
    Error(String),
}

fn be16(m: &[u8], r: Range<usize>) -> usize {
    usize::from(u16::from_be_bytes(m[r].try_into().expect("two bytes")))
}

fn be32(m: &[u8], r: Range<usize>) -> u32 {
    u32::from_be_bytes(m[r].try_into().expect("four bytes"))
}

/// `len` must be exactly `expected`.
fn exact(what: &'static str, m: &[u8], expected: usize) -> Result<(), WireError> {
    if m.len() == expected {
        Ok(())
    } else {
        Err(WireError::Length { what, len: m.len(), expected })
    }
}

/// `m` must hold at least its fixed part.
fn fixed(what: &'static str, m: &[u8], len: usize) -> Result<(), WireError> {
    if m.len() < len {
        Err(WireError::Length { what, len: m.len(), expected: len })
    } else {
        Ok(())
    }
}

impl Request {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Request::Manifest { name } => {
                let name = name.as_bytes();
                let mut v = Vec::with_capacity(field::MR_FIXED + name.len());
                v.push(kind::MANIFEST_REQUEST);
                v.push(VERSION);
                v.extend_from_slice(&(name.len() as u16).to_be_bytes());
                v.extend_from_slice(name);
                v
            }
            Request::Segment { index } => {
                let mut v = vec![kind::SEGMENT_REQUEST];
                v.extend_from_slice(&index.to_be_bytes());
                v
            }
        }
    }

    /// Reads one request. The name is checked for length and encoding
    /// here, for safety by [`check_name`].
    pub fn parse(m: &[u8]) -> Result<Request, WireError> {
        match *m.first().ok_or(WireError::Empty)? {
            kind::MANIFEST_REQUEST => {
                const WHAT: &str = "manifest request";
                fixed(WHAT, m, field::MR_FIXED)?;
                if m[field::MR_VERSION] != VERSION {
                    return Err(WireError::Version(m[field::MR_VERSION]));
                }
                let n = be16(m, field::MR_NAME_LEN);
                if n == 0 || n > MAX_NAME {
                    return Err(WireError::NameLength(n));
                }
                exact(WHAT, m, field::MR_FIXED + n)?;
                let name = std::str::from_utf8(&m[field::MR_FIXED..]).map_err(|_| WireError::NotUtf8("file name"))?;
                Ok(Request::Manifest { name: name.to_string() })
            }
            kind::SEGMENT_REQUEST => {
                exact("segment request", m, field::SR_LEN)?;
                Ok(Request::Segment { index: be32(m, field::SR_INDEX) })
            }
            t => Err(WireError::UnknownType(t)),
        }
    }
}

impl Manifest {
    pub fn count(&self) -> u32 {
        self.segments.len() as u32
    }

    /// Where segment `index` starts in the file.
    pub fn offset(&self, index: u32) -> u64 {
        u64::from(index) * u64::from(self.segment_size)
    }

    /// Bytes in segment `index`: the segment size, less for the last.
    pub fn segment_len(&self, index: u32) -> u64 {
        let start = self.offset(index);
        self.size.saturating_sub(start).min(u64::from(self.segment_size))
    }

    /// The segment size a server uses for a file of `size` bytes when it
    /// prefers `wanted`: doubled until the manifest fits [`MAX_SEGMENTS`];
    /// `None` if even [`MAX_SEGMENT`] is too small.
    pub fn segment_size_for(size: u64, wanted: u32) -> Option<u32> {
        let mut segment = wanted.clamp(MIN_SEGMENT, MAX_SEGMENT);
        while size.div_ceil(u64::from(segment)) > u64::from(MAX_SEGMENTS) {
            segment = segment.checked_mul(2).filter(|&s| s <= MAX_SEGMENT)?;
        }
        Some(segment)
    }

    /// The same file in the same segments, whoever described it.
    pub fn same_content(&self, other: &Manifest) -> bool {
        (self.size, self.segment_size, self.hash, &self.segments)
            == (other.size, other.segment_size, other.hash, &other.segments)
    }
}

impl Reply<'_> {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Reply::Manifest(m) => {
                let name = m.name.as_bytes();
                let mut v = Vec::with_capacity(field::M_FIXED + name.len() + HASH_LEN * m.segments.len());
                v.push(kind::MANIFEST);
                v.extend_from_slice(&(name.len() as u16).to_be_bytes());
                v.extend_from_slice(&m.size.to_be_bytes());
                v.extend_from_slice(&m.segment_size.to_be_bytes());
                v.extend_from_slice(&m.count().to_be_bytes());
                v.extend_from_slice(&m.hash);
                v.extend_from_slice(name);
                for h in &m.segments {
                    v.extend_from_slice(h);
                }
                v
            }
            Reply::Segment { index, data } => {
                let mut v = Vec::with_capacity(SEGMENT_HEADER + data.len());
                v.extend_from_slice(&segment_header(*index, data.len() as u32));
                v.extend_from_slice(data);
                v
            }
            Reply::Error(text) => {
                let mut end = text.len().min(MAX_TEXT);
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                let text = &text.as_bytes()[..end];
                let mut v = Vec::with_capacity(field::E_FIXED + text.len());
                v.push(kind::ERROR);
                v.extend_from_slice(&(text.len() as u16).to_be_bytes());
                v.extend_from_slice(text);
                v
            }
        }
    }

    /// Reads one reply. A manifest is checked for consistency (segment
    /// size, count against size, exact length); a segment's index and
    /// length against a manifest are the caller's to check.
    pub fn parse(m: &[u8]) -> Result<Reply<'_>, WireError> {
        match *m.first().ok_or(WireError::Empty)? {
            kind::MANIFEST => {
                const WHAT: &str = "manifest";
                fixed(WHAT, m, field::M_FIXED)?;
                let n = be16(m, field::M_NAME_LEN);
                let size = u64::from_be_bytes(m[field::M_SIZE].try_into().expect("eight bytes"));
                let segment = be32(m, field::M_SEGMENT);
                let count = be32(m, field::M_COUNT);
                if n == 0 || n > MAX_NAME {
                    return Err(WireError::NameLength(n));
                }
                if !(MIN_SEGMENT..=MAX_SEGMENT).contains(&segment) {
                    return Err(WireError::SegmentSize(segment));
                }
                // The count is what the size implies, so it bounds nothing
                // the size does not; and the size is bounded by MAX_SEGMENTS.
                if u64::from(count) != size.div_ceil(u64::from(segment)) || count > MAX_SEGMENTS {
                    return Err(WireError::SegmentCount { count, size, segment });
                }
                exact(WHAT, m, field::M_FIXED + n + HASH_LEN * count as usize)?;
                let name = std::str::from_utf8(&m[field::M_FIXED..field::M_FIXED + n])
                    .map_err(|_| WireError::NotUtf8("file name"))?;
                let hash = m[field::M_HASH].try_into().expect("32 bytes");
                let segments = m[field::M_FIXED + n..]
                    .chunks_exact(HASH_LEN)
                    .map(|h| h.try_into().expect("chunks of 32"))
                    .collect();
                Ok(Reply::Manifest(Manifest { name: name.to_string(), size, segment_size: segment, hash, segments }))
            }
            kind::SEGMENT => {
                const WHAT: &str = "segment";
                fixed(WHAT, m, field::S_FIXED)?;
                let len = be32(m, field::S_LEN);
                if len == 0 || len > MAX_SEGMENT {
                    return Err(WireError::SegmentLength(len));
                }
                exact(WHAT, m, field::S_FIXED + len as usize)?;
                Ok(Reply::Segment { index: be32(m, field::S_INDEX), data: &m[field::S_FIXED..] })
            }
            kind::ERROR => {
                const WHAT: &str = "error reply";
                fixed(WHAT, m, field::E_FIXED)?;
                let n = be16(m, field::E_LEN);
                if n > MAX_TEXT {
                    return Err(WireError::TextLength(n));
                }
                exact(WHAT, m, field::E_FIXED + n)?;
                let text = std::str::from_utf8(&m[field::E_FIXED..]).map_err(|_| WireError::NotUtf8("error text"))?;
                // The text ends up on a terminal: no control characters.
                let text = text.chars().map(|c| if c.is_control() { '\u{fffd}' } else { c }).collect();
                Ok(Reply::Error(text))
            }
            t => Err(WireError::UnknownType(t)),
        }
    }
}

/// The bytes before a segment's data, so a server can read the data
/// straight into the message after them.
pub fn segment_header(index: u32, len: u32) -> [u8; SEGMENT_HEADER] {
    let mut h = [0u8; SEGMENT_HEADER];
    h[0] = kind::SEGMENT;
    h[field::S_INDEX].copy_from_slice(&index.to_be_bytes());
    h[field::S_LEN].copy_from_slice(&len.to_be_bytes());
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> Manifest {
        Manifest { name: "f".into(), size: 5000, segment_size: 4096, hash: [7; 32], segments: vec![[1; 32], [2; 32]] }
    }

    #[test]
    fn requests_literal_bytes() {
        assert_eq!(Request::Manifest { name: "a.bin".into() }.encode(), [b'M', 1, 0, 5, b'a', b'.', b'b', b'i', b'n']);
        assert_eq!(Request::Segment { index: 0x0102_0304 }.encode(), [b'S', 1, 2, 3, 4]);
        assert_eq!(Request::parse(&[b'S', 0, 0, 1, 0]), Ok(Request::Segment { index: 256 }));
    }

    #[test]
    fn replies_literal_bytes() {
        let mut want = vec![b'm', 0, 1, 0, 0, 0, 0, 0, 0, 0x13, 0x88, 0, 0, 0x10, 0, 0, 0, 0, 2];
        want.extend_from_slice(&[7; 32]);
        want.push(b'f');
        want.extend_from_slice(&[1; 32]);
        want.extend_from_slice(&[2; 32]);
        assert_eq!(Reply::Manifest(manifest()).encode(), want);
        assert_eq!(Reply::parse(&want), Ok(Reply::Manifest(manifest())));
        let seg = Reply::Segment { index: 3, data: b"xy" };
        assert_eq!(seg.encode(), [b'd', 0, 0, 0, 3, 0, 0, 0, 2, b'x', b'y']);
        assert_eq!(Reply::Error("no".into()).encode(), [b'e', 0, 2, b'n', b'o']);
    }

    #[test]
    fn round_trips() {
        for r in [Request::Manifest { name: "naïve name.txt".into() }, Request::Segment { index: u32::MAX }] {
            assert_eq!(Request::parse(&r.encode()), Ok(r));
        }
        let empty = Manifest { size: 0, segments: vec![], ..manifest() };
        for r in [
            Reply::Manifest(manifest()),
            Reply::Manifest(empty),
            Reply::Segment { index: 9, data: &[5; 4096] },
            Reply::Error("not found: x".into()),
            Reply::Error(String::new()),
        ] {
            assert_eq!(Reply::parse(&r.encode()), Ok(r));
        }
    }

    #[test]
    fn every_truncated_prefix_and_any_trailing_byte_is_rejected() {
        let requests = [Request::Manifest { name: "file".into() }.encode(), Request::Segment { index: 1 }.encode()];
        for bytes in &requests {
            for n in 0..bytes.len() {
                assert!(Request::parse(&bytes[..n]).is_err(), "{n} of {bytes:?}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(Request::parse(&longer).is_err());
        }
        let replies = [
            Reply::Manifest(manifest()).encode(),
            Reply::Segment { index: 1, data: b"abc" }.encode(),
            Reply::Error("why".into()).encode(),
        ];
        for bytes in &replies {
            for n in 0..bytes.len() {
                assert!(Reply::parse(&bytes[..n]).is_err(), "{n} of {bytes:?}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(Reply::parse(&longer).is_err());
        }
    }

    #[test]
    fn malformed_messages_are_named() {
        let err = |m: &[u8]| Reply::parse(m).unwrap_err().to_string();
        assert_eq!(Request::parse(&[]), Err(WireError::Empty));
        assert_eq!(Request::parse(b"X"), Err(WireError::UnknownType(b'X')));
        assert_eq!(Request::parse(&[b'M', 2, 0, 1, b'a']), Err(WireError::Version(2)));
        assert_eq!(Request::parse(&[b'M', 1, 0, 0]), Err(WireError::NameLength(0)));
        assert_eq!(Request::parse(&[b'M', 1, 1, 0]), Err(WireError::NameLength(256)));
        assert_eq!(Request::parse(&[b'M', 1, 0, 1, 0xff]), Err(WireError::NotUtf8("file name")));

        // A manifest whose count disagrees with its size, or whose segment
        // size is out of range, is refused before anything is allocated.
        let good = Reply::Manifest(manifest()).encode();
        let mut bad = good.clone();
        bad[field::M_COUNT].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(err(&bad).contains("segments do not fit"), "{}", err(&bad));
        let mut bad = good.clone();
        bad[field::M_SEGMENT].copy_from_slice(&16u32.to_be_bytes());
        assert!(err(&bad).contains("segment size 16"));
        let mut bad = good.clone();
        bad[field::M_SIZE].copy_from_slice(&u64::MAX.to_be_bytes());
        assert!(err(&bad).contains("segments do not fit"));
        let huge = Manifest { size: u64::from(MAX_SEGMENTS) * 4096 + 1, segments: vec![], ..manifest() };
        let mut bad = Reply::Manifest(huge).encode();
        bad[field::M_COUNT].copy_from_slice(&(MAX_SEGMENTS + 1).to_be_bytes());
        assert!(err(&bad).contains("at most"));

        assert!(err(&[b'd', 0, 0, 0, 0, 0, 0, 0, 0]).contains("segment data of 0 bytes"));
        assert!(err(&[b'd', 0, 0, 0, 0, 0x01, 0, 0, 0]).contains("segment data of 16777216 bytes"));
        assert!(err(&[b'e', 0xff, 0xff]).contains("error text of 65535"));
        assert_eq!(Reply::parse(&[b'e', 0, 1, 0x1b]), Ok(Reply::Error("\u{fffd}".into())), "control characters");
        assert_eq!(Reply::parse(b"S\0\0\0\0"), Err(WireError::UnknownType(b'S')), "a request is not a reply");
    }

    #[test]
    fn segment_geometry() {
        let m = manifest();
        assert_eq!((m.count(), m.offset(1), m.segment_len(0), m.segment_len(1)), (2, 4096, 4096, 904));
        assert_eq!(Manifest::segment_size_for(10, 1 << 20), Some(1 << 20));
        assert_eq!(Manifest::segment_size_for(10, 1), Some(MIN_SEGMENT));
        let big = u64::from(MAX_SEGMENTS) * (1 << 20) + 1;
        assert_eq!(Manifest::segment_size_for(big, 1 << 20), Some(2 << 20));
        assert_eq!(Manifest::segment_size_for(u64::from(MAX_SEGMENTS) * u64::from(MAX_SEGMENT) + 1, 1 << 20), None);
        let long = "x".repeat(MAX_NAME);
        let bytes = Request::Manifest { name: long.clone() }.encode();
        assert_eq!(Request::parse(&bytes), Ok(Request::Manifest { name: long }));
    }
}
