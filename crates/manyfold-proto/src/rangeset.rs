//! Sets of half-open `u64` ranges: which sequence numbers above the
//! cumulative ack have arrived (spec §5.2, the source of SACK blocks).

use std::collections::BTreeMap;
use std::ops::Range;

/// Disjoint, non-adjacent ranges kept in a map from start to end.
#[derive(Debug, Clone, Default)]
pub(crate) struct RangeSet {
    map: BTreeMap<u64, u64>,
}

impl RangeSet {
    pub fn new() -> Self {
        RangeSet { map: BTreeMap::new() }
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    #[cfg(test)]
    pub fn contains(&self, x: u64) -> bool {
        self.map.range(..=x).next_back().is_some_and(|(_, &end)| x < end)
    }

    /// Adds `r`, merging with overlapping or adjacent ranges. Returns the
    /// merged range that now contains `r`.
    pub fn insert(&mut self, r: Range<u64>) -> Range<u64> {
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

    /// Removes everything below `x`.
    pub fn remove_below(&mut self, x: u64) {
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

    /// The lowest range, if any.
    #[cfg(test)]
    pub fn first(&self) -> Option<Range<u64>> {
        self.map.iter().next().map(|(&s, &e)| s..e)
    }

    /// Ranges from the highest down.
    pub fn iter_rev(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.map.iter().rev().map(|(&s, &e)| s..e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn adjacent_ranges_merge() {
        let mut s = RangeSet::new();
        s.insert(5..7);
        s.insert(9..10);
        assert_eq!(s.insert(7..9), 5..10);
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn remove_below_splits_a_range() {
        let mut s = RangeSet::new();
        s.insert(1..4);
        s.insert(6..9);
        s.remove_below(7);
        assert_eq!(s.first(), Some(7..9));
        assert_eq!(s.len(), 1);
    }

    proptest! {
        #[test]
        fn matches_a_naive_set(ops in proptest::collection::vec((0u64..200, 0u64..20, any::<bool>()), 1..60)) {
            let mut s = RangeSet::new();
            let mut naive = std::collections::BTreeSet::new();
            for (start, len, cut) in ops {
                if cut {
                    s.remove_below(start);
                    naive.retain(|&x| x >= start);
                } else {
                    s.insert(start..start + len);
                    naive.extend(start..start + len);
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
