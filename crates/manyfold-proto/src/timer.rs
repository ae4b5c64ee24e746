//! A table of deadlines indexed by an enum; the next deadline is its
//! minimum (STYLE §2). Connections (spec §4.7) and both multicast engines
//! (spec §16.3–§16.5) keep their timers in one, so everything that can
//! wake an engine is one enum, handled by one `match`.

use std::time::Instant;

/// An enum of timers: `ALL` in the order their expiries are handled.
pub(crate) trait TimerKind: Copy + 'static {
    /// One slot per timer, e.g. `[Option<Instant>; 10]`.
    type Slots: Default + Clone + std::fmt::Debug + AsRef<[Option<Instant>]> + AsMut<[Option<Instant>]>;
    const ALL: &'static [Self];
    /// This timer's slot, below `ALL.len()`.
    fn index(self) -> usize;
}

#[derive(Debug, Clone)]
pub(crate) struct Timers<K: TimerKind> {
    at: K::Slots,
}

impl<K: TimerKind> Default for Timers<K> {
    fn default() -> Self {
        Timers { at: K::Slots::default() }
    }
}

impl<K: TimerKind> Timers<K> {
    pub fn set(&mut self, t: K, when: Instant) {
        self.at.as_mut()[t.index()] = Some(when);
    }

    /// Sets `t` to `when`, or cancels it for `None`.
    pub fn set_or_cancel(&mut self, t: K, when: Option<Instant>) {
        self.at.as_mut()[t.index()] = when;
    }

    pub fn cancel(&mut self, t: K) {
        self.at.as_mut()[t.index()] = None;
    }

    /// Cancels `t`, returning when it was due.
    pub fn take(&mut self, t: K) -> Option<Instant> {
        self.at.as_mut()[t.index()].take()
    }

    pub fn get(&self, t: K) -> Option<Instant> {
        self.at.as_ref()[t.index()]
    }

    pub fn is_set(&self, t: K) -> bool {
        self.get(t).is_some()
    }

    /// Whether `t` is set and due at `now`.
    pub fn expired(&self, t: K, now: Instant) -> bool {
        self.get(t).is_some_and(|at| at <= now)
    }

    pub fn clear_all(&mut self) {
        self.at = K::Slots::default();
    }

    /// The earliest deadline of all.
    pub fn next(&self) -> Option<Instant> {
        self.next_of(|_| true)
    }

    /// The earliest deadline among the timers `wakes` selects (an engine
    /// whose state makes some timers moot, e.g. another stage's).
    pub fn next_of(&self, mut wakes: impl FnMut(K) -> bool) -> Option<Instant> {
        K::ALL.iter().filter(|&&k| wakes(k)).filter_map(|&k| self.get(k)).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum T {
        A,
        B,
        C,
    }

    impl TimerKind for T {
        type Slots = [Option<Instant>; 3];
        const ALL: &'static [T] = &[T::A, T::B, T::C];
        fn index(self) -> usize {
            self as usize
        }
    }

    #[test]
    fn the_next_deadline_is_the_minimum_of_the_selected_timers() {
        let now = Instant::now();
        let mut t = Timers::<T>::default();
        assert_eq!(t.next(), None);
        t.set(T::A, now + Duration::from_secs(3));
        t.set(T::C, now + Duration::from_secs(1));
        assert_eq!(t.next(), Some(now + Duration::from_secs(1)));
        assert_eq!(t.next_of(|k| k != T::C), Some(now + Duration::from_secs(3)));
        assert!(t.expired(T::C, now + Duration::from_secs(1)) && !t.expired(T::A, now + Duration::from_secs(1)));
        assert_eq!(t.take(T::C), Some(now + Duration::from_secs(1)));
        assert!(!t.is_set(T::C) && !t.expired(T::B, now));
        t.set_or_cancel(T::A, None);
        assert_eq!(t.next(), None);
        t.set(T::B, now);
        t.clear_all();
        assert_eq!(t.next(), None);
    }
}
