//! The simulated network: per-direction links between addresses and the one
//! seeded RNG all their faults draw from (spec §11).
//!
//! The network decides what happens to a datagram and when its copies
//! arrive; it keeps no queue of its own. The caller (the [`crate::World`],
//! or a test) schedules the [`Arrival`]s it returns on an
//! [`crate::EventQueue`]. A pair of addresses without a configured link uses
//! the default link.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Instant;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::link::{Arrival, Link, LinkConfig, LinkStats};

/// Links between addresses, one per direction.
#[derive(Debug)]
pub struct Network {
    rng: ChaCha8Rng,
    default: LinkConfig,
    links: HashMap<(SocketAddr, SocketAddr), Link>,
}

impl Network {
    /// A network whose every random choice follows from `seed`.
    pub fn new(seed: u64) -> Self {
        Network { rng: ChaCha8Rng::seed_from_u64(seed), default: LinkConfig::default(), links: HashMap::new() }
    }

    /// The configuration of links not set explicitly (and of those created
    /// from now on by traffic).
    pub fn set_default_link(&mut self, config: LinkConfig) {
        self.default = config;
    }

    /// Configures the direction `from` -> `to`, keeping its queue state and stats.
    pub fn set_link(&mut self, from: SocketAddr, to: SocketAddr, config: LinkConfig) {
        match self.links.get_mut(&(from, to)) {
            Some(link) => link.config = config,
            None => {
                self.links.insert((from, to), Link::new(config));
            }
        }
    }

    /// The configuration in force for `from` -> `to`.
    pub fn link_config(&self, from: SocketAddr, to: SocketAddr) -> &LinkConfig {
        self.links.get(&(from, to)).map_or(&self.default, |l| &l.config)
    }

    /// What the direction `from` -> `to` has done so far.
    pub fn link_stats(&self, from: SocketAddr, to: SocketAddr) -> LinkStats {
        self.links.get(&(from, to)).map(|l| l.stats).unwrap_or_default()
    }

    /// Stats summed over every link.
    pub fn total_stats(&self) -> LinkStats {
        let mut t = LinkStats::default();
        for l in self.links.values() {
            let s = l.stats;
            t.offered += s.offered;
            t.delivered += s.delivered;
            t.delivered_bytes += s.delivered_bytes;
            t.dropped_loss += s.dropped_loss;
            t.dropped_queue += s.dropped_queue;
            t.dropped_mtu += s.dropped_mtu;
            t.duplicated += s.duplicated;
            t.corrupted += s.corrupted;
            t.reordered += s.reordered;
            t.max_queue_bytes = t.max_queue_bytes.max(s.max_queue_bytes);
        }
        t
    }

    /// Puts `data` on the link `from` -> `to` at `now`; the copies that
    /// will arrive (none, one, or two) are pushed onto `out`.
    pub fn transmit(&mut self, now: Instant, from: SocketAddr, to: SocketAddr, data: Vec<u8>, out: &mut Vec<Arrival>) {
        let default = &self.default;
        let link = self.links.entry((from, to)).or_insert_with(|| Link::new(default.clone()));
        link.transmit(now, data, &mut self.rng, out);
    }
}

#[cfg(test)]
mod tests {
    //! The model is checked on raw byte datagrams: each fault happens at its
    //! configured rate, and the same seed gives the same run.

    use std::time::Duration;

    use super::*;
    use crate::time::EventQueue;

    /// Arrivals in arrival order (time, bytes, corrupted), the link's stats
    /// and the start time.
    type Run = (Vec<(Instant, Vec<u8>, bool)>, LinkStats, Instant);

    fn addr(last: u8) -> SocketAddr {
        SocketAddr::from(([198, 18, 0, last], 4000))
    }

    /// Sends `n` datagrams of `size` bytes (numbered in their first 4 bytes),
    /// one every `gap`, through a link of `config`; returns the arrivals in
    /// arrival order and the link's stats.
    fn run(seed: u64, config: LinkConfig, n: u32, size: usize, gap: Duration) -> Run {
        let t0 = Instant::now();
        let mut net = Network::new(seed);
        net.set_link(addr(1), addr(2), config);
        let mut q = EventQueue::new();
        let mut out = Vec::new();
        for i in 0..n {
            let now = t0 + gap * i;
            let mut data = vec![0xa5; size];
            data[..4].copy_from_slice(&i.to_be_bytes());
            net.transmit(now, addr(1), addr(2), data, &mut out);
            for a in out.drain(..) {
                q.push(a.at, (a.data, a.corrupted));
            }
        }
        let arrivals = std::iter::from_fn(|| q.pop().map(|(t, (d, c))| (t, d, c))).collect();
        (arrivals, net.link_stats(addr(1), addr(2)), t0)
    }

    fn number(d: &[u8]) -> u32 {
        u32::from_be_bytes([d[0], d[1], d[2], d[3]])
    }

    fn assert_near(what: &str, got: f64, want: f64, tolerance: f64) {
        assert!((got - want).abs() <= tolerance, "{what}: got {got:.4}, want {want:.4} ± {tolerance}");
    }

    #[test]
    fn clean_link_delivers_everything_in_order_after_the_delay() {
        let gap = Duration::from_micros(100);
        let (arr, stats, t0) = run(1, LinkConfig::with_delay(Duration::from_millis(7)), 1000, 100, gap);
        assert_eq!(arr.len(), 1000);
        for (i, (t, d, c)) in arr.iter().enumerate() {
            assert_eq!(number(d), i as u32);
            assert_eq!(*t, t0 + gap * i as u32 + Duration::from_millis(7));
            assert!(!c);
        }
        assert_eq!(stats.delivered, 1000);
        assert_eq!(stats.delivered_bytes, 100_000);
    }

    #[test]
    fn loss_rate_matches_configuration() {
        for p in [0.01, 0.1, 0.3] {
            let (arr, stats, _) = run(2, LinkConfig::default().loss(p), 100_000, 40, Duration::from_micros(10));
            let lost = 1.0 - arr.len() as f64 / 100_000.0;
            assert_near("loss", lost, p, 0.01);
            assert_eq!(stats.dropped_loss as usize, 100_000 - arr.len());
        }
        let (arr, _, _) = run(2, LinkConfig::blackhole(), 1000, 40, Duration::from_micros(10));
        assert!(arr.is_empty());
    }

    #[test]
    fn jitter_stays_in_bounds_and_keeps_order() {
        let cfg = LinkConfig::with_delay(Duration::from_millis(10)).jitter(Duration::from_millis(4));
        let gap = Duration::from_millis(1);
        let (arr, _, t0) = run(3, cfg, 10_000, 40, gap);
        let mut spread = Duration::MAX..Duration::ZERO;
        for (i, (t, d, _)) in arr.iter().enumerate() {
            assert_eq!(number(d), i as u32, "jitter alone must not reorder");
            let delay = *t - (t0 + gap * i as u32);
            assert!(delay >= Duration::from_millis(10) && delay <= Duration::from_millis(14), "{delay:?}");
            spread.start = spread.start.min(delay);
            spread.end = spread.end.max(delay);
        }
        assert!(spread.end - spread.start > Duration::from_millis(3), "jitter too narrow: {spread:?}");
    }

    #[test]
    fn reordering_holds_back_the_configured_fraction() {
        let cfg = LinkConfig::default().reorder(0.05, Duration::from_millis(3));
        let (arr, stats, _) = run(4, cfg, 20_000, 40, Duration::from_millis(1));
        assert_eq!(arr.len(), 20_000);
        // A held-back datagram i arrives after i+1, i+2 (3 ms later, 1 ms apart).
        let late = arr.windows(2).filter(|w| number(&w[0].1) > number(&w[1].1)).count();
        assert_near("reordered", stats.reordered as f64 / 20_000.0, 0.05, 0.006);
        assert!(late as u64 >= stats.reordered * 9 / 10 && late as u64 <= stats.reordered, "{late} vs {stats:?}");
    }

    #[test]
    fn duplication_rate_matches_and_copies_are_identical() {
        let (arr, stats, _) = run(5, LinkConfig::default().duplicate(0.1), 50_000, 40, Duration::from_micros(10));
        assert_near("duplicated", (arr.len() - 50_000) as f64 / 50_000.0, 0.1, 0.01);
        assert_eq!(stats.duplicated as usize, arr.len() - 50_000);
        let mut seen = vec![0u8; 50_000];
        for (_, d, _) in &arr {
            assert_eq!(d.len(), 40);
            seen[number(d) as usize] += 1;
        }
        assert!(seen.iter().all(|&c| c == 1 || c == 2));
    }

    #[test]
    fn corruption_flips_exactly_one_bit_at_the_configured_rate() {
        let (arr, stats, _) = run(6, LinkConfig::default().corrupt(0.02), 50_000, 64, Duration::from_micros(10));
        let mut corrupted = 0;
        for (_, d, c) in &arr {
            // Bits flipped in the 4-byte counter would hide which datagram it
            // was; compare the fixed tail only and count the whole.
            let flipped: u32 = d[4..].iter().map(|b| (b ^ 0xa5).count_ones()).sum();
            assert!(flipped <= 1);
            if *c {
                corrupted += 1;
            } else {
                assert_eq!(flipped, 0);
            }
        }
        assert_eq!(corrupted, stats.corrupted);
        assert_near("corrupted", corrupted as f64 / 50_000.0, 0.02, 0.003);
    }

    #[test]
    fn larger_than_mtu_is_dropped() {
        let t0 = Instant::now();
        let mut net = Network::new(7);
        net.set_link(addr(1), addr(2), LinkConfig::default().mtu(1200));
        let mut out = Vec::new();
        net.transmit(t0, addr(1), addr(2), vec![0; 1200], &mut out);
        net.transmit(t0, addr(1), addr(2), vec![0; 1201], &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(net.link_stats(addr(1), addr(2)).dropped_mtu, 1);
    }

    #[test]
    fn rate_serializes_back_to_back_datagrams() {
        // 8 Mbit/s: a 1000-byte datagram takes 1 ms on the wire.
        let cfg = LinkConfig::with_delay(Duration::from_millis(5)).rate(8_000_000, 1 << 30);
        let (arr, stats, t0) = run(8, cfg, 1000, 1000, Duration::ZERO);
        assert_eq!(arr.len(), 1000);
        for (i, (t, d, _)) in arr.iter().enumerate() {
            assert_eq!(number(d), i as u32);
            assert_eq!(*t, t0 + Duration::from_millis(5) + Duration::from_millis(i as u64 + 1));
        }
        assert_eq!(stats.max_queue_bytes, 1_000_000);
    }

    #[test]
    fn rate_below_capacity_adds_only_serialization() {
        let cfg = LinkConfig::with_delay(Duration::from_millis(5)).rate(8_000_000, 10_000);
        let (arr, stats, t0) = run(9, cfg, 100, 1000, Duration::from_millis(2));
        assert_eq!(arr.len(), 100);
        assert_eq!(stats.dropped_queue, 0);
        assert_eq!(arr[99].0, t0 + Duration::from_millis(2 * 99 + 5 + 1));
    }

    #[test]
    fn full_queue_tail_drops() {
        // A burst of 100 datagrams of 1000 bytes into a 10 000-byte queue:
        // the first 10 fit; then one leaves every 1 ms while the burst
        // lasts 0 ms, so the other 90 are dropped.
        let cfg = LinkConfig::default().rate(8_000_000, 10_000);
        let (arr, stats, _) = run(10, cfg, 100, 1000, Duration::ZERO);
        assert_eq!(arr.len(), 10);
        assert_eq!(stats.dropped_queue, 90);
        // Offered at twice the rate for 1 s, about half gets through.
        let cfg = LinkConfig::default().rate(8_000_000, 10_000);
        let (arr, _, _) = run(10, cfg, 2000, 1000, Duration::from_micros(500));
        assert_near("throughput share", arr.len() as f64 / 2000.0, 0.5, 0.01);
    }

    #[test]
    fn same_seed_same_run_other_seed_other_run() {
        let cfg = LinkConfig::default()
            .loss(0.1)
            .jitter(Duration::from_millis(2))
            .reorder(0.1, Duration::from_millis(4))
            .duplicate(0.05)
            .corrupt(0.05)
            .rate(10_000_000, 50_000);
        let a = run(11, cfg.clone(), 5000, 500, Duration::from_micros(300));
        let b = run(11, cfg.clone(), 5000, 500, Duration::from_micros(300));
        let c = run(12, cfg, 5000, 500, Duration::from_micros(300));
        let strip =
            |r: &Run| -> Vec<(Duration, Vec<u8>)> { r.0.iter().map(|(t, d, _)| (*t - r.2, d.clone())).collect() };
        assert_eq!(strip(&a), strip(&b));
        assert_eq!(a.1, b.1);
        assert_ne!(strip(&a), strip(&c));
    }

    #[test]
    fn directions_are_independent() {
        let t0 = Instant::now();
        let mut net = Network::new(13);
        net.set_link(addr(1), addr(2), LinkConfig::blackhole());
        let mut out = Vec::new();
        net.transmit(t0, addr(1), addr(2), vec![1], &mut out);
        net.transmit(t0, addr(2), addr(1), vec![2], &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].data, [2]);
        assert_eq!(out[0].at, t0 + LinkConfig::default().delay);
        assert_eq!(net.total_stats().offered, 2);
    }
}
