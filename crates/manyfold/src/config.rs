//! Configuration of a driven endpoint: the engine's settings, fault
//! injection (RUSP's `drop` attribute, paper 04 §2.2), the packet trace
//! (RUSP's debug mode, paper 04 Fig. 14) and qlog traces (spec §18).

use std::path::PathBuf;
use std::time::Duration;

/// Everything [`crate::Endpoint::bind`] needs.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// The engine's settings. A `seed` of 0 means "unset": the driver then
    /// seeds the engine from the OS (getrandom).
    pub endpoint: manyfold_proto::EndpointConfig,
    /// Faults the driver injects on this endpoint's datagrams.
    pub faults: FaultConfig,
    /// Log every datagram sent and received (target `manyfold::packet`,
    /// level DEBUG).
    pub trace: bool,
    /// Write a qlog trace of every connection into this directory (spec
    /// §18; created if missing): `client-<id>.sqlog` or `server-<id>.sqlog`,
    /// read by `manyfold trace`.
    pub qlog_dir: Option<PathBuf>,
}

/// A seeded, deterministic model of a bad network applied by the driver
/// (s2n-quic's network model, smoltcp's fault-injecting device).
///
/// Loss applies on both directions; duplication, reordering, delay and
/// jitter apply to datagrams we send. All probabilities are in `[0, 1]`.
/// Held datagrams are released by tokio's timer, whose granularity is 1 ms:
/// a delay below that becomes up to 1 ms (still in order of release time).
#[derive(Debug, Clone, PartialEq)]
pub struct FaultConfig {
    /// Seeds the fault RNG: the same seed and traffic give the same faults.
    pub seed: u64,
    /// Probability that a datagram is dropped, applied on send and again on
    /// receive (unless overridden by `send_loss` / `recv_loss`).
    pub loss: f64,
    /// Overrides `loss` for datagrams we send.
    pub send_loss: Option<f64>,
    /// Overrides `loss` for datagrams we receive.
    pub recv_loss: Option<f64>,
    /// Probability that a sent datagram is sent twice.
    pub duplicate: f64,
    /// Probability that a sent datagram is held back by `reorder_delay`
    /// extra, so that later datagrams overtake it.
    pub reorder: f64,
    /// How long a reordered datagram is held back.
    pub reorder_delay: Duration,
    /// Fixed one-way delay added to every sent datagram.
    pub delay: Duration,
    /// Uniformly random extra delay in `[0, jitter)` per sent datagram.
    pub jitter: Duration,
    /// Probability that a received datagram is delivered twice.
    pub recv_duplicate: f64,
    /// Probability that a received datagram is held back by `reorder_delay`.
    pub recv_reorder: f64,
    /// Fixed delay before every received datagram reaches the engine.
    pub recv_delay: Duration,
    /// Uniformly random extra delay in `[0, recv_jitter)` per received datagram.
    pub recv_jitter: Duration,
    /// Most datagrams held for delay at once; beyond it they are dropped
    /// (a router's tail drop) and counted in [`FaultStats::queue_overflow`].
    pub queue_limit: usize,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            seed: 0,
            loss: 0.0,
            send_loss: None,
            recv_loss: None,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_millis(5),
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            recv_duplicate: 0.0,
            recv_reorder: 0.0,
            recv_delay: Duration::ZERO,
            recv_jitter: Duration::ZERO,
            queue_limit: 8192,
        }
    }
}

impl FaultConfig {
    /// Probability of dropping a datagram we send.
    pub fn effective_send_loss(&self) -> f64 {
        self.send_loss.unwrap_or(self.loss)
    }

    /// Probability of dropping a datagram we receive.
    pub fn effective_recv_loss(&self) -> f64 {
        self.recv_loss.unwrap_or(self.loss)
    }

    /// Whether any fault is configured; without one the driver takes its
    /// zero-copy path (GSO batches go to the socket unsplit).
    pub fn is_active(&self) -> bool {
        self.effective_send_loss() > 0.0
            || self.effective_recv_loss() > 0.0
            || self.duplicate > 0.0
            || self.reorder > 0.0
            || !self.delay.is_zero()
            || !self.jitter.is_zero()
            || self.recv_duplicate > 0.0
            || self.recv_reorder > 0.0
            || !self.recv_delay.is_zero()
            || !self.recv_jitter.is_zero()
    }
}

/// What fault injection did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Sent datagrams dropped.
    pub send_dropped: u64,
    /// Received datagrams dropped.
    pub recv_dropped: u64,
    /// Extra copies sent or delivered.
    pub duplicated: u64,
    /// Datagrams held back to be overtaken.
    pub reordered: u64,
    /// Datagrams that went through the delay queue.
    pub delayed: u64,
    /// Datagrams dropped because the delay queue was full.
    pub queue_overflow: u64,
}

/// Counters of the I/O driver itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DriverStats {
    /// Datagrams handed to the kernel.
    pub datagrams_sent: u64,
    /// Datagrams read from the kernel (GRO buffers counted per datagram).
    pub datagrams_received: u64,
    /// `sendmsg` calls that carried more than one datagram (GSO).
    pub gso_sends: u64,
    /// `sendmmsg` calls that carried more than one datagram: single
    /// datagrams to several peers (or several to one) in one call.
    pub mmsg_sends: u64,
    /// Datagrams sent in those calls.
    pub mmsg_datagrams: u64,
    /// Receive buffers that held more than one datagram (GRO).
    pub gro_receives: u64,
    /// Sends the kernel refused for lack of buffer space (retried later).
    pub send_would_block: u64,
    /// Sends that failed with another error (the datagrams are lost).
    pub send_errors: u64,
    /// Path MTU probes the kernel refused as larger than the interface
    /// allows (EMSGSIZE): expected on any path narrower than loopback,
    /// each rules its size out at once (spec §3.7). Not in `send_errors`.
    pub probes_refused: u64,
    /// Receive calls that failed with an error other than would-block
    /// (an ICMP error's echo as the socket's pending error not counted).
    pub recv_errors: u64,
    /// Entries of the socket's error queue that were not an unreachable
    /// for one of our datagrams (spec §6.7); the engine counts the rest.
    pub other_socket_errors: u64,
}
