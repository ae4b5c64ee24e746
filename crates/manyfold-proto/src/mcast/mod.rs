//! Reliable multicast file replication, paper 03's SOMA (spec §16).
//!
//! [`McastSender`] sends one file in windows to an IP multicast group and
//! repairs what receivers lost; [`McastReceiver`] stores the data, reports
//! gaps and windows, and asks for repairs. Both are sans-IO like the
//! connection: the caller feeds datagrams and timeouts and sends what
//! `poll_transmit` writes. They reuse the connection's header and CRC
//! (spec §3) and pacer (spec §9.3); range lists are SACK-style pairs with
//! a 16-bit count (spec §16.2). Their packets are `wire::mcast`'s; their
//! error codes `wire::ErrorCode`'s (spec §8.3, §16.7).

mod bitmap;
mod fec;
mod receiver;
mod secure;
mod sender;
mod signature;

use std::net::SocketAddr;
use std::time::Duration;

/// The session's packets, under `wire/` with the connection's (spec §16.2).
pub use crate::wire::mcast as wire;
pub use receiver::{Delivery, McastReceiver, ReceiverConfig, ReceiverEvent, ReceiverStats};
pub use secure::{Ignored, Pattern, SEAL_OVERHEAD};
pub use sender::{
    McastSender, ReceiverOutcome, ReceiverReport, SenderConfig, SenderError, SenderEvent, SenderStats, WindowRecord,
};
pub use wire::{Announcement, McPacket, Phase};

/// Where a multicast packet goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct McTransmit {
    /// The group, or one receiver's address for unicast repairs and replies.
    pub destination: SocketAddr,
    /// Bytes of the datagram written at the start of the buffer.
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
