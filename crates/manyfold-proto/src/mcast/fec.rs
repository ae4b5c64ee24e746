//! Reed-Solomon parity over FEC blocks (spec §16.9), with the
//! `reed-solomon-simd` crate (O(n log n) Leopard-style codes): block `b`
//! holds packets `b·k .. b·k + k` (fewer in the last), each a shard of
//! `block` bytes, the last packet zero-padded. Any `k` of the block's
//! originals and parity shards give back every original.

use std::ops::Range;

use reed_solomon_simd::{ReedSolomonDecoder, ReedSolomonEncoder};

/// Parity shards a block's code defines (indexes 0..PARITY_SHARDS). The
/// shard at an index depends on the code's total recovery count, so the
/// sender and every receiver always use this one count.
pub(crate) const PARITY_SHARDS: u16 = 128;
/// Highest parity index a block may use.
pub(crate) const MAX_PARITY: u16 = PARITY_SHARDS - 1;
/// Largest FEC block (spec §16.9). The Leopard code works in GF(2^16) and
/// encodes in O(n log n), so a large block costs little CPU, and the
/// parity one shard of a large block repairs spreads over more receivers'
/// independent losses: at 32 receivers with 1% loss each, the worst
/// receiver of a block loses 2.7 packets of 64 but 4.1 of 128.
pub const MAX_FEC_K: u16 = 256;

/// The SNs of FEC block `block`.
pub(crate) fn block_range(block: u32, k: u16, total: u32) -> Range<u32> {
    let start = block.saturating_mul(u32::from(k));
    start..start.saturating_add(u32::from(k)).min(total)
}

/// Parity shards `from .. from + count` of the originals given in order.
#[cfg(test)]
pub(crate) fn encode(originals: &[Vec<u8>], from: u16, count: u16) -> Option<Vec<Vec<u8>>> {
    if usize::from(from) + usize::from(count) > usize::from(PARITY_SHARDS) {
        return None;
    }
    let all = encode_all(originals)?;
    Some(all.into_iter().skip(usize::from(from)).take(usize::from(count)).collect())
}

/// Every parity shard (indexes `0..PARITY_SHARDS`) of the originals given
/// in order: the code computes them all at once, so a sender keeps them
/// for the block it tops up.
pub(crate) fn encode_all(originals: &[Vec<u8>]) -> Option<Vec<Vec<u8>>> {
    let shard = originals.first()?.len();
    let mut enc = ReedSolomonEncoder::new(originals.len(), usize::from(PARITY_SHARDS), shard).ok()?;
    for o in originals {
        enc.add_original_shard(o).ok()?;
    }
    let result = enc.encode().ok()?;
    Some(result.recovery_iter().map(<[u8]>::to_vec).collect())
}

/// The originals missing from `present` (index, shard), rebuilt from
/// `parity` (index, shard); `None` if too few shards or a shard is malformed.
pub(crate) fn decode(k: u16, present: &[(u16, Vec<u8>)], parity: &[(u16, Vec<u8>)]) -> Option<Vec<(u16, Vec<u8>)>> {
    let shard = parity.first()?.1.len();
    let mut dec = ReedSolomonDecoder::new(usize::from(k), usize::from(PARITY_SHARDS), shard).ok()?;
    for (i, s) in present {
        dec.add_original_shard(usize::from(*i), s).ok()?;
    }
    for (i, s) in parity {
        dec.add_recovery_shard(usize::from(*i), s).ok()?;
    }
    let result = dec.decode().ok()?;
    Some(result.restored_original_iter().map(|(i, s)| (i as u16, s.to_vec())).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_k_shards_rebuild_the_block() {
        let k = 8u16;
        let originals: Vec<Vec<u8>> =
            (0..k).map(|i| (0..64).map(|j| (i as u8).wrapping_mul(31) ^ j).collect()).collect();
        let parity = encode(&originals, 0, 3).expect("encodes");
        // Lose three originals (1, 4, 7); keep the rest and all parity.
        let present: Vec<(u16, Vec<u8>)> =
            (0..k).filter(|i| ![1, 4, 7].contains(i)).map(|i| (i, originals[usize::from(i)].clone())).collect();
        let parity: Vec<(u16, Vec<u8>)> = parity.into_iter().enumerate().map(|(i, s)| (i as u16, s)).collect();
        let mut back = decode(k, &present, &parity).expect("decodes");
        back.sort();
        assert_eq!(back, vec![(1, originals[1].clone()), (4, originals[4].clone()), (7, originals[7].clone())]);
        // Later indexes of the same code, made in another round, also work.
        let more = encode(&originals, 3, 2).expect("encodes");
        let parity2: Vec<(u16, Vec<u8>)> = more.into_iter().enumerate().map(|(i, s)| (i as u16 + 3, s)).collect();
        let present2: Vec<(u16, Vec<u8>)> =
            (0..k).filter(|i| ![2, 5].contains(i)).map(|i| (i, originals[usize::from(i)].clone())).collect();
        assert_eq!(decode(k, &present2, &parity2).expect("decodes").len(), 2);
        assert!(decode(k, &present2[..3], &parity2).is_none(), "too few shards");
        // Shards of two rounds together.
        let mixed: Vec<(u16, Vec<u8>)> = vec![parity[0].clone(), parity2[0].clone()];
        assert_eq!(decode(k, &present2, &mixed).expect("decodes").len(), 2);
    }

    #[test]
    fn blocks_cover_the_file_and_the_last_is_short() {
        assert_eq!(block_range(0, 32, 100), 0..32);
        assert_eq!(block_range(3, 32, 100), 96..100);
    }
}
