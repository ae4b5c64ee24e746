//! What a multicast receiver knows of its gaps in the first sending (spec
//! §16.4): the next SN it expects, the gaps not yet reported (a
//! [`RangeSet`] of `u32`, bounded), and the window the newest DATA ends,
//! which says whether a new gap is early enough in its window to NACK.

use std::ops::Range;

use crate::rangeset::RangeSet;

/// Most gap ranges kept for the next NACK or ACK; beyond it the two lowest
/// merge (the report is a flow-control signal, the bitmap is truth).
const MAX_PENDING_RANGES: usize = 64;

#[derive(Debug, Default)]
pub(super) struct Gaps {
    /// Next SN expected in order; gaps below it are known.
    expected: Option<u32>,
    /// Gaps seen and not yet reported.
    pending: RangeSet<u32>,
    /// The LWSN of the newest DATA seen.
    latest_lwsn: Option<u32>,
    /// The first SN of the window `latest_lwsn` ends (the one after the
    /// previous window's LWSN).
    window_first: u32,
}

impl Gaps {
    /// DATA `sn` of the window ending at `lwsn`, first sent (not a repair).
    /// Returns whether it opened a gap of two or more packets in the first
    /// half of its window: only such a gap is NACKed, single losses and
    /// later gaps ride on the window's ACK, which is about to come (spec
    /// §16.4).
    pub(super) fn on_first_send(&mut self, sn: u32, lwsn: u32) -> bool {
        if let Some(l) = self.latest_lwsn.filter(|&l| lwsn > l) {
            self.window_first = l + 1;
        }
        let mut early = false;
        match self.expected {
            Some(e) if sn > e => {
                self.add(e..sn);
                let size = lwsn.wrapping_add(1).wrapping_sub(self.window_first);
                // spec §16.4: only a burst (two or more packets in a row)
                // is worth a NACK before the ACK: a bottleneck's queue
                // drops bursts, independent random loss hardly ever does.
                early = lwsn.wrapping_sub(sn).saturating_mul(2) >= size && sn - e >= 2;
                self.expected = Some(sn + 1);
            }
            // A reordered packet fills its gap.
            Some(e) if sn < e => self.pending.remove(sn..sn + 1),
            _ => self.expected = Some(sn + 1),
        }
        self.latest_lwsn = Some(lwsn);
        early
    }

    fn add(&mut self, r: Range<u32>) {
        self.pending.insert(r);
        if self.pending.len() > MAX_PENDING_RANGES {
            if let (Some(a), Some(b)) = (self.pending.pop_first(), self.pending.pop_first()) {
                self.pending.insert(a.start..b.end);
            }
        }
    }

    /// Gaps reported by another receiver of this network: not again.
    pub(super) fn forget(&mut self, r: Range<u32>) {
        self.pending.remove(r);
    }

    /// The gaps to report now; none are pending after.
    pub(super) fn take_pending(&mut self) -> RangeSet<u32> {
        std::mem::take(&mut self.pending)
    }

    pub(super) fn nothing_pending(&self) -> bool {
        self.pending.is_empty()
    }

    /// The highest SN seen in order so far (a NACK's seq).
    pub(super) fn highest(&self) -> u32 {
        self.expected.unwrap_or(0).saturating_sub(1)
    }

    /// The highest SN of the first sending seen so far.
    pub(super) fn latest_sn(&self) -> Option<u32> {
        self.expected.map(|e| e.saturating_sub(1))
    }

    /// The LWSN of the newest DATA seen.
    pub(super) fn latest_lwsn(&self) -> Option<u32> {
        self.latest_lwsn
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(g: &Gaps) -> Vec<Range<u32>> {
        g.pending.iter().collect()
    }

    #[test]
    fn a_gap_early_in_its_window_is_flagged_and_a_late_one_is_not() {
        let mut g = Gaps::default();
        assert!(!g.on_first_send(0, 9));
        assert!(g.on_first_send(3, 9), "1..3 lost, 6 packets before the window's end of 10");
        assert!(!g.on_first_send(9, 9), "4..9 lost in the second half: the ACK carries it");
        assert_eq!(pending(&g), [1..3, 4..9]);
        assert_eq!(g.highest(), 9);
        // The next window (10..=19) begins after LWSN 9.
        assert!(!g.on_first_send(11, 19), "one packet lost: the ACK carries it");
        assert!(g.on_first_send(14, 19), "12..14 lost early");
        assert_eq!(g.latest_lwsn(), Some(19));
    }

    #[test]
    fn reordered_packets_fill_gaps_and_reported_ones_are_forgotten() {
        let mut g = Gaps::default();
        g.on_first_send(0, 20);
        g.on_first_send(10, 20);
        g.on_first_send(4, 20);
        assert_eq!(pending(&g), [1..4, 5..10]);
        g.forget(2..6);
        assert_eq!(pending(&g), [1..2, 6..10]);
        let taken: Vec<_> = g.take_pending().iter().collect();
        assert_eq!(taken, [1..2, 6..10]);
        assert!(g.nothing_pending());
    }

    #[test]
    fn pending_gaps_stay_bounded_by_merging_the_lowest() {
        let mut g = Gaps::default();
        g.on_first_send(0, 1000);
        for i in 0..100 {
            g.on_first_send(2 + 2 * i, 1000);
        }
        assert_eq!(g.pending.len(), MAX_PENDING_RANGES);
        // The lowest range absorbed the ones merged into it.
        assert_eq!(g.pending.first(), Some(1..74));
        assert_eq!(g.pending.iter_rev().next(), Some(199..200));
    }
}
