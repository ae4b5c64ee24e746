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
    /// Name for stats and traces.
    fn name(&self) -> &'static str;
}

/// Builds the controller a connection config asks for.
pub fn build(alg: CongestionAlgorithm, mss: u64, initial_window_packets: u32) -> Box<dyn Controller> {
    match alg {
        CongestionAlgorithm::NewReno => Box::new(NewReno::new(mss, initial_window_packets)),
        CongestionAlgorithm::Cubic => Box::new(Cubic::new(mss, initial_window_packets)),
        CongestionAlgorithm::Bbr => Box::new(Bbr::new(mss, initial_window_packets)),
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
