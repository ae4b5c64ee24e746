//! The bytes every loopback row moves: a seeded pseudo-random stream made
//! in memory on the fly (no disk), and the BLAKE3 hash the receiver must
//! reproduce (BENCH.md: "verify what you move").
//!
//! Generating ChaCha8 for every byte would cost the sender about as much
//! CPU as kernel TCP spends moving them, so the stream is one 1 MiB ChaCha8
//! block (from the seed), and chunk `i` is that block with every 64-bit word
//! XORed with a constant derived from `i`: every chunk differs from every
//! other, so a misplaced, repeated or dropped chunk changes the hash, while
//! making a chunk costs one pass over memory. The scenario measures that
//! cost and prints it, since every row pays it.

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Bytes per chunk: the unit the senders generate and write.
pub const CHUNK: usize = 1 << 20;

/// The stream of `len` bytes for one seed.
#[derive(Debug, Clone)]
pub struct Pattern {
    base: Vec<u64>,
    len: u64,
}

impl Pattern {
    pub fn new(seed: u64, len: u64) -> Pattern {
        let mut bytes = vec![0u8; CHUNK];
        ChaCha8Rng::seed_from_u64(seed).fill_bytes(&mut bytes);
        let base = bytes.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes"))).collect();
        Pattern { base, len }
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    /// How many chunks the stream has (the last may be short).
    pub fn chunks(&self) -> u64 {
        self.len.div_ceil(CHUNK as u64)
    }

    /// Chunk `i`'s length, and the mask its words are XORed with
    /// (splitmix64's increment: consecutive chunks get unrelated masks).
    fn len_and_mask(&self, i: u64) -> (usize, u64) {
        let start = i * CHUNK as u64;
        let n = self.len.saturating_sub(start).min(CHUNK as u64) as usize;
        (n, (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    /// Writes chunk `i` into `out` (at least `CHUNK` bytes) and returns its
    /// length.
    pub fn fill(&self, i: u64, out: &mut [u8]) -> usize {
        let (n, mask) = self.len_and_mask(i);
        for (dst, w) in out[..CHUNK].chunks_exact_mut(8).zip(&self.base) {
            dst.copy_from_slice(&(w ^ mask).to_le_bytes());
        }
        n
    }

    /// Chunk `i` as `Bytes` for a zero-copy write (`write_chunk`), made in
    /// `buf`: its memory is reused once the transport has released every
    /// earlier chunk made there.
    pub fn chunk(&self, i: u64, buf: &mut bytes::BytesMut) -> bytes::Bytes {
        let (n, mask) = self.len_and_mask(i);
        buf.clear();
        buf.reserve(CHUNK);
        // Made 4 KiB at a time on the stack: a put per word costs more
        // than the transport's own work on the chunk.
        let mut block = [0u8; 4096];
        for words in self.base.chunks(block.len() / 8) {
            for (dst, w) in block.chunks_exact_mut(8).zip(words) {
                dst.copy_from_slice(&(w ^ mask).to_le_bytes());
            }
            buf.extend_from_slice(&block[..words.len() * 8]);
        }
        buf.truncate(n);
        buf.split().freeze()
    }

    /// The BLAKE3 hash of the whole stream, in hex.
    pub fn hash(&self) -> String {
        let mut h = blake3::Hasher::new();
        let mut buf = vec![0u8; CHUNK];
        for i in 0..self.chunks() {
            let n = self.fill(i, &mut buf);
            h.update(&buf[..n]);
        }
        h.finalize().to_hex().to_string()
    }
}

/// Starts every error [`Check::finish`] returns: a scenario that tolerates
/// failed transfers (a timeout, an abandoned connection) still stops on
/// wrong bytes, which are never a number (BENCH.md).
pub const MISMATCH: &str = "verification failed";

/// Checks a received stream as it arrives: hashes it, counts it, and at the
/// end compares both with what the sender was told to send.
#[derive(Debug)]
pub struct Check {
    hasher: blake3::Hasher,
    got: u64,
}

impl Default for Check {
    fn default() -> Self {
        Check { hasher: blake3::Hasher::new(), got: 0 }
    }
}

impl Check {
    pub fn update(&mut self, bytes: &[u8]) {
        self.hasher.update(bytes);
        self.got += bytes.len() as u64;
    }

    pub fn finish(self, expect_len: u64, expect_hash: &str) -> anyhow::Result<()> {
        if self.got != expect_len {
            anyhow::bail!("{MISMATCH}: received {} bytes, expected {expect_len}", self.got);
        }
        let got = self.hasher.finalize().to_hex();
        if got.as_str() != expect_hash {
            anyhow::bail!("{MISMATCH}: hash mismatch: got {got}, expected {expect_hash}");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_as_bytes_is_the_chunk_filled_into_a_slice() {
        let p = Pattern::new(3, 2 * CHUNK as u64 + 1000);
        let mut buf = bytes::BytesMut::new();
        let mut out = vec![0u8; CHUNK];
        for i in 0..p.chunks() {
            let n = p.fill(i, &mut out);
            assert_eq!(&p.chunk(i, &mut buf)[..], &out[..n], "chunk {i}");
        }
    }

    #[test]
    fn chunks_differ_and_last_is_short() {
        let p = Pattern::new(7, 2 * CHUNK as u64 + 10);
        assert_eq!(p.chunks(), 3);
        let (mut a, mut b) = (vec![0u8; CHUNK], vec![0u8; CHUNK]);
        assert_eq!(p.fill(0, &mut a), CHUNK);
        assert_eq!(p.fill(2, &mut b), 10);
        assert_ne!(a[..10], b[..10]);
    }

    #[test]
    fn hash_depends_on_seed_and_length() {
        let h = Pattern::new(1, 3000).hash();
        assert_eq!(h, Pattern::new(1, 3000).hash());
        assert_ne!(h, Pattern::new(2, 3000).hash());
        assert_ne!(h, Pattern::new(1, 2999).hash());
    }

    #[test]
    fn check_rejects_wrong_bytes() {
        let p = Pattern::new(3, 100);
        let mut buf = vec![0u8; CHUNK];
        p.fill(0, &mut buf);
        let mut c = Check::default();
        c.update(&buf[..100]);
        assert!(c.finish(100, &p.hash()).is_ok());
        buf[50] ^= 1;
        let mut c = Check::default();
        c.update(&buf[..100]);
        assert!(c.finish(100, &p.hash()).unwrap_err().to_string().starts_with(MISMATCH));
        let mut c = Check::default();
        c.update(&buf[..99]);
        assert!(c.finish(100, &p.hash()).unwrap_err().to_string().starts_with(MISMATCH));
    }
}
