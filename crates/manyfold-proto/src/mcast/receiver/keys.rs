//! A protected session's receiver side (spec §19.7): which packets may be
//! taken in the clear or under which source, the invitation, the
//! registration's handshake and the grant of the group key.

use super::config::Delivery;
use super::{McastReceiver, ReceiverTimer};
use crate::mcast::secure::{identity, Grant, GroupKeys, Ignored, Pattern, Unseal, MAX_SOURCES};
use crate::secure::{Handshake, SecurityConfig, KEY_LEN};
use crate::wire::mcast::{parse_announcement, McPacket};
use crate::wire::Header;
use rand::RngCore;
use rand_chacha::ChaCha20Rng;
use std::net::SocketAddr;
use std::time::Instant;

/// What an invitation offered: session, pattern, the sender's key.
pub(super) type Invitation = (u32, Pattern, [u8; KEY_LEN]);

/// A registration under way in a protected session (spec §19.7).
pub(super) struct Pending {
    pub(super) handshake: Handshake,
    /// What it runs with, and where the invitation came from (neither is
    /// authenticated yet: the session is bound only once the grant opens).
    pub(super) invitation: Invitation,
    pub(super) from: SocketAddr,
    /// Its message 1, sent again until answered.
    pub(super) m1: Vec<u8>,
    /// When it began: another invitation replaces it only after
    /// `PENDING_MIN_LIFE` register retries, so that forged invitations
    /// cannot keep a receiver from registering (or burn its CPU).
    pub(super) since: Instant,
}

/// Register retries a pending registration lives before another
/// invitation may replace it.
pub(super) const PENDING_MIN_LIFE: u32 = 3;

/// A protected receiver's keys (spec §19.7).
pub(super) struct ReceiverSecurity {
    pub(super) config: SecurityConfig,
    pub(super) rng: ChaCha20Rng,
    pub(super) pending: Option<Pending>,
    pub(super) keys: Option<GroupKeys>,
}

impl std::fmt::Debug for ReceiverSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceiverSecurity").field("keys", &self.keys).finish()
    }
}

impl McastReceiver {
    /// spec §19.7: a sealed packet, opened in place under the group key.
    pub(super) fn on_sealed(&mut self, now: Instant, from: SocketAddr, data: &mut [u8]) -> Option<Delivery> {
        let keys = self.security.as_mut().and_then(|s| s.keys.as_mut());
        let (Some(keys), Ok(_)) = (keys, Header::parse(data)) else {
            self.stats.dropped_no_key += 1;
            return None;
        };
        match keys.open(data) {
            Ok((source, plain)) => {
                let at = plain.start;
                self.on_packet(now, from, &data[plain], at, Some(source))
            }
            Err(Unseal::Ours) => None,
            Err(Unseal::Replayed) => {
                self.stats.dropped_replayed += 1;
                None
            }
            Err(Unseal::Forged) => {
                self.stats.dropped_unauthenticated += 1;
                None
            }
            Err(Unseal::Malformed | Unseal::TooManySources) => {
                self.stats.dropped_malformed += 1;
                None
            }
        }
    }

    /// spec §19.7: whether a packet may be taken. A protected receiver
    /// takes in the clear only the key exchange (and, before it has keys, a
    /// refusal), the sender's packets only from source 0 and feedback only
    /// from a receiver's; a plain one notes protected sessions it hears.
    pub(super) fn takes(&mut self, p: &McPacket<'_>, session: u32, source: Option<u32>) -> bool {
        let protected = self.security.is_some();
        let ok = match (source, p) {
            (None, McPacket::Invite { .. }) if !protected => {
                self.ignored = Some((session, Ignored::ProtectedSession));
                false
            }
            (None, _) if !protected => true,
            // The key exchange, until it is done.
            (None, McPacket::Invite { .. } | McPacket::RegisterKeys { .. }) if !self.registered => true,
            (None, McPacket::End { error: Some(_), client, .. }) => !self.registered && *client == self.client,
            (None, other) => {
                if matches!(other, McPacket::Announce { .. }) && !self.registered {
                    self.ignored = Some((session, Ignored::PlainSession));
                }
                self.stats.dropped_unprotected += 1;
                return false;
            }
            (Some(s), McPacket::Ack { .. } | McPacket::Nack { .. }) => s != 0,
            (Some(s), _) => s == 0,
        };
        if !ok && source.is_some() {
            self.stats.dropped_unauthenticated += 1;
        }
        ok
    }

    /// A protected session's invitation (spec §19.7): start the
    /// registration's handshake, unless we cannot or are registered. The
    /// invitation is not authenticated: it binds nothing until the grant
    /// opens, and replaces a pending registration only once that has had
    /// its chance.
    pub(super) fn on_invite(
        &mut self,
        now: Instant,
        from: SocketAddr,
        session: u32,
        pattern: Pattern,
        key: [u8; KEY_LEN],
    ) {
        let Some(sec) = self.security.as_mut() else { return };
        if self.registered {
            return;
        }
        if let Some(why) = pattern.refusal(&sec.config, &key) {
            self.ignored = Some((session, why));
            return;
        }
        let invitation = (session, pattern, key);
        let young = now < sec.pending.as_ref().map_or(now, |p| p.since + self.cfg.register_retry * PENDING_MIN_LIFE);
        if sec.pending.as_ref().is_some_and(|p| p.invitation == invitation) || young {
            return;
        }
        let mut seed = [0u8; 32];
        sec.rng.fill_bytes(&mut seed);
        let mut handshake = pattern.handshake(&sec.config, session, &key, true, seed);
        let Ok(m1) = handshake.write_with(&identity(self.client, self.cfg.network)) else { return };
        sec.pending = Some(Pending { handshake, invitation, from, m1, since: now });
        self.timers.cancel(ReceiverTimer::Register);
        self.request_registration(now);
    }

    /// REGISTER+ACK of a protected session: Noise message 2, whose payload
    /// grants the group key, our source number and the session description.
    pub(super) fn on_register_keys(&mut self, now: Instant, session: u32, noise: &[u8]) {
        if self.registered {
            return;
        }
        let Some(sec) = self.security.as_mut() else { return };
        let Some(p) = sec.pending.as_mut().filter(|p| p.invitation.0 == session) else { return };
        // A forgery fails and leaves the handshake as it was (snow restores
        // its state), so the real answer still opens.
        let Some(grant) = p.handshake.read_with(noise).ok().and_then(|p| Grant::decode(&p)) else {
            self.stats.dropped_unauthenticated += 1;
            return;
        };
        let mut keys = GroupKeys::new(&grant.key, grant.source, MAX_SOURCES);
        // The sender's packets sealed before the grant are old news: a
        // replay of them is refused from the start.
        keys.start_source(0, grant.pn);
        sec.keys = Some(keys);
        let from = p.from;
        sec.pending = None;
        // Only now is the session bound (spec §19.7).
        self.session = Some(session);
        self.sender = Some(from);
        self.heard_sender(now);
        self.on_registered(now, grant.from_sn, parse_announcement(&grant.info).ok());
    }

    /// The session and sender packets go to: the registered (or plain)
    /// one, else a protected registration's pending invitation.
    pub(super) fn target(&self) -> Option<(u32, SocketAddr)> {
        if let (Some(session), Some(sender)) = (self.session, self.sender) {
            return Some((session, sender));
        }
        let p = self.security.as_ref()?.pending.as_ref()?;
        Some((p.invitation.0, p.from))
    }
}
