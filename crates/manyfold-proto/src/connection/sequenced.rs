//! A sequenced packet's arrival (spec §5.2, §5.3): its place in the
//! receive sequence, its chunks to the streams, the ack it makes due, and
//! the peer's FIN reached in order (spec §4.4).

use std::time::Instant;

use super::recv::Arrival;
use super::timer::Timer;
use super::{secure, Connection, State};
use crate::seq::Seq;
use crate::wire::{Flags, Packet};

impl Connection {
    pub(super) fn handle_sequenced(&mut self, now: Instant, p: &Packet, protected: bool) {
        let Some(r) = self.recv.as_mut() else { return };
        let seq = Seq::from_wire(p.header.seq, r.next());
        let fin = p.header.flags.contains(Flags::FIN);
        let had_gaps = r.has_gaps();
        let (len, entries) = crate::wire::chunk::summary(p.data);
        // spec §7.5: at the endpoint's memory limit new data is not stored;
        // the sender repairs it later like a loss.
        // spec §7.5: at the endpoint's memory limit no data is stored;
        // the records' bound still holds for chunks without data.
        let bytes = if self.memory_pressure { usize::MAX } else { self.streams.buffered() };
        let held = (bytes, self.streams.held_memory());
        let arrival = r.on_packet(seq, len, fin, held, (self.streams.pieces(), entries));
        // spec §5.4.2: the next ack names this transmission (a SYN's or
        // SYN-ACK's in its parameters, §3.3.2); a resend's count also shows
        // that the peer takes echoes.
        let count = p.params.map_or_else(|| crate::wire::chunk::resent_count(p.data), |pp| pp.transmission());
        self.ack.peer_echoes |= count > 0;
        self.ack.echo = Some(crate::wire::Echo { seq: p.header.seq, count });
        let first_time = matches!(arrival, Arrival::InOrder | Arrival::OutOfOrder);
        if first_time && self.security.is_some() {
            if let Some(m) = secure::handshake_message(p) {
                self.on_handshake_message(now, m);
            }
        }
        // spec §5.6: a request from the peer also shows that it takes ours.
        if first_time && self.ack.on_request(p.data) {
            self.ack_freq.peer_takes_it = true;
        }
        let Some(r) = self.recv.as_mut() else { return };
        // spec §19.2: a protected connection's streams take only protected data.
        let streams_see_it = protected || self.security.is_none();
        if first_time && streams_see_it && !p.data.is_empty() {
            // spec §13.4: the chunks go to their streams now, in order or not.
            let arrived = self.streams.on_chunks_from(p.data, self.rx_source.as_ref());
            if !self.memory_pressure {
                r.autotune(now, arrived, self.rtt.srtt());
            }
            self.stats.bytes_received += arrived as u64;
            self.readable_signalled = true;
        }
        let fin_reached = r.fin_reached();
        let has_gaps = r.has_gaps();
        match arrival {
            Arrival::InOrder => {
                self.ack.pending += 1;
                self.ack.since.get_or_insert(now);
                // RFC 5681 (4.2): ack at once when a gap was just filled or
                // is still open, and after a handshake's echo or a FIN;
                // spec §5.3: but a FIN that ends a request, while our side is
                // still open, gives the answer a moment to carry the ack.
                if had_gaps || has_gaps {
                    self.ack.immediate = true;
                } else if fin && !p.data.is_empty() && !self.fin_queued && !self.config.reply_ack_delay.is_zero() {
                    self.ack.reply_wait = true;
                } else if p.cookie.is_some() || fin {
                    self.ack.immediate = true;
                }
            }
            Arrival::OutOfOrder => {
                // RUSP's CACK / RFC 5681 (4.2): out of order is acked at once.
                self.ack.immediate = true;
            }
            Arrival::Duplicate => {
                self.stats.duplicate_packets += 1;
                self.ack.immediate = true;
            }
            Arrival::Dropped => {
                self.stats.dropped_no_buffer += 1;
                self.ack.immediate = true;
            }
            Arrival::OutOfWindow => {
                self.stats.out_of_window += 1;
                return;
            }
        }
        if self.ack.due() {
            self.ack.immediate = true;
        }
        if !self.ack.immediate {
            if let Some(since) = self.ack.since {
                let mut due = since + self.ack.max_delay;
                if self.ack.reply_wait {
                    due = due.min(now + self.config.reply_ack_delay.min(self.ack.max_delay));
                }
                self.timers.set(Timer::DelayedAck, due);
            }
        }
        // Only the arrival that reaches the FIN is InOrder with fin_reached:
        // anything after it is dropped, a repeat is a duplicate.
        if fin_reached && arrival == Arrival::InOrder {
            self.on_peer_fin(now);
        }
    }

    /// The peer's FIN was reached in order (spec §4.4).
    fn on_peer_fin(&mut self, now: Instant) {
        if !self.ack.reply_wait {
            self.ack.immediate = true;
        }
        self.streams.on_conn_fin();
        self.signal_readable();
        match self.state {
            State::Established | State::SynReceived => self.set_state(State::CloseWait),
            State::FinWait1 => self.set_state(State::Closing),
            State::FinWait2 => self.enter_time_wait(now),
            _ => {}
        }
    }

    pub(super) fn enter_time_wait(&mut self, now: Instant) {
        self.set_state(State::TimeWait);
        self.timers.clear_all();
        self.stalled_since = None;
        self.timers.set(Timer::TimeWait, now + self.config.time_wait);
        if self.exiting {
            self.repeat_final_ack(now);
        }
    }
}
