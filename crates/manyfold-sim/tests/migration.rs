//! Connection migration (spec §6.8): a client behind a NAT that rebinds
//! it to another port mid-transfer keeps its connection once the server
//! has validated the new address; a spoofed source that never answers the
//! challenge moves nothing; a replayed old packet starts no challenge.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{addr, client, config, establish, faulty, server, CONTROLLERS};
use manyfold_proto::{CongestionAlgorithm, State};
use manyfold_sim::{Transfer, World};

/// The client's address after its NAT rebinds it: another port.
fn rebound() -> SocketAddr {
    SocketAddr::new(client().ip(), 50_000)
}

fn world(seed: u64, loss: f64, cc: CongestionAlgorithm) -> World {
    let mut w = World::new(seed);
    w.add_node(client(), config(cc));
    w.add_node(server(), config(cc));
    w.set_default_link(faulty(loss));
    w
}

#[test]
fn a_transfer_survives_a_nat_rebinding_of_the_client_at_five_percent_loss() {
    for (i, &cc) in CONTROLLERS.iter().enumerate() {
        let seed = 7101 + i as u64;
        let mut w = world(seed, 0.05, cc);
        let mut t = Transfer::start(&mut w, client(), server(), 4_000_000, 1_000_000);
        let mut rebound_at = None;
        let done = w.run_until(
            |w| {
                if rebound_at.is_none() && t.progress().0 > 1_000_000 {
                    w.rebind(client(), rebound());
                    rebound_at = Some(w.elapsed());
                }
                t.pump(w)
            },
            Duration::from_secs(300),
        );
        assert!(done && t.error().is_none(), "{:?} (seed {seed}, {cc:?})", t.error());
        assert!(rebound_at.is_some(), "the rebinding happened mid-transfer (seed {seed})");
        let h = t.server_conn().expect("accepted");
        let stats = w.endpoint(server()).conn(h).stats();
        // The server's connection may be freed once closed; its figures
        // then come from the trace of events. While held, it moved.
        if let Some(s) = stats {
            assert_eq!(s.path.migrations, 1, "seed {seed}, {cc:?}");
            assert_eq!(w.endpoint(server()).conn(h).remote_addr(), Some(rebound()), "seed {seed}");
        }
    }
}

#[test]
fn a_spoofed_source_that_never_answers_the_challenge_moves_nothing() {
    let seed = 7201;
    let mut w = world(seed, 0.0, CongestionAlgorithm::NewReno);
    let spoofed = addr(99); // no node there: the challenge goes nowhere
    w.set_capture(true);
    let (c, s) = establish(&mut w);
    w.act(client(), |ep, _| ep.conn_mut(c).send(&[5u8; 2000])).unwrap();
    w.act(server(), |ep, _| ep.conn_mut(s).send(&[4u8; 2000])).unwrap();
    w.run_for(Duration::from_millis(200));
    // The attacker copies the client's newest packet and sends it on from
    // another address (an on-path attacker; a blind one lacks the ids).
    let last = w
        .captured()
        .iter()
        .rev()
        .find(|p| p.from == client() && p.to == server())
        .map(|p| p.data.clone())
        .expect("the client sent something");
    for _ in 0..5 {
        w.inject(spoofed, server(), last.clone());
        w.run_for(Duration::from_millis(300));
    }
    w.run_for(Duration::from_secs(5));
    assert_eq!(w.endpoint(server()).conn(s).remote_addr(), Some(client()), "seed {seed}");
    let stats = w.endpoint(server()).conn(s).stats().expect("open");
    assert_eq!(stats.path.migrations, 0, "seed {seed}");
    assert!(stats.path.challenges >= 1, "seed {seed}");
    assert_eq!(stats.path.failed, 1, "three challenges unanswered: given up (seed {seed})");
    assert_eq!(w.endpoint(server()).conn(s).state(), Some(State::Established), "seed {seed}");
    // The connection still works both ways on the old path.
    w.act(server(), |ep, _| ep.conn_mut(s).send(&[6u8; 1000])).unwrap();
    let mut buf = [0u8; 4000];
    let mut got = 0;
    let ok = w.run_until(
        |w| {
            while let Ok(Some(n)) = w.endpoint_mut(client()).conn_mut(c).recv(&mut buf) {
                if n == 0 {
                    break;
                }
                got += n;
            }
            got == 3000
        },
        Duration::from_secs(5),
    );
    assert!(ok, "seed {seed}");
}

#[test]
fn a_replayed_old_packet_from_a_new_address_starts_no_challenge() {
    let seed = 7301;
    let mut w = world(seed, 0.0, CongestionAlgorithm::NewReno);
    w.set_capture(true);
    let (c, s) = establish(&mut w);
    w.act(client(), |ep, _| ep.conn_mut(c).send(&[5u8; 1000])).unwrap();
    w.run_for(Duration::from_millis(200));
    let mut old = w
        .captured()
        .iter()
        .find(|p| p.from == client() && p.to == server() && common::is_data(&p.data))
        .map(|p| p.data.clone())
        .expect("a data packet");
    // A packet from long ago: its sequence number 100,000 packets back
    // (an attacker with a recording; the CRC made right again).
    let seq = u32::from_be_bytes(old[8..12].try_into().unwrap()).wrapping_sub(100_000);
    old[8..12].copy_from_slice(&seq.to_be_bytes());
    manyfold_proto::wire::seal(&mut old);
    w.inject(addr(98), server(), old);
    w.run_for(Duration::from_secs(2));
    let stats = w.endpoint(server()).conn(s).stats().expect("open");
    assert_eq!((stats.path.challenges, stats.path.stale), (0, 1), "seed {seed}");
    assert_eq!(w.endpoint(server()).stats().dropped_stale_path, 1, "seed {seed}");
    assert_eq!(w.endpoint(server()).conn(s).remote_addr(), Some(client()));
}
