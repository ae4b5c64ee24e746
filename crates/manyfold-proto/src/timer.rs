//! A table of deadlines indexed by an enum; the next deadline is its
//! minimum (STYLE §2). Connections (spec §4.7) and both multicast engines
//! (spec §16.3–§16.5) keep their timers in one, so everything that can
//! wake an engine is one enum, handled by one `match`.

use std::time::Instant;

/// An enum of timers: `ALL` in the order their expiries are handled.
pub(crate) trait TimerKind: Copy + 'static {
    /// One slot per timer, e.g. `[u64; 10]` (see [`Timers`]).
    type Slots: Default + Clone + std::fmt::Debug + AsRef<[u64]> + AsMut<[u64]>;
    const ALL: &'static [Self];
    /// This timer's slot, below `ALL.len()`.
    fn index(self) -> usize;
}

/// The deadlines, each kept in 8 bytes instead of an `Option<Instant>`'s
/// 16 (a connection has 14 timers, and an idle one's memory counts, spec
/// §15.3): 0 for a timer not set, else 1 + its nanoseconds after `epoch`,
/// the earliest deadline ever set (moved earlier, and the slots with it,
/// when an earlier one comes).
#[derive(Debug, Clone)]
pub(crate) struct Timers<K: TimerKind> {
    epoch: Option<Instant>,
    at: K::Slots,
}

impl<K: TimerKind> Default for Timers<K> {
    fn default() -> Self {
        Timers { epoch: None, at: K::Slots::default() }
    }
}

impl<K: TimerKind> Timers<K> {
    pub fn set(&mut self, t: K, when: Instant) {
        let epoch = match self.epoch {
            Some(e) if e <= when => e,
            Some(e) => {
                // An earlier deadline than any before: every slot moves.
                let shift = (e - when).as_nanos() as u64;
                for v in self.at.as_mut().iter_mut().filter(|v| **v != 0) {
                    *v = v.saturating_add(shift);
                }
                self.epoch = Some(when);
                when
            }
            None => {
                self.epoch = Some(when);
                when
            }
        };
        let nanos = u64::try_from((when - epoch).as_nanos()).unwrap_or(u64::MAX - 1);
        self.at.as_mut()[t.index()] = nanos.saturating_add(1);
    }

    /// Sets `t` to `when`, or cancels it for `None`.
    pub fn set_or_cancel(&mut self, t: K, when: Option<Instant>) {
        match when {
            Some(w) => self.set(t, w),
            None => self.cancel(t),
        }
    }

    pub fn cancel(&mut self, t: K) {
        self.at.as_mut()[t.index()] = 0;
    }

    /// Cancels `t`, returning when it was due.
    pub fn take(&mut self, t: K) -> Option<Instant> {
        let at = self.get(t);
        self.cancel(t);
        at
    }

    pub fn get(&self, t: K) -> Option<Instant> {
        let v = self.at.as_ref()[t.index()];
        let epoch = self.epoch?;
        (v != 0).then(|| epoch + std::time::Duration::from_nanos(v - 1))
    }

    pub fn is_set(&self, t: K) -> bool {
        self.at.as_ref()[t.index()] != 0
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
        type Slots = [u64; 3];
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

    #[test]
    fn a_deadline_earlier_than_any_before_moves_the_others_with_it() {
        let now = Instant::now() + Duration::from_secs(100);
        let mut t = Timers::<T>::default();
        t.set(T::A, now + Duration::from_secs(10));
        t.set(T::B, now + Duration::from_nanos(7));
        t.set(T::C, now - Duration::from_secs(3));
        assert_eq!(t.get(T::A), Some(now + Duration::from_secs(10)), "kept to the nanosecond");
        assert_eq!(t.get(T::B), Some(now + Duration::from_nanos(7)));
        assert_eq!(t.next(), Some(now - Duration::from_secs(3)));
        t.cancel(T::C);
        assert_eq!(t.next(), Some(now + Duration::from_nanos(7)));
        assert!(std::mem::size_of::<Timers<T>>() <= 16 + 3 * 8);
    }
}
