//! A group's sender holds one copy of the data, whatever the number of
//! receivers (spec §14.4, issue 20 item 6: "a group's sender memory stays
//! flat in N"). The sender's heap is measured mid-transfer, with every
//! peer's window full and the shared send buffer holding what is not yet
//! delivered: what dropping its endpoint frees, with a counting allocator.
//! Per peer it adds a connection and the records of its packets in
//! flight (spec §5.4), not a copy of the messages: flat in N where each
//! peer's flight is small against the data held, 128 bytes per packet of
//! each peer's flight where it is not.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use manyfold_proto::{Endpoint, EndpointConfig, GroupConfig, GroupError, GroupEvent, MessageOptions};
use manyfold_sim::{LinkConfig, World};

#[global_allocator]
static GLOBAL: manyfold_testalloc::Counting = manyfold_testalloc::Counting;

const MESSAGE: usize = 64 << 10;
const SEED: u64 = 5301;
const SEND_BUFFER: usize = 16 << 20;

fn addr(n: u16) -> SocketAddr {
    SocketAddr::from(([198, 18, 0, n as u8], 4433))
}

/// Heap bytes `ep` holds: what dropping it frees.
fn heap_of(ep: Endpoint) -> i64 {
    let before = manyfold_testalloc::live_bytes();
    drop(ep);
    before - manyfold_testalloc::live_bytes()
}

/// The sender's heap after 300 ms of sending 64 KiB messages to `n`
/// receivers, each on its own copy of `link`, as fast as the group takes
/// them; and how many bytes the group held undelivered then.
fn sender_heap(n: u16, link: &LinkConfig) -> (i64, u64) {
    let mut w = World::new(SEED);
    let cfg = EndpointConfig::default();
    w.add_node(addr(1), cfg.clone());
    let peers: Vec<SocketAddr> = (0..n).map(|i| addr(10 + i)).collect();
    for &p in &peers {
        w.add_node(p, cfg.clone());
        w.endpoint_mut(p).set_listening(true);
        w.set_link(addr(1), p, link.clone());
    }
    let config = GroupConfig { send_buffer: SEND_BUFFER, ..GroupConfig::default() };
    let g = w.act(addr(1), |ep, now| ep.group_connect(now, &peers, config)).expect("group_connect");
    let up = w.run_until(|w| !w.group_events(addr(1)).is_empty(), Duration::from_secs(5));
    assert!(up, "no handshake outcome (seed {SEED})");
    assert!(matches!(w.group_events(addr(1))[0].event, GroupEvent::Established { .. }), "seed {SEED}");
    let mut conns = Vec::new();
    w.run_until(
        |w| {
            // The group takes messages until its send buffer is full.
            loop {
                match w.act(addr(1), |ep, now| {
                    ep.group_send(g, now, Bytes::from(vec![7u8; MESSAGE]), MessageOptions::default())
                }) {
                    Ok(_) => {}
                    Err(GroupError::Blocked) => break,
                    Err(e) => panic!("group_send: {e} (seed {SEED})"),
                }
            }
            for &p in &peers {
                let ep = w.endpoint_mut(p);
                while let Some(h) = ep.accept() {
                    conns.push((p, h));
                }
            }
            for &(p, h) in &conns {
                while let Ok(Some(_)) = w.endpoint_mut(p).conn_mut(h).recv_message() {}
            }
            false
        },
        Duration::from_millis(300),
    );
    let held = w.endpoint(addr(1)).group(g).map_or(0, |g| g.stats().outstanding_bytes);
    let ep = w.remove_node(addr(1)).expect("the sender");
    (heap_of(ep), held)
}

/// 100 Mbit/s to each receiver, `delay` each way, a queue of `queue` bytes.
fn link(delay_ms: u64, queue: usize) -> LinkConfig {
    LinkConfig::with_delay(Duration::from_millis(delay_ms)).rate(100_000_000, queue)
}

/// The sender's heap at 1 and 16 receivers on `link`, and what each
/// receiver past the first adds.
fn heaps(link: &LinkConfig) -> (i64, i64, i64, u64) {
    let (one, held_one) = sender_heap(1, link);
    let (sixteen, held_sixteen) = sender_heap(16, link);
    let per_peer = (sixteen - one) / 15;
    eprintln!(
        "{link:?}: sender heap at N = 1 {one} B ({held_one} B undelivered), N = 16 {sixteen} B ({held_sixteen} B), \
         ratio {:.3}, {per_peer} B per added peer",
        sixteen as f64 / one as f64
    );
    let half = SEND_BUFFER as u64 / 8;
    assert!(held_one > half && held_sixteen > half, "the group's buffer was not in use (seed {SEED})");
    (one, sixteen, per_peer, held_sixteen)
}

#[test]
fn a_group_senders_heap_at_16_receivers_is_within_1_2x_of_one_receivers() {
    let (one, sixteen, _, _) = heaps(&link(1, 256 << 10));
    assert!(sixteen as f64 <= 1.2 * one as f64, "{sixteen} B at N = 16 against {one} B at N = 1 (seed {SEED})");
}

/// 10 ms each way and a 1 MB queue: each peer's flight (up to ~1.2 MB,
/// ~850 packets) is recorded at 128 bytes a packet in a ring that doubles
/// (311 KB per peer, RESULTS §38). A copy of the messages would cost each
/// peer all the group holds undelivered (3.5 MB).
#[test]
fn on_a_long_fat_path_each_receiver_costs_its_flights_records_not_a_copy() {
    let (_, _, per_peer, held) = heaps(&link(10, 1 << 20));
    assert!(per_peer < held as i64 / 4, "{per_peer} B per peer with {held} B undelivered (seed {SEED})");
}
