//! An abort's RST and the reason text it may carry (spec §3.3.4, §4.6):
//! the application's words go out in a REASON chunk on the first copy of
//! the RST, bounded to [`MAX_CLOSE_REASON`] bytes; a peer's words are kept
//! for the application when they are valid UTF-8 within that bound, and
//! dropped and counted otherwise.

use std::time::Instant;

use bytes::Bytes;

use super::Connection;
use crate::ids::ConnId;
use crate::wire::chunk::{parse_chunks, Chunk, MAX_CLOSE_REASON};
use crate::wire::{ErrorCode, Flags, Packet, PacketType};

/// The close texts of one connection: ours still to send, the peer's
/// received.
#[derive(Debug, Default)]
pub(super) struct CloseText {
    /// Our reason, for the next RST only (spec §4.6: the first copy).
    outgoing: Option<Bytes>,
    /// The peer's reason, from the RST that closed us.
    peer: Option<Box<str>>,
}

/// `text` cut to at most [`MAX_CLOSE_REASON`] bytes, on a character
/// boundary (spec §3.3.4).
pub fn bound_close_reason(text: &str) -> &str {
    if text.len() <= MAX_CLOSE_REASON {
        return text;
    }
    let mut end = MAX_CLOSE_REASON;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

impl Connection {
    /// [`Connection::abort`] with the application's reason in words (spec
    /// §3.3.4): the first copy of the RST carries `reason`, cut to
    /// [`MAX_CLOSE_REASON`] bytes on a character boundary; an empty one
    /// sends none.
    pub fn abort_with_reason(&mut self, code: ErrorCode, reason: &str) {
        if self.state == super::State::Closed {
            return;
        }
        let text = bound_close_reason(reason);
        if !text.is_empty() && self.remote_id.is_some() {
            self.close_text.outgoing = Some(Bytes::copy_from_slice(text.as_bytes()));
        }
        self.abort(code);
    }

    /// The reason the peer gave in words when it aborted (spec §3.3.4),
    /// once its RST closed this connection.
    pub fn peer_close_text(&self) -> Option<&str> {
        self.close_text.peer.as_deref()
    }

    /// An acceptable RST closes us: keep the text of its REASON chunk if
    /// it is UTF-8 of at most [`MAX_CLOSE_REASON`] bytes; otherwise drop
    /// it and count it (`ConnStats::close_texts_dropped`). The RST acts
    /// either way.
    pub(super) fn take_peer_close_text(&mut self, p: &Packet) {
        let Some(raw) = parse_chunks(p.data).find_map(|c| match c {
            Ok(Chunk::Reason(t)) => Some(t),
            _ => None,
        }) else {
            return;
        };
        match std::str::from_utf8(raw) {
            Ok(text) if text.len() <= MAX_CLOSE_REASON => {
                if !text.is_empty() {
                    self.close_text.peer = Some(text.into());
                }
            }
            _ => {
                self.stats.close_texts_dropped += 1;
                tracing::trace!(
                    target: "manyfold::state",
                    conn = %self.local_id,
                    len = raw.len(),
                    "a RST's close reason dropped: longer than {MAX_CLOSE_REASON} bytes or not UTF-8"
                );
            }
        }
    }

    /// Writes the pending RST (spec §4.6): `RST|ERR` with `code`, and on
    /// the first copy our reason's REASON chunk when there is one and it
    /// fits. `None` (the RST stays pending) when `buf` has no room.
    pub(super) fn emit_rst(&mut self, now: Instant, buf: &mut [u8], code: ErrorCode) -> Option<usize> {
        let mut p = Packet::bare(
            PacketType::Segment,
            Flags::RST,
            ConnId::wire_or_zero(self.remote_id),
            self.sent.next_seq().wire(),
            self.recv.as_ref().map_or(0, |r| r.next().wire()),
            0,
        );
        p.error = Some(code);
        if p.len() > buf.len() {
            self.rst_pending = Some(code);
            return None;
        }
        // The text goes on this copy only: a peer that predates REASON
        // chunks drops it as malformed (spec §3.5) and closes on the next.
        let reason = self.close_text.outgoing.take().map(Chunk::Reason);
        let reason = reason.filter(|c| p.len_with(c.encoded_len()) <= buf.len());
        let n = match &reason {
            Some(c) => p.emit_with(buf, c.encoded_len(), |d| {
                c.emit(d);
            }),
            None => p.emit(buf),
        };
        self.stats.packets_sent += 1;
        self.record_sent(now, &buf[..n]);
        if let Some(s) = self.security.as_mut() {
            s.last_was_handshake = false;
        }
        if self.rst_repeats > 0 {
            self.rst_repeats -= 1;
            self.rst_pending = Some(code);
        }
        Some(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_reason_is_cut_on_a_character_boundary() {
        assert_eq!(bound_close_reason("short"), "short");
        let ascii = "a".repeat(400);
        assert_eq!(bound_close_reason(&ascii).len(), MAX_CLOSE_REASON);
        // 255 ASCII bytes, then a 3-byte character that would end at 258.
        let s = format!("{}€tail", "b".repeat(255));
        let cut = bound_close_reason(&s);
        assert_eq!(cut.len(), 255);
        assert!(cut.chars().all(|c| c == 'b'));
    }
}
