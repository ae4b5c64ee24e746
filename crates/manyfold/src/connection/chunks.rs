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

/// The most one chunk of `read_chunks` holds when it is a copy (bytes
/// that arrived in small datagrams); kept slices are handed over whole.
const MAX_COPIED_CHUNK: usize = 1 << 20;

impl ConnRef {
    /// Fills the front of `bufs` with what `stream` holds, under one lock:
    /// how many were filled, `None` at the stream's end, pending while
    /// nothing is there.
    fn poll_read_chunks(
        &self,
        cx: &std::task::Context<'_>,
        stream: u16,
        bufs: &mut [Bytes],
    ) -> std::task::Poll<Result<Option<usize>, ReadError>> {
        if bufs.is_empty() {
            return std::task::Poll::Ready(Ok(Some(0)));
        }
        let got = self.poll_read_with(
            cx,
            |c| {
                let id = StreamId::new(stream);
                let mut n = 0;
                while n < bufs.len() {
                    match c.stream_recv_chunk(id, MAX_COPIED_CHUNK) {
                        // The end: reported once what came before it is out.
                        Ok(Some(b)) if b.is_empty() => {
                            if n == 0 {
                                return Ok(Some(0));
                            }
                            break;
                        }
                        Ok(Some(b)) => {
                            bufs[n] = b;
                            n += 1;
                        }
                        Ok(None) => break,
                        // An error after some chunks waits for the next call.
                        Err(e) if n == 0 => return Err(e),
                        Err(_) => break,
                    }
                }
                Ok((n > 0).then_some(n))
            },
            |&n| n,
        );
        got.map(|r| r.map(|n| n.filter(|&n| n > 0)))
    }

    /// Queues all of `data` on `stream`, waiting for room as `write_all`
    /// does; nothing of it is copied.
    async fn write_chunk(&self, stream: u16, mut data: Bytes) -> Result<(), WriteError> {
        while !data.is_empty() {
            self.write_chunk_some(stream, &mut data).await?;
        }
        Ok(())
    }

    /// Queues as much of the front of `data` as `stream` takes now,
    /// waiting until it takes some, and advances `data` past it; nothing
    /// is copied. Taking is the last step of a poll that completes, so a
    /// call dropped while it waits has taken nothing.
    async fn write_chunk_some(&self, stream: u16, data: &mut Bytes) -> Result<usize, WriteError> {
        if data.is_empty() {
            return Ok(0);
        }
        poll_fn(|cx| self.poll_write_with(cx, |c| c.stream_send_shared(StreamId::new(stream), &mut *data))).await
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

    /// Writes as much of the front of `data` as the send buffer takes now,
    /// waiting until it takes some, without copying it: `data` is advanced
    /// past what was taken, and the count returned (0 only for an empty
    /// `data`). The partial form of [`write_chunk`](Connection::write_chunk),
    /// as `write` is of `write_all`, and cancel safe: dropped while it
    /// waits (a `select!` that shows progress, a timeout), it has taken
    /// nothing, so the caller writes the same `data` again.
    ///
    /// ```no_run
    /// # async fn demo(mut conn: manyfold::Connection) -> Result<(), manyfold::WriteError> {
    /// use std::time::Duration;
    /// let mut data = bytes::Bytes::from(vec![7u8; 4 << 20]);
    /// while !data.is_empty() {
    ///     match tokio::time::timeout(Duration::from_millis(100), conn.write_chunk_some(&mut data)).await {
    ///         Ok(written) => { written?; }
    ///         Err(_) => println!("{} bytes still to hand over", data.len()),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn write_chunk_some(&mut self, data: &mut Bytes) -> Result<usize, WriteError> {
        self.send.write_chunk_some(data).await
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

    /// Reads what the connection's byte stream (stream 0) holds into the
    /// front of `bufs`, as many chunks as are there and fit, waiting until
    /// there is one; returns how many were filled, `None` at the end of
    /// the peer's stream. As `read_chunk`, but one call takes a whole
    /// batch: the way to read a bulk transfer with no copy (each
    /// `read_chunk` call costs a lock and an engine call, which on 64 KiB
    /// chunks cost more than the copy it saves). Large pieces of received
    /// datagrams come uncopied; bytes that came in small datagrams are
    /// copied into chunks of up to 1 MiB. The same errors as `read`.
    ///
    /// ```no_run
    /// # async fn demo(mut conn: manyfold::Connection) -> Result<(), manyfold::ReadError> {
    /// let mut bufs = vec![bytes::Bytes::new(); 32];
    /// let mut total = 0;
    /// while let Some(n) = conn.read_chunks(&mut bufs).await? {
    ///     total += bufs[..n].iter().map(|b| b.len()).sum::<usize>();
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn read_chunks(&mut self, bufs: &mut [Bytes]) -> Result<Option<usize>, ReadError> {
        self.recv.read_chunks(bufs).await
    }
}

impl SendHalf {
    /// As [`Connection::write_chunk`].
    pub async fn write_chunk(&mut self, data: Bytes) -> Result<(), WriteError> {
        self.conn.write_chunk(0, data).await
    }

    /// As [`Connection::write_chunk_some`].
    pub async fn write_chunk_some(&mut self, data: &mut Bytes) -> Result<usize, WriteError> {
        self.conn.write_chunk_some(0, data).await
    }
}

impl RecvHalf {
    /// As [`Connection::read_chunk`].
    pub async fn read_chunk(&mut self, max: usize) -> Result<Option<Bytes>, ReadError> {
        let conn = &self.conn;
        poll_fn(|cx| conn.poll_read_chunk(cx, 0, max)).await
    }

    /// As [`Connection::read_chunks`].
    pub async fn read_chunks(&mut self, bufs: &mut [Bytes]) -> Result<Option<usize>, ReadError> {
        let conn = &self.conn;
        poll_fn(|cx| conn.poll_read_chunks(cx, 0, bufs)).await
    }
}

impl StreamIo {
    /// Writes all of `data` to this stream without copying it, as
    /// [`Connection::write_chunk`] does for stream 0.
    pub async fn write_chunk(&mut self, data: Bytes) -> Result<(), WriteError> {
        self.conn.write_chunk(self.stream, data).await
    }

    /// Writes what this stream takes now of the front of `data`, as
    /// [`Connection::write_chunk_some`] does for stream 0.
    pub async fn write_chunk_some(&mut self, data: &mut Bytes) -> Result<usize, WriteError> {
        self.conn.write_chunk_some(self.stream, data).await
    }

    /// Reads up to `max` bytes of this stream as one buffer, as
    /// [`Connection::read_chunk`] does for stream 0.
    pub async fn read_chunk(&mut self, max: usize) -> Result<Option<Bytes>, ReadError> {
        let (conn, stream) = (&self.conn, self.stream);
        poll_fn(|cx| conn.poll_read_chunk(cx, stream, max)).await
    }

    /// Reads a batch of this stream's chunks into the front of `bufs`, as
    /// [`Connection::read_chunks`] does for stream 0.
    pub async fn read_chunks(&mut self, bufs: &mut [Bytes]) -> Result<Option<usize>, ReadError> {
        let (conn, stream) = (&self.conn, self.stream);
        poll_fn(|cx| conn.poll_read_chunks(cx, stream, bufs)).await
    }
}
