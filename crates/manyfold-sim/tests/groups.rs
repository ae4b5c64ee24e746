//! Groups (spec §14): one sender, many receivers over unicast. Each test
//! checks byte for byte what every receiver got against what the mode
//! promises it: every message in All mode, at least one (or P) holder of
//! each message in Any and AtLeast, K copies chosen by load in Subset;
//! and the parallel handshake, absent and dying peers, peers joining and
//! leaving mid-transfer, and eviction of a slow peer.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use common::{addr, drop_first, is_syn, CONTROLLERS};
use manyfold_proto::{
    CongestionAlgorithm, ConnHandle, Destination, EndpointConfig, Eviction, GroupConfig, GroupError, GroupEvent,
    GroupHandle, Left, MessageOptions, Mode, StreamId, StreamItem, Unreachable,
};
use manyfold_sim::{pattern, LinkConfig, World};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn sender() -> SocketAddr {
    addr(1)
}

/// Receiver `i` (0-based).
fn peer(i: u16) -> SocketAddr {
    addr(10 + i)
}

/// Message `seq`: its number, then `len - 8` bytes of a pattern of it.
fn message(seq: u64, len: usize) -> Bytes {
    let mut v = vec![0u8; len.max(8)];
    v[..8].copy_from_slice(&seq.to_be_bytes());
    pattern(seq, 0, &mut v[8..]);
    Bytes::from(v)
}

/// The message's number, after checking every byte of it.
fn check(seed: u64, data: &[u8]) -> u64 {
    let seq = u64::from_be_bytes(data[..8].try_into().expect("8-byte header"));
    assert_eq!(&message(seq, data.len())[..], data, "message {seq} corrupted (seed {seed})");
    seq
}

fn size_of(seq: u64) -> usize {
    1000 + (seq as usize * 7919) % 15_000
}

/// A sender and `n` listening receivers, each on its own link.
fn world(seed: u64, links: &[LinkConfig]) -> World {
    world_with(seed, links, CongestionAlgorithm::NewReno)
}

fn world_with(seed: u64, links: &[LinkConfig], cc: CongestionAlgorithm) -> World {
    let mut w = World::new(seed);
    let mut cfg = EndpointConfig::default();
    cfg.connection.congestion = cc;
    cfg.connection.max_retransmissions = 6;
    cfg.connection.max_rto = Duration::from_secs(2);
    w.add_node(sender(), cfg.clone());
    for (i, link) in links.iter().enumerate() {
        let p = peer(i as u16);
        w.add_node(p, cfg.clone());
        w.endpoint_mut(p).set_listening(true);
        w.set_link(sender(), p, link.clone());
    }
    w
}

/// What each receiver got: whole messages by stream, abandon notices, ends.
#[derive(Default)]
struct Receivers {
    conns: HashMap<SocketAddr, Vec<ConnHandle>>,
    got: BTreeMap<SocketAddr, BTreeMap<u16, Vec<u64>>>,
    abandoned: BTreeMap<SocketAddr, usize>,
    finished: BTreeMap<SocketAddr, usize>,
}

impl Receivers {
    fn take(&mut self, w: &mut World, peers: &[SocketAddr]) {
        let seed = w.seed();
        for &p in peers {
            let ep = w.endpoint_mut(p);
            while let Some(h) = ep.accept() {
                self.conns.entry(p).or_default().push(h);
            }
            for &h in self.conns.get(&p).map(Vec::as_slice).unwrap_or(&[]) {
                // A receiver application closes its side once the sender's ended.
                if ep.conn(h).messages_done() && ep.conn(h).state() != Some(manyfold_proto::State::Closed) {
                    ep.conn_mut(h).close();
                }
                while let Ok(Some((stream, item))) = ep.conn_mut(h).recv_message() {
                    match item {
                        StreamItem::Message(m) => {
                            let seq = check(seed, &m);
                            self.got.entry(p).or_default().entry(stream.get()).or_default().push(seq);
                        }
                        StreamItem::Abandoned => *self.abandoned.entry(p).or_default() += 1,
                        StreamItem::Finished => *self.finished.entry(p).or_default() += 1,
                        StreamItem::Reset(_) => {}
                    }
                }
            }
        }
    }

    fn on(&self, p: SocketAddr, stream: u16) -> &[u64] {
        self.got.get(&p).and_then(|s| s.get(&stream)).map_or(&[], Vec::as_slice)
    }

    /// How many receivers hold message `seq` whole, on any stream.
    fn holders(&self, seq: u64) -> usize {
        self.got.values().filter(|s| s.values().any(|v| v.contains(&seq))).count()
    }
}

/// Sends messages `0..count` to the group as fast as it takes them.
struct Pump {
    g: GroupHandle,
    next: u64,
    count: u64,
    /// Message `seq`'s length.
    size: fn(u64) -> usize,
}

impl Pump {
    fn run(&mut self, w: &mut World) {
        while self.next < self.count {
            let (g, seq) = (self.g, self.next);
            match w.act(sender(), |ep, now| {
                ep.group_send(g, now, message(seq, (self.size)(seq)), MessageOptions::default())
            }) {
                Ok(s) => {
                    assert_eq!(s, seq, "group sequence numbers follow the sends (seed {})", w.seed());
                    self.next += 1;
                }
                Err(GroupError::Blocked) => return,
                Err(e) => panic!("group_send: {e} (seed {})", w.seed()),
            }
        }
    }
}

fn group_events(w: &World) -> Vec<GroupEvent> {
    w.group_events(sender()).iter().map(|e| e.event.clone()).collect()
}

/// Opens a group to `peers` and runs until it is established.
fn open(w: &mut World, peers: &[SocketAddr], config: GroupConfig) -> GroupHandle {
    let seed = w.seed();
    let g = w.act(sender(), |ep, now| ep.group_connect(now, peers, config)).expect("group_connect");
    let ok = w.run_until(|w| !group_events(w).is_empty(), Duration::from_secs(30));
    assert!(ok, "no handshake outcome (seed {seed})");
    match &group_events(w)[0] {
        GroupEvent::Established { .. } => g,
        other => panic!("group not established: {other:?} (seed {seed})"),
    }
}

/// Pumps `count` messages and reads every receiver until the group has
/// delivered them all (and `extra` holds), for at most `within`.
fn transfer(
    w: &mut World,
    g: GroupHandle,
    peers: &[SocketAddr],
    rx: &mut Receivers,
    count: u64,
    within: Duration,
    mut during: impl FnMut(&mut World, &Pump),
) -> bool {
    let mut pump = Pump { g, next: 0, count, size: size_of };
    w.run_until(
        |w| {
            pump.run(w);
            rx.take(w, peers);
            during(w, &pump);
            pump.next == count && w.endpoint(sender()).group(g).is_some_and(|g| g.all_delivered())
        },
        within,
    )
}

fn lossy(delay_ms: u64, loss: f64) -> LinkConfig {
    LinkConfig::with_delay(ms(delay_ms)).loss(loss).jitter(ms(1))
}

// ---- the parallel handshake (spec §14.3) ------------------------------------------------

#[test]
fn group_handshake_takes_one_round_trip_to_the_farthest_peer() {
    let seed = 5001;
    let links: Vec<LinkConfig> = [10, 25, 40].iter().map(|&d| LinkConfig::with_delay(ms(d))).collect();
    let mut w = world(seed, &links);
    let peers: Vec<SocketAddr> = (0..3).map(peer).collect();
    let t0 = w.elapsed();
    open(&mut w, &peers, GroupConfig::default());
    let took = w.group_events(sender())[0].at - t0;
    assert!(
        took >= ms(80) && took <= ms(85),
        "handshake took {took:?}, expected 1 RTT of the 80 ms peer (seed {seed})"
    );
}

#[test]
fn a_peer_whose_syn_was_lost_is_asked_again_after_twice_the_others_answer_time() {
    let seed = 5004;
    let mut w = world(seed, &vec![LinkConfig::with_delay(ms(40)); 3]);
    // The first SYN to peer 2 is lost; its answer would otherwise wait for
    // the 1 s response timeout.
    w.set_drop_rule(drop_first(1, sender(), peer(2), is_syn));
    let peers: Vec<SocketAddr> = (0..3).map(peer).collect();
    let t0 = w.elapsed();
    open(&mut w, &peers, GroupConfig::default());
    let took = w.group_events(sender())[0].at - t0;
    // Answers at 80 ms; the retry at 2 × 80 + 10 ms; its answer 80 ms later.
    assert!(took >= ms(245) && took <= ms(255), "took {took:?} (seed {seed})");
    assert_eq!(w.dropped_by_rule(), 1, "seed {seed}");
}

#[test]
fn an_unanswering_peer_is_named_and_the_group_established_at_the_overall_timeout() {
    let seed = 5002;
    let mut links = vec![LinkConfig::with_delay(ms(20)); 3];
    links[1] = LinkConfig::blackhole();
    let mut w = world(seed, &links);
    let peers: Vec<SocketAddr> = (0..3).map(peer).collect();
    let config = GroupConfig { overall_timeout: Duration::from_secs(3), ..GroupConfig::default() };
    let t0 = w.elapsed();
    let g = open(&mut w, &peers, config);
    let ev = &w.group_events(sender())[0];
    assert_eq!(ev.event, GroupEvent::Established { unreachable: vec![(peer(1), Unreachable::NoAnswer)] });
    assert_eq!(ev.at - t0, Duration::from_secs(3), "ends at the overall timeout (seed {seed})");
    // The group works with the two that answered.
    let mut rx = Receivers::default();
    assert!(transfer(&mut w, g, &peers, &mut rx, 50, Duration::from_secs(30), |_, _| {}), "seed {seed}");
    for p in [peer(0), peer(2)] {
        assert_eq!(rx.on(p, 0), (0..50).collect::<Vec<_>>(), "{p} (seed {seed})");
    }
}

#[test]
fn a_refusing_peer_answers_at_once_and_too_few_answers_fail_the_group() {
    let seed = 5003;
    let mut w = world(seed, &vec![LinkConfig::with_delay(ms(20)); 3]);
    w.endpoint_mut(peer(2)).set_listening(false);
    let peers: Vec<SocketAddr> = (0..3).map(peer).collect();
    let config = GroupConfig { min_peers: 3, ..GroupConfig::default() };
    let t0 = w.elapsed();
    let g = w.act(sender(), |ep, now| ep.group_connect(now, &peers, config)).unwrap();
    assert!(w.run_until(|w| !group_events(w).is_empty(), Duration::from_secs(30)));
    let ev = &w.group_events(sender())[0];
    assert_eq!(ev.event, GroupEvent::Failed { unreachable: vec![(peer(2), Unreachable::Refused)] }, "seed {seed}");
    assert!(ev.at - t0 <= ms(45), "a refusal is an answer: no waiting for the timeout (seed {seed})");
    let err = w.act(sender(), |ep, now| ep.group_send(g, now, message(0, 100), MessageOptions::default()));
    assert_eq!(err, Err(GroupError::Closed));
}

// ---- delivery modes (spec §14.5) --------------------------------------------------------

#[test]
fn all_mode_delivers_every_message_to_every_peer_under_loss() {
    for (seed, &cc) in (5011..).zip(CONTROLLERS) {
        let links: Vec<LinkConfig> = [(10, 0.05), (20, 0.05), (35, 0.05)].iter().map(|&(d, l)| lossy(d, l)).collect();
        let mut w = world_with(seed, &links, cc);
        let peers: Vec<SocketAddr> = (0..3).map(peer).collect();
        let g = open(&mut w, &peers, GroupConfig::default());
        let mut rx = Receivers::default();
        let ok = transfer(&mut w, g, &peers, &mut rx, 300, Duration::from_secs(120), |_, _| {});
        assert!(ok, "not delivered (seed {seed})");
        w.run_until(
            |w| {
                rx.take(w, &peers);
                peers.iter().all(|&p| rx.on(p, 0).len() == 300)
            },
            Duration::from_secs(10),
        );
        for &p in &peers {
            assert_eq!(rx.on(p, 0), (0..300).collect::<Vec<_>>(), "{p} (seed {seed})");
        }
        let stats = w.endpoint(sender()).group(g).unwrap().stats();
        assert_eq!((stats.messages_delivered, stats.outstanding_bytes), (300, 0), "seed {seed}");
    }
}

/// spec §9.1 (issue 20 item 7): the default controller does not let one
/// receiver's random loss (3%, 20 ms RTT, no standing queue) cut a
/// three-receiver group to the loss-based rate, MSS·1.22 / (RTT·√p) ≈
/// 0.5 MB/s (Mathis et al.), which NewReno is held near; it once took 293 s
/// for a file BBR moves in 4.5 s.
#[test]
fn one_lossy_receiver_does_not_cut_a_default_group_to_the_loss_based_rate() {
    let seed = 5061;
    let default_cc = EndpointConfig::default().connection.congestion;
    assert_eq!(default_cc, CongestionAlgorithm::Bbr, "spec §9.1: the lab's winner is the default");
    let link = |loss| LinkConfig::with_delay(ms(10)).rate(100_000_000, 1 << 20).loss(loss);
    let peers: Vec<SocketAddr> = (0..3).map(peer).collect();
    let count = 3_000;
    let bytes: usize = (0..count).map(size_of).sum();
    let mathis = 1_452.0 * 1.22 / (0.020 * 0.03f64.sqrt());
    let time = |cc| {
        let mut w = world_with(seed, &[link(0.0), link(0.0), link(0.03)], cc);
        let g = open(&mut w, &peers, GroupConfig::default());
        let start = w.elapsed();
        let mut rx = Receivers::default();
        let ok = transfer(&mut w, g, &peers, &mut rx, count, Duration::from_secs(300), |_, _| {});
        assert!(ok, "{cc:?}: not delivered (seed {seed})");
        (w.elapsed() - start).as_secs_f64()
    };
    let (fast, reno) = (time(default_cc), time(CongestionAlgorithm::NewReno));
    let (rate, reno_rate) = (bytes as f64 / fast, bytes as f64 / reno);
    eprintln!(
        "{bytes} B: default {fast:.2} s ({:.2} MB/s), NewReno {reno:.2} s ({:.2} MB/s); loss-based rate {:.2} MB/s",
        rate / 1e6,
        reno_rate / 1e6,
        mathis / 1e6
    );
    assert!(rate > 8.0 * mathis, "default group at {:.2} MB/s (seed {seed})", rate / 1e6);
    assert!(rate > 0.6 * 12.5e6, "default group at {:.2} MB/s, under 60% of the link (seed {seed})", rate / 1e6);
    assert!(reno_rate < 4.0 * mathis, "NewReno at {:.2} MB/s: the loss did not bite (seed {seed})", reno_rate / 1e6);
}

/// spec §7.2: on paths of 64 KiB datagrams each peer's datagrams go in two
/// pieces, the group's shared message not copied into them; under loss
/// every message still reaches every peer whole, and no receiver finds a
/// checksum wrong (spec §14.4: some payloads' checksums were reused).
#[test]
fn large_group_messages_go_in_two_pieces_and_arrive_intact_under_loss() {
    let seed = 5101;
    let links: Vec<LinkConfig> = [10, 20, 35, 50].iter().map(|&d| lossy(d, 0.03).mtu(65_507)).collect();
    let (gathered, reused) = large_messages_to_four(seed, &links);
    // 60 messages of 200-300 KB to 4 peers: at least 4 x 60 x 3 datagrams.
    assert!(gathered >= 4 * 60 * 3, "{gathered} datagrams in two pieces (seed {seed})");
    assert!(reused > 0, "no payload checksum reused (seed {seed})");
}

/// spec §14.4: on like paths the members' datagrams end with the same
/// slices of the shared messages, and a slice's checksum is computed for
/// the first member only. Messages written while some members' buffers
/// ran dry cut them at other places, and the memo empties whenever the
/// group lets go of a message, so not every copy matches: at 1% loss over
/// a fifth do (none without the memo; in the 16-peer loopback fan-out the
/// CRC fell from 21% to 7.5% of the sender's CPU).
#[test]
fn a_group_computes_a_payload_checksum_once_for_members_on_like_paths() {
    let seed = 5102;
    let links: Vec<LinkConfig> = (0..4).map(|_| lossy(10, 0.01).mtu(65_507)).collect();
    let (gathered, reused) = large_messages_to_four(seed, &links);
    assert!(reused * 5 >= gathered, "{reused} of {gathered} payload checksums reused (seed {seed})");
}

/// 60 messages of 200-300 KB to four peers over `links`, each checked on
/// receipt; returns the sender's datagrams sent in two pieces and how many
/// of those reused a payload checksum.
fn large_messages_to_four(seed: u64, links: &[LinkConfig]) -> (u64, u64) {
    let mut w = world_with(seed, links, CongestionAlgorithm::Bbr);
    let peers: Vec<SocketAddr> = (0..4).map(peer).collect();
    let g = open(&mut w, &peers, GroupConfig::default());
    let mut rx = Receivers::default();
    let mut pump = Pump { g, next: 0, count: 60, size: |seq| 200_000 + (seq as usize * 7919) % 100_000 };
    let ok = w.run_until(
        |w| {
            pump.run(w);
            rx.take(w, &peers);
            pump.next == 60 && peers.iter().all(|&p| rx.on(p, 0).len() == 60)
        },
        Duration::from_secs(300),
    );
    assert!(ok, "not delivered (seed {seed})");
    for &p in &peers {
        assert_eq!(rx.on(p, 0), (0..60).collect::<Vec<_>>(), "{p} (seed {seed})");
        assert_eq!(w.endpoint(p).stats().dropped_checksum, 0, "{p} (seed {seed})");
    }
    let stats = w.endpoint(sender()).stats();
    eprintln!("{} gathered, {} with a reused payload checksum", stats.datagrams_gathered, stats.payload_crcs_reused);
    (stats.datagrams_gathered, stats.payload_crcs_reused)
}

#[test]
fn any_mode_is_satisfied_by_one_ack_and_gives_up_the_other_copies() {
    let seed = 5021;
    // Peer 2 loses a third of what it is sent: its copies are rarely the first acked.
    let links = vec![lossy(10, 0.0), lossy(10, 0.0), lossy(40, 0.3)];
    let mut w = world(seed, &links);
    let peers: Vec<SocketAddr> = (0..3).map(peer).collect();
    let g = open(&mut w, &peers, GroupConfig { mode: Mode::Any, ..GroupConfig::default() });
    let mut rx = Receivers::default();
    assert!(transfer(&mut w, g, &peers, &mut rx, 200, Duration::from_secs(60), |_, _| {}), "seed {seed}");
    w.run_for(Duration::from_secs(2));
    rx.take(&mut w, &peers);
    for seq in 0..200 {
        assert!(rx.holders(seq) >= 1, "message {seq} reached no one (seed {seed})");
    }
    let slow = w.endpoint(sender()).group_peer_stats(g, manyfold_proto::PeerId(2)).unwrap();
    let given_up = slow.conn.unwrap().abandoned_messages;
    assert!(given_up > 0, "the lossy peer's copies were never given up (seed {seed})");
    // The lossy peer got fewer messages, each whole (checked on receipt) and in order.
    let got = rx.on(peer(2), 0);
    assert!(got.len() < 200, "seed {seed}");
    assert!(got.windows(2).all(|x| x[0] < x[1]), "seed {seed}");
}

#[test]
fn at_least_mode_puts_every_message_at_p_peers() {
    let seed = 5031;
    let links: Vec<LinkConfig> =
        [(10, 0.02), (15, 0.1), (20, 0.02), (30, 0.1)].iter().map(|&(d, l)| lossy(d, l)).collect();
    let mut w = world(seed, &links);
    let peers: Vec<SocketAddr> = (0..4).map(peer).collect();
    let g = open(&mut w, &peers, GroupConfig { mode: Mode::AtLeast(2), ..GroupConfig::default() });
    let mut rx = Receivers::default();
    assert!(transfer(&mut w, g, &peers, &mut rx, 200, Duration::from_secs(60), |_, _| {}), "seed {seed}");
    w.run_for(Duration::from_secs(2));
    rx.take(&mut w, &peers);
    for seq in 0..200 {
        assert!(rx.holders(seq) >= 2, "message {seq} at {} peers (seed {seed})", rx.holders(seq));
    }
}

#[test]
fn subset_mode_sends_each_message_to_k_peers_favouring_the_less_loaded() {
    let seed = 5041;
    // Peer 3 is far away and lossy: its load score is the worst.
    let links = vec![lossy(10, 0.0), lossy(10, 0.0), lossy(10, 0.0), lossy(120, 0.05)];
    let mut w = world(seed, &links);
    let peers: Vec<SocketAddr> = (0..4).map(peer).collect();
    let config = GroupConfig { mode: Mode::Subset { k: 2, p: 2 }, ..GroupConfig::default() };
    let g = open(&mut w, &peers, config);
    let mut rx = Receivers::default();
    assert!(transfer(&mut w, g, &peers, &mut rx, 300, Duration::from_secs(60), |_, _| {}), "seed {seed}");
    w.run_for(Duration::from_secs(2));
    rx.take(&mut w, &peers);
    for seq in 0..300 {
        assert_eq!(rx.holders(seq), 2, "message {seq} (seed {seed})");
    }
    let counts: Vec<usize> = peers.iter().map(|&p| rx.on(p, 0).len()).collect();
    let fast_min = counts[..3].iter().min().copied().unwrap();
    assert!(counts[3] < fast_min, "the loaded peer got {counts:?} (seed {seed})");
    // Each receiver's stream is whole and in order: it got its own messages, no gaps.
    for &p in &peers {
        assert!(rx.on(p, 0).windows(2).all(|x| x[0] < x[1]), "{p} out of order (seed {seed})");
        assert_eq!(rx.abandoned.get(&p), None, "{p} (seed {seed})");
    }
}

// ---- peers that die, join and leave (spec §14.7) ------------------------------------------

#[test]
fn all_mode_carries_on_without_a_peer_that_dies_mid_transfer() {
    let seed = 5051;
    let mut w = world(seed, &vec![lossy(15, 0.02); 3]);
    let peers: Vec<SocketAddr> = (0..3).map(peer).collect();
    let g = open(&mut w, &peers, GroupConfig::default());
    let mut rx = Receivers::default();
    let mut killed = false;
    let ok = transfer(&mut w, g, &peers, &mut rx, 400, Duration::from_secs(120), |w, pump| {
        if !killed && pump.next >= 100 {
            // The peer vanishes: nothing it was sent is ever acknowledged again.
            w.set_link(sender(), peer(1), LinkConfig::blackhole());
            killed = true;
        }
    });
    assert!(ok, "the group stalled on its dead peer (seed {seed})");
    let left = group_events(&w).into_iter().find_map(|e| match e {
        GroupEvent::PeerLeft { addr, why, .. } => Some((addr, why)),
        _ => None,
    });
    assert!(matches!(left, Some((a, Left::Lost(_))) if a == peer(1)), "{left:?} (seed {seed})");
    w.run_until(
        |w| {
            rx.take(w, &peers);
            [0, 2].iter().all(|&i| rx.on(peer(i), 0).len() == 400)
        },
        Duration::from_secs(10),
    );
    for i in [0, 2] {
        assert_eq!(rx.on(peer(i), 0), (0..400).collect::<Vec<_>>(), "peer {i} (seed {seed})");
    }
    let dead = rx.on(peer(1), 0);
    assert_eq!(dead, (0..dead.len() as u64).collect::<Vec<_>>(), "the dead peer got a clean prefix (seed {seed})");
}

#[test]
fn a_peer_added_mid_transfer_receives_from_its_join_point() {
    let seed = 5061;
    let mut w = world(seed, &vec![lossy(15, 0.03); 3]);
    let first: Vec<SocketAddr> = (0..2).map(peer).collect();
    let all: Vec<SocketAddr> = (0..3).map(peer).collect();
    // A small shared buffer paces the sender, so the join lands mid-transfer.
    let g = open(&mut w, &first, GroupConfig { send_buffer: 256 << 10, ..GroupConfig::default() });
    let mut rx = Receivers::default();
    let mut added: Option<Destination> = None;
    let ok = transfer(&mut w, g, &all, &mut rx, 300, Duration::from_secs(120), |w, pump| {
        if added.is_none() && pump.next >= 100 {
            added = Some(w.act(sender(), |ep, now| ep.group_add_destination(g, now, peer(2))).unwrap());
        }
    });
    assert!(ok, "seed {seed}");
    let joined = group_events(&w).into_iter().find_map(|e| match e {
        GroupEvent::PeerJoined { addr, first_msg, .. } if addr == peer(2) => Some(first_msg),
        _ => None,
    });
    let from = joined.unwrap_or_else(|| panic!("no PeerJoined (seed {seed})"));
    assert!((100..300).contains(&from), "joined at {from} (seed {seed})");
    assert_eq!(added.unwrap().stream.get(), 0);
    w.run_until(
        |w| {
            rx.take(w, &all);
            rx.on(peer(2), 0).len() as u64 == 300 - from
        },
        Duration::from_secs(10),
    );
    assert_eq!(rx.on(peer(2), 0), (from..300).collect::<Vec<_>>(), "the late peer (seed {seed})");
    for p in first {
        assert_eq!(rx.on(p, 0), (0..300).collect::<Vec<_>>(), "{p} (seed {seed})");
    }
}

#[test]
fn a_second_destination_to_a_present_peer_is_a_new_stream() {
    let seed = 5062;
    let mut w = world(seed, &vec![lossy(15, 0.02); 2]);
    let peers: Vec<SocketAddr> = (0..2).map(peer).collect();
    let g = open(&mut w, &peers, GroupConfig::default());
    let d = w.act(sender(), |ep, now| ep.group_add_destination(g, now, peer(1))).unwrap();
    assert_eq!(d.stream.get(), 1);
    let mut rx = Receivers::default();
    assert!(transfer(&mut w, g, &peers, &mut rx, 100, Duration::from_secs(60), |_, _| {}), "seed {seed}");
    w.run_until(
        |w| {
            rx.take(w, &peers);
            rx.on(peer(1), 1).len() == 100
        },
        Duration::from_secs(10),
    );
    let all: Vec<u64> = (0..100).collect();
    assert_eq!(
        (rx.on(peer(0), 0), rx.on(peer(1), 0), rx.on(peer(1), 1)),
        (&all[..], &all[..], &all[..]),
        "seed {seed}"
    );
}

#[test]
fn a_peer_removed_mid_transfer_gets_a_whole_prefix_then_the_end() {
    let seed = 5071;
    let mut w = world(seed, &vec![lossy(15, 0.03); 3]);
    let peers: Vec<SocketAddr> = (0..3).map(peer).collect();
    let g = open(&mut w, &peers, GroupConfig { send_buffer: 256 << 10, ..GroupConfig::default() });
    let mut rx = Receivers::default();
    let mut removed_at = None;
    let ok = transfer(&mut w, g, &peers, &mut rx, 300, Duration::from_secs(120), |w, pump| {
        if removed_at.is_none() && pump.next >= 120 {
            removed_at = Some(pump.next);
            w.act(sender(), |ep, now| ep.group_fully_remove_destination(g, now, manyfold_proto::PeerId(0))).unwrap();
        }
    });
    assert!(ok, "seed {seed}");
    let cut = removed_at.unwrap();
    assert!(
        w.run_until(
            |w| {
                rx.take(w, &peers);
                group_events(w).iter().any(|e| matches!(e, GroupEvent::PeerLeft { why: Left::Removed, .. }))
            },
            Duration::from_secs(30)
        ),
        "seed {seed}"
    );
    assert_eq!(
        rx.on(peer(0), 0),
        (0..cut).collect::<Vec<_>>(),
        "removed peer: every message sent before (seed {seed})"
    );
    w.run_until(
        |w| {
            rx.take(w, &peers);
            rx.on(peer(2), 0).len() == 300
        },
        Duration::from_secs(10),
    );
    for i in [1, 2] {
        assert_eq!(rx.on(peer(i), 0), (0..300).collect::<Vec<_>>(), "peer {i} (seed {seed})");
    }
}

#[test]
fn a_slow_peer_is_evicted_only_when_eviction_is_on() {
    let seed = 5081;
    let fast = LinkConfig::with_delay(ms(10)).rate(20_000_000, 200_000);
    let slow = LinkConfig::with_delay(ms(10)).rate(1_000_000, 50_000);
    let peers: Vec<SocketAddr> = (0..3).map(peer).collect();
    let count = 400; // ~3.4 MB: 27 s through the slow link, 1.4 s through the fast ones.
    for evict in [true, false] {
        let mut w = world(seed, &[fast.clone(), fast.clone(), slow.clone()]);
        let eviction = evict.then_some(Eviction { min_fraction: 0.5, after: Duration::from_secs(2) });
        let config = GroupConfig { send_buffer: 512 << 10, eviction, ..GroupConfig::default() };
        let g = open(&mut w, &peers, config);
        let mut rx = Receivers::default();
        let t0 = w.elapsed();
        assert!(
            transfer(&mut w, g, &peers, &mut rx, count, Duration::from_secs(120), |_, _| {}),
            "evict {evict} (seed {seed})"
        );
        let took = w.elapsed() - t0;
        let evicted = group_events(&w)
            .iter()
            .any(|e| matches!(e, GroupEvent::PeerLeft { why: Left::Evicted, addr, .. } if *addr == peer(2)));
        assert_eq!(evicted, evict, "took {took:?} (seed {seed})");
        if evict {
            assert!(took < Duration::from_secs(10), "the fast peers waited {took:?} (seed {seed})");
        } else {
            assert!(took > Duration::from_secs(20), "All keeps pace with the slowest: {took:?} (seed {seed})");
        }
        w.run_until(
            |w| {
                rx.take(w, &peers);
                rx.on(peer(1), 0).len() as u64 == count
            },
            Duration::from_secs(10),
        );
        for i in [0, 1] {
            assert_eq!(rx.on(peer(i), 0), (0..count).collect::<Vec<_>>(), "peer {i} evict {evict} (seed {seed})");
        }
    }
}

#[test]
fn closing_the_group_reports_closed_once_every_peer_has_everything() {
    let seed = 5091;
    let mut w = world(seed, &vec![lossy(15, 0.05); 3]);
    let peers: Vec<SocketAddr> = (0..3).map(peer).collect();
    let g = open(&mut w, &peers, GroupConfig::default());
    let mut rx = Receivers::default();
    let mut pump = Pump { g, next: 0, count: 80, size: size_of };
    assert!(
        w.run_until(
            |w| {
                pump.run(w);
                pump.next == 80
            },
            Duration::from_secs(30)
        ),
        "seed {seed}"
    );
    // Close with messages still in flight: they are delivered first.
    w.act(sender(), |ep, now| ep.group_close(g, now));
    let ok = w.run_until(
        |w| {
            rx.take(w, &peers);
            group_events(w).contains(&GroupEvent::Closed)
        },
        Duration::from_secs(60),
    );
    assert!(ok, "no Closed event (seed {seed})");
    assert!(w.endpoint(sender()).group(g).unwrap().is_closed());
    w.run_until(
        |w| {
            rx.take(w, &peers);
            rx.finished.len() == 3
        },
        Duration::from_secs(10),
    );
    for &p in &peers {
        assert_eq!(rx.on(p, 0), (0..80).collect::<Vec<_>>(), "{p} (seed {seed})");
        assert_eq!(rx.finished.get(&p), Some(&1), "{p} saw the end of the stream (seed {seed})");
    }
    let err = w.act(sender(), |ep, now| ep.group_send(g, now, message(80, 10), MessageOptions::default()));
    assert_eq!(err, Err(GroupError::Closed), "seed {seed}");
}

#[test]
fn an_impossible_mode_is_refused_naming_its_numbers() {
    let mut w = world(5094, &[lossy(15, 0.0)]);
    let config = GroupConfig { mode: Mode::Subset { k: 1, p: 2 }, ..GroupConfig::default() };
    let e = w.act(sender(), |ep, now| ep.group_connect(now, &[peer(0)], config)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid delivery mode subset=1/2: at-least=P needs P >= 1, subset=K/P needs 1 <= P <= K"
    );
}

#[test]
fn a_peer_that_finishes_its_connection_is_read_as_the_end_of_its_stream_once() {
    // spec §14.8: a server that closes (a fetch client's server that is
    // not the kind of server it expected, a receiver that is done) ends
    // its byte stream; the group's reader sees that end once, as a
    // one-to-one reader sees its peer's FIN, and the other peer goes on.
    let seed = 5093;
    let mut w = world(seed, &vec![lossy(15, 0.03); 2]);
    let peers: Vec<SocketAddr> = (0..2).map(peer).collect();
    let g = open(&mut w, &peers, GroupConfig::default());
    // A first message ends the members' echo holds (spec §6.2).
    w.act(sender(), |ep, now| ep.group_send(g, now, message(0, 100), MessageOptions::default())).unwrap();
    let mut accepted = None;
    w.run_until(
        |w| {
            accepted = accepted.or_else(|| w.endpoint_mut(peer(1)).accept());
            accepted.is_some()
        },
        Duration::from_secs(10),
    );
    let accepted = accepted.expect("peer 1 accepted the group's connection");
    w.endpoint_mut(peer(1)).conn_mut(accepted).close();
    let mut ends = Vec::new();
    w.run_until(
        |w| {
            while let Some((d, item)) = w.endpoint_mut(sender()).group_recv_message(g) {
                ends.push((d, item));
            }
            !ends.is_empty()
        },
        Duration::from_secs(10),
    );
    w.run_for(Duration::from_secs(1));
    while let Some((d, item)) = w.endpoint_mut(sender()).group_recv_message(g) {
        ends.push((d, item));
    }
    let id = w.endpoint(sender()).group(g).and_then(|g| g.peer_ids().nth(1)).expect("peer 1 in the group");
    assert_eq!(
        ends,
        vec![(Destination { peer: id, stream: StreamId::BYTES }, StreamItem::Finished)],
        "peer 1's FIN, once (seed {seed})"
    );
}

#[test]
fn removing_one_destination_ends_its_stream_only() {
    let seed = 5092;
    let mut w = world(seed, &vec![lossy(15, 0.03); 2]);
    let peers: Vec<SocketAddr> = (0..2).map(peer).collect();
    let g = open(&mut w, &peers, GroupConfig { send_buffer: 256 << 10, ..GroupConfig::default() });
    let second = w.act(sender(), |ep, now| ep.group_add_destination(g, now, peer(1))).unwrap();
    let mut rx = Receivers::default();
    let mut cut = None;
    let ok = transfer(&mut w, g, &peers, &mut rx, 200, Duration::from_secs(60), |w, pump| {
        if cut.is_none() && pump.next >= 80 {
            cut = Some(pump.next);
            w.act(sender(), |ep, now| ep.group_remove_destination(g, now, second)).unwrap();
        }
    });
    assert!(ok, "seed {seed}");
    let cut = cut.unwrap();
    w.run_until(
        |w| {
            rx.take(w, &peers);
            rx.on(peer(1), 0).len() == 200
        },
        Duration::from_secs(10),
    );
    let all: Vec<u64> = (0..200).collect();
    assert_eq!((rx.on(peer(0), 0), rx.on(peer(1), 0)), (&all[..], &all[..]), "seed {seed}");
    assert_eq!(rx.on(peer(1), 1), (0..cut).collect::<Vec<_>>(), "the removed stream got a prefix (seed {seed})");
    assert_eq!(rx.finished.get(&peer(1)), Some(&1), "and its end, while stream 0 goes on (seed {seed})");
}

#[test]
fn a_silent_peer_is_dropped_after_the_peer_timeout_not_the_connection_s() {
    let seed = 5052;
    // Default connection settings: on its own a connection would retry
    // for minutes before giving up on a dead peer.
    let mut w = World::new(seed);
    w.add_node(sender(), EndpointConfig::default());
    let peers: Vec<SocketAddr> = (0..3).map(peer).collect();
    for &p in &peers {
        w.add_node(p, EndpointConfig::default());
        w.endpoint_mut(p).set_listening(true);
        w.set_link(sender(), p, lossy(15, 0.0));
    }
    let config = GroupConfig { peer_timeout: Duration::from_secs(3), ..GroupConfig::default() };
    let g = open(&mut w, &peers, config);
    let mut rx = Receivers::default();
    let mut killed_at = None;
    let ok = transfer(&mut w, g, &peers, &mut rx, 300, Duration::from_secs(60), |w, pump| {
        if killed_at.is_none() && pump.next >= 50 {
            w.set_link(sender(), peer(2), LinkConfig::blackhole());
            killed_at = Some(w.elapsed());
        }
    });
    assert!(ok, "seed {seed}");
    let left = w.group_events(sender()).iter().find_map(|e| match &e.event {
        GroupEvent::PeerLeft { addr, why, .. } => Some((e.at, *addr, *why)),
        _ => None,
    });
    let (at, addr, why) = left.unwrap_or_else(|| panic!("no PeerLeft (seed {seed})"));
    assert_eq!((addr, why), (peer(2), Left::Unresponsive), "seed {seed}");
    let after = at - killed_at.unwrap();
    assert!(after >= Duration::from_secs(3) && after <= ms(3300), "dropped {after:?} after it died (seed {seed})");
    for i in [0, 1] {
        w.run_until(
            |w| {
                rx.take(w, &peers);
                rx.on(peer(i), 0).len() == 300
            },
            Duration::from_secs(10),
        );
        assert_eq!(rx.on(peer(i), 0), (0..300).collect::<Vec<_>>(), "peer {i} (seed {seed})");
    }
}

#[test]
fn closing_with_a_dead_peer_completes_after_the_peer_timeout() {
    let seed = 5093;
    let mut w = World::new(seed);
    w.add_node(sender(), EndpointConfig::default());
    let peers: Vec<SocketAddr> = (0..2).map(peer).collect();
    for &p in &peers {
        w.add_node(p, EndpointConfig::default());
        w.endpoint_mut(p).set_listening(true);
        w.set_link(sender(), p, lossy(15, 0.0));
    }
    let config = GroupConfig { peer_timeout: Duration::from_secs(2), ..GroupConfig::default() };
    let g = open(&mut w, &peers, config);
    let mut rx = Receivers::default();
    assert!(transfer(&mut w, g, &peers, &mut rx, 20, Duration::from_secs(30), |_, _| {}), "seed {seed}");
    // Everything delivered; then peer 1 dies and the group closes: its FIN
    // is never acknowledged.
    w.set_link(sender(), peer(1), LinkConfig::blackhole());
    let t0 = w.elapsed();
    w.act(sender(), |ep, now| ep.group_close(g, now));
    let ok = w.run_until(
        |w| {
            rx.take(w, &peers);
            group_events(w).contains(&GroupEvent::Closed)
        },
        Duration::from_secs(30),
    );
    assert!(ok, "the close waited on a dead peer (seed {seed})");
    let took = w.elapsed() - t0;
    assert!(took >= Duration::from_secs(2) && took <= ms(2300), "close took {took:?} (seed {seed})");
    let why = group_events(&w).into_iter().find_map(|e| match e {
        GroupEvent::PeerLeft { addr, why, .. } if addr == peer(1) => Some(why),
        _ => None,
    });
    assert_eq!(why, Some(Left::Unresponsive), "seed {seed}");
}

// ---- churn (spec §14.7) ---------------------------------------------------------------------

/// The churning receivers' applications take each connection and drop it
/// at once: it closes as soon as the sender's side does.
fn release_accepted(w: &mut World) {
    for p in (1..4).map(peer) {
        let ep = w.endpoint_mut(p);
        while let Some(h) = ep.accept() {
            ep.conn_mut(h).release();
        }
    }
}

/// Joins and leaves over a long life: a joiner takes the slot of a peer
/// that has gone, so the group and the endpoint hold the peers present,
/// not every peer ever added. `MANYFOLD_CHURN_CYCLES` sizes it (the lab
/// ran 100,000; CI runs 1,500).
#[test]
fn a_group_with_churn_holds_only_the_peers_present() {
    let seed = 5301;
    let cycles: u64 = std::env::var("MANYFOLD_CHURN_CYCLES").ok().and_then(|v| v.parse().ok()).unwrap_or(1_500);
    let mut w = world(seed, &vec![LinkConfig::with_delay(ms(2)); 4]);
    let g = open(&mut w, &[peer(0)], GroupConfig::default());
    let mut last_id = None;
    let mut prev_id = None;
    for i in 0..cycles {
        let joiner = peer(1 + (i % 3) as u16);
        let d = w.act(sender(), |ep, now| ep.group_add_destination(g, now, joiner)).expect("a slot is free");
        assert_ne!(Some(d.peer), last_id, "a reused slot gets a new id (seed {seed}, cycle {i})");
        last_id = Some(d.peer);
        let joined = w.run_until(
            |w| {
                release_accepted(w);
                group_events(w).iter().any(|e| matches!(e, GroupEvent::PeerJoined { peer, .. } if *peer == d.peer))
            },
            Duration::from_secs(10),
        );
        assert!(joined, "cycle {i}: the joiner never joined (seed {seed})");
        // The id of the peer whose slot it took names nobody any more.
        if let Some(prev) = prev_id {
            assert!(w.endpoint(sender()).group_peer_stats(g, prev).is_none(), "cycle {i} (seed {seed})");
        }
        prev_id = Some(d.peer);
        w.act(sender(), |ep, now| ep.group_fully_remove_destination(g, now, d.peer)).expect("present");
        let left = w.run_until(
            |w| {
                release_accepted(w);
                let n = group_events(w).iter().filter(|e| matches!(e, GroupEvent::PeerLeft { .. })).count();
                n as u64 > i
            },
            // The sender closes last or first: TIME-WAIT (15 s) may come before the end.
            Duration::from_secs(20),
        );
        assert!(left, "cycle {i}: the peer never left (seed {seed})");
        let stats = w.endpoint(sender()).group(g).expect("the group").stats();
        assert!(stats.peer_slots <= 3, "cycle {i}: {} slots for 2 peers present (seed {seed})", stats.peer_slots);
        assert!(
            w.endpoint(sender()).connection_count() <= 4,
            "cycle {i}: the sender holds {} connections (seed {seed})",
            w.endpoint(sender()).connection_count()
        );
    }
    let stats = w.endpoint(sender()).group(g).expect("the group").stats();
    assert!(stats.slots_reused + 3 >= cycles, "{} reuses in {cycles} cycles (seed {seed})", stats.slots_reused);
    assert_eq!(stats.peers_up, 1, "peer 0 stayed throughout (seed {seed})");
}
