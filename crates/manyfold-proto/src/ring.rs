//! The receive side's in-order store (spec §7.1): bytes copied into a
//! growable ring, and large pieces kept as they arrived.
//!
//! Data arriving in order is copied once into the ring and once out of it
//! by `read`; the ring's storage is reused, so the data path allocates
//! nothing per packet (the ring only grows, by doubling, while the amount
//! held grows; the caller bounds that amount). It starts small, sized to the
//! first data, so a session that receives a short request or a hello costs a
//! few hundred bytes here, not a bulk transfer's buffer (spec §15.3).
//!
//! A large piece whose datagram the caller handed over as `Bytes`
//! ([`ByteRing::push_shared`], spec §7.2) is kept as a slice of it instead: `read`
//! copies it out once, and the copy into the ring is saved (issue 20: on
//! loopback's 64 KiB datagrams that copy was 15% of the receiver's CPU).

use std::collections::VecDeque;

use bytes::Bytes;

/// The smallest storage the ring allocates.
const MIN_CAPACITY: usize = 256;

/// What comes next, in order: bytes in the ring's storage, or a kept slice.
#[derive(Debug)]
enum Seg {
    Copied(usize),
    Shared(Bytes),
}

#[derive(Debug, Default)]
pub(crate) struct ByteRing {
    store: Store,
    /// The held bytes in order; empty while only copied bytes are held and
    /// none were ever kept as slices (then `store` alone is the order).
    segs: VecDeque<Seg>,
    len: usize,
}

impl ByteRing {
    pub fn len(&self) -> usize {
        self.len
    }

    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.store.buf.len()
    }

    /// Appends a copy of `data`.
    pub fn push(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        self.store.push(data);
        self.len += data.len();
        if !self.segs.is_empty() {
            match self.segs.back_mut() {
                Some(Seg::Copied(n)) => *n += data.len(),
                _ => self.segs.push_back(Seg::Copied(data.len())),
            }
        }
    }

    /// Appends `data` without copying it: the slice is kept until read.
    pub fn push_shared(&mut self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        if self.segs.is_empty() && self.store.len > 0 {
            self.segs.push_back(Seg::Copied(self.store.len));
        }
        self.len += data.len();
        self.segs.push_back(Seg::Shared(data));
    }

    /// Moves up to `out.len()` bytes from the front into `out`.
    pub fn read(&mut self, out: &mut [u8]) -> usize {
        self.take(out.len(), Some(out))
    }

    /// Up to `max` bytes from the front as one buffer: a kept slice is
    /// handed over as it is (no copy); copied bytes are copied out, as far
    /// as the next kept slice.
    pub fn read_chunk(&mut self, max: usize) -> Bytes {
        let n = max.min(self.len);
        if let Some(Seg::Shared(b)) = self.segs.front_mut() {
            let out = b.split_to(n.min(b.len()));
            if b.is_empty() {
                self.segs.pop_front();
            }
            self.len -= out.len();
            if self.len == 0 {
                self.segs.clear();
            }
            return out;
        }
        let k = match self.segs.front() {
            Some(Seg::Copied(left)) => n.min(*left),
            _ => n,
        };
        let mut out = vec![0u8; k];
        self.read(&mut out);
        Bytes::from(out)
    }

    /// Drops up to `n` bytes from the front; returns how many.
    pub fn discard(&mut self, n: usize) -> usize {
        self.take(n, None)
    }

    /// Takes up to `n` bytes from the front, into `out` if given.
    fn take(&mut self, n: usize, mut out: Option<&mut [u8]>) -> usize {
        let n = n.min(self.len);
        if self.segs.is_empty() {
            self.store.take(n, out);
            self.len -= n;
            return n;
        }
        let mut done = 0;
        while done < n {
            let Some(seg) = self.segs.front_mut() else { break };
            let want = n - done;
            let dst = out.as_deref_mut().map(|o| &mut o[done..]);
            let (got, emptied) = match seg {
                Seg::Copied(left) => {
                    let k = want.min(*left);
                    self.store.take(k, dst);
                    *left -= k;
                    (k, *left == 0)
                }
                Seg::Shared(b) => {
                    let k = want.min(b.len());
                    if let Some(d) = dst {
                        d[..k].copy_from_slice(&b[..k]);
                    }
                    bytes::Buf::advance(b, k);
                    (k, b.is_empty())
                }
            };
            if emptied {
                self.segs.pop_front();
            }
            done += got;
        }
        self.len -= done;
        if self.len == 0 {
            self.segs.clear();
        }
        done
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
        if self.store.buf.len() > max {
            return ByteRing::default();
        }
        ByteRing { store: Store { buf: self.store.buf, head: 0, len: 0 }, segs: VecDeque::new(), len: 0 }
    }
}

/// The ring of copied bytes.
#[derive(Debug, Default)]
struct Store {
    buf: Vec<u8>,
    /// Index of the first held byte in `buf`.
    head: usize,
    len: usize,
}

impl Store {
    /// Appends `data`, growing the storage if it does not fit.
    fn push(&mut self, data: &[u8]) {
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

    /// Takes `n` (at most `len`) bytes from the front, into `out` if given.
    fn take(&mut self, n: usize, out: Option<&mut [u8]>) {
        if n == 0 {
            return;
        }
        let cap = self.buf.len();
        if let Some(out) = out {
            let first = n.min(cap - self.head);
            out[..first].copy_from_slice(&self.buf[self.head..self.head + first]);
            out[first..n].copy_from_slice(&self.buf[..n - first]);
        }
        self.head = (self.head + n) % cap;
        self.len -= n;
        if self.len == 0 {
            self.head = 0;
        }
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
    fn kept_slices_and_copies_come_out_in_the_order_pushed() {
        let mut r = ByteRing::default();
        let mut expect = Vec::new();
        let mut out = vec![0u8; 300_000];
        let mut got = Vec::new();
        for round in 0..300usize {
            let piece: Vec<u8> = (0..(round * 997 % 70_000 + 1)).map(|i| (i + round) as u8).collect();
            expect.extend_from_slice(&piece);
            if round % 3 == 1 {
                r.push_shared(Bytes::from(piece));
            } else {
                r.push(&piece);
            }
            let want = round * 1_301 % 90_000;
            let n = if round % 7 == 0 {
                let n = r.discard(want.min(r.len()));
                expect.drain(got.len()..got.len() + n);
                n
            } else {
                let n = r.read(&mut out[..want]);
                got.extend_from_slice(&out[..n]);
                n
            };
            assert!(n <= want, "round {round}");
        }
        let n = r.read(&mut out);
        got.extend_from_slice(&out[..n]);
        assert_eq!(r.len(), 0);
        assert!(got == expect, "bytes out differ from bytes in");
        assert!(r.segs.is_empty(), "an empty ring keeps no slices");
    }

    #[test]
    fn a_chunk_read_hands_a_kept_slice_over_and_copies_the_rest() {
        let mut r = ByteRing::default();
        r.push(b"abc");
        let kept = Bytes::from(vec![9u8; 10_000]);
        r.push_shared(kept.clone());
        r.push(b"de");
        assert_eq!(&r.read_chunk(100)[..], b"abc", "copied bytes up to the kept slice");
        let first = r.read_chunk(4_000);
        assert_eq!(first.as_ptr(), kept.as_ptr(), "the kept slice itself");
        assert_eq!(first.len(), 4_000);
        assert_eq!(r.read_chunk(100_000).len(), 6_000, "the rest of the slice, not past it");
        assert_eq!(&r.read_chunk(100_000)[..], b"de");
        assert!(r.read_chunk(10).is_empty());
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
