//! Buffers for zero-copy sends, used again once the transport lets go of
//! them ([`BufferPool`]).

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

/// Buffers for [`Connection::write_chunk`](crate::Connection::write_chunk),
/// [`Group::send`](crate::Group::send) and the other calls that take
/// [`Bytes`] without copying, each used again once the transport has
/// released it (every peer acknowledged its data).
///
/// A program that allocates a new buffer per message pays for it in page
/// faults and in memory: a freed megabyte goes back to the allocator,
/// the next one is faulted in afresh, and a multi-thread runtime's tasks
/// allocate from one arena per worker, so the memory held grows with the
/// threads the sending task ran on. A group sender of 1 MiB messages to
/// 64 receivers peaked at 18 MiB with its task on one thread and 22 MiB
/// with it on two workers; with this pool, at 15 MiB (RESULTS §41).
///
/// The pool looks only at the buffer it handed out longest ago: a
/// connection or a group releases its data in the order it was sent, so
/// the oldest buffer is the first to come free. It remembers at most
/// `limit` buffers; beyond that the oldest is forgotten (its last holder
/// frees it), so the pool never holds more than `limit` buffers.
///
/// ```
/// # async fn run(conn: &mut manyfold::Connection, mut file: std::fs::File) -> Result<(), Box<dyn std::error::Error>> {
/// use std::io::Read;
/// let mut pool = manyfold::BufferPool::new(1 << 20, 128);
/// loop {
///     let mut buf = pool.take(1 << 20);
///     let n = file.read(&mut buf)?;
///     if n == 0 {
///         break;
///     }
///     buf.truncate(n);
///     conn.write_chunk(pool.keep(buf)).await?;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct BufferPool {
    /// Buffers handed out, oldest first.
    out: VecDeque<Bytes>,
    size: usize,
    limit: usize,
}

impl BufferPool {
    /// A pool of buffers of `size` bytes (a larger `take` makes a larger
    /// one) that remembers at most `limit` of them (at least one). Size
    /// `limit` to what the send buffer holds: `send_buffer / size`, plus
    /// a few.
    pub fn new(size: usize, limit: usize) -> BufferPool {
        let limit = limit.max(1);
        BufferPool { out: VecDeque::with_capacity(limit), size, limit }
    }

    /// A buffer of `len` bytes: the oldest one handed out if the
    /// transport has released it, else a new one (zeroed). A buffer used
    /// again holds what it held before, not zeros: overwrite it. Not
    /// zeroing it matters: a memset of every megabyte cost a sender 10%
    /// of its CPU (RESULTS §41).
    pub fn take(&mut self, len: usize) -> BytesMut {
        let released = match self.out.pop_front().map(Bytes::try_into_mut) {
            Some(Ok(buf)) => Some(buf),
            Some(Err(held)) => {
                self.out.push_front(held);
                None
            }
            None => None,
        };
        let mut buf = released.unwrap_or_else(|| BytesMut::zeroed(self.size.max(len)));
        if buf.len() >= len {
            buf.truncate(len);
        } else {
            buf.resize(len, 0);
        }
        buf
    }

    /// Freezes `buf` to hand to the transport, and remembers it so that
    /// [`take`](BufferPool::take) gets it back once released.
    pub fn keep(&mut self, buf: BytesMut) -> Bytes {
        let bytes = buf.freeze();
        if self.out.len() == self.limit {
            self.out.pop_front();
        }
        self.out.push_back(bytes.clone());
        bytes
    }

    /// Buffers handed out and remembered.
    pub fn len(&self) -> usize {
        self.out.len()
    }

    /// Whether no buffer is remembered.
    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(pool: &mut BufferPool, byte: u8) -> Bytes {
        let mut buf = pool.take(pool.size);
        buf.fill(byte);
        pool.keep(buf)
    }

    #[test]
    fn a_released_buffer_is_used_again_and_a_held_one_is_not() {
        let mut pool = BufferPool::new(4096, 8);
        let first = filled(&mut pool, 1);
        let at = first.as_ptr();
        // Still held by "the transport": the next buffer is a new one.
        let second = filled(&mut pool, 2);
        assert_ne!(second.as_ptr(), at);
        assert_eq!(pool.len(), 2);
        drop(first);
        let reused = pool.take(100);
        assert_eq!(reused.as_ptr(), at, "the released buffer was not used again");
        assert_eq!(reused.len(), 100);
        assert_eq!(reused[99], 1, "a buffer used again was zeroed (or is not the old one)");
        assert_eq!(second[0], 2, "a held buffer was changed");
        // Longer than it was: topped up with zeros.
        let mut pool = BufferPool::new(16, 2);
        drop(filled(&mut pool, 7));
        let longer = pool.take(32);
        assert_eq!((longer.len(), longer[15], longer[16]), (32, 7, 0));
    }

    #[test]
    fn the_pool_remembers_at_most_its_limit() {
        let mut pool = BufferPool::new(64, 2);
        let held: Vec<Bytes> = (0..5).map(|i| filled(&mut pool, i)).collect();
        assert_eq!(pool.len(), 2);
        // The forgotten ones belong to their holders alone.
        assert!(held[..3].iter().all(|b| b.len() == 64));
        drop(held);
        let a = pool.take(64);
        let b = pool.take(64);
        assert_ne!(a.as_ptr(), b.as_ptr());
        assert_eq!((a.len(), b.len()), (64, 64));
    }
}
