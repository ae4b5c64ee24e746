//! One bit per packet (spec §16.8): which sequence numbers a receiver holds,
//! or which losses the sender has already counted. Fixed cost per packet,
//! whatever the loss pattern, with a configured ceiling.

use std::ops::Range;

#[derive(Debug, Clone, Default)]
pub(crate) struct Bitmap {
    words: Vec<u64>,
    /// Bits set.
    ones: u64,
    /// Highest index + 1 this map may hold.
    limit: u32,
}

impl Bitmap {
    pub fn new(limit: u32) -> Self {
        Bitmap { words: Vec::new(), ones: 0, limit }
    }

    pub fn ones(&self) -> u64 {
        self.ones
    }

    pub fn get(&self, i: u32) -> bool {
        self.words.get((i / 64) as usize).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// Sets bit `i`; returns whether it was clear. Indices at or beyond the
    /// limit are refused (`None`).
    pub fn set(&mut self, i: u32) -> Option<bool> {
        if i >= self.limit {
            return None;
        }
        let w = (i / 64) as usize;
        if w >= self.words.len() {
            // Grow by doubling, not per packet.
            let want = (w + 1).max(self.words.len() * 2).min(self.limit.div_ceil(64) as usize);
            self.words.resize(want, 0);
        }
        let bit = 1u64 << (i % 64);
        let was_clear = self.words[w] & bit == 0;
        self.words[w] |= bit;
        self.ones += u64::from(was_clear);
        Some(was_clear)
    }

    /// The clear runs inside `within`, in order.
    pub fn gaps(&self, within: Range<u32>) -> impl Iterator<Item = Range<u32>> + '_ {
        let mut at = within.start;
        let end = within.end;
        std::iter::from_fn(move || {
            let start = self.next(at, end, false)?;
            let stop = self.next(start, end, true).unwrap_or(end);
            at = stop;
            Some(start..stop)
        })
    }

    /// Clear bits inside `within` that are below the limit.
    pub fn count_clear_upto(&self, within: Range<u32>) -> u64 {
        self.count_clear(within.start..within.end.min(self.limit))
    }

    /// Clear bits inside `within`.
    pub fn count_clear(&self, within: Range<u32>) -> u64 {
        self.gaps(within).map(|r| u64::from(r.end - r.start)).sum()
    }

    /// The first index in `[from, end)` whose bit equals `set`.
    fn next(&self, from: u32, end: u32, set: bool) -> Option<u32> {
        // Beyond the stored words every bit is clear: answered at once, not
        // word by word (a session announcing 2^32 packets made each repair
        // request scan 64 Mi empty words; found by fuzzing).
        let stored = u32::try_from(self.words.len() * 64).unwrap_or(u32::MAX);
        let mut i = from;
        while i < end {
            if i >= stored {
                return (!set).then_some(i);
            }
            let w = (i / 64) as usize;
            let word = self.words.get(w).copied().unwrap_or(0);
            let word = if set { word } else { !word };
            let masked = word & (!0u64 << (i % 64));
            if masked != 0 {
                let found = (w as u32) * 64 + masked.trailing_zeros();
                return (found < end).then_some(found);
            }
            i = (w as u32 + 1).saturating_mul(64);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_are_the_clear_runs_across_word_boundaries() {
        let mut b = Bitmap::new(1000);
        for i in (0..300).filter(|i| !(60..130).contains(i) && *i != 200) {
            assert_eq!(b.set(i), Some(true));
        }
        assert_eq!(b.set(5), Some(false));
        assert_eq!(b.gaps(0..300).collect::<Vec<_>>(), [60..130, 200..201]);
        assert_eq!(b.gaps(0..310).collect::<Vec<_>>(), [60..130, 200..201, 300..310]);
        assert_eq!(b.count_clear(100..250), 31);
        assert_eq!(b.ones(), 229);
        assert!(b.get(59) && !b.get(60));
    }

    #[test]
    fn gaps_past_the_stored_words_cost_nothing_however_far_they_reach() {
        let mut b = Bitmap::new(1 << 26);
        b.set(3);
        // One word stored; the rest of 2^32 is one clear run, found at once.
        assert_eq!(b.gaps(0..u32::MAX).collect::<Vec<_>>(), [0..3, 4..u32::MAX]);
        assert_eq!(b.count_clear(0..u32::MAX), u64::from(u32::MAX) - 1);
    }

    #[test]
    fn the_limit_is_enforced() {
        let mut b = Bitmap::new(100);
        assert_eq!(b.set(99), Some(true));
        assert_eq!(b.set(100), None);
        assert!(b.words.len() <= 2);
    }
}
