//! The emulated link of one direction, as a pure model (no I/O, `now` is a
//! parameter, randomness from a seed, STYLE.md): random loss, a rate limit
//! with a bounded tail-drop queue, one-way delay, jitter and reordering.
//!
//! The rate limit is a token bucket one packet deep: a packet departs when
//! the previous one has finished serializing at `rate`, so the queue in
//! front of the bottleneck holds `(next_free - now) * rate` bytes; a packet
//! that would push it past `queue_bytes` is dropped at the tail. After the
//! bottleneck each packet waits `delay + U(0, jitter)`; jitter alone never
//! reorders (delivery times are kept monotone), while a packet picked for
//! reordering (probability `reorder`) is held `reorder_gap` longer so that
//! later packets overtake it.

use std::time::{Duration, Instant};

/// One direction's parameters. Rates in bit/s (0 = unlimited),
/// probabilities in [0, 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkConfig {
    pub rate_bps: u64,
    pub delay: Duration,
    pub jitter: Duration,
    pub loss: f64,
    pub reorder: f64,
    pub reorder_gap: Duration,
    pub queue_bytes: u64,
    pub seed: u64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            rate_bps: 0,
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            loss: 0.0,
            reorder: 0.0,
            reorder_gap: Duration::from_millis(1),
            queue_bytes: 1 << 20,
            seed: 1,
        }
    }
}

impl LinkConfig {
    /// The line protocol between the bench and its relay: `key=value`
    /// pairs separated by spaces (durations in µs, probabilities in ppm).
    pub fn to_line(self) -> String {
        format!(
            "rate={} delay={} jitter={} loss={} reorder={} gap={} queue={} seed={}",
            self.rate_bps,
            self.delay.as_micros(),
            self.jitter.as_micros(),
            (self.loss * 1e6).round() as u64,
            (self.reorder * 1e6).round() as u64,
            self.reorder_gap.as_micros(),
            self.queue_bytes,
            self.seed
        )
    }

    pub fn from_line(line: &str) -> Option<Self> {
        let mut c = Self::default();
        for kv in line.split_whitespace() {
            let (k, v) = kv.split_once('=')?;
            let v: u64 = v.parse().ok()?;
            let us = Duration::from_micros(v);
            match k {
                "rate" => c.rate_bps = v,
                "delay" => c.delay = us,
                "jitter" => c.jitter = us,
                "loss" => c.loss = v as f64 / 1e6,
                "reorder" => c.reorder = v as f64 / 1e6,
                "gap" => c.reorder_gap = us,
                "queue" => c.queue_bytes = v,
                "seed" => c.seed = v,
                _ => return None,
            }
        }
        Some(c)
    }
}

/// What the link did with one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Deliver at this instant.
    Deliver(Instant),
    /// Random loss.
    Lost,
    /// The bottleneck queue was full (tail drop).
    QueueFull,
}

/// Counters of one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    pub forwarded: u64,
    /// IP bytes of the packets forwarded.
    pub forwarded_bytes: u64,
    pub lost: u64,
    pub queue_drops: u64,
    /// IP bytes of the packets lost or dropped at the full queue.
    pub dropped_bytes: u64,
    pub reordered: u64,
}

/// One direction of the emulated link.
#[derive(Debug)]
pub struct Link {
    cfg: LinkConfig,
    rng: SplitMix64,
    next_free: Option<Instant>,
    last_delivery: Option<Instant>,
    pub stats: LinkStats,
}

impl Link {
    pub fn new(cfg: LinkConfig, stream: u64) -> Self {
        Self {
            cfg,
            rng: SplitMix64(cfg.seed ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            next_free: None,
            last_delivery: None,
            stats: LinkStats::default(),
        }
    }

    /// Decides the fate of a packet of `len` bytes offered at `now`.
    pub fn offer(&mut self, len: usize, now: Instant) -> Verdict {
        if self.cfg.loss > 0.0 && self.rng.unit() < self.cfg.loss {
            self.stats.lost += 1;
            self.stats.dropped_bytes += len as u64;
            return Verdict::Lost;
        }
        let departure = if self.cfg.rate_bps == 0 {
            now
        } else {
            let start = self.next_free.filter(|t| *t > now).unwrap_or(now);
            let backlog = (start - now).as_secs_f64() * self.cfg.rate_bps as f64 / 8.0;
            if backlog + len as f64 > self.cfg.queue_bytes as f64 {
                self.stats.queue_drops += 1;
                self.stats.dropped_bytes += len as u64;
                return Verdict::QueueFull;
            }
            let tx = Duration::from_secs_f64(len as f64 * 8.0 / self.cfg.rate_bps as f64);
            self.next_free = Some(start + tx);
            start + tx
        };
        let jitter = if self.cfg.jitter.is_zero() { Duration::ZERO } else { self.cfg.jitter.mul_f64(self.rng.unit()) };
        let mut at = departure + self.cfg.delay + jitter;
        if self.cfg.reorder > 0.0 && self.rng.unit() < self.cfg.reorder {
            self.stats.reordered += 1;
            at += self.cfg.reorder_gap;
        } else {
            if let Some(last) = self.last_delivery {
                at = at.max(last);
            }
            self.last_delivery = Some(at);
        }
        self.stats.forwarded += 1;
        self.stats.forwarded_bytes += len as u64;
        Verdict::Deliver(at)
    }
}

/// A small seeded generator (Steele, Lea, Flood 2014, "SplitMix"): enough
/// for loss decisions, reproducible from the seed.
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> LinkConfig {
        LinkConfig { rate_bps: 8_000_000, queue_bytes: 10_000, ..LinkConfig::default() }
    }

    #[test]
    fn config_line_round_trips() {
        let c = LinkConfig {
            rate_bps: 1_000_000_000,
            delay: Duration::from_millis(25),
            jitter: Duration::from_micros(300),
            loss: 0.001,
            reorder: 0.01,
            reorder_gap: Duration::from_millis(2),
            queue_bytes: 12_345,
            seed: 7,
        };
        assert_eq!(LinkConfig::from_line(&c.to_line()), Some(c));
        assert_eq!(LinkConfig::from_line("rate=x"), None);
        assert_eq!(LinkConfig::from_line("colour=1"), None);
    }

    #[test]
    fn rate_spaces_packets_by_serialization_time() {
        let mut l = Link::new(cfg(), 0);
        let t0 = Instant::now();
        // 1,000 bytes at 8 Mbit/s = 1 ms each.
        assert_eq!(l.offer(1000, t0), Verdict::Deliver(t0 + Duration::from_millis(1)));
        assert_eq!(l.offer(1000, t0), Verdict::Deliver(t0 + Duration::from_millis(2)));
        // Once idle, a packet goes out at once.
        let later = t0 + Duration::from_millis(10);
        assert_eq!(l.offer(1000, later), Verdict::Deliver(later + Duration::from_millis(1)));
    }

    #[test]
    fn full_queue_drops_at_the_tail() {
        let mut l = Link::new(cfg(), 0);
        let t0 = Instant::now();
        let verdicts: Vec<_> = (0..12).map(|_| l.offer(1000, t0)).collect();
        assert!(verdicts[..10].iter().all(|v| matches!(v, Verdict::Deliver(_))), "{verdicts:?}");
        assert!(verdicts[10..].iter().all(|v| *v == Verdict::QueueFull), "{verdicts:?}");
        assert_eq!(l.stats.queue_drops, 2);
        assert_eq!((l.stats.forwarded_bytes, l.stats.dropped_bytes), (10_000, 2_000), "both counted in bytes");
    }

    #[test]
    fn loss_rate_follows_the_seeded_probability() {
        let c = LinkConfig { loss: 0.05, rate_bps: 0, ..LinkConfig::default() };
        let mut l = Link::new(c, 1);
        let t0 = Instant::now();
        for _ in 0..100_000 {
            l.offer(100, t0);
        }
        assert!((4_500..5_500).contains(&l.stats.lost), "{:?}", l.stats);
        assert_eq!(l.stats.dropped_bytes, l.stats.lost * 100, "lost packets counted in bytes");
        // Same seed, same decisions.
        let mut again = Link::new(c, 1);
        for _ in 0..100_000 {
            again.offer(100, t0);
        }
        assert_eq!(again.stats, l.stats);
    }

    #[test]
    fn jitter_keeps_order_and_reordering_breaks_it() {
        let c = LinkConfig { jitter: Duration::from_millis(5), rate_bps: 0, ..LinkConfig::default() };
        let mut l = Link::new(c, 2);
        let t0 = Instant::now();
        let times: Vec<_> = (0..1000u64)
            .map(|i| match l.offer(100, t0 + Duration::from_micros(i)) {
                Verdict::Deliver(t) => t,
                v => panic!("{v:?}"),
            })
            .collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]));
        let c =
            LinkConfig { reorder: 0.1, reorder_gap: Duration::from_millis(1), rate_bps: 0, ..LinkConfig::default() };
        let mut l = Link::new(c, 2);
        let times: Vec<_> = (0..1000u64)
            .map(|i| match l.offer(100, t0 + Duration::from_micros(10 * i)) {
                Verdict::Deliver(t) => t,
                v => panic!("{v:?}"),
            })
            .collect();
        assert!(times.windows(2).any(|w| w[0] > w[1]));
        assert!((50..150).contains(&l.stats.reordered), "{:?}", l.stats);
    }
}
