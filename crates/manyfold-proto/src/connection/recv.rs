//! The receiving side of a connection (spec §5.2, §7): in-order delivery,
//! the out-of-order store bounded by the receive buffer, SACK ranges, and
//! the window we advertise.
//!
//! Unlike paper 04's RUSP and paper 02's RUDP, nothing a compliant sender
//! sends is ever dropped for lack of room: the advertised window is
//! `capacity - readable`, and the sender counts everything above the
//! cumulative ack against it (spec §7.1), so `readable + out_of_order`
//! never exceeds `capacity`.
//!
//! Storage is reused, so the data path allocates nothing per packet: data
//! in order is copied straight into a [`ByteRing`]; a packet above a gap is
//! held in a buffer taken from a pool of spare ones, and its buffer goes
//! back to the pool when the gap fills.

use std::collections::BTreeMap;
use std::ops::Range;
use std::time::{Duration, Instant};

use crate::rangeset::RangeSet;
use crate::ring::ByteRing;
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
    /// New, above a gap: held until the gap fills.
    OutOfOrder,
    /// Already held or delivered.
    Duplicate,
    /// Beyond what we could ever have advertised, or no room: dropped.
    Dropped,
}

#[derive(Debug)]
struct Held {
    data: Vec<u8>,
    fin: bool,
}

/// Most spare out-of-order buffers kept for reuse (a few MB at most).
const MAX_SPARE: usize = 4096;

#[derive(Debug)]
pub(crate) struct Receiver {
    /// Next expected sequence number (the cumulative ack we send).
    next: u64,
    held: BTreeMap<u64, Held>,
    held_bytes: usize,
    ranges: RangeSet,
    /// The range that changed last: reported first in SACK blocks (RFC 2018 §4).
    last_changed: Option<Range<u64>>,
    /// In-order data not yet read.
    readable: ByteRing,
    /// Buffers of delivered out-of-order packets, reused for the next ones.
    spare: Vec<Vec<u8>>,
    capacity: usize,
    /// The auto-tuned window limit (spec §7.4): starts at
    /// [`INITIAL_WINDOW`], only grows, never beyond `capacity`.
    limit: usize,
    /// Bytes delivered in order since `round_start`.
    round_bytes: usize,
    round_start: Option<Instant>,
    max_held_packets: usize,
    /// The peer's FIN has been reached in order.
    fin_reached: bool,
    /// The application released the connection: data is counted, not kept.
    discard: bool,
}

impl Receiver {
    pub fn new(next: u64, capacity: usize) -> Self {
        Receiver {
            next,
            held: BTreeMap::new(),
            held_bytes: 0,
            ranges: RangeSet::new(),
            last_changed: None,
            readable: ByteRing::default(),
            spare: Vec::new(),
            capacity,
            limit: initial_window(capacity),
            round_bytes: 0,
            round_start: None,
            // Bounds the out-of-order store's entry count even for tiny packets.
            max_held_packets: capacity / 256 + 256,
            fin_reached: false,
            discard: false,
        }
    }

    pub fn next(&self) -> u64 {
        self.next
    }

    pub fn fin_reached(&self) -> bool {
        self.fin_reached
    }

    pub fn has_gaps(&self) -> bool {
        !self.ranges.is_empty()
    }

    pub fn readable_bytes(&self) -> usize {
        self.readable.len()
    }

    /// spec §7.1: free buffer beyond the cumulative ack, within the
    /// auto-tuned limit (§7.4).
    pub fn window(&self) -> u64 {
        self.limit.saturating_sub(self.readable.len()) as u64
    }

    /// spec §7.4, after Linux's receive-buffer auto-tuning: if more than
    /// half the window arrived in order within one round trip, the window
    /// may be what holds the sender back: double it (up to `capacity`).
    /// The limit only grows, so the advertised right edge never moves back.
    pub fn autotune(&mut self, now: Instant, delivered: usize, srtt: Duration) {
        let start = *self.round_start.get_or_insert(now);
        self.round_bytes += delivered;
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

    pub fn set_discard(&mut self) {
        self.discard = true;
        self.readable.clear();
    }

    /// Takes one sequenced packet. Returns what happened and how many bytes
    /// became readable in order.
    pub fn on_packet(&mut self, seq: u64, data: &[u8], fin: bool) -> (Arrival, usize) {
        if seq < self.next || self.held.contains_key(&seq) {
            return (Arrival::Duplicate, 0);
        }
        if self.fin_reached {
            return (Arrival::Dropped, 0);
        }
        if seq > self.next {
            let room = self.capacity.saturating_sub(self.readable.len() + self.held_bytes);
            if data.len() > room || self.held.len() >= self.max_held_packets {
                return (Arrival::Dropped, 0);
            }
            self.held_bytes += data.len();
            let mut buf = self.spare.pop().unwrap_or_default();
            buf.clear();
            buf.extend_from_slice(data);
            self.held.insert(seq, Held { data: buf, fin });
            self.last_changed = Some(self.ranges.insert(seq..seq + 1));
            return (Arrival::OutOfOrder, 0);
        }
        if data.len() > self.capacity.saturating_sub(self.readable.len() + self.held_bytes) {
            return (Arrival::Dropped, 0);
        }
        let mut delivered = self.deliver(data, fin);
        // Pull whatever the gap was holding back.
        while let Some(entry) = self.held.first_entry() {
            if *entry.key() != self.next {
                break;
            }
            let h = entry.remove();
            self.held_bytes -= h.data.len();
            delivered += self.deliver(&h.data, h.fin);
            if self.spare.len() < MAX_SPARE {
                self.spare.push(h.data);
            }
        }
        self.ranges.remove_below(self.next);
        if self.last_changed.as_ref().is_some_and(|r| r.end <= self.next) {
            self.last_changed = None;
        }
        (Arrival::InOrder, delivered)
    }

    fn deliver(&mut self, data: &[u8], fin: bool) -> usize {
        self.next += 1;
        if !self.discard {
            self.readable.push(data);
        }
        if fin {
            self.fin_reached = true;
        }
        data.len()
    }

    /// Copies in-order data into `buf`; returns bytes copied.
    pub fn read(&mut self, buf: &mut [u8]) -> usize {
        self.readable.read(buf)
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
            s.push(r.start as u32, r.end as u32);
        }
        for r in self.ranges.iter_rev() {
            if s.ranges().len() >= max {
                break;
            }
            if self.last_changed.as_ref() != Some(&r) {
                s.push(r.start as u32, r.end as u32);
            }
        }
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gap_holds_data_until_filled() {
        let mut r = Receiver::new(10, 1000);
        assert_eq!(r.on_packet(11, b"bb", false), (Arrival::OutOfOrder, 0));
        assert_eq!(r.on_packet(12, b"cc", true), (Arrival::OutOfOrder, 0));
        assert_eq!(r.sack_block(4).unwrap().ranges(), &[(11, 13)]);
        assert_eq!(r.on_packet(10, b"aa", false), (Arrival::InOrder, 6));
        assert!(r.fin_reached());
        assert_eq!(r.next(), 13);
        let mut buf = [0u8; 10];
        assert_eq!(r.read(&mut buf), 6);
        assert_eq!(&buf[..6], b"aabbcc");
        assert!(r.sack_block(4).is_none());
    }

    #[test]
    fn duplicates_are_reported() {
        let mut r = Receiver::new(0, 1000);
        r.on_packet(0, b"a", false);
        r.on_packet(2, b"c", false);
        assert_eq!(r.on_packet(0, b"a", false).0, Arrival::Duplicate);
        assert_eq!(r.on_packet(2, b"c", false).0, Arrival::Duplicate);
    }

    #[test]
    fn window_is_capacity_minus_unread() {
        let mut r = Receiver::new(0, 100);
        r.on_packet(0, &[0; 60], false);
        assert_eq!(r.window(), 40);
        // Out-of-order data is the sender's to count, not ours.
        r.on_packet(2, &[0; 30], false);
        assert_eq!(r.window(), 40);
        // But nothing beyond capacity is ever held.
        assert_eq!(r.on_packet(3, &[0; 20], false).0, Arrival::Dropped);
        let mut buf = [0u8; 60];
        r.read(&mut buf);
        assert_eq!(r.window(), 100);
    }

    #[test]
    fn window_limit_doubles_when_half_of_it_arrives_within_a_round_trip() {
        let t0 = Instant::now();
        let rtt = Duration::from_millis(100);
        let mut r = Receiver::new(0, 64 << 20);
        assert_eq!(r.window(), INITIAL_WINDOW as u64);
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
    fn sack_reports_the_last_changed_range_first() {
        let mut r = Receiver::new(0, 1000);
        r.on_packet(5, b"x", false);
        r.on_packet(2, b"x", false);
        assert_eq!(r.sack_block(4).unwrap().ranges(), &[(2, 3), (5, 6)]);
    }
}
