//! Windows and paper 03's flow control (spec §16.3–§16.4): sending
//! windows (up to `windows_in_flight` awaiting their ACKs at once), their
//! ACKs per awaited network, the timer's growth and shrink, slow start,
//! the loss rule and its tolerance, probing a lost window end, the
//! delivery rate, and ARTP_max's adaptation.

use super::config::{SenderEvent, WindowRecord};
use super::slow::AwaitKey;
use super::{McastSender, SenderTimer};
use crate::mcast::McTransmit;
use crate::wire::mcast::emit;
use crate::wire::{Flags, PacketType};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub(super) struct Window {
    pub(super) first: u32,
    pub(super) lwsn: u32,
    pub(super) next: u32,
    pub(super) started: Option<Instant>,
    /// Its last packet is due again (`SenderTimer::Probe` expired).
    pub(super) probe_due: bool,
    /// Its last packet had to be sent again: a loss, taken as congestion.
    pub(super) probed: bool,
    pub(super) sent_at: Option<Instant>,
    /// Networks (or receivers awaited on their own, spec §16.7) it waits for.
    pub(super) awaited: Vec<AwaitKey>,
    pub(super) acked: Vec<AwaitKey>,
    pub(super) feedback: u32,
    pub(super) timeout: Duration,
    /// When its timer expires (armed when its last packet leaves).
    pub(super) deadline: Option<Instant>,
    /// When its last packet goes again if no network acked by then.
    pub(super) probe_at: Option<Instant>,
    /// Losses each receiver reported while this was the oldest open
    /// window, of packets sent since the previous window began (receiver
    /// index, count): what judges it (spec §16.3).
    pub(super) lost: Vec<(usize, u32)>,
    /// The most of them one receiver not behind its network reported ...
    pub(super) worst_lost: u32,
    /// ... and one behind it (spec §16.7).
    pub(super) worst_lost_behind: u32,
}

/// Packets a file of `size` bytes takes (an empty file is one empty packet).
pub(crate) fn packets_for(size: u64, block: u16) -> u32 {
    size.div_ceil(u64::from(block)).max(1).min(u64::from(u32::MAX - 1)) as u32
}

/// Whole packets that can go now: all of them once the total is known,
/// else the full blocks available so far.
pub(super) fn packets_available(available: u64, block: u16, total: Option<u32>) -> u32 {
    match total {
        Some(t) => t,
        None => (available / u64::from(block)).min(u64::from(u32::MAX - 1)) as u32,
    }
}

/// spec §16.3: how often random loss at exactly the tolerated rate may cut
/// a window: one window in twenty, whatever the number of receivers.
const FALSE_CUT: f64 = 0.05;

/// spec §16.3: the losses one receiver may report while a window of
/// `size` packets is open without the window shrinking: the least `k`
/// such that the most of `receivers` independent Poisson draws with mean
/// `tolerance · size` exceeds `k` with probability at most [`FALSE_CUT`]
/// (each draw exceeds it with at most `FALSE_CUT / receivers`), at least
/// one. Random loss (whose reports may also fall into the next window) is
/// then not read as congestion, while a bottleneck's burst is.
///
/// The exact tail, not mean plus z standard deviations: a small window's
/// mean is a fraction of a packet, where the normal approximation put a
/// thousand receivers' allowance for a 2-packet window at 1.25 losses,
/// which random loss of 1% beats nearly every window, so slow start ended
/// at the second window (the simulator's 1,000 receivers, seed 7955).
pub(super) fn loss_allowance(tolerance: f64, size: f64, receivers: usize) -> f64 {
    let mean = (tolerance * size).max(0.0);
    if mean == 0.0 {
        return 1.0;
    }
    let alpha = FALSE_CUT / receivers.max(1) as f64;
    // P(X = k) kept in log space (no underflow for a large mean), summed
    // until the tail beyond k is at most alpha; bounded far beyond any
    // quantile a double can tell apart.
    let limit = (mean + 40.0 * mean.sqrt() + 40.0) as u32;
    let mut ln_p = -mean;
    let mut below = 0.0;
    for k in 0..limit {
        if k > 0 {
            ln_p += mean.ln() - f64::from(k).ln();
        }
        below += ln_p.exp();
        if 1.0 - below <= alpha {
            return f64::from(k).max(1.0);
        }
    }
    f64::from(limit)
}

impl McastSender {
    /// spec §16.3: receiver `idx` reported `ranges` missing. With the
    /// paper's rule the window shrinks by one for each report that names a
    /// loss not reported before. Otherwise the oldest open window counts,
    /// per receiver (the loss tolerance's measure: one receiver's rate, not
    /// the sum of all), the reported losses of every packet sent since the
    /// previous window began, its own and those of the windows in flight
    /// after it; older losses count for none. A loss is congestion to
    /// answer at the next window to resolve, not two or three windows
    /// later when the window that carried the packet resolves: with three
    /// windows in flight the queue overflowing at a slow receiver kept
    /// overflowing meanwhile, and the simulator's 1,000 receivers took
    /// 1.124x the bottleneck time (898 packets repaired at the end) against
    /// 1.082x (none) this way.
    pub(super) fn note_losses(&mut self, idx: usize, ranges: impl Iterator<Item = std::ops::Range<u32>>) {
        let from = self.windows.front().map(|w| self.recent_from.min(w.first));
        let mut named = 0u64;
        let mut recent = 0u32;
        let mut new = 0u32;
        for r in ranges {
            let r = r.start..r.end.min(self.next_sn);
            named += u64::from(r.end.saturating_sub(r.start));
            if let Some(from) = from {
                recent = recent.saturating_add(r.end.saturating_sub(r.start.max(from)));
            }
            for sn in r {
                new += u32::from(self.nacked.set(sn) == Some(true));
            }
        }
        if new > 0 && self.cfg.loss_tolerance <= 0.0 {
            self.w = self.w.saturating_sub(1).max(1);
            self.end_slow_start(false);
        }
        self.receivers[idx].reported_lost += named;
        // A receiver behind its own bottleneck is judged alone (spec §16.7):
        // its losses are its queue's, not one draw among many.
        let behind = self.receivers[idx].behind;
        let Some(w) = self.windows.front_mut().filter(|_| recent > 0) else { return };
        let total = match w.lost.iter_mut().find(|(i, _)| *i == idx) {
            Some((_, c)) => {
                *c = c.saturating_add(recent);
                *c
            }
            None => {
                w.lost.push((idx, recent));
                recent
            }
        };
        let worst = if behind { &mut w.worst_lost_behind } else { &mut w.worst_lost };
        *worst = (*worst).max(total);
    }

    /// spec §16.3: an ACK of LWSN `lwsn` from `network` confirms, for that
    /// network, every open window whose last packet is at or before it
    /// (with windows in flight, a receiver's ACK of window k+1 also says it
    /// got past window k, whose own ACK may be lost or merged into it).
    pub(super) fn on_window_ack(&mut self, now: Instant, network: AwaitKey, lwsn: u32) {
        if self.windows.is_empty() {
            self.stats.late_acks += 1;
            return;
        }
        // The ACK counts as feedback of the window it names, else the oldest.
        let named = self.windows.iter().position(|w| w.lwsn == lwsn).unwrap_or(0);
        self.windows[named].feedback += 1;
        let mut covered = false;
        let mut sample = None;
        for w in &mut self.windows {
            let Some(sent) = w.sent_at.filter(|_| w.lwsn <= lwsn) else { continue };
            covered = true;
            if w.awaited.contains(&network) && !w.acked.contains(&network) {
                if w.acked.is_empty() && w.lwsn == lwsn {
                    sample = Some(now.saturating_duration_since(sent));
                }
                w.acked.push(network);
            }
        }
        if !covered {
            self.stats.late_acks += 1;
        }
        if let Some(sample) = sample {
            self.ack_time = Some(self.ack_time.map_or(sample, |t| (t * 7 + sample) / 8));
        }
        self.resolve_ready(now);
    }

    /// Confirms every fully sent window that every awaited network acked.
    pub(super) fn resolve_ready(&mut self, now: Instant) {
        while let Some(i) =
            self.windows.iter().position(|w| w.sent_at.is_some() && w.awaited.iter().all(|n| w.acked.contains(n)))
        {
            self.resolve_window(now, i, true);
        }
    }

    /// The window timers (spec §16.3): the earliest expiry and the earliest
    /// probe among the open windows.
    pub(super) fn rearm_window_timers(&mut self) {
        let end = self.windows.iter().filter_map(|w| w.deadline).min();
        self.timers.set_or_cancel(SenderTimer::WindowEnd, end);
        let probe = self.windows.iter().filter(|w| w.acked.is_empty() && !w.probed).filter_map(|w| w.probe_at).min();
        self.timers.set_or_cancel(SenderTimer::Probe, probe);
    }

    /// `SenderTimer::WindowEnd`: every window whose timer ran out expires.
    pub(super) fn expire_windows(&mut self, now: Instant) {
        while let Some(i) = self.windows.iter().position(|w| w.deadline.is_some_and(|d| d <= now)) {
            self.resolve_window(now, i, false);
        }
        self.rearm_window_timers();
    }

    /// `SenderTimer::Probe`: the last packet of each window no network
    /// acked in time goes again.
    pub(super) fn probe_windows(&mut self, now: Instant) {
        for w in &mut self.windows {
            if w.probe_at.is_some_and(|t| t <= now) {
                w.probe_at = None;
                w.probe_due = w.acked.is_empty();
            }
        }
        self.rearm_window_timers();
    }

    /// spec §16.3: a window is confirmed (every awaited network acked) or
    /// its timer expired.
    pub(super) fn resolve_window(&mut self, now: Instant, idx: usize, confirmed: bool) {
        let Some(w) = self.windows.remove(idx) else { return };
        let worst = w.lost.iter().copied().max_by_key(|&(_, n)| n);
        self.rearm_window_timers();
        let sent = w.sent_at.unwrap_or(now);
        let mut cut_for_loss = false;
        // A window confirmed only thanks to a probe lost its last packet
        // everywhere: the flow control reacts as to an expiry (the paper's
        // congestion signal), though the window was saved in time.
        if confirmed && !w.probed {
            self.stats.windows_confirmed += 1;
            self.timeout = self.timeout.div_f64(self.cfg.beta).max(self.cfg.default_timeout);
            // With a loss tolerance, losses shrink the window only above
            // that fraction of what went out (spec §16.3).
            let size = f64::from(w.lwsn + 1 - w.first);
            // With windows in flight a window may have queued behind the
            // previous one: its delivery took from the later of its start
            // and the previous resolution.
            if let Some(start) = w.started.map(|s| self.last_resolved.map_or(s, |r| r.max(s))) {
                let took = now.saturating_duration_since(start).as_secs_f64().max(1e-6);
                let sample = size * f64::from(self.info.block) / took;
                self.rate = Some(self.rate.map_or(sample, |r| 0.75 * r + 0.25 * sample));
                self.peak_rate = self.peak_rate.max(sample);
            }
            let tolerance = self.cfg.loss_tolerance;
            let over = |lost: u32, n: usize| f64::from(lost) > loss_allowance(tolerance, size, n);
            cut_for_loss = tolerance > 0.0 && (over(w.worst_lost, self.live()) || over(w.worst_lost_behind, 1));
            if cut_for_loss {
                // Shrink in proportion to the loss (a receiver losing half
                // a window behind its own bottleneck halves it in two
                // windows), by one at least.
                let worst = w.worst_lost.max(w.worst_lost_behind);
                let f = (f64::from(worst) / size).min(1.0);
                let scaled = (f64::from(self.w) * (1.0 - f / 2.0)) as u32;
                self.w = scaled.min(self.w.saturating_sub(1)).max(1);
                self.end_slow_start(false);
            } else if self.queue_building(now.saturating_duration_since(sent)) {
                // A queue building ends slow start, as HyStart's delay
                // signal does TCP's: doubling on would overshoot it.
                self.stats.growth_held += 1;
                self.end_slow_start(true);
            } else if self.slow_start
                && self.round_took_longer(now.saturating_duration_since(sent), w.lwsn + 1 - w.first)
            {
                // The rise was measured on windows sized before the ones
                // now in flight, each of which doubled again: halve, as
                // the loss rule would once the queue overflowed.
                self.end_slow_start(true);
                self.w = (self.w / 2).max(1);
            } else if self.slow_start {
                self.w = self.w.saturating_mul(2).min(self.cfg.max_window.max(1));
            } else {
                self.w = (self.w + 1).min(self.cfg.max_window.max(1));
            }
        } else {
            if confirmed {
                self.stats.windows_confirmed += 1;
            } else {
                self.stats.windows_expired += 1;
            }
            self.timeout = self.timeout.mul_f64(self.cfg.alpha).min(self.cfg.max_timeout);
            self.w = self.w.saturating_sub(1).max(1);
            self.end_slow_start(false);
        }
        self.last_resolved = Some(now);
        self.recent_from = w.first;
        self.settle_blocks();
        self.adapt_artp(now, w.awaited.len());
        self.events.push_back(SenderEvent::Window(WindowRecord {
            first: w.first,
            lwsn: w.lwsn,
            size: w.lwsn + 1 - w.first,
            sent,
            confirmed,
            resolved: now,
            timeout: w.timeout,
            feedback: w.feedback,
            worst_lost: worst.map_or(0, |(_, n)| n),
            worst_receiver: worst.map(|(i, _)| i),
            cut_for_loss,
        }));
        if self.windows.is_empty() && self.total.is_some_and(|t| self.next_sn >= t) {
            self.enter_repair(now);
        }
    }

    /// spec §16.3, "Queue delay": whether a window confirmed `delay` after
    /// its last packet left says a queue is building: later than the least
    /// delay of the last `DELAY_WINDOWS` confirmed windows by more than
    /// `queue_target` and the ACK's own backoff bound. Also keeps that
    /// least delay (a newer one once it is that many windows old, so that
    /// a receiver further away, or a standing queue, becomes the base).
    fn queue_building(&mut self, delay: Duration) -> bool {
        /// Confirmed windows a least delay stands for.
        const DELAY_WINDOWS: u32 = 256;
        let Some(target) = self.cfg.queue_target else { return false };
        let least = match self.least_delay {
            Some((d, age)) if d <= delay && age < DELAY_WINDOWS => (d, age + 1),
            _ => (delay, 0),
        };
        self.least_delay = Some(least);
        delay > least.0 + target + self.artp_max()
    }

    /// spec §16.3, "Slow start": a delay (`by_delay`), or a loss above the
    /// tolerance, an expiry or a receiver falling behind its network
    /// (§16.7) ends it.
    pub(super) fn end_slow_start(&mut self, by_delay: bool) {
        if self.slow_start {
            self.slow_start = false;
            self.stats.slow_start_ended_by_delay = Some(by_delay);
        }
    }

    /// spec §16.3, "Slow start": slow start's delay signal, as HyStart++
    /// (RFC 9406) reads TCP's round trips. Confirmed windows fall into
    /// rounds of `windows_in_flight`; from a round's second window on (its
    /// first with one window in flight), its least delay so far (last
    /// packet out to confirmation) is compared with the previous round's
    /// least, and a rise of more than `clamp(previous / 8, 4 ms, 16 ms)`
    /// beyond what the window's own growth explains says the window has
    /// outgrown the path: a queue is building at the slowest network.
    ///
    /// A window leaves in a burst and its delay is its last packet's, so a
    /// window k packets larger waits k packets longer at a bottleneck of
    /// its own making: `k · block / peak` is allowed for, with `peak` the
    /// highest delivery rate a window has shown, at most the bottleneck's
    /// (an underestimate early on only allows more). Without it one window
    /// in flight left slow start at 35 packets on a 20 ms, 100 Mbit/s path
    /// (1.9x the time). The least of a round, not each window's delay, so
    /// that one late ACK (a receiver's backoff, an acker deferred to) does
    /// not end slow start.
    fn round_took_longer(&mut self, delay: Duration, size: u32) -> bool {
        let (least, at, n) = match self.this_round {
            Some((d, at, n)) if d <= delay => (d, at, n + 1),
            Some((_, _, n)) => (delay, size, n + 1),
            None => (delay, size, 1),
        };
        let per_round = self.cfg.windows_in_flight.max(1);
        let rose = n >= per_round.min(2)
            && self.round_least.is_some_and(|(prev, prev_size)| {
                let eta = (prev / 8).clamp(Duration::from_millis(4), Duration::from_millis(16));
                let grown = f64::from(at.saturating_sub(prev_size)) * f64::from(self.info.block);
                let own =
                    if self.peak_rate > 0.0 { Duration::from_secs_f64(grown / self.peak_rate) } else { Duration::ZERO };
                least > prev + eta + own
            });
        if n >= per_round {
            self.round_least = Some((least, at));
            self.this_round = None;
        } else {
            self.this_round = Some((least, at, n));
        }
        rose
    }

    /// spec §16.4: suppression works when the backoff spread is wide
    /// against the delay between receivers; every 4 windows the ACKs per
    /// window per network steer `ARTP_max`, announced at once.
    pub(super) fn adapt_artp(&mut self, now: Instant, networks: usize) {
        if !self.cfg.adapt_artp {
            return;
        }
        self.artp_windows += 1;
        self.artp_networks += networks as u64;
        // While the window doubles, windows are few: adapt after each.
        if self.artp_windows < if self.slow_start { 1 } else { 4 } {
            return;
        }
        let per = (self.stats.acks - self.artp_acks_at) as f64 / self.artp_networks.max(1) as f64;
        let current = Duration::from_micros(u64::from(self.info.artp_max_us));
        // With n receivers a delay d apart, a window draws about
        // 1 + (n − 1)·d / ARTP_max ACKs: scale towards 1.3 per network
        // (room for a NACK within the target of 2 feedback packets), by at
        // most ×4 up and ×0.9 down per step.
        let next = if !(1.15..=1.5).contains(&per) {
            current.mul_f64(((per - 1.0) / 0.3).clamp(0.9, 4.0)).clamp(self.cfg.artp_max, self.cfg.artp_cap)
        } else {
            current
        };
        if next != current {
            self.info.artp_max_us = next.as_micros().min(u128::from(u32::MAX)) as u32;
            self.timers.set(SenderTimer::Announce, now);
        }
        self.artp_windows = 0;
        self.artp_networks = 0;
        self.artp_acks_at = self.stats.acks;
    }

    /// The feedback backoff bound in force (spec §16.4).
    pub fn artp_max(&self) -> Duration {
        Duration::from_micros(u64::from(self.info.artp_max_us))
    }

    pub(super) fn send_data(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        source: &mut dyn FnMut(u64, &mut [u8]) -> usize,
    ) -> Option<McTransmit> {
        if let Some(w) = self.windows.iter_mut().find(|w| w.probe_due) {
            w.probe_due = false;
            w.probed = true;
            let lwsn = w.lwsn;
            self.stats.probes += 1;
            let (n, _) = self.write_data(buf, lwsn, lwsn, false, source)?;
            return Some(McTransmit { destination: self.group, size: n });
        }
        let sending = self.windows.back().is_some_and(|w| w.next <= w.lwsn);
        if !sending {
            let available = packets_available(self.available, self.info.block, self.total);
            let first = self.next_sn;
            if first >= available {
                if self.windows.is_empty() && self.total.is_some_and(|t| first >= t) {
                    self.enter_repair(now);
                }
                return None;
            }
            // spec §16.3, windows in flight: the next window opens once the
            // last one is sent, while at most `windows_in_flight` await ACKs.
            if self.windows.len() >= self.cfg.windows_in_flight.max(1) as usize {
                return None;
            }
            let lwsn = (first + self.w - 1).min(available - 1);
            let awaited = self.awaited_networks();
            self.windows.push_back(Window {
                first,
                lwsn,
                next: first,
                started: None,
                probe_due: false,
                probed: false,
                sent_at: None,
                awaited,
                acked: Vec::new(),
                feedback: 0,
                timeout: self.timeout,
                deadline: None,
                probe_at: None,
                lost: Vec::new(),
                worst_lost: 0,
                worst_lost_behind: 0,
            });
        }
        let (sn, lwsn) = self.windows.back().filter(|w| w.next <= w.lwsn).map(|w| (w.next, w.lwsn))?;
        let n = self.write_data(buf, sn, lwsn, false, source)?;
        self.stats.data_packets += 1;
        self.stats.data_bytes += n.1 as u64;
        self.next_sn = self.next_sn.max(sn + 1);
        self.after_data(sn);
        let timeout = self.timeout;
        // A lost last packet leaves every receiver waiting for the window's
        // end: probe with it well before the timer, at twice the usual time
        // to the first ACK (at least 4 ARTP_max).
        let probe = self.ack_time.map_or(timeout / 2, |t| (t * 2).max(self.artp_max() * 4));
        let w = self.windows.back_mut()?;
        w.started.get_or_insert(now);
        w.next += 1;
        if w.next > w.lwsn {
            // Its last packet left: its timer runs from now.
            w.sent_at = Some(now);
            w.deadline = Some(now + timeout);
            if probe < timeout {
                // spec §16.3: the window's last packet goes again, once, if
                // no network has acked by then (a lost LWSN packet).
                w.probe_at = Some(now + probe.max(Duration::from_millis(1)));
            }
            self.rearm_window_timers();
            // Nobody to wait for (every receiver dropped): settle at once.
            self.resolve_ready(now);
        }
        Some(McTransmit { destination: self.group, size: n.0 })
    }

    /// A DATA packet for `sn`: (datagram length, payload length).
    pub(super) fn write_data(
        &mut self,
        buf: &mut [u8],
        sn: u32,
        lwsn: u32,
        repair: bool,
        source: &mut dyn FnMut(u64, &mut [u8]) -> usize,
    ) -> Option<(usize, usize)> {
        let block = usize::from(self.info.block);
        let offset = u64::from(sn) * block as u64;
        let want = (self.available.saturating_sub(offset)).min(block as u64) as usize;
        let last = self.total.is_some_and(|t| sn + 1 == t);
        let mut flags = if last { Flags::FIN } else { Flags::empty() };
        if repair {
            flags.insert(Flags::KLV);
        }
        let mut got = 0;
        let n = emit(buf, PacketType::McData, flags, self.session, sn, lwsn, self.w, |o| {
            let len = want.min(o.len());
            let o = &mut o[..len];
            got = source(offset, o).min(o.len());
            got
        })?;
        Some((n, got))
    }
}
