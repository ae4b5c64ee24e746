//! Reading messages without an allocation per message (issue 21 item 2):
//! [`Streams::recv_message_into`] copies one message into the caller's
//! buffer, and [`Streams::recv_messages_into`] fills a reusable
//! [`MessageBatch`] with every message that is ready under one lock. Once
//! the buffers have grown to the stream's working size, a reader of small
//! messages allocates nothing (spec §13.5 says what the items are).

use std::future::poll_fn;

use manyfold_proto::ReadItem;

use crate::connection::Streams;
use crate::error::ConnectionError;

/// Messages and stream events read by [`Streams::recv_messages_into`]:
/// their bytes in one buffer, kept (with its capacity) from one read to
/// the next.
#[derive(Debug, Default, Clone)]
pub struct MessageBatch {
    data: Vec<u8>,
    /// Stream, what was read, where its bytes start in `data`.
    items: Vec<(u16, ReadItem, usize)>,
}

/// One entry of a [`MessageBatch`]: a [`StreamItem`](crate::StreamItem)
/// whose message borrows the batch's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchItem<'a> {
    /// A whole message.
    Message(&'a [u8]),
    /// The sender abandoned a message (partial reliability).
    Abandoned,
    /// The sender finished the stream: nothing follows.
    Finished,
    /// The sender reset the stream with this code: nothing follows.
    Reset(u16),
}

impl MessageBatch {
    /// An empty batch; it grows to what the reads need and keeps that.
    pub fn new() -> Self {
        MessageBatch::default()
    }

    /// An empty batch with room for `items` entries of `bytes` in all.
    pub fn with_capacity(items: usize, bytes: usize) -> Self {
        MessageBatch { data: Vec::with_capacity(bytes), items: Vec::with_capacity(items) }
    }

    /// Entries in the batch.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the batch holds nothing.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Empties the batch, keeping its buffers.
    pub fn clear(&mut self) {
        self.data.clear();
        self.items.clear();
    }

    /// The entries in the order they were read: each stream's in stream order.
    pub fn iter(&self) -> impl Iterator<Item = (u16, BatchItem<'_>)> + '_ {
        self.items.iter().map(|&(stream, item, at)| {
            let item = match item {
                ReadItem::Message { len } => BatchItem::Message(&self.data[at..at + len]),
                ReadItem::Abandoned => BatchItem::Abandoned,
                ReadItem::Finished => BatchItem::Finished,
                ReadItem::Reset(code) => BatchItem::Reset(code),
            };
            (stream, item)
        })
    }

    fn push(&mut self, stream: u16, item: ReadItem, at: usize) {
        self.items.push((stream, item, at));
    }
}

impl Streams {
    /// The next message or stream event of any stream, as
    /// [`Streams::recv_message`] returns one, with a message's bytes put
    /// in `buf` (cleared first) instead of a new buffer: a reader that
    /// reuses `buf` allocates nothing per message. `None` once the
    /// connection has closed gracefully and everything was read.
    ///
    /// # Errors
    ///
    /// As [`Streams::recv_message`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an item is taken only when the future returns it.
    pub async fn recv_message_into<'b>(
        &self,
        buf: &'b mut Vec<u8>,
    ) -> Result<Option<(u16, BatchItem<'b>)>, ConnectionError> {
        buf.clear();
        let got = poll_fn(|cx| {
            let b = &mut *buf;
            self.conn.poll_recv_with(cx, None, |conn| conn.recv_message_into(b).map(|o| o.map(|(id, i)| (id.get(), i))))
        })
        .await?;
        Ok(got.map(|(stream, item)| {
            let item = match item {
                ReadItem::Message { .. } => BatchItem::Message(&buf[..]),
                ReadItem::Abandoned => BatchItem::Abandoned,
                ReadItem::Finished => BatchItem::Finished,
                ReadItem::Reset(code) => BatchItem::Reset(code),
            };
            (stream, item)
        }))
    }

    /// Up to `max` messages or stream events of any stream into `batch`
    /// (emptied first), as [`Streams::recv_messages`] reads them: waits
    /// for the first, then takes whatever else is ready under one lock.
    /// With a batch kept from one call to the next, reading allocates
    /// nothing per message. Returns how many were read: 0 once the
    /// connection has closed gracefully and everything was read.
    ///
    /// ```no_run
    /// # async fn demo(streams: manyfold::Streams) -> Result<(), manyfold::ConnectionError> {
    /// let mut batch = manyfold::MessageBatch::new();
    /// while streams.recv_messages_into(&mut batch, 256).await? > 0 {
    ///     for (stream, item) in batch.iter() {
    ///         println!("{stream}: {item:?}");
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Streams::recv_message`], when the first is awaited.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: items are taken only when the future returns them.
    pub async fn recv_messages_into(&self, batch: &mut MessageBatch, max: usize) -> Result<usize, ConnectionError> {
        batch.clear();
        let first = poll_fn(|cx| {
            let data = &mut batch.data;
            self.conn
                .poll_recv_with(cx, None, |conn| conn.recv_message_into(data).map(|o| o.map(|(id, i)| (id.get(), i))))
        })
        .await?;
        let Some((stream, item)) = first else { return Ok(0) };
        batch.push(stream, item, 0);
        self.conn.take_ready_with(|conn| {
            while batch.len() < max {
                let at = batch.data.len();
                match conn.recv_message_into(&mut batch.data) {
                    Ok(Some((id, item))) => batch.push(id.get(), item, at),
                    _ => break,
                }
            }
            batch.len() > 1
        });
        Ok(batch.len())
    }
}
