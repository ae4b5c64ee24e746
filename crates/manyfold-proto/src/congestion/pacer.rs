//! Pacing (spec §9.3): a token bucket that spreads a window's packets over
//! the round trip instead of sending them in one burst. Rate = gain ×
//! cwnd / SRTT; the bucket holds max(10 datagrams, 2 ms at that rate), so a
//! driver whose timers fire about every millisecond still fills the rate.

use std::time::{Duration, Instant};

/// Least burst, in datagrams (as quinn and Linux's initial burst).
const MIN_BURST_PACKETS: u64 = 10;
/// Burst allowance in time at the pacing rate: twice a 1 ms timer tick.
const BURST_INTERVAL: Duration = Duration::from_millis(2);

#[derive(Debug, Clone, Default)]
pub(crate) struct Pacer {
    tokens: f64,
    last: Option<Instant>,
}

impl Pacer {
    /// When a packet of `size` bytes may go: `None` for now, or the instant
    /// the bucket will hold enough. `rate` is in bytes per second.
    pub fn delay(&mut self, now: Instant, rate: f64, mss: u64, size: u64) -> Option<Instant> {
        if !rate.is_finite() || rate <= 0.0 {
            return None;
        }
        let capacity = (MIN_BURST_PACKETS * mss) as f64;
        let capacity = capacity.max(rate * BURST_INTERVAL.as_secs_f64());
        let elapsed = self.last.map_or(Duration::MAX, |l| now.saturating_duration_since(l));
        self.tokens = (self.tokens + rate * elapsed.as_secs_f64().min(1.0)).min(capacity);
        if self.last.is_none() {
            self.tokens = capacity;
        }
        self.last = Some(now);
        // A packet larger than the bucket (one resent whole after the path
        // narrowed, spec §3.7) goes once the bucket is full; the debt it
        // leaves holds back what follows.
        let need = (size as f64).min(capacity);
        if self.tokens >= need {
            return None;
        }
        // Rounded up to whole microseconds, at least one, so that the
        // bucket holds enough when the timer fires (no zero-length waits).
        let micros = ((need - self.tokens) / rate * 1e6).ceil().max(1.0);
        Some(now + Duration::from_micros(micros as u64))
    }

    /// A paced packet of `size` bytes left.
    pub fn on_sent(&mut self, size: u64) {
        self.tokens -= size as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_packets_are_spaced_at_the_rate() {
        let t0 = Instant::now();
        let mut p = Pacer::default();
        let rate = 1_000_000.0; // 1 MB/s: 1000-byte packets 1 ms apart
        for _ in 0..10 {
            assert_eq!(p.delay(t0, rate, 1000, 1000), None);
            p.on_sent(1000);
        }
        let next = p.delay(t0, rate, 1000, 1000).expect("bucket empty");
        assert_eq!(next - t0, Duration::from_millis(1));
        assert_eq!(p.delay(next, rate, 1000, 1000), None);
    }

    #[test]
    fn a_packet_larger_than_the_bucket_goes_once_it_is_full_and_its_debt_holds_the_next() {
        let t0 = Instant::now();
        let mut p = Pacer::default();
        let rate = 1_000_000.0; // the bucket holds 10 packets of 1000 bytes
        assert_eq!(p.delay(t0, rate, 1000, 1000), None);
        p.on_sent(1000);
        // 64,000 bytes never fit a 10,000-byte bucket: it waits only until
        // the bucket is full again.
        let full = p.delay(t0, rate, 1000, 64_000).expect("the bucket is not full");
        assert_eq!(full - t0, Duration::from_millis(1));
        assert_eq!(p.delay(full, rate, 1000, 64_000), None);
        p.on_sent(64_000);
        // 54,000 bytes of debt: the next packet waits 55 ms.
        let next = p.delay(full, rate, 1000, 1000).expect("in debt");
        assert_eq!(next - full, Duration::from_millis(55));
    }

    #[test]
    fn no_rate_means_no_pacing() {
        let mut p = Pacer::default();
        assert_eq!(p.delay(Instant::now(), 0.0, 1000, 1000), None);
    }
}
