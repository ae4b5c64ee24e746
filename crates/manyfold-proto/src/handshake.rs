//! Keyed secrets of an endpoint: initial sequence numbers (spec §6.3), the
//! listener's stateless cookie (spec §6.2), and its address-validation
//! tokens with the replay window of the 0-RTT data they admit (spec §6.9).

use std::hash::Hasher;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rand::RngCore;
use siphasher::sip::SipHasher24;

use crate::ids::ConnId;
use crate::wire::{Cookie, Token};

/// The per-endpoint secrets, drawn once from the endpoint's seeded RNG.
#[derive(Debug)]
pub(crate) struct Secrets {
    isn_key: [u8; 16],
    cookie_key: [u8; 16],
    /// Keys address-validation tokens (spec §6.9); derived from the cookie
    /// key, so it draws nothing more from the seeded RNG.
    token_key: [u8; 16],
    /// Clock origin for ISN time counters and cookie timestamps.
    epoch: Instant,
}

/// Inputs the cookie's MAC covers besides the cookie's own fields.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CookieBinding {
    pub peer: SocketAddr,
    pub client_isn: u32,
    pub server_isn: u32,
    pub server_id: ConnId,
}

impl Secrets {
    pub fn new(rng: &mut impl RngCore, epoch: Instant) -> Self {
        let mut isn_key = [0u8; 16];
        let mut cookie_key = [0u8; 16];
        rng.fill_bytes(&mut isn_key);
        rng.fill_bytes(&mut cookie_key);
        let derive = |label: &[u8]| {
            let mut h = SipHasher24::new_with_key(&cookie_key);
            h.write(label);
            h.finish().to_le_bytes()
        };
        let mut token_key = [0u8; 16];
        token_key[..8].copy_from_slice(&derive(b"manyfold token key 0"));
        token_key[8..].copy_from_slice(&derive(b"manyfold token key 1"));
        Secrets { isn_key, cookie_key, token_key, epoch }
    }

    /// RFC 6528: ISN = M + F(connection, secret). M is a counter ticking every
    /// 4 µs (RFC 793's clock); F is SipHash-2-4 keyed with the endpoint secret
    /// over the peer's address and the connection ids already known. Paper 04
    /// eq. 2 and paper 01 eq. 1 use MD5 for F; SipHash is a keyed PRF made for
    /// this and far cheaper (spec §6.3).
    pub fn isn(&self, now: Instant, peer: SocketAddr, ids: (u32, u32)) -> u32 {
        let ticks = (now.saturating_duration_since(self.epoch).as_micros() / 4) as u32;
        let mut h = SipHasher24::new_with_key(&self.isn_key);
        hash_addr(&mut h, peer);
        h.write_u32(ids.0);
        h.write_u32(ids.1);
        ticks.wrapping_add(h.finish() as u32)
    }

    /// Milliseconds since the epoch, the cookie's timestamp unit.
    pub fn timestamp(&self, now: Instant) -> u32 {
        now.saturating_duration_since(self.epoch).as_millis() as u32
    }

    pub fn make_cookie(&self, now: Instant, client_id: u32, client_max_datagram: u16, b: CookieBinding) -> Cookie {
        let mut c = Cookie { timestamp: self.timestamp(now), client_id, client_max_datagram, echo_delay: 0, mac: 0 };
        c.mac = self.mac(&c, &b);
        c
    }

    /// spec §6.2: a cookie is valid if its MAC matches and it is no older than
    /// `lifetime` (and not from the future).
    pub fn check_cookie(&self, now: Instant, lifetime: Duration, c: &Cookie, b: &CookieBinding) -> bool {
        let age = self.timestamp(now).wrapping_sub(c.timestamp);
        // A timestamp from the future wraps to a huge age and fails too.
        if u128::from(age) > lifetime.as_millis() {
            return false;
        }
        // Constant-time enough: a single u64 compare of a keyed MAC.
        self.mac(c, b) == c.mac
    }

    /// spec §6.9: a token for a client at `peer`'s IP address (not its
    /// port: a repeat client comes from a new port each time).
    pub fn make_token(&self, now: Instant, peer: SocketAddr) -> Token {
        let timestamp = self.timestamp(now);
        Token { timestamp, mac: self.token_mac(peer, timestamp) }
    }

    /// spec §6.9: a token is good if its MAC matches the address the SYN
    /// came from and it is no older than `lifetime` (nor from the future).
    pub fn check_token(&self, now: Instant, lifetime: Duration, peer: SocketAddr, t: &Token) -> bool {
        let age = self.timestamp(now).wrapping_sub(t.timestamp);
        u128::from(age) <= lifetime.as_millis() && self.token_mac(peer, t.timestamp) == t.mac
    }

    /// spec §6.9: what names one 0-RTT first packet in the replay window:
    /// the client's IP address (any port: a replay may come from another),
    /// its connection id and ISN, and the token.
    pub fn early_key(&self, peer: SocketAddr, client_id: u32, client_isn: u32, t: &Token) -> u64 {
        let mut h = SipHasher24::new_with_key(&self.token_key);
        hash_ip(&mut h, peer);
        h.write_u32(client_id);
        h.write_u32(client_isn);
        h.write_u64(t.mac);
        h.finish()
    }

    fn token_mac(&self, peer: SocketAddr, timestamp: u32) -> u64 {
        let mut h = SipHasher24::new_with_key(&self.token_key);
        hash_ip(&mut h, peer);
        h.write_u32(timestamp);
        h.finish()
    }

    fn mac(&self, c: &Cookie, b: &CookieBinding) -> u64 {
        let mut h = SipHasher24::new_with_key(&self.cookie_key);
        hash_addr(&mut h, b.peer);
        h.write_u32(c.timestamp);
        h.write_u32(c.client_id);
        h.write_u16(c.client_max_datagram);
        h.write_u32(b.client_isn);
        h.write_u32(b.server_isn);
        h.write_u32(b.server_id.wire());
        h.finish()
    }
}

/// spec §6.2: remembers the cookies that created a connection until they
/// expire, so a replayed or late duplicate echo creates nothing (a request
/// riding on it is never delivered twice). Bounded: when full, the oldest
/// entry is evicted and every cookie made before it is refused as expired,
/// so the guarantee holds at any size.
#[derive(Debug)]
pub(crate) struct ReplayCache {
    seen: std::collections::HashSet<u64>,
    order: std::collections::VecDeque<(u32, u64)>,
    /// Cookies older than this timestamp are refused.
    floor: u32,
    limit: usize,
}

impl ReplayCache {
    pub fn new(limit: usize) -> Self {
        ReplayCache {
            seen: std::collections::HashSet::new(),
            order: std::collections::VecDeque::new(),
            floor: 0,
            limit: limit.max(1),
        }
    }

    /// Records `c` and says whether it is fresh. `now_ts` is the current
    /// cookie timestamp; the cookie's MAC was already checked.
    pub fn admit(&mut self, _now: Instant, c: &Cookie, lifetime: Duration, now_ts: u32) -> bool {
        let life = u32::try_from(lifetime.as_millis()).unwrap_or(u32::MAX);
        while let Some(&(ts, mac)) = self.order.front() {
            if now_ts.wrapping_sub(ts) <= life {
                break;
            }
            self.order.pop_front();
            self.seen.remove(&mac);
        }
        if c.timestamp.wrapping_sub(self.floor) > u32::MAX / 2 || self.seen.contains(&c.mac) {
            return false;
        }
        if self.order.len() >= self.limit {
            if let Some((ts, mac)) = self.order.pop_front() {
                self.seen.remove(&mac);
                self.floor = ts.wrapping_add(1);
            }
            if c.timestamp.wrapping_sub(self.floor) > u32::MAX / 2 {
                return false;
            }
        }
        self.seen.insert(c.mac);
        self.order.push_back((c.timestamp, c.mac));
        true
    }
}

/// spec §6.9: remembers the 0-RTT first packets a listener took, so that a
/// replayed one is not served again: it falls back to the full handshake,
/// whose cookie echo only the real client (still in SYN-SENT) sends.
/// Entries live as long as the token they came with; the window holds at
/// most `limit`. When full, the oldest entry is evicted and the floor rises
/// past its token's timestamp: tokens made at or before it admit no 0-RTT
/// data any more (their SYNs fall back), so nothing evicted can be replayed.
#[derive(Debug)]
pub(crate) struct EarlyReplay {
    seen: std::collections::HashSet<u64>,
    order: std::collections::VecDeque<(u32, u64)>,
    /// Tokens made before this timestamp admit no 0-RTT data.
    floor: Option<u32>,
    limit: usize,
}

impl EarlyReplay {
    pub fn new(limit: usize) -> Self {
        EarlyReplay {
            seen: std::collections::HashSet::new(),
            order: std::collections::VecDeque::new(),
            floor: None,
            limit: limit.max(1),
        }
    }

    /// Records the first packet named `key`, sent with a token made at
    /// `token_ts`, and says whether it is new. `now_ts` is the listener's
    /// timestamp now; `lifetime` the tokens' (spec §6.9).
    pub fn admit(&mut self, key: u64, token_ts: u32, now_ts: u32, lifetime: Duration) -> bool {
        let life = u32::try_from(lifetime.as_millis()).unwrap_or(u32::MAX / 2);
        // Entries whose token has expired can no longer be presented.
        while let Some(&(ts, k)) = self.order.front() {
            if now_ts.wrapping_sub(ts) <= life {
                break;
            }
            self.order.pop_front();
            self.seen.remove(&k);
        }
        let below_floor = |floor: Option<u32>, ts: u32| floor.is_some_and(|f| ts.wrapping_sub(f) > u32::MAX / 2);
        if below_floor(self.floor, token_ts) || self.seen.contains(&key) {
            return false;
        }
        if self.order.len() >= self.limit {
            if let Some((ts, k)) = self.order.pop_front() {
                self.seen.remove(&k);
                let next = ts.wrapping_add(1);
                // The floor only rises (entries need not be in timestamp order).
                if self.floor.is_none_or(|f| f.wrapping_sub(next) > u32::MAX / 2) {
                    self.floor = Some(next);
                }
            }
            if below_floor(self.floor, token_ts) {
                return false;
            }
        }
        self.seen.insert(key);
        self.order.push_back((token_ts, key));
        true
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.seen.len()
    }
}

fn hash_ip(h: &mut SipHasher24, a: SocketAddr) {
    match a {
        SocketAddr::V4(v4) => h.write(&v4.ip().octets()),
        SocketAddr::V6(v6) => h.write(&v6.ip().octets()),
    }
}

fn hash_addr(h: &mut SipHasher24, a: SocketAddr) {
    match a {
        SocketAddr::V4(v4) => h.write(&v4.ip().octets()),
        SocketAddr::V6(v6) => h.write(&v6.ip().octets()),
    }
    h.write_u16(a.port());
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn secrets(seed: u64) -> (Secrets, Instant) {
        let t0 = Instant::now();
        (Secrets::new(&mut rand_chacha::ChaCha8Rng::seed_from_u64(seed), t0), t0)
    }

    fn binding() -> CookieBinding {
        CookieBinding {
            peer: "127.0.0.1:4000".parse().unwrap(),
            client_isn: 1,
            server_isn: 2,
            server_id: ConnId::from_wire(3).unwrap(),
        }
    }

    #[test]
    fn cookie_checks_within_lifetime_only() {
        let (s, t0) = secrets(1);
        let c = s.make_cookie(t0, 7, 1452, binding());
        let life = Duration::from_secs(60);
        assert!(s.check_cookie(t0 + Duration::from_secs(59), life, &c, &binding()));
        assert!(!s.check_cookie(t0 + Duration::from_secs(61), life, &c, &binding()));
    }

    #[test]
    fn cookie_is_bound_to_address_and_isns() {
        let (s, t0) = secrets(1);
        let c = s.make_cookie(t0, 7, 1452, binding());
        let life = Duration::from_secs(60);
        let mut b = binding();
        b.peer = "127.0.0.2:4000".parse().unwrap();
        assert!(!s.check_cookie(t0, life, &c, &b));
        let mut b = binding();
        b.server_isn ^= 1;
        assert!(!s.check_cookie(t0, life, &c, &b));
        let mut forged = c;
        forged.client_id ^= 1;
        assert!(!s.check_cookie(t0, life, &forged, &binding()));
    }

    #[test]
    fn another_endpoints_cookie_is_rejected() {
        let (a, t0) = secrets(1);
        let (b, _) = secrets(2);
        let c = a.make_cookie(t0, 7, 1452, binding());
        assert!(!b.check_cookie(t0, Duration::from_secs(60), &c, &binding()));
    }

    #[test]
    fn replay_cache_admits_each_cookie_once_and_stays_bounded() {
        let (s, t0) = secrets(1);
        let life = Duration::from_secs(60);
        let mut cache = ReplayCache::new(2);
        let c1 = s.make_cookie(t0, 1, 1452, binding());
        let c2 = s.make_cookie(t0 + Duration::from_millis(1), 2, 1452, binding());
        let c3 = s.make_cookie(t0 + Duration::from_millis(2), 3, 1452, binding());
        assert!(cache.admit(t0, &c1, life, 2));
        assert!(!cache.admit(t0, &c1, life, 2), "a replay is refused");
        assert!(cache.admit(t0, &c2, life, 2));
        assert!(cache.admit(t0, &c3, life, 2), "full: evicts c1 and raises the floor");
        assert!(!cache.admit(t0, &c1, life, 2), "an evicted cookie is below the floor");
        assert!(cache.seen.len() <= 2);
    }

    #[test]
    fn a_token_is_good_from_its_ip_at_any_port_within_its_lifetime_only() {
        let (s, t0) = secrets(1);
        let life = Duration::from_secs(600);
        let at: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let t = s.make_token(t0, at);
        assert!(s.check_token(t0 + Duration::from_secs(599), life, "127.0.0.1:5000".parse().unwrap(), &t));
        assert!(!s.check_token(t0 + Duration::from_secs(601), life, at, &t), "expired");
        assert!(!s.check_token(t0, life, "127.0.0.2:4000".parse().unwrap(), &t), "another address");
        let (other, _) = secrets(2);
        assert!(!other.check_token(t0, life, at, &t), "another listener's token");
        let forged = Token { timestamp: t.timestamp.wrapping_add(1), ..t };
        assert!(!s.check_token(t0 + Duration::from_secs(1), life, at, &forged));
    }

    #[test]
    fn the_early_replay_window_takes_each_first_packet_once_and_stays_bounded() {
        let life = Duration::from_secs(600);
        let mut w = EarlyReplay::new(2);
        assert!(w.admit(1, 10, 10, life));
        assert!(!w.admit(1, 10, 11, life), "a replay is refused");
        assert!(w.admit(2, 12, 12, life));
        assert!(w.admit(3, 11, 13, life), "full: evicts key 1 and raises the floor past 10");
        assert!(!w.admit(1, 10, 14, life), "an evicted packet's token is below the floor");
        assert!(!w.admit(4, 9, 14, life), "so is any older token");
        assert!(w.admit(5, 14, 14, life), "full again: evicts key 2 (ts 12)");
        assert!(!w.admit(6, 11, 15, life), "the floor rose to 13: key 3's replay cannot pass it");
        assert!(w.len() <= 2);
        // Entries leave when their token expires.
        let mut w = EarlyReplay::new(8);
        assert!(w.admit(1, 0, 0, Duration::from_millis(5)));
        assert!(w.admit(2, 10, 10, Duration::from_millis(5)));
        assert_eq!(w.len(), 1);
    }

    #[test]
    fn isn_depends_on_peer_and_advances_with_time() {
        let (s, t0) = secrets(1);
        let p1: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let p2: SocketAddr = "127.0.0.1:2".parse().unwrap();
        assert_ne!(s.isn(t0, p1, (1, 0)), s.isn(t0, p2, (1, 0)));
        let a = s.isn(t0, p1, (1, 0));
        let b = s.isn(t0 + Duration::from_millis(4), p1, (1, 0));
        assert_eq!(b.wrapping_sub(a), 1000);
    }
}
