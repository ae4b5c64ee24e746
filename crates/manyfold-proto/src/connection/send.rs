//! The application's queued, not yet sent bytes (spec §7.2).

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

#[derive(Debug, Default)]
pub(crate) struct SendBuffer {
    chunks: VecDeque<Bytes>,
    len: usize,
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
        self.chunks.push_back(Bytes::copy_from_slice(data));
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
}
