//! What an endpoint remembers of each peer address between connections,
//! bounded: a client's latest token of each server (spec §6.9) and each
//! peer's round trip as finished connections left it (spec §5.4.1).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::recovery::RttReport;

/// One value per peer address, at most `limit` of them; the address
/// added longest ago is forgotten first.
#[derive(Debug)]
pub(super) struct PeerMap<V> {
    /// Each address's value, with the number its entry in `order` carries.
    map: HashMap<SocketAddr, (u64, V)>,
    /// Addresses in the order they were added. An entry whose number no
    /// longer matches the map's (removed, or removed and added again) is
    /// stale; a removal that finds `2 · limit` entries drops the stale
    /// ones, so there are never more than `3 · limit`.
    order: VecDeque<(SocketAddr, u64)>,
    next: u64,
    limit: usize,
}

impl<V> PeerMap<V> {
    pub fn new(limit: usize) -> Self {
        PeerMap { map: HashMap::new(), order: VecDeque::new(), next: 0, limit }
    }

    pub fn get(&self, peer: SocketAddr) -> Option<&V> {
        self.map.get(&peer).map(|e| &e.1)
    }

    pub fn get_mut(&mut self, peer: SocketAddr) -> Option<&mut V> {
        self.map.get_mut(&peer).map(|e| &mut e.1)
    }

    /// Sets `peer`'s value; a new address may push out the oldest.
    pub fn insert(&mut self, peer: SocketAddr, value: V) {
        if self.limit == 0 {
            return;
        }
        if let Some(e) = self.map.get_mut(&peer) {
            e.1 = value;
            return;
        }
        while self.map.len() >= self.limit {
            let Some((old, n)) = self.order.pop_front() else { break };
            if self.map.get(&old).is_some_and(|e| e.0 == n) {
                self.map.remove(&old);
            }
        }
        self.map.insert(peer, (self.next, value));
        self.order.push_back((peer, self.next));
        self.next += 1;
    }

    pub fn remove(&mut self, peer: SocketAddr) {
        self.map.remove(&peer);
        if self.order.len() >= 2 * self.limit {
            let map = &self.map;
            self.order.retain(|(a, n)| map.get(a).is_some_and(|e| e.0 == *n));
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    #[cfg(test)]
    fn order_len(&self) -> usize {
        self.order.len()
    }
}

/// A peer's round trip as its finished connections left it (spec §5.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Remembered {
    srtt: Duration,
    rttvar: Duration,
    at: Instant,
}

/// Each peer's remembered round trip, at most `max_peer_rtts` peers, each
/// good for `peer_rtt_lifetime` after the last connection that reported.
#[derive(Debug)]
pub(super) struct RttMemory {
    peers: PeerMap<Remembered>,
    lifetime: Duration,
}

impl RttMemory {
    pub fn new(limit: usize, lifetime: Duration) -> Self {
        RttMemory { peers: PeerMap::new(limit), lifetime }
    }

    /// `peer`'s remembered (SRTT, RTTVAR), unless older than the lifetime.
    pub fn get(&self, now: Instant, peer: SocketAddr) -> Option<(Duration, Duration)> {
        let r = self.peers.get(peer)?;
        (now.saturating_duration_since(r.at) < self.lifetime).then_some((r.srtt, r.rttvar))
    }

    /// Takes a finished connection's report, as of `now` (when it last
    /// heard its peer) (spec §5.4.1): a larger
    /// estimate replaces what was remembered at once, a smaller one moves
    /// it an eighth of the way down (a quarter for RTTVAR), as Linux's
    /// `tcp_metrics` does: an RTO too long costs a slower repair, one too
    /// short a spurious resend on every first exchange. A failure forgets
    /// the peer.
    pub fn learn(&mut self, now: Instant, peer: SocketAddr, report: RttReport) {
        let RttReport::Measured { srtt, rttvar } = report else {
            self.peers.remove(peer);
            return;
        };
        let fresh = Remembered { srtt, rttvar, at: now };
        let lifetime = self.lifetime;
        match self.peers.get_mut(peer) {
            Some(r) if now.saturating_duration_since(r.at) < lifetime => {
                r.srtt = if srtt >= r.srtt { srtt } else { r.srtt - (r.srtt - srtt) / 8 };
                r.rttvar = if rttvar >= r.rttvar { rttvar } else { r.rttvar - (r.rttvar - rttvar) / 4 };
                r.at = r.at.max(now);
            }
            _ => self.peers.insert(peer, fresh),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn a_peer_map_keeps_the_latest_value_and_forgets_the_oldest_address() {
        let mut s = PeerMap::new(2);
        s.insert(addr(1), 1);
        s.insert(addr(2), 2);
        s.insert(addr(1), 3);
        assert_eq!((s.get(addr(1)), s.len()), (Some(&3), 2), "a newer value replaces the old");
        s.insert(addr(3), 4);
        assert_eq!((s.get(addr(1)), s.get(addr(2)), s.get(addr(3))), (None, Some(&2), Some(&4)));
        assert_eq!(s.len(), 2);
        let mut none = PeerMap::new(0);
        none.insert(addr(1), 1);
        assert_eq!(none.get(addr(1)), None);
    }

    #[test]
    fn a_removed_peer_added_again_counts_from_its_new_addition_and_the_order_stays_bounded() {
        let mut s = PeerMap::new(4);
        s.insert(addr(1), 1);
        s.remove(addr(1));
        s.insert(addr(2), 2);
        s.insert(addr(1), 1);
        s.insert(addr(3), 3);
        s.insert(addr(4), 4);
        s.insert(addr(5), 5);
        assert_eq!((s.get(addr(2)), s.get(addr(1))), (None, Some(&1)), "2 was added before 1's second addition");
        for i in 0..10_000 {
            s.insert(addr(6), i);
            s.remove(addr(6));
            assert!(s.order_len() <= 8, "order holds {}", s.order_len());
        }
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn the_rtt_memory_takes_a_rise_at_once_a_fall_by_an_eighth_and_forgets_on_failure_or_age() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let mut m = RttMemory::new(16, Duration::from_secs(600));
        let p = addr(1);
        assert_eq!(m.get(t0, p), None);
        m.learn(t0, p, RttReport::Measured { srtt: ms(40), rttvar: ms(8) });
        assert_eq!(m.get(t0, p), Some((ms(40), ms(8))));
        m.learn(t0, p, RttReport::Measured { srtt: ms(80), rttvar: ms(16) });
        assert_eq!(m.get(t0, p), Some((ms(80), ms(16))), "a rise is taken at once");
        m.learn(t0, p, RttReport::Measured { srtt: ms(0), rttvar: ms(0) });
        assert_eq!(m.get(t0, p), Some((ms(70), ms(12))), "a fall moves 1/8 (1/4 for the variation)");
        m.learn(t0, p, RttReport::Failed);
        assert_eq!(m.get(t0, p), None, "a failed connection forgets the peer");
        m.learn(t0, p, RttReport::Measured { srtt: ms(5), rttvar: ms(1) });
        let late = t0 + Duration::from_secs(600);
        assert_eq!(m.get(late, p), None, "past its lifetime");
        m.learn(late, p, RttReport::Measured { srtt: ms(2), rttvar: ms(1) });
        assert_eq!(m.get(late, p), Some((ms(2), ms(1))), "an aged entry is replaced, not merged");
        let mut off = RttMemory::new(0, Duration::from_secs(600));
        off.learn(t0, p, RttReport::Measured { srtt: ms(40), rttvar: ms(8) });
        assert_eq!(off.get(t0, p), None, "max_peer_rtts 0 remembers nothing");
    }
}
