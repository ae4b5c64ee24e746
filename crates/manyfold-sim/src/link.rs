//! One direction of a simulated path: its configuration, its bottleneck
//! queue and the faults it injects (spec §11; the fault set follows
//! s2n-quic's network model and Linux netem).
//!
//! A datagram offered to a link goes through, in this order:
//! 1. the MTU check (larger datagrams are dropped);
//! 2. the bottleneck: at `rate_bps` it is serialized behind the datagrams
//!    already queued; if the queue would exceed `queue_limit_bytes` it is
//!    tail-dropped;
//! 3. random loss (after the bottleneck, so a lost datagram still used it);
//! 4. duplication: with probability `duplicate` a second copy follows;
//! 5. per copy: corruption (one random bit flipped), propagation `delay`,
//!    uniform `jitter`, and with probability `reorder` an extra
//!    `reorder_delay` that lets later datagrams overtake it.
//!
//! Jitter alone does not reorder: copies that are not picked for reordering
//! leave the link in the order they entered it, as on a real wire.

use std::time::{Duration, Instant};

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// Behaviour of one direction of a link.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkConfig {
    /// Probability that a datagram is lost.
    pub loss: f64,
    /// One-way propagation delay.
    pub delay: Duration,
    /// Extra delay drawn uniformly from `[0, jitter]` per datagram.
    pub jitter: Duration,
    /// Probability that a datagram is held back by `reorder_delay`, letting
    /// the datagrams behind it overtake it.
    pub reorder: f64,
    /// How long a reordered datagram is held back.
    pub reorder_delay: Duration,
    /// Probability that a datagram is delivered twice.
    pub duplicate: f64,
    /// Probability that a delivered copy has one random bit flipped.
    pub corrupt: f64,
    /// Bottleneck rate in bits per second; `None` is infinitely fast.
    pub rate_bps: Option<u64>,
    /// Most bytes waiting in (or being serialized by) the bottleneck; a
    /// datagram that would exceed it is tail-dropped. Only used with a rate.
    pub queue_limit_bytes: usize,
    /// Largest datagram (UDP payload) the link carries; larger ones are dropped.
    pub mtu: usize,
}

impl Default for LinkConfig {
    /// A clean 10 ms path with no bottleneck and a 1,500-byte MTU.
    fn default() -> Self {
        LinkConfig {
            loss: 0.0,
            delay: Duration::from_millis(10),
            jitter: Duration::ZERO,
            reorder: 0.0,
            reorder_delay: Duration::from_millis(5),
            duplicate: 0.0,
            corrupt: 0.0,
            rate_bps: None,
            queue_limit_bytes: 256 * 1024,
            // An Ethernet path: 1,500 bytes less the IPv4 and UDP headers.
            mtu: 1_472,
        }
    }
}

impl LinkConfig {
    /// A clean path with the given one-way delay.
    pub fn with_delay(delay: Duration) -> Self {
        LinkConfig { delay, ..LinkConfig::default() }
    }

    /// A path that delivers nothing.
    pub fn blackhole() -> Self {
        LinkConfig { loss: 1.0, ..LinkConfig::default() }
    }

    pub fn loss(mut self, p: f64) -> Self {
        self.loss = p;
        self
    }

    pub fn jitter(mut self, d: Duration) -> Self {
        self.jitter = d;
        self
    }

    pub fn reorder(mut self, p: f64, hold_back: Duration) -> Self {
        self.reorder = p;
        self.reorder_delay = hold_back;
        self
    }

    pub fn duplicate(mut self, p: f64) -> Self {
        self.duplicate = p;
        self
    }

    pub fn corrupt(mut self, p: f64) -> Self {
        self.corrupt = p;
        self
    }

    pub fn rate(mut self, bps: u64, queue_limit_bytes: usize) -> Self {
        self.rate_bps = Some(bps);
        self.queue_limit_bytes = queue_limit_bytes;
        self
    }

    pub fn mtu(mut self, mtu: usize) -> Self {
        self.mtu = mtu;
        self
    }
}

/// What a link did with the datagrams offered to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Datagrams offered to the link.
    pub offered: u64,
    /// Copies scheduled for delivery (duplicates included).
    pub delivered: u64,
    /// Bytes of the copies scheduled for delivery.
    pub delivered_bytes: u64,
    pub dropped_loss: u64,
    /// Tail drops at the bottleneck queue.
    pub dropped_queue: u64,
    pub dropped_mtu: u64,
    pub duplicated: u64,
    pub corrupted: u64,
    pub reordered: u64,
    /// Largest bottleneck backlog seen, in bytes.
    pub max_queue_bytes: u64,
}

/// One copy of a datagram leaving a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrival {
    pub at: Instant,
    pub data: Vec<u8>,
    /// A bit of this copy was flipped.
    pub corrupted: bool,
}

/// A link direction with its state.
#[derive(Debug, Clone)]
pub(crate) struct Link {
    pub config: LinkConfig,
    pub stats: LinkStats,
    /// When the bottleneck finishes serializing what it holds.
    busy_until: Option<Instant>,
    /// Latest arrival of an in-order copy: jitter never reorders.
    last_in_order: Option<Instant>,
}

/// `p` as a Bernoulli trial; draws nothing for 0 and 1, so a link without
/// a fault leaves the random stream of the others untouched.
fn chance(rng: &mut ChaCha8Rng, p: f64) -> bool {
    if p <= 0.0 {
        false
    } else if p >= 1.0 {
        true
    } else {
        rng.gen::<f64>() < p
    }
}

/// Time to put `bytes` on a wire of `bps` bits per second.
fn serialization(bytes: usize, bps: u64) -> Duration {
    let nanos = (bytes as u128 * 8 * 1_000_000_000).div_ceil(u128::from(bps.max(1)));
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

impl Link {
    pub fn new(config: LinkConfig) -> Self {
        Link { config, stats: LinkStats::default(), busy_until: None, last_in_order: None }
    }

    /// Bytes in the bottleneck at `now` (waiting or being serialized).
    fn backlog(&self, now: Instant, bps: u64) -> u64 {
        let Some(busy) = self.busy_until else {
            return 0;
        };
        let left = busy.saturating_duration_since(now);
        let bytes = left.as_nanos() * u128::from(bps) / 8 / 1_000_000_000;
        u64::try_from(bytes).unwrap_or(u64::MAX)
    }

    /// Offers `data` at `now`; pushes the copies that will arrive onto `out`.
    pub fn transmit(&mut self, now: Instant, data: Vec<u8>, rng: &mut ChaCha8Rng, out: &mut Vec<Arrival>) {
        let cfg = &self.config;
        self.stats.offered += 1;
        if data.len() > cfg.mtu {
            self.stats.dropped_mtu += 1;
            return;
        }
        let departure = match cfg.rate_bps {
            None => now,
            Some(bps) => {
                let backlog = self.backlog(now, bps);
                if backlog + data.len() as u64 > cfg.queue_limit_bytes as u64 {
                    self.stats.dropped_queue += 1;
                    return;
                }
                self.stats.max_queue_bytes = self.stats.max_queue_bytes.max(backlog + data.len() as u64);
                let start = self.busy_until.map_or(now, |b| b.max(now));
                let done = start + serialization(data.len(), bps);
                self.busy_until = Some(done);
                done
            }
        };
        if chance(rng, cfg.loss) {
            self.stats.dropped_loss += 1;
            return;
        }
        let copies = if chance(rng, cfg.duplicate) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        let mut data = Some(data);
        for i in 0..copies {
            let mut bytes =
                if i + 1 == copies { data.take().unwrap_or_default() } else { data.clone().unwrap_or_default() };
            let corrupted = !bytes.is_empty() && chance(rng, self.config.corrupt);
            if corrupted {
                let bit = rng.gen_range(0..bytes.len() * 8);
                bytes[bit / 8] ^= 1 << (bit % 8);
                self.stats.corrupted += 1;
            }
            let mut at = departure + self.config.delay;
            if !self.config.jitter.is_zero() {
                let j = rng.gen_range(0..=self.config.jitter.as_nanos() as u64);
                at += Duration::from_nanos(j);
            }
            if chance(rng, self.config.reorder) {
                self.stats.reordered += 1;
                at += self.config.reorder_delay;
            } else {
                at = self.last_in_order.map_or(at, |l| l.max(at));
                self.last_in_order = Some(at);
            }
            self.stats.delivered += 1;
            self.stats.delivered_bytes += bytes.len() as u64;
            out.push(Arrival { at, data: bytes, corrupted });
        }
    }
}
