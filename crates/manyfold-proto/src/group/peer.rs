//! One receiver of a group (spec §14.2, §14.6, §14.7): its connection,
//! destinations and join point, the group bytes it still owes an
//! acknowledgement for, and the two measures the group judges it by: a
//! load score (paper 00's CBAL) and its delivery rate (eviction).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::conn_handle::ConnHandle;
use crate::connection::ConnStats;
use crate::ids::StreamId;

/// Names one peer of a group. The low 20 bits are its slot, the high 12 a
/// generation: the slot of a peer that has gone is taken by a later
/// joiner (spec §14.7), and its old id then names nobody (until the slot
/// has been reused 4,096 times).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerId(pub u32);

/// Bits of a [`PeerId`] that number the slot; `max_peers` is at most 2^20.
pub(crate) const SLOT_BITS: u32 = 20;

impl PeerId {
    pub(crate) fn new(slot: u32, generation: u32) -> Self {
        PeerId(((generation & 0xfff) << SLOT_BITS) | slot)
    }

    /// The slot this id names (whether or not it still holds this peer).
    pub(crate) fn slot(self) -> u32 {
        self.0 & ((1 << SLOT_BITS) - 1)
    }
}

/// Where a peer stands (spec §14.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerState {
    /// Handshake under way.
    Connecting,
    /// Takes part in every new message.
    Up,
    /// Removed by the application: what it was sent is still delivered,
    /// but no message waits for it any more.
    Leaving,
    /// Its connection ended, or it never answered.
    Gone,
}

/// One peer's figures (spec §14.8).
#[derive(Debug, Clone, Copy)]
pub struct PeerStats {
    /// Its address.
    pub addr: SocketAddr,
    /// Where it is in its life.
    pub state: PeerState,
    /// The first group message it was offered (its join point).
    pub first_msg: u64,
    /// Group messages and bytes it acknowledged.
    pub acked_messages: u64,
    /// Group message bytes it acknowledged.
    pub acked_bytes: u64,
    /// Bytes sent to it and not yet acknowledged.
    pub pending_bytes: u64,
    /// Its connection's figures (RTT, retransmissions, losses, window).
    pub conn: Option<ConnStats>,
    /// The static key it proved, when the endpoint protects its
    /// connections and names its known peers (spec §19.1): each peer of a
    /// group has a session key of its own.
    pub peer_key: Option<[u8; 32]>,
}

#[derive(Debug)]
pub(crate) struct Peer {
    pub addr: SocketAddr,
    pub conn: ConnHandle,
    pub state: PeerState,
    /// Streams of its destinations (spec §14.7), in the order added.
    pub streams: Vec<StreamId>,
    pub next_stream: StreamId,
    pub first_msg: u64,
    pub pending: u64,
    pub acked_messages: u64,
    pub acked_bytes: u64,
    /// Recent packet loss (an EWMA over ticks) and the counters it was last updated from.
    loss: f64,
    last_counts: (u64, u64),
    /// (time, acked bytes) once per tick, over the eviction horizon.
    history: VecDeque<(Instant, u64)>,
    pub slow_since: Option<Instant>,
    /// Since when it has owed acknowledgements and sent us nothing at all:
    /// the last tick its connection had received a new packet, or when it
    /// began to owe one.
    pub quiet_since: Option<Instant>,
    /// Its connection's received-packet count at the last tick.
    last_rx: u64,
    /// After the group closed: everything it was sent, and the FIN, is acknowledged.
    pub drained: bool,
    /// How many peers held this slot before it (spec §14.7).
    pub generation: u32,
    /// Its connection's FIN was handed to the application (spec §14.8).
    pub fin_taken: bool,
}

impl Peer {
    pub fn new(addr: SocketAddr, conn: ConnHandle) -> Self {
        Peer {
            addr,
            conn,
            state: PeerState::Connecting,
            streams: vec![StreamId::BYTES],
            next_stream: StreamId::new(1),
            first_msg: 0,
            pending: 0,
            acked_messages: 0,
            acked_bytes: 0,
            loss: 0.0,
            last_counts: (0, 0),
            history: VecDeque::new(),
            slow_since: None,
            quiet_since: None,
            last_rx: 0,
            drained: false,
            generation: 0,
            fin_taken: false,
        }
    }

    /// Whether new messages go to it.
    pub fn takes_new(&self) -> bool {
        self.state == PeerState::Up
    }

    /// Notes, at a tick, whether anything arrived from it since the last.
    pub fn sample_activity(&mut self, now: Instant, stats: &ConnStats) {
        if stats.packets_received != self.last_rx {
            self.last_rx = stats.packets_received;
            self.quiet_since = Some(now);
        }
    }

    /// Updates the loss estimate from its connection's counters.
    pub fn sample_loss(&mut self, stats: &ConnStats) {
        let (sent, lost) = (stats.packets_sent, stats.lost_packets.saturating_sub(stats.spurious_losses));
        let ds = sent.saturating_sub(self.last_counts.0);
        let dl = lost.saturating_sub(self.last_counts.1);
        self.last_counts = (sent, lost);
        if ds > 0 {
            let sample = (dl as f64 / ds as f64).min(1.0);
            self.loss = 0.75 * self.loss + 0.25 * sample;
        }
    }

    /// spec §14.6: the CBAL load score, an estimate of how long a new
    /// message would take to be acknowledged by this peer: its smoothed
    /// response time, inflated by recent loss (each loss costs about one
    /// more round trip), plus the time to drain what it already owes at
    /// the rate its window allows. Lower is better.
    pub fn load_score(&self, stats: &ConnStats) -> f64 {
        let rtt = (stats.srtt + stats.rttvar).as_secs_f64().max(1e-4);
        let rate = stats.cwnd.max(1) as f64 / stats.srtt.as_secs_f64().max(1e-4);
        rtt * (1.0 + 4.0 * self.loss) + self.pending as f64 / rate
    }

    /// Records the acknowledged total at a tick; forgets what is older than `horizon`.
    pub fn record(&mut self, now: Instant, horizon: Duration) {
        self.history.push_back((now, self.acked_bytes));
        while self.history.front().is_some_and(|&(t, _)| now.saturating_duration_since(t) > horizon) {
            self.history.pop_front();
        }
    }

    /// The highest rate between two ticks within the horizon: what the
    /// peer showed it can take (bytes/s).
    pub fn capacity(&self) -> f64 {
        self.history
            .iter()
            .zip(self.history.iter().skip(1))
            .map(|(&(t0, a0), &(t1, a1))| rate(a1 - a0, t1.saturating_duration_since(t0)))
            .fold(0.0, f64::max)
    }

    /// Its mean rate over the last `span` (bytes/s); `None` until the
    /// history covers that long.
    pub fn recent_rate(&self, now: Instant, span: Duration) -> Option<f64> {
        let &(t0, a0) = self.history.iter().find(|&&(t, _)| now.saturating_duration_since(t) <= span)?;
        let &(t1, a1) = self.history.back()?;
        let first = self.history.front()?.0;
        (now.saturating_duration_since(first) >= span).then(|| rate(a1 - a0, t1.saturating_duration_since(t0)))
    }
}

fn rate(bytes: u64, dt: Duration) -> f64 {
    if dt.is_zero() {
        0.0
    } else {
        bytes as f64 / dt.as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer() -> Peer {
        Peer::new("127.0.0.1:1".parse().unwrap(), ConnHandle::test(0))
    }

    #[test]
    fn capacity_is_the_best_rate_seen_and_recent_rate_the_mean_over_the_span() {
        let t0 = Instant::now();
        let mut p = peer();
        let ms = Duration::from_millis;
        for (i, acked) in [0u64, 1000, 5000, 5100, 5200].into_iter().enumerate() {
            p.acked_bytes = acked;
            p.record(t0 + ms(100 * i as u64), Duration::from_secs(10));
        }
        assert!((p.capacity() - 40_000.0).abs() < 1e-6, "4000 B in 100 ms");
        let recent = p.recent_rate(t0 + ms(400), ms(200)).unwrap();
        assert!((recent - 1000.0).abs() < 1e-6, "200 B in 200 ms, got {recent}");
        assert!(p.recent_rate(t0 + ms(400), ms(1000)).is_none(), "history too short");
    }

    #[test]
    fn a_lossy_or_loaded_peer_scores_worse() {
        let stats = ConnStats {
            srtt: Duration::from_millis(10),
            rttvar: Duration::from_millis(1),
            cwnd: 100_000,
            ..ConnStats::default()
        };
        let mut a = peer();
        let base = a.load_score(&stats);
        a.loss = 0.1;
        assert!(a.load_score(&stats) > base);
        let mut b = peer();
        b.pending = 1_000_000;
        assert!(b.load_score(&stats) > base + 0.09, "1 MB at 10 MB/s adds 100 ms");
    }
}
