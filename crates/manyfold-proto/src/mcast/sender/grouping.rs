//! Automatic grouping of receivers by observed bottleneck (spec §16.12):
//! receivers that registered without an operator's network id (KLV on
//! REGISTER) are clustered by the losses their STATUS signatures show
//! (receivers behind one bottleneck lose the same packets), each cluster
//! is told its group id (REGISTER+ACK with KLV, versioned by an epoch),
//! and windows then await one ACK per group. Bounded: at most
//! `MAX_GROUPS` groups, `SIG_KEPT` signatures per receiver.

use super::control::Control;
use super::members::ReceiverOutcome;
use super::slow::AwaitKey;
use super::McastSender;
use crate::mcast::signature::{self, mix, Agreement, Signature};
use crate::wire::mcast::Signatures;
use std::cmp::Reverse;
use std::time::{Duration, Instant};

/// Most groups the sender forms (spec §16.12); a receiver that would
/// need another stays where it is.
pub(super) const MAX_GROUPS: usize = 64;
/// The correlation of two receivers' losses (phi, over their common
/// signature blocks) from which they share a bottleneck: independent
/// loss gives about 0 (± 0.06 per block), one bottleneck's near 1.
const JOIN_CORRELATION: f64 = 0.4;
/// Fewest lost SNs (signature bits) each of two receivers shows over
/// their common blocks before they are compared: a loss or two says
/// nothing.
const MIN_EVIDENCE: u32 = 6;
/// A receiver whose feedback names a stale group is told again at most
/// this often.
const RETELL: Duration = Duration::from_millis(100);
/// The await key of an assigned group: apart from network ids (below
/// 2^32) and receivers awaited alone (`1 << 32 | index`).
const GROUP_TAG: AwaitKey = 2 << 32;
/// Assigned group ids have this top nibble; an IPv4 /24's id is below
/// 2^24, so the two do not meet.
const GROUP_ID_BASE: u32 = 0xa000_0000;

impl McastSender {
    /// The key an assigned group's ACKs count for (spec §16.12).
    pub(super) fn group_key(group: u32) -> AwaitKey {
        GROUP_TAG | AwaitKey::from(group)
    }

    /// The network id receiver `idx`'s feedback should carry: its group's,
    /// else the one it registered with.
    pub(super) fn wire_group(&self, idx: usize) -> u32 {
        let r = &self.receivers[idx];
        r.group.unwrap_or(r.network)
    }

    /// spec §16.12: the loss signatures a plain STATUS of receiver `idx`
    /// carries in its trailer (`None`: none, or of another version, which
    /// changes nothing).
    pub(super) fn on_signatures(&mut self, idx: usize, sigs: Option<Signatures<'_>>) {
        if !self.receivers[idx].regroupable {
            return;
        }
        if let Some(sigs) = sigs {
            self.receivers[idx].signatures = signature::kept_from(sigs.iter());
        }
    }

    /// spec §16.12: feedback of receiver `idx` named network `named`;
    /// another than its group (its REGISTER+ACK with KLV lost, or
    /// reordered) makes the sender tell it again, at most every `RETELL`.
    pub(super) fn check_group(&mut self, now: Instant, idx: usize, named: u32) {
        let want = self.wire_group(idx);
        let r = &mut self.receivers[idx];
        if !r.regroupable || r.outcome != ReceiverOutcome::Active || named == want {
            return;
        }
        if r.group_told_at.is_some_and(|t| now < t + RETELL) {
            return;
        }
        r.group_told_at = Some(now);
        self.control.push_back(Control::Group { idx });
    }

    fn kept(&self, idx: usize) -> Vec<Signature> {
        self.receivers[idx].signatures.iter().flatten().copied().collect()
    }

    /// spec §16.12: clusters the regroupable receivers by their losses.
    /// Greedy, most losses first: a receiver joins the group whose first
    /// member's losses correlate best with its own (at least
    /// `JOIN_CORRELATION`), else starts one (at most `MAX_GROUPS`). A
    /// group of one is no group: its receiver goes back to its network's.
    /// Receivers behind their network (awaited alone, spec §16.7) and
    /// receivers with too few losses to compare keep their group. A group
    /// keeps the id most of its members had, so that regrouping moves
    /// only the receivers whose losses moved.
    pub(super) fn regroup(&mut self, now: Instant) {
        let mut cands: Vec<(usize, u32)> = (0..self.receivers.len())
            .filter(|&i| {
                let r = &self.receivers[i];
                r.regroupable && r.outcome == ReceiverOutcome::Active && !r.behind
            })
            .map(|i| (i, self.kept(i).iter().map(Signature::ones).sum::<u32>()))
            .filter(|&(_, ones)| ones >= MIN_EVIDENCE)
            .collect();
        if cands.is_empty() {
            return;
        }
        cands.sort_by_key(|&(i, ones)| (Reverse(ones), self.receivers[i].client));
        let mut clusters: Vec<(Vec<Signature>, Vec<usize>)> = Vec::new();
        for &(i, _) in &cands {
            let mine = self.kept(i);
            let best = clusters
                .iter()
                .enumerate()
                .filter_map(|(c, (seed, _))| {
                    let t = Agreement::of(seed, &mine);
                    let (a, b) = t.evidence();
                    let phi = t.correlation().filter(|_| a >= MIN_EVIDENCE && b >= MIN_EVIDENCE)?;
                    (phi >= JOIN_CORRELATION).then_some((c, phi))
                })
                .max_by(|x, y| x.1.total_cmp(&y.1));
            match best {
                Some((c, _)) => clusters[c].1.push(i),
                None if clusters.len() < MAX_GROUPS => clusters.push((mine, vec![i])),
                None => {}
            }
        }
        let mut used: Vec<u32> = Vec::new();
        let mut assign: Vec<(usize, Option<u32>)> = Vec::new();
        for (_, members) in &clusters {
            if members.len() < 2 {
                assign.push((members[0], None));
                continue;
            }
            let mut had: Vec<u32> = members.iter().filter_map(|&m| self.receivers[m].group).collect();
            had.sort_unstable();
            let inherited = had
                .chunk_by(|a, b| a == b)
                .filter(|run| !used.contains(&run[0]))
                .max_by_key(|run| (run.len(), Reverse(run[0])))
                .map(|run| run[0]);
            let id = inherited.unwrap_or_else(|| {
                let mut id = GROUP_ID_BASE | (mix(self.receivers[members[0]].client ^ self.session) & 0x0fff_ffff);
                while used.contains(&id) || self.receivers.iter().any(|r| r.group == Some(id)) {
                    id = GROUP_ID_BASE | (id.wrapping_add(1) & 0x0fff_ffff);
                }
                id
            });
            used.push(id);
            assign.extend(members.iter().map(|&m| (m, Some(id))));
        }
        let old_keys: Vec<AwaitKey> = (0..self.receivers.len()).map(|i| self.await_key(i)).collect();
        let mut moved = 0;
        for (i, group) in assign {
            if self.receivers[i].group != group {
                self.receivers[i].group = group;
                self.receivers[i].group_told_at = Some(now);
                self.control.push_back(Control::Group { idx: i });
                moved += 1;
            }
        }
        if moved > 0 {
            self.group_epoch = self.group_epoch.wrapping_add(1);
            self.stats.regrouped += moved;
            self.reawait(now, &old_keys);
        }
    }

    /// Open windows awaited the receivers' old keys (`old_keys`, by
    /// index): a receiver moved before its old key acked is awaited under
    /// its new one, and keys no live receiver holds any more are not
    /// awaited (a window may be confirmed now).
    fn reawait(&mut self, now: Instant, old_keys: &[AwaitKey]) {
        let live: Vec<(AwaitKey, AwaitKey)> = (0..self.receivers.len())
            .filter(|&i| self.receivers[i].outcome == ReceiverOutcome::Active)
            .map(|i| (old_keys[i], self.await_key(i)))
            .collect();
        for w in &mut self.windows {
            for &(old, new) in &live {
                if old != new && w.awaited.contains(&old) && !w.acked.contains(&old) && !w.awaited.contains(&new) {
                    w.awaited.push(new);
                }
            }
            w.awaited.retain(|k| live.iter().any(|&(_, new)| new == *k));
        }
        self.resolve_ready(now);
    }
}
