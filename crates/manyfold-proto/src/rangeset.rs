//! Sets of half-open ranges of `u64` or `u32`: which sequence numbers
//! above the cumulative ack have arrived (spec §5.2, the source of SACK
//! blocks), and which gaps a multicast receiver has yet to report (spec
//! §16.4).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::Range;

/// A sequence-number type a [`RangeSet`] holds.
pub(crate) trait Point: Copy + Ord + Debug {
    /// `self + 1`, saturating at the maximum.
    fn saturating_succ(self) -> Self;
}

impl Point for u64 {
    fn saturating_succ(self) -> Self {
        self.saturating_add(1)
    }
}

impl Point for u32 {
    fn saturating_succ(self) -> Self {
        self.saturating_add(1)
    }
}

/// Disjoint, non-adjacent ranges kept in a map from start to end.
#[derive(Debug, Clone)]
pub(crate) struct RangeSet<T: Point = u64> {
    map: BTreeMap<T, T>,
}

impl<T: Point> Default for RangeSet<T> {
    fn default() -> Self {
        RangeSet { map: BTreeMap::new() }
    }
}

impl<T: Point> RangeSet<T> {
    pub fn new() -> Self {
        RangeSet { map: BTreeMap::new() }
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Number of disjoint ranges.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn contains(&self, x: T) -> bool {
        self.map.range(..=x).next_back().is_some_and(|(_, &end)| x < end)
    }

    /// Adds `r`, merging with overlapping or adjacent ranges. Returns the
    /// merged range that now contains `r`.
    pub fn insert(&mut self, r: Range<T>) -> Range<T> {
        if r.is_empty() {
            return r;
        }
        let (mut start, mut end) = (r.start, r.end);
        // Merge with a range that starts before and reaches us.
        if let Some((&s, &e)) = self.map.range(..=start).next_back() {
            if e >= start {
                start = s;
                end = end.max(e);
                self.map.remove(&s);
            }
        }
        // Swallow every range starting inside [start, end].
        while let Some((&s, &e)) = self.map.range(start..=end).next() {
            end = end.max(e);
            self.map.remove(&s);
        }
        self.map.insert(start, end);
        start..end
    }

    /// Removes `r`, splitting a range that straddles either end. Costs
    /// O(log n) plus the number of ranges inside `r`.
    pub fn remove(&mut self, r: Range<T>) {
        if r.is_empty() {
            return;
        }
        // A range starting before `r` and reaching into it keeps its head
        // (and its tail, if it reaches beyond).
        if let Some((&s, &e)) = self.map.range(..r.start).next_back() {
            if e > r.start {
                self.map.insert(s, r.start);
                if e > r.end {
                    self.map.insert(r.end, e);
                    return;
                }
            }
        }
        while let Some((&s, &e)) = self.map.range(r.start..r.end).next() {
            self.map.remove(&s);
            if e > r.end {
                self.map.insert(r.end, e);
                break;
            }
        }
    }

    /// Removes and returns the lowest range.
    pub fn pop_first(&mut self) -> Option<Range<T>> {
        self.map.pop_first().map(|(s, e)| s..e)
    }

    /// Ranges from the lowest up.
    pub fn iter(&self) -> impl Iterator<Item = Range<T>> + '_ {
        self.map.iter().map(|(&s, &e)| s..e)
    }

    /// Removes everything below `x`.
    pub fn remove_below(&mut self, x: T) {
        while let Some((&s, &e)) = self.map.iter().next() {
            if s >= x {
                break;
            }
            self.map.remove(&s);
            if e > x {
                self.map.insert(x, e);
                break;
            }
        }
    }

    /// The parts of `r` not in the set, in order. Costs O(log n) plus the
    /// number of ranges inside `r`, however long `r` is.
    pub fn gaps(&self, r: Range<T>) -> impl Iterator<Item = Range<T>> + '_ {
        let end = r.end;
        // The first point at or after r.start that no range covers.
        let mut at = r.start;
        if let Some((_, &e)) = self.map.range(..=r.start).next_back() {
            at = at.max(e);
        }
        let mut inside = self.map.range(r.start.saturating_succ()..r.end.max(r.start.saturating_succ()));
        std::iter::from_fn(move || {
            while at < end {
                match inside.next() {
                    Some((&s, &e)) if s > at => {
                        let gap = at..s.min(end);
                        at = e;
                        return Some(gap);
                    }
                    Some((_, &e)) => at = at.max(e),
                    None => {
                        let gap = at..end;
                        at = end;
                        return Some(gap);
                    }
                }
            }
            None
        })
    }

    /// The lowest range, if any.
    pub fn first(&self) -> Option<Range<T>> {
        self.map.iter().next().map(|(&s, &e)| s..e)
    }

    /// Ranges from the highest down.
    pub fn iter_rev(&self) -> impl Iterator<Item = Range<T>> + '_ {
        self.map.iter().rev().map(|(&s, &e)| s..e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_are_the_uncovered_parts_of_a_range() {
        let mut s = RangeSet::<u64>::new();
        s.insert(10..20);
        s.insert(30..40);
        s.insert(50..60);
        let g = |a, b| s.gaps(a..b).collect::<Vec<_>>();
        assert_eq!(g(0, 100), vec![0..10, 20..30, 40..50, 60..100]);
        assert_eq!(g(15, 35), vec![20..30]);
        assert_eq!(g(10, 20), Vec::<Range<u64>>::new());
        assert_eq!(g(12, 18), Vec::<Range<u64>>::new());
        assert_eq!(g(20, 30), vec![20..30]);
        assert_eq!(g(35, 55), vec![40..50]);
        assert_eq!(g(5, 5), Vec::<Range<u64>>::new());
        assert_eq!(RangeSet::<u64>::new().gaps(3..7).collect::<Vec<_>>(), vec![3..7]);
        // Against a brute-force check over many sets and ranges.
        let mut seed = 7u64;
        for _ in 0..300 {
            let mut set = RangeSet::<u64>::new();
            let mut bits = [false; 80];
            for _ in 0..6 {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let a = (seed >> 33) % 60;
                let b = a + (seed >> 20) % 8;
                set.insert(a..b);
                bits[a as usize..b as usize].iter_mut().for_each(|x| *x = true);
            }
            let (a, b) = ((seed >> 40) % 80, (seed >> 50) % 81);
            let got: Vec<u64> = set.gaps(a..b).flatten().collect();
            let want: Vec<u64> = (a..b).filter(|&x| !bits[x as usize]).collect();
            assert_eq!(got, want, "{a}..{b}");
        }
    }
    use proptest::prelude::*;

    #[test]
    fn adjacent_ranges_merge() {
        let mut s = RangeSet::<u64>::new();
        s.insert(5..7);
        s.insert(9..10);
        assert_eq!(s.insert(7..9), 5..10);
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn remove_below_splits_a_range() {
        let mut s = RangeSet::<u64>::new();
        s.insert(1..4);
        s.insert(6..9);
        s.remove_below(7);
        assert_eq!(s.first(), Some(7..9));
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn remove_splits_trims_and_drops_ranges() {
        let mut s = RangeSet::<u32>::new();
        s.insert(3..7);
        s.insert(9..12);
        s.remove(4..10);
        assert_eq!(s.iter().collect::<Vec<_>>(), [3..4, 10..12]);
        s.insert(14..20);
        s.remove(16..17);
        assert_eq!(s.iter().collect::<Vec<_>>(), [3..4, 10..12, 14..16, 17..20]);
        s.remove(0..100);
        assert!(s.is_empty());
    }

    proptest! {
        #[test]
        fn matches_a_naive_set(ops in proptest::collection::vec((0u64..200, 0u64..20, 0u8..3), 1..60)) {
            let mut s = RangeSet::<u64>::new();
            let mut naive = std::collections::BTreeSet::new();
            for (start, len, op) in ops {
                match op {
                    0 => {
                        s.remove_below(start);
                        naive.retain(|&x| x >= start);
                    }
                    1 => {
                        s.remove(start..start + len);
                        naive.retain(|&x| !(start..start + len).contains(&x));
                    }
                    _ => {
                        s.insert(start..start + len);
                        naive.extend(start..start + len);
                    }
                }
                for x in 0..230 {
                    prop_assert_eq!(s.contains(x), naive.contains(&x), "x={}", x);
                }
                // Disjoint and non-adjacent.
                let v: Vec<_> = s.iter_rev().collect();
                for w in v.windows(2) {
                    prop_assert!(w[1].end < w[0].start);
                }
            }
        }
    }
}
