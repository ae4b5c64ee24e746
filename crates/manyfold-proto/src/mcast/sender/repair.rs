//! Repair (spec §16.5, §16.9): requests gathered for `repair_gather`;
//! parity by multicast for every block a receiver misses packets of while
//! its code has indexes left, else each requested packet by multicast or
//! unicast; passes counted per receiver.

use super::members::ReceiverOutcome;
use super::{McastSender, SenderTimer};
use crate::mcast::fec;
use crate::mcast::McTransmit;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RepairDest {
    Group,
    One(usize),
}

impl McastSender {
    pub(super) fn on_repair(&mut self, now: Instant, idx: usize, ranges: impl Iterator<Item = std::ops::Range<u32>>) {
        self.stats.repair_requests += 1;
        // spec §16.5: a receiver repeats its request every repair interval
        // while it misses packets; a repeat that comes while the answers to
        // its last pass are still going out is not a new pass.
        if self.receivers[idx].next_pass_at.is_some_and(|t| now < t) {
            return;
        }
        let r = &mut self.receivers[idx];
        r.repair_passes += 1;
        if r.repair_passes > self.cfg.max_repair_passes {
            self.drop_receiver(now, idx, ReceiverOutcome::TooManyPasses);
            return;
        }
        let limit = self.next_sn;
        let before = self.gathered;
        for range in ranges {
            for sn in range.start..range.end.min(limit) {
                if self.gathered >= self.cfg.max_repair_queue {
                    break;
                }
                let who = self.gather.entry(sn).or_default();
                if !who.contains(&idx) {
                    who.push(idx);
                    self.gathered += 1;
                }
            }
        }
        if !self.gather.is_empty() && !self.timers.is_set(SenderTimer::Gather) {
            self.timers.set(SenderTimer::Gather, now + self.cfg.repair_gather);
        }
        // The next pass may start once everything queued now has gone out
        // at the recent rate, plus a round trip's margin.
        let queued = (self.gathered - before + self.repairs.len() + self.parity_ready.len()) as f64;
        let drain = self.rate.map_or(0.0, |r| queued * f64::from(self.info.block) / r.max(1.0));
        let margin = self.ack_time.unwrap_or(Duration::from_millis(10)) * 2 + self.cfg.repair_gather;
        self.receivers[idx].next_pass_at = Some(now + Duration::from_secs_f64(drain.min(60.0)) + margin);
    }

    /// spec §16.5, §16.9: with FEC, a block in which receivers miss
    /// packets (not necessarily the same ones) gets as many new parity
    /// shards as the worst of them misses; otherwise (no FEC, or the
    /// block's parity indexes used up) each requested packet goes by
    /// multicast when enough receivers asked for it, else by unicast.
    pub(super) fn release_repairs(&mut self) {
        self.timers.cancel(SenderTimer::Gather);
        self.gathered = 0;
        let gathered = std::mem::take(&mut self.gather);
        let min = self.cfg.repair_multicast_min.max(1);
        let k = self.cfg.fec_k;
        let mut by_parity = std::collections::BTreeSet::new();
        if k > 0 {
            // Per block: how many packets each requester misses.
            let mut blocks: BTreeMap<u32, HashMap<usize, u16>> = BTreeMap::new();
            for (&sn, who) in &gathered {
                let per = blocks.entry(sn / u32::from(k)).or_default();
                for &i in who {
                    *per.entry(i).or_default() += 1;
                }
            }
            for (block, per) in blocks {
                let next = self.parity_next.get(&block).copied().unwrap_or(0);
                // spec §16.9: a receiver names, per block, only its
                // deficit (what it misses beyond the parity it holds), so
                // the worst deficit in new shards completes every
                // requester, whichever earlier shards each one lost.
                let live = per.iter().filter(|(&i, _)| self.receivers[i].outcome == ReceiverOutcome::Active);
                let (count, worst) = live.fold((0, 0), |(c, w), (_, &n)| (c + 1, w.max(n)));
                // Parity first (spec §16.9): any block a live receiver
                // misses packets of gets parity while its code has
                // indexes left; a shard also serves whoever asks later.
                if count >= 1 && next.saturating_add(worst) <= fec::PARITY_SHARDS {
                    self.parity_jobs.push_back((block, next, worst));
                    self.stats.parity_repair += u64::from(worst);
                    self.parity_next.insert(block, next + worst);
                    by_parity.insert(block);
                }
            }
        }
        for (sn, who) in gathered {
            if k > 0 && by_parity.contains(&(sn / u32::from(k))) {
                continue;
            }
            let who: Vec<usize> =
                who.into_iter().filter(|&i| self.receivers[i].outcome == ReceiverOutcome::Active).collect();
            if who.len() >= min {
                self.repairs.push_back((sn, RepairDest::Group));
            } else {
                self.repairs.extend(who.into_iter().map(|i| (sn, RepairDest::One(i))));
            }
        }
    }

    pub(super) fn send_repair(
        &mut self,
        buf: &mut [u8],
        source: &mut dyn FnMut(u64, &mut [u8]) -> usize,
    ) -> Option<McTransmit> {
        let (sn, dest) = loop {
            let (sn, dest) = self.repairs.pop_front()?;
            match dest {
                RepairDest::One(i) if self.receivers[i].outcome != ReceiverOutcome::Active => continue,
                _ => break (sn, dest),
            }
        };
        let (n, _) = self.write_data(buf, sn, sn, true, source)?;
        let destination = match dest {
            RepairDest::Group => {
                self.stats.repair_multicast += 1;
                self.group
            }
            RepairDest::One(i) => {
                self.stats.repair_unicast += 1;
                self.receivers[i].addr
            }
        };
        Some(McTransmit { destination, size: n })
    }
}
