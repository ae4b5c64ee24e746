//! Repair (spec §16.5, §16.9): requests gathered for `repair_gather`,
//! each requested packet sent by multicast or unicast, or parity for a
//! block that enough receivers miss packets of; passes counted per
//! receiver.

use super::members::ReceiverOutcome;
use super::{McastSender, SenderTimer};
use crate::mcast::fec;
use crate::mcast::McTransmit;
use crate::wire::mcast::{emit, emit_bytes};
use crate::wire::{Flags, PacketType};
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

    /// spec §16.5, §16.9: each requested packet goes by multicast when
    /// enough receivers asked for it, else by unicast; with FEC, a block in
    /// which enough receivers miss packets (not necessarily the same ones)
    /// gets as many new parity shards as the worst of them misses instead.
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
                let live = per.iter().filter(|(&i, _)| self.receivers[i].outcome == ReceiverOutcome::Active);
                let (count, worst) = live.fold((0, 0), |(c, w), (_, &n)| (c + 1, w.max(n)));
                let next = self.parity_next.get(&block).copied().unwrap_or(0);
                if count >= min && next.saturating_add(worst) <= fec::PARITY_SHARDS {
                    self.parity_jobs.push_back((block, next, worst));
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

    /// DATA `sn` went out in the data phase: a block it completes gets its
    /// proactive parity (spec §16.9).
    pub(super) fn after_data(&mut self, sn: u32) {
        let k = u32::from(self.cfg.fec_k);
        let block_done = k > 0 && ((sn + 1).is_multiple_of(k) || self.total.is_some_and(|t| sn + 1 == t));
        if block_done && self.cfg.fec_proactive > 0 {
            let p = self.cfg.fec_proactive.min(fec::PARITY_SHARDS / 2);
            self.parity_jobs.push_back((sn / k, 0, p));
            self.parity_next.insert(sn / k, p);
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
            let originals: Vec<Vec<u8>> = range
                .clone()
                .map(|sn| {
                    let mut v = vec![0u8; shard];
                    let offset = u64::from(sn) * shard as u64;
                    let want = (self.available.saturating_sub(offset)).min(shard as u64) as usize;
                    source(offset, &mut v[..want]);
                    v
                })
                .collect();
            let k = (range.end - range.start) as u16;
            if let Some(shards) = fec::encode(&originals, from, count) {
                for (j, p) in shards.into_iter().enumerate() {
                    self.parity_ready.push_back((block, from + j as u16, k, p));
                }
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
