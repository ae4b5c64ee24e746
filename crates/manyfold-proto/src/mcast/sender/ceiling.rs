//! The configured ceiling on a multicast sender's rate (spec §16.3, "A
//! configured ceiling"): a token bucket at `max_rate` that the data,
//! parity and repair datagrams draw from, whatever the flow control
//! allows. Its depth, 20 ms at the rate (at least 10 datagrams), lets a
//! driver whose timers fire a few milliseconds late keep the rate over
//! any second, while no burst is longer than a few window packets.

use std::time::{Duration, Instant};

/// How much sending the bucket holds, in time at the rate.
const DEPTH: Duration = Duration::from_millis(20);
/// The least it holds, in datagrams.
const MIN_DATAGRAMS: f64 = 10.0;

#[derive(Debug, Clone)]
pub(super) struct Ceiling {
    /// Bytes per second.
    rate: f64,
    capacity: f64,
    tokens: f64,
    last: Option<Instant>,
}

impl Ceiling {
    /// A full bucket at `rate` bytes per second for datagrams of up to
    /// `max_datagram` bytes; `None` for no ceiling.
    pub(super) fn new(rate: Option<u64>, max_datagram: usize) -> Option<Ceiling> {
        let rate = rate.filter(|&r| r > 0)? as f64;
        let capacity = (rate * DEPTH.as_secs_f64()).max(MIN_DATAGRAMS * max_datagram as f64);
        Some(Ceiling { rate, capacity, tokens: capacity, last: None })
    }

    /// A datagram of `size` bytes left at `now`; returns when the next
    /// one of that size may go (`None`: at once).
    pub(super) fn on_sent(&mut self, now: Instant, size: usize) -> Option<Instant> {
        let elapsed = self.last.map_or(Duration::ZERO, |l| now.saturating_duration_since(l));
        self.last = Some(now);
        self.tokens = (self.tokens + self.rate * elapsed.as_secs_f64()).min(self.capacity) - size as f64;
        let size = size as f64;
        if self.tokens >= size {
            return None;
        }
        // Whole microseconds, rounded up: the bucket holds enough by then.
        let micros = ((size - self.tokens) / self.rate * 1e6).ceil().max(1.0);
        Some(now + Duration::from_micros(micros as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_passes_its_depth_then_spaces_datagrams_at_the_rate() {
        let t0 = Instant::now();
        // 1 MB/s, 1000-byte datagrams: 20 ms deep is 20 datagrams.
        let mut c = Ceiling::new(Some(1_000_000), 1000).expect("a ceiling");
        for _ in 0..19 {
            assert_eq!(c.on_sent(t0, 1000), None);
        }
        let next = c.on_sent(t0, 1000).expect("empty after 20");
        assert_eq!(next - t0, Duration::from_millis(1));
        // Late by 5 ms: the 5 datagrams due meanwhile may go at once.
        let late = next + Duration::from_millis(4);
        for _ in 0..4 {
            assert_eq!(c.on_sent(late, 1000), None);
        }
        assert!(c.on_sent(late, 1000).is_some());
        assert!(Ceiling::new(None, 1000).is_none() && Ceiling::new(Some(0), 1000).is_none());
    }
}
