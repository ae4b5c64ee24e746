//! CUBIC (RFC 9438): a cubic window growth function of the time since the
//! last reduction, with fast convergence and a Reno-friendly region.
//! Windows are kept in bytes; the cubic function works in segments of
//! `mss` bytes as the RFC states it.

use std::time::{Duration, Instant};

use super::{CongestionAlgorithm, Controller};
use crate::recovery::RttEstimator;

/// RFC 9438 §4.2: C = 0.4.
const C: f64 = 0.4;
/// RFC 9438 §4.6: β_cubic = 0.7.
const BETA: f64 = 0.7;
/// RFC 9438 §4.3: α_cubic = 3(1 − β) / (1 + β), the Reno-friendly increase.
const ALPHA: f64 = 3.0 * (1.0 - BETA) / (1.0 + BETA);

#[derive(Debug, Clone)]
/// CUBIC (RFC 9438): window growth as a cubic function of the time since the last reduction.
pub struct Cubic {
    mss: u64,
    cwnd: u64,
    ssthresh: u64,
    /// Window (segments) just before the last reduction.
    w_max: f64,
    /// Time (s) the cubic function takes to climb back to `w_max`.
    k: f64,
    /// Start of the current congestion-avoidance epoch.
    epoch_start: Option<Instant>,
    /// The Reno-friendly estimate (segments), RFC 9438 §4.3.
    w_est: f64,
    /// Bytes acked since the last whole-segment increase (sub-segment carry).
    carry: f64,
    recovery_start: Option<Instant>,
    /// Everything a reduction changed, for undo (spec §9).
    prior: Option<Box<Cubic>>,
}

impl Cubic {
    /// A controller for packets of `mss` bytes starting at `initial_window_packets`.
    pub fn new(mss: u64, initial_window_packets: u32) -> Self {
        Cubic {
            mss,
            cwnd: mss * u64::from(initial_window_packets.max(1)),
            ssthresh: u64::MAX,
            w_max: 0.0,
            k: 0.0,
            epoch_start: None,
            w_est: 0.0,
            carry: 0.0,
            recovery_start: None,
            prior: None,
        }
    }

    fn min_window(&self) -> u64 {
        2 * self.mss
    }

    fn segments(&self, bytes: u64) -> f64 {
        bytes as f64 / self.mss as f64
    }

    fn in_recovery(&self, sent: Instant) -> bool {
        self.recovery_start.is_some_and(|r| sent <= r)
    }

    /// RFC 9438 eq. 1: W_cubic(t) = C·(t − K)³ + W_max, in segments.
    fn w_cubic(&self, t: f64) -> f64 {
        C * (t - self.k).powi(3) + self.w_max
    }

    fn remember(&mut self) {
        let mut snapshot = self.clone();
        snapshot.prior = None;
        self.prior = Some(Box::new(snapshot));
    }

    /// RFC 9438 §4.6–4.7: multiplicative decrease with fast convergence.
    fn reduce(&mut self, now: Instant) {
        self.remember();
        self.recovery_start = Some(now);
        let cwnd = self.segments(self.cwnd);
        // §4.7 fast convergence: release bandwidth to new flows.
        self.w_max = if cwnd < self.w_max { cwnd * (1.0 + BETA) / 2.0 } else { cwnd };
        self.ssthresh = ((self.cwnd as f64 * BETA) as u64).max(self.min_window());
        self.epoch_start = None;
        self.carry = 0.0;
    }
}

impl Controller for Cubic {
    fn window(&self) -> u64 {
        self.cwnd
    }

    fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64, rtt: &RttEstimator, app_limited: bool) {
        if self.in_recovery(sent) || app_limited {
            return;
        }
        if self.cwnd < self.ssthresh {
            // RFC 9438 §4.10: slow start as in RFC 5681, with byte counting.
            self.cwnd += bytes;
            return;
        }
        let start = *self.epoch_start.get_or_insert_with(|| {
            // §4.2: a new epoch; K from the window we start it with.
            let cwnd = self.cwnd as f64 / self.mss as f64;
            self.k = if self.w_max > cwnd { ((self.w_max - cwnd) / C).cbrt() } else { 0.0 };
            if self.w_max < cwnd {
                self.w_max = cwnd;
            }
            self.w_est = cwnd;
            now
        });
        let cwnd = self.segments(self.cwnd);
        let acked = self.segments(bytes);
        // §4.3 Reno-friendly estimate.
        self.w_est += ALPHA * acked / cwnd;
        // §4.4 concave/convex: aim for W_cubic one RTT ahead, within [cwnd, 1.5 cwnd].
        let t =
            now.saturating_duration_since(start).as_secs_f64() + rtt.srtt().max(Duration::from_millis(1)).as_secs_f64();
        let target = self.w_cubic(t).clamp(cwnd, 1.5 * cwnd);
        let next =
            if self.w_cubic(t) < self.w_est { self.w_est.max(cwnd) } else { cwnd + (target - cwnd) * acked / cwnd };
        let grow = (next - cwnd) * self.mss as f64 + self.carry;
        let whole = grow.floor().max(0.0);
        self.carry = grow - whole;
        self.cwnd += whole as u64;
    }

    fn on_congestion_event(&mut self, now: Instant, sent: Instant, _lost_bytes: u64) {
        if self.in_recovery(sent) {
            return;
        }
        self.reduce(now);
        self.cwnd = self.ssthresh;
    }

    fn set_mss(&mut self, mss: u64) {
        self.mss = mss;
        self.cwnd = self.cwnd.max(self.min_window());
    }

    fn on_rto(&mut self, now: Instant) {
        self.reduce(now);
        self.cwnd = self.min_window();
    }

    fn on_spurious_congestion(&mut self) {
        if let Some(prior) = self.prior.take() {
            let cwnd = self.cwnd.max(prior.cwnd);
            *self = *prior;
            self.cwnd = cwnd;
            self.recovery_start = None;
        }
    }

    fn pacing_gain(&self) -> f64 {
        super::loss_based_pacing_gain(self.cwnd, self.ssthresh)
    }

    fn reset(&mut self, mss: u64, initial_window_packets: u32) {
        *self = Cubic::new(mss, initial_window_packets);
    }

    fn algorithm(&self) -> CongestionAlgorithm {
        CongestionAlgorithm::Cubic
    }

    fn name(&self) -> &'static str {
        "cubic"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rtt() -> RttEstimator {
        let mut r = super::super::test_rtt();
        r.on_sample(Duration::from_millis(100));
        r
    }

    #[test]
    fn loss_reduces_by_beta_and_remembers_w_max() {
        let t = Instant::now();
        let mut c = Cubic::new(1000, 100);
        c.on_congestion_event(t, t, 1000);
        assert_eq!(c.window(), 70_000);
        assert!((c.w_max - 100.0).abs() < 1e-9);
    }

    #[test]
    fn fast_convergence_lowers_w_max_on_a_second_loss_below_it() {
        let t0 = Instant::now();
        let mut c = Cubic::new(1000, 100);
        c.on_congestion_event(t0, t0, 1000);
        let t1 = t0 + Duration::from_secs(1);
        c.on_congestion_event(t1, t1, 1000);
        // cwnd 70 < w_max 100: w_max = 70 · (1 + 0.7) / 2 = 59.5.
        assert!((c.w_max - 59.5).abs() < 1e-9, "{}", c.w_max);
    }

    #[test]
    fn window_regrows_to_w_max_about_k_seconds_after_a_loss() {
        let t0 = Instant::now();
        let mut c = Cubic::new(1000, 100);
        c.on_congestion_event(t0, t0, 1000);
        // K = cbrt((100 − 70) / 0.4) ≈ 4.2 s. Feed a window of acks per RTT.
        let r = rtt();
        let mut now = t0;
        while now < t0 + Duration::from_millis(4300) {
            now += Duration::from_millis(100);
            let w = c.window();
            c.on_ack(now, now, w, &r, false);
        }
        let w = c.window() as f64 / 1000.0;
        assert!((95.0..=115.0).contains(&w), "window {w} segments");
        // Plateau: growth is slow near w_max.
        let before = c.window();
        c.on_ack(now, now, c.window(), &r, false);
        assert!(c.window() - before < 5_000);
    }

    #[test]
    fn a_spurious_reduction_is_undone() {
        let t = Instant::now();
        let mut c = Cubic::new(1000, 100);
        c.on_congestion_event(t, t, 1000);
        c.on_spurious_congestion();
        assert_eq!(c.window(), 100_000);
        assert_eq!(c.ssthresh, u64::MAX);
    }

    #[test]
    fn rto_collapses_to_two_datagrams() {
        let t = Instant::now();
        let mut c = Cubic::new(1000, 10);
        c.on_rto(t);
        assert_eq!(c.window(), 2000);
    }
}
