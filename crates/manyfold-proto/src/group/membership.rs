//! A group's living membership (spec §14.3, §14.7): a peer's graceful
//! departure, the members that stopped answering, the periodic tick that
//! judges the slow ones, and the parallel handshake's early retry.

use std::time::{Duration, Instant};

use super::peer::Peer;
use super::{CopyState, Group, PeerState, Phase, TICK};
use crate::conn_handle::ConnHandle;

impl Group {
    /// Starts a peer's graceful departure; returns copies to give up.
    pub(crate) fn start_leaving(&mut self, idx: u32) -> Vec<(u32, u64)> {
        let p = &mut self.peers[idx as usize];
        if matches!(p.state, PeerState::Gone | PeerState::Leaving) {
            return Vec::new();
        }
        p.state = if p.state == PeerState::Connecting { PeerState::Gone } else { PeerState::Leaving };
        // Nothing waits for it any more; its copies stay queued on its
        // connection and are delivered before its FIN, but are not given
        // up, so it gets every message it was sent.
        let mut touched = Vec::new();
        self.copy_of.retain(|&(p, _), &mut seq| {
            if p == idx {
                touched.push(seq);
            }
            p != idx
        });
        touched.sort_unstable();
        let mut give_up = Vec::new();
        for seq in touched {
            let Some(m) = self.msgs.get_mut((seq - self.base) as usize) else { continue };
            for c in m.copies.iter_mut().filter(|c| c.peer == idx && c.state == CopyState::Pending) {
                c.state = CopyState::Dropped;
            }
            give_up.extend(self.settle(seq));
        }
        self.peers[idx as usize].pending = 0;
        give_up
    }

    /// spec §14.7: peers that owe acknowledgements and sent nothing at all
    /// for `peer_timeout` (a live but slow peer keeps acknowledging packets).
    pub(crate) fn unresponsive(&self, now: Instant) -> Vec<u32> {
        let quiet =
            |p: &Peer| p.quiet_since.is_some_and(|t| now.saturating_duration_since(t) >= self.config.peer_timeout);
        (0..self.peers.len() as u32)
            .filter(|&i| {
                let p = &self.peers[i as usize];
                // After a close, a peer also owes the acknowledgement of its FIN.
                let owes = p.pending > 0 || (self.phase == Phase::Closed && !p.drained);
                matches!(p.state, PeerState::Up | PeerState::Leaving) && owes && quiet(p)
            })
            .collect()
    }

    /// spec §14.7: once per tick, refresh loss estimates and rates, and
    /// return the peers to evict.
    pub(crate) fn on_tick(&mut self, now: Instant, stats: impl Fn(ConnHandle) -> Option<crate::ConnStats>) -> Vec<u32> {
        self.next_tick = Some(now + TICK);
        let horizon = self.config.eviction.map_or(TICK * 2, |e| e.after * 2 + Duration::from_secs(10));
        for p in self.peers.iter_mut().filter(|p| matches!(p.state, PeerState::Up | PeerState::Leaving)) {
            if let Some(s) = stats(p.conn) {
                p.sample_loss(&s);
                p.sample_activity(now, &s);
            }
            p.record(now, horizon);
        }
        let Some(ev) = self.config.eviction else { return Vec::new() };
        let up: Vec<u32> =
            (0..self.peers.len() as u32).filter(|&i| self.peers[i as usize].state == PeerState::Up).collect();
        if up.len() < 2 {
            return Vec::new();
        }
        let mut caps: Vec<f64> = up.iter().map(|&i| self.peers[i as usize].capacity()).collect();
        caps.sort_by(f64::total_cmp);
        let group_rate = caps[caps.len() / 2];
        let mut evict = Vec::new();
        for &i in &up {
            let p = &mut self.peers[i as usize];
            let slow = p.pending > 0 && p.recent_rate(now, ev.after).is_some_and(|r| r < ev.min_fraction * group_rate);
            if !slow {
                p.slow_since = None;
                continue;
            }
            let since = *p.slow_since.get_or_insert(now);
            if now.saturating_duration_since(since) >= ev.after && evict.len() + 1 < up.len() {
                evict.push(i);
            }
        }
        evict
    }

    /// The early retry is due: returns the connections still in their
    /// handshake (and marks the retry done).
    pub(crate) fn take_retry(&mut self, now: Instant) -> Vec<ConnHandle> {
        let Phase::Connecting { started, deadline, retry: Some(r) } = self.phase else { return Vec::new() };
        if r > now || r == started {
            return Vec::new();
        }
        self.phase = Phase::Connecting { started, deadline, retry: Some(started) };
        self.peers.iter().filter(|p| p.state == PeerState::Connecting).map(|p| p.conn).collect()
    }
}
