//! Loss recovery (spec §5): the RTT estimator and RTO of RFC 6298, and the
//! record of sent packets with SACK processing and RACK-style loss detection.

mod delivery;
mod rtt;
mod sent;

pub use delivery::RateSample;
pub use rtt::RttEstimator;
pub(crate) use sent::SentQueue;
