//! A protected session's sender side (spec §19.7): the group key, the
//! registration handshakes that hand it out (budgeted per second), the
//! invitation, and opening sealed packets from granted sources only.

use super::config::SenderConfig;
use super::{Control, McastSender};
use crate::mcast::secure::{identity, Grant, GroupKeys, Pattern, Unseal};
use crate::mcast::McTransmit;
use crate::secure::{public_key, SecurityConfig, KEY_LEN};
use crate::wire::mcast::{emit, emit_announcement, emit_invitation};
use crate::wire::{ErrorCode, Flags, Header, PacketType};
use rand::RngCore;
use rand_chacha::ChaCha20Rng;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// A protected session's keys (spec §19.7).
pub(super) struct SenderSecurity {
    pub(super) config: SecurityConfig,
    pub(super) pattern: Pattern,
    /// Our static public key, announced (zeros under NNpsk0).
    pub(super) public: [u8; KEY_LEN],
    pub(super) rng: ChaCha20Rng,
    pub(super) group_key: [u8; KEY_LEN],
    pub(super) keys: GroupKeys,
    pub(super) next_source: u32,
    /// Source numbers granted, and to which receiver.
    pub(super) granted: HashMap<u32, usize>,
    /// Handshakes left in this second's budget, and when it refills.
    pub(super) tokens: f64,
    pub(super) refilled: Instant,
}

/// A repeated REGISTER is answered again at most this often.
pub(super) const REANSWER_GAP: Duration = Duration::from_millis(100);

impl SenderSecurity {
    pub(super) fn new(config: SecurityConfig, cfg: &SenderConfig, now: Instant) -> Self {
        let mut rng = crate::secure::crypto_rng(cfg.seed, cfg.crypto_seed);
        let mut group_key = [0u8; KEY_LEN];
        rng.fill_bytes(&mut group_key);
        SenderSecurity {
            pattern: Pattern::of_sender(&config),
            public: config.private_key.map(|k| public_key(&k)).unwrap_or_default(),
            keys: GroupKeys::new(&group_key, 0, cfg.max_receivers.saturating_mul(2) + 1),
            config,
            rng,
            group_key,
            next_source: 1,
            granted: HashMap::new(),
            tokens: f64::from(cfg.max_handshakes_per_sec),
            refilled: now,
        }
    }
}

impl std::fmt::Debug for SenderSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SenderSecurity").field("pattern", &self.pattern).field("keys", &self.keys).finish()
    }
}

impl McastSender {
    /// spec §19.7: a sealed packet, opened under the group key.
    pub(super) fn on_sealed(&mut self, now: Instant, from: SocketAddr, data: &[u8]) {
        let (Some(sec), Ok(_)) = (self.security.as_mut(), Header::parse(data)) else {
            self.stats.dropped_malformed += 1;
            return;
        };
        // Only sources we granted (and our own, looped back) are opened at
        // all: made-up ones would fill the replay table (spec §19.7).
        match GroupKeys::source_of(data) {
            Some(0) => return,
            Some(s) if sec.granted.contains_key(&s) => {}
            _ => {
                self.stats.dropped_unauthenticated += 1;
                return;
            }
        }
        let mut buf = std::mem::take(&mut self.opened);
        buf.clear();
        buf.extend_from_slice(data);
        match sec.keys.open(&mut buf) {
            Ok((source, plain)) => self.on_packet(now, from, &buf[plain], Some(source)),
            Err(Unseal::Ours) => {}
            Err(Unseal::Replayed) => self.stats.dropped_replayed += 1,
            Err(Unseal::Forged) => self.stats.dropped_unauthenticated += 1,
            Err(Unseal::Malformed | Unseal::TooManySources) => self.stats.dropped_malformed += 1,
        }
        self.opened = buf;
    }

    /// spec §19.7: REGISTER carries Noise message 1; once it proves the
    /// receiver, REGISTER+ACK carries message 2 with the group key, the
    /// receiver's source number and the session description.
    pub(super) fn on_keyed_register(
        &mut self,
        now: Instant,
        from: SocketAddr,
        client: u32,
        network: u32,
        regroupable: bool,
        m1: &[u8],
    ) {
        let known = self.by_client.get(&client).copied();
        if let Some(idx) = known {
            // Its registration stands: only the same message 1 (our answer
            // was lost) is answered again, to the address it registered
            // from, and at most every REANSWER_GAP. A replayed REGISTER
            // moves nothing and keeps nobody alive; a second handshake for
            // a registered client id (another member naming it) is refused.
            let r = &mut self.receivers[idx];
            let same = r.registration.as_ref().is_some_and(|reg| reg.0 == m1);
            if same && r.answered_at.is_none_or(|t| now >= t + REANSWER_GAP) {
                r.answered_at = Some(now);
                self.control.push_back(Control::RegisterAck { idx });
            } else {
                self.stats.registrations_ignored += 1;
            }
            return;
        }
        if self.full() {
            self.stats.refused += 1;
            self.control.push_back(Control::Refuse { addr: from, client, code: ErrorCode::REFUSED });
            return;
        }
        let from_sn = self.joining_sn();
        let mut info = vec![0u8; 64 + 255];
        let n = emit_announcement(&mut info, &self.info);
        info.truncate(n);
        let Some(sec) = self.security.as_mut() else { return };
        // Each handshake costs a few X25519 operations, for a packet anyone
        // can send: a budget per second, as for resets (spec §6.5).
        let rate = f64::from(self.cfg.max_handshakes_per_sec);
        sec.tokens = (sec.tokens + now.saturating_duration_since(sec.refilled).as_secs_f64() * rate).min(rate);
        sec.refilled = now;
        if sec.tokens < 1.0 {
            self.stats.registrations_ignored += 1;
            return;
        }
        sec.tokens -= 1.0;
        let mut seed = [0u8; 32];
        sec.rng.fill_bytes(&mut seed);
        let mut hs = sec.pattern.handshake(&sec.config, self.session, &sec.public, false, seed);
        // The ids inside message 1 are authenticated; the header's must match.
        let proven = hs.read_with(m1).is_ok_and(|id| id == identity(client, network));
        if !proven || sec.next_source == u32::MAX {
            self.stats.auth_failures += 1;
            let code = ErrorCode::AUTHENTICATION_FAILED;
            self.control.push_back(Control::Refuse { addr: from, client, code });
            return;
        }
        let source = sec.next_source;
        let grant = Grant { source, from_sn, pn: sec.keys.sealed(), key: sec.group_key, info };
        let Ok(reply) = hs.write_with(&grant.encode()) else {
            self.stats.auth_failures += 1;
            return;
        };
        sec.next_source += 1;
        let peer_key = hs.peer_key();
        let Some(idx) = self.admit(now, from, client, network, regroupable) else { return };
        if let Some(sec) = self.security.as_mut() {
            sec.granted.insert(source, idx);
        }
        let r = &mut self.receivers[idx];
        r.source = source;
        r.peer_key = peer_key;
        r.registration = Some(Box::new((m1.to_vec(), reply)));
        r.answered_at = Some(now);
        self.control.push_back(Control::RegisterAck { idx });
    }

    /// A protected session's invitation, in the clear (spec §19.7): how to
    /// register, and nothing of the session itself.
    pub(super) fn send_invitation(&mut self, buf: &mut [u8]) -> Option<McTransmit> {
        let sec = self.security.as_ref()?;
        let (pattern, key) = (sec.pattern, sec.public);
        let n = emit(buf, PacketType::McAnnounce, Flags::CKE, self.session, 0, 0, 0, |o| {
            emit_invitation(o, pattern, &key)
        })?;
        self.send_clear = true;
        Some(McTransmit { destination: self.group, size: n })
    }
}
