//! Parity first (spec §16.9): how many Reed-Solomon shards each FEC block
//! gets, and when. Proactive parity follows each block as it is sent,
//! sized to the loss receivers reported in recent blocks (NORM's automatic
//! parity); in the data phase, a block some receiver reports more losses
//! of than the parity it got so far is topped up by multicast at once; and
//! the shards are made and written here.

use super::McastSender;
use crate::mcast::fec;
use crate::mcast::McTransmit;
use crate::wire::mcast::{emit, emit_bytes};
use crate::wire::{Flags, PacketType};
use std::collections::BTreeMap;
use std::ops::Range;

/// Most FEC blocks whose per-receiver losses are kept (spec §16.8): the
/// oldest are forgotten beyond it (they are repaired in the repair phase).
const MAX_TRACKED_BLOCKS: usize = 4096;

/// Weight of one block in the smoothed worst loss per block.
const AUTO_GAIN: f64 = 1.0 / 16.0;

/// Longest run of consecutive losses the automatic parity learns from.
/// Independent random loss of a few percent hardly ever loses three
/// packets in a row (2%: once in ~125,000 packets); a queue's overflow
/// loses the tail of a burst, many in a row. Parity sent in advance for
/// that would only load the bottleneck that dropped them.
const SCATTERED_RUN: u32 = 2;

/// The losses receivers reported in one FEC block.
#[derive(Debug, Default)]
struct BlockLosses {
    /// (receiver index, packets of this block it reported lost, of which
    /// in runs of at most `SCATTERED_RUN`).
    per: Vec<(usize, u16, u16)>,
    /// The most any one receiver reported.
    worst: u16,
    /// The most scattered losses (runs of at most `SCATTERED_RUN`) one
    /// receiver not behind its network (spec §16.7) reported: what the
    /// automatic parity learns from. Bursts are a queue's overflow, and a
    /// receiver behind its own bottleneck loses its queue's overflow:
    /// congestion that the pace and the window answer; those losses are
    /// topped up, not sent to every block in advance.
    worst_scattered: u16,
}

/// The sender's view of loss per FEC block (spec §16.9, "Parity first").
#[derive(Debug, Default)]
pub(super) struct ParityPlan {
    /// Blocks at or above `settled` that some receiver reported losses in.
    blocks: BTreeMap<u32, BlockLosses>,
    /// Blocks below this are settled: their worst loss went into `auto`.
    settled: u32,
    /// The worst per-receiver loss per block, smoothed over settled blocks.
    auto: f64,
    /// The last block encoded and all its parity shards: a block is
    /// topped up several times (proactive, then as reports come).
    cache: Option<(u32, Vec<Vec<u8>>)>,
}

impl ParityPlan {
    /// The automatic proactive parity per block: the smoothed worst loss,
    /// rounded down (the rest is topped up when reported).
    pub(super) fn auto_parity(&self) -> u16 {
        self.auto.floor().clamp(0.0, f64::from(fec::PARITY_SHARDS / 2)) as u16
    }
}

impl McastSender {
    /// spec §16.9: receiver `idx` reported `ranges` missing (an ACK's or
    /// NACK's list): per block, the most one receiver lost so far; a block
    /// fully sent whose worst receiver lost more than the parity it got is
    /// topped up at once, by multicast.
    pub(super) fn note_block_losses(&mut self, idx: usize, ranges: impl Iterator<Item = Range<u32>>) {
        let k = u32::from(self.cfg.fec_k);
        if k == 0 {
            return;
        }
        let mut touched = Vec::new();
        let behind = self.receivers[idx].behind;
        for r in ranges {
            let r = r.start..r.end.min(self.next_sn);
            let mut sn = r.start.max(self.plan.settled.saturating_mul(k));
            while sn < r.end {
                let block = sn / k;
                let end = (block.saturating_add(1)).saturating_mul(k).min(r.end);
                let n = u16::try_from(end - sn).unwrap_or(u16::MAX);
                let scattered = if r.end - r.start <= SCATTERED_RUN { n } else { 0 };
                let b = self.plan.blocks.entry(block).or_default();
                let (count, scattered) = match b.per.iter_mut().find(|(i, _, _)| *i == idx) {
                    Some((_, c, s)) => {
                        *c = c.saturating_add(n);
                        *s = s.saturating_add(scattered);
                        (*c, *s)
                    }
                    None => {
                        b.per.push((idx, n, scattered));
                        (n, scattered)
                    }
                };
                b.worst = b.worst.max(count);
                if !behind {
                    b.worst_scattered = b.worst_scattered.max(scattered);
                }
                if touched.last() != Some(&block) {
                    touched.push(block);
                }
                sn = end;
            }
        }
        while self.plan.blocks.len() > MAX_TRACKED_BLOCKS {
            self.plan.blocks.pop_first();
        }
        for block in touched {
            let sent = self.total.unwrap_or(self.next_sn).min(self.next_sn);
            if fec::block_range(block, self.cfg.fec_k, u32::MAX).end <= sent || self.block_is_last(block) {
                let worst = self.plan.blocks.get(&block).map_or(0, |b| b.worst);
                // At most a quarter of the block in the data phase: a
                // receiver losing more is served in the repair phase.
                self.stats.parity_topped_up += u64::from(self.top_up(block, worst.min(self.cfg.fec_k.div_ceil(4))));
            }
        }
    }

    /// Whether `block` is the file's last (shorter) block, all sent.
    fn block_is_last(&self, block: u32) -> bool {
        self.total.is_some_and(|t| t <= self.next_sn && (t - 1) / u32::from(self.cfg.fec_k.max(1)) == block)
    }

    /// Sends parity for `block` until it has had `want` shards; returns
    /// how many more that queued.
    fn top_up(&mut self, block: u32, want: u16) -> u16 {
        let next = self.parity_next.get(&block).copied().unwrap_or(0);
        let want = want.min(fec::PARITY_SHARDS);
        if want <= next {
            return 0;
        }
        self.parity_jobs.push_back((block, next, want - next));
        self.parity_next.insert(block, want);
        want - next
    }

    /// DATA `sn` went out in the data phase: a block it completes gets its
    /// proactive parity (spec §16.9): `fec_proactive` shards at least, the
    /// automatic count, and what a receiver already reported lost there.
    pub(super) fn after_data(&mut self, sn: u32) {
        let k = u32::from(self.cfg.fec_k);
        let block_done = k > 0 && ((sn + 1).is_multiple_of(k) || self.total.is_some_and(|t| sn + 1 == t));
        if !block_done {
            return;
        }
        let block = sn / k;
        let auto = if self.cfg.fec_auto { self.plan.auto_parity() } else { 0 };
        let reported = self.plan.blocks.get(&block).map_or(0, |b| b.worst.min(self.cfg.fec_k.div_ceil(4)));
        let proactive = self.cfg.fec_proactive.max(auto).min(fec::PARITY_SHARDS / 2);
        self.stats.parity_proactive += u64::from(self.top_up(block, proactive.max(reported)));
    }

    /// A window resolved: blocks wholly before `recent_from` are settled,
    /// each one's worst scattered loss among receivers not behind their
    /// network (0 if nobody reported any) folded into the automatic parity.
    pub(super) fn settle_blocks(&mut self) {
        let k = u32::from(self.cfg.fec_k);
        if k == 0 {
            return;
        }
        let upto = self.recent_from / k;
        while self.plan.settled < upto {
            let b = self.plan.settled;
            let worst = self.plan.blocks.remove(&b).map_or(0, |x| x.worst_scattered);
            self.plan.auto += AUTO_GAIN * (f64::from(worst) - self.plan.auto);
            self.plan.settled += 1;
        }
        // Forgotten beyond the bound: settled already.
        while self.plan.blocks.first_key_value().is_some_and(|(&b, _)| b < upto) {
            self.plan.blocks.pop_first();
        }
    }

    /// The next parity shard to send, making a job's shards if needed.
    pub(super) fn send_parity(
        &mut self,
        buf: &mut [u8],
        source: &mut dyn FnMut(u64, &mut [u8]) -> usize,
    ) -> Option<McTransmit> {
        while self.parity_ready.is_empty() {
            let (block, from, count) = self.parity_jobs.pop_front()?;
            let total = self.total.unwrap_or(self.next_sn);
            let range = fec::block_range(block, self.cfg.fec_k, total);
            let shard = usize::from(self.info.block);
            let cached = self.plan.cache.as_ref().is_some_and(|c| c.0 == block);
            let originals: Vec<Vec<u8>> = range
                .clone()
                .filter(|_| !cached)
                .map(|sn| {
                    let mut v = vec![0u8; shard];
                    let offset = u64::from(sn) * shard as u64;
                    let want = (self.available.saturating_sub(offset)).min(shard as u64) as usize;
                    source(offset, &mut v[..want]);
                    v
                })
                .collect();
            let k = (range.end - range.start) as u16;
            if self.plan.cache.as_ref().is_none_or(|c| c.0 != block) {
                self.plan.cache = fec::encode_all(&originals).map(|all| (block, all));
            }
            let Some((_, all)) = self.plan.cache.as_ref() else { continue };
            let shards = all.iter().skip(usize::from(from)).take(usize::from(count));
            for (j, p) in shards.enumerate() {
                self.parity_ready.push_back((block, from + j as u16, k, p.clone()));
            }
        }
        let (block, index, k, shard) = self.parity_ready.pop_front()?;
        let n = emit(
            buf,
            PacketType::McParity,
            Flags::empty(),
            self.session,
            block,
            u32::from(index),
            u32::from(k),
            |o| emit_bytes(o, &shard),
        )?;
        self.stats.parity_packets += 1;
        Some(McTransmit { destination: self.group, size: n })
    }
}
