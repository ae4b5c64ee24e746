//! Slow receivers (spec §16.7): a receiver that reports itself behind its
//! network (KLV on its ACK) is awaited on its own from the next window on,
//! so paper 03's flow control sizes the windows to its pace; each
//! receiver's delivery rate is measured from its cumulative ACKs, and with
//! `min_rate` one slower than that is dropped, its outcome `TooSlow`.

use super::config::SenderEvent;
use super::members::ReceiverOutcome;
use super::McastSender;
use std::time::{Duration, Instant};

/// What windows wait for: a network id, or one receiver of its own.
pub(super) type AwaitKey = u64;

/// The shortest span of ACKs whose rate seeds the pace when a receiver
/// is first seen behind.
const MIN_SEED_SPAN: Duration = Duration::from_millis(10);

/// The span of ACKs one rate sample covers.
const RATE_SPAN: Duration = Duration::from_secs(1);

impl McastSender {
    /// The key receiver `idx`'s ACKs count for: its network's (or the
    /// group the sender put it in, spec §16.12), or its own once it
    /// reported itself behind.
    pub(super) fn await_key(&self, idx: usize) -> AwaitKey {
        let r = &self.receivers[idx];
        match r.group {
            _ if r.behind => (1 << 32) | idx as u64,
            // spec §16.12: the group the sender put it in.
            Some(g) if r.regroupable => Self::group_key(g),
            _ => u64::from(r.network),
        }
    }

    /// An ACK of `lwsn` from receiver `idx`; `behind`: it said it falls
    /// behind its network.
    pub(super) fn on_receiver_ack(&mut self, now: Instant, idx: usize, lwsn: u32, behind: bool) {
        if behind && !self.receivers[idx].behind && self.receivers[idx].outcome == ReceiverOutcome::Active {
            // spec §16.7: awaited apart from its network from the next
            // window on; the flow control then paces the session to it.
            let r = &mut self.receivers[idx];
            r.behind = true;
            let (client, addr) = (r.client, r.addr);
            self.events.push_back(SenderEvent::ReceiverBehind { client, addr });
            // Its own bottleneck has a queue, which windows sent back to
            // back (several in flight) overflow: from now on the data is
            // paced at the windows' rate, which waits for it (spec §16.7).
            self.slowest_paced = true;
            // The windows' rate still holds the fast networks' samples; the
            // pace starts at its own rate so far, from its cumulative ACKs.
            // (Its earlier ACKs were mostly suppressed: without an anchor,
            // from the data phase's start.)
            let r = &self.receivers[idx];
            let anchor = r.rate_anchor.or(self.data_started.map(|t| (t, 0)));
            if let Some((since, from)) = anchor.filter(|a| lwsn > a.1) {
                let span = now.saturating_duration_since(since).as_secs_f64();
                if span >= MIN_SEED_SPAN.as_secs_f64() {
                    let own = f64::from(lwsn - from) * f64::from(self.info.block) / span;
                    self.rate = Some(self.rate.map_or(own, |rate| rate.min(own)));
                }
            }
            // A queue builds up in front of it: a sign of congestion, which
            // ends slow start and halves the window (spec §16.3).
            if self.slow_start {
                self.end_slow_start(false);
                self.w = (self.w / 2).max(1);
            }
        }
        if !behind && self.receivers[idx].behind {
            // spec §16.7: it caught up (a busy host's stall, or the pace
            // now waits for it): awaited with its network again from the
            // next window on, and the pace kept only for others behind.
            let own = self.await_key(idx);
            self.receivers[idx].behind = false;
            let network = self.await_key(idx);
            // Windows in flight that wait for it alone wait for its
            // network instead, whose ACKs now stand for it.
            for w in &mut self.windows {
                if let Some(k) = w.awaited.iter().position(|&n| n == own) {
                    w.awaited.swap_remove(k);
                    if !w.awaited.contains(&network) {
                        w.awaited.push(network);
                    }
                }
            }
            self.slowest_paced = self.receivers.iter().any(|r| r.behind && r.outcome == ReceiverOutcome::Active);
            self.resolve_ready(now);
        }
        self.measure_rate(now, idx, lwsn);
    }

    /// spec §16.7: the rate receiver `idx` takes data at, from its
    /// cumulative ACKs over at least `RATE_SPAN`; below `min_rate`, it is
    /// dropped.
    fn measure_rate(&mut self, now: Instant, idx: usize, lwsn: u32) {
        let block = f64::from(self.info.block);
        let r = &mut self.receivers[idx];
        let Some((since, from)) = r.rate_anchor else {
            r.rate_anchor = Some((now, lwsn));
            return;
        };
        let span = now.saturating_duration_since(since);
        if span < RATE_SPAN || lwsn < from {
            return;
        }
        let rate = f64::from(lwsn - from) * block / span.as_secs_f64();
        r.rate = Some(rate);
        r.rate_anchor = Some((now, lwsn));
        let too_slow = self.cfg.min_rate.is_some_and(|min| rate < min as f64);
        if too_slow && r.outcome == ReceiverOutcome::Active && self.holds_back(idx) {
            self.drop_receiver(now, idx, ReceiverOutcome::TooSlow);
            // The others were held to its pace: their rates start again.
            for r in &mut self.receivers {
                r.rate_anchor = None;
            }
        }
    }

    /// Whether receiver `idx` is the one holding the session back: a
    /// session slowed to its slowest receiver measures everyone at that
    /// pace, and only the cause is dropped. The suspects are the receivers
    /// behind their network if any, else all; the cause is the slowest.
    fn holds_back(&self, idx: usize) -> bool {
        let live = |r: &&super::ReceiverReport| r.outcome == ReceiverOutcome::Active;
        let any_behind = self.receivers.iter().filter(live).any(|r| r.behind);
        let me = &self.receivers[idx];
        if any_behind && !me.behind {
            return false;
        }
        let mine = me.rate.unwrap_or(f64::MAX);
        self.receivers
            .iter()
            .filter(live)
            .filter(|r| r.behind || !any_behind)
            .filter_map(|r| r.rate)
            .all(|other| mine <= other)
    }
}
