//! The multicast sender's parameters (spec §16.3–§16.8, §16.9, §19.7), the
//! events it reports, its errors and its counters.

use super::members::ReceiverOutcome;
use crate::secure::SecurityConfig;
use crate::wire::ErrorCode;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The sender's parameters (spec §16.3–§16.8).
#[derive(Debug, Clone)]
pub struct SenderConfig {
    /// Seeds the session id.
    pub seed: u64,
    /// Largest datagram, header included; DATA carries `max_datagram − 24`.
    pub max_datagram: usize,
    /// ANNOUNCE goes out this often for the whole session (spec §16.1).
    pub announce_interval: Duration,
    /// Longest the data phase waits for `min_receivers`.
    pub announce_wait: Duration,
    /// Receivers to wait for before the data phase (at least 1).
    pub min_receivers: usize,
    /// The feedback backoff bound receivers use (`ARTP_max`), and its
    /// floor when adapted.
    pub artp_max: Duration,
    /// Raise `ARTP_max` (up to `artp_cap`) while windows draw more than 1.5
    /// ACKs per network, lower it back towards `artp_max` below 1.15
    /// (spec §16.4).
    pub adapt_artp: bool,
    /// Ceiling of the adapted `ARTP_max` (spec §16.4).
    pub artp_cap: Duration,
    /// Timer growth on expiry (α > 1).
    pub alpha: f64,
    /// Timer shrink on a confirmed window (β > α).
    pub beta: f64,
    /// The timer's floor, `dflt_Tout`.
    pub default_timeout: Duration,
    /// The window timer's ceiling (spec §16.3).
    pub max_timeout: Duration,
    /// Packets in the first window (spec §16.3).
    pub initial_window: u32,
    /// Windows that may await their confirmation at once (spec §16.3,
    /// "Windows in flight"): window k+1 goes out while window k awaits its
    /// ACKs. 1 restores paper 03's stop-and-wait.
    pub windows_in_flight: u32,
    /// Most packets in one window (spec §16.3).
    pub max_window: u32,
    /// Double the window on each confirmed window until the first sign of
    /// congestion (a shrink or an expiry), then grow it by one as the
    /// paper does (spec §16.3). Off: the paper's growth from the start.
    pub slow_start: bool,
    /// Repair requests gathered this long before the repairs go out.
    pub repair_gather: Duration,
    /// Receivers asking for one packet in a round for it to go by multicast.
    pub repair_multicast_min: usize,
    /// Receivers not done this long after the last window are dropped as incomplete (spec §16.7).
    pub completion_timeout: Duration,
    /// A receiver that asks for repairs more often than this is dropped (spec §16.7).
    pub max_repair_passes: u32,
    /// A receiver heard from not at all for this long is dropped as unresponsive (spec §16.7).
    pub receiver_timeout: Duration,
    /// Drop a receiver whose reported loss exceeds this fraction.
    pub max_loss: Option<f64>,
    /// Drop a receiver that takes data slower than this, in bytes per
    /// second measured over a second of its ACKs (spec §16.7); `None`:
    /// the session slows down to its slowest receiver.
    pub min_rate: Option<u64>,
    /// Most receivers in the table; REGISTERs beyond it are refused (spec §16.8).
    pub max_receivers: usize,
    /// Most pending repair entries (spec §16.8).
    pub max_repair_queue: usize,
    /// Largest file in packets (spec §16.8).
    pub max_packets: u32,
    /// Pace each window's packets at the rate of recently confirmed windows
    /// (the paper sends them back to back).
    pub pace: bool,
    /// A ceiling on the sending rate in bytes per second, whatever the
    /// flow control allows (spec §16.3, "A configured ceiling"): data,
    /// parity and repair datagrams are paced to it, headers included.
    /// `None`: only the flow control limits the rate.
    pub max_rate: Option<u64>,
    /// Packets per FEC block (spec §16.9, at most 256); 0 turns parity off.
    pub fec_k: u16,
    /// Parity shards multicast after each block in the data phase, at
    /// least (spec §16.9).
    pub fec_proactive: u16,
    /// Proactive parity adapts to the loss receivers report (spec §16.9,
    /// "Parity first"): each block gets about as many shards as the
    /// receiver losing most lost in recent blocks, as NORM's automatic
    /// parity does; `fec_proactive` stays the floor.
    pub fec_auto: bool,
    /// 0: paper 03's rule, every NACK that names a new loss shrinks the
    /// window by one. Above 0: a window shrinks by one only when one
    /// receiver reported more losses while it was open than this fraction
    /// of it, so random loss on receivers' links does not throttle the
    /// session (timer expiries still do).
    pub loss_tolerance: f64,
    /// spec §16.3, "Queue delay": a confirmed window whose slowest network
    /// acked more than this (plus `ARTP_max`, the ACK's own backoff) later
    /// than the least such delay of recent windows does not grow the
    /// window: a bottleneck's queue is building, and growing into it until
    /// it overflows costs parity and repairs. `None` (the default): the
    /// paper's growth. Measured (RESULTS §35): 10 ms lifts one bottleneck
    /// with 8 receivers from 94% to 95% and costs a busy host with 32
    /// receivers ten points, so it is not on by default.
    pub queue_target: Option<Duration>,
    /// Protect the session (spec §19.7): a group key handed to each
    /// receiver in its registration's Noise handshake, every packet sealed.
    pub security: Option<SecurityConfig>,
    /// The group key's and the handshakes' randomness (spec §19.1): 256
    /// bits from the OS; all zeros derives it from `seed` (simulations).
    pub crypto_seed: [u8; 32],
    /// Most registration handshakes a protected sender runs per second
    /// (a burst of as many): each costs a few X25519 operations, and
    /// REGISTERs come unauthenticated (spec §19.7).
    pub max_handshakes_per_sec: u32,
}

impl Default for SenderConfig {
    fn default() -> Self {
        SenderConfig {
            seed: 0,
            max_datagram: 1452,
            announce_interval: Duration::from_millis(200),
            announce_wait: Duration::from_secs(3),
            min_receivers: 1,
            artp_max: Duration::from_micros(600),
            adapt_artp: true,
            artp_cap: Duration::from_millis(20),
            alpha: 1.5,
            beta: 2.0,
            default_timeout: Duration::from_millis(100),
            max_timeout: Duration::from_secs(2),
            initial_window: 1,
            windows_in_flight: 3,
            max_window: 256,
            slow_start: true,
            repair_gather: Duration::from_millis(5),
            repair_multicast_min: 2,
            completion_timeout: Duration::from_secs(60),
            max_repair_passes: 100,
            receiver_timeout: Duration::from_secs(5),
            max_loss: None,
            min_rate: None,
            max_receivers: 1024,
            max_repair_queue: 65_536,
            max_packets: 1 << 26,
            pace: false,
            max_rate: None,
            fec_k: 256,
            fec_proactive: 0,
            fec_auto: true,
            loss_tolerance: 0.05,
            queue_target: None,
            security: None,
            crypto_seed: [0; 32],
            max_handshakes_per_sec: 500,
        }
    }
}

/// One window's fate, for traces and the model checks (spec §16.3).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowRecord {
    /// SN of its first packet.
    pub first: u32,
    /// SN of its last packet (LWSN).
    pub lwsn: u32,
    /// Packets in it (W).
    pub size: u32,
    /// Sent (last packet) at.
    pub sent: Instant,
    /// Confirmed by every awaited network, or expired.
    pub confirmed: bool,
    /// When it was confirmed or expired.
    pub resolved: Instant,
    /// Timer in force for this window.
    pub timeout: Duration,
    /// ACK and NACK packets that arrived while it was open.
    pub feedback: u32,
    /// The most losses one receiver reported while this was the oldest
    /// open window, of packets sent since the previous window began (spec
    /// §16.3's loss rule judges the window by it).
    pub worst_lost: u32,
    /// That receiver's index in the session's receiver list (the order of
    /// [`crate::mcast::McastSender::receivers`]); `None`: no loss reported.
    pub worst_receiver: Option<usize>,
    /// The window shrank for its losses (the loss rule fired).
    pub cut_for_loss: bool,
}

/// What the sender reports, in order, from [`crate::mcast::McastSender::poll_event`] (spec §16.1).
#[derive(Debug, Clone, PartialEq)]
pub enum SenderEvent {
    /// A receiver registered (spec §16.1, §16.6).
    ReceiverJoined {
        /// Its client id.
        client: u32,
        /// Its address.
        addr: SocketAddr,
        /// The first SN it receives (spec §16.6).
        from_sn: u32,
    },
    /// The data phase began.
    DataStarted,
    /// A window was confirmed or expired (spec §16.3).
    Window(WindowRecord),
    /// Every packet has gone out once; repairs follow.
    RepairStarted,
    /// A receiver's part ended: completed, or dropped (spec §16.7).
    ReceiverDone {
        /// Its client id.
        client: u32,
        /// How its part ended.
        outcome: ReceiverOutcome,
    },
    /// A receiver ended its part itself with `code` (its STATUS with ERR),
    /// e.g. `INTERRUPTED`: its outcome is `Incomplete`, `left` says why.
    ReceiverLeft {
        /// Its client id.
        client: u32,
        /// Its address.
        addr: SocketAddr,
        /// The code of its STATUS.
        code: ErrorCode,
    },
    /// A receiver reported that it falls behind its network (spec §16.7):
    /// from the next window on the session waits for it on its own.
    ReceiverBehind {
        /// Its client id.
        client: u32,
        /// Its address.
        addr: SocketAddr,
    },
    /// The session is over; every receiver's outcome is in `receivers()`.
    Finished,
    /// The session ended without a transfer.
    Failed(SenderError),
}

/// Why a session ended without a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SenderError {
    /// No receiver registered within `announce_wait`.
    #[error("no receiver registered within the announce wait")]
    NoReceivers,
    /// Every receiver was dropped before it completed (spec §16.7).
    #[error("every receiver left or was dropped before completing")]
    AllDropped,
    /// `McastSender::abort` ended the session with this code.
    #[error("aborted with error code {}{}", .0 .0, if *.0 == ErrorCode::INTERRUPTED { " (interrupted)" } else { "" })]
    Aborted(ErrorCode),
}

/// Counters (spec §16.4's feedback figures among them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SenderStats {
    /// DATA packets multicast in the multicast phase.
    pub data_packets: u64,
    /// Payload bytes of those packets.
    pub data_bytes: u64,
    /// Repairs sent by multicast (spec §16.1, step 3).
    pub repair_multicast: u64,
    /// Repairs sent by unicast to one receiver.
    pub repair_unicast: u64,
    /// Parity shards multicast (proactive and repair).
    pub parity_packets: u64,
    /// Of the parity shards queued (spec §16.9): those following each
    /// block as it went out (the automatic count, `fec_proactive`, what
    /// was reported already) ...
    pub parity_proactive: u64,
    /// ... those topping up a sent block in the data phase when a
    /// receiver reported more losses there than it had parity for ...
    pub parity_topped_up: u64,
    /// ... and those answering the repair phase's REPAIRs.
    pub parity_repair: u64,
    /// ANNOUNCE packets sent.
    pub announces: u64,
    /// ACKs received (spec §16.3).
    pub acks: u64,
    /// ACKs for a window already confirmed or expired.
    pub late_acks: u64,
    /// NACKs received (spec §16.4).
    pub nacks: u64,
    /// REPAIR requests received (spec §16.1, step 3).
    pub repair_requests: u64,
    /// STATUS reports received (spec §16.1, step 4).
    pub status_reports: u64,
    /// Windows confirmed by every awaited network.
    pub windows_confirmed: u64,
    /// Windows whose timer expired first.
    pub windows_expired: u64,
    /// Confirmed windows that did not grow the window: their ACK came
    /// later than `queue_target` allows (spec §16.3, "Queue delay").
    pub growth_held: u64,
    /// How slow start ended (spec §16.3, "Slow start"): `Some(true)` on a
    /// delay (a round of windows confirmed later than the previous one, or
    /// `queue_target`), `Some(false)` on a loss, an expiry or a receiver
    /// falling behind, `None` while it lasts or if it was off.
    pub slow_start_ended_by_delay: Option<bool>,
    /// Last packets of a window sent again because no ACK came (a lost LWSN).
    pub probes: u64,
    /// Datagrams that did not parse (dropped and counted).
    pub dropped_malformed: u64,
    /// Datagrams for another session.
    pub dropped_other_session: u64,
    /// Feedback from a client id not registered.
    pub dropped_unknown_client: u64,
    /// REGISTERs refused (table full, spec §16.8).
    pub refused: u64,
    /// Protected sessions (spec §19.7): plain packets other than a
    /// registration; sealed packets that failed authentication (or came
    /// under another receiver's source); replays.
    pub dropped_unprotected: u64,
    /// Sealed packets that failed authentication or came under another receiver's source.
    pub dropped_unauthenticated: u64,
    /// Sealed packets seen before (replays).
    pub dropped_replayed: u64,
    /// Registrations whose handshake failed (another PSK, an unknown key).
    pub auth_failures: u64,
    /// REGISTERs not answered: over `max_handshakes_per_sec`, a repeat
    /// sooner than `REANSWER_GAP`, or a second handshake for a registered
    /// client id (spec §19.7).
    pub registrations_ignored: u64,
    /// Receivers moved to another group (spec §16.12).
    pub regrouped: u64,
}
