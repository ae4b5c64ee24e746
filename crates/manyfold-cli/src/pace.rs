//! `--rate`: a cap on how fast a command hands data to its connections
//! (issue 23 item 3), done here by pacing reads of the source, since the
//! engine has no pacing cap of its own. Bytes are released so that, from
//! the first, no more than RATE × elapsed have gone, in pieces of at most
//! [`Pacer::piece`] (about 50 ms worth), so the cap holds over any second.
//! [`Allowance`] keeps the same cap by counting instead of waiting, for a
//! loop that must not block: `fetch` asks for segments no faster than it.

use std::time::Duration;

use clap::Args;
use tokio::time::Instant;

/// `--rate`, as `send`, `serve` and `ftp` take it.
#[derive(Args, Debug, Clone, Default)]
pub struct RateArgs {
    /// Cap the rate: bytes per second (10MB, 1.5MiB/s, 500k) or bits per
    /// second (80Mbit, 1Gbit/s). Without it, as fast as the network and
    /// the peers take it.
    // allow_hyphen_values: `--rate -5MB` is refused by rate_arg, saying
    // why, not by clap as an unknown argument (-5MB is no plain number).
    #[arg(long, value_name = "RATE", value_parser = crate::size::rate_arg, allow_hyphen_values = true)]
    pub rate: Option<u64>,
}

/// A [`Pacer`] shared by the transfers of one process (the cap is on
/// their sum).
pub type SharedPacer = std::sync::Arc<tokio::sync::Mutex<Pacer>>;

pub fn shared(rate: Option<u64>) -> SharedPacer {
    std::sync::Arc::new(tokio::sync::Mutex::new(Pacer::new(rate)))
}

/// Paces a stream of bytes to a rate, or lets everything through.
#[derive(Debug)]
pub struct Pacer {
    /// Bytes per second; `None`: no cap.
    rate: Option<u64>,
    start: Option<Instant>,
    released: u64,
}

impl Pacer {
    pub fn new(rate: Option<u64>) -> Pacer {
        Pacer { rate: rate.filter(|&r| r > 0), start: None, released: 0 }
    }

    /// The largest piece worth handing over at once: 50 ms at the rate
    /// (at least 1 KiB), or `max` without a cap.
    pub fn piece(&self, max: usize) -> usize {
        match self.rate {
            Some(rate) => ((rate / 20) as usize).clamp(1024, max.max(1024)).min(max),
            None => max,
        }
    }

    /// Waits until `bytes` more may go without passing the rate.
    pub async fn wait(&mut self, bytes: usize) {
        let Some(rate) = self.rate else { return };
        let start = *self.start.get_or_insert_with(Instant::now);
        // The first piece goes at once: the cap is on the average from there.
        let due = start + Duration::from_secs_f64(self.released as f64 / rate as f64);
        self.released += bytes as u64;
        tokio::time::sleep_until(due).await;
    }
}

/// The cap of a [`Pacer`] as a count: how many pieces may go now, from
/// the first piece's start (which goes at once) — for a caller that
/// decides what to send in an event loop and must not wait in it.
#[derive(Debug)]
pub struct Allowance {
    rate: Option<u64>,
    start: Option<Instant>,
    given: u64,
}

impl Allowance {
    pub fn new(rate: Option<u64>) -> Allowance {
        Allowance { rate: rate.filter(|&r| r > 0), start: None, given: 0 }
    }

    /// How many more pieces of `piece` bytes may go at `now` (all of them
    /// without a cap): piece k is due once RATE × elapsed reaches the
    /// k pieces before it.
    pub fn pieces(&mut self, now: Instant, piece: u64) -> usize {
        let Some(rate) = self.rate else { return usize::MAX };
        let start = *self.start.get_or_insert(now);
        let may = (now - start).as_secs_f64() * rate as f64;
        if (self.given as f64) > may {
            return 0;
        }
        ((may - self.given as f64) / piece.max(1) as f64) as usize + 1
    }

    /// Counts `bytes` as gone.
    pub fn take(&mut self, bytes: u64) {
        self.given += bytes;
    }

    /// When the next piece is due; `None` without a cap or before the first.
    pub fn next_due(&self) -> Option<Instant> {
        let (rate, start) = (self.rate?, self.start?);
        Some(start + Duration::from_secs_f64(self.given as f64 / rate as f64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_allowance_grants_a_piece_per_piece_time_from_the_first() {
        let t0 = Instant::now();
        let mut a = Allowance::new(Some(1_000_000));
        // The first piece at once; the next 100 kB after 100 ms.
        assert_eq!(a.pieces(t0, 100_000), 1);
        a.take(100_000);
        assert_eq!(a.pieces(t0 + Duration::from_millis(50), 100_000), 0);
        assert_eq!(a.next_due(), Some(t0 + Duration::from_millis(100)));
        assert_eq!(a.pieces(t0 + Duration::from_millis(100), 100_000), 1);
        // Late by 250 ms: what was due since then may go together.
        assert_eq!(a.pieces(t0 + Duration::from_millis(350), 100_000), 3);
        let mut free = Allowance::new(None);
        assert_eq!(free.pieces(t0, 1), usize::MAX);
        assert_eq!(free.next_due(), None);
    }

    #[tokio::test]
    async fn a_capped_stream_takes_its_size_over_the_rate() {
        let mut pacer = Pacer::new(Some(1_000_000));
        let begin = Instant::now();
        let piece = pacer.piece(256 * 1024);
        assert_eq!(piece, 50_000);
        for _ in 0..6 {
            pacer.wait(piece).await; // 300 kB at 1 MB/s
        }
        let took = begin.elapsed();
        // The first piece goes at once, the sixth at 250 ms.
        assert!(took >= Duration::from_millis(250) && took < Duration::from_secs(2), "{took:?}");
    }

    #[tokio::test]
    async fn without_a_cap_nothing_waits() {
        let mut pacer = Pacer::new(None);
        let begin = Instant::now();
        pacer.wait(1 << 30).await;
        assert!(begin.elapsed() < Duration::from_millis(100));
        assert_eq!(pacer.piece(4096), 4096);
    }
}
