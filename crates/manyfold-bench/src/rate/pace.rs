//! When a `rate` sender sends and how the receiver measures the rate: the
//! sender's [`Schedule`] (as fast as the transport takes messages for a
//! while, or paced at an offered rate with each message due at its own
//! time) and the receiver's [`Meter`] (messages per second after a
//! warm-up).
//!
//! A paced sender sleeps until the next message is due and then sends
//! every message that is due. Linux wakes a sleeper up to its timer slack
//! (50 µs by default) late; [`precise_sleep`] sets this thread's slack to
//! 1 ns so that pacing at 10% of a million messages per second does not
//! add 50 µs to every message's latency. The one unsafe call is here.
#![allow(unsafe_code)]

use std::time::Duration;

use super::wire::{now_ns, MAX_MESSAGES};

/// No sleep shorter than this: the message is sent at once.
const MIN_SLEEP_NS: u64 = 5_000;

/// Calls between two clock reads of an unpaced loop ([`LoopClock`]).
pub const COARSE_EVERY: u32 = 64;

/// The clock of one sending or receiving loop. Paced runs stamp and time
/// every message, so it reads the clock at every call there; an unpaced
/// run only needs its first and last arrivals and its end, so it reads the
/// clock once every [`COARSE_EVERY`] calls. At millions of 32-byte
/// messages a second one read per message was a third of the sending
/// thread's time (RESULTS §32), a cost of the lab's and not of the
/// transport's (Aeron's samples read no clock per message). The error is
/// at most 63 messages' time, some microseconds in a run of seconds.
#[derive(Debug, Clone, Copy)]
pub struct LoopClock {
    every: u32,
    left: u32,
    last: u64,
}

impl LoopClock {
    /// Exact (every call reads the clock) or coarse.
    pub fn new(exact: bool) -> LoopClock {
        LoopClock { every: if exact { 1 } else { COARSE_EVERY }, left: 0, last: 0 }
    }

    /// Nanoseconds on the lab's clock, as of at most `every − 1` calls ago.
    pub fn now(&mut self) -> u64 {
        if self.left == 0 {
            self.last = now_ns();
            self.left = self.every;
        }
        self.left -= 1;
        self.last
    }
}

/// Asks the kernel to wake this thread's sleeps on time (timer slack 1 ns).
pub fn precise_sleep() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer and touches no memory of
    // ours; it only changes this thread's timer slack.
    let r = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    if r != 0 {
        eprintln!("note: PR_SET_TIMERSLACK: {}", std::io::Error::last_os_error());
    }
}

/// The times at which a sender's messages are due.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    t0: u64,
    /// Nanoseconds between messages; 0 = as fast as the transport takes them.
    period_ns: f64,
    /// Paced: how many messages; unpaced: the most it may send.
    count: u64,
    /// Unpaced: when sending stops.
    end_ns: u64,
}

impl Schedule {
    /// Starts now: `rate` messages per second (0: as fast as possible) for
    /// `secs` seconds.
    pub fn new(rate: f64, secs: f64) -> Schedule {
        let t0 = now_ns();
        let secs = secs.max(0.0);
        if rate > 0.0 {
            let count = ((rate * secs) as u64).clamp(1, MAX_MESSAGES - 1);
            Schedule { t0, period_ns: 1e9 / rate, count, end_ns: u64::MAX }
        } else {
            Schedule { t0, period_ns: 0.0, count: MAX_MESSAGES - 1, end_ns: t0 + (secs * 1e9) as u64 }
        }
    }

    /// Message `k`'s due time if it is due at `now` (a clock reading the
    /// caller took once for a whole batch); `None` if it is not due yet or
    /// the run is over. Unpaced, every message is due at `now`.
    pub fn due_at(&self, k: u64, now: u64) -> Option<u64> {
        if k >= self.count {
            return None;
        }
        if self.period_ns == 0.0 {
            return (now < self.end_ns).then_some(now);
        }
        let due = self.due_of(k);
        (due <= now).then_some(due)
    }

    /// When paced message `k` is due.
    fn due_of(&self, k: u64) -> u64 {
        self.t0 + (k as f64 * self.period_ns) as u64
    }

    /// Whether messages are due at their own times (not as fast as taken).
    pub fn is_paced(&self) -> bool {
        self.period_ns != 0.0
    }

    /// [`Schedule::wait`], with an unpaced run's clock read through
    /// `clock` (made with `LoopClock::new(self.is_paced())`).
    pub fn wait_with(&self, k: u64, clock: &mut LoopClock) -> Option<u64> {
        if self.is_paced() {
            return self.wait(k);
        }
        self.due_at(k, clock.now())
    }

    /// Waits until message `k` is due and returns its due time; `None`
    /// once the run is over.
    pub fn wait(&self, k: u64) -> Option<u64> {
        if k >= self.count {
            return None;
        }
        let now = now_ns();
        if self.period_ns == 0.0 {
            return (now < self.end_ns).then_some(now);
        }
        let due = self.due_of(k);
        if due > now + MIN_SLEEP_NS {
            std::thread::sleep(Duration::from_nanos(due - now));
        }
        Some(due)
    }
}

/// Messages per second at the receiver, counted from the end of a
/// warm-up (from the first arrival) to the last arrival.
#[derive(Debug, Clone, Copy)]
pub struct Meter {
    warmup_ns: u64,
    n: u64,
    first: Option<u64>,
    /// When the warm-up ended, and how many had arrived by then.
    start: Option<(u64, u64)>,
    last: u64,
}

impl Meter {
    pub fn new(warmup_secs: f64) -> Meter {
        Meter { warmup_ns: (warmup_secs.max(0.0) * 1e9) as u64, n: 0, first: None, start: None, last: 0 }
    }

    /// A message arrived at `now`.
    pub fn tick(&mut self, now: u64) {
        self.n += 1;
        let first = *self.first.get_or_insert(now);
        if self.start.is_none() && now >= first + self.warmup_ns {
            self.start = Some((now, self.n));
        }
        self.last = now;
    }

    /// Messages per second after the warm-up; over the whole run if it
    /// was shorter than the warm-up; NaN with fewer than two messages.
    pub fn rate(&self) -> f64 {
        let per_sec =
            |n: u64, from: u64| if self.last > from { n as f64 * 1e9 / (self.last - from) as f64 } else { f64::NAN };
        match (self.start, self.first) {
            (Some((t, n0)), _) if self.last > t => per_sec(self.n - n0, t),
            (_, Some(f)) => per_sec(self.n.saturating_sub(1), f),
            _ => f64::NAN,
        }
    }

    /// Seconds from the first arrival to the last.
    pub fn span_secs(&self) -> f64 {
        self.first.map_or(0.0, |f| (self.last - f) as f64 / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unpaced_loop_reads_the_clock_once_every_64_calls_and_a_paced_one_at_every_call() {
        let mut coarse = LoopClock::new(false);
        let first = coarse.now();
        std::thread::sleep(Duration::from_millis(2));
        for _ in 1..COARSE_EVERY {
            assert_eq!(coarse.now(), first, "read again within its 64 calls");
        }
        assert!(coarse.now() >= first + 2_000_000, "the 65th call reads the clock");
        let mut exact = LoopClock::new(true);
        let a = exact.now();
        std::thread::sleep(Duration::from_millis(2));
        assert!(exact.now() >= a + 2_000_000, "a paced loop's clock is read at every call");
        // An unpaced schedule takes its due time from the loop's clock.
        let s = Schedule::new(0.0, 10.0);
        let mut c = LoopClock::new(s.is_paced());
        let due = s.wait_with(0, &mut c).expect("due");
        assert_eq!(s.wait_with(1, &mut c), Some(due));
    }

    #[test]
    fn meter_counts_after_the_warm_up() {
        let mut m = Meter::new(1.0);
        // One message every ms for 3 s: 1,000 per second.
        for i in 0..=3000u64 {
            m.tick(5_000_000_000 + i * 1_000_000);
        }
        assert!((m.rate() - 1000.0).abs() < 1e-6, "{}", m.rate());
        assert!((m.span_secs() - 3.0).abs() < 1e-9);
        let mut short = Meter::new(10.0);
        short.tick(0);
        short.tick(500_000_000);
        assert!((short.rate() - 2.0).abs() < 1e-9, "shorter than the warm-up: the whole run");
        assert!(Meter::new(0.0).rate().is_nan());
    }

    #[test]
    fn paced_schedule_ends_after_its_count_and_spaces_messages() {
        let s = Schedule::new(1e6, 0.001);
        let (a, b) = (s.wait(0).unwrap(), s.wait(999).unwrap());
        assert_eq!(b - a, 999_000);
        assert!(s.wait(1000).is_none());
        let unpaced = Schedule::new(0.0, 0.0);
        assert!(unpaced.wait(0).is_none(), "a run of no time sends nothing");
    }

    #[test]
    fn a_batch_takes_only_the_messages_due_at_its_one_clock_reading() {
        let s = Schedule::new(1e6, 1.0);
        let now = s.t0 + 2_500;
        assert_eq!(s.due_at(2, now), Some(s.t0 + 2_000));
        assert_eq!(s.due_at(3, now), None, "due 500 ns after the reading");
        assert_eq!(s.due_at(s.count, u64::MAX), None, "past the count");
        let unpaced = Schedule::new(0.0, 1.0);
        assert_eq!(unpaced.due_at(7, unpaced.t0 + 1), Some(unpaced.t0 + 1), "due at the reading");
        assert_eq!(unpaced.due_at(7, unpaced.end_ns), None, "the run is over");
    }
}
