//! Acknowledgement frequency (spec §5.6): a bulk sender asks its peer for
//! an ack per eighth of the congestion window, which cuts the acks of a
//! transfer several-fold without slowing it, under every controller.

mod common;

use std::time::Duration;

use common::*;
use manyfold_proto::CongestionAlgorithm;
use manyfold_sim::{LinkConfig, Transfer, TransferReport};

const MB: u64 = 1 << 20;

/// 10 MB client -> server over 10 ms at 200 Mbit/s, with or without
/// adaptive acks on both ends. The bottleneck's queue holds the whole
/// transfer: without loss, every gap (and so every immediate ack) comes
/// from path MTU probes that the 1,472-byte link drops (spec §3.7).
fn bulk(seed: u64, cc: CongestionAlgorithm, adaptive: bool, loss: f64) -> TransferReport {
    let mut cfg = config(cc);
    cfg.connection.adaptive_acks = adaptive;
    let link = LinkConfig::with_delay(Duration::from_millis(10)).rate(200_000_000, 16 << 20).loss(loss);
    let mut w = pair(seed, link, cfg);
    let t = Transfer::start(&mut w, client(), server(), 10 * MB, 0);
    t.run(&mut w, Duration::from_secs(600)).unwrap_or_else(|e| panic!("{cc:?} adaptive {adaptive} seed {seed}: {e}"))
}

/// Acks the receiver sent per data packet the sender sent.
fn acks_per_packet(r: &TransferReport) -> f64 {
    r.server.packets_sent as f64 / r.client.packets_sent as f64
}

#[test]
fn adaptive_acks_cut_a_bulk_transfers_acks_at_least_threefold_without_slowing_it() {
    let seed = 601;
    for &cc in CONTROLLERS {
        let fixed = bulk(seed, cc, false, 0.0);
        let adaptive = bulk(seed, cc, true, 0.0);
        let (a, f) = (acks_per_packet(&adaptive), acks_per_packet(&fixed));
        eprintln!(
            "{cc:?}: acks per data packet {f:.3} -> {a:.3}; time {:?} -> {:?}",
            fixed.duration, adaptive.duration
        );
        assert!(a * 3.0 <= f, "{cc:?}: {a:.3} acks per packet with adaptive acks, {f:.3} without (seed {seed})");
        assert!(
            adaptive.duration.as_secs_f64() <= fixed.duration.as_secs_f64() * 1.05,
            "{cc:?}: {:?} with adaptive acks, {:?} without (seed {seed})",
            adaptive.duration,
            fixed.duration
        );
    }
}

/// Over eight seeds: one loss pattern alone moves a 10 MB transfer by
/// over 10% either way (a 1 ms shift of the handshake did, spec §6.2).
#[test]
fn adaptive_acks_keep_loss_recovery_as_fast_under_one_percent_loss() {
    let seeds = [602, 603, 604, 605, 606, 607, 608, 609];
    for &cc in CONTROLLERS {
        let (mut fixed_s, mut adaptive_s) = (0.0, 0.0);
        let (mut fixed_acks, mut adaptive_acks) = ((0, 0), (0, 0));
        for seed in seeds {
            let fixed = bulk(seed, cc, false, 0.01);
            let adaptive = bulk(seed, cc, true, 0.01);
            eprintln!(
                "{cc:?} at 1% loss, seed {seed}: acks per data packet {:.3} -> {:.3}; time {:?} -> {:?}; retransmissions {} -> {}",
                acks_per_packet(&fixed),
                acks_per_packet(&adaptive),
                fixed.duration,
                adaptive.duration,
                fixed.client.retransmissions,
                adaptive.client.retransmissions
            );
            fixed_s += fixed.duration.as_secs_f64();
            adaptive_s += adaptive.duration.as_secs_f64();
            for (r, a) in [(&fixed, &mut fixed_acks), (&adaptive, &mut adaptive_acks)] {
                a.0 += r.server.packets_sent;
                a.1 += r.client.packets_sent;
            }
        }
        // spec §5.6: losses still draw immediate acks, so the saving is
        // smaller here (nil for NewReno); it must not turn into more acks.
        let per_packet = |(acks, packets): (u64, u64)| acks as f64 / packets as f64;
        let (f, a) = (per_packet(fixed_acks), per_packet(adaptive_acks));
        assert!(a <= f * 1.01, "{cc:?} at 1% loss: {a:.3} acks per packet with adaptive acks, {f:.3} without");
        assert!(
            adaptive_s <= fixed_s * 1.10,
            "{cc:?} at 1% loss: {adaptive_s:.2} s with adaptive acks, {fixed_s:.2} s without (seeds {seeds:?})"
        );
    }
}
