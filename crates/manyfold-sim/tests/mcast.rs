//! Multicast file replication (spec §16, paper 03) on the simulator: every
//! receiver ends with the exact file under loss at some of them, a late
//! joiner and a dead receiver; feedback stays per network; and the paper's
//! analytic results (eq. 9, eq. 16 / Table I, eq. 17–18) hold for the
//! implementation.

use std::net::SocketAddr;
use std::time::Duration;

use manyfold_proto::mcast::{
    Ignored, Pattern, ReceiverConfig, ReceiverEvent, ReceiverOutcome, SenderConfig, SenderError, SenderEvent,
    SEAL_OVERHEAD,
};
use manyfold_proto::secure::public_key;
use manyfold_proto::wire::mcast::{emit, emit_invitation};
use manyfold_proto::wire::{ErrorCode, Flags, Header, PacketType};
use manyfold_proto::SecurityConfig;
use manyfold_sim::mcast::McastWorld;
use manyfold_sim::LinkConfig;

fn group() -> SocketAddr {
    "239.1.2.3:5000".parse().expect("addr")
}

fn sender() -> SocketAddr {
    "198.18.0.1:5000".parse().expect("addr")
}

/// Receiver `i` of network `net` (an address in 198.18.net.0/24).
fn receiver(net: u8, i: u8) -> SocketAddr {
    SocketAddr::from(([198, 18, net, 10 + i], 5000))
}

fn receivers(seed: u64, nets: &[(u8, u8)]) -> Vec<(SocketAddr, ReceiverConfig)> {
    let mut v = Vec::new();
    for &(net, count) in nets {
        for i in 0..count {
            let addr = receiver(net, i);
            let cfg = ReceiverConfig {
                seed: seed * 1000 + u64::from(net) * 100 + u64::from(i),
                network: u32::from(net),
                ..ReceiverConfig::default()
            };
            v.push((addr, cfg));
        }
    }
    v
}

fn lan() -> LinkConfig {
    LinkConfig::with_delay(Duration::from_micros(200))
}

fn assert_all_completed(w: &McastWorld, seed: u64) {
    for (i, r) in w.receivers.iter().enumerate() {
        assert_eq!(r.verified, Some(true), "receiver {i} ({}) file (seed {seed})", r.addr);
        assert!(matches!(r.ended, Some(ReceiverEvent::Confirmed)), "receiver {i}: {:?} (seed {seed})", r.ended);
    }
    for r in w.sender.receivers() {
        assert_eq!(r.outcome, ReceiverOutcome::Completed, "sender's view of {} (seed {seed})", r.addr);
    }
    assert!(w.sender_events.iter().any(|(_, e)| *e == SenderEvent::Finished), "finished (seed {seed})");
}

#[test]
fn every_receiver_gets_the_exact_file_with_loss_at_some_of_them() {
    let seed = 7001;
    let cfg = SenderConfig { max_window: 64, ..SenderConfig::default() };
    let mut w = McastWorld::new(seed, cfg, 3 << 20, group(), sender(), receivers(seed, &[(1, 4), (2, 4)]));
    w.set_default_link(lan());
    // 2% loss on the way to two receivers of network 2 (as nftables'
    // random drop at those hosts), 5% to one of network 1.
    w.set_link(sender(), receiver(2, 0), lan().loss(0.02));
    w.set_link(sender(), receiver(2, 1), lan().loss(0.02));
    w.set_link(sender(), receiver(1, 3), lan().loss(0.05));
    assert!(w.run_to_end(Duration::from_secs(120)), "not done after 120 s virtual (seed {seed})");
    assert_all_completed(&w, seed);
    let st = w.sender.stats();
    // Parity first (spec §16.9): parity shards repair the losses.
    assert!(st.parity_packets > 0, "losses were repaired by parity (seed {seed}): {st:?}");
    // The data went once.
    let total = (3u64 << 20).div_ceil(u64::from(w.sender.block()));
    assert_eq!(st.data_packets, total, "every packet multicast exactly once (seed {seed})");
}

#[test]
fn a_receiver_that_joins_mid_transfer_gets_the_whole_file() {
    let seed = 7002;
    let mut w = McastWorld::new(seed, SenderConfig::default(), 2 << 20, group(), sender(), receivers(seed, &[(1, 3)]));
    // 20 Mbit/s: the transfer lasts about a second.
    w.set_default_link(lan().rate(20_000_000, 1 << 20));
    w.receivers[2].running = false;
    let half = (1u32 << 20) / u32::from(w.sender.block());
    assert!(w.run_until(|w| w.sender.progress().0 >= half, Duration::from_secs(60)), "seed {seed}");
    w.receivers[2].running = true;
    assert!(w.run_to_end(Duration::from_secs(120)), "not done (seed {seed})");
    assert_all_completed(&w, seed);
    let late = w.sender.receivers().iter().find(|r| r.addr == receiver(1, 2)).expect("registered");
    assert!(late.joined_at >= half, "joined at {} (seed {seed})", late.joined_at);
    assert!(
        w.sender_events
            .iter()
            .any(|(_, e)| matches!(e, SenderEvent::ReceiverJoined { from_sn, .. } if *from_sn >= half)),
        "seed {seed}"
    );
}

#[test]
fn the_sender_ends_with_three_ends_within_tens_of_milliseconds_of_the_last_report_under_loss() {
    let seed = 7010;
    let mut w = McastWorld::new(seed, SenderConfig::default(), 1 << 20, group(), sender(), receivers(seed, &[(1, 3)]));
    w.set_default_link(lan().loss(0.05));
    w.capture = Some(Vec::new());
    assert!(w.run_to_end(Duration::from_secs(60)), "not done (seed {seed})");
    assert_all_completed(&w, seed);
    let at = |f: &dyn Fn(&SenderEvent) -> bool| w.sender_events.iter().filter(|(_, e)| f(e)).map(|(t, _)| *t).max();
    let last_done = at(&|e| matches!(e, SenderEvent::ReceiverDone { .. })).expect("receivers done");
    let finished = at(&|e| *e == SenderEvent::Finished).expect("finished");
    // spec §16.1 step 4: END at once, twice more END_GAP (20 ms) apart,
    // then the end: not an announce interval's wait for each.
    let linger = finished - last_done;
    assert!(linger <= Duration::from_millis(60), "the sender lingered {linger:?} (seed {seed})");
    let ends = w
        .capture
        .as_ref()
        .expect("captured")
        .iter()
        .filter(|(from, to, d)| {
            *from == sender() && *to == group() && Header::parse(d).is_ok_and(|h| h.ptype == PacketType::McEnd)
        })
        .count();
    assert_eq!(ends, 3, "END copies (seed {seed})");
}

#[test]
fn a_dead_receiver_is_dropped_and_the_others_complete() {
    let seed = 7003;
    let cfg = SenderConfig { receiver_timeout: Duration::from_secs(3), ..SenderConfig::default() };
    let mut w = McastWorld::new(seed, cfg, 2 << 20, group(), sender(), receivers(seed, &[(1, 2), (2, 1)]));
    w.set_default_link(lan());
    let quarter = (512u32 << 10) / u32::from(w.sender.block());
    assert!(w.run_until(|w| w.sender.progress().0 >= quarter, Duration::from_secs(60)), "seed {seed}");
    // The only receiver of network 2 dies: its network is no longer awaited.
    w.receivers[2].running = false;
    assert!(w.run_to_end(Duration::from_secs(120)), "not done (seed {seed})");
    for i in 0..2 {
        assert_eq!(w.receivers[i].verified, Some(true), "receiver {i} (seed {seed})");
    }
    let dead = w.sender.receivers().iter().find(|r| r.addr == receiver(2, 0)).expect("registered");
    assert_eq!(dead.outcome, ReceiverOutcome::Unresponsive, "seed {seed}");
    assert!(w.elapsed() < Duration::from_secs(30), "the others waited {:?} (seed {seed})", w.elapsed());
}

#[test]
fn feedback_stays_within_two_packets_per_window_per_network_whatever_the_receivers() {
    for (seed, per_net) in [(7004u64, 1u8), (7005, 16)] {
        let nets = [(1, per_net), (2, per_net)];
        // 8 MiB: long enough that the session's first windows (slow start,
        // ARTP_max still adapting) do not dominate the mean.
        let mut w = McastWorld::new(seed, SenderConfig::default(), 8 << 20, group(), sender(), receivers(seed, &nets));
        w.set_default_link(lan());
        assert!(w.run_to_end(Duration::from_secs(120)), "seed {seed}");
        assert_all_completed(&w, seed);
        let windows = w.windows();
        let feedback: u32 = windows.iter().map(|x| x.feedback).sum();
        let per_window_per_net = f64::from(feedback) / windows.len() as f64 / 2.0;
        assert!(
            per_window_per_net <= 2.0,
            "{per_window_per_net:.2} feedback packets per window per network with {per_net} receivers each (seed {seed})"
        );
    }
}

#[test]
fn under_shared_loss_feedback_stays_within_two_packets_per_window_per_network() {
    let seed = 7006;
    let mut w = McastWorld::new(seed, SenderConfig::default(), 8 << 20, group(), sender(), receivers(seed, &[(1, 16)]));
    w.set_default_link(lan());
    // Loss upstream of the network: all 16 receivers miss the same packets,
    // and one NACK from the network stands for all of them.
    w.upstream_loss = 0.01;
    assert!(w.run_to_end(Duration::from_secs(120)), "seed {seed}");
    assert_all_completed(&w, seed);
    let windows = w.windows();
    let feedback: u32 = windows.iter().map(|x| x.feedback).sum();
    let per_window = f64::from(feedback) / windows.len() as f64;
    assert!(per_window <= 2.0, "{per_window:.2} per window (seed {seed})");
    let st = w.sender.stats();
    assert!(
        st.repair_multicast + st.parity_packets > 0 && st.repair_unicast == 0,
        "shared losses are repaired by multicast: {st:?}"
    );
}

// ---- paper 03's analytic results, checked against the implementation ----

/// Paper 03's sender: one window awaits its ACKs at a time (the model's
/// stop-and-wait; spec §16.3, windows in flight), and the window grows
/// whatever the ACKs' delay (the model has no queue-delay rule).
fn stop_and_wait() -> SenderConfig {
    SenderConfig { windows_in_flight: 1, queue_target: None, ..SenderConfig::default() }
}

/// Virtual time from the first DATA packet to the last window's resolution,
/// and the payload bytes in between.
fn data_phase(w: &McastWorld) -> (Duration, u64) {
    let windows = w.windows();
    let first = windows.first().expect("windows").sent;
    let last = windows.last().expect("windows").resolved;
    let bytes: u64 = windows.iter().map(|x| u64::from(x.size)).sum::<u64>() * u64::from(w.sender.block());
    (last - first, bytes)
}

#[test]
fn mean_ack_delay_is_artp_max_over_n_plus_one_eq_9() {
    let d = Duration::from_micros(50);
    for (seed, n) in [(7101u64, 1u8), (7102, 4), (7103, 8)] {
        // One-packet windows: every packet is a window and draws one ACK race.
        let cfg = SenderConfig { max_window: 1, adapt_artp: false, ..stop_and_wait() };
        let k = cfg.artp_max.as_secs_f64() * 1e6;
        // The paper's receivers: every one races for every window.
        let racing =
            receivers(seed, &[(1, n)]).into_iter().map(|(a, c)| (a, ReceiverConfig { defer_to_acker: false, ..c }));
        let mut w = McastWorld::new(seed, cfg, 3000 * 1428, group(), sender(), racing.collect());
        w.set_default_link(LinkConfig::with_delay(d));
        assert!(w.run_to_end(Duration::from_secs(60)), "seed {seed}");
        // A window resolves at its first ACK: sent + d + min(ARTP_i) + d.
        let samples: Vec<f64> = w
            .windows()
            .iter()
            .filter(|x| x.confirmed)
            .map(|x| (x.resolved - x.sent - 2 * d).as_secs_f64() * 1e6)
            .collect();
        let mean = samples.iter().sum::<f64>() / samples.len() as f64;
        let nf = f64::from(n);
        let expected = k / (nf + 1.0);
        // Var(min of n uniforms on [0, k]) = n k² / ((n+1)² (n+2)).
        let se = (nf * k * k / ((nf + 1.0).powi(2) * (nf + 2.0)) / samples.len() as f64).sqrt();
        eprintln!("n = {n}: mean ARTP {mean:.1} µs over {} windows, eq. 9: {expected:.1} µs", samples.len());
        assert!(
            (mean - expected).abs() <= 4.0 * se + 1.0,
            "n = {n}: mean ARTP {mean:.1} µs, eq. 9 gives {expected:.1} µs (±{:.1}) over {} windows (seed {seed})",
            4.0 * se + 1.0,
            samples.len()
        );
    }
}

/// Paper 03's Table I setting: C2 = 1.55 Mbit/s, 520-byte packets, 4
/// receivers behind the C2 networks (mean ARTP 120 µs), `n_c2` C2 networks
/// on the critical path. Returns the median steady-state window and the
/// world.
fn table_one_run(seed: u64, dflt_ms: u64, n_c2: u32) -> (u32, McastWorld) {
    const C2: u64 = 1_550_000;
    const DATA_PS: u64 = 520;
    let cfg = SenderConfig {
        max_datagram: DATA_PS as usize,
        default_timeout: Duration::from_millis(dflt_ms),
        adapt_artp: false,
        ..stop_and_wait()
    };
    let mut w = McastWorld::new(seed, cfg, 3 << 20, group(), sender(), receivers(seed, &[(1, 4)]));
    // Each further C2 network on the path adds one packet's serialization.
    let extra = Duration::from_secs_f64(f64::from(n_c2 - 1) * (DATA_PS * 8) as f64 / C2 as f64);
    for i in 0..4 {
        w.set_link(sender(), receiver(1, i), LinkConfig::with_delay(extra).rate(C2, 1 << 22));
    }
    w.set_default_link(LinkConfig::with_delay(Duration::ZERO));
    assert!(w.run_to_end(Duration::from_secs(600)), "seed {seed}");
    let windows = w.windows();
    let mut steady: Vec<u32> = windows[windows.len() / 2..].iter().map(|x| x.size).collect();
    steady.sort_unstable();
    (steady[steady.len() / 2], w)
}

#[test]
fn steady_state_window_reproduces_table_one_eq_16() {
    // Table I of paper 03: W_T by N_C2 (rows) and dflt_Tout 80..120 ms.
    const TABLE: [[u32; 5]; 4] =
        [[29, 33, 37, 40, 44], [28, 32, 36, 39, 43], [27, 31, 35, 38, 42], [26, 30, 34, 37, 41]];
    for (row, n_c2) in (1..=4u32).enumerate() {
        for (col, dflt_ms) in [80u64, 90, 100, 110, 120].into_iter().enumerate() {
            let seed = 7200 + 10 * u64::from(n_c2) + col as u64;
            let (w_t, _) = table_one_run(seed, dflt_ms, n_c2);
            // eq. 16 with our numbers.
            let eq16 = ((dflt_ms as f64 / 1e3 - 120e-6) * 1_550_000.0 / (520.0 * 8.0) - f64::from(n_c2 - 1)).floor();
            let table = TABLE[row][col];
            eprintln!("N_C2 {n_c2} dflt {dflt_ms}: W_T {w_t} (Table I {table}, eq. 16 {eq16})");
            assert!(
                (i64::from(w_t) - i64::from(table)).abs() <= 1 && (f64::from(w_t) - eq16).abs() <= 1.0,
                "N_C2 = {n_c2}, dflt_Tout = {dflt_ms} ms: steady window {w_t}, Table I {table}, eq. 16 {eq16} (seed {seed})"
            );
        }
    }
}

#[test]
fn throughput_meets_the_uncongested_bound_eq_17_and_the_congested_one_eq_18() {
    // eq. 17: one uncongested 100 Mbit/s LAN, W_max = 100, 520-byte packets.
    let seed = 7301;
    let (c, data_ps) = (100_000_000f64, 520f64);
    let cfg =
        SenderConfig { max_datagram: 520, adapt_artp: false, initial_window: 100, max_window: 100, ..stop_and_wait() };
    let mut w = McastWorld::new(seed, cfg, 8 << 20, group(), sender(), receivers(seed, &[(1, 4)]));
    for i in 0..4 {
        w.set_link(sender(), receiver(1, i), LinkConfig::with_delay(Duration::ZERO).rate(c as u64, 1 << 22));
    }
    w.set_default_link(LinkConfig::with_delay(Duration::ZERO));
    assert!(w.run_to_end(Duration::from_secs(60)), "seed {seed}");
    let (took, bytes) = data_phase(&w);
    // Throughput counted in whole datagrams, as the model's DataPS.
    let measured = bytes as f64 / f64::from(w.sender.block()) * data_ps * 8.0 / took.as_secs_f64();
    let artp = 600e-6 / 5.0;
    let bound = 100.0 * data_ps * 8.0 / (100.0 * data_ps * 8.0 / c + artp);
    eprintln!("eq. 17: {:.1} Mbit/s measured, bound {:.1}", measured / 1e6, bound / 1e6);
    assert!(
        measured <= bound * 1.01 && measured >= 0.9 * bound,
        "{:.1} Mbit/s against eq. 17's {:.1} (seed {seed})",
        measured / 1e6,
        bound / 1e6
    );

    // eq. 18 and 19: behind the 1.55 Mbit/s network, throughput stays under
    // (W_T + 1)·DataPS / dflt_Tout (the server's own link is not limited)
    // and close to C2.
    let (w_t, w) = table_one_run(7302, 100, 1);
    let windows = w.windows();
    let tail = &windows[windows.len() / 2..];
    let took = tail.last().expect("windows").resolved - tail.first().expect("windows").sent;
    let packets: u64 = tail.iter().map(|x| u64::from(x.size)).sum();
    let measured = packets as f64 * data_ps * 8.0 / took.as_secs_f64();
    let bound = f64::from(w_t + 1) * data_ps * 8.0 / 0.1;
    eprintln!("eq. 18: {:.3} Mbit/s measured (W_T {w_t}), bound {:.3}, C2 1.55", measured / 1e6, bound / 1e6);
    assert!(
        measured <= bound * 1.02 && measured >= 0.9 * 1_550_000.0,
        "{:.3} Mbit/s against eq. 18's bound {:.3} and C2 = 1.55 (seed 7302)",
        measured / 1e6,
        bound / 1e6
    );
}

#[test]
fn a_stream_of_unknown_length_reaches_every_receiver_whole() {
    let seed = 7401;
    // 2 MiB yielded at 4 MB/s: the sender runs out of data many times and
    // learns the length (and hash) only at the end.
    let mut w = McastWorld::new_stream(
        seed,
        SenderConfig::default(),
        (2 << 20) + 333,
        4e6,
        group(),
        sender(),
        receivers(seed, &[(1, 2), (2, 1)]),
    );
    w.set_default_link(lan());
    w.set_link(sender(), receiver(2, 0), lan().loss(0.02));
    assert!(w.run_to_end(Duration::from_secs(60)), "seed {seed}");
    assert_all_completed(&w, seed);
    let (sent, total) = w.sender.progress();
    assert_eq!(Some(sent), total, "seed {seed}");
}

#[test]
fn a_receiver_losing_more_than_max_loss_is_dropped_and_the_rest_complete() {
    let seed = 7402;
    let cfg = SenderConfig { max_loss: Some(0.10), ..SenderConfig::default() };
    let mut w = McastWorld::new(seed, cfg, 4 << 20, group(), sender(), receivers(seed, &[(1, 2), (2, 1)]));
    w.set_default_link(lan());
    w.set_link(sender(), receiver(2, 0), lan().loss(0.30));
    assert!(w.run_to_end(Duration::from_secs(120)), "seed {seed}");
    for i in 0..2 {
        assert_eq!(w.receivers[i].verified, Some(true), "receiver {i} (seed {seed})");
    }
    let lossy = w.sender.receivers().iter().find(|r| r.addr == receiver(2, 0)).expect("registered");
    assert_eq!(lossy.outcome, ReceiverOutcome::TooLossy, "seed {seed}");
    assert!(
        matches!(w.receivers[2].ended, Some(ReceiverEvent::Ended { error: Some(code) }) if code == ErrorCode::TOO_LOSSY),
        "the receiver is told why: {:?} (seed {seed})",
        w.receivers[2].ended
    );
}

#[test]
fn a_receiver_needing_more_repair_passes_than_allowed_is_dropped() {
    let seed = 7403;
    let cfg = SenderConfig { max_repair_passes: 2, ..SenderConfig::default() };
    let mut w = McastWorld::new(seed, cfg, 2 << 20, group(), sender(), receivers(seed, &[(1, 2)]));
    w.set_default_link(lan());
    // Repairs to receiver 1 are lost half the time: it needs many passes.
    w.set_link(sender(), receiver(1, 1), lan().loss(0.5));
    assert!(w.run_to_end(Duration::from_secs(120)), "seed {seed}");
    assert_eq!(w.receivers[0].verified, Some(true), "seed {seed}");
    let slow = w.sender.receivers().iter().find(|r| r.addr == receiver(1, 1)).expect("registered");
    assert_eq!(slow.outcome, ReceiverOutcome::TooManyPasses, "seed {seed}");
}

/// Sum over receivers of the packets each lost in the first sending.
fn first_losses(w: &McastWorld) -> u64 {
    w.sender.receivers().iter().map(|r| r.reported_lost).sum()
}

#[test]
fn parity_repairs_independent_losses_of_many_receivers_with_fewer_packets() {
    let seed = 7501;
    let mut w = McastWorld::new(seed, SenderConfig::default(), 4 << 20, group(), sender(), receivers(seed, &[(1, 8)]));
    w.set_default_link(lan());
    for i in 0..8 {
        w.set_link(sender(), receiver(1, i), lan().loss(0.03));
    }
    assert!(w.run_to_end(Duration::from_secs(120)), "seed {seed}");
    assert_all_completed(&w, seed);
    let st = w.sender.stats();
    let repairs = st.parity_packets + st.repair_multicast + st.repair_unicast;
    let lost = first_losses(&w);
    let recovered: u64 = w.receivers.iter().map(|r| r.engine.stats().fec_recovered).sum();
    eprintln!("{lost} lost across 8 receivers; {repairs} repair packets ({st:?}); {recovered} rebuilt from parity");
    assert!(recovered > 0, "parity rebuilt packets (seed {seed}): {st:?}");
    // Different receivers lose different packets of a block: one parity
    // shard repairs one loss at each of them. (Unicast alone would take
    // one packet per loss; losses reported in different windows of one
    // block still go by unicast, hence not half.)
    assert!(
        repairs * 10 < lost * 6,
        "{repairs} repair packets for {lost} packets lost across the receivers (seed {seed}): {st:?}"
    );
}

#[test]
fn proactive_parity_repairs_losses_without_asking() {
    let seed = 7502;
    let cfg = SenderConfig { fec_proactive: 3, ..SenderConfig::default() };
    let mut w = McastWorld::new(seed, cfg, 4 << 20, group(), sender(), receivers(seed, &[(1, 4)]));
    w.set_default_link(lan());
    for i in 0..4 {
        w.set_link(sender(), receiver(1, i), lan().loss(0.01));
    }
    assert!(w.run_to_end(Duration::from_secs(120)), "seed {seed}");
    assert_all_completed(&w, seed);
    let st = w.sender.stats();
    let lost = first_losses(&w);
    let recovered: u64 = w.receivers.iter().map(|r| r.engine.stats().fec_recovered).sum();
    eprintln!("{lost} lost; {recovered} rebuilt from proactive parity; {st:?}");
    // 1% loss in blocks of 32 with 3 parity shards: nearly every block
    // loses fewer than 3 at each receiver, so parity alone repairs it.
    assert!(recovered * 10 >= lost * 9, "{recovered} of {lost} losses rebuilt from proactive parity (seed {seed})");
    assert!(st.repair_unicast + st.repair_multicast <= lost / 10, "few direct repairs (seed {seed}): {st:?}");
}

#[test]
fn with_a_loss_tolerance_random_loss_at_the_receivers_does_not_throttle_the_window() {
    let seed = 7503;
    let run = |tolerance: f64| {
        let cfg = SenderConfig { loss_tolerance: tolerance, ..SenderConfig::default() };
        let mut w = McastWorld::new(seed, cfg, 16 << 20, group(), sender(), receivers(seed, &[(1, 4)]));
        w.set_default_link(lan().rate(100_000_000, 1 << 20));
        for i in 0..4 {
            w.set_link(sender(), receiver(1, i), lan().rate(100_000_000, 1 << 20).loss(0.02));
        }
        assert!(w.run_to_end(Duration::from_secs(120)), "seed {seed}");
        assert_all_completed(&w, seed);
        let (took, _) = data_phase(&w);
        let mean_w = w.windows().iter().map(|x| f64::from(x.size)).sum::<f64>() / w.windows().len() as f64;
        (took, mean_w)
    };
    let (paper, paper_w) = run(0.0);
    let (tolerant, tolerant_w) = run(0.05);
    eprintln!(
        "paper rule: {paper:?}, mean window {paper_w:.1}; 5% tolerance: {tolerant:?}, mean window {tolerant_w:.1}"
    );
    assert!(tolerant_w > 1.5 * paper_w && tolerant < paper, "seed {seed}");
}

#[test]
fn a_window_whose_last_packet_is_lost_everywhere_is_probed_instead_of_expiring() {
    let seed = 7504;
    // Paper 03's stop-and-wait: nothing but the probe tells the receivers
    // that a window whose last packet they all lost has ended.
    let mut w = McastWorld::new(seed, stop_and_wait(), 8 << 20, group(), sender(), receivers(seed, &[(1, 3)]));
    w.set_default_link(lan());
    w.upstream_loss = 0.10;
    assert!(w.run_to_end(Duration::from_secs(120)), "seed {seed}");
    assert_all_completed(&w, seed);
    let st = w.sender.stats();
    eprintln!("{st:?}");
    assert!(st.probes > 0, "some windows lost their last packet (seed {seed}): {st:?}");
    assert!(st.windows_expired * 4 <= st.probes, "most were saved by the probe (seed {seed}): {st:?}");
    // With windows in flight, the next window's ACK confirms it (ACKs are
    // cumulative, spec §16.3): windows hardly ever expire.
    let mut w = McastWorld::new(seed, SenderConfig::default(), 2 << 20, group(), sender(), receivers(seed, &[(1, 3)]));
    w.set_default_link(lan());
    w.upstream_loss = 0.10;
    assert!(w.run_to_end(Duration::from_secs(120)), "seed {seed}");
    assert_all_completed(&w, seed);
    let st = w.sender.stats();
    assert!(st.windows_expired <= 1, "windows in flight (seed {seed}): {st:?}");
}

// ---- windows in flight (spec §16.3) ------------------------------------------

/// Two networks of four receivers, 100 Mbit/s and `rtt` from the sender,
/// 1% independent loss at every receiver, 8 MiB: the virtual time from the
/// first DATA to the last confirmation, the world.
fn pipelined_run(seed: u64, in_flight: u32, rtt: Duration) -> (Duration, McastWorld) {
    let cfg = SenderConfig { windows_in_flight: in_flight, ..SenderConfig::default() };
    let mut w = McastWorld::new(seed, cfg, 8 << 20, group(), sender(), receivers(seed, &[(1, 4), (2, 4)]));
    // Receivers of a network are 200 µs apart; the sender is `rtt` away.
    w.set_default_link(lan());
    let link = LinkConfig::with_delay(rtt / 2).rate(100_000_000, 2 << 20);
    for &(net, i) in &[(1u8, 0u8), (1, 1), (1, 2), (1, 3), (2, 0), (2, 1), (2, 2), (2, 3)] {
        w.set_link(sender(), receiver(net, i), link.clone().loss(0.01));
        w.set_link(receiver(net, i), sender(), LinkConfig::with_delay(rtt / 2));
    }
    assert!(w.run_to_end(Duration::from_secs(300)), "not done (seed {seed}, {in_flight} in flight)");
    assert_all_completed(&w, seed);
    let started = w.sender_events.iter().find(|(_, e)| *e == SenderEvent::DataStarted).expect("started").0;
    let done = w.receivers.iter().filter_map(|r| r.complete_at).max().expect("completed");
    (done - started, w)
}

#[test]
fn three_windows_in_flight_fill_a_path_with_a_round_trip_faster_than_stop_and_wait_under_loss() {
    // The default, three in flight: 0.80 s against 1.36 s (2026-11-28). Two
    // in flight took 0.83 s until slow start ended on its delay signal
    // (spec §16.3), 1.15 s since: the signal fires at 128 packets, halves
    // to 64 and two windows of 64 hold less than this path's 172-packet
    // BDP, regained one packet per window.
    let seed = 7701;
    let rtt = Duration::from_millis(20);
    let (paper, _) = pipelined_run(seed, 1, rtt);
    let (pipelined, w) = pipelined_run(seed, 3, rtt);
    let ratio = paper.as_secs_f64() / pipelined.as_secs_f64();
    // The bottleneck alone: every datagram of the file once at 100 Mbit/s.
    let packets = (8u64 << 20).div_ceil(u64::from(w.sender.block()));
    let wire = Duration::from_secs_f64((packets * 1452 * 8) as f64 / 1e8);
    let windows = w.windows();
    let feedback: u32 = windows.iter().map(|x| x.feedback).sum();
    let per_window_per_net = f64::from(feedback) / windows.len() as f64 / 2.0;
    eprintln!(
        "RTT {rtt:?}: stop-and-wait {paper:?}, three windows in flight {pipelined:?} ({ratio:.2}×; the wire needs {wire:?}); \
         {per_window_per_net:.2} feedback per window per network; {:?}",
        w.sender.stats()
    );
    assert!(ratio >= 1.3, "three windows in flight only {ratio:.2}× faster than stop-and-wait (seed {seed})");
    assert!(per_window_per_net <= 2.0, "{per_window_per_net:.2} feedback per window per network (seed {seed})");
}

#[test]
fn a_receiver_still_missing_data_at_the_completion_timeout_is_dropped_as_incomplete() {
    let seed = 7505;
    let cfg = SenderConfig {
        completion_timeout: Duration::from_secs(2),
        max_repair_passes: 1_000,
        ..SenderConfig::default()
    };
    let mut w = McastWorld::new(seed, cfg, 1 << 20, group(), sender(), receivers(seed, &[(1, 2)]));
    w.set_default_link(lan());
    w.set_link(sender(), receiver(1, 1), lan().loss(0.05));
    assert!(
        w.run_until(|w| w.sender_events.iter().any(|(_, e)| *e == SenderEvent::RepairStarted), Duration::from_secs(30)),
        "seed {seed}"
    );
    // From now on nothing reaches receiver 1, though it keeps asking.
    w.set_link(sender(), receiver(1, 1), LinkConfig::blackhole());
    let start = w.elapsed();
    assert!(w.run_to_end(Duration::from_secs(30)), "seed {seed}");
    assert_eq!(w.receivers[0].verified, Some(true), "seed {seed}");
    let stuck = w.sender.receivers().iter().find(|r| r.addr == receiver(1, 1)).expect("registered");
    assert_eq!(stuck.outcome, ReceiverOutcome::Incomplete, "seed {seed}");
    assert!(w.elapsed() - start < Duration::from_secs(4), "ended {:?} after the repairs began", w.elapsed() - start);
}

// ---- protected sessions (spec §19.7) ----------------------------------------

fn keys(psk: Option<u8>, key: Option<u8>, peers: &[u8]) -> SecurityConfig {
    SecurityConfig {
        psk: psk.map(|b| [b; 32]),
        private_key: key.map(|b| [b; 32]),
        known_peers: peers.iter().map(|&b| public_key(&[b; 32])).collect(),
    }
}

/// `receivers(…)` each with its own keys (one entry per receiver).
fn keyed(seed: u64, nets: &[(u8, u8)], keys: &[Option<SecurityConfig>]) -> Vec<(SocketAddr, ReceiverConfig)> {
    let mut v = receivers(seed, nets);
    for ((_, cfg), k) in v.iter_mut().zip(keys) {
        cfg.security = k.clone();
    }
    v
}

#[test]
fn a_protected_session_delivers_the_exact_file_under_loss_and_nothing_readable_crosses_the_wire() {
    let seed = 7401;
    let psk = Some(keys(Some(5), None, &[]));
    let cfg = SenderConfig { max_window: 64, min_receivers: 3, security: psk.clone(), ..SenderConfig::default() };
    let rx = keyed(seed, &[(1, 2), (2, 1)], &[psk.clone(), psk.clone(), psk]);
    let mut w = McastWorld::new(seed, cfg, 2 << 20, group(), sender(), rx);
    w.set_default_link(lan().loss(0.05));
    w.capture = Some(Vec::new());
    assert!(w.run_to_end(Duration::from_secs(120)), "not done (seed {seed})");
    assert_all_completed(&w, seed);
    let st = w.sender.stats();
    assert!(
        st.repair_unicast + st.repair_multicast + st.parity_packets > 0,
        "losses were repaired, sealed like the data (seed {seed}): {st:?}"
    );
    let block = usize::from(w.sender.block());
    assert_eq!(block, (1452 - 24 - SEAL_OVERHEAD) & !1, "sealed DATA keeps the datagram size");
    let mut file = vec![0u8; 2 << 20];
    manyfold_sim::transfer::pattern(seed, 0, &mut file);
    let captured = w.capture.take().expect("captured");
    let (mut sealed, mut clear) = (0, 0);
    for (from, to, d) in &captured {
        let h = Header::parse(d).expect("every datagram is well formed");
        assert!(!d.windows(8).any(|x| x == b"file.bin"), "the file's name in the clear, {from} -> {to}");
        if h.ptype == PacketType::McSealed {
            sealed += 1;
            // A DATA packet's header keeps its SN: its plaintext would be
            // the file at SN × block.
            let at = (h.seq as usize).saturating_mul(block);
            if let Some(plain) = file.get(at..at + 32) {
                assert!(!d.windows(32).any(|x| x == plain), "file bytes in the clear, {from} -> {to}");
            }
        } else {
            // Only the key exchange goes in the clear: invitations and
            // registrations (CKE), no data, no feedback.
            clear += 1;
            assert!(h.flags.contains(Flags::CKE), "a clear {:?} packet, {from} -> {to}", h.ptype);
            assert!(matches!(h.ptype, PacketType::McAnnounce | PacketType::McRegister), "{:?}", h.ptype);
        }
    }
    assert!(sealed > 1400 && clear >= 6, "{sealed} sealed, {clear} clear (seed {seed})");
}

#[test]
fn the_group_key_goes_only_to_receivers_the_sender_accepts_and_strangers_are_told_so() {
    let seed = 7402;
    // Static keys both ways: the sender (key 1) knows receivers 2 and 3; a
    // stranger (key 9) trusts the sender but is not on its list.
    let sender_keys = keys(None, Some(1), &[2, 3]);
    let cfg = SenderConfig { min_receivers: 2, security: Some(sender_keys), ..SenderConfig::default() };
    let rx = keyed(
        seed,
        &[(1, 3)],
        &[Some(keys(None, Some(2), &[1])), Some(keys(None, Some(3), &[1])), Some(keys(None, Some(9), &[1]))],
    );
    let mut w = McastWorld::new(seed, cfg, 1 << 20, group(), sender(), rx);
    w.set_default_link(lan().loss(0.02));
    assert!(w.run_to_end(Duration::from_secs(120)), "not done (seed {seed})");
    for i in 0..2 {
        assert_eq!(w.receivers[i].verified, Some(true), "receiver {i} (seed {seed})");
    }
    let stranger = &w.receivers[2];
    assert_eq!(
        stranger.ended,
        Some(ReceiverEvent::Ended { error: Some(ErrorCode::AUTHENTICATION_FAILED) }),
        "seed {seed}"
    );
    assert!(stranger.file.iter().all(|&b| b == 0) && stranger.engine.progress().0 == 0, "it got no data");
    assert!(stranger.engine.stats().dropped_no_key > 0, "it heard sealed data it could not open");
    let st = w.sender.stats();
    assert!(st.auth_failures >= 1, "{st:?}");
    let proven: Vec<_> = w.sender.receivers().iter().map(|r| r.peer_key).collect();
    assert_eq!(proven, [Some(public_key(&[2; 32])), Some(public_key(&[3; 32]))], "each receiver's proven key");
    // Another PSK: refused the same way.
    let seed = 7403;
    let cfg = SenderConfig { min_receivers: 1, security: Some(keys(Some(4), None, &[])), ..SenderConfig::default() };
    let rx = keyed(seed, &[(1, 2)], &[Some(keys(Some(4), None, &[])), Some(keys(Some(6), None, &[]))]);
    let mut w = McastWorld::new(seed, cfg, 256 << 10, group(), sender(), rx);
    w.set_default_link(lan());
    assert!(w.run_to_end(Duration::from_secs(60)), "not done (seed {seed})");
    assert_eq!(w.receivers[0].verified, Some(true), "seed {seed}");
    assert_eq!(w.receivers[1].ended, Some(ReceiverEvent::Ended { error: Some(ErrorCode::AUTHENTICATION_FAILED) }));
}

#[test]
fn plain_and_protected_sides_never_join_each_other_and_say_why() {
    let seed = 7404;
    // A protected receiver and a plain sender.
    let rx = keyed(seed, &[(1, 1)], &[Some(keys(Some(4), None, &[]))]);
    let cfg = SenderConfig { announce_wait: Duration::from_secs(2), ..SenderConfig::default() };
    let mut w = McastWorld::new(seed, cfg, 64 << 10, group(), sender(), rx);
    w.set_default_link(lan());
    assert!(w.run_to_end(Duration::from_secs(30)), "seed {seed}");
    assert!(w.sender_events.iter().any(|(_, e)| *e == SenderEvent::Failed(SenderError::NoReceivers)));
    let r = &w.receivers[0].engine;
    assert_eq!(r.ignored().map(|i| i.1), Some(Ignored::PlainSession), "seed {seed}");
    assert!(!r.is_registered() && r.stats().dropped_unprotected > 0);
    // A plain receiver and a protected sender.
    let rx = receivers(seed, &[(1, 1)]);
    let cfg = SenderConfig {
        announce_wait: Duration::from_secs(2),
        security: Some(keys(Some(4), None, &[])),
        ..SenderConfig::default()
    };
    let mut w = McastWorld::new(seed, cfg, 64 << 10, group(), sender(), rx);
    w.set_default_link(lan());
    assert!(w.run_to_end(Duration::from_secs(30)), "seed {seed}");
    assert!(w.sender_events.iter().any(|(_, e)| *e == SenderEvent::Failed(SenderError::NoReceivers)));
    assert_eq!(w.receivers[0].engine.ignored().map(|i| i.1), Some(Ignored::ProtectedSession), "seed {seed}");
    // A receiver whose peers list lacks the sender's key.
    let rx = keyed(seed, &[(1, 1)], &[Some(keys(None, Some(2), &[7]))]);
    let cfg = SenderConfig {
        announce_wait: Duration::from_secs(2),
        security: Some(keys(None, Some(1), &[2])),
        ..SenderConfig::default()
    };
    let mut w = McastWorld::new(seed, cfg, 64 << 10, group(), sender(), rx);
    w.set_default_link(lan());
    assert!(w.run_to_end(Duration::from_secs(30)), "seed {seed}");
    assert_eq!(w.receivers[0].engine.ignored().map(|i| i.1), Some(Ignored::UnknownSender), "seed {seed}");
}

#[test]
fn forged_replayed_and_plain_packets_change_nothing_in_a_protected_session() {
    let seed = 7405;
    let psk = Some(keys(Some(5), None, &[]));
    let cfg = SenderConfig { min_receivers: 2, security: psk.clone(), ..SenderConfig::default() };
    let mut w = McastWorld::new(seed, cfg, 2 << 20, group(), sender(), keyed(seed, &[(1, 2)], &[psk.clone(), psk]));
    w.set_default_link(lan().loss(0.02));
    w.capture = Some(Vec::new());
    let quarter = w.sender.progress().1.expect("size known") / 4;
    assert!(w.run_until(|w| w.sender.progress().0 >= quarter, Duration::from_secs(60)), "seed {seed}");
    let seen = w.capture.take().expect("captured");
    let session = w.sender.session_id();
    let attacker: SocketAddr = "198.18.9.9:5000".parse().expect("addr");
    let mut forged = 0;
    for (from, to, d) in seen.iter().filter(|(_, _, d)| d[0] & 0x0f == PacketType::McSealed as u8).take(300) {
        // Replayed as they were, from where they came.
        w.inject(*from, *to, d.clone());
        // The same under a packet number not seen yet (else it is only a
        // replay), with one bit of the ciphertext changed.
        let mut bad = d.clone();
        bad[28] ^= 0x40;
        let i = bad.len() - 20;
        bad[i] ^= 1;
        manyfold_proto::wire::seal(&mut bad);
        w.inject(*from, *to, bad);
        forged += 1;
    }
    // Plain packets with the real session id: an END for everyone, DATA of
    // garbage at real SNs, a plain ACK from a receiver's address.
    let mut buf = vec![0u8; 1500];
    let n = emit(&mut buf, PacketType::McEnd, Flags::ERR, session, 0, 0, 0, |o| {
        o[..2].copy_from_slice(&25u16.to_be_bytes());
        2
    })
    .expect("fits");
    w.inject(attacker, group(), buf[..n].to_vec());
    for sn in 0..50 {
        let n = emit(&mut buf, PacketType::McData, Flags::empty(), session, sn, sn, 1, |o| {
            o[..1000].fill(0xee);
            1000
        })
        .expect("fits");
        w.inject(sender(), group(), buf[..n].to_vec());
    }
    let (client, net) = (w.receivers[0].engine.client_id(), 1);
    let n = emit(&mut buf, PacketType::McStatus, Flags::FIN, session, 1 << 30, net, client, |_| 0).expect("fits");
    w.inject(receiver(1, 0), sender(), buf[..n].to_vec());
    assert!(w.run_to_end(Duration::from_secs(120)), "not done (seed {seed})");
    assert_all_completed(&w, seed);
    let (rs, ss) = (w.receivers[0].engine.stats(), w.sender.stats());
    let replayed = rs.dropped_replayed + w.receivers[1].engine.stats().dropped_replayed + ss.dropped_replayed;
    let forgeries = rs.dropped_unauthenticated + w.receivers[1].engine.stats().dropped_unauthenticated;
    assert!(replayed >= forged * 8 / 10, "{replayed} replays dropped of {forged} (seed {seed})");
    assert!(forgeries + ss.dropped_unauthenticated >= forged * 8 / 10, "{forgeries} forgeries dropped (seed {seed})");
    assert!(rs.dropped_unprotected >= 40 && ss.dropped_unprotected >= 1, "{rs:?} {ss:?} (seed {seed})");
}

#[test]
fn a_member_naming_another_receivers_client_id_is_ignored_and_a_replayed_register_moves_nothing() {
    let seed = 7406;
    let psk = Some(keys(Some(5), None, &[]));
    let cfg = SenderConfig { min_receivers: 2, security: psk.clone(), ..SenderConfig::default() };
    let mut rx = keyed(seed, &[(1, 2)], &[psk.clone(), psk.clone()]);
    // An evil twin: another member (it holds the PSK) with receiver 0's
    // client id and network, its own handshake randomness, another address.
    let mut twin = rx[0].1.clone();
    twin.crypto_seed = [9; 32];
    rx.push((receiver(1, 7), twin));
    let mut w = McastWorld::new(seed, cfg, 1 << 20, group(), sender(), rx);
    w.set_default_link(lan());
    w.capture = Some(Vec::new());
    w.receivers[2].running = false;
    assert!(w.run_until(|w| w.sender.progress().0 >= 100, Duration::from_secs(30)), "seed {seed}");
    assert_eq!(w.receivers[2].engine.client_id(), w.receivers[0].engine.client_id());
    w.receivers[2].running = true;
    // Receiver 0's clear REGISTER, replayed from elsewhere.
    let attacker: SocketAddr = "198.18.9.9:5000".parse().expect("addr");
    let registers: Vec<Vec<u8>> = w
        .capture
        .take()
        .expect("captured")
        .into_iter()
        .filter(|(from, _, d)| {
            *from == receiver(1, 0) && Header::parse(d).is_ok_and(|h| h.ptype == PacketType::McRegister)
        })
        .map(|(_, _, d)| d)
        .collect();
    assert!(!registers.is_empty(), "seed {seed}");
    for d in registers.iter().cycle().take(20) {
        w.inject(attacker, sender(), d.clone());
    }
    assert!(w.run_to_end(Duration::from_secs(60)), "not done (seed {seed})");
    for i in 0..2 {
        assert_eq!(w.receivers[i].verified, Some(true), "receiver {i} (seed {seed})");
    }
    assert!(!w.receivers[2].engine.is_registered(), "the twin got no key (seed {seed})");
    let table = w.sender.receivers();
    assert_eq!(table.len(), 2, "seed {seed}");
    assert_eq!(table[0].addr, receiver(1, 0), "the replay did not move receiver 0 (seed {seed})");
    assert!(table.iter().all(|r| r.outcome == ReceiverOutcome::Completed), "seed {seed}");
    assert!(w.sender.stats().registrations_ignored >= 20, "{:?} (seed {seed})", w.sender.stats());
}

#[test]
fn a_forged_invitation_does_not_keep_a_receiver_from_the_real_session() {
    let seed = 7407;
    let psk = Some(keys(Some(5), None, &[]));
    let cfg = SenderConfig { security: psk.clone(), ..SenderConfig::default() };
    let mut w = McastWorld::new(seed, cfg, 512 << 10, group(), sender(), keyed(seed, &[(1, 1)], &[psk]));
    w.set_default_link(lan());
    // Before the sender's first invitation: another session, from elsewhere,
    // whose pattern fits the receiver's keys. Nobody will answer its REGISTER.
    let attacker: SocketAddr = "198.18.9.9:5000".parse().expect("addr");
    let mut buf = vec![0u8; 200];
    let n = emit(&mut buf, PacketType::McAnnounce, Flags::CKE, 0xdead, 0, 0, 0, |o| {
        emit_invitation(o, Pattern::NnPsk0, &[0; 32])
    })
    .expect("fits");
    w.inject(attacker, group(), buf[..n].to_vec());
    assert!(w.run_to_end(Duration::from_secs(60)), "not done (seed {seed})");
    assert_all_completed(&w, seed);
}

// ---- interruption (spec §16.7) ------------------------------------------------

#[test]
fn an_interrupted_sender_tells_every_receiver_at_once_under_loss() {
    for seed in [7601u64, 7602, 7603] {
        let nets = receivers(seed, &[(1, 4), (2, 4)]);
        let mut w = McastWorld::new(seed, SenderConfig::default(), 4 << 20, group(), sender(), nets);
        w.set_default_link(lan().loss(0.10));
        let quarter = (1u32 << 20) / u32::from(w.sender.block());
        assert!(w.run_until(|w| w.sender.progress().0 >= quarter, Duration::from_secs(60)), "seed {seed}");
        let (at, sent) = (w.elapsed(), w.sent_by_sender);
        let now = w.now();
        // Under 10% loss a receiver may still be registering (its REGISTER
        // or the answer lost): it hears the group's ENDs only.
        let registered = w.sender.receivers().iter().filter(|r| r.outcome == ReceiverOutcome::Active).count() as u64;
        w.sender.abort(now, ErrorCode::INTERRUPTED);
        assert!(w.sender.is_done(), "seed {seed}");
        assert!(
            w.run_until(|w| w.receivers.iter().all(|r| r.ended.is_some()), Duration::from_secs(1)),
            "every receiver ended (seed {seed}): {:?}",
            w.receivers.iter().map(|r| &r.ended).collect::<Vec<_>>()
        );
        // Links of 200 µs: the first surviving copy arrives at once, not
        // after a sender timeout (30 s).
        assert!(w.elapsed() - at < Duration::from_millis(20), "took {:?} (seed {seed})", w.elapsed() - at);
        for (i, r) in w.receivers.iter().enumerate() {
            let want = Some(ReceiverEvent::Ended { error: Some(ErrorCode::INTERRUPTED) });
            assert_eq!(r.ended, want, "receiver {i} is told the sender was interrupted (seed {seed})");
        }
        // Three ENDs to the group and one to each registered receiver, then nothing.
        assert_eq!(w.sent_by_sender - sent, 3 + registered, "seed {seed}");
        let aborted = SenderEvent::Failed(SenderError::Aborted(ErrorCode::INTERRUPTED));
        assert!(w.sender_events.iter().any(|(_, e)| *e == aborted), "seed {seed}");
    }
}

#[test]
fn an_interrupted_receiver_is_reported_by_the_sender_at_once_and_the_others_complete() {
    for seed in [7611u64, 7612, 7613] {
        // Receiver 3 is the only one of network 2: while the sender awaits
        // it, no window of the others is confirmed.
        let nets = receivers(seed, &[(1, 3), (2, 1)]);
        let mut w = McastWorld::new(seed, SenderConfig::default(), 2 << 20, group(), sender(), nets);
        w.set_default_link(lan().loss(0.10));
        let quarter = (512u32 << 10) / u32::from(w.sender.block());
        assert!(w.run_until(|w| w.sender.progress().0 >= quarter, Duration::from_secs(60)), "seed {seed}");
        let at = w.elapsed();
        let now = w.now();
        w.receivers[3].engine.abort(now, ErrorCode::INTERRUPTED);
        assert!(w.receivers[3].engine.is_finished(), "stops at once (seed {seed})");
        let left = |w: &mut McastWorld| {
            w.sender_events.iter().find_map(|(t, e)| match e {
                SenderEvent::ReceiverLeft { addr, code, .. } => Some((*t, *addr, *code)),
                _ => None,
            })
        };
        assert!(w.run_until(|w| left(w).is_some(), Duration::from_secs(1)), "the sender heard (seed {seed})");
        let (t, addr, code) = left(&mut w).expect("found");
        assert_eq!((addr, code), (receiver(2, 0), ErrorCode::INTERRUPTED), "seed {seed}");
        assert!(t - at < Duration::from_millis(20), "known after {:?}, not a receiver timeout (seed {seed})", t - at);
        assert!(w.run_to_end(Duration::from_secs(120)), "seed {seed}");
        for i in 0..3 {
            assert_eq!(w.receivers[i].verified, Some(true), "receiver {i} (seed {seed})");
            assert!(matches!(w.receivers[i].ended, Some(ReceiverEvent::Confirmed)), "receiver {i} (seed {seed})");
        }
        let report = w.sender.receivers().iter().find(|r| r.addr == receiver(2, 0)).expect("registered");
        assert_eq!((report.outcome, report.left), (ReceiverOutcome::Incomplete, Some(ErrorCode::INTERRUPTED)));
        assert!(w.receivers[3].verified.is_none(), "it took nothing more (seed {seed})");
    }
}

// ---- parity first (spec §16.9) -----------------------------------------------

/// 32 receivers on two networks, 100 Mbit/s from the sender, 1%
/// independent loss at each: bytes the sender sent per file byte (headers,
/// parity, repairs and control included), and the world.
fn parity_first_run(seed: u64, cfg: SenderConfig, file: u64) -> (f64, McastWorld) {
    let mut w = McastWorld::new(seed, cfg, file, group(), sender(), receivers(seed, &[(1, 16), (2, 16)]));
    w.set_default_link(lan());
    for net in 1..=2 {
        for i in 0..16 {
            w.set_link(sender(), receiver(net, i), lan().rate(100_000_000, 2 << 20).loss(0.01));
        }
    }
    assert!(w.run_to_end(Duration::from_secs(300)), "not done (seed {seed})");
    assert_all_completed(&w, seed);
    (w.sent_bytes_by_sender as f64 / file as f64, w)
}

#[test]
fn parity_first_repairs_independent_loss_at_32_receivers_with_under_5_percent_more_bytes() {
    let seed = 7801;
    let file = 16u64 << 20;
    let (ratio, w) = parity_first_run(seed, SenderConfig::default(), file);
    let st = w.sender.stats();
    // Packets of the first sending each receiver never got.
    let total = file.div_ceil(u64::from(w.sender.block()));
    let lost: u64 = w
        .receivers
        .iter()
        .map(|r| {
            let st = r.engine.stats();
            total - (st.data_packets - st.duplicates)
        })
        .sum();
    let recovered: u64 = w.receivers.iter().map(|r| r.engine.stats().fec_recovered).sum();
    let took = w.receivers.iter().filter_map(|r| r.complete_at).max().expect("completed");
    eprintln!(
        "N = 32, 1% loss each: {ratio:.4} bytes sent per file byte; {lost} packets lost across the receivers, \
         {recovered} rebuilt from {} parity shards; all complete after {took:?}; {st:?}",
        st.parity_packets
    );
    // Headers alone are 1452/1428 = 1.017 (spec §16.2).
    assert!(ratio <= 1.05, "{ratio:.4} bytes sent per file byte (seed {seed}): {st:?}");
    assert_eq!(st.repair_unicast + st.repair_multicast, 0, "parity repaired everything (seed {seed}): {st:?}");
    assert!(
        st.parity_packets * 5 < lost,
        "one shard repairs different losses at different receivers: {} shards for {lost} losses (seed {seed})",
        st.parity_packets
    );
}

// ---- slow receivers (spec §16.7) ---------------------------------------------

/// Four receivers on one network, 100 Mbit/s from the sender, but the
/// fourth behind a 20 Mbit/s link of its own (a queue of 256 KB): 8 MiB.
fn slow_one_run(seed: u64, cfg: SenderConfig) -> McastWorld {
    let mut w = McastWorld::new(seed, cfg, 8 << 20, group(), sender(), receivers(seed, &[(1, 4)]));
    w.set_default_link(lan());
    for i in 0..3 {
        w.set_link(sender(), receiver(1, i), lan().rate(100_000_000, 1 << 20));
    }
    w.set_link(sender(), receiver(1, 3), lan().rate(20_000_000, 256 << 10));
    assert!(w.run_to_end(Duration::from_secs(300)), "not done (seed {seed})");
    w
}

#[test]
fn a_slow_receiver_among_fast_ones_reports_itself_and_the_session_slows_to_it() {
    let seed = 7901;
    let w = slow_one_run(seed, SenderConfig::default());
    assert_all_completed(&w, seed);
    let behind: Vec<_> = w
        .sender_events
        .iter()
        .filter_map(|(t, e)| match e {
            SenderEvent::ReceiverBehind { addr, .. } => Some((*t, *addr)),
            _ => None,
        })
        .collect();
    let slow = &w.receivers[3];
    let st = slow.engine.stats();
    let total = (8u64 << 20).div_ceil(u64::from(w.sender.block()));
    let lost = total - (st.data_packets - st.duplicates);
    let took = w.receivers.iter().filter_map(|r| r.complete_at).max().expect("completed");
    let report = w.sender.receivers().iter().find(|r| r.addr == receiver(1, 3)).expect("registered");
    eprintln!(
        "behind: {behind:?}; the slow receiver lost {lost} of {total} in the first sending, lagged {} times, \
         rate {:?} B/s; all complete after {took:?}; {:?}",
        st.lagged,
        report.rate,
        w.sender.stats()
    );
    assert_eq!(behind.iter().map(|b| b.1).collect::<Vec<_>>(), [receiver(1, 3)], "seed {seed}");
    assert!(slow.engine.is_behind() && report.behind, "seed {seed}");
    assert!(w.receivers[..3].iter().all(|r| !r.engine.is_behind()), "only the slow one (seed {seed})");
    // Awaited on its own, it sets the pace: its own link drops little of
    // the first sending instead of most of what exceeds 20 Mbit/s.
    assert!(lost * 5 < total, "{lost} of {total} lost at the slow receiver (seed {seed})");
}

#[test]
fn with_a_min_rate_the_slow_receiver_is_dropped_and_named_and_the_others_finish_fast() {
    let seed = 7902;
    // 5 MB/s: the fast ones take 12.5, the slow one 2.5.
    let cfg = SenderConfig { min_rate: Some(5_000_000), ..SenderConfig::default() };
    let w = slow_one_run(seed, cfg);
    for i in 0..3 {
        assert_eq!(w.receivers[i].verified, Some(true), "receiver {i} (seed {seed})");
    }
    let report = w.sender.receivers().iter().find(|r| r.addr == receiver(1, 3)).expect("registered");
    assert_eq!(report.outcome, ReceiverOutcome::TooSlow, "{report:?} (seed {seed})");
    assert!(report.rate.is_some_and(|r| r < 5e6), "{report:?}");
    assert_eq!(
        w.receivers[3].ended,
        Some(ReceiverEvent::Ended { error: Some(ErrorCode::TOO_SLOW) }),
        "the receiver is told why (seed {seed})"
    );
    assert!(
        w.sender_events
            .iter()
            .any(|(_, e)| matches!(e, SenderEvent::ReceiverDone { outcome: ReceiverOutcome::TooSlow, .. })),
        "seed {seed}"
    );
    let took = w.receivers[..3].iter().filter_map(|r| r.complete_at).max().expect("completed");
    eprintln!("the fast ones complete after {took:?}; {:?}", w.sender.stats());
    // 8 MiB at 100 Mbit/s is 0.7 s; at the slow one's 20 Mbit/s 3.4 s.
    assert!(took < Duration::from_secs(3), "the others waited {took:?} (seed {seed})");
}

// ---- scale (issue 22 item 5) -------------------------------------------------

/// What a scale run measured.
#[derive(Debug)]
struct Scale {
    /// Virtual time from the data phase's start to the last receiver's completion.
    took: Duration,
    /// The slowest receiver's link carrying every DATA datagram once.
    bottleneck: Duration,
    /// ACKs and NACKs per window per configured network.
    feedback: f64,
    /// Bytes the sender sent per file byte.
    bytes: f64,
}

/// `nets` networks of `per_net` receivers, 100 Mbit/s and 5 ms from the
/// sender with 1% independent loss on each receiver's link, every
/// `slow_every`-th receiver behind a 50 Mbit/s link of its own; the
/// receivers of a network are 200 µs apart and hear only each other's
/// feedback (the group crosses the router from the sender only). The file
/// is checked where it lands (light mode).
fn scale_run(seed: u64, nets: u8, per_net: u8, slow_every: usize, file: u64) -> (Scale, McastWorld) {
    let layout: Vec<(u8, u8)> = (1..=nets).map(|n| (n, per_net)).collect();
    let rx = receivers(seed, &layout);
    let addrs: Vec<SocketAddr> = rx.iter().map(|r| r.0).collect();
    let mut w = McastWorld::new(seed, SenderConfig::default(), file, group(), sender(), rx).light();
    w.lan_scoped_feedback = true;
    w.set_default_link(lan());
    let fast = LinkConfig::with_delay(Duration::from_millis(5)).rate(100_000_000, 1 << 20).loss(0.01);
    let slow = LinkConfig::with_delay(Duration::from_millis(5)).rate(50_000_000, 512 << 10).loss(0.01);
    for (i, &a) in addrs.iter().enumerate() {
        let link = if slow_every > 0 && i % slow_every == slow_every - 1 { slow.clone() } else { fast.clone() };
        w.set_link(sender(), a, link);
        w.set_link(a, sender(), LinkConfig::with_delay(Duration::from_millis(5)));
    }
    assert!(w.run_to_end(Duration::from_secs(600)), "not done (seed {seed})");
    assert_all_completed(&w, seed);
    let started = w.sender_events.iter().find(|(_, e)| *e == SenderEvent::DataStarted).expect("started").0;
    let done = w.receivers.iter().filter_map(|r| r.complete_at).max().expect("completed");
    let packets = file.div_ceil(u64::from(w.sender.block()));
    let slowest = if slow_every > 0 && slow_every <= addrs.len() { 50e6 } else { 100e6 };
    let bottleneck = Duration::from_secs_f64((packets * 1452 * 8) as f64 / slowest);
    let windows = w.windows();
    let feedback = f64::from(windows.iter().map(|x| x.feedback).sum::<u32>()) / windows.len() as f64 / f64::from(nets);
    let bytes = w.sent_bytes_by_sender as f64 / file as f64;
    (Scale { took: done - started, bottleneck, feedback, bytes }, w)
}

/// `limit`: the most the completion time may be, as a multiple of the
/// bottleneck time (issue 22's target is 1.1).
fn check_scale(seed: u64, nets: u8, per_net: u8, slow_every: usize, file: u64, limit: f64) {
    let (s, w) = scale_run(seed, nets, per_net, slow_every, file);
    let ratio = s.took.as_secs_f64() / s.bottleneck.as_secs_f64();
    let behind = w.sender.receivers().iter().filter(|r| r.behind).count();
    let repair_at = w.sender_events.iter().find(|(_, e)| *e == SenderEvent::RepairStarted).map(|x| x.0);
    let held: u64 = w.receivers.iter().map(|r| r.engine.stats().held_after_stall).sum();
    eprintln!(
        "{} receivers on {nets} networks, 1% loss, every {slow_every}th at 50 Mbit/s, {} MiB: all complete in \
         {:?}, {ratio:.3}× the bottleneck's {:?} (every packet sent once at {repair_at:?}); {:.2} feedback per \
         window per network; {:.4} bytes per file byte; {behind} receivers awaited on their own; {held} feedback \
         packets held after a stall; {:?}",
        w.receivers.len(),
        file >> 20,
        s.took,
        s.bottleneck,
        s.feedback,
        s.bytes,
        w.sender.stats()
    );
    assert!(ratio <= limit, "{ratio:.3}× the bottleneck time (seed {seed})");
    assert!(s.feedback <= 2.0, "{:.2} feedback per window per network (seed {seed})", s.feedback);
}

#[test]
fn a_hundred_receivers_on_ten_networks_under_loss_with_slow_ones_complete_near_the_bottleneck_time() {
    // The CI size of the scale scenario; the full one is the ignored test below.
    // Measured 1.068× (2026-11-28, slow start ending on its delay signal and the loss allowance's exact
    // tail, spec §16.3); 1.110× (2026-11-27, 09:10 UTC, the network's acker on; 1.123× with every receiver racing;
    // 1.108× while each window in flight counted only its own losses; 1.099× at an earlier build,
    // 1.597× before the pace to a receiver behind its network and the
    // repairs' per-block deficit, spec §16.7, §16.9): two slow receivers
    // among 100 weigh more than ten among 1,000. The bound keeps it there.
    check_scale(7951, 10, 10, 50, 8 << 20, 1.1);
}

/// spec §16.3, "Slow start": with 1% random loss at each of 100 receivers
/// someone loses two packets of nearly every small window, which the
/// normal approximation of the loss allowance read as congestion, ending
/// slow start at the second window; and once the window has outgrown the
/// slow receivers' 50 Mbit/s links, their queue (512 KiB) overflows a
/// round of windows later. Now random loss does not end slow start, the
/// rising delay of a round of windows does, before any queue overflows.
#[test]
fn slow_start_ends_on_the_slow_receivers_rising_delay_before_their_queue_overflows() {
    let seed = 7951;
    let (_, w) = scale_run(seed, 10, 10, 50, 8 << 20);
    let st = w.sender.stats();
    assert_eq!(st.slow_start_ended_by_delay, Some(true), "seed {seed}: {st:?}");
    let windows = w.windows();
    let grown = windows.iter().map(|x| x.size).max().unwrap_or(0);
    assert!(grown >= 16, "slow start doubled well past the first windows (seed {seed}): {grown}");
    let slow: Vec<SocketAddr> =
        w.receivers.iter().enumerate().filter(|(i, _)| i % 50 == 49).map(|(_, r)| r.addr).collect();
    let overflowed: u64 = slow.iter().map(|&a| w.network().link_stats(w.sender_addr, a).dropped_queue).sum();
    assert_eq!(overflowed, 0, "the slow receivers' queues overflowed (seed {seed})");
}

#[test]
#[ignore = "full size (1,000 receivers), minutes: [MANYFOLD_SIM_SEEDS=7952,7953] cargo test --release -p manyfold-sim --test mcast -- --ignored --nocapture thousand"]
fn a_thousand_receivers_on_fifty_networks_under_loss_with_slow_ones_complete_near_the_bottleneck_time() {
    // Measured 1.086× (2026-11-27, 09:35 UTC, the network's acker on; 1.082× with every receiver racing;
    // 1.124× while each window in flight counted only its own packets' losses; 1.112× at an earlier build,
    // 1.174× before the pace to a receiver behind its network and the
    // repairs' per-block deficit): issue 22's 1.1×.
    // MANYFOLD_SIM_SEEDS=7952,7953,… runs the scenario at other seeds.
    let seeds = std::env::var("MANYFOLD_SIM_SEEDS").unwrap_or_else(|_| "7952".into());
    for seed in seeds.split(',').map(|s| s.trim().parse::<u64>().expect("MANYFOLD_SIM_SEEDS: comma-separated seeds")) {
        check_scale(seed, 50, 20, 100, 16 << 20, 1.1);
    }
}

/// spec §16.4: a path that reorders (here one datagram in ten held back
/// 2 ms, as two CPUs' backlogs interleave in the lab's namespaces) loses
/// nothing. A receiver that reported every gap at its next ACK told the
/// sender of thousands of losses that were not, each one parity sent for
/// nothing and a window shrunk; the reorder window holds a young gap back
/// until it is older than what the path was seen to reorder.
#[test]
fn reordering_without_loss_is_not_reported_as_loss() {
    let seed = 7611;
    let mut w = McastWorld::new(seed, SenderConfig::default(), 8 << 20, group(), sender(), receivers(seed, &[(1, 4)]));
    w.set_default_link(lan().rate(100_000_000, 1 << 20));
    for i in 0..4 {
        w.set_link(sender(), receiver(1, i), lan().rate(100_000_000, 1 << 20).reorder(0.1, Duration::from_millis(2)));
    }
    assert!(w.run_to_end(Duration::from_secs(60)), "seed {seed}");
    assert_all_completed(&w, seed);
    let reordered: u64 = w.receivers.iter().map(|r| r.engine.stats().reordered).sum();
    let late: u64 = w.receivers.iter().map(|r| r.engine.stats().late_after_report).sum();
    let reported: u64 = w.sender.receivers().iter().map(|r| r.reported_lost).sum();
    let st = w.sender.stats();
    eprintln!(
        "reordered {reordered}, reported lost {reported}, late after report {late}, parity {}, windows {} (seed {seed})",
        st.parity_packets,
        w.windows().len()
    );
    assert!(reordered > 1000, "the path reordered (seed {seed})");
    assert!(reported * 50 < reordered, "at most 2% of reordered packets reported lost (seed {seed})");
    assert!(late * 50 < reordered, "seed {seed}");
}

/// Eight receivers of one /24 that hear each other's ACKs 30 ms late, as
/// receivers each behind a queue of their own do: no backoff is long
/// enough for suppression, and each used to ACK every window.
fn late_neighbours(seed: u64) -> McastWorld {
    let deferring =
        receivers(seed, &[(1, 8)]).into_iter().map(|(a, c)| (a, ReceiverConfig { defer_to_acker: true, ..c }));
    let mut w = McastWorld::new(seed, SenderConfig::default(), 32 << 20, group(), sender(), deferring.collect());
    // 1 Gbit/s, with room for every window in flight (no overflow loss).
    w.set_default_link(lan().rate(1_000_000_000, 8 << 20));
    for a in 0..8 {
        for b in (0..8).filter(|&b| b != a) {
            w.set_link(receiver(1, a), receiver(1, b), LinkConfig::with_delay(Duration::from_millis(30)));
        }
    }
    w
}

/// spec §16.4, the network's acker: the receivers that hear a lower
/// client id ACK let it speak for them when they have nothing to report.
#[test]
fn receivers_that_hear_each_other_late_leave_the_acks_to_one_acker() {
    let seed = 7612;
    let mut w = late_neighbours(seed);
    assert!(w.run_to_end(Duration::from_secs(60)), "seed {seed}");
    assert_all_completed(&w, seed);
    // Until a receiver has heard a lower id (30 ms), it ACKs: the mean
    // is taken after the first windows.
    let windows = w.windows();
    let steady = &windows[20..];
    let feedback: u32 = steady.iter().map(|x| x.feedback).sum();
    let per_window = f64::from(feedback) / steady.len() as f64;
    let deferred: u64 = w.receivers.iter().map(|r| r.engine.stats().acks_deferred).sum();
    eprintln!("{per_window:.2} feedback packets per window after the first 20, {deferred} ACKs deferred (seed {seed})");
    // The acker's ACK (cumulative, often for several windows), one in 16
    // of the others' (one in 2n, n = 8), their ACKs once a second, and
    // theirs when the acker, heard 30 ms late, was not heard within 25 ms:
    // 1.07 here (0.81 before that rule); all eight racing, 2.22.
    assert!(per_window <= 1.2, "{per_window:.2} per window (seed {seed})");
    let expired: Vec<usize> = windows.iter().enumerate().filter(|(_, x)| !x.confirmed).map(|(i, _)| i).collect();
    assert!(expired.is_empty(), "windows {expired:?} of {} expired (seed {seed})", windows.len());
}

/// spec §16.4: an acker behind a link half as fast as its neighbours'
/// cannot see its own lag while they let it speak for them. They ACK
/// themselves when it has not ACKed, within 25 ms, a window they let it
/// ACK; their ACKs show it its lag, it reports itself behind (§16.7), and
/// the sender paces the session to it. Without that rule it was found
/// behind at 521 ms instead of 152 ms and the run took 1.31× the
/// bottleneck time (1.12× with it, 1.13× with every receiver racing);
/// among 1,000 receivers an acker that lost a window's last packet left
/// that window to expire, 37 times, and the run took 7.1×.
#[test]
fn an_acker_slower_than_its_neighbours_is_overtaken_and_found_behind() {
    let seed = 7614;
    let deferring =
        receivers(seed, &[(1, 8)]).into_iter().map(|(a, c)| (a, ReceiverConfig { defer_to_acker: true, ..c }));
    let file = 8u64 << 20;
    let mut w = McastWorld::new(seed, SenderConfig::default(), file, group(), sender(), deferring.collect());
    w.set_default_link(lan());
    for i in 0..8 {
        w.set_link(
            sender(),
            receiver(1, i),
            LinkConfig::with_delay(Duration::from_millis(5)).rate(100_000_000, 1 << 20),
        );
    }
    // The lowest client id, the network's acker once heard, gets the slow link.
    assert!(w.run_until(|w| w.sender.receivers().len() == 8, Duration::from_secs(10)), "seed {seed}");
    let acker = w.sender.receivers().iter().min_by_key(|r| r.client).expect("eight receivers").addr;
    w.set_link(sender(), acker, LinkConfig::with_delay(Duration::from_millis(5)).rate(50_000_000, 512 << 10));
    assert!(w.run_to_end(Duration::from_secs(60)), "seed {seed}");
    assert_all_completed(&w, seed);
    let overtaken: u64 = w.receivers.iter().map(|r| r.engine.stats().acker_overtaken).sum();
    let found_behind =
        w.sender_events.iter().any(|(_, e)| matches!(e, SenderEvent::ReceiverBehind { addr, .. } if *addr == acker));
    let bottleneck = Duration::from_secs_f64((file / u64::from(w.sender.block()) * 1452 * 8) as f64 / 50e6);
    let took = w.elapsed();
    let st = w.sender.stats();
    eprintln!(
        "acker {acker} at 50 Mbit/s: {overtaken} ACKs overtook it, found behind: {found_behind}, took {took:?} against \
         {bottleneck:?}, {} multicast repairs, {} parity (seed {seed})",
        st.repair_multicast, st.parity_packets
    );
    assert!(overtaken > 0, "seed {seed}");
    assert!(found_behind, "seed {seed}");
    assert!(took.as_secs_f64() <= 1.25 * bottleneck.as_secs_f64(), "{took:?} against {bottleneck:?} (seed {seed})");
}

/// spec §16.4: when the acker dies, the others ACK again once they have
/// not heard it for 200 ms, the lowest id left takes over, and the
/// session goes on.
#[test]
fn when_the_acker_dies_another_takes_over() {
    let seed = 7613;
    let mut w = late_neighbours(seed);
    let quarter = (8u32 << 20) / u32::from(w.sender.block());
    assert!(w.run_until(|w| w.sender.progress().0 >= quarter, Duration::from_secs(60)), "seed {seed}");
    let acker =
        (0..8).min_by_key(|&i| w.sender.receivers().iter().find(|r| r.addr == receiver(1, i)).map(|r| r.client));
    let acker = usize::from(acker.expect("eight receivers"));
    w.receivers[acker].running = false;
    assert!(w.run_to_end(Duration::from_secs(60)), "seed {seed}");
    for (i, r) in w.receivers.iter().enumerate().filter(|&(i, _)| i != acker) {
        assert_eq!(r.verified, Some(true), "receiver {i} (seed {seed})");
    }
    let expired = w.windows().iter().filter(|x| !x.confirmed).count();
    eprintln!("acker {acker} died; {expired} windows expired, took {:?} (seed {seed})", w.elapsed());
    // The windows in flight when it died, and those of the next round,
    // may expire once each before the others hear nothing for 200 ms.
    assert!(expired <= 9, "{expired} windows expired (seed {seed})");
}

/// spec §16.7: a receiver that caught up with its network says so in an
/// ACK (without KLV) that no neighbour's ACK suppresses and no acker
/// speaks for, since the sender awaits it on its own until that ACK
/// comes. Before, its caught-up ACKs were suppressed like any other, the
/// windows waited for it until they expired, and each expiry grew the
/// timer by half: with this seed 34 windows expired and the file took
/// 18.9× the bottleneck time (16 MiB, seeds 7953 and 7955: 26.98× and
/// 7.65×; now 1.084× and 1.120×, RESULTS §35).
#[test]
fn a_receiver_that_caught_up_is_heard_and_no_window_waits_for_it_in_vain() {
    let seed = 7953;
    let (s, w) = scale_run(seed, 50, 20, 100, 4 << 20);
    let st = w.sender.stats();
    let ratio = s.took.as_secs_f64() / s.bottleneck.as_secs_f64();
    eprintln!("seed {seed}: {ratio:.3}× the bottleneck time, {} windows expired", st.windows_expired);
    assert_eq!(st.windows_expired, 0, "seed {seed}: {st:?}");
    assert!(ratio <= 2.0, "{ratio:.3}× the bottleneck time (seed {seed})");
}
