//! The application's queued, not yet sent bytes (spec §7.2).
//!
//! Large writes are copied into chunks taken from a small per-connection
//! pool; packets are zero-copy slices of those chunks, and a chunk goes
//! back to the pool when its last packet has been acknowledged. Bulk
//! sending thus reuses the same few buffers instead of allocating (and
//! page-faulting in) fresh memory for every write.
//!
//! Small writes (a stream of small messages, issue 21) are copied one
//! after another into one shared buffer of [`TAIL`] bytes and handed out as
//! slices of it: no allocation per write, and once every slice of it is
//! acknowledged the same buffer is filled again from its start.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::{Bytes, BytesMut};

/// Size of a pooled chunk.
const CHUNK: usize = 256 << 10;
/// Writes shorter than this are copied into a buffer of their own.
const MIN_POOLED_WRITE: usize = 16 << 10;
/// Most spare chunks a connection keeps (2 MiB).
const MAX_SPARE: usize = 8;
/// Size of the buffer small writes are copied into.
const TAIL: usize = 64 << 10;

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
    pool: Pool,
    /// Where small writes are copied; each is split off as a slice.
    tail: BytesMut,
}

impl SendBuffer {
    pub fn len(&self) -> usize {
        self.len
    }

    #[cfg(test)]
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
                // Reclaims the whole buffer in place when no slice of it
                // is held any more (all acknowledged); otherwise a fresh one.
                self.tail.reserve(TAIL);
            }
            self.tail.extend_from_slice(data);
            self.chunks.push_back(self.tail.split().freeze());
            return;
        }
        for piece in data.chunks(CHUNK) {
            let mut buf = self.pool.take();
            buf.extend_from_slice(piece);
            self.chunks.push_back(Bytes::from_owner(Pooled { buf, pool: self.pool.clone() }));
        }
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn small_writes_are_slices_of_one_buffer_reused_once_released() {
        let mut s = SendBuffer::default();
        let first: Vec<Bytes> = (0..100u8)
            .map(|i| {
                s.push(&[i; 32]);
                s.take(32)
            })
            .collect();
        assert!(first.iter().enumerate().all(|(i, b)| b[..] == [i as u8; 32]), "each slice holds its write");
        // Contiguous in one buffer: the writes were not copied apart.
        assert_eq!(first[1].as_ptr(), first[0].as_ptr().wrapping_add(32));
        let base = first[0].as_ptr();
        drop(first);
        // Fill the rest of the buffer, release it all, and write again:
        // the same memory is reused from its start.
        let mut held = Vec::new();
        for _ in 0..(TAIL / 32 - 100) {
            s.push(&[1; 32]);
            held.push(s.take(32));
        }
        drop(held);
        s.push(b"again");
        assert_eq!(s.take(5).as_ptr(), base, "the released buffer is filled again");
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
        assert_eq!(s.pool.0.lock().unwrap().len(), 2);
        // The next large write reuses them.
        s.push(&data);
        assert!(s.pool.0.lock().unwrap().is_empty());
    }
}
