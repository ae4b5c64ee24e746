//! Reed-Solomon parity at the receiver (spec §16.9): shards kept for
//! blocks that miss packets (bounded), and the blocks rebuilt once enough
//! shards are in.

use super::McastReceiver;
use crate::mcast::fec;
use std::ops::Range;

/// A numbered shard: (index, bytes).
pub(super) type Shard = (u16, Vec<u8>);

/// Most parity bytes a receiver holds for blocks it cannot rebuild yet.
pub(super) const MAX_PARITY_BYTES: usize = 16 << 20;

/// Most FEC blocks one REPAIR's ranges are worked out for (spec §16.5).
const MAX_SCAN_BLOCKS: usize = 1 << 16;

impl McastReceiver {
    pub(super) fn fec_k(&self) -> Option<u16> {
        self.info.as_ref().map(|i| i.fec_k).filter(|&k| k > 0)
    }

    pub(super) fn on_parity(&mut self, block: u32, index: u16, k: u16, shard: &[u8]) {
        self.stats.parity_received += 1;
        let Some(fec_k) = self.fec_k() else { return };
        let Some(info) = self.info.as_ref() else { return };
        if k > fec_k || shard.len() != usize::from(info.block) || index > fec::MAX_PARITY {
            self.stats.dropped_malformed += 1;
            return;
        }
        let start = block.saturating_mul(u32::from(fec_k));
        if self.have.count_clear_upto(start..start.saturating_add(u32::from(k))) == 0 {
            return; // nothing missing there
        }
        let entry = self.parity.entry(block).or_insert_with(|| (k, Vec::new()));
        if entry.0 != k
            || entry.1.iter().any(|(i, _)| *i == index)
            || self.parity_bytes + shard.len() > MAX_PARITY_BYTES
        {
            return;
        }
        entry.1.push((index, shard.to_vec()));
        self.parity_bytes += shard.len();
        self.check_decodable(block);
    }

    /// spec §16.5, §16.9: the ranges a REPAIR names. With FEC, each
    /// block's list stops at its **deficit**: the packets it misses there
    /// less the parity shards of the block it holds (any that many more
    /// shards, or that many of its missing packets, complete the block),
    /// so that the sender sends exactly what is still needed, whichever
    /// shards were lost on the way. A block its shards already cover is
    /// not named (it is being rebuilt). Without FEC: every gap.
    ///
    /// At most `MAX_SCAN_BLOCKS` blocks are looked at, lowest first: a
    /// REPAIR names only what fits one packet, and the next names more
    /// (an announced total of ~2^32 packets in blocks of 1 made one call
    /// walk billions of blocks: found by fuzzing).
    pub(super) fn repair_ranges(&self, total: u32) -> Vec<Range<u32>> {
        let Some(k) = self.fec_k().map(u32::from) else { return self.have.gaps(0..total).collect() };
        let mut out: Vec<Range<u32>> = Vec::new();
        // (block, packets it may still name)
        let mut budget: Option<(u32, u64)> = None;
        let mut scanned = 0usize;
        for gap in self.have.gaps(0..total) {
            let mut sn = gap.start;
            while sn < gap.end {
                let block = sn / k;
                let end = gap.end.min(block.saturating_add(1).saturating_mul(k));
                if budget.is_none_or(|(b, _)| b != block) {
                    scanned += 1;
                    if scanned > MAX_SCAN_BLOCKS {
                        return out;
                    }
                    let start = block.saturating_mul(k);
                    let missing = self.have.count_clear_upto(start..start.saturating_add(k).min(total));
                    let held = self.parity.get(&block).map_or(0, |(_, shards)| shards.len() as u64);
                    budget = Some((block, missing.saturating_sub(held)));
                }
                if let Some((_, left)) = budget.as_mut() {
                    let take = u64::from(end - sn).min(*left) as u32;
                    if take > 0 {
                        match out.last_mut() {
                            Some(last) if last.end == sn => last.end = sn + take,
                            _ => out.push(sn..sn + take),
                        }
                        *left -= u64::from(take);
                    }
                }
                sn = end;
            }
        }
        out
    }

    pub(super) fn check_decodable(&mut self, block: u32) {
        let (Some(fec_k), Some((k, shards))) = (self.fec_k(), self.parity.get(&block)) else { return };
        let start = block.saturating_mul(u32::from(fec_k));
        let range = start..start.saturating_add(u32::from(*k));
        let missing = self.have.count_clear_upto(range.clone());
        if missing == 0 {
            let freed: usize = shards.iter().map(|s| s.1.len()).sum();
            self.parity_bytes -= freed;
            self.parity.remove(&block);
            self.decodable.remove(&block);
        } else if shards.len() as u64 >= missing {
            self.decodable.insert(block);
        }
    }

    /// Rebuilds the packets of every block that now has enough shards
    /// (spec §16.9). `read(offset, out)` must fill `out` with the stored
    /// bytes at `offset` (what earlier deliveries wrote). Returns what to
    /// write: (offset, bytes).
    pub fn decode(&mut self, read: &mut dyn FnMut(u64, &mut [u8]) -> usize) -> Vec<(u64, Vec<u8>)> {
        let mut out = Vec::new();
        let (Some(fec_k), Some(info)) = (self.fec_k(), self.info.clone()) else { return out };
        while let Some(block) = self.decodable.pop_first() {
            let Some((k, shards)) = self.parity.remove(&block) else { continue };
            self.parity_bytes -= shards.iter().map(|s| s.1.len()).sum::<usize>();
            let shard = usize::from(info.block);
            let start = block * u32::from(fec_k);
            let present: Vec<(u16, Vec<u8>)> = (0..k)
                .filter(|&i| self.have.get(start + u32::from(i)))
                .map(|i| {
                    let mut v = vec![0u8; shard];
                    let offset = u64::from(start + u32::from(i)) * shard as u64;
                    let len = info.size.map_or(shard as u64, |s| s.saturating_sub(offset).min(shard as u64));
                    read(offset, &mut v[..len as usize]);
                    (i, v)
                })
                .collect();
            let Some(rebuilt) = fec::decode(k, &present, &shards) else { continue };
            for (i, data) in rebuilt {
                let sn = start + u32::from(i);
                if self.have.set(sn) != Some(true) {
                    continue;
                }
                self.stats.fec_recovered += 1;
                let offset = u64::from(sn) * shard as u64;
                let len = info.size.map_or(shard as u64, |s| s.saturating_sub(offset).min(shard as u64));
                out.push((offset, data[..len as usize].to_vec()));
            }
        }
        self.check_complete();
        out
    }
}
