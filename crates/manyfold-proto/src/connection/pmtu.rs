//! Path MTU discovery (spec §3.7; RFC 8899's datagram PLPMTUD): which
//! datagram size the connection uses now, which larger size it tries next,
//! and what a probe's fate or a black hole changes ([`PathMtu`]); then how
//! the connection sends a probe, learns its fate, and cuts packets that
//! the path no longer carries.
//!
//! The search tries a short list of sizes, largest first: the largest both
//! ends accept (what loopback carries), then a 9,000-byte jumbo path, then
//! a 1,500-byte Ethernet path, each less the IP and UDP headers. Every
//! probe that passes raises the size at once; three lost probes of one
//! size rule it out. Paths between these sizes keep the next smaller one.

use std::time::{Duration, Instant};

use super::{Connection, State};
use crate::recovery::PacketState;
use crate::seq::Seq;
use crate::wire::chunk::Chunks;
use crate::wire::{Flags, HEADER_LEN};

/// Lost probes of one size that rule it out (RFC 8899 MAX_PROBES).
pub(super) const MAX_PROBES: u8 = 3;
/// How long a finished search rests before it tries larger sizes again
/// (RFC 8899 PMTU_RAISE_TIMER's 600 s).
pub(super) const RAISE_INTERVAL: Duration = Duration::from_secs(600);
/// Data a connection sends before it probes: a short exchange never does.
pub(super) const BULK_BYTES: u64 = 64 << 10;
/// Link MTUs whose datagram sizes the search tries below the largest.
const PLATEAUS: [usize; 2] = [9000, 1500];
/// IP and UDP header bytes (spec §3.4).
const IPV4_HEADERS: usize = 28;
const IPV6_HEADERS: usize = 48;

/// A probe in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Probe {
    pub size: u16,
    pub seq: Seq,
}

#[derive(Debug)]
pub(super) struct PathMtu {
    /// The size the connection starts at and falls back to.
    base: u16,
    /// The size in use: `base`, or the largest probe that passed.
    current: u16,
    /// The largest size the search may try (`base` with discovery off).
    ceiling: u16,
    /// The smallest size ruled out; above `ceiling` while none is.
    failed: u32,
    /// Lost probes of the size being tried.
    tries: u8,
    probe: Option<Probe>,
    /// When a finished search (or one after a black hole) starts again.
    rest_until: Option<Instant>,
    ipv6: bool,
}

impl PathMtu {
    /// `base` and `ceiling` are datagram sizes both ends accept; `ceiling`
    /// below or at `base` means no discovery.
    pub fn new(base: u16, ceiling: u16, ipv6: bool) -> Self {
        let ceiling = ceiling.max(base);
        PathMtu {
            base,
            current: base,
            ceiling,
            failed: u32::from(ceiling) + 1,
            tries: 0,
            probe: None,
            rest_until: None,
            ipv6,
        }
    }

    /// The datagram size in use.
    pub fn current(&self) -> u16 {
        self.current
    }

    pub fn probe(&self) -> Option<Probe> {
        self.probe
    }

    /// The size to probe next, if a probe is due at `now`: none in flight,
    /// the search not resting, and a size left between what passed and
    /// what failed.
    pub fn next_size(&self, now: Instant) -> Option<u16> {
        if self.probe.is_some() || self.rest_until.is_some_and(|t| now < t) {
            return None;
        }
        let headers = if self.ipv6 { IPV6_HEADERS } else { IPV4_HEADERS };
        let above = |size: usize| size > usize::from(self.current) && (size as u32) < self.failed;
        std::iter::once(usize::from(self.ceiling))
            .chain(PLATEAUS.iter().map(|mtu| mtu - headers))
            .find(|&size| above(size))
            .map(|size| size as u16)
    }

    pub fn on_probe_sent(&mut self, size: u16, seq: Seq) {
        self.probe = Some(Probe { size, seq });
    }

    /// The probe arrived: its size is the path's from now on.
    pub fn on_probe_acked(&mut self, now: Instant) {
        if let Some(p) = self.probe.take() {
            self.current = self.current.max(p.size);
            self.tries = 0;
            self.rest_if_done(now);
        }
    }

    /// The probe was lost; the third loss at one size rules it out.
    pub fn on_probe_lost(&mut self, now: Instant) {
        if let Some(p) = self.probe.take() {
            self.tries += 1;
            if self.tries >= MAX_PROBES {
                self.failed = u32::from(p.size);
                self.tries = 0;
                self.rest_if_done(now);
            }
        }
    }

    /// The probe never left this host: the local interface's MTU is below
    /// its size, so that size (and every larger one) is ruled out at once,
    /// without the two further tries a loss on the path gets.
    pub fn on_probe_refused(&mut self, now: Instant) {
        if let Some(p) = self.probe.take() {
            self.failed = self.failed.min(u32::from(p.size));
            self.tries = 0;
            self.rest_if_done(now);
        }
    }

    /// Consecutive retransmission timeouts with packets larger than the
    /// base size in flight: the path may have narrowed under us (a black
    /// hole, RFC 8899 §4.3). Falls back to the base size and searches
    /// again at once, below the size that vanished. Returns whether the
    /// size changed.
    pub fn on_black_hole(&mut self) -> bool {
        if self.current <= self.base {
            return false;
        }
        self.failed = u32::from(self.current);
        self.current = self.base;
        self.probe = None;
        self.tries = 0;
        self.rest_until = None;
        true
    }

    fn rest_if_done(&mut self, now: Instant) {
        if self.next_size(now).is_none() && self.probe.is_none() {
            // Larger sizes are tried again later: a path may widen.
            self.failed = u32::from(self.ceiling) + 1;
            self.rest_until = Some(now + RAISE_INTERVAL);
        }
    }
}

impl Connection {
    /// The size of the probe due now, if one is (spec §3.7): the
    /// connection is synchronized with the handshake done and its FIN not
    /// yet sent, the application
    /// has sent [`BULK_BYTES`] and is still sending (a short exchange
    /// never pays for a probe), and the congestion window is not full. A probe
    /// may overshoot the window by its own size, as a tail-loss probe may
    /// (RFC 8985 §7.3): a bulk sender's window is always nearly full, and
    /// waiting for room the size of a 64 KiB probe would never end.
    pub(super) fn probe_due(&self, now: Instant) -> Option<u16> {
        // Data still flows (our FIN, the last sequence number, not sent yet).
        let sending = matches!(self.state, State::Established | State::CloseWait | State::FinWait1 | State::LastAck)
            && self.fin_seq.is_none();
        if !sending || self.awaiting_echo_ack() || self.awaiting_keys() || !self.rtt.has_sample() {
            return None;
        }
        let size = self.pmtu.next_size(now)?;
        let busy = self.streams.queued() > 0 || self.sent.bytes_in_flight() > 0;
        let bulk = self.stats.bytes_sent >= BULK_BYTES && busy;
        let room = self.sent.bytes_in_flight() < self.cc.window();
        (bulk && room).then_some(size)
    }

    /// Room the first datagram of a batch needs: a due probe's size, or
    /// the size in use.
    pub fn next_datagram_room(&self, now: Instant) -> usize {
        usize::from(self.probe_due(now).unwrap_or(0).max(self.wire_max_datagram())).max(self.whole_resend_size())
    }

    /// The datagram size of the next retransmission if it goes whole,
    /// which may be larger than the size in use (spec §3.7).
    fn whole_resend_size(&self) -> usize {
        if self.fin_seq.is_none() {
            return 0;
        }
        match self.sent.first_lost() {
            Some((seq, p)) if self.goes_whole(seq) => self.packet_size(p) + self.protection_overhead(),
            _ => 0,
        }
    }

    /// Sends the due probe into `buf` if it fits: a sequenced packet of
    /// PAD chunks that asks for an immediate ack (spec §3.7). Its record
    /// holds one PAD, so that if it is lost the repeat that lets the
    /// cumulative ack pass it is small.
    pub(super) fn send_pmtu_probe(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let size = self.probe_due(now)?;
        let room = usize::from(size).checked_sub(self.protection_overhead())?;
        let buf = buf.get_mut(..room)?;
        let seq = self.sent.next_seq();
        let padding = Chunks::padding(room - HEADER_LEN);
        let n = self.write(now, buf, Flags::KLV, seq, Some(&padding), 0)?;
        self.sent.on_sent(now, Chunks::padding(1), Flags::empty(), n as u32, false);
        self.sent.mark_probe();
        self.pmtu.on_probe_sent(size, seq);
        self.stats.pmtu_probes_sent += 1;
        self.arm_rto(now);
        Some(n)
    }

    /// Learns the fate of the probe in flight, after an ack or a loss
    /// timer: acknowledged before any loss was declared, its size is the
    /// path's; declared lost, it counts against that size.
    pub(super) fn check_probe(&mut self, now: Instant) {
        let Some(probe) = self.pmtu.probe() else { return };
        match self.sent.get(probe.seq).map(|p| (p.state, p.declared_lost)) {
            Some((_, true)) => {
                self.stats.pmtu_probes_lost += 1;
                self.pmtu.on_probe_lost(now);
            }
            None | Some((PacketState::Sacked, false)) => {
                self.pmtu.on_probe_acked(now);
                self.cc.set_mss(u64::from(self.wire_max_datagram()));
                tracing::debug!(target: "manyfold::state", conn = %self.local_id, size = probe.size, "path MTU raised");
            }
            Some(_) => {}
        }
    }

    /// The driver could not send a datagram of ours: the kernel refused it
    /// as larger than the interface allows (EMSGSIZE). `seq` is the
    /// sequence number in its header. If it was the path MTU probe in
    /// flight, the probe is lost now and its size ruled out (spec §3.7);
    /// otherwise nothing changes. Returns whether it was the probe.
    pub fn handle_too_large(&mut self, now: Instant, seq: u32) -> bool {
        let seq = Seq::from_wire(seq, self.sent.next_seq());
        if self.pmtu.probe().is_none_or(|p| p.seq != seq) || !self.sent.refuse_probe(seq) {
            return false;
        }
        self.stats.pmtu_probes_lost += 1;
        self.pmtu.on_probe_refused(now);
        true
    }

    /// A second retransmission timeout in a row while packets larger than
    /// the base size were in flight: back to the base size (spec §3.7).
    pub(super) fn check_black_hole(&mut self) {
        if self.rto_backoff >= 2 && self.pmtu.on_black_hole() {
            self.cc.set_mss(u64::from(self.wire_max_datagram()));
            self.stats.pmtu_black_holes += 1;
            tracing::debug!(target: "manyfold::state", conn = %self.local_id, size = self.pmtu.current(), "path MTU black hole");
        }
    }

    /// Cuts lost packet `seq` to the datagram size in use if it is larger
    /// (spec §3.7), keeping the stream bookkeeping of cut chunks and the
    /// FIN's sequence number right.
    pub(super) fn fit_retransmission(&mut self, seq: Seq, room: usize) {
        let (new, cut) = self.sent.split(seq, room);
        for msg in cut {
            self.streams.on_chunk_split(msg);
        }
        if let (Some(&last), true) = (new.last(), self.fin_seq == Some(seq)) {
            self.fin_seq = Some(last);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq() -> Seq {
        Seq::from_isn(1)
    }

    /// Runs a search against a path carrying datagrams up to `path` bytes.
    fn search(mut p: PathMtu, path: u16, now: Instant) -> (PathMtu, Vec<u16>) {
        let mut tried = Vec::new();
        while let Some(size) = p.next_size(now) {
            tried.push(size);
            p.on_probe_sent(size, seq());
            if size <= path {
                p.on_probe_acked(now);
            } else {
                p.on_probe_lost(now);
            }
            assert!(tried.len() < 20, "the search ends: {tried:?}");
        }
        (p, tried)
    }

    #[test]
    fn loopback_is_found_with_one_probe() {
        let now = Instant::now();
        let (p, tried) = search(PathMtu::new(1452, 65_507, false), 65_507, now);
        assert_eq!((p.current(), tried), (65_507, vec![65_507]));
    }

    #[test]
    fn a_jumbo_path_rules_out_the_ceiling_after_three_lost_probes() {
        let now = Instant::now();
        let (p, tried) = search(PathMtu::new(1452, 65_507, false), 8_972, now);
        assert_eq!(p.current(), 8_972);
        assert_eq!(tried, vec![65_507, 65_507, 65_507, 8_972]);
        let (p, _) = search(PathMtu::new(1452, 65_507, true), 8_952, now);
        assert_eq!(p.current(), 8_952, "IPv6 headers are 20 bytes larger");
    }

    #[test]
    fn an_ethernet_path_over_ipv6_keeps_the_base_size() {
        let now = Instant::now();
        let (p, tried) = search(PathMtu::new(1452, 65_507, true), 1_452, now);
        assert_eq!(p.current(), 1_452);
        assert_eq!(tried.len(), 6, "two sizes ruled out, 1,452 itself never probed: {tried:?}");
    }

    #[test]
    fn without_discovery_nothing_is_probed() {
        let now = Instant::now();
        let p = PathMtu::new(1452, 1452, false);
        assert_eq!(p.next_size(now), None);
        assert_eq!(PathMtu::new(1452, 0, false).current(), 1452, "a ceiling below the base is the base");
    }

    #[test]
    fn a_finished_search_rests_then_tries_larger_sizes_again() {
        let now = Instant::now();
        let (p, _) = search(PathMtu::new(1452, 65_507, false), 8_972, now);
        assert_eq!(p.next_size(now + RAISE_INTERVAL / 2), None, "resting");
        assert_eq!(p.next_size(now + RAISE_INTERVAL), Some(65_507), "the path may have widened");
    }

    #[test]
    fn a_black_hole_falls_back_to_the_base_and_searches_below_the_size_that_vanished() {
        let now = Instant::now();
        let (mut p, _) = search(PathMtu::new(1452, 65_507, false), 65_507, now);
        assert!(p.on_black_hole());
        assert_eq!(p.current(), 1452);
        assert!(!p.on_black_hole(), "already at the base");
        let (p, tried) = search(p, 8_972, now);
        assert_eq!((p.current(), tried), (8_972, vec![8_972]));
    }
}
