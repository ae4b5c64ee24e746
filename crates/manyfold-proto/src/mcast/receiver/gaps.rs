//! What a multicast receiver knows of its gaps in the first sending (spec
//! §16.4): the next SN it expects, the gaps not yet reported (a
//! [`RangeSet`] of `u32`, bounded) and when each opened, and the window
//! the newest DATA ends, which says whether a new gap is early enough in
//! its window to NACK. A gap younger than the reorder window is not
//! reported yet: the path may deliver out of order (spec §16.4).

use std::collections::VecDeque;
use std::ops::Range;
use std::time::{Duration, Instant};

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
    /// When the gaps opened, as (first SN of the gap, time), in SN order
    /// (gaps open as the SN rises): a pending SN opened at the time of the
    /// last entry at or below it. Bounded as `pending`.
    opened: VecDeque<(u32, Instant)>,
}

/// What one first-sent DATA packet did to the gaps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Seen {
    /// It opened a gap of two or more packets in the first half of its
    /// window: only such a gap is NACKed, single losses and later gaps
    /// ride on the window's ACK, which is about to come (spec §16.4).
    pub(super) early_gap: bool,
    /// It filled a gap not yet reported, which had been open this long:
    /// the path reordered it.
    pub(super) filled_after: Option<Duration>,
    /// It came below the next SN expected, and its gap was no longer
    /// pending: reported already (by us or a neighbour), or merged away.
    pub(super) late_after_report: bool,
}

impl Gaps {
    /// DATA `sn` of the window ending at `lwsn`, first sent (not a
    /// repair), new to this receiver, at `now`.
    pub(super) fn on_first_send(&mut self, now: Instant, sn: u32, lwsn: u32) -> Seen {
        if let Some(l) = self.latest_lwsn.filter(|&l| lwsn > l) {
            self.window_first = l + 1;
        }
        let mut seen = Seen::default();
        match self.expected {
            Some(e) if sn > e => {
                self.add(now, e..sn);
                let size = lwsn.wrapping_add(1).wrapping_sub(self.window_first);
                // spec §16.4: only a burst (two or more packets in a row)
                // is worth a NACK before the ACK: a bottleneck's queue
                // drops bursts, independent random loss hardly ever does.
                seen.early_gap = lwsn.wrapping_sub(sn).saturating_mul(2) >= size && sn - e >= 2;
                self.expected = Some(sn + 1);
            }
            // A reordered packet fills its gap.
            Some(e) if sn < e => {
                if self.pending.contains(sn) {
                    self.pending.remove(sn..sn + 1);
                    let opened = self.opened.iter().rev().find(|&&(first, _)| first <= sn).map(|&(_, t)| t);
                    seen.filled_after = Some(opened.map_or(Duration::ZERO, |t| now.saturating_duration_since(t)));
                } else {
                    seen.late_after_report = true;
                }
            }
            _ => self.expected = Some(sn + 1),
        }
        self.latest_lwsn = Some(lwsn);
        seen
    }

    fn add(&mut self, now: Instant, r: Range<u32>) {
        self.opened.push_back((r.start, now));
        if self.opened.len() > 2 * MAX_PENDING_RANGES {
            self.opened.pop_front();
        }
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

    /// The gaps to report at `now`: those open for at least `reorder`
    /// (spec §16.4). Younger ones stay pending for the next report.
    pub(super) fn take_pending(&mut self, now: Instant, reorder: Duration) -> RangeSet<u32> {
        // The first SN of the oldest gap still too young; SNs below it are old enough.
        let young_from =
            self.opened.iter().find(|&&(_, t)| now.saturating_duration_since(t) < reorder).map(|&(sn, _)| sn);
        let Some(cut) = young_from else {
            self.opened.clear();
            return std::mem::take(&mut self.pending);
        };
        let mut old = RangeSet::new();
        while let Some(r) = self.pending.first().filter(|r| r.start < cut) {
            self.pending.remove(r.start..r.end.min(cut));
            old.insert(r.start..r.end.min(cut));
        }
        while self.opened.front().is_some_and(|&(sn, _)| sn < cut) {
            self.opened.pop_front();
        }
        old
    }

    /// When the oldest pending gap is old enough to report (`None`:
    /// nothing pending).
    pub(super) fn first_ready(&self, now: Instant, reorder: Duration) -> Option<Instant> {
        let first = self.pending.first()?.start;
        Some(self.opened.iter().rev().find(|&&(sn, _)| sn <= first).map_or(now, |&(_, t)| (t + reorder).max(now)))
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
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    fn pending(g: &Gaps) -> Vec<Range<u32>> {
        g.pending.iter().collect()
    }

    /// `ms` after one fixed base instant (tests only read the clock once).
    fn at(ms: u64) -> Instant {
        static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *BASE.get_or_init(Instant::now) + Duration::from_millis(ms)
    }

    #[test]
    fn a_gap_early_in_its_window_is_flagged_and_a_late_one_is_not() {
        let mut g = Gaps::default();
        let t = at(0);
        assert!(!g.on_first_send(t, 0, 9).early_gap);
        assert!(g.on_first_send(t, 3, 9).early_gap, "1..3 lost, 6 packets before the window's end of 10");
        assert!(!g.on_first_send(t, 9, 9).early_gap, "4..9 lost in the second half: the ACK carries it");
        assert_eq!(pending(&g), [1..3, 4..9]);
        assert_eq!(g.highest(), 9);
        // The next window (10..=19) begins after LWSN 9.
        assert!(!g.on_first_send(t, 11, 19).early_gap, "one packet lost: the ACK carries it");
        assert!(g.on_first_send(t, 14, 19).early_gap, "12..14 lost early");
        assert_eq!(g.latest_lwsn(), Some(19));
    }

    #[test]
    fn reordered_packets_fill_gaps_and_reported_ones_are_forgotten() {
        let mut g = Gaps::default();
        g.on_first_send(at(0), 0, 20);
        g.on_first_send(at(1), 10, 20);
        let seen = g.on_first_send(at(4), 4, 20);
        assert_eq!(seen.filled_after, Some(Duration::from_millis(3)), "the gap 1..10 opened at 1 ms");
        assert_eq!(pending(&g), [1..4, 5..10]);
        g.forget(2..6);
        assert_eq!(pending(&g), [1..2, 6..10]);
        let taken: Vec<_> = g.take_pending(at(4), Duration::ZERO).iter().collect();
        assert_eq!(taken, [1..2, 6..10]);
        assert!(g.nothing_pending());
        assert!(g.on_first_send(at(5), 7, 20).late_after_report, "7 was reported missing");
    }

    #[test]
    fn gaps_younger_than_the_reorder_window_wait_for_the_next_report() {
        let mut g = Gaps::default();
        let window = Duration::from_millis(2);
        g.on_first_send(at(0), 0, 100);
        g.on_first_send(at(0), 3, 100); // 1..3 opens at 0 ms
        g.on_first_send(at(3), 6, 100); // 4..6 opens at 3 ms
        assert_eq!(g.first_ready(at(3), window), Some(at(3)), "1..3 is old enough now");
        let taken: Vec<_> = g.take_pending(at(4), window).iter().collect();
        assert_eq!(taken, [1..3], "4..6 is 1 ms old: it may still come");
        assert_eq!(pending(&g), [4..6]);
        assert_eq!(g.first_ready(at(4), window), Some(at(5)));
        let taken: Vec<_> = g.take_pending(at(5), window).iter().collect();
        assert_eq!(taken, [4..6]);
        assert_eq!(g.first_ready(at(5), window), None);
    }

    #[test]
    fn pending_gaps_stay_bounded_by_merging_the_lowest() {
        let mut g = Gaps::default();
        g.on_first_send(at(0), 0, 1000);
        for i in 0..100 {
            g.on_first_send(at(0), 2 + 2 * i, 1000);
        }
        assert_eq!(g.pending.len(), MAX_PENDING_RANGES);
        assert!(g.opened.len() <= 2 * MAX_PENDING_RANGES);
        // The lowest range absorbed the ones merged into it.
        assert_eq!(g.pending.first(), Some(1..74));
        assert_eq!(g.pending.iter_rev().next(), Some(199..200));
    }
}
