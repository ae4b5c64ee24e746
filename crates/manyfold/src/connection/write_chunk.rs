//! Byte-stream writes that hand over a [`Bytes`] instead of copying a
//! slice (issue 20 item 3), as quinn's `SendStream::write_chunk` does: the
//! engine keeps reference-counted slices of the caller's buffer until the
//! peer acknowledges them, and its packets are built from those slices.
//! Worth it for large writes of data that is already in a `Bytes` (a file
//! read into memory, a buffer received from elsewhere); a small write is
//! as cheap copied.

use std::future::poll_fn;

use bytes::Bytes;
use manyfold_proto::StreamId;

use super::{ConnRef, Connection, SendHalf, StreamIo};
use crate::error::WriteError;

impl ConnRef {
    /// Queues all of `data` on `stream`, waiting for room as `write_all`
    /// does; nothing of it is copied.
    async fn write_chunk(&self, stream: u16, mut data: Bytes) -> Result<(), WriteError> {
        while !data.is_empty() {
            poll_fn(|cx| self.poll_write_with(cx, |c| c.stream_send_shared(StreamId::new(stream), &mut data))).await?;
        }
        Ok(())
    }
}

impl Connection {
    /// Writes all of `data` to the connection's byte stream (stream 0)
    /// without copying it: the connection holds `data` (reference counted)
    /// until the peer has acknowledged it. Waits while the send buffer is
    /// full, like `write_all`; the same errors.
    ///
    /// ```no_run
    /// # async fn demo(mut conn: manyfold::Connection) -> Result<(), manyfold::WriteError> {
    /// let file = bytes::Bytes::from(vec![7u8; 1 << 20]);
    /// conn.write_chunk(file.clone()).await?; // `file` is not copied
    /// # Ok(()) }
    /// ```
    pub async fn write_chunk(&mut self, data: Bytes) -> Result<(), WriteError> {
        self.send.write_chunk(data).await
    }
}

impl SendHalf {
    /// As [`Connection::write_chunk`].
    pub async fn write_chunk(&mut self, data: Bytes) -> Result<(), WriteError> {
        self.conn.write_chunk(0, data).await
    }
}

impl StreamIo {
    /// Writes all of `data` to this stream without copying it, as
    /// [`Connection::write_chunk`] does for stream 0.
    pub async fn write_chunk(&mut self, data: Bytes) -> Result<(), WriteError> {
        self.conn.write_chunk(self.stream, data).await
    }
}
