//! The bytes the soak moves and their check (BENCH.md: verify what you
//! move). Everything is sent as *frames*: a 16-byte header (magic, length,
//! id) and then `len` bytes that are a function of the id and their offset
//! alone (splitmix64 of both), so a receiver checks every byte as it
//! arrives, whatever the read boundaries, without any help from the sender.
//!
//! Frames on one stream carry consecutive ids: a receiver that knows the
//! first (or takes it from the first header) notices a frame lost,
//! repeated or reordered, and a stream that ends inside a frame.

/// "MFSK", the first four bytes of every frame.
pub const MAGIC: u32 = 0x4d46_534b;
/// Header bytes: magic (u32), payload length (u32), id (u64), big-endian.
pub const HEADER: usize = 16;

/// splitmix64's finalizer: the payload's word `i` of frame `id`.
fn word(id: u64, i: u64) -> u64 {
    let mut z = (id ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The whole frame `id` with `len` payload bytes.
pub fn frame(id: u64, len: u32) -> Vec<u8> {
    let len = len as usize;
    let mut v = Vec::with_capacity(HEADER + len + 8);
    v.extend_from_slice(&MAGIC.to_be_bytes());
    v.extend_from_slice(&(len as u32).to_be_bytes());
    v.extend_from_slice(&id.to_be_bytes());
    for i in 0..len.div_ceil(8) as u64 {
        v.extend_from_slice(&word(id, i).to_le_bytes());
    }
    v.truncate(HEADER + len);
    v
}

/// A frame's identity, once its header has been read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    pub id: u64,
    pub len: u32,
}

/// Checks a stream of frames as it arrives.
#[derive(Debug)]
pub struct FrameCheck {
    head: [u8; HEADER],
    have: usize,
    /// The frame being read and how many of its payload bytes have come.
    body: Option<(Frame, u64)>,
    /// The id the next frame must carry (`None`: any, for the first).
    next_id: Option<u64>,
    max_len: u32,
    first: Option<Frame>,
    last: Option<Frame>,
    frames: u64,
}

impl FrameCheck {
    /// A check whose first frame must be `first_id` (any if `None`) and
    /// whose payloads are at most `max_len` bytes.
    pub fn new(first_id: Option<u64>, max_len: u32) -> Self {
        FrameCheck {
            head: [0; HEADER],
            have: 0,
            body: None,
            next_id: first_id,
            max_len,
            first: None,
            last: None,
            frames: 0,
        }
    }

    /// Checks the next bytes of the stream. Every byte that passes has been
    /// compared with what it must be.
    pub fn feed(&mut self, mut data: &[u8]) -> Result<(), String> {
        while !data.is_empty() {
            match self.body {
                None => {
                    let n = (HEADER - self.have).min(data.len());
                    self.head[self.have..self.have + n].copy_from_slice(&data[..n]);
                    self.have += n;
                    data = &data[n..];
                    if self.have == HEADER {
                        self.start_frame()?;
                    }
                }
                Some((f, off)) => {
                    let n = ((u64::from(f.len) - off) as usize).min(data.len());
                    for (k, &got) in data[..n].iter().enumerate() {
                        let at = off + k as u64;
                        let want = word(f.id, at / 8).to_le_bytes()[(at % 8) as usize];
                        if got != want {
                            return Err(format!(
                                "frame {:#x}: payload byte {at} of {} is {got:#04x}, expected {want:#04x}",
                                f.id, f.len
                            ));
                        }
                    }
                    data = &data[n..];
                    self.body = Some((f, off + n as u64));
                    if off + n as u64 == u64::from(f.len) {
                        self.end_frame(f);
                    }
                }
            }
        }
        Ok(())
    }

    fn start_frame(&mut self) -> Result<(), String> {
        let h = &self.head;
        let magic = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        let len = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
        let id = u64::from_be_bytes(h[8..16].try_into().expect("8 bytes"));
        if magic != MAGIC {
            return Err(format!("frame {} (after {:?}): bad magic {magic:#010x}", self.frames, self.last));
        }
        if len > self.max_len {
            return Err(format!("frame {id:#x}: length {len} above the maximum {}", self.max_len));
        }
        if let Some(want) = self.next_id.filter(|&w| w != id) {
            return Err(format!("frame id {id:#x} where {want:#x} was due (lost, repeated or reordered)"));
        }
        let f = Frame { id, len };
        self.first.get_or_insert(f);
        self.have = 0;
        self.body = Some((f, 0));
        if len == 0 {
            self.end_frame(f);
        }
        Ok(())
    }

    fn end_frame(&mut self, f: Frame) {
        self.body = None;
        self.frames += 1;
        self.last = Some(f);
        self.next_id = Some(f.id.wrapping_add(1));
    }

    /// Whether the stream may end here: not inside a header or a payload.
    pub fn at_boundary(&self) -> bool {
        self.body.is_none() && self.have == 0
    }

    /// Complete frames checked so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    pub fn first(&self) -> Option<Frame> {
        self.first
    }

    pub fn last(&self) -> Option<Frame> {
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_pass_whatever_the_read_boundaries() {
        let mut stream = frame(10, 1000);
        stream.extend(frame(11, 0));
        stream.extend(frame(12, 7));
        for step in [1, 3, 16, 17, 1000, 5000] {
            let mut c = FrameCheck::new(Some(10), 4096);
            for piece in stream.chunks(step) {
                c.feed(piece).unwrap();
            }
            assert!(c.at_boundary());
            assert_eq!(c.frames(), 3);
            assert_eq!(c.first(), Some(Frame { id: 10, len: 1000 }));
            assert_eq!(c.last(), Some(Frame { id: 12, len: 7 }));
        }
    }

    #[test]
    fn a_wrong_byte_a_gap_or_a_cut_is_caught() {
        let mut f = frame(5, 100);
        f[HEADER + 50] ^= 0x10;
        assert!(FrameCheck::new(None, 4096).feed(&f).unwrap_err().contains("payload byte 50"));

        let mut gap = frame(5, 10);
        gap.extend(frame(7, 10));
        assert!(FrameCheck::new(None, 4096).feed(&gap).unwrap_err().contains("was due"));
        assert!(FrameCheck::new(Some(4), 4096).feed(&frame(5, 1)).is_err());

        let mut c = FrameCheck::new(None, 4096);
        c.feed(&frame(5, 100)[..60]).unwrap();
        assert!(!c.at_boundary());

        assert!(FrameCheck::new(None, 99).feed(&frame(5, 100)).unwrap_err().contains("maximum"));
        let mut bad = frame(5, 1);
        bad[0] = 0;
        assert!(FrameCheck::new(None, 99).feed(&bad).unwrap_err().contains("magic"));
    }

    #[test]
    fn payloads_differ_by_id() {
        assert_ne!(frame(1, 64)[HEADER..], frame(2, 64)[HEADER..]);
        assert_eq!(frame(1, 64), frame(1, 64));
    }
}
