//! Loss recovery (spec §5): the RTT estimator and RTO of RFC 6298, and the
//! record of sent packets with SACK processing and RACK-style loss detection.
//! It reports what acks and losses changed and never calls the congestion
//! controller: the connection feeds it (`connection/loss.rs`).

mod delivery;
mod rtt;
mod sent;

pub use delivery::RateSample;
pub use rtt::{RttEstimator, RttReport};
pub(crate) use sent::{AckOutcome, PacketState, SentPacket, SentQueue};

/// What declared a packet lost (spec §5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossTrigger {
    /// Enough later packets were acknowledged (RACK's packet threshold).
    Reordering,
    /// It waited longer than the RACK time threshold.
    Time,
    /// The retransmission timer expired.
    Rto,
    /// The local host refused to send it: larger than the interface's MTU
    /// (a path MTU probe, spec §3.7).
    Refused,
}

impl LossTrigger {
    /// The trigger's name as qlog spells it.
    pub fn name(self) -> &'static str {
        match self {
            LossTrigger::Reordering => "reordering_threshold",
            LossTrigger::Time => "time_threshold",
            LossTrigger::Rto => "rto",
            LossTrigger::Refused => "refused",
        }
    }
}
