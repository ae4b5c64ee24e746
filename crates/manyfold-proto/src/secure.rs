//! Encryption and authentication of connections (spec §19).
//!
//! A connection of an endpoint configured with [`SecurityConfig`] runs a
//! Noise handshake inside its own: XX (each side proves a static X25519
//! key, checked against a list of known peers), as XXpsk3 when a
//! pre-shared key is set. Its three messages ride in `HANDSHAKE` chunks on
//! the cookie echo, the listener's first packet and the client's next one
//! (spec §19.2), so they are retransmitted like data. Then every packet is
//! *protected*: its payload encrypted with ChaCha20-Poly1305 under the key
//! of its direction, the header and a 64-bit packet number authenticated
//! with it (spec §19.3), and replays dropped by a sliding window.
//!
//! The engine stays deterministic: Noise's ephemeral keys come from a
//! ChaCha20 RNG seeded from the endpoint's RNG (spec §2), never the OS.

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, CHACHA20_POLY1305};
use snow::params::{CipherChoice, DHChoice, HashChoice, NoiseParams};
use snow::resolvers::{CryptoResolver, DefaultResolver};
use snow::types::{Cipher, Dh, Hash, Random};

use crate::wire::{PacketType, HEADER_LEN};

/// Length of keys: X25519 private and public keys, the pre-shared key.
pub const KEY_LEN: usize = 32;
/// Packet number carried after the header of a protected packet.
const PN_LEN: usize = 8;
/// Poly1305 tag at the end of a protected packet.
const TAG_LEN: usize = 16;
/// Bytes protection adds to a packet (spec §19.3).
pub const PROTECTION_OVERHEAD: usize = PN_LEN + TAG_LEN;
/// Packet numbers a receiver remembers behind the highest it has seen.
const REPLAY_WINDOW: u64 = 1024;
/// Largest Noise handshake message we send or accept (XX's second is 96 bytes).
pub const MAX_HANDSHAKE_MESSAGE: usize = 256;

/// Keys of an endpoint that encrypts (spec §19.1). At least one of `psk`
/// and `known_peers` must be set: otherwise nothing authenticates the peer.
#[derive(Clone, Default)]
pub struct SecurityConfig {
    /// A key both sides hold; mixed into the handshake (Noise psk3).
    pub psk: Option<[u8; KEY_LEN]>,
    /// Our static X25519 private key. `None`: a fresh one per connection
    /// (then only the PSK authenticates us).
    pub private_key: Option<[u8; KEY_LEN]>,
    /// Public keys of the peers we accept; empty accepts any peer that
    /// knows the PSK.
    pub known_peers: Vec<[u8; KEY_LEN]>,
}

impl std::fmt::Debug for SecurityConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecurityConfig")
            .field("psk", &self.psk.map(|_| "<set>"))
            .field("private_key", &self.private_key.map(|k| hex(&public_key(&k))))
            .field("known_peers", &self.known_peers.len())
            .finish()
    }
}

impl SecurityConfig {
    /// Why this configuration cannot authenticate a peer, if it cannot.
    pub fn check(&self) -> Result<(), &'static str> {
        if self.psk.is_none() && self.known_peers.is_empty() {
            return Err("encryption needs a pre-shared key or a list of known peers to authenticate the peer");
        }
        if !self.known_peers.is_empty() && self.private_key.is_none() {
            return Err("a list of known peers needs a private key of our own: the peers check ours the same way");
        }
        Ok(())
    }

    fn pattern(&self) -> NoiseParams {
        let name = if self.psk.is_some() {
            "Noise_XXpsk3_25519_ChaChaPoly_BLAKE2s"
        } else {
            "Noise_XX_25519_ChaChaPoly_BLAKE2s"
        };
        name.parse().expect("a valid Noise pattern")
    }
}

/// The RNG of keys and Noise randomness (spec §19.1): seeded with
/// `crypto_seed`, 256 bits from the OS; all zeros derives it from the
/// 64-bit `seed`, for simulations only.
pub(crate) fn crypto_rng(seed: u64, crypto_seed: [u8; 32]) -> ChaCha20Rng {
    if crypto_seed == [0; 32] {
        ChaCha20Rng::seed_from_u64(seed ^ 0x6e6f_6973_6521)
    } else {
        ChaCha20Rng::from_seed(crypto_seed)
    }
}

/// The X25519 public key of `private`.
pub fn public_key(private: &[u8; KEY_LEN]) -> [u8; KEY_LEN] {
    let mut dh = DefaultResolver.resolve_dh(&DHChoice::Curve25519).expect("curve25519 is built in");
    dh.set(private);
    let mut out = [0u8; KEY_LEN];
    out.copy_from_slice(dh.pubkey());
    out
}

/// Lower-case hex of a key, for reports and errors.
pub fn hex(key: &[u8]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// Why a handshake failed (spec §19.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// A message did not decrypt: the peer holds another PSK, or it was forged.
    Rejected,
    /// The peer proved a static key that is not among the known peers.
    UnknownPeer,
}

/// The seeded RNG Noise draws its ephemeral keys from.
struct SeededRng(ChaCha20Rng);

impl Random for SeededRng {
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), snow::Error> {
        self.0.fill_bytes(dest);
        Ok(())
    }
}

/// snow's pure-Rust primitives, with our RNG.
struct Resolver {
    seed: [u8; 32],
}

impl CryptoResolver for Resolver {
    fn resolve_rng(&self) -> Option<Box<dyn Random>> {
        Some(Box::new(SeededRng(ChaCha20Rng::from_seed(self.seed))))
    }
    fn resolve_dh(&self, choice: &DHChoice) -> Option<Box<dyn Dh>> {
        DefaultResolver.resolve_dh(choice)
    }
    fn resolve_hash(&self, choice: &HashChoice) -> Option<Box<dyn Hash>> {
        DefaultResolver.resolve_hash(choice)
    }
    fn resolve_cipher(&self, choice: &CipherChoice) -> Option<Box<dyn Cipher>> {
        DefaultResolver.resolve_cipher(choice)
    }
}

/// One side's Noise handshake (spec §19.2).
pub(crate) struct Handshake {
    state: snow::HandshakeState,
    known_peers: Vec<[u8; KEY_LEN]>,
    peer_key: Option<[u8; KEY_LEN]>,
}

impl std::fmt::Debug for Handshake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handshake").field("finished", &self.state.is_handshake_finished()).finish()
    }
}

impl Handshake {
    /// A connection's handshake (XX, spec §19.2) as initiator (the
    /// connecting side) or responder, its randomness drawn from `seed`.
    pub(crate) fn new(config: &SecurityConfig, initiator: bool, seed: [u8; 32]) -> Self {
        let psk = config.psk.map(|k| (3, k));
        Self::build(config.pattern(), config, psk, None, &[], initiator, seed)
    }

    /// A handshake of `pattern`; `psk` at its position, the peer's static
    /// key if the pattern needs it in advance, and a prologue both sides
    /// must agree on (spec §19.7 binds the session id with it).
    pub(crate) fn build(
        pattern: NoiseParams,
        config: &SecurityConfig,
        psk: Option<(u8, [u8; KEY_LEN])>,
        remote: Option<&[u8; KEY_LEN]>,
        prologue: &[u8],
        initiator: bool,
        seed: [u8; 32],
    ) -> Self {
        let builder = snow::Builder::with_resolver(pattern, Box::new(Resolver { seed }));
        let private = match config.private_key {
            Some(k) => k,
            None => {
                // No identity of our own: a fresh key, drawn from the seed too.
                let mut rng = ChaCha20Rng::from_seed(seed);
                rng.set_stream(1);
                let mut k = [0u8; KEY_LEN];
                rng.fill_bytes(&mut k);
                k
            }
        };
        let mut builder = builder.local_private_key(&private).expect("a 32-byte key").prologue(prologue).expect("once");
        if let Some((at, psk)) = psk.as_ref() {
            builder = builder.psk(*at, psk).expect("the psk position fits the pattern");
        }
        if let Some(remote) = remote {
            builder = builder.remote_public_key(remote).expect("a 32-byte key");
        }
        let state = if initiator { builder.build_initiator() } else { builder.build_responder() }
            .expect("the pattern and keys were checked");
        Handshake { state, known_peers: config.known_peers.clone(), peer_key: None }
    }

    pub(crate) fn is_my_turn(&self) -> bool {
        !self.state.is_handshake_finished() && self.state.is_my_turn()
    }

    pub(crate) fn is_finished(&self) -> bool {
        self.state.is_handshake_finished()
    }

    /// The next message we send.
    pub(crate) fn write(&mut self) -> Result<Vec<u8>, HandshakeFailure> {
        self.write_with(&[])
    }

    /// The next message we send, carrying `payload` (encrypted once the
    /// pattern has a key at this point).
    pub(crate) fn write_with(&mut self, payload: &[u8]) -> Result<Vec<u8>, HandshakeFailure> {
        let mut out = vec![0u8; MAX_HANDSHAKE_MESSAGE + payload.len()];
        let n = self.state.write_message(payload, &mut out).map_err(|_| HandshakeFailure::Rejected)?;
        out.truncate(n);
        Ok(out)
    }

    /// Takes the peer's next message; checks its static key as soon as it
    /// is known.
    pub(crate) fn read(&mut self, message: &[u8]) -> Result<(), HandshakeFailure> {
        if message.len() > MAX_HANDSHAKE_MESSAGE {
            return Err(HandshakeFailure::Rejected);
        }
        self.read_with(message).map(drop)
    }

    /// Like [`Handshake::read`], for a message of any length; returns the
    /// payload it carried.
    pub(crate) fn read_with(&mut self, message: &[u8]) -> Result<Vec<u8>, HandshakeFailure> {
        let mut payload = vec![0u8; message.len()];
        let n = self.state.read_message(message, &mut payload).map_err(|_| HandshakeFailure::Rejected)?;
        payload.truncate(n);
        if self.peer_key.is_none() {
            if let Some(remote) = self.state.get_remote_static() {
                let key: [u8; KEY_LEN] = remote.try_into().map_err(|_| HandshakeFailure::Rejected)?;
                if !self.known_peers.is_empty() && !self.known_peers.contains(&key) {
                    return Err(HandshakeFailure::UnknownPeer);
                }
                self.peer_key = Some(key);
            }
        }
        Ok(payload)
    }

    /// The peer's static public key, once proven and found among the known
    /// peers. Without a list it identifies nobody (a PSK-only peer draws a
    /// fresh one per connection), so it is not reported.
    pub(crate) fn peer_key(&self) -> Option<[u8; KEY_LEN]> {
        self.peer_key.filter(|_| !self.known_peers.is_empty())
    }

    /// The packet keys of a finished handshake.
    pub(crate) fn keys(&mut self, initiator: bool) -> Protection {
        let (i_to_r, r_to_i) = self.state.dangerously_get_raw_split();
        let (send, recv) = if initiator { (i_to_r, r_to_i) } else { (r_to_i, i_to_r) };
        Protection::new(&send, &recv)
    }
}

/// Why a protected packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unprotect {
    /// Too short, or not a protected packet.
    Malformed,
    /// Its packet number was seen already, or is too old to tell.
    Replayed,
    /// It failed authentication.
    Forged,
}

/// Packet protection of one connection (spec §19.3).
pub(crate) struct Protection {
    send: PacketKey,
    recv: PacketKey,
    next_pn: u64,
    replay: ReplayWindow,
}

impl std::fmt::Debug for Protection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Protection").field("next_pn", &self.next_pn).field("highest", &self.replay.highest).finish()
    }
}

/// The packet numbers seen from one sender: the highest, and which of the
/// `REPLAY_WINDOW` below it (bit i: highest − i), as IPsec and WireGuard
/// keep them (spec §19.3).
#[derive(Debug, Clone, Default)]
pub(crate) struct ReplayWindow {
    highest: Option<u64>,
    seen: [u64; (REPLAY_WINDOW / 64) as usize],
}

/// A ChaCha20-Poly1305 key, the one AEAD every protected packet uses
/// (spec §19.3, §19.7): ring's, whose assembly is about three times as
/// fast as the pure-Rust crates on full-size packets.
pub(crate) struct PacketKey(LessSafeKey);

/// The AEAD's nonce length.
pub(crate) const NONCE_LEN: usize = 12;
/// Poly1305's tag length.
pub(crate) const AEAD_TAG_LEN: usize = TAG_LEN;

impl PacketKey {
    pub(crate) fn new(key: &[u8; KEY_LEN]) -> Self {
        PacketKey(LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, key).expect("a 32-byte key")))
    }

    /// Encrypts `body` in place; returns its tag.
    pub(crate) fn seal(&self, nonce: &[u8; NONCE_LEN], ad: &[u8], body: &mut [u8]) -> [u8; TAG_LEN] {
        let nonce = Nonce::assume_unique_for_key(*nonce);
        let tag = self.0.seal_in_place_separate_tag(nonce, Aad::from(ad), body).expect("below the size limit");
        let mut out = [0u8; TAG_LEN];
        out.copy_from_slice(tag.as_ref());
        out
    }

    /// Decrypts `body` in place if `tag` authenticates it with `ad`.
    pub(crate) fn open(
        &self,
        nonce: &[u8; NONCE_LEN],
        ad: &[u8],
        body: &mut [u8],
        tag: &[u8],
    ) -> Result<(), Unprotect> {
        let tag: [u8; TAG_LEN] = tag.get(..TAG_LEN).and_then(|t| t.try_into().ok()).ok_or(Unprotect::Malformed)?;
        let nonce = Nonce::assume_unique_for_key(*nonce);
        self.0
            .open_in_place_separate_tag(nonce, Aad::from(ad), Tag::from(tag), body, 0..)
            .map(drop)
            .map_err(|_| Unprotect::Forged)
    }
}

fn nonce(pn: u64) -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    n[4..].copy_from_slice(&pn.to_le_bytes());
    n
}

/// Associated data: the header without its CRC, then the packet number.
fn associated_data(datagram: &[u8]) -> [u8; 20 + PN_LEN] {
    let mut ad = [0u8; 20 + PN_LEN];
    ad[..20].copy_from_slice(&datagram[..20]);
    ad[20..].copy_from_slice(&datagram[HEADER_LEN..HEADER_LEN + PN_LEN]);
    ad
}

impl Protection {
    fn new(send: &[u8; KEY_LEN], recv: &[u8; KEY_LEN]) -> Self {
        Protection {
            send: PacketKey::new(send),
            recv: PacketKey::new(recv),
            next_pn: 0,
            replay: ReplayWindow::default(),
        }
    }

    /// Protects the plain datagram in `buf[..len]` in place; `buf` must
    /// hold `len + PROTECTION_OVERHEAD` bytes. Returns the new length.
    pub(crate) fn protect(&mut self, buf: &mut [u8], len: usize) -> usize {
        let total = len + PROTECTION_OVERHEAD;
        let pn = self.next_pn;
        self.next_pn += 1;
        buf.copy_within(HEADER_LEN..len, HEADER_LEN + PN_LEN);
        buf[HEADER_LEN..HEADER_LEN + PN_LEN].copy_from_slice(&pn.to_be_bytes());
        buf[0] = (buf[0] & 0xf0) | PacketType::Protected as u8;
        let payload_len = (total - HEADER_LEN) as u16;
        buf[2..4].copy_from_slice(&payload_len.to_be_bytes());
        let ad = associated_data(buf);
        let body = &mut buf[HEADER_LEN + PN_LEN..total - TAG_LEN];
        let tag = self.send.seal(&nonce(pn), &ad, body);
        buf[total - TAG_LEN..total].copy_from_slice(&tag);
        crate::wire::seal(&mut buf[..total]);
        total
    }

    /// Opens a protected datagram (its CRC and lengths already checked by
    /// `Header::parse`) into `out`: the plain datagram it was made from,
    /// ready for `Packet::parse_opened` (its CRC field is stale: the AEAD,
    /// not the CRC, vouches for it). Nothing changes unless it authenticates.
    pub(crate) fn unprotect(&mut self, datagram: &[u8], out: &mut Vec<u8>) -> Result<(), Unprotect> {
        if datagram.len() < HEADER_LEN + PROTECTION_OVERHEAD {
            return Err(Unprotect::Malformed);
        }
        let pn_bytes: [u8; PN_LEN] =
            datagram[HEADER_LEN..HEADER_LEN + PN_LEN].try_into().map_err(|_| Unprotect::Malformed)?;
        let pn = u64::from_be_bytes(pn_bytes);
        if !self.replay.fresh(pn) {
            return Err(Unprotect::Replayed);
        }
        let ad = associated_data(datagram);
        let tag_at = datagram.len() - TAG_LEN;
        out.clear();
        out.extend_from_slice(&datagram[..HEADER_LEN]);
        out.extend_from_slice(&datagram[HEADER_LEN + PN_LEN..tag_at]);
        self.recv.open(&nonce(pn), &ad, &mut out[HEADER_LEN..], &datagram[tag_at..])?;
        self.replay.accept(pn);
        out[0] = (out[0] & 0xf0) | PacketType::Segment as u8;
        let payload_len = (out.len() - HEADER_LEN) as u16;
        out[2..4].copy_from_slice(&payload_len.to_be_bytes());
        Ok(())
    }
}

impl ReplayWindow {
    /// A window that has seen every packet number below `next`: what a
    /// sender sealed before we could open anything is refused as a replay.
    pub(crate) fn below(next: u64) -> Self {
        match next.checked_sub(1) {
            None => ReplayWindow::default(),
            Some(last) => ReplayWindow { highest: Some(last), seen: [u64::MAX; (REPLAY_WINDOW / 64) as usize] },
        }
    }

    /// Whether `pn` is new: above the highest, or inside the window and unseen.
    pub(crate) fn fresh(&self, pn: u64) -> bool {
        match self.highest {
            None => true,
            Some(h) if pn > h => true,
            Some(h) if h - pn >= REPLAY_WINDOW => false,
            Some(h) => {
                let i = h - pn;
                self.seen[(i / 64) as usize] & (1 << (i % 64)) == 0
            }
        }
    }

    /// Records `pn` (checked `fresh`, and authenticated).
    pub(crate) fn accept(&mut self, pn: u64) {
        match self.highest {
            Some(h) if pn <= h => {
                let i = h - pn;
                self.seen[(i / 64) as usize] |= 1 << (i % 64);
            }
            _ => {
                let shift = self.highest.map_or(REPLAY_WINDOW, |h| pn - h);
                self.shift(shift);
                self.highest = Some(pn);
                self.seen[0] |= 1;
            }
        }
    }

    /// Moves the window up by `n` packet numbers.
    fn shift(&mut self, n: u64) {
        if n >= REPLAY_WINDOW {
            self.seen = [0; (REPLAY_WINDOW / 64) as usize];
            return;
        }
        let (words, bits) = ((n / 64) as usize, (n % 64) as u32);
        let len = self.seen.len();
        for i in (0..len).rev() {
            let src = i.checked_sub(words);
            let lo = src.map_or(0, |s| self.seen[s]);
            let carry = src.and_then(|s| s.checked_sub(1)).map_or(0, |s| self.seen[s]);
            self.seen[i] = if bits == 0 { lo } else { (lo << bits) | (carry >> (64 - bits)) };
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::wire::{Flags, Header, Packet};

    /// Keys from single bytes: a PSK of `psk`s, a private key of `key`s,
    /// the public keys of private keys made of each of `peers`.
    pub(crate) fn config(psk: Option<u8>, key: Option<u8>, peers: &[u8]) -> SecurityConfig {
        SecurityConfig {
            psk: psk.map(|b| [b; 32]),
            private_key: key.map(|b| [b; 32]),
            known_peers: peers.iter().map(|&b| public_key(&[b; 32])).collect(),
        }
    }

    /// Runs XX between two configs; returns both sides' results.
    fn handshake(
        a: &SecurityConfig,
        b: &SecurityConfig,
    ) -> Result<(Protection, Protection, [u8; 32], [u8; 32]), HandshakeFailure> {
        let mut i = Handshake::new(a, true, [1; 32]);
        let mut r = Handshake::new(b, false, [2; 32]);
        r.read(&i.write()?)?;
        i.read(&r.write()?)?;
        r.read(&i.write()?)?;
        assert!(i.is_finished() && r.is_finished());
        let (ik, rk) = (r.peer_key.expect("proved"), i.peer_key.expect("proved"));
        Ok((i.keys(true), r.keys(false), ik, rk))
    }

    fn plain(payload: &[u8]) -> Vec<u8> {
        let mut p = Packet::bare(PacketType::Segment, Flags::ACK, 7, 100, 200, 300);
        p.data = payload;
        let mut v = vec![0u8; p.len() + PROTECTION_OVERHEAD];
        let n = p.emit(&mut v);
        v.truncate(n);
        v
    }

    fn protect(p: &mut Protection, plain: &[u8]) -> Vec<u8> {
        let mut buf = plain.to_vec();
        buf.resize(plain.len() + PROTECTION_OVERHEAD, 0);
        let n = p.protect(&mut buf, plain.len());
        buf.truncate(n);
        buf
    }

    #[test]
    fn known_static_keys_authenticate_both_sides_and_packets_round_trip() {
        let a = config(None, Some(1), &[2]);
        let b = config(None, Some(2), &[1]);
        let (mut pa, mut pb, a_key, b_key) = handshake(&a, &b).unwrap();
        assert_eq!((a_key, b_key), (public_key(&[1; 32]), public_key(&[2; 32])));
        let d = plain(&[5, 0, 0]);
        let sealed = protect(&mut pa, &d);
        assert_eq!(Header::parse(&sealed).unwrap().ptype, PacketType::Protected);
        assert!(!sealed.windows(3).any(|w| w == [5, 0, 0]) || sealed.len() < 30);
        let mut out = Vec::new();
        pb.unprotect(&sealed, &mut out).unwrap();
        // The opened datagram is the original, but for its CRC field (not
        // recomputed: the AEAD vouches for it, spec §19.3).
        let without_crc = |v: &[u8]| [&v[..20], &v[24..]].concat();
        assert_eq!(without_crc(&out), without_crc(&d));
        assert_eq!(Packet::parse_opened(&out), Packet::parse(&d));
        assert_eq!(pb.unprotect(&sealed, &mut out), Err(Unprotect::Replayed));
    }

    #[test]
    fn a_peer_outside_the_known_list_or_with_another_psk_is_refused() {
        let a = config(None, Some(1), &[2]);
        let stranger = config(None, Some(3), &[1]);
        assert_eq!(handshake(&a, &stranger).err(), Some(HandshakeFailure::UnknownPeer));
        let (p1, p2) = (config(Some(9), None, &[]), config(Some(8), None, &[]));
        assert_eq!(handshake(&p1, &p2).err(), Some(HandshakeFailure::Rejected));
        assert!(handshake(&p1, &config(Some(9), None, &[])).is_ok());
    }

    #[test]
    fn a_changed_header_bit_or_byte_fails_authentication_and_changes_nothing() {
        let k = config(Some(4), None, &[]);
        let (mut pa, mut pb, ..) = handshake(&k, &k).unwrap();
        let sealed = protect(&mut pa, &plain(b"hello world"));
        let mut out = Vec::new();
        for i in [1, 4, 8, 12, 16, HEADER_LEN, HEADER_LEN + 9, sealed.len() - 1] {
            let mut bad = sealed.clone();
            bad[i] ^= 0x40;
            crate::wire::seal(&mut bad);
            assert!(pb.unprotect(&bad, &mut out).is_err(), "byte {i}");
        }
        pb.unprotect(&sealed, &mut out).expect("the original still opens: the forgeries changed nothing");
    }

    #[test]
    fn the_replay_window_takes_late_packets_once_and_refuses_old_ones() {
        let k = config(Some(4), None, &[]);
        let (mut pa, mut pb, ..) = handshake(&k, &k).unwrap();
        let sealed: Vec<Vec<u8>> = (0..2000).map(|_| protect(&mut pa, &plain(b"x"))).collect();
        let mut out = Vec::new();
        pb.unprotect(&sealed[1500], &mut out).unwrap();
        pb.unprotect(&sealed[1000], &mut out).unwrap(); // late but inside the window
        assert_eq!(pb.unprotect(&sealed[1000], &mut out), Err(Unprotect::Replayed));
        assert_eq!(pb.unprotect(&sealed[400], &mut out), Err(Unprotect::Replayed)); // too old
        pb.unprotect(&sealed[1999], &mut out).unwrap();
        pb.unprotect(&sealed[1998], &mut out).unwrap();
        assert_eq!(pb.unprotect(&sealed[1500], &mut out), Err(Unprotect::Replayed));
    }

    #[test]
    fn configs_that_cannot_authenticate_are_refused() {
        assert!(SecurityConfig::default().check().is_err());
        assert!(config(None, None, &[1]).check().is_err());
        assert!(config(Some(1), None, &[]).check().is_ok());
        assert!(config(None, Some(1), &[2]).check().is_ok());
    }
}
