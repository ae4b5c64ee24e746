//! A model-based controller in the style of BBR v1 (Cardwell et al., ACM
//! Queue 2016; draft-cardwell-iccrg-bbr-congestion-control-00; spec §9.5),
//! with BBR v2's ProbeRTT (draft-cardwell-iccrg-bbr-congestion-control-02
//! §4.3.4).
//!
//! It models the path by its bottleneck bandwidth (a windowed maximum of
//! delivery-rate samples) and its round-trip propagation time (a windowed
//! minimum of RTT samples), paces at gain × bandwidth and keeps about two
//! bandwidth-delay products in flight. Random loss is not read as
//! congestion: a lost packet changes neither estimate. An RTO still drops
//! the window to a few packets until the path answers again: once as
//! many bytes as were in flight at the RTO have been delivered, the window
//! it had comes back at once.
//!
//! ProbeRTT, which refreshes the minimum RTT every 10 s, holds the window
//! at half a BDP (not BBR v1's 4 packets), and is skipped altogether by a
//! flow whose own inflight sat that low recently (an application-limited
//! flow): its RTT samples were already taken without a queue of its own.
//! While the window is held down (ProbeRTT, after an RTO) the delivery
//! rate measures the controller's own limit, not the path's, so those
//! samples never lower the bandwidth estimate.
//!
//! Loss *with a standing queue* is another matter (spec §9.5). BBR v1 keeps
//! two BDPs in flight whatever happens; against a loss-based flow (TCP
//! CUBIC) sharing a buffer of about one BDP it takes ~93% of the link. So
//! when a loss comes while the RTT is inflated by at least half the minimum
//! RTT and at least 2 ms (a queue no random loss explains), the window gets an upper bound,
//! 0.7 × its size, at most once per round, that then grows by one packet
//! per round (AIMD, like Reno); once the RTT falls back toward the minimum,
//! the bound is dropped and the model alone rules again. Random loss on an
//! unqueued path never triggers it.

use std::time::{Duration, Instant};

use super::{CongestionAlgorithm, Controller};
use crate::recovery::{RateSample, RttEstimator};

/// 2/ln 2: the smallest gain that doubles the delivery rate each round.
const STARTUP_GAIN: f64 = 2.885;
/// ProbeBW's gain cycle: probe up, drain the probe's queue, cruise.
const CYCLE: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
const CWND_GAIN: f64 = 2.0;
/// Rounds over which the bandwidth maximum is kept.
const BW_WINDOW_ROUNDS: u64 = 10;
/// How long a minimum RTT stays valid before ProbeRTT refreshes it.
const MIN_RTT_WINDOW: Duration = Duration::from_secs(10);
const PROBE_RTT_DURATION: Duration = Duration::from_millis(200);
/// ProbeRTT's window as a fraction of the BDP (BBR v2's
/// `ProbeRTTCwndGain`, draft-02 §2.14.2): enough to drain the flow's own
/// queue, which needs inflight ≤ 1 BDP, while still carrying half the rate.
const PROBE_RTT_CWND_GAIN: f64 = 0.5;
/// Least window, in packets.
const MIN_PIPE_PACKETS: u64 = 4;
/// Rounds over which the ack aggregation estimate keeps its maximum
/// (BBR's `BBRExtraAckedFilterLen`).
const EXTRA_ACKED_ROUNDS: usize = 10;
/// Most window the ack aggregation estimate adds, as time at the bandwidth
/// estimate (Linux's `bbr_extra_acked_max_us`).
const EXTRA_ACKED_MAX: Duration = Duration::from_millis(100);
/// Multiplicative decrease of the loss bound (CUBIC's β).
const LOSS_BETA: f64 = 0.7;
/// Queueing delay, as a fraction of the minimum RTT, above which a loss is
/// taken for congestion; and below which the loss bound is released.
const QUEUED: f64 = 0.5;
const DRAINED: f64 = 0.125;
/// Least standing queueing delay that makes a loss congestion, whatever
/// the minimum RTT. On a path of a millisecond or two, half the minimum
/// RTT is the receiver's ack delay, the pacing timer's granularity and
/// the controller's own probe, not a loss-based flow's full buffer; read
/// as a queue there, random loss bounded the window round after round
/// (1 Gbit/s, 1 ms, 1% loss: 27% of the link, RESULTS §47).
const QUEUED_AT_LEAST: Duration = Duration::from_millis(2);

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Startup,
    Drain,
    ProbeBw { phase: usize, since: Instant },
    ProbeRtt { until: Option<Instant> },
}

#[derive(Debug, Clone)]
/// BBR: a model-based controller that paces at the measured bottleneck bandwidth and does not back off for random loss.
pub struct Bbr {
    mss: u64,
    mode: Mode,
    cwnd: u64,
    /// Window kept before an RTO or ProbeRTT, restored after.
    prior_cwnd: u64,
    /// Window before the latest RTO, which a spurious-loss undo restores
    /// (spec §9: the latest reduction only).
    undo_cwnd: u64,
    /// After an RTO: the delivered count at which everything that was in
    /// flight at the RTO has been delivered, by late acks or resends
    /// (spec §9.5: the window comes back then; Linux leaves its Loss state
    /// at the same point).
    rto_hold: Option<u64>,
    /// Samples of packets sent before the delivered count reached this
    /// (while the window was held down) are read as app-limited.
    held_until: u64,
    /// Delivered bytes and bytes in flight at the latest rate sample.
    delivered: u64,
    inflight: u64,
    /// Whether the latest rate sample was app-limited.
    app_limited_now: bool,
    /// The least RTT sampled while inflight was at or below ProbeRTT's
    /// window, since the minimum RTT was last refreshed, and when: such a
    /// sample is as good as one ProbeRTT would take (spec §9.5).
    quiet_rtt: Option<(Duration, Instant)>,
    /// (round, max delivery rate in that round) for the last rounds.
    bw_rounds: Vec<(u64, f64)>,
    /// The largest of `bw_rounds`, kept as it changes: the send buffer's
    /// limit asks for the BDP on every write (spec §7.4).
    bw_max: f64,
    round: u64,
    next_round_delivered: u64,
    min_rtt: Option<Duration>,
    min_rtt_at: Option<Instant>,
    full_bw: f64,
    full_bw_rounds: u32,
    filled_pipe: bool,
    /// The least RTT sampled in the current round, and in the last one: a
    /// standing queue raises even the least sample of a whole round, while
    /// delayed acks and jitter raise only some samples.
    round_rtt: Option<Duration>,
    standing_rtt: Option<Duration>,
    /// Ack aggregation (spec §9.5): when the current measuring interval
    /// began and the bytes acknowledged since.
    aggregation_start: Option<Instant>,
    aggregation_acked: u64,
    /// Per slot `round % EXTRA_ACKED_ROUNDS`: (round, most bytes acked in
    /// an interval beyond bandwidth × its length).
    extra_acked: [(u64, u64); EXTRA_ACKED_ROUNDS],
    /// Upper bound on the window after congestive loss, if any.
    loss_bound: Option<u64>,
    /// Round of the last cut of `loss_bound` (one per round).
    bound_round: Option<u64>,
}

impl Bbr {
    /// A controller for packets of `mss` bytes starting at `initial_window_packets`.
    pub fn new(mss: u64, initial_window_packets: u32) -> Self {
        // The filter's memory comes with its first sample: a connection
        // that never sends data (an idle session's listener) holds none.
        Self::with_rounds(mss, initial_window_packets, Vec::new())
    }

    /// [`Bbr::new`] keeping `bw_rounds`' memory: the filter is emptied.
    fn with_rounds(mss: u64, initial_window_packets: u32, mut bw_rounds: Vec<(u64, f64)>) -> Self {
        bw_rounds.clear();
        let cwnd = mss * u64::from(initial_window_packets.max(1));
        Bbr {
            mss,
            mode: Mode::Startup,
            cwnd,
            prior_cwnd: cwnd,
            undo_cwnd: cwnd,
            rto_hold: None,
            held_until: 0,
            delivered: 0,
            inflight: 0,
            app_limited_now: false,
            quiet_rtt: None,
            bw_rounds,
            bw_max: 0.0,
            round: 0,
            next_round_delivered: 0,
            min_rtt: None,
            min_rtt_at: None,
            full_bw: 0.0,
            full_bw_rounds: 0,
            filled_pipe: false,
            round_rtt: None,
            standing_rtt: None,
            aggregation_start: None,
            aggregation_acked: 0,
            extra_acked: [(0, 0); EXTRA_ACKED_ROUNDS],
            loss_bound: None,
            bound_round: None,
        }
    }

    /// Standing queueing delay (last round's least RTT over the minimum) as
    /// a fraction of the minimum RTT.
    fn queue_fraction(&self) -> Option<f64> {
        let (min, latest) = (self.min_rtt?, self.standing_rtt?);
        let min = min.as_secs_f64().max(1e-4);
        Some((latest.as_secs_f64() - min).max(0.0) / min)
    }

    /// Whether a queue stands that a loss-based flow's full buffer would
    /// explain and random loss would not (spec §9.5): at least half the
    /// minimum RTT, and at least [`QUEUED_AT_LEAST`].
    fn queue_stands(&self) -> bool {
        let delay = self.standing_rtt.zip(self.min_rtt).map(|(latest, min)| latest.saturating_sub(min));
        self.queue_fraction().is_some_and(|q| q >= QUEUED) && delay.is_some_and(|d| d >= QUEUED_AT_LEAST)
    }

    fn max_bw(&self) -> f64 {
        self.bw_max
    }

    fn min_pipe(&self) -> u64 {
        MIN_PIPE_PACKETS * self.mss
    }

    /// Bandwidth-delay product in bytes, if the model has both halves.
    fn bdp(&self) -> Option<u64> {
        let bw = self.max_bw();
        let rtt = self.min_rtt?;
        (bw > 0.0).then_some((bw * rtt.as_secs_f64()) as u64)
    }

    /// ProbeRTT's window: half a BDP, at least the minimum pipe (BBR v2's
    /// `BBRProbeRTTCwnd`).
    fn probe_rtt_window(&self) -> u64 {
        let half = self.bdp().map_or(0, |b| (b as f64 * PROBE_RTT_CWND_GAIN) as u64);
        half.max(self.min_pipe())
    }

    /// Whether the window is held below the model's (ProbeRTT, or after
    /// an RTO until its flight has been delivered).
    fn held(&self) -> bool {
        matches!(self.mode, Mode::ProbeRtt { .. }) || self.rto_hold.is_some()
    }

    /// Notes the window to come back to after ProbeRTT or an RTO. If it is
    /// already held down, the larger of the two is kept: a ProbeRTT during
    /// an RTO's hold (or the reverse) must not make the cut window the one
    /// that is restored (Linux's `bbr_save_cwnd`).
    fn save_cwnd(&mut self) {
        self.prior_cwnd = if self.held() { self.prior_cwnd.max(self.cwnd) } else { self.cwnd };
    }

    /// The window comes back; samples of packets sent from now on measure
    /// the path again.
    fn restore_cwnd(&mut self) {
        self.cwnd = self.cwnd.max(self.prior_cwnd);
        self.held_until = self.delivered;
    }

    fn gains(&self) -> (f64, f64) {
        match self.mode {
            Mode::Startup => (STARTUP_GAIN, STARTUP_GAIN),
            Mode::Drain => (1.0 / STARTUP_GAIN, STARTUP_GAIN),
            Mode::ProbeBw { phase, .. } => (CYCLE[phase], CWND_GAIN),
            // The cap is in `window()`; the window underneath keeps
            // following the model, to be restored at the end.
            Mode::ProbeRtt { .. } => (1.0, CWND_GAIN),
        }
    }

    /// Whether a sample says less about the path than about the sender:
    /// the application left the window unfilled, or the packet was sent
    /// while the window was held down (ProbeRTT, an RTO).
    fn app_limited(&self, rs: &RateSample) -> bool {
        rs.is_app_limited || self.held() || rs.prior_delivered < self.held_until
    }

    fn update_bw(&mut self, rs: &RateSample) {
        if self.app_limited(rs) && rs.delivery_rate <= self.max_bw() {
            return; // an app-limited sample only counts when it raises the estimate
        }
        match self.bw_rounds.last_mut() {
            Some((r, b)) if *r == self.round => *b = b.max(rs.delivery_rate),
            _ => {
                if self.bw_rounds.capacity() == 0 {
                    self.bw_rounds.reserve_exact(BW_WINDOW_ROUNDS as usize + 1);
                }
                self.bw_rounds.push((self.round, rs.delivery_rate))
            }
        }
        let oldest = self.round.saturating_sub(BW_WINDOW_ROUNDS - 1);
        self.bw_rounds.retain(|&(r, _)| r >= oldest);
        self.bw_max = self.bw_rounds.iter().map(|&(_, b)| b).fold(0.0, f64::max);
    }

    /// The ack aggregation estimate (BBR's `BBRUpdateACKAggregation`,
    /// Linux's `bbr_update_ack_aggregation`): how many more bytes the acks
    /// of an interval acknowledged than the bandwidth estimate explains.
    /// Acks that a jittery path or a receiver's ack delay holds back and
    /// then releases together show up here; without room for them in the
    /// window, the sender stalls until they come (spec §9.5).
    fn update_ack_aggregation(&mut self, now: Instant, newly_acked: u64) {
        let bw = self.max_bw();
        if bw <= 0.0 || newly_acked == 0 {
            return;
        }
        let mut expected = self.aggregation_start.map_or(0.0, |t| bw * now.saturating_duration_since(t).as_secs_f64());
        // An interval whose acks came no faster than the bandwidth ends.
        if self.aggregation_start.is_none() || self.aggregation_acked as f64 <= expected {
            self.aggregation_start = Some(now);
            self.aggregation_acked = 0;
            expected = 0.0;
        }
        self.aggregation_acked += newly_acked;
        let extra = ((self.aggregation_acked as f64 - expected).max(0.0) as u64).min(self.cwnd);
        let slot = &mut self.extra_acked[(self.round % EXTRA_ACKED_ROUNDS as u64) as usize];
        if slot.0 != self.round {
            *slot = (self.round, 0);
        }
        slot.1 = slot.1.max(extra);
    }

    /// The window the ack aggregation estimate adds: the most of the last
    /// [`EXTRA_ACKED_ROUNDS`] rounds, at most [`EXTRA_ACKED_MAX`] at the
    /// bandwidth estimate.
    fn extra_acked(&self) -> u64 {
        let oldest = self.round.saturating_sub(EXTRA_ACKED_ROUNDS as u64 - 1);
        let most = self.extra_acked.iter().filter(|&&(r, _)| r >= oldest).map(|&(_, e)| e).max().unwrap_or(0);
        most.min((self.max_bw() * EXTRA_ACKED_MAX.as_secs_f64()) as u64)
    }

    /// Startup ends once three rounds in a row grew the bandwidth by < 25%.
    fn check_full_pipe(&mut self, round_start: bool, app_limited: bool) {
        if self.filled_pipe || !round_start || app_limited {
            return;
        }
        let bw = self.max_bw();
        if bw >= self.full_bw * 1.25 {
            self.full_bw = bw;
            self.full_bw_rounds = 0;
        } else {
            self.full_bw_rounds += 1;
            self.filled_pipe = self.full_bw_rounds >= 3;
        }
    }

    fn advance_mode(&mut self, now: Instant, rs: &RateSample) {
        let bdp = self.bdp().unwrap_or(self.cwnd);
        match self.mode {
            Mode::Startup if self.filled_pipe => self.mode = Mode::Drain,
            Mode::Drain if rs.bytes_in_flight <= bdp => self.mode = Mode::ProbeBw { phase: 2, since: now },
            Mode::ProbeBw { phase, since } => {
                let rtt = self.min_rtt.unwrap_or(Duration::from_millis(10));
                let gain = CYCLE[phase];
                // A phase lasts a min RTT; the probe also waits until the
                // extra inflight is out, the drain until it is gone.
                let elapsed = now.saturating_duration_since(since) > rtt;
                let next = if gain > 1.0 {
                    elapsed && rs.bytes_in_flight as f64 >= gain * bdp as f64
                } else if gain < 1.0 {
                    elapsed || rs.bytes_in_flight <= bdp
                } else {
                    elapsed
                };
                if next {
                    self.mode = Mode::ProbeBw { phase: (phase + 1) % CYCLE.len(), since: now };
                }
            }
            Mode::ProbeRtt { until: None } if rs.bytes_in_flight <= self.probe_rtt_window() => {
                let rtt = self.min_rtt.unwrap_or_default();
                self.mode = Mode::ProbeRtt { until: Some(now + PROBE_RTT_DURATION.max(rtt)) };
            }
            Mode::ProbeRtt { until: Some(t) } if now >= t => {
                self.min_rtt_at = Some(now);
                self.quiet_rtt = None;
                self.mode = if self.filled_pipe { Mode::ProbeBw { phase: 2, since: now } } else { Mode::Startup };
                if self.rto_hold.is_none() {
                    self.restore_cwnd();
                }
            }
            _ => {}
        }
    }
}

impl Bbr {
    /// The minimum-RTT filter and ProbeRTT's trigger (spec §9.5). A sample
    /// at or below the minimum refreshes it. When the minimum is older
    /// than `MIN_RTT_WINDOW`, the least RTT sampled since the last refresh
    /// with inflight at or below ProbeRTT's window takes its place if
    /// there is one (BBR v2: a flow that already ran that low, such as an
    /// application-limited one, needs no ProbeRTT); otherwise ProbeRTT
    /// drains the flow's queue to measure the bare path.
    fn update_min_rtt(&mut self, now: Instant, rs: &RateSample) {
        let Some(rtt) = rs.rtt else { return };
        let probing = matches!(self.mode, Mode::ProbeRtt { .. });
        if !probing && rs.bytes_in_flight <= self.probe_rtt_window() {
            self.quiet_rtt = match self.quiet_rtt {
                Some((q, at)) if q < rtt => Some((q, at)),
                _ => Some((rtt, now)),
            };
        }
        if self.min_rtt.is_none_or(|m| rtt <= m) {
            self.min_rtt = Some(rtt);
            self.min_rtt_at = Some(now);
            return;
        }
        let expired = self.min_rtt_at.is_some_and(|t| now.saturating_duration_since(t) > MIN_RTT_WINDOW);
        if !expired || probing {
            return;
        }
        let quiet = self.quiet_rtt.take().filter(|&(_, at)| now.saturating_duration_since(at) <= MIN_RTT_WINDOW);
        if let Some((q, at)) = quiet {
            self.min_rtt = Some(q);
            self.min_rtt_at = Some(at);
            return;
        }
        self.min_rtt = Some(rtt);
        self.min_rtt_at = Some(now);
        if self.filled_pipe {
            // Drain the queue for a moment to measure the bare path.
            self.save_cwnd();
            self.held_until = u64::MAX;
            self.mode = Mode::ProbeRtt { until: None };
        }
    }
}

impl Controller for Bbr {
    fn bdp(&self) -> Option<u64> {
        Bbr::bdp(self)
    }

    fn window(&self) -> u64 {
        match self.mode {
            Mode::ProbeRtt { .. } => self.cwnd.min(self.probe_rtt_window()),
            _ => self.cwnd,
        }
    }

    fn on_ack(&mut self, _now: Instant, _sent: Instant, _bytes: u64, _rtt: &RttEstimator, _app_limited: bool) {
        // The window follows the model, updated per rate sample.
    }

    fn on_rate_sample(&mut self, now: Instant, rs: &RateSample) {
        self.delivered = self.delivered.max(rs.delivered);
        self.inflight = rs.bytes_in_flight;
        // spec §9.5: what was in flight at the RTO has been delivered.
        if self.rto_hold.is_some_and(|until| rs.delivered >= until) {
            self.rto_hold = None;
            if !matches!(self.mode, Mode::ProbeRtt { .. }) {
                self.restore_cwnd();
            }
        }
        let round_start = rs.prior_delivered >= self.next_round_delivered;
        if round_start {
            self.next_round_delivered = rs.delivered;
            self.round += 1;
        }
        self.update_bw(rs);
        self.update_ack_aggregation(now, rs.newly_acked);
        if round_start {
            self.standing_rtt = self.round_rtt.take().or(self.standing_rtt);
        }
        if let Some(r) = rs.rtt {
            self.round_rtt = Some(self.round_rtt.map_or(r, |m| m.min(r)));
        }
        if let Some(bound) = self.loss_bound {
            if self.queue_fraction().is_some_and(|q| q < DRAINED) {
                self.loss_bound = None;
            } else if round_start {
                self.loss_bound = Some(bound + self.mss);
            }
        }
        self.update_min_rtt(now, rs);
        self.app_limited_now = self.app_limited(rs);
        self.check_full_pipe(round_start, self.app_limited_now);
        self.advance_mode(now, rs);
        // Window: grow with acks toward cwnd_gain × BDP (always, until the
        // pipe is full), never below the minimum pipe.
        let (_, cwnd_gain) = self.gains();
        let target = self.bdp().map(|b| (cwnd_gain * b as f64) as u64 + 3 * self.mss + self.extra_acked());
        self.cwnd = match (self.filled_pipe, target) {
            (true, Some(t)) => (self.cwnd + rs.newly_acked).min(t),
            _ => self.cwnd + rs.newly_acked,
        }
        .min(self.loss_bound.unwrap_or(u64::MAX))
        .max(self.min_pipe());
    }

    fn on_congestion_event(&mut self, _now: Instant, _sent: Instant, _lost_bytes: u64) {
        // spec §9.5: loss alone is not congestion to a model-based
        // controller; loss while a queue stands is.
        // Nor is the loss of an application-limited flow: the application,
        // not the window, sets what it sends, so a bound would only cut the
        // window below what the application needs and leave a backlog
        // (spec §9.5).
        if !self.filled_pipe || self.bound_round == Some(self.round) || self.app_limited_now {
            return;
        }
        if self.queue_stands() {
            let from = self.loss_bound.unwrap_or(self.cwnd).min(self.cwnd);
            let bound = ((from as f64 * LOSS_BETA) as u64).max(self.min_pipe());
            self.loss_bound = Some(bound);
            self.bound_round = Some(self.round);
            self.cwnd = self.cwnd.min(bound);
        }
    }

    fn set_mss(&mut self, mss: u64) {
        self.mss = mss;
        self.cwnd = self.cwnd.max(self.min_pipe());
    }

    fn on_rto(&mut self, _now: Instant) {
        self.save_cwnd();
        self.undo_cwnd = self.cwnd;
        self.cwnd = self.min_pipe();
        // A second RTO before the first one's flight was delivered keeps
        // the first one's point: the resends in between are all that the
        // latest sample counted in flight.
        let until = self.delivered + self.inflight.max(1);
        self.rto_hold = Some(self.rto_hold.map_or(until, |u| u.max(until)));
        self.held_until = u64::MAX;
    }

    fn on_spurious_congestion(&mut self) {
        // The latest reduction is undone; a hold from an earlier RTO still
        // ends when that RTO's flight has been delivered.
        self.loss_bound = None;
        self.cwnd = self.cwnd.max(self.undo_cwnd);
    }

    fn pacing_rate(&self) -> Option<f64> {
        let bw = self.max_bw();
        (bw > 0.0).then_some(self.gains().0 * bw)
    }

    fn reset(&mut self, mss: u64, initial_window_packets: u32) {
        // The filter never holds more than BW_WINDOW_ROUNDS + 1 entries,
        // so what it keeps is small.
        let rounds = std::mem::take(&mut self.bw_rounds);
        *self = Bbr::with_rounds(mss, initial_window_packets, rounds);
    }

    fn algorithm(&self) -> CongestionAlgorithm {
        CongestionAlgorithm::Bbr
    }

    fn name(&self) -> &'static str {
        "bbr"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(delivered: u64, prior: u64, rate: f64, rtt_ms: u64, inflight: u64, acked: u64) -> RateSample {
        RateSample {
            delivery_rate: rate,
            delivered,
            prior_delivered: prior,
            is_app_limited: false,
            rtt: Some(Duration::from_millis(rtt_ms)),
            newly_acked: acked,
            bytes_in_flight: inflight,
        }
    }

    /// Feeds rounds of 50 ms at a fixed path bandwidth until the model
    /// settles: ten evenly spaced acks per round, as a path without ack
    /// aggregation returns them.
    fn settle(b: &mut Bbr, t0: Instant, bw: f64, rounds: u64) -> Instant {
        let mut now = t0;
        let mut delivered = 0;
        let acked = (bw * 0.005) as u64;
        for _ in 0..rounds {
            let round_start = delivered;
            for _ in 0..10 {
                now += Duration::from_millis(5);
                delivered += acked;
                b.on_rate_sample(now, &sample(delivered, round_start, bw, 50, 10 * acked, acked));
            }
        }
        now
    }

    #[test]
    fn acks_that_come_in_bursts_widen_the_window_by_what_they_hold_back() {
        let t0 = Instant::now();
        let bw = 1e6;
        let mut smooth = Bbr::new(1000, 10);
        let now = settle(&mut smooth, t0, bw, 20);
        assert!(smooth.extra_acked() <= 5_000, "even acks: {}", smooth.extra_acked());
        // The same rate, its acks held back 40 ms and released at once (a
        // jittery path keeping order): 40 kB more than the bandwidth
        // explains arrives in one burst each round.
        let mut bursty = smooth.clone();
        let mut now = now;
        let mut delivered = bursty.delivered;
        for _ in 0..10 {
            let round_start = delivered;
            now += Duration::from_millis(40);
            for _ in 0..8 {
                delivered += 5_000;
                bursty.on_rate_sample(now, &sample(delivered, round_start, bw, 50, 40_000, 5_000));
            }
            now += Duration::from_millis(10);
            delivered += 10_000;
            bursty.on_rate_sample(now, &sample(delivered, round_start, bw, 50, 40_000, 10_000));
        }
        let extra = bursty.extra_acked();
        assert!((35_000..=50_000).contains(&extra), "burst of 40 ms at 1 MB/s: {extra}");
        assert!(bursty.window() >= smooth.window() + 30_000, "{} against {}", bursty.window(), smooth.window());
        // Never more than 100 ms at the bandwidth estimate.
        assert!(extra <= 100_000);
    }

    #[test]
    fn startup_ends_when_the_bandwidth_stops_growing_and_paces_at_the_model() {
        let t0 = Instant::now();
        let mut b = Bbr::new(1000, 10);
        settle(&mut b, t0, 1e6, 20);
        assert!(b.filled_pipe);
        assert!(matches!(b.mode, Mode::ProbeBw { .. } | Mode::Drain), "{:?}", b.mode);
        // BDP = 1 MB/s × 50 ms = 50 kB; window ≈ 2 BDP + 3 packets.
        assert!((90_000..=110_000).contains(&b.window()), "{}", b.window());
        let rate = b.pacing_rate().unwrap();
        assert!((0.7e6..1.3e6).contains(&rate), "{rate}");
    }

    #[test]
    fn random_loss_leaves_the_model_alone() {
        let t0 = Instant::now();
        let mut b = Bbr::new(1000, 10);
        let now = settle(&mut b, t0, 1e6, 20);
        let before = b.window();
        for _ in 0..10 {
            b.on_congestion_event(now, now, 1000);
        }
        assert_eq!(b.window(), before);
    }

    #[test]
    fn loss_with_a_standing_queue_bounds_the_window_once_per_round_until_the_queue_drains() {
        let t0 = Instant::now();
        let mut b = Bbr::new(1000, 10);
        let mut now = settle(&mut b, t0, 1e6, 20);
        let before = b.window();
        // One round with a delayed-ack spike is no standing queue.
        now += Duration::from_millis(50);
        b.on_rate_sample(now, &sample(2_000_000, 1_900_000, 1e6, 50, before, 0));
        b.on_rate_sample(now, &sample(2_000_000, 1_900_000, 1e6, 90, before, 0));
        now += Duration::from_millis(50);
        b.on_rate_sample(now, &sample(3_000_000, 2_900_000, 1e6, 100, before, 0));
        b.on_congestion_event(now, now, 1000);
        assert_eq!(b.window(), before);
        // A whole round at twice the RTT: a buffer of one BDP stands in front.
        now += Duration::from_millis(100);
        let d = 10_000_000;
        b.on_rate_sample(now, &sample(d, d - 1000, 1e6, 100, before, 0));
        b.on_congestion_event(now, now, 1000);
        let cut = b.window();
        assert_eq!(cut, (before as f64 * LOSS_BETA) as u64);
        // More losses in the same round do not cut again.
        b.on_congestion_event(now, now, 1000);
        assert_eq!(b.window(), cut);
        // A new round: the bound grows by one packet (additive increase).
        now += Duration::from_millis(100);
        b.on_rate_sample(now, &sample(d + 100_000, d, 1e6, 100, cut, 1000));
        assert_eq!(b.window(), cut + 1000);
        // The queue drains for a round: the model alone sets the window again.
        for i in 2..5 {
            for k in 1..=10 {
                now += Duration::from_millis(5);
                b.on_rate_sample(now, &sample(d + i * 100_000 + k * 5_000, d + (i - 1) * 100_000, 1e6, 50, cut, 5_000));
            }
        }
        assert_eq!(b.loss_bound, None);
        assert_eq!(b.window(), before);
    }

    #[test]
    fn loss_on_a_one_millisecond_path_with_under_two_milliseconds_of_queue_leaves_the_window_alone() {
        // A 1 ms path whose least RTT per round doubled: a queue of half
        // the minimum RTT and more, but 1 ms of it, which ack delay and
        // pacing explain as well as a full buffer does.
        let t0 = Instant::now();
        let mut b = Bbr::new(1000, 10);
        let mut now = settle(&mut b, t0, 1e6, 20);
        let (d, before) = (10_000_000, b.window());
        b.min_rtt = Some(Duration::from_millis(1));
        let round = |b: &mut Bbr, now: &mut Instant, i: u64, rtt_ms: u64| {
            *now += Duration::from_millis(100);
            b.on_rate_sample(*now, &sample(d + i * 100_000, d + i * 100_000 - 1000, 1e6, rtt_ms, before, 0));
        };
        // A round's least RTT stands from the next round on.
        round(&mut b, &mut now, 1, 2);
        let (mut lossless, mut then) = (b.clone(), now);
        for i in 2..=4 {
            round(&mut b, &mut now, i, 2);
            b.on_congestion_event(now, now, 1000);
            round(&mut lossless, &mut then, i, 2);
        }
        assert_eq!(b.loss_bound, None, "1 ms of queue is no full buffer");
        assert_eq!(b.window(), lossless.window(), "the model alone sets the window");
        // 2 ms of it is.
        for i in 5..=6 {
            round(&mut b, &mut now, i, 3);
        }
        b.on_congestion_event(now, now, 1000);
        assert!(b.loss_bound.is_some(), "a standing queue of 2 ms bounds the window");
    }

    #[test]
    fn rto_shrinks_the_window_and_a_spurious_one_is_undone() {
        let t0 = Instant::now();
        let mut b = Bbr::new(1000, 10);
        settle(&mut b, t0, 1e6, 20);
        let before = b.window();
        b.on_rto(t0);
        assert_eq!(b.window(), 4000);
        b.on_spurious_congestion();
        assert_eq!(b.window(), before);
    }

    /// Feeds `secs` of samples every 50 ms at 1 MB/s, RTT `rtt_ms`, with
    /// `inflight` bytes in flight; returns the time after, the least window
    /// on the way, and whether ProbeRTT was entered.
    fn run_for(
        b: &mut Bbr,
        from: Instant,
        secs: u64,
        rtt_ms: u64,
        inflight: u64,
        app_limited: bool,
    ) -> (Instant, u64, bool) {
        let (mut now, mut least, mut probed) = (from, u64::MAX, false);
        let mut delivered = 100_000_000;
        for _ in 0..secs * 20 {
            // Ten acks 5 ms apart, as in `settle`: no ack aggregation.
            let round_start = delivered;
            for _ in 0..10 {
                now += Duration::from_millis(5);
                let acked = 5_000;
                delivered += acked;
                let mut rs = sample(delivered, round_start, 1e6, rtt_ms, inflight, acked);
                rs.is_app_limited = app_limited;
                b.on_rate_sample(now, &rs);
                least = least.min(b.window());
                probed |= matches!(b.mode, Mode::ProbeRtt { .. });
            }
        }
        (now, least, probed)
    }

    #[test]
    fn probe_rtt_holds_half_the_bdp_not_four_packets_and_restores_the_window_after() {
        let t0 = Instant::now();
        let mut b = Bbr::new(1000, 10);
        let now = settle(&mut b, t0, 1e6, 20);
        let before = b.window();
        // A bulk flow whose RTT never comes back down to 50 ms: after 10 s
        // the minimum expires and ProbeRTT runs.
        let (now, least, probed) = run_for(&mut b, now, 11, 60, 100_000, false);
        assert!(probed, "no ProbeRTT within 11 s of an expired minimum");
        // BDP = 1 MB/s × min RTT (60 ms, the sample taken at expiry) = 60 kB.
        assert_eq!(least, 30_000, "ProbeRTT's window is half the BDP");
        // Inflight drains to the ProbeRTT window, 200 ms pass, the window
        // comes back.
        run_for(&mut b, now, 1, 60, 20_000, false);
        assert!(!matches!(b.mode, Mode::ProbeRtt { .. }), "{:?}", b.mode);
        assert!(b.window() >= before, "{} < {before}", b.window());
    }

    #[test]
    fn an_app_limited_flow_refreshes_its_min_rtt_without_a_probe_rtt_dip() {
        let t0 = Instant::now();
        let mut b = Bbr::new(1000, 10);
        let now = settle(&mut b, t0, 1e6, 20);
        let before = b.window();
        // Inflight 10 kB, under ProbeRTT's 25 kB, RTT 55 ms: for 30 s.
        let (_, least, probed) = run_for(&mut b, now, 30, 55, 10_000, true);
        assert!(!probed, "an app-limited flow entered ProbeRTT");
        assert_eq!(least, before, "the window dipped");
        assert_eq!(b.min_rtt, Some(Duration::from_millis(55)), "the minimum RTT was not refreshed");
    }

    #[test]
    fn a_flow_above_probe_rtt_level_still_probes_even_when_app_limited() {
        let t0 = Instant::now();
        let mut b = Bbr::new(1000, 10);
        let now = settle(&mut b, t0, 1e6, 20);
        // Inflight 40 kB, above ProbeRTT's 25 kB: its RTT samples may hold
        // its own queue, so ProbeRTT runs.
        let (_, _, probed) = run_for(&mut b, now, 11, 55, 40_000, true);
        assert!(probed);
    }

    #[test]
    fn samples_taken_while_the_window_is_held_leave_the_bandwidth_alone() {
        let t0 = Instant::now();
        let mut b = Bbr::new(1000, 10);
        let mut now = settle(&mut b, t0, 1e6, 20);
        let (bw, before) = (b.max_bw(), b.window());
        // 12 app-limited rounds later (the bandwidth window is 10), an RTO:
        // the window is 4 packets, and what it delivers says nothing of
        // the path.
        let mut delivered = 50_000_000;
        for _ in 0..12 {
            now += Duration::from_millis(50);
            let mut rs = sample(delivered + 50_000, delivered, 0.9e6, 50, 10_000, 50_000);
            rs.is_app_limited = true;
            b.on_rate_sample(now, &rs);
            delivered += 50_000;
        }
        // 10 kB were in flight at the RTO.
        b.on_rto(now);
        assert_eq!(b.window(), 4000);
        // Acks at a low rate of what the 4-packet window resends.
        now += Duration::from_millis(50);
        b.on_rate_sample(now, &sample(delivered + 4000, delivered, 80_000.0, 50, 0, 4000));
        assert_eq!(b.max_bw(), bw, "a held window's sample lowered the bandwidth");
        assert_eq!(b.window(), 4000 + 4000, "the window grows from 4 packets until what was in flight is delivered");
        // All 10 kB delivered: the window comes back.
        now += Duration::from_millis(50);
        b.on_rate_sample(now, &sample(delivered + 12_000, delivered + 4000, 80_000.0, 50, 0, 8000));
        assert!(b.window() >= before, "{} < {before}", b.window());
        assert_eq!(b.max_bw(), bw);
    }

    #[test]
    fn loss_of_an_app_limited_flow_does_not_bound_its_window() {
        let t0 = Instant::now();
        let mut b = Bbr::new(1000, 10);
        let mut now = settle(&mut b, t0, 1e6, 20);
        let before = b.window();
        // Whole rounds at twice the minimum RTT (jitter, or another flow's
        // queue), app-limited, with a loss in each.
        let d = 10_000_000;
        for i in 0..5 {
            now += Duration::from_millis(100);
            let mut rs = sample(d + (i + 1) * 20_000, d + i * 20_000, 0.4e6, 100, 20_000, 20_000);
            rs.is_app_limited = true;
            b.on_rate_sample(now, &rs);
            b.on_congestion_event(now, now, 1000);
        }
        assert_eq!(b.loss_bound, None);
        // Never cut; the acks of 100 ms rounds coming at once add room.
        assert!(b.window() >= before, "{} < {before}", b.window());
    }
}
