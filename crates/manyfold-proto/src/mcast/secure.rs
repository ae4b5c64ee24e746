//! Protected multicast sessions (spec §19.7).
//!
//! A sender configured with keys makes a random **group key** for the
//! session and hands it to each receiver inside the Noise handshake that
//! its registration carries (REGISTER: message 1; REGISTER+ACK: message 2,
//! whose encrypted payload holds the key). From then on every packet of
//! the session, the sender's and the receivers', is **sealed** under the
//! group key: ChaCha20-Poly1305 over the inner type and payload, the
//! header and a (source, packet number) pair authenticated with it. The
//! source is 0 for the sender and a number the sender gives each
//! registration, never twice in a session, so no nonce repeats.

use std::collections::HashMap;
use std::ops::Range;

use snow::params::NoiseParams;

use crate::secure::{Handshake, PacketKey, ReplayWindow, SecurityConfig, KEY_LEN, NONCE_LEN};
use crate::wire::{seal as seal_crc, PacketType, HEADER_LEN};

/// Where a sealed packet's source, packet number and ciphertext start.
const SOURCE_AT: usize = HEADER_LEN;
const PN_AT: usize = HEADER_LEN + 4;
const BODY_AT: usize = HEADER_LEN + 12;
const TAG_LEN: usize = crate::secure::AEAD_TAG_LEN;
/// Bytes sealing adds to a multicast packet: source, packet number, the
/// inner type, the tag (spec §19.7).
pub const SEAL_OVERHEAD: usize = 4 + 8 + 1 + TAG_LEN;
/// Sources a receiver keeps replay windows for (the sender's and other
/// receivers' feedback); packets of further sources are dropped.
pub(crate) const MAX_SOURCES: usize = 4096;

pub use crate::wire::mcast::Pattern;

/// What a pattern takes of the keys (declared with the wire, spec §16.2).
impl Pattern {
    /// The pattern a sender with `config` runs: IK when it has a static
    /// key to prove, else the PSK alone.
    pub(crate) fn of_sender(config: &SecurityConfig) -> Pattern {
        match (config.private_key.is_some(), config.psk.is_some()) {
            (true, false) => Pattern::Ik,
            (true, true) => Pattern::IkPsk1,
            (false, _) => Pattern::NnPsk0,
        }
    }

    /// Why a receiver with `config` cannot run this pattern with a sender
    /// announcing `sender_key`, if it cannot.
    pub(crate) fn refusal(self, config: &SecurityConfig, sender_key: &[u8; KEY_LEN]) -> Option<Ignored> {
        let psk = matches!(self, Pattern::IkPsk1 | Pattern::NnPsk0);
        if psk != config.psk.is_some() {
            return Some(Ignored::PskMismatch);
        }
        match self {
            // Without known peers only the PSK authenticates the sender.
            Pattern::Ik | Pattern::IkPsk1 => (!config.known_peers.is_empty()
                && !config.known_peers.contains(sender_key))
            .then_some(Ignored::UnknownSender),
            // A receiver that names its peers wants the sender's key proven.
            Pattern::NnPsk0 => (!config.known_peers.is_empty()).then_some(Ignored::UnknownSender),
        }
    }

    fn params(self) -> NoiseParams {
        match self {
            Pattern::Ik => "Noise_IK_25519_ChaChaPoly_BLAKE2s",
            Pattern::IkPsk1 => "Noise_IKpsk1_25519_ChaChaPoly_BLAKE2s",
            Pattern::NnPsk0 => "Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s",
        }
        .parse()
        .expect("a valid Noise pattern")
    }

    /// A registration handshake of session `session`: the receiver is the
    /// initiator; `sender_key` is the announced static key (IK).
    pub(crate) fn handshake(
        self,
        config: &SecurityConfig,
        session: u32,
        sender_key: &[u8; KEY_LEN],
        initiator: bool,
        seed: [u8; 32],
    ) -> Handshake {
        let psk = match self {
            Pattern::Ik => None,
            Pattern::IkPsk1 => config.psk.map(|k| (1, k)),
            Pattern::NnPsk0 => config.psk.map(|k| (0, k)),
        };
        let remote = (initiator && self != Pattern::NnPsk0).then_some(sender_key);
        let mut prologue = b"manyfold mcast 1".to_vec();
        prologue.extend_from_slice(&session.to_be_bytes());
        prologue.push(self as u8);
        Handshake::build(self.params(), config, psk, remote, &prologue, initiator, seed)
    }
}

/// Why a receiver did not join a session it heard (spec §19.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ignored {
    /// A plain session, and this receiver requires protection.
    PlainSession,
    /// A protected session, and this receiver has no keys.
    ProtectedSession,
    /// One side has a PSK and the other not.
    PskMismatch,
    /// The sender's static key is not among the known peers (or it proves
    /// none, and the receiver names its peers).
    UnknownSender,
}

impl std::fmt::Display for Ignored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Ignored::PlainSession => "it is plain (unencrypted) and this receiver requires encryption",
            Ignored::ProtectedSession => {
                "it is encrypted and this receiver has no key (a pre-shared key or static keys)"
            }
            Ignored::PskMismatch => "one side has a pre-shared key and the other not",
            Ignored::UnknownSender => "the sender's public key is not among the known peers",
        })
    }
}

/// Why a sealed packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unseal {
    Malformed,
    /// One of our own (multicast loops back to its sender).
    Ours,
    Replayed,
    Forged,
    /// A new source with the table of replay windows full.
    TooManySources,
}

/// The group key of one session, as one source uses it (spec §19.7).
pub(crate) struct GroupKeys {
    key: PacketKey,
    source: u32,
    next_pn: u64,
    seen: HashMap<u32, ReplayWindow>,
    max_sources: usize,
}

impl std::fmt::Debug for GroupKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupKeys").field("source", &self.source).field("next_pn", &self.next_pn).finish()
    }
}

fn nonce(source: u32, pn: u64) -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    n[..4].copy_from_slice(&source.to_be_bytes());
    n[4..].copy_from_slice(&pn.to_be_bytes());
    n
}

/// Associated data: the header without its CRC, the source and the packet number.
fn associated_data(datagram: &[u8]) -> [u8; 20 + 12] {
    let mut ad = [0u8; 32];
    ad[..20].copy_from_slice(&datagram[..20]);
    ad[20..].copy_from_slice(&datagram[SOURCE_AT..BODY_AT]);
    ad
}

impl GroupKeys {
    pub(crate) fn new(key: &[u8; KEY_LEN], source: u32, max_sources: usize) -> Self {
        GroupKeys { key: PacketKey::new(key), source, next_pn: 0, seen: HashMap::new(), max_sources }
    }

    /// Packets this source sealed so far (the next packet number).
    pub(crate) fn sealed(&self) -> u64 {
        self.next_pn
    }

    /// Starts `source`'s replay window with everything below `next` seen
    /// (spec §19.7: a receiver refuses the sender's packets sealed before
    /// its grant); its place in the table is kept whatever else fills it.
    pub(crate) fn start_source(&mut self, source: u32, next: u64) {
        self.seen.insert(source, ReplayWindow::below(next));
    }

    /// The source a sealed datagram claims, if it is long enough to be one.
    pub(crate) fn source_of(data: &[u8]) -> Option<u32> {
        Some(u32::from_be_bytes(data.get(SOURCE_AT..PN_AT)?.try_into().ok()?))
    }

    /// Seals the plain multicast datagram in `buf[..len]` in place; `buf`
    /// must hold `len + SEAL_OVERHEAD` bytes. Returns the sealed length.
    pub(crate) fn seal(&mut self, buf: &mut [u8], len: usize) -> usize {
        let total = len + SEAL_OVERHEAD;
        let pn = self.next_pn;
        self.next_pn += 1;
        let inner = buf[0] & 0x0f;
        buf.copy_within(HEADER_LEN..len, BODY_AT + 1);
        buf[BODY_AT] = inner;
        buf[SOURCE_AT..PN_AT].copy_from_slice(&self.source.to_be_bytes());
        buf[PN_AT..BODY_AT].copy_from_slice(&pn.to_be_bytes());
        buf[0] = (buf[0] & 0xf0) | PacketType::McSealed as u8;
        buf[2..4].copy_from_slice(&((total - HEADER_LEN) as u16).to_be_bytes());
        let ad = associated_data(buf);
        let tag = self.key.seal(&nonce(self.source, pn), &ad, &mut buf[BODY_AT..total - TAG_LEN]);
        buf[total - TAG_LEN..total].copy_from_slice(&tag);
        seal_crc(&mut buf[..total]);
        total
    }

    /// Opens a sealed datagram (its CRC already checked) in place. Returns
    /// its source and where in `data` the plain datagram now is, ready for
    /// `McPacket::parse_opened` (its CRC field is stale: the AEAD vouches
    /// for it). Nothing changes unless it authenticates.
    pub(crate) fn open(&mut self, data: &mut [u8]) -> Result<(u32, Range<usize>), Unseal> {
        let len = data.len();
        if len < HEADER_LEN + SEAL_OVERHEAD {
            return Err(Unseal::Malformed);
        }
        let source = u32::from_be_bytes(data[SOURCE_AT..PN_AT].try_into().expect("4 bytes"));
        let pn = u64::from_be_bytes(data[PN_AT..BODY_AT].try_into().expect("8 bytes"));
        if source == self.source {
            return Err(Unseal::Ours);
        }
        let window = self.seen.get(&source);
        if window.is_some_and(|w| !w.fresh(pn)) {
            return Err(Unseal::Replayed);
        }
        if window.is_none() && self.seen.len() >= self.max_sources {
            return Err(Unseal::TooManySources);
        }
        let ad = associated_data(data);
        let (body, tag) = data[BODY_AT..].split_at_mut(len - BODY_AT - TAG_LEN);
        self.key.open(&nonce(source, pn), &ad, body, tag).map_err(|_| Unseal::Forged)?;
        self.seen.entry(source).or_default().accept(pn);
        let inner = data[BODY_AT];
        if !(PacketType::McAnnounce as u8..=PacketType::McParity as u8).contains(&inner) {
            return Err(Unseal::Malformed);
        }
        // The plain datagram ends before the tag and starts 13 bytes in:
        // the header moves up over the source and packet number.
        let start = BODY_AT + 1 - HEADER_LEN;
        let end = len - TAG_LEN;
        data.copy_within(0..HEADER_LEN, start);
        data[start] = (data[start] & 0xf0) | inner;
        data[start + 2..start + 4].copy_from_slice(&((end - start - HEADER_LEN) as u16).to_be_bytes());
        Ok((source, start..end))
    }
}

/// A grant's bytes before the session description.
const GRANT_FIXED: usize = 4 + 4 + 8 + KEY_LEN;

/// What REGISTER+ACK's Noise payload carries to a protected receiver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grant {
    pub source: u32,
    pub from_sn: u32,
    /// The sender's next packet number: older ones are refused.
    pub pn: u64,
    pub key: [u8; KEY_LEN],
    /// The session description, an ANNOUNCE payload.
    pub info: Vec<u8>,
}

impl Grant {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(GRANT_FIXED + self.info.len());
        v.extend_from_slice(&self.source.to_be_bytes());
        v.extend_from_slice(&self.from_sn.to_be_bytes());
        v.extend_from_slice(&self.pn.to_be_bytes());
        v.extend_from_slice(&self.key);
        v.extend_from_slice(&self.info);
        v
    }

    pub(crate) fn decode(p: &[u8]) -> Option<Grant> {
        let source = u32::from_be_bytes(p.get(..4)?.try_into().ok()?);
        let from_sn = u32::from_be_bytes(p.get(4..8)?.try_into().ok()?);
        let pn = u64::from_be_bytes(p.get(8..16)?.try_into().ok()?);
        let key = p.get(16..GRANT_FIXED)?.try_into().ok()?;
        (source != 0).then(|| Grant { source, from_sn, pn, key, info: p[GRANT_FIXED..].to_vec() })
    }
}

/// REGISTER's Noise payload: the client and network ids, so that they are
/// authenticated (the header's are not).
pub(crate) fn identity(client: u32, network: u32) -> [u8; 8] {
    let mut v = [0u8; 8];
    v[..4].copy_from_slice(&client.to_be_bytes());
    v[4..].copy_from_slice(&network.to_be_bytes());
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcast::wire::{emit, McPacket};
    use crate::secure::public_key;
    use crate::secure::tests::config;
    use crate::wire::{Flags, Header};

    fn plain() -> Vec<u8> {
        let mut buf = vec![0u8; 200];
        let n = emit(&mut buf, PacketType::McData, Flags::FIN, 9, 41, 41, 12, |o| {
            o[..5].copy_from_slice(b"hello");
            5
        })
        .expect("fits");
        buf.truncate(n);
        buf
    }

    fn sealed(keys: &mut GroupKeys, plain: &[u8]) -> Vec<u8> {
        let mut buf = plain.to_vec();
        buf.resize(plain.len() + SEAL_OVERHEAD, 0);
        let n = keys.seal(&mut buf, plain.len());
        buf.truncate(n);
        buf
    }

    #[test]
    fn sealed_packets_open_to_the_original_once_and_hide_the_payload() {
        let key = [7u8; 32];
        let (mut sender, mut receiver) = (GroupKeys::new(&key, 0, 8), GroupKeys::new(&key, 5, 8));
        let d = plain();
        let mut s = sealed(&mut sender, &d);
        assert_eq!(Header::parse(&s).expect("CRC sealed").ptype, PacketType::McSealed);
        assert!(!s.windows(5).any(|w| w == b"hello"));
        let copy = s.clone();
        let (source, r) = receiver.open(&mut s).expect("opens");
        assert_eq!(source, 0);
        assert_eq!(McPacket::parse_opened(&s[r]), McPacket::parse(&d));
        let mut again = copy.clone();
        assert_eq!(receiver.open(&mut again), Err(Unseal::Replayed));
        let mut own = copy;
        assert_eq!(sender.open(&mut own), Err(Unseal::Ours));
    }

    #[test]
    fn a_changed_byte_or_another_key_fails_and_changes_nothing() {
        let mut sender = GroupKeys::new(&[7; 32], 0, 8);
        let s = sealed(&mut sender, &plain());
        let mut receiver = GroupKeys::new(&[7; 32], 5, 8);
        for i in [1, 4, 8, 12, 16, SOURCE_AT, PN_AT + 7, BODY_AT, s.len() - 1] {
            let mut bad = s.clone();
            bad[i] ^= 0x20;
            seal_crc(&mut bad);
            assert!(receiver.open(&mut bad).is_err(), "byte {i}");
        }
        let mut stranger = GroupKeys::new(&[8; 32], 5, 8);
        assert_eq!(stranger.open(&mut s.clone()), Err(Unseal::Forged));
        receiver.open(&mut s.clone()).expect("the original still opens");
    }

    #[test]
    fn each_source_has_its_own_replay_window_and_their_number_is_bounded() {
        let key = [1u8; 32];
        let mut receiver = GroupKeys::new(&key, 9, 2);
        let mut a = GroupKeys::new(&key, 1, 8);
        let mut b = GroupKeys::new(&key, 2, 8);
        let mut c = GroupKeys::new(&key, 3, 8);
        // Packet number 0 of two sources: different nonces, both taken.
        receiver.open(&mut sealed(&mut a, &plain())).expect("a");
        receiver.open(&mut sealed(&mut b, &plain())).expect("b");
        assert_eq!(receiver.open(&mut sealed(&mut c, &plain())), Err(Unseal::TooManySources));
    }

    /// Registers a receiver with a sender: Ok(grant) or the side that failed.
    fn register(sender: &SecurityConfig, receiver: &SecurityConfig) -> Result<Grant, &'static str> {
        let pattern = Pattern::of_sender(sender);
        let sender_key = sender.private_key.map(|k| public_key(&k)).unwrap_or_default();
        if pattern.refusal(receiver, &sender_key).is_some() {
            return Err("receiver ignores");
        }
        let mut i = pattern.handshake(receiver, 77, &sender_key, true, [1; 32]);
        let mut r = pattern.handshake(sender, 77, &sender_key, false, [2; 32]);
        let m1 = i.write_with(&identity(4, 5)).map_err(|_| "write 1")?;
        let id = r.read_with(&m1).map_err(|_| "sender refuses")?;
        assert_eq!(id, identity(4, 5));
        let grant = Grant { source: 3, from_sn: 10, pn: 77, key: [9; 32], info: b"desc".to_vec() };
        let m2 = r.write_with(&grant.encode()).map_err(|_| "write 2")?;
        let got = i.read_with(&m2).map_err(|_| "receiver refuses")?;
        assert!(i.is_finished() && r.is_finished());
        Ok(Grant::decode(&got).expect("decodes"))
    }

    #[test]
    fn a_source_started_at_a_packet_number_refuses_older_ones_and_keeps_its_place() {
        let key = [1u8; 32];
        let mut sender = GroupKeys::new(&key, 0, 8);
        let early: Vec<Vec<u8>> = (0..5).map(|_| sealed(&mut sender, &plain())).collect();
        let mut receiver = GroupKeys::new(&key, 9, 1);
        receiver.start_source(0, sender.sealed());
        for mut d in early {
            assert_eq!(receiver.open(&mut d), Err(Unseal::Replayed), "sealed before the grant");
        }
        // The table (of one) is full with source 0, which still opens.
        receiver.open(&mut sealed(&mut sender, &plain())).expect("after the grant");
        let mut other = GroupKeys::new(&key, 3, 8);
        assert_eq!(receiver.open(&mut sealed(&mut other, &plain())), Err(Unseal::TooManySources));
    }

    #[test]
    fn registration_hands_the_group_key_only_to_receivers_the_sender_accepts() {
        // Static keys both ways, with and without a PSK; a PSK alone.
        assert!(register(&config(None, Some(1), &[2]), &config(None, Some(2), &[1])).is_ok());
        assert!(register(&config(Some(3), Some(1), &[]), &config(Some(3), None, &[])).is_ok());
        assert!(register(&config(Some(3), None, &[]), &config(Some(3), None, &[])).is_ok());
        // A stranger's key, another PSK, a sender the receiver does not know.
        assert_eq!(register(&config(None, Some(1), &[2]), &config(None, Some(6), &[1])), Err("sender refuses"));
        assert_eq!(register(&config(Some(3), Some(1), &[]), &config(Some(4), None, &[])), Err("sender refuses"));
        assert_eq!(register(&config(Some(3), None, &[]), &config(Some(4), None, &[])), Err("sender refuses"));
        assert_eq!(register(&config(None, Some(1), &[2]), &config(None, Some(2), &[7])), Err("receiver ignores"));
        assert_eq!(register(&config(Some(3), None, &[]), &config(None, Some(2), &[1])), Err("receiver ignores"));
    }
}
