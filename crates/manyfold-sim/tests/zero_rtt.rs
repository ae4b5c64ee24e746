//! Repeat clients in one round trip (spec §6.9): a client that holds a
//! listener's address-validation token sends its request on its SYN and
//! has the reply one round trip later; a stale token, another listener's,
//! or one presented from another address falls back to the full
//! handshake with the request served once; a replayed first packet is not
//! served twice under a replay window (and is, by design, when the server
//! declares its requests idempotent); a lost 0-RTT SYN-ACK is repaired.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::rr::{reply_to, request_of, Server};
use common::{addr, client, header, is_syn, is_syn_ack, server};
use manyfold_proto::wire::{Flags, HandshakeParams, Packet};
use manyfold_proto::{ConnHandle, EarlyData, Endpoint, EndpointConfig};
use manyfold_sim::{LinkConfig, World};

/// One client session: its request, and the reply so far.
struct Session {
    h: ConnHandle,
    req: Vec<u8>,
    reply: Vec<u8>,
    done: bool,
}

impl Session {
    fn start(w: &mut World, to: SocketAddr, i: u64, len: usize) -> Session {
        let req = request_of(i, len);
        let h = w.act(client(), |ep, now| {
            let h = ep.connect(now, to).expect("connect");
            // Queued before the first poll: it rides on the SYN (0-RTT) or
            // on the cookie echo.
            assert_eq!(ep.conn_mut(h).send(&req), Ok(req.len()));
            ep.conn_mut(h).close();
            h
        });
        Session { h, req, reply: Vec::new(), done: false }
    }

    fn poll(&mut self, ep: &mut Endpoint, seed: u64) -> bool {
        let mut buf = vec![0u8; 64 * 1024];
        while !self.done {
            match ep.conn_mut(self.h).recv(&mut buf) {
                Ok(Some(0)) => {
                    assert!(self.reply == reply_to(&self.req), "a wrong reply (seed {seed})");
                    ep.conn_mut(self.h).release();
                    self.done = true;
                }
                Ok(Some(n)) => self.reply.extend_from_slice(&buf[..n]),
                _ => break,
            }
        }
        self.done
    }
}

fn config() -> EndpointConfig {
    EndpointConfig { reuse_tokens: true, ..EndpointConfig::default() }
}

fn world(seed: u64, server_cfg: EndpointConfig) -> World {
    let mut w = World::new(seed);
    w.add_node(client(), config());
    w.add_node(server(), server_cfg);
    w.endpoint_mut(server()).set_listening(true);
    w.set_default_link(LinkConfig::with_delay(Duration::from_millis(20)));
    w
}

/// Runs one session to the server's address, served by the node named
/// `node`, to its reply; returns how long it took.
fn session(w: &mut World, srv: &mut Server, node: SocketAddr, i: u64) -> Duration {
    let seed = w.seed();
    let t0 = w.elapsed();
    let mut s = Session::start(w, server(), i, 300);
    let ok = w.run_until(
        |w| {
            srv.run(w.endpoint_mut(node));
            s.poll(w.endpoint_mut(client()), seed)
        },
        Duration::from_secs(10),
    );
    assert!(ok, "session {i} got no reply (seed {seed})");
    w.elapsed() - t0
}

fn token_syn(d: &[u8]) -> bool {
    Packet::parse(d).is_ok_and(|p| p.token.is_some() && p.header.flags.contains(Flags::SYN) && p.header.conn_id == 0)
}

fn who(w: &World) -> Vec<&'static str> {
    w.captured().iter().map(|p| if p.from == client() { "client" } else { "server" }).collect()
}

#[test]
fn a_repeat_client_with_a_token_has_its_reply_one_round_trip_after_its_syn() {
    let seed = 7101;
    let mut w = world(seed, EndpointConfig::default());
    let mut srv = Server::default();
    let first = session(&mut w, &mut srv, server(), 1);
    assert!(first >= Duration::from_millis(80), "the first session runs the full handshake: {first:?} (seed {seed})");
    w.run_for(Duration::from_millis(200));
    w.set_capture(true);
    let took = session(&mut w, &mut srv, server(), 2);
    assert!(took >= Duration::from_millis(40) && took < Duration::from_millis(42), "took {took:?} (seed {seed})");
    let syn = &w.captured()[0];
    assert!(token_syn(&syn.data), "the first datagram is a SYN with a token (seed {seed})");
    let h = header(&syn.data).expect("parsed");
    assert!(h.flags.contains(Flags::FIN) && syn.data.len() > 300, "the SYN carries request and FIN (seed {seed})");
    let answer = Packet::parse(&w.captured()[1].data).expect("parsed");
    let features = answer.params.map_or(0, |p| p.features);
    assert!(features & HandshakeParams::EARLY != 0, "the SYN-ACK says the data was taken (seed {seed})");
    assert!(answer.token.is_some() && answer.data.len() > 300, "it hands a fresh token and the reply (seed {seed})");
    // SYN + request + FIN; SYN-ACK + reply + FIN; the client's ack.
    let idle = w.run_until(|w| w.endpoint(server()).connection_count() == 0, Duration::from_secs(1));
    assert!(idle, "the server still holds the session (seed {seed})");
    assert_eq!(who(&w), ["client", "server", "client"], "seed {seed}");
    let stats = w.endpoint(server()).stats();
    assert_eq!((stats.early_accepted, stats.tokens_sent, srv.total()), (1, 2, 2), "seed {seed}");
}

#[test]
fn a_stale_token_falls_back_to_the_full_handshake_and_is_served_once() {
    let seed = 7102;
    let cfg = EndpointConfig { token_lifetime: Duration::from_secs(1), ..EndpointConfig::default() };
    let mut w = world(seed, cfg);
    let mut srv = Server::default();
    session(&mut w, &mut srv, server(), 1);
    w.run_for(Duration::from_secs(2));
    w.set_capture(true);
    let took = session(&mut w, &mut srv, server(), 2);
    assert!(took >= Duration::from_millis(80) && took < Duration::from_millis(82), "took {took:?} (seed {seed})");
    assert!(token_syn(&w.captured()[0].data), "the stale token was presented (seed {seed})");
    let stats = *w.endpoint(server()).stats();
    assert_eq!((stats.tokens_rejected, stats.early_accepted), (1, 0), "seed {seed}");
    assert!(srv.each_once() && srv.total() == 2, "served {:?} (seed {seed})", srv.served);
    // The fallback handed a fresh token: the next session is 0-RTT again.
    let took = session(&mut w, &mut srv, server(), 3);
    assert!(took < Duration::from_millis(42), "took {took:?} (seed {seed})");
}

#[test]
fn another_listeners_token_falls_back_to_the_full_handshake() {
    let seed = 7103;
    let mut w = world(seed, EndpointConfig::default());
    let other = addr(3);
    w.add_node(other, EndpointConfig::default());
    w.endpoint_mut(other).set_listening(true);
    let mut srv = Server::default();
    session(&mut w, &mut srv, server(), 1);
    // Another server (other secrets) takes over the address.
    w.remove_node(server());
    w.rebind(other, server());
    let mut srv2 = Server::default();
    let took = session(&mut w, &mut srv2, other, 2);
    assert!(took >= Duration::from_millis(80), "took {took:?} (seed {seed})");
    let stats = *w.endpoint(other).stats();
    assert_eq!((stats.tokens_rejected, stats.early_accepted, srv2.total()), (1, 0, 1), "seed {seed}");
}

#[test]
fn a_token_presented_from_another_address_falls_back_to_the_full_handshake() {
    let seed = 7104;
    let mut w = world(seed, EndpointConfig::default());
    let mut srv = Server::default();
    session(&mut w, &mut srv, server(), 1);
    w.rebind(client(), SocketAddr::from(([198, 18, 0, 77], 4433)));
    let took = session(&mut w, &mut srv, server(), 2);
    assert!(took >= Duration::from_millis(80), "took {took:?} (seed {seed})");
    let stats = *w.endpoint(server()).stats();
    assert_eq!((stats.tokens_rejected, stats.early_accepted, srv.total()), (1, 0, 2), "seed {seed}");
}

/// Runs a 0-RTT session, then injects its captured first packet again
/// (an attacker's or the network's replay); returns the server's tally.
fn replay_first_packet(seed: u64, early_data: EarlyData) -> (Server, Endpoint) {
    let cfg = EndpointConfig { early_data, ..EndpointConfig::default() };
    let mut w = world(seed, cfg);
    let mut srv = Server::default();
    session(&mut w, &mut srv, server(), 1);
    w.set_capture(true);
    let took = session(&mut w, &mut srv, server(), 2);
    assert!(took < Duration::from_millis(42), "took {took:?} (seed {seed})");
    let syn = w.captured().iter().find(|p| token_syn(&p.data)).expect("the 0-RTT SYN").data.clone();
    // Well after the session ended on both sides' servers.
    w.run_for(Duration::from_secs(1));
    assert_eq!(w.endpoint(server()).connection_count(), 0, "seed {seed}");
    w.inject(client(), server(), syn);
    w.run_until(
        |w| {
            srv.run(w.endpoint_mut(server()));
            false
        },
        Duration::from_secs(2),
    );
    let ep = w.remove_node(server()).expect("the server");
    (srv, ep)
}

#[test]
fn a_replayed_first_packet_is_not_served_twice_under_a_replay_window() {
    let seed = 7105;
    let (srv, ep) = replay_first_packet(seed, EarlyData::ReplayWindow(1024));
    assert!(srv.each_once() && srv.total() == 2, "served {:?} (seed {seed})", srv.served);
    let stats = ep.stats();
    assert_eq!((stats.early_accepted, stats.early_replayed), (1, 1), "seed {seed}");
}

#[test]
fn a_replayed_first_packet_is_served_again_when_requests_are_idempotent() {
    let seed = 7106;
    let (srv, ep) = replay_first_packet(seed, EarlyData::Idempotent);
    assert_eq!(srv.total(), 3, "served {:?} (seed {seed})", srv.served);
    assert_eq!((ep.stats().early_accepted, ep.stats().early_replayed), (2, 0), "seed {seed}");
}

#[test]
fn a_listener_that_refuses_early_data_runs_the_full_handshake_and_serves_once() {
    let seed = 7107;
    let cfg = EndpointConfig { early_data: EarlyData::Refuse, ..EndpointConfig::default() };
    let mut w = world(seed, cfg);
    let mut srv = Server::default();
    session(&mut w, &mut srv, server(), 1);
    w.set_capture(true);
    let took = session(&mut w, &mut srv, server(), 2);
    assert!(took >= Duration::from_millis(80) && took < Duration::from_millis(82), "took {took:?} (seed {seed})");
    assert!(token_syn(&w.captured()[0].data), "seed {seed}");
    assert!(srv.each_once() && srv.total() == 2, "served {:?} (seed {seed})", srv.served);
}

#[test]
fn a_lost_early_syn_ack_is_sent_again_and_the_request_served_once() {
    let seed = 7108;
    let mut w = world(seed, EndpointConfig::default());
    let mut srv = Server::default();
    session(&mut w, &mut srv, server(), 1);
    w.set_drop_rule(common::drop_first(1, server(), client(), is_syn_ack));
    let took = session(&mut w, &mut srv, server(), 2);
    assert_eq!(w.dropped_by_rule(), 1, "seed {seed}");
    // The client's SYN retransmission (1 s) reaches the connection its
    // first copy created, which answers at once.
    assert!(took < Duration::from_millis(1100), "took {took:?} (seed {seed})");
    assert!(srv.each_once() && srv.total() == 2, "served {:?} (seed {seed})", srv.served);
    assert_eq!(w.endpoint(server()).stats().early_accepted, 1, "seed {seed}");
}

#[test]
fn a_lost_early_syn_is_sent_again_with_its_data() {
    let seed = 7109;
    let mut w = world(seed, EndpointConfig::default());
    let mut srv = Server::default();
    session(&mut w, &mut srv, server(), 1);
    w.set_drop_rule(common::drop_first(1, client(), server(), is_syn));
    let took = session(&mut w, &mut srv, server(), 2);
    assert_eq!(w.dropped_by_rule(), 1, "seed {seed}");
    assert!(took < Duration::from_millis(1100), "took {took:?} (seed {seed})");
    assert!(srv.each_once() && srv.total() == 2, "served {:?} (seed {seed})", srv.served);
}

#[test]
fn a_client_without_reuse_tokens_never_sends_data_on_its_syn() {
    let seed = 7110;
    let mut w = World::new(seed);
    w.add_node(client(), EndpointConfig::default());
    w.add_node(server(), EndpointConfig::default());
    w.endpoint_mut(server()).set_listening(true);
    w.set_default_link(LinkConfig::with_delay(Duration::from_millis(20)));
    let mut srv = Server::default();
    w.set_capture(true);
    for i in 0..2 {
        let took = session(&mut w, &mut srv, server(), i);
        assert!(took >= Duration::from_millis(80), "took {took:?} (seed {seed})");
    }
    assert!(w.captured().iter().all(|p| Packet::parse(&p.data).is_ok_and(|p| p.token.is_none())), "seed {seed}");
    assert_eq!(w.endpoint(server()).stats().tokens_sent, 0, "seed {seed}");
}
