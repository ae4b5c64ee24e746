//! Virtual time: the simulator's clock and its event queue (spec §11).
//!
//! Nothing here reads the real clock after construction. A [`Clock`] takes
//! one `Instant::now()` as its origin and then only moves forward by the
//! deadlines of the events it is told to process. The [`EventQueue`] orders
//! events by `(time, sequence number)`: two events at the same instant come
//! out in the order they were pushed, so a run is a pure function of its seed
//! and its inputs.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

/// The virtual clock. `now` never goes backwards.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: Instant,
    now: Instant,
}

impl Clock {
    /// A clock whose origin is the real `Instant::now()`, read once.
    pub fn new() -> Self {
        Clock::starting_at(Instant::now())
    }

    /// A clock starting at `origin`.
    pub fn starting_at(origin: Instant) -> Self {
        Clock { origin, now: origin }
    }

    pub fn now(&self) -> Instant {
        self.now
    }

    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// Virtual time since the origin.
    pub fn elapsed(&self) -> Duration {
        self.now - self.origin
    }

    /// Moves the clock to `t`.
    ///
    /// # Panics
    /// If `t` is earlier than now: the simulator never travels back.
    pub fn advance_to(&mut self, t: Instant) {
        assert!(t >= self.now, "virtual time went backwards: {:?} -> {:?}", self.elapsed(), t - self.origin);
        self.now = t;
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

/// A min-queue of events by `(time, insertion order)`.
#[derive(Debug)]
pub struct EventQueue<T> {
    heap: BinaryHeap<Entry<T>>,
    next_seq: u64,
}

#[derive(Debug)]
struct Entry<T> {
    at: Instant,
    seq: u64,
    item: T,
}

// BinaryHeap is a max-heap: reverse the order so the earliest (then the
// first pushed) entry is on top. The item takes no part in the order.
impl<T> Ord for Entry<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl<T> Eq for Entry<T> {}

impl<T> EventQueue<T> {
    pub fn new() -> Self {
        EventQueue { heap: BinaryHeap::new(), next_seq: 0 }
    }

    pub fn push(&mut self, at: Instant, item: T) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Entry { at, seq, item });
    }

    /// Time of the earliest event, if any.
    pub fn peek_time(&self) -> Option<Instant> {
        self.heap.peek().map(|e| e.at)
    }

    /// Removes and returns the earliest event.
    pub fn pop(&mut self) -> Option<(Instant, T)> {
        self.heap.pop().map(|e| (e.at, e.item))
    }

    /// Removes and returns the earliest event if it is due at or before `t`.
    pub fn pop_due(&mut self, t: Instant) -> Option<(Instant, T)> {
        if self.peek_time()? <= t {
            self.pop()
        } else {
            None
        }
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

impl<T> Default for EventQueue<T> {
    fn default() -> Self {
        EventQueue::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_orders_by_time_then_insertion() {
        let t0 = Instant::now();
        let mut q = EventQueue::new();
        q.push(t0 + Duration::from_millis(5), "late");
        q.push(t0, "first");
        q.push(t0 + Duration::from_millis(1), "middle-a");
        q.push(t0, "second");
        q.push(t0 + Duration::from_millis(1), "middle-b");
        let order: Vec<_> = std::iter::from_fn(|| q.pop().map(|(_, x)| x)).collect();
        assert_eq!(order, ["first", "second", "middle-a", "middle-b", "late"]);
    }

    #[test]
    fn pop_due_stops_at_the_deadline() {
        let t0 = Instant::now();
        let mut q = EventQueue::new();
        q.push(t0 + Duration::from_millis(2), 2);
        q.push(t0 + Duration::from_millis(1), 1);
        assert_eq!(q.pop_due(t0), None);
        assert_eq!(q.pop_due(t0 + Duration::from_millis(1)).map(|x| x.1), Some(1));
        assert_eq!(q.pop_due(t0 + Duration::from_millis(1)), None);
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn clock_advances_and_reports_elapsed() {
        let mut c = Clock::new();
        let t = c.now() + Duration::from_secs(3);
        c.advance_to(t);
        assert_eq!(c.elapsed(), Duration::from_secs(3));
    }

    #[test]
    #[should_panic(expected = "backwards")]
    fn clock_refuses_to_go_back() {
        let mut c = Clock::new();
        c.advance_to(c.now() + Duration::from_secs(1));
        c.advance_to(c.origin());
    }
}
