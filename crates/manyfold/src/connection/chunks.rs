//! Byte-stream writes and reads that hand over a [`Bytes`] instead of
//! copying a slice (issue 20 item 3), as quinn's `SendStream::write_chunk`
//! and `RecvStream::read_chunk` do. A write: the engine keeps
//! reference-counted slices of the caller's buffer until the peer
//! acknowledges them, and sends them from there. Worth it for large writes
//! of data that is already in a `Bytes` (a file read into memory, a buffer
//! received from elsewhere); a small write is as cheap copied. A read: a
//! large piece of a received datagram is handed over as it arrived (spec
//! §7.2), so a reader that can take a `Bytes` (to write it to a file or
//! pass it on) saves the copy into its own buffer.

use std::future::poll_fn;

use bytes::Bytes;
use manyfold_proto::StreamId;

use super::{ConnRef, Connection, RecvHalf, SendHalf, StreamIo};
use crate::error::{ReadError, WriteError};

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

    /// Reads up to `max` bytes of the connection's byte stream (stream 0)
    /// as one buffer, waiting until some are there; `None` at the end of
    /// the peer's stream. A large piece of a received datagram comes
    /// without a copy (the buffer shares the datagram's memory until
    /// dropped); other bytes are copied into a new buffer. The same errors
    /// as `read`.
    ///
    /// ```no_run
    /// # async fn demo(mut conn: manyfold::Connection) -> Result<(), manyfold::ReadError> {
    /// let mut total = 0;
    /// while let Some(chunk) = conn.read_chunk(1 << 20).await? {
    ///     total += chunk.len(); // e.g. hand `chunk` to a file writer
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn read_chunk(&mut self, max: usize) -> Result<Option<Bytes>, ReadError> {
        self.recv.read_chunk(max).await
    }
}

impl SendHalf {
    /// As [`Connection::write_chunk`].
    pub async fn write_chunk(&mut self, data: Bytes) -> Result<(), WriteError> {
        self.conn.write_chunk(0, data).await
    }
}

impl RecvHalf {
    /// As [`Connection::read_chunk`].
    pub async fn read_chunk(&mut self, max: usize) -> Result<Option<Bytes>, ReadError> {
        let conn = &self.conn;
        poll_fn(|cx| conn.poll_read_chunk(cx, 0, max)).await
    }
}

impl StreamIo {
    /// Writes all of `data` to this stream without copying it, as
    /// [`Connection::write_chunk`] does for stream 0.
    pub async fn write_chunk(&mut self, data: Bytes) -> Result<(), WriteError> {
        self.conn.write_chunk(self.stream, data).await
    }

    /// Reads up to `max` bytes of this stream as one buffer, as
    /// [`Connection::read_chunk`] does for stream 0.
    pub async fn read_chunk(&mut self, max: usize) -> Result<Option<Bytes>, ReadError> {
        let (conn, stream) = (&self.conn, self.stream);
        poll_fn(|cx| conn.poll_read_chunk(cx, stream, max)).await
    }
}
