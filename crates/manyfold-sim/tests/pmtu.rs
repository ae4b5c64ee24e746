//! Path MTU discovery (spec §3.7): the size a bulk connection settles on
//! for loopback, jumbo and Ethernet paths, under loss, when the path
//! narrows mid-transfer (a black hole) or widens under a settled
//! connection, and with discovery off.

mod common;

use std::time::Duration;

use common::*;
use manyfold_proto::wire::Flags;
use manyfold_proto::{CloseReason, CongestionAlgorithm, ConnStats, EndpointConfig};
use manyfold_sim::{LinkConfig, Transfer, TransferReport, World};

const MB: u64 = 1 << 20;

/// Sends `bytes` client -> server over `link` with BBR and checks that
/// everything arrived and both sides closed gracefully.
fn send(seed: u64, link: LinkConfig, cfg: EndpointConfig, bytes: u64) -> (World, TransferReport) {
    let mut w = pair(seed, link, cfg);
    let t = Transfer::start(&mut w, client(), server(), bytes, 0);
    let r = t.run(&mut w, Duration::from_secs(600)).unwrap_or_else(|e| panic!("{e} (seed {seed})"));
    assert_eq!(r.client_close, Some(CloseReason::Graceful), "seed {seed}");
    assert_eq!(r.server_close, Some(CloseReason::Graceful), "seed {seed}");
    assert_eq!(r.client.bytes_sent, bytes, "seed {seed}");
    (w, r)
}

fn bbr() -> EndpointConfig {
    config(CongestionAlgorithm::Bbr)
}

fn path(mtu: usize) -> LinkConfig {
    LinkConfig::with_delay(Duration::from_millis(5)).mtu(mtu)
}

fn summary(s: &ConnStats) -> String {
    format!(
        "size {} probes {}/{} lost, black holes {}, packets {}, lost {}",
        s.datagram_size, s.pmtu_probes_lost, s.pmtu_probes_sent, s.pmtu_black_holes, s.packets_sent, s.lost_packets
    )
}

#[test]
fn a_loopback_sized_path_is_found_with_one_probe() {
    let seed = 3701;
    let (_, r) = send(seed, path(65_507), bbr(), 20 * MB);
    let c = &r.client;
    assert_eq!(c.datagram_size, 65_507, "{} (seed {seed})", summary(c));
    assert_eq!((c.pmtu_probes_sent, c.pmtu_probes_lost), (1, 0), "{} (seed {seed})", summary(c));
    // 20 MB in 1,452-byte datagrams would take over 14,000 packets.
    assert!(c.packets_sent < 2_000, "{} (seed {seed})", summary(c));
}

#[test]
fn a_jumbo_path_rules_out_the_ceiling_and_settles_on_9000_bytes() {
    let seed = 3702;
    let (w, r) = send(seed, path(8_972), bbr(), 20 * MB);
    let c = &r.client;
    assert_eq!(c.datagram_size, 8_972, "{} (seed {seed})", summary(c));
    assert_eq!(c.pmtu_probes_lost, 3, "three lost probes rule 65,507 out: {} (seed {seed})", summary(c));
    assert_eq!(c.lost_packets, c.pmtu_probes_lost, "no data packet lost: {} (seed {seed})", summary(c));
    assert_eq!(c.retransmissions, 0, "a lost probe's small repeat is no retransmission: {} (seed {seed})", summary(c));
    assert_eq!(w.link_stats(client(), server()).dropped_mtu, 3, "seed {seed}");
}

#[test]
fn an_ethernet_path_settles_on_1472_bytes_over_ipv4() {
    let seed = 3703;
    let (_, r) = send(seed, path(1_472), bbr(), 5 * MB);
    let c = &r.client;
    assert_eq!(c.datagram_size, 1_472, "{} (seed {seed})", summary(c));
    assert_eq!(c.pmtu_probes_lost, 6, "{} (seed {seed})", summary(c));
}

/// An Ethernet interface at the sender itself: the kernel refuses the
/// 65,507- and 8,972-byte probes (EMSGSIZE, DF set) and the driver says
/// so. Each refusal rules its size out at once, so the search is one
/// probe per size, and a refused probe never holds congestion window
/// for the round trip a probe lost on the path would.
#[test]
fn probes_the_local_interface_refuses_rule_their_size_out_at_once() {
    let seed = 3707;
    let mut w = pair(seed, path(1_472), bbr());
    w.set_interface_mtu(client(), 1_472);
    let t = Transfer::start(&mut w, client(), server(), 4 * MB, 0);
    let r = t.run(&mut w, Duration::from_secs(600)).unwrap_or_else(|e| panic!("{e} (seed {seed})"));
    assert_eq!(r.client_close, Some(CloseReason::Graceful), "seed {seed}");
    let c = &r.client;
    assert_eq!(c.datagram_size, 1_472, "{} (seed {seed})", summary(c));
    assert_eq!(w.node_stats(client()).refused_too_large, 2, "{} (seed {seed})", summary(c));
    // Without the refusal each size would take three lost probes.
    assert_eq!((c.pmtu_probes_sent, c.pmtu_probes_lost), (3, 2), "{} (seed {seed})", summary(c));
    assert_eq!(w.link_stats(client(), server()).dropped_mtu, 0, "nothing oversized reached the link (seed {seed})");
}

#[test]
fn discovery_finds_the_path_under_5pct_loss_each_way() {
    for seed in 3710..3714 {
        let link = path(8_972).loss(0.05);
        let (_, r) = send(seed, link, bbr(), 10 * MB);
        let c = &r.client;
        assert_eq!(c.datagram_size, 8_972, "{} (seed {seed})", summary(c));
    }
}

#[test]
fn a_path_that_narrows_mid_transfer_falls_back_and_the_transfer_completes() {
    let seed = 3720;
    // 1 Gbit/s: 200 MB take well over a second, so the path narrows mid-way.
    let gigabit = |mtu| path(mtu).rate(1_000_000_000, 4 << 20);
    let mut w = pair(seed, gigabit(65_507), bbr());
    let mut t = Transfer::start(&mut w, client(), server(), 200 * MB, 0);
    let size = |w: &World, t: &Transfer| w.endpoint(client()).conn(t.client_conn()).stats().map(|s| s.datagram_size);
    // Pump until the loopback size is found, then a while longer at it.
    let mut at_large = None;
    while w.elapsed() < Duration::from_secs(10) {
        t.pump(&mut w);
        w.step();
        if size(&w, &t) == Some(65_507) {
            at_large.get_or_insert(w.elapsed());
        }
        if at_large.is_some_and(|d| w.elapsed() > d + Duration::from_millis(300)) {
            break;
        }
    }
    assert!(at_large.is_some(), "loopback size found first (seed {seed})");
    w.set_link(client(), server(), gigabit(1_472));
    let r = t.run(&mut w, Duration::from_secs(600)).unwrap_or_else(|e| panic!("{e} (seed {seed})"));
    assert_eq!(r.client_close, Some(CloseReason::Graceful), "seed {seed}");
    let c = &r.client;
    assert_eq!(c.pmtu_black_holes, 1, "{} (seed {seed})", summary(c));
    assert_eq!(c.datagram_size, 1_472, "searched again below the vanished size: {} (seed {seed})", summary(c));
    assert_eq!(r.client.bytes_sent, 200 * MB, "seed {seed}");
}

/// spec §3.7 "Search done": a connection that settled on an Ethernet path
/// tries the larger sizes again after RFC 8899's PMTU_RAISE_TIMER (600 s),
/// so a path that widened under it (a jumbo link now) is found then, not
/// never; until then it sends no probe.
#[test]
fn a_path_that_widens_mid_connection_is_found_after_the_raise_timer() {
    let seed = 3725;
    // 1 Mbit/s: 90 MB take over 700 s, so the connection outlives the timer.
    let slow = |mtu| path(mtu).rate(1_000_000, 64 << 10);
    let mut w = pair(seed, slow(1_472), bbr());
    let mut t = Transfer::start(&mut w, client(), server(), 90 * MB, 0);
    let stats = |w: &World, t: &Transfer| w.endpoint(client()).conn(t.client_conn()).stats().expect("client stats");
    // Settled: three tries each rule 65,507 and 8,972 out, 1,472 passes.
    let settled = w.run_until(
        |w| {
            t.pump(w);
            let s = stats(w, &t);
            s.datagram_size == 1_472 && s.pmtu_probes_sent == 7
        },
        Duration::from_secs(120),
    );
    assert!(settled, "{} (seed {seed})", summary(&stats(&w, &t)));
    let (settled_at, probes) = (w.elapsed(), stats(&w, &t).pmtu_probes_sent);
    w.set_link(client(), server(), slow(8_972));
    let found = w.run_until(
        |w| {
            t.pump(w);
            stats(w, &t).datagram_size == 8_972
        },
        Duration::from_secs(700),
    );
    let after = w.elapsed() - settled_at;
    let s = stats(&w, &t);
    assert!(found, "not found in 700 s: {} (seed {seed})", summary(&s));
    eprintln!("settled at {settled_at:?}, widened size found {after:?} later: {}", summary(&s));
    assert!(
        after >= Duration::from_secs(590) && after <= Duration::from_secs(620),
        "found {after:?} after settling; the raise timer is 600 s (seed {seed})"
    );
    // 65,507 ruled out again in three tries, then 8,972 passes.
    assert_eq!(s.pmtu_probes_sent - probes, 4, "{} (seed {seed})", summary(&s));
    let r = t.run(&mut w, Duration::from_secs(600)).unwrap_or_else(|e| panic!("{e} (seed {seed})"));
    assert_eq!(r.client_close, Some(CloseReason::Graceful), "seed {seed}");
    assert_eq!(r.client.bytes_sent, 90 * MB, "seed {seed}");
}

#[test]
fn without_discovery_every_datagram_keeps_max_datagram() {
    let seed = 3730;
    let mut cfg = bbr();
    cfg.connection.path_mtu_discovery = None;
    let (w, r) = send(seed, path(65_507), cfg, 5 * MB);
    let c = &r.client;
    assert_eq!((c.datagram_size, c.pmtu_probes_sent), (1_452, 0), "{} (seed {seed})", summary(c));
    assert_eq!(w.link_stats(client(), server()).dropped_mtu, 0, "seed {seed}");
}

#[test]
fn a_short_exchange_sends_no_probe() {
    let seed = 3740;
    let (_, r) = send(seed, path(65_507), bbr(), 1_000);
    assert_eq!(r.client.pmtu_probes_sent, 0, "{} (seed {seed})", summary(&r.client));
}

#[test]
fn a_packet_sent_before_the_fin_is_resent_whole_never_cut_past_it() {
    // spec §3.7: after a black hole a packet larger than the new size is
    // cut, and what does not fit takes new sequence numbers. For a packet
    // sent before our FIN those numbers would come after the FIN: the
    // receiver reaches the FIN as soon as the cut packet arrives, ends the
    // stream without the bytes that moved and drops them when they come
    // (the soak saw such an echo end short, clean, once). Such a packet is
    // resent whole instead.
    let seed = 3730;
    let bytes = 2 * MB;
    // 20 Mbit/s: the pacer's bucket (2 ms at the rate) holds less than
    // the whole packet, which must go all the same.
    let link = || path(65_507).rate(20_000_000, 4 << 20);
    // A dry run finds the FIN's sequence number (runs are deterministic up
    // to the first datagram the rule below drops).
    let fin = {
        let mut w = pair(seed, link(), bbr());
        w.set_capture(true);
        let t = Transfer::start(&mut w, client(), server(), bytes, 0);
        t.run(&mut w, Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e} (seed {seed})"));
        let mut h = w.captured().iter().filter(|p| p.from == client()).filter_map(|p| header(&p.data));
        h.find(|h| h.flags.contains(Flags::FIN)).map(|h| h.seq).expect("a FIN")
    };
    // The first eight full-size copies of the packet before the FIN
    // vanish, as if the path had narrowed: enough for two RTOs in a row and
    // the fall back. The path then carries it again.
    const VANISH: u32 = 8;
    let mut w = pair(seed, link(), bbr());
    let mut vanished = 0;
    w.set_drop_rule(move |from, _, d| {
        let drop = from == client()
            && d.len() > 1_500
            && vanished < VANISH
            && header(d).is_some_and(|h| h.seq == fin.wrapping_sub(1));
        vanished += u32::from(drop);
        drop
    });
    let t = Transfer::start(&mut w, client(), server(), bytes, 0);
    // Transfer::run checks every byte the server read and its end.
    let r = t.run(&mut w, Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e} (seed {seed})"));
    assert_eq!(w.dropped_by_rule(), u64::from(VANISH), "seed {seed}");
    assert_eq!(r.client.pmtu_black_holes, 1, "the sender fell back: {} (seed {seed})", summary(&r.client));
    assert_eq!(r.server_close, Some(CloseReason::Graceful), "seed {seed}");
    assert_eq!(r.client_close, Some(CloseReason::Graceful), "seed {seed}");
}
