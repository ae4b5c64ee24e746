//! Fault injection in the driver (RUSP's `drop` attribute, paper 04 §2.2;
//! modelled on s2n-quic's seeded network model and smoltcp's
//! fault-injecting device).
//!
//! Every decision comes from one seeded RNG, so a seed and the same traffic
//! give the same faults. Held datagrams (delay, jitter, reordering, and
//! datagrams the socket could not take yet) wait in a bounded queue ordered
//! by release time; their buffers are recycled, so a steady state allocates
//! nothing.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::config::{FaultConfig, FaultStats};

/// A datagram waiting in the delay queue.
#[derive(Debug)]
struct Held {
    at: Instant,
    /// Tie-breaker keeping FIFO order among datagrams due at the same time.
    order: u64,
    /// Received (goes to the engine when due) rather than sent (to the socket).
    inbound: bool,
    /// Destination of a sent datagram, source of a received one.
    peer: SocketAddr,
    data: Vec<u8>,
}

/// A held datagram that is due.
#[derive(Debug)]
pub(crate) struct Due<'a> {
    pub inbound: bool,
    pub peer: SocketAddr,
    pub data: &'a [u8],
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.order) == (other.at, other.order)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Held {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.order).cmp(&(other.at, other.order))
    }
}

/// The fault injector of one endpoint.
#[derive(Debug)]
pub(crate) struct Faults {
    config: FaultConfig,
    rng: ChaCha8Rng,
    queue: BinaryHeap<Reverse<Held>>,
    pool: Vec<Vec<u8>>,
    next_order: u64,
    pub(crate) stats: FaultStats,
}

/// What to do with one datagram we are about to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SendFate {
    /// The datagram was dropped.
    pub dropped: bool,
    /// Copies to send right now (0, 1 or 2); the rest, if any, were queued.
    pub now: u8,
}

impl Faults {
    pub(crate) fn new(config: FaultConfig) -> Self {
        Faults {
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            config,
            queue: BinaryHeap::new(),
            pool: Vec::new(),
            next_order: 0,
            stats: FaultStats::default(),
        }
    }

    /// Replaces the fault model of a running endpoint: datagrams already
    /// held keep their release times; the RNG is re-seeded only if the
    /// seed changed, so a run stays reproducible.
    pub(crate) fn reconfigure(&mut self, config: FaultConfig) {
        if config.seed != self.config.seed {
            self.rng = ChaCha8Rng::seed_from_u64(config.seed);
        }
        self.config = config;
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.gen::<f64>() < p
    }

    /// Decides the fate of a datagram we received: dropped, delivered now
    /// (`now` copies), or held in the delay queue until due.
    pub(crate) fn on_receive(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) -> SendFate {
        let c = &self.config;
        let (loss, dup, reorder, delay, jitter) =
            (c.effective_recv_loss(), c.recv_duplicate, c.recv_reorder, c.recv_delay, c.recv_jitter);
        if self.chance(loss) {
            self.stats.recv_dropped += 1;
            return SendFate { dropped: true, now: 0 };
        }
        self.impair(now, true, from, datagram, (dup, reorder, delay, jitter))
    }

    /// Decides the fate of a datagram we send. Copies that must wait are
    /// copied into the delay queue; the caller sends `now` copies itself.
    pub(crate) fn on_send(&mut self, now: Instant, destination: SocketAddr, datagram: &[u8]) -> SendFate {
        let c = &self.config;
        let (loss, dup, reorder, delay, jitter) = (c.effective_send_loss(), c.duplicate, c.reorder, c.delay, c.jitter);
        if self.chance(loss) {
            self.stats.send_dropped += 1;
            return SendFate { dropped: true, now: 0 };
        }
        self.impair(now, false, destination, datagram, (dup, reorder, delay, jitter))
    }

    /// Duplication, reordering, delay and jitter, alike in both directions.
    fn impair(
        &mut self,
        now: Instant,
        inbound: bool,
        peer: SocketAddr,
        datagram: &[u8],
        (dup, reorder, base_delay, jitter): (f64, f64, Duration, Duration),
    ) -> SendFate {
        let copies = if self.chance(dup) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        let mut immediate = 0;
        for _ in 0..copies {
            let mut delay = base_delay;
            if !jitter.is_zero() {
                let j = self.rng.gen_range(0..jitter.as_nanos().max(1) as u64);
                delay += Duration::from_nanos(j);
            }
            if self.chance(reorder) {
                self.stats.reordered += 1;
                delay += self.config.reorder_delay;
            }
            if delay.is_zero() {
                immediate += 1;
            } else {
                self.stats.delayed += 1;
                self.hold_dir(now + delay, inbound, peer, datagram);
            }
        }
        SendFate { dropped: false, now: immediate }
    }

    /// Queues a copy of `datagram` for release at `at` (also used for
    /// datagrams the socket could not take yet). Drops it when the queue is full.
    pub(crate) fn hold(&mut self, at: Instant, destination: SocketAddr, datagram: &[u8]) {
        self.hold_dir(at, false, destination, datagram);
    }

    fn hold_dir(&mut self, at: Instant, inbound: bool, peer: SocketAddr, datagram: &[u8]) {
        if self.queue.len() >= self.config.queue_limit.max(1) {
            self.stats.queue_overflow += 1;
            return;
        }
        let mut data = self.pool.pop().unwrap_or_default();
        data.clear();
        data.extend_from_slice(datagram);
        let order = self.next_order;
        self.next_order += 1;
        self.queue.push(Reverse(Held { at, order, inbound, peer, data }));
    }

    /// When the next held datagram is due.
    pub(crate) fn next_release(&self) -> Option<Instant> {
        self.queue.peek().map(|Reverse(h)| h.at)
    }

    /// The next held datagram due at `now`, if any; it stays queued until
    /// [`Faults::pop`] (so a send that would block can leave it there).
    pub(crate) fn peek_due(&self, now: Instant) -> Option<Due<'_>> {
        let Reverse(h) = self.queue.peek()?;
        (h.at <= now).then_some(Due { inbound: h.inbound, peer: h.peer, data: h.data.as_slice() })
    }

    /// Removes the datagram [`Faults::peek_due`] returned, recycling its buffer.
    pub(crate) fn pop(&mut self) {
        if let Some(Reverse(h)) = self.queue.pop() {
            self.pool.push(h.data);
        }
    }

    /// Whether datagrams are queued (new ones must queue behind them to keep order).
    pub(crate) fn has_queued_due(&self, now: Instant) -> bool {
        self.peek_due(now).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr() -> SocketAddr {
        "127.0.0.1:9".parse().expect("literal address")
    }

    #[test]
    fn no_faults_sends_everything_now() {
        let mut f = Faults::new(FaultConfig::default());
        let now = Instant::now();
        for _ in 0..1000 {
            assert_eq!(f.on_send(now, addr(), b"x"), SendFate { dropped: false, now: 1 });
            assert_eq!(f.on_receive(now, addr(), b"x"), SendFate { dropped: false, now: 1 });
        }
        assert_eq!(f.stats, FaultStats::default());
    }

    #[test]
    fn loss_rate_is_close_to_configured_and_seeded() {
        let cfg = FaultConfig { loss: 0.1, seed: 7, ..FaultConfig::default() };
        let run = || {
            let mut f = Faults::new(cfg.clone());
            let now = Instant::now();
            (0..10_000).filter(|_| f.on_send(now, addr(), b"x").dropped).count()
        };
        let dropped = run();
        assert!((800..1200).contains(&dropped), "dropped {dropped}");
        assert_eq!(dropped, run(), "same seed, same faults");
    }

    #[test]
    fn delayed_datagrams_release_in_time_order() {
        let cfg = FaultConfig {
            delay: Duration::from_millis(10),
            jitter: Duration::from_millis(5),
            ..FaultConfig::default()
        };
        let mut f = Faults::new(cfg);
        let now = Instant::now();
        for i in 0..100u8 {
            assert_eq!(f.on_send(now, addr(), &[i]).now, 0);
        }
        assert!(f.peek_due(now).is_none());
        let later = now + Duration::from_millis(15);
        let mut n = 0;
        let mut last = now;
        while let Some(at) = f.next_release() {
            assert!(at >= last);
            last = at;
            assert!(f.peek_due(later).is_some());
            f.pop();
            n += 1;
        }
        assert_eq!(n, 100);
        assert_eq!(f.stats.delayed, 100);
    }

    #[test]
    fn received_datagrams_are_duplicated_and_delayed_too() {
        let cfg = FaultConfig { recv_duplicate: 1.0, recv_delay: Duration::from_millis(3), ..FaultConfig::default() };
        let mut f = Faults::new(cfg);
        let now = Instant::now();
        assert_eq!(f.on_receive(now, addr(), b"in"), SendFate { dropped: false, now: 0 });
        assert!(f.peek_due(now).is_none());
        let later = now + Duration::from_millis(3);
        for _ in 0..2 {
            let due = f.peek_due(later).expect("both copies due");
            assert!(due.inbound);
            assert_eq!(due.data, b"in");
            f.pop();
        }
        assert_eq!(f.stats.duplicated, 1);
        // Sending is untouched by receive-side settings.
        assert_eq!(f.on_send(now, addr(), b"out"), SendFate { dropped: false, now: 1 });
    }

    #[test]
    fn queue_is_bounded() {
        let cfg = FaultConfig { delay: Duration::from_secs(1), queue_limit: 10, ..FaultConfig::default() };
        let mut f = Faults::new(cfg);
        let now = Instant::now();
        for _ in 0..20 {
            f.on_send(now, addr(), b"x");
        }
        assert_eq!(f.stats.queue_overflow, 10);
    }
}
