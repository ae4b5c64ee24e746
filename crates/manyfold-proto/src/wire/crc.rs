//! The datagram checksum's arithmetic (spec §3.2) and the group sender's
//! memo of payload checksums (spec §7.2, §14.4).
//!
//! A group sends one copy of each message to every peer: the payload of a
//! gathered datagram (the slice of the shared message it ends with) is
//! the same bytes for all of them, only the head differs. CRC32C is linear,
//! so the checksum of head then payload follows from the head's checksum
//! and the payload's: `crc(A‖B) = crc(A)·x^(8·|B|) ⊕ crc(B)` (mod the
//! polynomial; the initial and final inversions cancel). The payload's
//! checksum is computed once and reused for every peer; the CRC had been a
//! fifth of a 16-peer sender's CPU (RESULTS §39).

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;

/// CRC32C's polynomial, bit-reversed (bit 31 is x⁰).
const POLY: u32 = 0x82F6_3B78;

/// `a·b` modulo the polynomial, both bit-reversed.
const fn mul(a: u32, mut b: u32) -> u32 {
    let mut product = 0;
    let mut bit = 1u32 << 31;
    while bit != 0 {
        if a & bit != 0 {
            product ^= b;
        }
        bit >>= 1;
        // b·x
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    product
}

/// `x^(2^k)` modulo the polynomial, k = 0..64.
const X_POW_2K: [u32; 64] = {
    let mut t = [0u32; 64];
    t[0] = 1 << 30; // x¹
    let mut k = 1;
    while k < 64 {
        t[k] = mul(t[k - 1], t[k - 1]);
        k += 1;
    }
    t
};

/// `x^(8·len)` modulo the polynomial: what appending `len` bytes does to a
/// checksum already taken.
fn shift_for(len: usize) -> u32 {
    let mut power = 1u32 << 31; // x⁰
    let mut bits = (len as u64) * 8;
    let mut k = 0;
    while bits != 0 {
        if bits & 1 != 0 {
            power = mul(X_POW_2K[k], power);
        }
        bits >>= 1;
        k += 1;
    }
    power
}

/// Known checksums of payloads that end gathered datagrams, for a sender
/// whose peers get the same bytes (a group's members, spec §14.4).
///
/// An entry holds its payload (a `Bytes` slice of the shared message), so
/// its address cannot be freed and reused for other bytes while the entry
/// lives: address and length name the bytes exactly. Entries go after
/// `uses` lookups (each member's send of them), oldest first past `limit`
/// entries, and all at once whenever a group lets go of a message: the
/// memo never keeps a message alive longer than the group does (entries
/// a member never used, cut elsewhere, had held up to 30 MiB at 64
/// members). `limit` 0 turns the memo off (no group members: every
/// payload goes once).
#[derive(Debug, Default)]
pub(crate) struct PayloadCrcs {
    known: HashMap<(usize, usize), Known>,
    order: VecDeque<(usize, usize)>,
    limit: usize,
    uses: u32,
    /// The last length's shift, `(len, x^(8·len))`: payloads are nearly
    /// all of one size.
    shift: (usize, u32),
    /// The groups' release count when last fitted.
    releases: u64,
    /// Lookups answered from the memo.
    pub hits: u64,
}

#[derive(Debug)]
struct Known {
    _held: Bytes,
    crc: u32,
    uses_left: u32,
}

impl PayloadCrcs {
    /// Sizes the memo for `members` peers that get the same payloads (an
    /// entry serves `members` sends; at most `2 × members`, up to 256,
    /// live), and empties it if the groups let go of messages since
    /// (`releases` moved on).
    pub fn fit(&mut self, members: usize, releases: u64) {
        self.limit = if members > 1 { (2 * members).min(256) } else { 0 };
        self.uses = u32::try_from(members).unwrap_or(u32::MAX);
        if releases != self.releases {
            self.releases = releases;
            self.known.clear();
            self.order.clear();
        }
        while self.known.len() > self.limit {
            self.evict_oldest();
        }
    }

    /// The CRC32C of `payload`, from the memo or computed (and kept).
    pub fn crc_of(&mut self, payload: &Bytes) -> u32 {
        if self.limit == 0 {
            return crc32c::crc32c(payload);
        }
        let key = (payload.as_ptr() as usize, payload.len());
        if let Some(k) = self.known.get_mut(&key) {
            self.hits += 1;
            let crc = k.crc;
            k.uses_left -= 1;
            if k.uses_left == 0 {
                self.known.remove(&key);
            }
            return crc;
        }
        let crc = crc32c::crc32c(payload);
        if self.uses > 1 {
            if self.known.len() >= self.limit {
                self.evict_oldest();
            }
            self.known.insert(key, Known { _held: payload.clone(), crc, uses_left: self.uses - 1 });
            self.order.push_back(key);
        }
        crc
    }

    /// [`super::seal_gathered`] with the payload's checksum from the memo:
    /// fills in the CRC of the datagram `head` then `payload`.
    pub fn seal(&mut self, head: &mut [u8], payload: &Bytes) {
        let crc_payload = self.crc_of(payload);
        let crc = self.combine(super::header::checksum(head), crc_payload, payload.len());
        super::header::write_crc(head, crc);
    }

    /// The checksum of a datagram from its head's (`crc32c(head)`) and its
    /// payload's.
    fn combine(&mut self, crc_head: u32, crc_payload: u32, payload_len: usize) -> u32 {
        if self.shift.0 != payload_len || self.shift.1 == 0 {
            self.shift = (payload_len, shift_for(payload_len));
        }
        mul(self.shift.1, crc_head) ^ crc_payload
    }

    fn evict_oldest(&mut self) {
        // Keys of entries already used up are skipped (a key used again
        // since is at worst evicted early: one more computation).
        while let Some(key) = self.order.pop_front() {
            if self.known.remove(&key).is_some() {
                return;
            }
        }
    }

    /// Entries held now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.known.len()
    }

    /// Whether no entry is held.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.known.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
    }

    #[test]
    fn combining_two_checksums_gives_the_checksum_of_both_pieces_at_every_length() {
        for (la, lb) in
            [(0, 0), (1, 0), (0, 1), (24, 1), (24, 7), (60, 1400), (80, 32_768), (100, 64_975), (3, 1 << 20)]
        {
            let (a, b) = (bytes(la, 1), bytes(lb, 2));
            let whole = [&a[..], &b[..]].concat();
            let expected = crc32c::crc32c(&whole);
            let mut memo = PayloadCrcs::default();
            assert_eq!(memo.combine(crc32c::crc32c(&a), crc32c::crc32c(&b), lb), expected, "{la} + {lb}");
            // Again, from the memo of the shift.
            assert_eq!(memo.combine(crc32c::crc32c(&a), crc32c::crc32c(&b), lb), expected, "memo {la} + {lb}");
        }
    }

    #[test]
    fn a_payload_checksum_is_computed_once_per_group_and_dropped_after_every_member_used_it() {
        let mut memo = PayloadCrcs::default();
        memo.fit(3, 0);
        let message = Bytes::from(bytes(100_000, 9));
        let a = message.slice(0..40_000);
        let b = message.slice(40_000..80_000);
        for _ in 0..3 {
            assert_eq!(memo.crc_of(&a), crc32c::crc32c(&a));
            assert_eq!(memo.crc_of(&b), crc32c::crc32c(&b));
        }
        assert_eq!(memo.hits, 4, "the second and third member's lookups");
        assert!(memo.is_empty(), "used by every member, then let go");
        // The same address with another length is other bytes.
        let shorter = message.slice(0..39_000);
        assert_eq!(memo.crc_of(&shorter), crc32c::crc32c(&shorter));
        assert_eq!(memo.hits, 4);
    }

    #[test]
    fn the_memo_holds_at_most_its_limit_and_nothing_without_a_group() {
        let mut memo = PayloadCrcs::default();
        memo.fit(4, 0);
        let message = Bytes::from(bytes(100 * 1000, 3));
        for i in 0..100 {
            let p = message.slice(i * 1000..(i + 1) * 1000);
            assert_eq!(memo.crc_of(&p), crc32c::crc32c(&p));
            assert!(memo.len() <= 8);
        }
        memo.fit(4, 1);
        assert!(memo.is_empty(), "a group let go of messages: so does the memo");
        let p = message.slice(0..1000);
        memo.crc_of(&p);
        assert_eq!(memo.len(), 1);
        memo.fit(1, 1);
        assert!(memo.is_empty());
        let p = message.slice(0..1000);
        assert_eq!(memo.crc_of(&p), crc32c::crc32c(&p));
        assert!(memo.is_empty());
    }
}
