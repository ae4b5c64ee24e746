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

/// Chunks as `Bytes` for zero-copy writes (`write_chunk`), made in buffers
/// reused once the transport has released them ([`manyfold::BufferPool`]),
/// as an application that keeps its own buffers would: a chunk costs the
/// same one pass over warm memory that `Pattern::fill` costs the rows that
/// copy, not a fresh allocation's page faults and a second pass (which
/// charged the zero-copy rows ~0.14 s/GB of sender CPU more than the others).
#[derive(Debug)]
pub struct ChunkPool(manyfold::BufferPool);

/// Chunks the pool remembers: more than a 64 MiB send buffer holds.
pub const POOL_CHUNKS: usize = 128;

impl Default for ChunkPool {
    fn default() -> Self {
        ChunkPool(manyfold::BufferPool::new(CHUNK, POOL_CHUNKS))
    }
}

impl ChunkPool {
    /// Chunk `i` of `pattern`.
    pub fn chunk(&mut self, pattern: &Pattern, i: u64) -> bytes::Bytes {
        let mut buf = self.0.take(CHUNK);
        let n = pattern.fill(i, &mut buf);
        buf.truncate(n);
        self.0.keep(buf)
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
    fn a_pooled_chunk_is_the_chunk_filled_into_a_slice() {
        let p = Pattern::new(3, 2 * CHUNK as u64 + 1000);
        let mut pool = ChunkPool::default();
        let mut out = vec![0u8; CHUNK];
        for i in 0..p.chunks() {
            let n = p.fill(i, &mut out);
            assert_eq!(&pool.chunk(&p, i)[..], &out[..n], "chunk {i}");
        }
    }

    #[test]
    fn a_pool_reuses_a_chunk_only_once_the_transport_released_it() {
        let p = Pattern::new(3, 4 * CHUNK as u64);
        let mut pool = ChunkPool::default();
        let held = pool.chunk(&p, 0);
        let other = pool.chunk(&p, 1);
        assert_ne!(held.as_ptr(), other.as_ptr(), "chunk 0 is still held");
        let at = held.as_ptr();
        drop(held);
        let next = pool.chunk(&p, 2);
        assert_eq!(next.as_ptr(), at, "chunk 0's buffer, released, made chunk 2");
        let mut want = vec![0u8; CHUNK];
        p.fill(2, &mut want);
        assert_eq!(&next[..], &want[..]);
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
