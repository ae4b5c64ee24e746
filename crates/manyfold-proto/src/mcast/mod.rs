//! Reliable multicast file replication, paper 03's SOMA (spec §16).
//!
//! [`McastSender`] sends one file in windows to an IP multicast group and
//! repairs what receivers lost; [`McastReceiver`] stores the data, reports
//! gaps and windows, and asks for repairs. Both are sans-IO like the
//! connection: the caller feeds datagrams and timeouts and sends what
//! `poll_transmit` writes. They reuse the connection's header and CRC
//! (spec §3) and pacer (spec §9.3); range lists are SACK-style pairs with
//! a 16-bit count (spec §16.2).

mod bitmap;
mod fec;
mod receiver;
mod secure;
mod sender;
pub mod wire;

use std::net::SocketAddr;
use std::time::Duration;

pub use receiver::{Delivery, McastReceiver, ReceiverConfig, ReceiverEvent, ReceiverStats};
pub use secure::{Ignored, Pattern, SEAL_OVERHEAD};
pub use sender::{
    McastSender, ReceiverOutcome, ReceiverReport, SenderConfig, SenderError, SenderEvent, SenderStats, WindowRecord,
};
pub use wire::{Announcement, McPacket, Phase};

/// Error codes the multicast session sends (spec §8.3, §16.7).
pub mod codes {
    /// The receiver table is full.
    pub const REFUSED: u16 = 3;
    /// A plain receiver registered with a protected session (spec §19.7;
    /// the connection's code 8).
    pub const PROTECTION_MISMATCH: u16 = 8;
    /// The registration's handshake failed: another PSK, or a key not
    /// among the sender's known peers (the connection's code 9).
    pub const AUTHENTICATION_FAILED: u16 = 9;
    /// The sender's or receiver's process was interrupted (SIGINT or
    /// SIGTERM; the connection's code 10).
    pub const INTERRUPTED: u16 = 10;
    /// The receiver's whole-file hash did not match.
    pub const HASH_MISMATCH: u16 = 20;
    /// Dropped: still missing packets at the completion timeout.
    pub const INCOMPLETE: u16 = 21;
    /// Dropped: nothing heard for `receiver_timeout`.
    pub const UNRESPONSIVE: u16 = 22;
    /// Dropped: more repair passes than `max_repair_passes`.
    pub const TOO_MANY_PASSES: u16 = 23;
    /// Dropped: reported loss above `max_loss`.
    pub const TOO_LOSSY: u16 = 24;
    /// The sender gave up the whole session.
    pub const ABORTED: u16 = 25;
}

/// Where a multicast packet goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct McTransmit {
    pub destination: SocketAddr,
    pub size: usize,
}

/// The network id of an address (spec §16.4): its IPv4 /24 or IPv6 /64.
pub fn network_of(addr: SocketAddr) -> u32 {
    match addr {
        SocketAddr::V4(a) => u32::from(*a.ip()) >> 8,
        SocketAddr::V6(a) => {
            let s = a.ip().segments();
            let folded = (u64::from(s[0]) << 48) | (u64::from(s[1]) << 32) | (u64::from(s[2]) << 16) | u64::from(s[3]);
            (folded ^ (folded >> 32)) as u32
        }
    }
}

/// A uniform draw in `[0, max]` from a seeded RNG.
fn uniform(rng: &mut rand_chacha::ChaCha8Rng, max: Duration) -> Duration {
    use rand::Rng;
    let micros = max.as_micros().min(u128::from(u64::MAX)) as u64;
    Duration::from_micros(rng.gen_range(0..=micros))
}
