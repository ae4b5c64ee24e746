//! A growable ring of bytes: the receive side's in-order store (spec §7.1).
//!
//! Data arriving in order is copied once into the ring and once out of it
//! by `read`; the ring's storage is reused, so the data path allocates
//! nothing per packet (the ring only grows, by doubling, while the amount
//! held grows; the caller bounds that amount). It starts small, sized to the
//! first data, so a session that receives a short request or a hello costs a
//! few hundred bytes here, not a bulk transfer's buffer (spec §15.3).

/// The smallest storage the ring allocates.
const MIN_CAPACITY: usize = 256;

#[derive(Debug, Default)]
pub(crate) struct ByteRing {
    buf: Vec<u8>,
    /// Index of the first held byte in `buf`.
    head: usize,
    len: usize,
}

impl ByteRing {
    pub fn len(&self) -> usize {
        self.len
    }

    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Appends `data`, growing the storage if it does not fit.
    pub fn push(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        if self.len + data.len() > self.buf.len() {
            self.grow(self.len + data.len());
        }
        let cap = self.buf.len();
        let tail = (self.head + self.len) % cap;
        let first = data.len().min(cap - tail);
        self.buf[tail..tail + first].copy_from_slice(&data[..first]);
        self.buf[..data.len() - first].copy_from_slice(&data[first..]);
        self.len += data.len();
    }

    /// Moves up to `out.len()` bytes from the front into `out`.
    pub fn read(&mut self, out: &mut [u8]) -> usize {
        let n = out.len().min(self.len);
        if n == 0 {
            return 0;
        }
        let cap = self.buf.len();
        let first = n.min(cap - self.head);
        out[..first].copy_from_slice(&self.buf[self.head..self.head + first]);
        out[first..n].copy_from_slice(&self.buf[..n - first]);
        self.head = (self.head + n) % cap;
        self.len -= n;
        if self.len == 0 {
            self.head = 0;
        }
        n
    }

    /// Drops up to `n` bytes from the front; returns how many.
    pub fn discard(&mut self, n: usize) -> usize {
        let n = n.min(self.len);
        if n == 0 {
            return 0;
        }
        self.head = (self.head + n) % self.buf.len();
        self.len -= n;
        if self.len == 0 {
            self.head = 0;
        }
        n
    }

    /// Drops everything held and releases the storage.
    pub fn clear(&mut self) {
        *self = ByteRing::default();
    }

    /// This ring emptied for a new connection's stream (issue 21, spec
    /// §15.3): its storage is kept if it is at most `max` bytes (a short
    /// session's), released otherwise. The old bytes stay in the storage
    /// but no call can read them: only what is pushed next is held.
    pub fn emptied(self, max: usize) -> ByteRing {
        if self.buf.len() > max {
            return ByteRing::default();
        }
        ByteRing { buf: self.buf, head: 0, len: 0 }
    }

    /// Reallocates to at least `need` bytes (a power of two, at least
    /// `MIN_CAPACITY` and at least twice the old size, so a growing transfer
    /// copies each byte O(1) times) with the held bytes moved to the start.
    fn grow(&mut self, need: usize) {
        let cap = need.next_power_of_two().max(MIN_CAPACITY).max(2 * self.buf.len());
        let mut buf = vec![0u8; cap];
        let old = self.buf.len();
        if old > 0 {
            let first = self.len.min(old - self.head);
            buf[..first].copy_from_slice(&self.buf[self.head..self.head + first]);
            buf[first..self.len].copy_from_slice(&self.buf[..self.len - first]);
        }
        self.buf = buf;
        self.head = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emptied_ring_keeps_small_storage_and_holds_nothing() {
        let mut r = ByteRing::default();
        r.push(&[1; 200]);
        let r = r.emptied(1024);
        assert_eq!((r.len(), r.capacity()), (0, MIN_CAPACITY));
        let mut r = r;
        r.push(b"abc");
        let mut out = [0u8; 8];
        assert_eq!(r.read(&mut out), 3);
        assert_eq!(&out[..3], b"abc", "only what was pushed after");
        r.push(&[2; 4000]);
        assert_eq!(r.emptied(1024).capacity(), 0, "a large ring is released");
    }

    #[test]
    fn bytes_come_out_in_order_across_the_wrap() {
        let mut r = ByteRing::default();
        let mut next_in = 0u8;
        let mut next_out = 0u8;
        let mut out = vec![0u8; 50_000];
        // Pushes and reads of varying sizes so the head wraps many times.
        for round in 0..200usize {
            let chunk: Vec<u8> = (0..(round * 37 % 3000 + 1))
                .map(|_| {
                    next_in = next_in.wrapping_add(1);
                    next_in
                })
                .collect();
            r.push(&chunk);
            let n = r.read(&mut out[..round * 53 % 2500]);
            for &b in &out[..n] {
                next_out = next_out.wrapping_add(1);
                assert_eq!(b, next_out, "round {round}");
            }
        }
        let n = r.read(&mut out);
        for &b in &out[..n] {
            next_out = next_out.wrapping_add(1);
            assert_eq!(b, next_out);
        }
        assert_eq!(next_in, next_out);
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn storage_is_reused_once_it_is_large_enough() {
        let mut r = ByteRing::default();
        let data = [7u8; 1400];
        let mut out = [0u8; 1400];
        r.push(&data);
        r.push(&data);
        assert_eq!(r.read(&mut out), 1400);
        let cap = r.capacity();
        for _ in 0..10_000 {
            r.push(&data);
            assert_eq!(r.read(&mut out), 1400);
        }
        assert_eq!(r.capacity(), cap);
    }

    #[test]
    fn a_short_message_takes_small_storage() {
        let mut r = ByteRing::default();
        r.push(&[1u8; 16]);
        assert_eq!(r.capacity(), MIN_CAPACITY);
        r.push(&[2u8; 1000]);
        assert_eq!(r.capacity(), 1024, "the next power of two that holds 1016 bytes");
    }

    #[test]
    fn growing_keeps_wrapped_contents() {
        let mut r = ByteRing::default();
        let mut out = vec![0u8; 200_000];
        r.push(&[1u8; 60_000]);
        assert_eq!(r.read(&mut out[..50_000]), 50_000);
        // Wraps: 10 000 held at the end, 50 000 more go to the start.
        r.push(&[2u8; 50_000]);
        // Does not fit: grows and linearises.
        r.push(&[3u8; 100_000]);
        assert_eq!(r.read(&mut out), 160_000);
        assert!(out[..10_000].iter().all(|&b| b == 1));
        assert!(out[10_000..60_000].iter().all(|&b| b == 2));
        assert!(out[60_000..160_000].iter().all(|&b| b == 3));
    }
}
