//! Congestion control behind one small trait (spec §9; paper 00 §1 asks for
//! controllers that can be swapped without touching the rest).
//!
//! The connection reports what happened (packets sent, acknowledged, lost,
//! an RTO) and asks for the window; the controller owns its algorithm.

mod bbr;
mod cubic;
mod newreno;
pub(crate) mod pacer;

use std::time::Instant;

pub use bbr::Bbr;
pub use cubic::Cubic;
pub use newreno::NewReno;

use crate::config::CongestionAlgorithm;
use crate::recovery::{RateSample, RttEstimator};

/// A congestion controller. All sizes are datagram bytes.
pub trait Controller: Send + std::fmt::Debug {
    /// Bytes that may be in flight.
    fn window(&self) -> u64;
    /// `bytes` of newly acknowledged packets sent at `sent`. `app_limited`
    /// says the window was not the constraint when they were sent.
    fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64, rtt: &RttEstimator, app_limited: bool);
    /// Packets sent at or before `sent` were declared lost by SACK/RACK.
    fn on_congestion_event(&mut self, now: Instant, sent: Instant, lost_bytes: u64);
    /// The retransmission timer expired: the path may have collapsed.
    fn on_rto(&mut self, now: Instant);
    /// The datagram size changed (path MTU discovery, spec §3.7): what the
    /// controller counts in datagrams (its floor, its growth step) follows,
    /// and the window is never below its floor, so that one datagram of
    /// the new size can always be sent.
    fn set_mss(&mut self, mss: u64);
    /// Losses that reduced the window turned out to be reordering: undo the
    /// latest reduction (spec §9).
    fn on_spurious_congestion(&mut self) {}
    /// One delivery-rate sample per ack (spec §9.4). Default: ignored.
    fn on_rate_sample(&mut self, _now: Instant, _sample: &RateSample) {}
    /// A pacing rate in bytes per second of the controller's own; `None`:
    /// `pacing_gain` × window / SRTT (spec §9.3).
    fn pacing_rate(&self) -> Option<f64> {
        None
    }
    /// Pacing rate as a multiple of window / SRTT (spec §9.3). Linux paces
    /// at 2× in slow start and 1.2× after; RFC 9002 §7.7 suggests 1.25.
    fn pacing_gain(&self) -> f64 {
        1.25
    }
    /// The controller's estimate of the path's bandwidth-delay product in
    /// bytes, if it keeps a model of the path (BBR); `None` otherwise. The
    /// send buffer follows it where the window runs ahead of it (spec §7.4).
    fn bdp(&self) -> Option<u64> {
        None
    }
    /// Name for stats and traces.
    fn name(&self) -> &'static str;
    /// Which algorithm this is (what [`renew`] matches on).
    fn algorithm(&self) -> CongestionAlgorithm;
    /// Back to the state of a new controller for packets of `mss` bytes
    /// starting at `initial_window_packets`, keeping its memory (spec
    /// §15.3: a spare connection's controller serves the next one).
    fn reset(&mut self, mss: u64, initial_window_packets: u32);
}

/// The controller of a connection that will send nothing more: a released
/// one in TIME-WAIT, whose own controller went on to the next connection
/// (spec §15.3). A zero-sized type, so its box allocates nothing. Its
/// window is closed; nothing asks it anything else.
#[derive(Debug)]
pub(crate) struct Finished;

impl Controller for Finished {
    fn window(&self) -> u64 {
        0
    }
    fn on_ack(&mut self, _: Instant, _: Instant, _: u64, _: &RttEstimator, _: bool) {}
    fn on_congestion_event(&mut self, _: Instant, _: Instant, _: u64) {}
    fn on_rto(&mut self, _: Instant) {}
    fn set_mss(&mut self, _: u64) {}
    fn name(&self) -> &'static str {
        "finished"
    }
    /// Never matched: a finished controller is dropped, not renewed.
    fn algorithm(&self) -> CongestionAlgorithm {
        CongestionAlgorithm::NewReno
    }
    fn reset(&mut self, _: u64, _: u32) {}
}

/// Builds the controller a connection config asks for.
pub fn build(alg: CongestionAlgorithm, mss: u64, initial_window_packets: u32) -> Box<dyn Controller> {
    match alg {
        CongestionAlgorithm::NewReno => Box::new(NewReno::new(mss, initial_window_packets)),
        CongestionAlgorithm::Cubic => Box::new(Cubic::new(mss, initial_window_packets)),
        CongestionAlgorithm::Bbr => Box::new(Bbr::new(mss, initial_window_packets)),
    }
}

/// The controller a connection config asks for, reusing `spare` (a finished
/// connection's, spec §15.3) when it runs the same algorithm: it is reset
/// in place, so the connection allocates no new one. Another algorithm
/// gets a new controller.
pub(crate) fn renew(
    spare: Option<Box<dyn Controller>>,
    alg: CongestionAlgorithm,
    mss: u64,
    initial_window_packets: u32,
) -> Box<dyn Controller> {
    // A finished controller (a shed connection's) never goes into a spare.
    debug_assert!(spare.as_ref().is_none_or(|cc| cc.name() != "finished"), "a finished controller renewed");
    match spare {
        Some(mut cc) if cc.algorithm() == alg => {
            cc.reset(mss, initial_window_packets);
            cc
        }
        _ => build(alg, mss, initial_window_packets),
    }
}

/// The pacing gain of a loss-based controller (spec §9.3): 2 in slow start,
/// 1.25 after.
fn loss_based_pacing_gain(cwnd: u64, ssthresh: u64) -> f64 {
    if cwnd < ssthresh {
        2.0
    } else {
        1.25
    }
}

/// An RTT estimator for controller tests: 1 s initial RTO, 200 ms floor,
/// no peer ack delay.
#[cfg(test)]
fn test_rtt() -> RttEstimator {
    use std::time::Duration;
    RttEstimator::new(Duration::from_secs(1), Duration::from_millis(200), Duration::from_secs(60), Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Drives `cc` through a fixed history: slow start, a loss, an RTO,
    /// rate samples and an MSS change; returns what it shows after each
    /// step (window, pacing rate and gain) and its whole state.
    fn drive(cc: &mut dyn Controller, t0: Instant, steps: u64) -> (Vec<(u64, Option<u64>, u64)>, String) {
        let mut rtt = test_rtt();
        let mut seen = Vec::new();
        let mut delivered = 0;
        for i in 1..=steps {
            let now = t0 + Duration::from_millis(20 * i);
            rtt.on_sample(Duration::from_millis(20 + i % 7));
            let sent = now - Duration::from_millis(20);
            cc.on_ack(now, sent, 1200 * (i % 5 + 1), &rtt, i % 3 == 0);
            let acked = 1200 * (i % 5 + 1);
            cc.on_rate_sample(
                now,
                &RateSample {
                    delivery_rate: 1e6 + (i * 10_000) as f64,
                    delivered: delivered + acked,
                    prior_delivered: delivered,
                    is_app_limited: i % 4 == 0,
                    rtt: Some(Duration::from_millis(20 + i % 7)),
                    newly_acked: acked,
                    bytes_in_flight: cc.window() / 2,
                },
            );
            delivered += acked;
            match i % 17 {
                5 => cc.on_congestion_event(now, sent, 1200),
                9 => cc.on_spurious_congestion(),
                13 => cc.on_rto(now),
                16 => cc.set_mss(1100 + i % 3 * 100),
                _ => {}
            }
            seen.push((cc.window(), cc.pacing_rate().map(f64::to_bits), cc.pacing_gain().to_bits()));
        }
        (seen, format!("{cc:?}"))
    }

    #[test]
    fn a_reset_controller_behaves_exactly_like_a_new_one() {
        let t0 = Instant::now();
        for alg in [CongestionAlgorithm::NewReno, CongestionAlgorithm::Cubic, CongestionAlgorithm::Bbr] {
            // Used, then renewed with other settings than its first.
            let mut used = build(alg, 1400, 4);
            drive(used.as_mut(), t0, 120);
            let addr = std::ptr::from_ref(used.as_ref()).cast::<u8>();
            let mut renewed = renew(Some(used), alg, 1200, 10);
            assert_eq!(std::ptr::from_ref(renewed.as_ref()).cast::<u8>(), addr, "{alg:?}: the same box");
            let mut fresh = build(alg, 1200, 10);
            assert_eq!(format!("{renewed:?}"), format!("{fresh:?}"), "{alg:?}: same state as a new one");
            let t1 = t0 + Duration::from_secs(60);
            assert_eq!(drive(renewed.as_mut(), t1, 200), drive(fresh.as_mut(), t1, 200), "{alg:?}");
        }
    }

    #[test]
    fn renewing_for_another_algorithm_builds_that_algorithm() {
        for (from, to) in [
            (CongestionAlgorithm::Bbr, CongestionAlgorithm::Cubic),
            (CongestionAlgorithm::Cubic, CongestionAlgorithm::NewReno),
            (CongestionAlgorithm::NewReno, CongestionAlgorithm::Bbr),
        ] {
            let cc = renew(Some(build(from, 1200, 10)), to, 1200, 10);
            assert_eq!(cc.algorithm(), to);
            assert_eq!(format!("{cc:?}"), format!("{:?}", build(to, 1200, 10)));
        }
        assert_eq!(renew(None, CongestionAlgorithm::Cubic, 1200, 10).algorithm(), CongestionAlgorithm::Cubic);
    }
}
