//! The bytes a fairness flow moves and how its receiver checks and counts
//! them.
//!
//! A flow is time-bounded, not size-bounded, so there is no file and no
//! final hash to compare: instead every received byte is compared with the
//! byte the sender must have sent at that stream offset (BENCH.md: "verify
//! what you move" — a per-offset comparison is the stricter check). The
//! stream is an endless sequence of [`CHUNK`]-byte chunks: one ChaCha8
//! block from the flow's seed, XORed word by word with a mask derived from
//! the chunk's index. Making or checking a chunk costs one pass over
//! memory, and a dropped, repeated, reordered or misrouted chunk (each flow
//! of a run gets its own seed) fails the check.
//!
//! [`Bins`] counts delivered bytes per interval of a shared clock (the
//! run's start), which the receivers report as JSON lines.

use std::time::Duration;

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Bytes per chunk: the unit senders write.
pub const CHUNK: usize = 64 << 10;

/// The endless stream of one seed.
#[derive(Debug, Clone)]
pub struct Stream {
    base: Vec<u64>,
}

impl Stream {
    pub fn new(seed: u64) -> Stream {
        let mut bytes = vec![0u8; CHUNK];
        ChaCha8Rng::seed_from_u64(seed).fill_bytes(&mut bytes);
        let base = bytes.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes"))).collect();
        Stream { base }
    }

    /// Writes chunk `i` into `out` (`CHUNK` bytes).
    pub fn fill(&self, i: u64, out: &mut [u8]) {
        // splitmix64's increment: consecutive chunks get unrelated masks.
        let mask = (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        for (dst, w) in out[..CHUNK].chunks_exact_mut(8).zip(&self.base) {
            dst.copy_from_slice(&(w ^ mask).to_le_bytes());
        }
    }
}

/// Compares received bytes with the stream, in order.
#[derive(Debug)]
pub struct Verifier {
    stream: Stream,
    expected: Vec<u8>,
    /// Bytes verified so far (the stream offset of the next byte).
    offset: u64,
}

impl Verifier {
    pub fn new(seed: u64) -> Verifier {
        let stream = Stream::new(seed);
        let mut expected = vec![0u8; CHUNK];
        stream.fill(0, &mut expected);
        Verifier { stream, expected, offset: 0 }
    }

    /// Bytes verified so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Checks the next `data.len()` bytes of the stream; on a mismatch
    /// returns the stream offset of the first wrong byte.
    pub fn check(&mut self, mut data: &[u8]) -> Result<(), u64> {
        while !data.is_empty() {
            let at = (self.offset % CHUNK as u64) as usize;
            let n = data.len().min(CHUNK - at);
            if data[..n] != self.expected[at..at + n] {
                let first = data[..n].iter().zip(&self.expected[at..]).position(|(a, b)| a != b).unwrap_or(0);
                return Err(self.offset + first as u64);
            }
            self.offset += n as u64;
            data = &data[n..];
            if at + n == CHUNK {
                self.stream.fill(self.offset / CHUNK as u64, &mut self.expected);
            }
        }
        Ok(())
    }
}

/// Bytes delivered per interval of the run, `[k·interval, (k+1)·interval)`
/// after the run's start; bytes after the last interval are counted apart
/// (the flow is over then; they are not part of any figure).
#[derive(Debug, Clone)]
pub struct Bins {
    interval: Duration,
    pub counts: Vec<u64>,
    pub after_end: u64,
}

impl Bins {
    /// `n` intervals of `interval` each.
    pub fn new(interval: Duration, n: usize) -> Bins {
        Bins { interval, counts: vec![0; n], after_end: 0 }
    }

    /// Counts `bytes` that arrived `since_start` after the run's start
    /// (bytes before it, which a sender that starts on time never sends,
    /// go to the first interval).
    pub fn add(&mut self, since_start: Duration, bytes: u64) {
        let k = (since_start.as_secs_f64() / self.interval.as_secs_f64()) as usize;
        match self.counts.get_mut(k) {
            Some(c) => *c += bytes,
            None => self.after_end += bytes,
        }
    }

    /// One JSON line per interval: `{"i":K,"t":END_SECONDS,"bytes":N}`.
    pub fn json_lines(&self) -> String {
        let step = self.interval.as_secs_f64();
        self.counts
            .iter()
            .enumerate()
            .map(|(i, b)| format!("{{\"i\":{i},\"t\":{:.3},\"bytes\":{b}}}\n", (i + 1) as f64 * step))
            .collect()
    }
}

/// Reads the interval lines [`Bins::json_lines`] wrote, in order; other
/// lines (a summary) are skipped.
pub fn parse_bins(text: &str) -> anyhow::Result<Vec<u64>> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("{\"i\":")) {
        let i = json_u64(line, "i").ok_or_else(|| anyhow::anyhow!("bad interval line {line:?}"))?;
        let b = json_u64(line, "bytes").ok_or_else(|| anyhow::anyhow!("bad interval line {line:?}"))?;
        if i as usize != out.len() {
            anyhow::bail!("interval {i} out of order in the receiver's report");
        }
        out.push(b);
    }
    Ok(out)
}

/// The unsigned integer field `key` of a flat one-line JSON object.
pub fn json_u64(line: &str, key: &str) -> Option<u64> {
    json_field(line, key)?.parse().ok()
}

/// The number field `key` of a flat one-line JSON object.
pub fn json_f64(line: &str, key: &str) -> Option<f64> {
    json_field(line, key)?.parse().ok()
}

fn json_field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!("\"{key}\":");
    let at = line.find(&pat)? + pat.len();
    let rest = &line[at..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(seed: u64, chunks: u64) -> Vec<u8> {
        let s = Stream::new(seed);
        let mut out = vec![0u8; CHUNK * chunks as usize];
        for i in 0..chunks {
            s.fill(i, &mut out[i as usize * CHUNK..]);
        }
        out
    }

    #[test]
    fn verifier_accepts_the_stream_in_any_read_sizes() {
        let data = bytes(5, 3);
        let mut v = Verifier::new(5);
        let mut at = 0;
        for n in [1, 7, CHUNK - 8, CHUNK + 3, 1000].into_iter().cycle() {
            let end = (at + n).min(data.len());
            v.check(&data[at..end]).unwrap();
            at = end;
            if at == data.len() {
                break;
            }
        }
        assert_eq!(v.offset(), data.len() as u64);
    }

    #[test]
    fn verifier_names_the_first_wrong_byte() {
        let mut data = bytes(5, 2);
        data[CHUNK + 10] ^= 0x40;
        let mut v = Verifier::new(5);
        assert_eq!(v.check(&data), Err(CHUNK as u64 + 10));
    }

    #[test]
    fn another_flows_stream_or_a_skipped_chunk_fails() {
        let mut v = Verifier::new(5);
        assert_eq!(v.check(&bytes(6, 1)[..100]), Err(0));
        let data = bytes(5, 3);
        let mut v = Verifier::new(5);
        v.check(&data[..CHUNK]).unwrap();
        assert!(v.check(&data[2 * CHUNK..]).is_err(), "a missing chunk went unnoticed");
    }

    #[test]
    fn bins_count_by_interval_and_set_late_bytes_apart() {
        let mut b = Bins::new(Duration::from_millis(500), 4);
        b.add(Duration::from_millis(10), 100);
        b.add(Duration::from_millis(499), 1);
        b.add(Duration::from_millis(500), 7);
        b.add(Duration::from_millis(1999), 3);
        b.add(Duration::from_millis(2000), 50);
        assert_eq!(b.counts, vec![101, 7, 0, 3]);
        assert_eq!(b.after_end, 50);
        let text = b.json_lines() + "{\"summary\":1}\n";
        assert!(text.starts_with("{\"i\":0,\"t\":0.500,\"bytes\":101}\n"), "{text}");
        assert_eq!(parse_bins(&text).unwrap(), vec![101, 7, 0, 3]);
    }

    #[test]
    fn json_fields_are_read_from_flat_lines() {
        let l = "{\"verified\":123,\"srtt_ms\":51.5,\"x\":1}";
        assert_eq!(json_u64(l, "verified"), Some(123));
        assert_eq!(json_f64(l, "srtt_ms"), Some(51.5));
        assert_eq!(json_u64(l, "missing"), None);
    }
}
