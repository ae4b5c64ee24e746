//! The multicast receiver's parameters (spec §16.4–§16.8, §19.7), what
//! it delivers, the events it reports and its counters.

use crate::secure::SecurityConfig;
use crate::wire::mcast::Announcement;
use crate::wire::ErrorCode;
use std::ops::Range;
use std::time::Duration;

/// The receiver's parameters (spec §16.4–§16.8).
#[derive(Debug, Clone)]
pub struct ReceiverConfig {
    /// Seeds the client id and the feedback delays.
    pub seed: u64,
    /// The network id (spec §16.4): receivers with the same id suppress
    /// each other's feedback. [`crate::mcast::network_of`] derives one from an
    /// address.
    pub network: u32,
    /// No operator network id was given (spec §16.12): the sender may
    /// group this receiver by what it observes (its losses), telling it
    /// the group id its feedback then carries and heeds; `network` is the
    /// group it starts in. `false`: `network` is the operator's and holds.
    pub auto_group: bool,
    /// Accept only this session, if set.
    pub session: Option<u32>,
    /// This client id (spec §16.2) instead of one drawn from `seed`, so a
    /// sender's list of receivers can name it (the CLI's `--id`); 0 is
    /// not an id and draws one.
    pub client_id: Option<u32>,
    /// REGISTER is sent again this often until the sender confirms it (spec §16.1).
    pub register_retry: Duration,
    /// A completed receiver repeats its STATUS this often until confirmed (spec §16.1, step 4).
    pub status_interval: Duration,
    /// Largest file in packets (spec §16.8).
    pub max_packets: u32,
    /// Give up when nothing comes from the sender for this long after
    /// registering.
    pub sender_timeout: Duration,
    /// Join only protected sessions (spec §19.7), with these keys.
    pub security: Option<SecurityConfig>,
    /// The handshake's randomness (spec §19.1); all zeros derives it from `seed`.
    pub crypto_seed: [u8; 32],
    /// The least a gap must stay open before it is reported lost (spec
    /// §16.4, reordering); the receiver widens it to what it sees the
    /// path reorder.
    pub reorder_window: Duration,
    /// Let the network's acker speak for this receiver when it has
    /// nothing to report, while the acker ACKs what it lets it ACK within
    /// 25 ms (spec §16.4). On by default. `false`: every receiver races
    /// for every window, as paper 03's model (eq. 9) assumes.
    pub defer_to_acker: bool,
}

impl Default for ReceiverConfig {
    fn default() -> Self {
        ReceiverConfig {
            seed: 0,
            network: 0,
            auto_group: false,
            session: None,
            client_id: None,
            register_retry: Duration::from_millis(200),
            status_interval: Duration::from_secs(1),
            max_packets: 1 << 26,
            sender_timeout: Duration::from_secs(30),
            security: None,
            crypto_seed: [0; 32],
            reorder_window: Duration::ZERO,
            defer_to_acker: true,
        }
    }
}

/// Where a DATA packet's new bytes go: `payload` is the range of the
/// datagram passed to `handle_datagram` to write at `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// File offset of the new bytes.
    pub offset: u64,
    /// Where they are in the datagram.
    pub payload: Range<usize>,
}

/// What the receiver reports, in order, from [`crate::mcast::McastReceiver::poll_event`] (spec §16.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiverEvent {
    /// A session was heard (first ANNOUNCE, or its size and hash became known).
    Announced(Announcement),
    /// The sender confirmed our registration.
    Registered {
        /// The first SN we receive (spec §16.6).
        from_sn: u32,
    },
    /// Every packet is held: verify the file, then call `finish`.
    Complete,
    /// The sender confirmed our report (or ended the session cleanly after
    /// it, the confirmation having been lost): done.
    Confirmed,
    /// The session ended (for everyone, or for us with an error code).
    Ended {
        /// `None` for a clean end; the code for an error.
        error: Option<ErrorCode>,
    },
    /// Nothing from the sender for `sender_timeout`.
    SenderLost,
}

/// The receiver's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReceiverStats {
    /// DATA packets received that were new.
    pub data_packets: u64,
    /// DATA packets already held.
    pub duplicates: u64,
    /// Repairs received (multicast or unicast).
    pub repairs_received: u64,
    /// ACKs sent (spec §16.3).
    pub acks_sent: u64,
    /// ACKs not sent because another receiver of the network sent one (spec §16.4).
    pub acks_suppressed: u64,
    /// ACKs not sent because the network's acker speaks for this receiver,
    /// which had no gap to report (spec §16.4).
    pub acks_deferred: u64,
    /// ACKs sent because nobody had ACKed for the network, within 25 ms,
    /// a window this receiver let the acker ACK (spec §16.4).
    pub acker_overtaken: u64,
    /// NACKs sent (spec §16.4).
    pub nacks_sent: u64,
    /// NACKs not sent because another receiver's covered them (spec §16.4).
    pub nacks_suppressed: u64,
    /// REPAIR requests sent (spec §16.1, step 3).
    pub repair_requests: u64,
    /// STATUS reports sent.
    pub status_sent: u64,
    /// Datagrams that did not parse (dropped and counted).
    pub dropped_malformed: u64,
    /// Datagrams for another session.
    pub dropped_other_session: u64,
    /// DATA beyond `max_packets` or the announced size.
    pub dropped_beyond_limit: u64,
    /// Parity shards received (spec §16.9).
    pub parity_received: u64,
    /// Packets rebuilt from parity.
    pub fec_recovered: u64,
    /// Times a neighbour's ACK came while this receiver was more than a
    /// quarter window behind it (spec §16.7, slow receivers).
    pub lagged: u64,
    /// Times the sender moved it to another group (spec §16.12).
    pub regrouped: u64,
    /// ACKs and NACKs held back after a stall of the process (spec §16.4).
    pub held_after_stall: u64,
    /// First sendings that came after a later packet had opened their
    /// gap, before it was reported: the path reordered them (spec §16.4).
    pub reordered: u64,
    /// The longest such a gap was open.
    pub reorder_delay_max: Duration,
    /// First sendings that came after their gap had been reported (by
    /// this receiver or a neighbour): reordering taken for loss.
    pub late_after_report: u64,
    /// Protected sessions (spec §19.7): plain packets a protected receiver
    /// does not take; sealed packets it has no key for (yet); sealed
    /// packets that failed authentication or came from the wrong source;
    /// replays.
    pub dropped_unprotected: u64,
    /// Sealed packets for which no key is held yet.
    pub dropped_no_key: u64,
    /// Sealed packets that failed authentication or came from the wrong source.
    pub dropped_unauthenticated: u64,
    /// Sealed packets seen before (replays).
    pub dropped_replayed: u64,
}
