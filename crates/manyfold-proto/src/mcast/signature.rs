//! Loss signatures (spec §16.12): which packets of the first sending a
//! receiver lost, per block of `SIG_BLOCK` SNs, folded into 256 bits, as
//! its STATUS carries them to the sender (the trailer's bytes are
//! `wire::mcast`'s: [`Signature`], `emit_signatures`); and how alike two
//! receivers' signatures are (receivers behind one bottleneck lose the
//! same packets, receivers with independent loss do not). The receiver
//! keeps the last `SIG_KEPT` blocks; the sender keeps as many per
//! receiver: fixed size.

use std::ops::Range;

pub(crate) use crate::wire::mcast::Signature;
use crate::wire::mcast::MAX_SIGNATURES;

/// SNs per signature block (spec §16.12).
pub(crate) const SIG_BLOCK: u32 = 2048;
/// Bits per block's signature.
const SIG_BITS: u32 = 256;
/// Blocks a STATUS carries, and a receiver's and the sender's memory of them.
pub(crate) const SIG_KEPT: usize = MAX_SIGNATURES;

/// murmur3's 32-bit finaliser: neighbouring SNs land on unrelated bits.
pub(crate) fn mix(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

impl Signature {
    fn empty(block: u32) -> Signature {
        Signature { block, bits: [0; 4] }
    }

    fn mark(&mut self, sn: u32) {
        let b = mix(sn) % SIG_BITS;
        self.bits[(b / 64) as usize] |= 1 << (b % 64);
    }

    pub(crate) fn ones(&self) -> u32 {
        self.bits.iter().map(|w| w.count_ones()).sum()
    }
}

/// A 2×2 table of two receivers' bits over their common blocks: both
/// set, only the first, only the second, neither.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Agreement {
    both: u32,
    first: u32,
    second: u32,
    neither: u32,
}

impl Agreement {
    /// The bits over the blocks `a` and `b` both hold (spec §16.12).
    pub(crate) fn of(a: &[Signature], b: &[Signature]) -> Agreement {
        let mut t = Agreement::default();
        for x in a {
            for y in b.iter().filter(|y| y.block == x.block) {
                for (p, q) in x.bits.iter().zip(y.bits.iter()) {
                    t.both += (p & q).count_ones();
                    t.first += (p & !q).count_ones();
                    t.second += (!p & q).count_ones();
                    t.neither += (!p & !q).count_ones();
                }
            }
        }
        t
    }

    /// Losses each side had in the common blocks (bits set).
    pub(crate) fn evidence(&self) -> (u32, u32) {
        (self.both + self.first, self.both + self.second)
    }

    /// The phi coefficient (Pearson's correlation of the two bit vectors):
    /// about 0 for independent loss, near 1 for the same losses; `None`
    /// without a common block or when a side is all zeros or all ones.
    pub(crate) fn correlation(&self) -> Option<f64> {
        let (a, b, c, d) =
            (f64::from(self.both), f64::from(self.first), f64::from(self.second), f64::from(self.neither));
        let denom = ((a + b) * (c + d) * (a + c) * (b + d)).sqrt();
        (denom > 0.0).then(|| (a * d - b * c) / denom)
    }
}

/// A receiver's signatures (spec §16.12): the block under way and the
/// last `SIG_KEPT` complete ones, newest last.
#[derive(Debug, Default)]
pub(crate) struct LossSignatures {
    current: Option<Signature>,
    done: [Option<Signature>; SIG_KEPT],
}

impl LossSignatures {
    /// DATA `sn` of the first sending arrived: a block it leaves is complete.
    pub(crate) fn advance(&mut self, sn: u32) {
        let block = sn / SIG_BLOCK;
        match self.current {
            Some(c) if block <= c.block => {}
            Some(c) => {
                self.push(c);
                // Blocks passed over whole (a lost burst) lost everything
                // the receiver heard nothing of: not a signature.
                if block > c.block + 1 {
                    self.done = [None; SIG_KEPT];
                }
                self.current = Some(Signature::empty(block));
            }
            None => self.current = Some(Signature::empty(block)),
        }
    }

    fn push(&mut self, s: Signature) {
        self.done.rotate_left(1);
        self.done[SIG_KEPT - 1] = Some(s);
    }

    /// SNs `lost` of the first sending are missing (a gap before `sn`).
    /// Only the current block and the one before take marks: at most
    /// `2 · SIG_BLOCK` SNs, whatever a forged SN says.
    pub(crate) fn on_lost(&mut self, lost: Range<u32>) {
        let Some(cur) = self.current.as_mut() else { return };
        let low = cur.block.saturating_sub(1) * SIG_BLOCK;
        let from = lost.start.max(low);
        let to = lost.end.min(cur.block.saturating_add(1).saturating_mul(SIG_BLOCK));
        for sn in from..to {
            if sn / SIG_BLOCK == cur.block {
                cur.mark(sn);
            } else if let Some(prev) = self.done[SIG_KEPT - 1].as_mut().filter(|p| p.block == sn / SIG_BLOCK) {
                prev.mark(sn);
            }
        }
    }

    /// The complete blocks a STATUS carries (spec §16.12), oldest first.
    pub(crate) fn complete(&self) -> impl Iterator<Item = Signature> + '_ {
        self.done.iter().flatten().copied()
    }
}

/// The signatures of a STATUS's trailer, as the sender keeps them.
pub(crate) fn kept_from(sigs: impl IntoIterator<Item = Signature>) -> [Option<Signature>; SIG_KEPT] {
    let mut out = [None; SIG_KEPT];
    for (slot, s) in out.iter_mut().zip(sigs) {
        *slot = Some(s);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::wire::mcast::{emit_signatures, McPacket, MAX_TRAILER_LEN};
    use crate::wire::{Flags, PacketType};

    fn losing(every: u32, offset: u32, blocks: u32) -> LossSignatures {
        let mut s = LossSignatures::default();
        let mut expected = 0;
        for sn in 0..blocks * SIG_BLOCK {
            if sn % every == offset {
                continue;
            }
            s.advance(sn);
            if sn > expected {
                s.on_lost(expected..sn);
            }
            expected = sn + 1;
        }
        s
    }

    fn kept(s: &LossSignatures) -> Vec<Signature> {
        s.done.iter().flatten().copied().collect()
    }

    /// `s`'s trailer in a STATUS, parsed back as the sender keeps it.
    fn through_the_wire(s: &LossSignatures) -> [Option<Signature>; SIG_KEPT] {
        let mut buf = [0u8; 24 + MAX_TRAILER_LEN];
        let n = crate::wire::mcast::emit(&mut buf, PacketType::McStatus, Flags::empty(), 9, 1, 2, 3, |o| {
            emit_signatures(o, s.complete())
        })
        .expect("fits");
        match McPacket::parse(&buf[..n]) {
            Ok(McPacket::Status { signatures, .. }) => kept_from(signatures.iter().flat_map(|s| s.iter())),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_receivers_signatures_reach_the_sender_as_kept() {
        let mut s = LossSignatures::default();
        assert_eq!(through_the_wire(&s), [None; SIG_KEPT], "no complete block: no trailer");
        s.advance(0);
        s.on_lost(0..1);
        s.advance(SIG_BLOCK);
        let b = mix(0) % SIG_BITS;
        let mut bits = [0u64; 4];
        bits[(b / 64) as usize] = 1 << (b % 64);
        let parsed = through_the_wire(&s);
        assert_eq!(parsed[0], Some(Signature { block: 0, bits }));
        assert_eq!(parsed[1..], [None; SIG_KEPT - 1]);
        let s = losing(50, 7, 5);
        let want: Vec<Option<Signature>> = kept(&s).into_iter().map(Some).collect();
        assert_eq!(through_the_wire(&s).to_vec(), want);
    }

    #[test]
    fn the_same_losses_correlate_and_independent_ones_do_not() {
        let a = losing(37, 3, 5);
        let b = losing(37, 3, 5);
        let c = losing(41, 9, 5);
        let same = Agreement::of(&kept(&a), &kept(&b));
        assert!(same.correlation().unwrap() > 0.99);
        let other = Agreement::of(&kept(&a), &kept(&c)).correlation().unwrap();
        assert!(other.abs() < 0.3, "independent patterns: {other}");
        let (ea, eb) = same.evidence();
        assert!(ea >= 40 && ea == eb, "{ea} {eb}");
    }

    #[test]
    fn only_the_last_blocks_are_kept_and_a_forged_jump_marks_at_most_two_blocks() {
        let s = losing(10, 0, 9);
        let blocks: Vec<u32> = kept(&s).iter().map(|x| x.block).collect();
        assert_eq!(blocks, [4, 5, 6, 7]);
        let mut s = LossSignatures::default();
        s.advance(0);
        s.advance(u32::MAX - 1);
        s.on_lost(1..u32::MAX - 1);
        assert!(s.current.unwrap().ones() > 0);
        assert!(kept(&s).is_empty(), "blocks passed over whole are no signature");
    }

    #[test]
    fn no_common_block_is_no_correlation() {
        let a = [Signature { block: 1, bits: [1, 0, 0, 0] }];
        let b = [Signature { block: 2, bits: [1, 0, 0, 0] }];
        assert_eq!(Agreement::of(&a, &b).correlation(), None);
    }
}
