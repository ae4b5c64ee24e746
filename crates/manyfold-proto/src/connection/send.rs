//! The application's queued, not yet sent bytes (spec §7.2).
//!
//! Large writes are copied into chunks taken from a small per-connection
//! pool; packets are zero-copy slices of those chunks, and a chunk goes
//! back to the pool when its last packet has been acknowledged. Bulk
//! sending thus reuses the same few buffers instead of allocating (and
//! page-faulting in) fresh memory for every write.
//!
//! Smaller writes (a stream of messages, issue 21) are copied one after
//! another into one shared buffer and handed out as slices of it: no
//! allocation per write, and once every slice of it is acknowledged the
//! same buffer is filled again from its start. The buffer starts at
//! [`MIN_TAIL`] bytes and doubles each time it runs out, up to [`TAIL`]:
//! a short request/reply keeps a small one, a stream of messages grows
//! it to its working size. A full buffer whose slices are still in flight
//! waits among the spent ones (at most [`MAX_SPENT`]) until they are
//! acknowledged, and is then filled again: a sender with a window of
//! messages in flight cycles through a few warm buffers instead of
//! allocating and page-faulting a fresh one each time (RESULTS §33: a
//! 16 KiB message took a whole 256 KiB pool chunk, and its sender faulted
//! in 5,000 pages a second).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::{Bytes, BytesMut};

/// Size of a pooled chunk.
const CHUNK: usize = 256 << 10;
/// Writes shorter than this share the small-write buffer; longer ones are
/// copied into pooled chunks.
const MIN_POOLED_WRITE: usize = TAIL;
/// Most spare chunks a connection keeps (2 MiB).
const MAX_SPARE: usize = 8;
/// Largest buffer smaller writes are copied into.
const TAIL: usize = 64 << 10;
/// Most full small-write buffers kept for reuse while slices of them are
/// in flight (256 KiB at [`TAIL`]; an idle connection keeps them too).
const MAX_SPENT: usize = 4;
/// First buffer small writes are copied into.
const MIN_TAIL: usize = 512;

/// Spare chunks. Shared with the chunks in flight, which return themselves
/// on drop (wherever the last packet referring to them is dropped).
#[derive(Debug, Default, Clone)]
struct Pool(Arc<Mutex<Vec<Vec<u8>>>>);

impl Pool {
    fn take(&self) -> Vec<u8> {
        let spare = self.0.lock().unwrap_or_else(PoisonError::into_inner).pop();
        spare.unwrap_or_else(|| Vec::with_capacity(CHUNK))
    }
}

/// A chunk's storage while packets refer to it.
struct Pooled {
    buf: Vec<u8>,
    pool: Pool,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        let mut spare = self.pool.0.lock().unwrap_or_else(PoisonError::into_inner);
        if spare.len() < MAX_SPARE {
            spare.push(buf);
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct SendBuffer {
    chunks: VecDeque<Bytes>,
    len: usize,
    /// Made by the first large write: a short session never needs one
    /// (issue 21, spec §15.3: no allocation per session).
    pool: Option<Pool>,
    /// Where small writes are copied; each is split off as a slice.
    tail: BytesMut,
    /// Size of the last buffer `tail` was given.
    tail_size: usize,
    /// Earlier buffers of `tail_size`, oldest first, whose slices may still
    /// be in flight: each is filled again once none is held.
    spent: VecDeque<BytesMut>,
}

impl SendBuffer {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn push(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        self.len += data.len();
        if data.len() < MIN_POOLED_WRITE {
            if self.tail.capacity() < data.len() {
                self.refill_tail(data.len());
            }
            self.tail.extend_from_slice(data);
            self.chunks.push_back(self.tail.split().freeze());
            return;
        }
        let pool = self.pool.get_or_insert_with(Pool::default);
        for piece in data.chunks(CHUNK) {
            let mut buf = pool.take();
            buf.extend_from_slice(piece);
            self.chunks.push_back(Bytes::from_owner(Pooled { buf, pool: pool.clone() }));
        }
    }

    /// Gives `tail` room for a write of `need` bytes: the same buffer,
    /// reclaimed in place when no slice of it is held any more (all
    /// acknowledged) and it is as large as wanted; else the oldest spent
    /// buffer of that size in that state; else a fresh one, twice the
    /// last, while the full one waits among the spent.
    fn refill_tail(&mut self, need: usize) {
        let want = (2 * self.tail_size).max(need.next_power_of_two()).clamp(MIN_TAIL, TAIL);
        if self.tail.try_reclaim(want) {
            self.tail_size = want;
            return;
        }
        if want == self.tail_size && self.spent.front_mut().is_some_and(|b| b.try_reclaim(want)) {
            let reused = self.spent.pop_front().expect("just looked at");
            let full = std::mem::replace(&mut self.tail, reused);
            self.spent.push_back(full);
            return;
        }
        let full = std::mem::replace(&mut self.tail, BytesMut::with_capacity(want));
        if want == self.tail_size {
            if self.spent.len() == MAX_SPENT {
                self.spent.pop_front();
            }
            self.spent.push_back(full);
        } else {
            // A smaller buffer is not kept once the writes outgrow it.
            self.spent.clear();
        }
        self.tail_size = want;
    }

    /// Queues `data` as it is: reference-counted, never copied (one copy
    /// of a group's data serves every peer, spec §14.4).
    pub fn push_shared(&mut self, data: Bytes) {
        if !data.is_empty() {
            self.len += data.len();
            self.chunks.push_back(data);
        }
    }

    /// Takes up to `max` bytes from the front as one payload; zero-copy when
    /// the front chunk alone is large enough.
    pub fn take(&mut self, max: usize) -> Bytes {
        let Some(front) = self.chunks.front_mut() else {
            return Bytes::new();
        };
        if front.len() >= max {
            self.len -= max;
            let out = front.split_to(max);
            if front.is_empty() {
                self.chunks.pop_front();
            }
            return out;
        }
        let mut out = BytesMut::with_capacity(max.min(self.len));
        while out.len() < max {
            let Some(front) = self.chunks.front_mut() else {
                break;
            };
            let n = front.len().min(max - out.len());
            out.extend_from_slice(&front.split_to(n));
            if front.is_empty() {
                self.chunks.pop_front();
            }
        }
        self.len -= out.len();
        out.freeze()
    }

    pub fn clear(&mut self) {
        self.chunks.clear();
        self.len = 0;
    }

    /// This buffer emptied for a new connection's stream (issue 21, spec
    /// §15.3): the chunk queue and the small-write buffer keep their memory
    /// when they are small (at most [`SPARE_TAIL`] bytes, 64 queue
    /// entries), so a session's first write allocates nothing; the chunk
    /// pool and anything large are dropped.
    pub fn renewed(self) -> SendBuffer {
        let SendBuffer { mut chunks, tail, tail_size, .. } = self;
        // (The spent buffers go: they are as large as `tail_size`.)
        crate::connection::streams::keep_small(&mut chunks);
        // The new connection's writes start small again (`tail_size` 0), in
        // the kept buffer: its slices were all dropped with the old
        // connection, so `reserve` reclaims it in place.
        let tail = if tail_size <= SPARE_TAIL { tail } else { BytesMut::new() };
        SendBuffer { chunks, len: 0, pool: None, tail, tail_size: 0, spent: VecDeque::new() }
    }
}

/// spec §7.4: how many bytes the send buffer may hold, queued and in
/// flight: twice what can usefully be in flight, which is the smaller of
/// the congestion window and the peer's window and, where the controller
/// models the path, of twice its bandwidth-delay product (BBR's window
/// adds the acks' aggregation on top of that: on loopback, where acks
/// come a receive call's worth at a time, several megabytes that only
/// queued in front of the receiver and overflowed its socket; RESULTS §34).
/// At least the initial window, at most `send_buffer`.
pub(crate) fn send_limit(window: u64, peer_window: u64, bdp: Option<u64>, send_buffer: usize) -> usize {
    let model = bdp.map_or(u64::MAX, |b| b.saturating_mul(2));
    let useful = window.min(peer_window).min(model).saturating_mul(2);
    let useful = usize::try_from(useful).unwrap_or(usize::MAX);
    useful.clamp(super::recv::INITIAL_WINDOW.min(send_buffer), send_buffer)
}

/// Largest small-write buffer a spare keeps (issue 21, spec §15.3).
const SPARE_TAIL: usize = 2 * MIN_TAIL;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_send_limit_is_twice_what_can_usefully_be_in_flight() {
        const MB: u64 = 1 << 20;
        let cap = 64 << 20;
        // Twice the smaller window.
        assert_eq!(send_limit(10 * MB, 12 * MB, None, cap), 20 << 20);
        assert_eq!(send_limit(10 * MB, 6 * MB, None, cap), 12 << 20);
        // A model's BDP bounds a window that runs ahead of it (BBR's
        // aggregation allowance on a short path) ...
        assert_eq!(send_limit(9 * MB, 64 * MB, Some(3 * MB), cap), 12 << 20);
        assert_eq!(send_limit(9 * MB, 64 * MB, Some(100 << 10), cap), 4 << 20);
        // ... but not a window within twice the BDP.
        assert_eq!(send_limit(5 * MB, 64 * MB, Some(3 * MB), cap), 10 << 20);
        // The initial window is the floor, `send_buffer` the ceiling.
        assert_eq!(send_limit(64 << 10, 64 * MB, None, cap), 4 << 20);
        assert_eq!(send_limit(64 * MB, 64 * MB, None, cap), cap);
        assert_eq!(send_limit(64 << 10, 64 * MB, None, 1 << 20), 1 << 20);
    }

    #[test]
    fn take_joins_small_writes_and_splits_large_ones() {
        let mut s = SendBuffer::default();
        s.push(b"ab");
        s.push(b"cdef");
        assert_eq!(&s.take(3)[..], b"abc");
        assert_eq!(&s.take(10)[..], b"def");
        assert!(s.is_empty());
        assert!(s.take(4).is_empty());
    }

    #[test]
    fn small_writes_are_slices_of_one_buffer_that_grows_to_its_working_size() {
        let mut s = SendBuffer::default();
        s.push(&[7; 200]);
        let first = s.take(200);
        assert_eq!(s.tail_size, MIN_TAIL, "a short exchange keeps a small buffer");
        s.push(&[8; 32]);
        let second = s.take(32);
        assert_eq!(second.as_ptr(), first.as_ptr().wrapping_add(200), "one after another in one buffer");
        assert_eq!((&first[..], &second[..]), (&[7u8; 200][..], &[8u8; 32][..]));
        // A stream of messages, each acknowledged at once: the buffer
        // doubles up to its largest size and is then refilled in place.
        let mut starts = std::collections::HashSet::new();
        for i in 0..(8 * TAIL / 32) {
            s.push(&[i as u8; 32]);
            let b = s.take(32);
            assert_eq!(&b[..], &[i as u8; 32][..]);
            starts.insert(b.as_ptr() as usize);
        }
        assert_eq!(s.tail_size, TAIL);
        // The growing buffers (512 B to 32 KiB) and the largest, reused:
        // well under the 8 × TAIL / 32 places of a fresh buffer each time.
        assert!(starts.len() <= 3 * TAIL / 32, "{} places used for 32-byte writes", starts.len());
    }

    #[test]
    fn a_full_buffer_with_slices_in_flight_is_filled_again_once_they_are_acknowledged() {
        const MSG: usize = 16 << 10;
        let per_buffer = TAIL / MSG;
        let mut s = SendBuffer::default();
        // Grow the buffer to its largest size, every slice acknowledged.
        while s.tail_size < TAIL {
            s.push(&[1; MSG]);
            drop(s.take(MSG));
        }
        let fill = |s: &mut SendBuffer, byte: u8| -> Vec<Bytes> {
            (0..per_buffer)
                .map(|_| {
                    s.push(&[byte; MSG]);
                    s.take(MSG)
                })
                .collect()
        };
        // Up to the end of that buffer: the next write starts one.
        while s.tail.capacity() > 0 {
            s.push(&[2; MSG]);
            drop(s.take(MSG));
        }
        // Buffer A is filled and stays in flight; B is fresh.
        let a = fill(&mut s, 3);
        let b = fill(&mut s, 4);
        assert_ne!(a[0].as_ptr(), b[0].as_ptr());
        assert!(a.iter().chain(&b).all(|p| p.len() == MSG));
        let a_at = a[0].as_ptr();
        // A waits among the spent buffers (its handle keeps its memory).
        assert_eq!(s.spent.len(), 1);
        assert_eq!(s.spent[0].as_ptr(), a[per_buffer - 1].as_ptr().wrapping_add(MSG));
        // A's messages are acknowledged while B's are in flight: the next
        // writes go into A again, not into fresh memory, and B waits.
        drop(a);
        let c = fill(&mut s, 5);
        assert_eq!(c[0].as_ptr(), a_at, "the spent buffer, reused in place");
        assert_eq!(s.spent.len(), 1);
        assert_eq!(s.spent[0].as_ptr(), b[per_buffer - 1].as_ptr().wrapping_add(MSG));
        assert!(c.iter().all(|p| p[..] == [5u8; MSG][..]));
        assert!(b.iter().all(|p| p[..] == [4u8; MSG][..]), "B's slices are untouched");
        // A window of more buffers than are kept: at most MAX_SPENT wait.
        let held: Vec<Vec<Bytes>> = (0..2 * MAX_SPENT).map(|_| fill(&mut s, 6)).collect();
        assert!(s.spent.len() <= MAX_SPENT);
        drop(held);
    }

    #[test]
    fn a_renewed_buffer_writes_into_the_small_buffer_it_kept_and_drops_a_large_one() {
        let mut s = SendBuffer::default();
        s.push(&[7; 200]);
        let first = s.take(200);
        let first_at = first.as_ptr();
        drop(first); // acknowledged: no slice of the buffer is held
        let mut s = s.renewed();
        assert!(s.pool.is_none() && s.is_empty() && s.tail_size == 0);
        s.push(&[8; 312]);
        let second = s.take(312);
        assert_eq!(second.as_ptr(), first_at.wrapping_add(200), "the rest of the kept buffer");
        drop(second);
        s.push(&[9; 300]);
        let third = s.take(300);
        assert_eq!(third.as_ptr(), first_at, "the kept buffer, reclaimed in place when full");
        assert_eq!(&third[..], &[9u8; 300][..]);
        drop(third);
        // A buffer grown past SPARE_TAIL by a stream of writes is not kept.
        let mut s = SendBuffer::default();
        for _ in 0..64 {
            s.push(&[9; 200]);
            let _ = s.take(200);
        }
        assert!(s.tail_size > SPARE_TAIL);
        let s = s.renewed();
        assert_eq!(s.tail.capacity(), 0);
    }

    #[test]
    fn chunks_return_to_the_pool_when_their_packets_are_dropped() {
        let mut s = SendBuffer::default();
        let data: Vec<u8> = (0..CHUNK + 1000).map(|i| i as u8).collect();
        s.push(&data);
        let mut packets = Vec::new();
        while !s.is_empty() {
            packets.push(s.take(1400));
        }
        let joined: Vec<u8> = packets.iter().flat_map(|p| p.iter().copied()).collect();
        assert_eq!(joined, data);
        drop(packets);
        assert_eq!(s.pool.as_ref().expect("made by the large write").0.lock().unwrap().len(), 2);
        // The next large write reuses them.
        s.push(&data);
        assert!(s.pool.as_ref().expect("made by the large write").0.lock().unwrap().is_empty());
    }
}
