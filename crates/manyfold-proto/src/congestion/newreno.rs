//! NewReno with byte counting and a recovery period keyed on send time
//! (RFC 5681, RFC 6582, RFC 9002 §7.3).

use std::time::Instant;

use super::{CongestionAlgorithm, Controller};
use crate::recovery::RttEstimator;

#[derive(Debug, Clone)]
/// NewReno (RFC 5681, RFC 6582): slow start, then one packet per RTT; half the window on a loss.
pub struct NewReno {
    mss: u64,
    cwnd: u64,
    ssthresh: u64,
    /// Bytes acked in congestion avoidance since the last one-MSS increase.
    acked_in_ca: u64,
    /// Losses of packets sent before this instant belong to the current
    /// recovery period and do not shrink the window again (RFC 6582's intent).
    recovery_start: Option<Instant>,
    /// (cwnd, ssthresh) before the latest reduction, for undo.
    prior: Option<(u64, u64)>,
}

impl NewReno {
    /// A controller for packets of `mss` bytes starting at `initial_window_packets`.
    pub fn new(mss: u64, initial_window_packets: u32) -> Self {
        NewReno {
            mss,
            cwnd: mss * u64::from(initial_window_packets.max(1)),
            ssthresh: u64::MAX,
            acked_in_ca: 0,
            recovery_start: None,
            prior: None,
        }
    }

    fn min_window(&self) -> u64 {
        2 * self.mss
    }

    fn in_recovery(&self, sent: Instant) -> bool {
        self.recovery_start.is_some_and(|r| sent <= r)
    }
}

impl Controller for NewReno {
    fn window(&self) -> u64 {
        self.cwnd
    }

    fn on_ack(&mut self, _now: Instant, sent: Instant, bytes: u64, _rtt: &RttEstimator, app_limited: bool) {
        if self.in_recovery(sent) || app_limited {
            return;
        }
        if self.cwnd < self.ssthresh {
            // RFC 5681 (3.1) slow start, with byte counting (RFC 3465).
            self.cwnd += bytes;
        } else {
            // Congestion avoidance: one MSS per window of acknowledged bytes.
            self.acked_in_ca += bytes;
            if self.acked_in_ca >= self.cwnd {
                self.acked_in_ca -= self.cwnd;
                self.cwnd += self.mss;
            }
        }
    }

    fn on_congestion_event(&mut self, now: Instant, sent: Instant, _lost_bytes: u64) {
        if self.in_recovery(sent) {
            return;
        }
        self.recovery_start = Some(now);
        self.prior = Some((self.cwnd, self.ssthresh));
        // RFC 5681 (3.1) eq. 4 with flight size ~ cwnd, as RFC 9002 does.
        self.cwnd = (self.cwnd / 2).max(self.min_window());
        self.ssthresh = self.cwnd;
        self.acked_in_ca = 0;
    }

    fn set_mss(&mut self, mss: u64) {
        self.mss = mss;
        self.cwnd = self.cwnd.max(self.min_window());
    }

    fn on_rto(&mut self, now: Instant) {
        // RFC 5681 (3.1) eq. 4 and the loss window; RFC 9002's persistent
        // congestion floor of two datagrams.
        self.prior = Some((self.cwnd, self.ssthresh));
        self.ssthresh = (self.cwnd / 2).max(self.min_window());
        self.cwnd = self.min_window();
        self.acked_in_ca = 0;
        self.recovery_start = Some(now);
    }

    fn on_spurious_congestion(&mut self) {
        // Linux's undo (tcp_undo_cwnd_reduction): back to the window before
        // the reduction, and out of the recovery period it started.
        if let Some((cwnd, ssthresh)) = self.prior.take() {
            self.cwnd = self.cwnd.max(cwnd);
            self.ssthresh = ssthresh;
            self.recovery_start = None;
        }
    }

    fn pacing_gain(&self) -> f64 {
        super::loss_based_pacing_gain(self.cwnd, self.ssthresh)
    }

    fn reset(&mut self, mss: u64, initial_window_packets: u32) {
        *self = NewReno::new(mss, initial_window_packets);
    }

    fn algorithm(&self) -> CongestionAlgorithm {
        CongestionAlgorithm::NewReno
    }

    fn name(&self) -> &'static str {
        "newreno"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn rtt() -> RttEstimator {
        super::super::test_rtt()
    }

    #[test]
    fn slow_start_doubles_per_window() {
        let t = Instant::now();
        let mut c = NewReno::new(1000, 10);
        c.on_ack(t, t, 10_000, &rtt(), false);
        assert_eq!(c.window(), 20_000);
    }

    #[test]
    fn loss_halves_once_per_recovery_period() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_millis(10);
        let mut c = NewReno::new(1000, 10);
        c.on_congestion_event(t1, t0, 1000);
        assert_eq!(c.window(), 5000);
        // A second loss from the same flight does not halve again.
        c.on_congestion_event(t1, t0, 1000);
        assert_eq!(c.window(), 5000);
        // Acks of packets sent before recovery do not grow it.
        c.on_ack(t1, t0, 1000, &rtt(), false);
        assert_eq!(c.window(), 5000);
    }

    #[test]
    fn congestion_avoidance_adds_one_mss_per_window() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_millis(10);
        let t2 = t1 + Duration::from_millis(10);
        let mut c = NewReno::new(1000, 10);
        c.on_congestion_event(t1, t0, 1000); // cwnd 5000 = ssthresh
        c.on_ack(t2, t2, 5000, &rtt(), false);
        assert_eq!(c.window(), 6000);
    }

    #[test]
    fn a_spurious_reduction_is_undone_once() {
        let t0 = Instant::now();
        let mut c = NewReno::new(1000, 10);
        c.on_congestion_event(t0, t0, 1000);
        assert_eq!(c.window(), 5000);
        c.on_spurious_congestion();
        assert_eq!(c.window(), 10_000);
        c.on_spurious_congestion();
        assert_eq!(c.window(), 10_000);
    }

    #[test]
    fn rto_collapses_to_two_datagrams() {
        let t = Instant::now();
        let mut c = NewReno::new(1000, 10);
        c.on_rto(t);
        assert_eq!(c.window(), 2000);
    }

    #[test]
    fn app_limited_acks_do_not_grow_the_window() {
        let t = Instant::now();
        let mut c = NewReno::new(1000, 10);
        c.on_ack(t, t, 5000, &rtt(), true);
        assert_eq!(c.window(), 10_000);
    }
}
