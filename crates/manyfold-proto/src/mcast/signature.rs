//! Loss signatures (spec §16.12): which packets of the first sending a
//! receiver lost, per block of `SIG_BLOCK` SNs, folded into 256 bits, as
//! its STATUS carries them to the sender; and how alike two receivers'
//! signatures are (receivers behind one bottleneck lose the same packets,
//! receivers with independent loss do not). The receiver keeps the last
//! `SIG_KEPT` blocks; the sender keeps as many per receiver: fixed size.

use std::ops::Range;

/// SNs per signature block (spec §16.12).
pub(crate) const SIG_BLOCK: u32 = 2048;
/// Bits per block's signature.
const SIG_BITS: u32 = 256;
/// Blocks a STATUS carries, and a receiver's and the sender's memory of them.
pub(crate) const SIG_KEPT: usize = 4;
/// The trailer's version (spec §16.12): another is ignored.
const TRAILER_VERSION: u8 = 1;

/// The STATUS trailer's fields, smoltcp style (spec §16.12).
mod field {
    use core::ops::Range;
    pub const VERSION: usize = 0;
    pub const COUNT: usize = 1;
    pub const ENTRIES: usize = 2;
    /// Within one entry.
    pub const BLOCK: Range<usize> = 0..4;
    pub const BITS: Range<usize> = 4..36;
    pub const ENTRY_LEN: usize = BITS.end;
}

/// The losses of one block of `SIG_BLOCK` SNs: bit `mix(sn) mod 256` for
/// every SN lost in the first sending.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Signature {
    pub(crate) block: u32,
    pub(crate) bits: [u64; 4],
}

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

    /// Writes the STATUS trailer (spec §16.12); returns its length (0 if
    /// no block is complete yet, or `out` is too short).
    pub(crate) fn emit(&self, out: &mut [u8]) -> usize {
        let done: Vec<&Signature> = self.done.iter().flatten().collect();
        let n = field::ENTRIES + done.len() * field::ENTRY_LEN;
        if done.is_empty() || out.len() < n {
            return 0;
        }
        out[field::VERSION] = TRAILER_VERSION;
        out[field::COUNT] = done.len() as u8;
        for (i, s) in done.iter().enumerate() {
            let e = &mut out[field::ENTRIES + i * field::ENTRY_LEN..][..field::ENTRY_LEN];
            e[field::BLOCK].copy_from_slice(&s.block.to_be_bytes());
            for (w, chunk) in s.bits.iter().zip(e[field::BITS].chunks_exact_mut(8)) {
                chunk.copy_from_slice(&w.to_be_bytes());
            }
        }
        n
    }
}

/// Parses a STATUS trailer (spec §16.12): at most `SIG_KEPT` blocks; `None`
/// for no trailer, another version, a count above `SIG_KEPT` or entries
/// past the end (the STATUS itself stands: the trailer is only a hint).
pub(crate) fn parse_trailer(p: &[u8]) -> Option<[Option<Signature>; SIG_KEPT]> {
    if *p.get(field::VERSION)? != TRAILER_VERSION {
        return None;
    }
    let count = usize::from(*p.get(field::COUNT)?);
    if count == 0 || count > SIG_KEPT {
        return None;
    }
    let entries = p.get(field::ENTRIES..field::ENTRIES + count * field::ENTRY_LEN)?;
    let mut out = [None; SIG_KEPT];
    for (slot, e) in out.iter_mut().zip(entries.chunks_exact(field::ENTRY_LEN)) {
        let mut bits = [0u64; 4];
        for (w, chunk) in bits.iter_mut().zip(e[field::BITS].chunks_exact(8)) {
            *w = u64::from_be_bytes(chunk.try_into().ok()?);
        }
        *slot = Some(Signature { block: u32::from_be_bytes(e[field::BLOCK].try_into().ok()?), bits });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes of a trailer carrying `SIG_KEPT` blocks.
    const TRAILER_MAX: usize = field::ENTRIES + SIG_KEPT * field::ENTRY_LEN;

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

    #[test]
    fn the_trailer_emits_literal_bytes_and_round_trips() {
        let mut s = LossSignatures::default();
        s.advance(0);
        s.on_lost(0..1);
        s.advance(SIG_BLOCK);
        let mut buf = [0u8; TRAILER_MAX];
        let n = s.emit(&mut buf);
        assert_eq!(n, 2 + 36);
        let b = mix(0) % SIG_BITS;
        let mut want = vec![1u8, 1, 0, 0, 0, 0];
        let mut bits = [0u8; 32];
        bits[(b / 64) as usize * 8 + 7 - (b % 64) as usize / 8] = 1 << (b % 8);
        want.extend_from_slice(&bits);
        assert_eq!(&buf[..n], &want[..]);
        let parsed = parse_trailer(&buf[..n]).expect("parses");
        assert_eq!(parsed[0], Some(kept(&s)[0]));
        assert_eq!(parsed[1..], [None; SIG_KEPT - 1]);
    }

    #[test]
    fn every_truncated_prefix_and_a_bad_version_or_count_are_ignored() {
        let s = losing(50, 7, 5);
        let mut buf = [0u8; TRAILER_MAX];
        let n = s.emit(&mut buf);
        assert_eq!(n, TRAILER_MAX);
        assert!(parse_trailer(&buf[..n]).is_some());
        for cut in 0..n {
            assert!(parse_trailer(&buf[..cut]).is_none(), "prefix of {cut} bytes");
        }
        let mut bad = buf;
        bad[0] = 2;
        assert!(parse_trailer(&bad).is_none());
        let mut bad = buf;
        bad[1] = SIG_KEPT as u8 + 1;
        assert!(parse_trailer(&bad).is_none());
        assert_eq!(s.emit(&mut buf[..n - 1]), 0, "no room: nothing written");
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
