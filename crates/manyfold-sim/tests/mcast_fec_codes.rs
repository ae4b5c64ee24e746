//! Reed-Solomon (the `reed-solomon-simd` code manyfold's multicast parity
//! uses, spec §16.9) against RaptorQ (RFC 6330, the `raptorq` crate) on the
//! same data: encode and decode speed per block size, and what each needs
//! to decode (issue 22 item 2, "choose by measurement"). Not a dependency
//! of the engine: a measurement, ignored by default, run with
//! `cargo test --release -p manyfold-sim --test mcast_fec_codes -- --ignored --nocapture`.
//! Every decode is checked against the data, so a wrong code fails.

use std::time::{Duration, Instant};

use raptorq::{EncodingPacket, ObjectTransmissionInformation, SourceBlockDecoder, SourceBlockEncoder};
use reed_solomon_simd::{ReedSolomonDecoder, ReedSolomonEncoder};

/// Payload bytes per DATA packet at the default datagram (spec §16.2).
const SHARD: usize = 1428;
/// Parity shards per block in the engine's code (spec §16.9).
const RS_PARITY: usize = 128;
/// Bytes measured per configuration.
const DATA: usize = 16 << 20;
/// Runs per configuration; the median is printed (a shared machine).
const RUNS: usize = 3;

/// The median of `RUNS` runs of `f`, field by field.
fn median<const N: usize>(mut f: impl FnMut() -> [f64; N]) -> [f64; N] {
    let runs: Vec<[f64; N]> = (0..RUNS).map(|_| f()).collect();
    std::array::from_fn(|i| {
        let mut v: Vec<f64> = runs.iter().map(|r| r[i]).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    })
}

/// Deterministic bytes (xorshift), so that a decode can be checked.
fn data(len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The originals a block of `k` loses at the receiver decoded: `lost`
/// spread over the block.
fn lost_of(k: usize, lost: usize) -> Vec<usize> {
    (0..lost).map(|i| i * k / lost.max(1)).collect()
}

/// MB/s of `bytes` in `took`.
fn rate(bytes: usize, took: Duration) -> f64 {
    bytes as f64 / 1e6 / took.as_secs_f64().max(1e-9)
}

/// Reed-Solomon with `k` originals per block: (encode MB/s, decode MB/s)
/// of file bytes, the receiver missing `lost` originals per block.
fn reed_solomon(file: &[u8], k: usize, lost: usize) -> (f64, f64) {
    let blocks: Vec<Vec<&[u8]>> = file.chunks(k * SHARD).map(|b| b.chunks(SHARD).collect()).collect();
    let t = Instant::now();
    let mut parity = Vec::new();
    for b in &blocks {
        if b.len() < k || b.last().is_some_and(|s| s.len() < SHARD) {
            continue; // whole blocks only
        }
        let mut enc = ReedSolomonEncoder::new(k, RS_PARITY, SHARD).expect("encoder");
        for s in b {
            enc.add_original_shard(s).expect("original");
        }
        let out = enc.encode().expect("encode");
        parity.push(out.recovery_iter().take(lost).map(<[u8]>::to_vec).collect::<Vec<_>>());
    }
    let encode = t.elapsed();
    let whole = parity.len();
    let t = Instant::now();
    for (b, p) in blocks.iter().zip(&parity) {
        let gone = lost_of(k, lost);
        let mut dec = ReedSolomonDecoder::new(k, RS_PARITY, SHARD).expect("decoder");
        for (i, s) in b.iter().enumerate().filter(|(i, _)| !gone.contains(i)) {
            dec.add_original_shard(i, s).expect("original");
        }
        for (i, s) in p.iter().enumerate() {
            dec.add_recovery_shard(i, s).expect("recovery");
        }
        let out = dec.decode().expect("decodes");
        for &i in &gone {
            assert_eq!(out.restored_original(i), Some(b[i]), "RS k = {k}: original {i} rebuilt");
        }
    }
    let decode = t.elapsed();
    (rate(whole * k * SHARD, encode), rate(whole * k * SHARD, decode))
}

/// RaptorQ with `k` source symbols per block: (encode MB/s, decode MB/s,
/// mean symbols received beyond k to decode), missing `lost` source
/// symbols per block and given repair symbols until it decodes.
fn raptorq(file: &[u8], k: usize, lost: usize) -> (f64, f64, f64) {
    let len = k * SHARD;
    let blocks: Vec<&[u8]> = file.chunks(len).filter(|b| b.len() == len).collect();
    let cfg = ObjectTransmissionInformation::new(len as u64, SHARD as u16, 1, 1, 4);
    let t = Instant::now();
    let mut sent = Vec::new();
    for b in &blocks {
        let enc = SourceBlockEncoder::new(0, &cfg, b);
        // The receiver's losses plus a few symbols of margin.
        sent.push((enc.source_packets(), enc.repair_packets(0, (lost + 4) as u32)));
    }
    let encode = t.elapsed();
    let t = Instant::now();
    let mut extra = 0usize;
    for (b, (source, repair)) in blocks.iter().zip(sent) {
        let gone = lost_of(k, lost);
        let mut dec = SourceBlockDecoder::new(0, &cfg, len as u64);
        let kept: Vec<EncodingPacket> =
            source.into_iter().enumerate().filter(|(i, _)| !gone.contains(i)).map(|(_, p)| p).collect();
        let mut given = kept.len();
        let mut out = None;
        let mut repair = repair.into_iter();
        let mut batch = kept;
        while out.is_none() {
            out = dec.decode(std::mem::take(&mut batch));
            if out.is_none() {
                batch.push(repair.next().expect("decodes within 4 extra symbols"));
                given += 1;
            }
        }
        assert_eq!(out.as_deref(), Some(*b), "RaptorQ k = {k}: block rebuilt");
        extra += given - k;
    }
    let decode = t.elapsed();
    let n = blocks.len();
    (rate(n * len, encode), rate(n * len, decode), extra as f64 / n.max(1) as f64)
}

#[test]
#[ignore = "a measurement (seconds in release): cargo test --release -p manyfold-sim --test mcast_fec_codes -- --ignored --nocapture"]
fn reed_solomon_and_raptorq_encode_decode_and_overhead_by_block_size() {
    let file = data(DATA);
    eprintln!("code | k | lost per block | encode MB/s | decode MB/s | symbols beyond k");
    // Reed-Solomon's own limit is 65,536 shards; the engine's is k = 256
    // (spec §16.9), so larger blocks are measured too.
    for k in [64, 128, 256, 512, 1024] {
        // The worst of 32 receivers at 1% (spec §16.9) and a bottleneck's
        // burst (at most the 128 parity shards).
        for lost in [k / 32, (k / 4).min(RS_PARITY)] {
            let [e, d] = median(|| {
                let (e, d) = reed_solomon(&file, k, lost);
                [e, d]
            });
            eprintln!("Reed-Solomon (128 parity) | {k} | {lost} | {e:.0} | {d:.0} | 0");
        }
    }
    for k in [256, 1024, 4096] {
        for lost in [k / 32, k / 4] {
            let [e, d, extra] = median(|| {
                let (e, d, extra) = raptorq(&file, k, lost);
                [e, d, extra]
            });
            eprintln!("RaptorQ | {k} | {lost} | {e:.0} | {d:.0} | {extra:.2}");
        }
    }
}
