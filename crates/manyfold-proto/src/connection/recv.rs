//! The receiving side of a connection (spec §5.2, §7): which sequenced
//! packets arrived, the cumulative ack and SACK ranges, the peer's FIN, and
//! the window we advertise. The data itself goes to its stream as soon as
//! its packet arrives, in order or not (spec §13.4).
//!
//! Unlike paper 04's RUSP and paper 02's RUDP, nothing a compliant sender
//! sends is dropped for lack of room (bar the bound on tiny messages'
//! records): the advertised window is the free buffer beyond the
//! cumulative ack, and the sender counts everything above the cumulative
//! ack against it (spec §7.1).

use std::collections::BTreeMap;
use std::ops::Range;
use std::time::{Duration, Instant};

use super::streams::UNREAD_ITEM_COST;
use crate::rangeset::RangeSet;
use crate::seq::Seq;
use crate::wire::{SackBlock, MAX_SACK_RANGES};

/// The window advertised before auto-tuning has seen any traffic (spec §7.4).
pub(crate) const INITIAL_WINDOW: usize = 4 << 20;

/// The window first advertised for a receive buffer of `capacity` bytes.
pub(crate) fn initial_window(capacity: usize) -> usize {
    capacity.min(INITIAL_WINDOW)
}

/// What became of one arriving sequenced packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// New and in order: the cumulative ack advanced.
    InOrder,
    /// New, above a gap.
    OutOfOrder,
    /// Already received.
    Duplicate,
    /// Beyond what we could ever have advertised, or no room: dropped.
    Dropped,
    /// Farther ahead than any packet a sender could have in flight while we
    /// can hold it: a blind forgery, most likely (spec §5.2). Dropped
    /// silently.
    OutOfWindow,
}

#[derive(Debug)]
pub(crate) struct Receiver {
    /// Next expected sequence number (the cumulative ack we send).
    next: Seq,
    /// Packets received above `next`: their data bytes, and whether FIN.
    held: BTreeMap<Seq, (u32, bool)>,
    held_bytes: usize,
    ranges: RangeSet<Seq>,
    /// The range that changed last: reported first in SACK blocks (RFC 2018 §4).
    last_changed: Option<Range<Seq>>,
    capacity: usize,
    /// The auto-tuned window limit (spec §7.4): starts at
    /// [`INITIAL_WINDOW`], only grows, never beyond `capacity`.
    limit: usize,
    /// Bytes arrived since `round_start`.
    round_bytes: usize,
    round_start: Option<Instant>,
    max_held_packets: usize,
    /// The peer's FIN has been reached in order.
    fin_reached: bool,
}

impl Receiver {
    pub fn new(next: Seq, capacity: usize) -> Self {
        Receiver {
            next,
            held: BTreeMap::new(),
            held_bytes: 0,
            ranges: RangeSet::new(),
            last_changed: None,
            capacity,
            limit: initial_window(capacity),
            round_bytes: 0,
            round_start: None,
            // Bounds the table of packets above a gap even for tiny packets.
            max_held_packets: capacity / 256 + 256,
            fin_reached: false,
        }
    }

    pub fn next(&self) -> Seq {
        self.next
    }

    pub fn fin_reached(&self) -> bool {
        self.fin_reached
    }

    pub fn has_gaps(&self) -> bool {
        !self.ranges.is_empty()
    }

    /// spec §7.1: free buffer beyond the cumulative ack, within the
    /// auto-tuned limit (§7.4). `buffered` is what the streams hold; data
    /// of packets above the cumulative ack is the sender's to count.
    /// While a stream nobody reads holds data, the limit stays at least
    /// [`INITIAL_WINDOW`] above it, so other streams are not starved
    /// (spec §13.7); `capacity` bounds the whole.
    pub fn window(&self, buffered: usize) -> u64 {
        let limit = self.limit.max((buffered + INITIAL_WINDOW).min(self.capacity));
        (limit + self.held_bytes).saturating_sub(buffered) as u64
    }

    /// spec §7.4, after Linux's receive-buffer auto-tuning: if more than
    /// half the window arrived within one round trip, the window may be
    /// what holds the sender back: double it (up to `capacity`). The limit
    /// only grows, so the advertised right edge moves back only by unread
    /// items' cost (spec §7.1).
    pub fn autotune(&mut self, now: Instant, arrived: usize, srtt: Duration) {
        let start = *self.round_start.get_or_insert(now);
        self.round_bytes += arrived;
        if now.saturating_duration_since(start) < srtt.max(Duration::from_millis(1)) {
            return;
        }
        if self.round_bytes * 2 > self.limit {
            self.limit = (self.limit * 2).min(self.capacity).max(self.limit);
        }
        self.round_bytes = 0;
        self.round_start = Some(now);
    }

    #[cfg(test)]
    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Takes one sequenced packet carrying `len` data bytes while the
    /// streams hold `buffered` bytes (`held_memory` with their unread
    /// items counted, spec §7.1) and `pieces` bookkeeping entries, to
    /// which it may add `entries`: whether it is new, and whether in order.
    pub fn on_packet(
        &mut self,
        seq: Seq,
        len: usize,
        fin: bool,
        (buffered, held_memory): (usize, usize),
        (pieces, entries): (usize, usize),
    ) -> Arrival {
        if seq < self.next || self.held.contains_key(&seq) {
            return Arrival::Duplicate;
        }
        // spec §5.2: above the gap we hold at most `max_held_packets`, so a
        // packet farther ahead than that could not be kept anyway; refusing
        // it leaves a blind attacker who knows the connection id a chance
        // of ~max_held_packets / 2^32 per guess instead of one in two.
        if seq - self.next > self.max_held_packets as u64 {
            return Arrival::OutOfWindow;
        }
        // spec §13.8: the streams' entries are bounded like the packets
        // above a gap; only tiny chunks can reach it.
        let too_many = entries > 0 && pieces + entries > self.max_held_packets;
        // spec §7.1: the bytes fit the buffer, and the unread items' records
        // (each chunk may leave one) stay within a second buffer's worth.
        let records = held_memory.saturating_add(len + entries * UNREAD_ITEM_COST);
        let no_room =
            len > self.capacity.saturating_sub(buffered) || (entries > 0 && records > self.capacity.saturating_mul(2));
        if self.fin_reached || no_room || too_many {
            return Arrival::Dropped;
        }
        if seq > self.next {
            if self.held.len() >= self.max_held_packets {
                return Arrival::Dropped;
            }
            self.held_bytes += len;
            self.held.insert(seq, (len as u32, fin));
            self.last_changed = Some(self.ranges.insert(seq..seq + 1));
            return Arrival::OutOfOrder;
        }
        self.advance(fin);
        // Pull whatever the gap was holding back.
        while let Some(entry) = self.held.first_entry() {
            if *entry.key() != self.next {
                break;
            }
            let (n, fin) = entry.remove();
            self.held_bytes -= n as usize;
            self.advance(fin);
        }
        self.ranges.remove_below(self.next);
        if self.last_changed.as_ref().is_some_and(|r| r.end <= self.next) {
            self.last_changed = None;
        }
        Arrival::InOrder
    }

    fn advance(&mut self, fin: bool) {
        self.next += 1;
        if fin {
            self.fin_reached = true;
        }
    }

    /// SACK ranges in wire form: the last changed first, then from the
    /// highest down (RFC 2018 §4), at most `max` of them.
    pub fn sack_block(&self, max: usize) -> Option<SackBlock> {
        if self.ranges.is_empty() || max == 0 {
            return None;
        }
        let max = max.min(MAX_SACK_RANGES);
        let mut s = SackBlock::new();
        if let Some(r) = &self.last_changed {
            s.push(r.start.wire(), r.end.wire());
        }
        for r in self.ranges.iter_rev() {
            if s.ranges().len() >= max {
                break;
            }
            if self.last_changed.as_ref() != Some(&r) {
                s.push(r.start.wire(), r.end.wire());
            }
        }
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sequence number `n` (its wire value is `n`).
    fn s(n: u32) -> Seq {
        Seq::from_isn(n)
    }

    #[test]
    fn a_gap_is_reported_until_filled() {
        let mut r = Receiver::new(s(10), 1000);
        assert_eq!(r.on_packet(s(11), 2, false, (0, 0), (0, 1)), Arrival::OutOfOrder);
        assert_eq!(r.on_packet(s(12), 2, true, (0, 0), (0, 1)), Arrival::OutOfOrder);
        assert_eq!(r.sack_block(4).unwrap().ranges(), &[(11, 13)]);
        assert!(!r.fin_reached());
        assert_eq!(r.on_packet(s(10), 2, false, (0, 0), (0, 1)), Arrival::InOrder);
        assert!(r.fin_reached());
        assert_eq!(r.next(), s(13));
        assert!(r.sack_block(4).is_none());
    }

    #[test]
    fn duplicates_are_reported() {
        let mut r = Receiver::new(s(0), 1000);
        r.on_packet(s(0), 1, false, (0, 0), (0, 1));
        r.on_packet(s(2), 1, false, (0, 0), (0, 1));
        assert_eq!(r.on_packet(s(0), 1, false, (0, 0), (0, 1)), Arrival::Duplicate);
        assert_eq!(r.on_packet(s(2), 1, false, (0, 0), (0, 1)), Arrival::Duplicate);
    }

    #[test]
    fn unread_items_records_are_held_to_a_second_buffers_worth() {
        // spec §7.1: 10 bytes fit a buffer of 1,000 holding 100 bytes, but
        // not when the unread items' records already count 1,950.
        let mut r = Receiver::new(s(0), 1000);
        assert_eq!(r.on_packet(s(0), 10, false, (100, 1950), (0, 1)), Arrival::Dropped);
        assert_eq!(r.on_packet(s(0), 10, false, (100, 1900), (0, 1)), Arrival::InOrder);
    }

    #[test]
    fn window_is_free_buffer_beyond_the_cumulative_ack() {
        let mut r = Receiver::new(s(0), 100);
        r.on_packet(s(0), 60, false, (0, 0), (0, 1));
        assert_eq!(r.window(60), 40);
        // Data of packets above the gap is the sender's to count.
        r.on_packet(s(2), 30, false, (60, 60), (0, 1));
        assert_eq!(r.window(90), 40);
        // But nothing beyond capacity is ever held.
        assert_eq!(r.on_packet(s(3), 20, false, (90, 90), (0, 1)), Arrival::Dropped);
        assert_eq!(r.window(30), 100);
    }

    #[test]
    fn window_limit_doubles_when_half_of_it_arrives_within_a_round_trip() {
        let t0 = Instant::now();
        let rtt = Duration::from_millis(100);
        let mut r = Receiver::new(s(0), 64 << 20);
        assert_eq!(r.window(0), INITIAL_WINDOW as u64);
        // A quarter of the window per round trip: no growth.
        for i in 0..5 {
            r.autotune(t0 + rtt * i, INITIAL_WINDOW / 4, rtt);
        }
        assert_eq!(r.limit(), INITIAL_WINDOW);
        // Three quarters per round trip: doubles each round, up to capacity.
        for i in 5..20 {
            let l = r.limit();
            r.autotune(t0 + rtt * i, l * 3 / 4, rtt);
        }
        assert_eq!(r.limit(), 64 << 20);
    }

    #[test]
    fn unread_data_keeps_a_window_open_for_other_streams_up_to_capacity() {
        let r = Receiver::new(s(0), 16 << 20);
        assert_eq!(r.window(4 << 20), INITIAL_WINDOW as u64);
        assert_eq!(r.window(16 << 20), 0);
    }

    #[test]
    fn sack_reports_the_last_changed_range_first() {
        let mut r = Receiver::new(s(0), 1000);
        r.on_packet(s(5), 1, false, (0, 0), (0, 1));
        r.on_packet(s(2), 1, false, (0, 0), (0, 1));
        assert_eq!(r.sack_block(4).unwrap().ranges(), &[(2, 3), (5, 6)]);
    }
}
