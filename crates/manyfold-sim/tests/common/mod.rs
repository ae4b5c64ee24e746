//! Helpers shared by the behaviour tests: addresses, configurations, the
//! list of congestion controllers every loss-recovery test runs under, and
//! packet classifiers for drop rules and captures.

// Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use manyfold_proto::wire::chunk::{parse_chunks, Chunk, DataChunk};
use manyfold_proto::wire::{Flags, Header, Packet};
use manyfold_proto::{CongestionAlgorithm, ConnHandle, EndpointConfig, State, StreamId};
use manyfold_sim::{LinkConfig, World};

pub mod rr;

/// Every congestion controller. Loss-recovery tests loop over this list:
/// adding a controller to the engine means adding it here.
pub const CONTROLLERS: &[CongestionAlgorithm] = &CongestionAlgorithm::ALL;

/// Address of simulated host `n` (198.18.0.0/15, the benchmarking range).
pub fn addr(n: u16) -> SocketAddr {
    SocketAddr::from(([198, 18, (n >> 8) as u8, (n & 0xff) as u8], 4433))
}

pub fn client() -> SocketAddr {
    addr(1)
}

pub fn server() -> SocketAddr {
    addr(2)
}

/// Default endpoint settings with the given controller.
pub fn config(cc: CongestionAlgorithm) -> EndpointConfig {
    let mut c = EndpointConfig::default();
    c.connection.congestion = cc;
    c
}

/// A client and a server joined by `link` in both directions.
pub fn pair(seed: u64, link: LinkConfig, cfg: EndpointConfig) -> World {
    let mut w = World::new(seed);
    w.add_node(client(), cfg.clone());
    w.add_node(server(), cfg);
    w.set_link(client(), server(), link);
    w
}

/// A 20 ms path with the given loss, plus reordering, duplication and
/// corruption at rates that show up in every test.
pub fn faulty(loss: f64) -> LinkConfig {
    LinkConfig::with_delay(Duration::from_millis(20))
        .loss(loss)
        .jitter(Duration::from_millis(2))
        .reorder(0.02, Duration::from_millis(15))
        .duplicate(0.01)
        .corrupt(0.01)
}

/// Runs until the connection reaches `state`, for at most `max`.
pub fn wait_state(w: &mut World, at: SocketAddr, h: ConnHandle, state: State, max: Duration) -> bool {
    w.run_until(|w| w.endpoint(at).conn(h).state() == Some(state), max)
}

/// Establishes a connection client -> server on a listening server; returns
/// (client handle, server handle).
pub fn establish(w: &mut World) -> (ConnHandle, ConnHandle) {
    let seed = w.seed();
    w.endpoint_mut(server()).set_listening(true);
    let c = w.connect(client(), server());
    let mut s = None;
    let ok = w.run_until(
        |w| {
            if s.is_none() {
                s = w.endpoint_mut(server()).accept();
            }
            s.is_some() && w.endpoint(client()).conn(c).state() == Some(State::Established)
        },
        Duration::from_secs(30),
    );
    assert!(ok, "handshake did not complete (seed {seed})");
    (c, s.expect("accepted"))
}

pub fn header(d: &[u8]) -> Option<Header> {
    Header::parse(d).ok()
}

/// An initial SYN (no ACK).
pub fn is_syn(d: &[u8]) -> bool {
    header(d).is_some_and(|h| h.flags.contains(Flags::SYN) && !h.flags.contains(Flags::ACK))
}

/// A SYN-ACK.
pub fn is_syn_ack(d: &[u8]) -> bool {
    header(d).is_some_and(|h| h.flags.contains(Flags::SYN | Flags::ACK))
}

/// The client's cookie echo: the first packet after the SYN-ACK.
pub fn is_cookie_echo(d: &[u8]) -> bool {
    Packet::parse(d).is_ok_and(|p| p.cookie.is_some() && !p.header.flags.contains(Flags::SYN))
}

/// A packet carrying application data.
pub fn is_data(d: &[u8]) -> bool {
    Packet::parse(d).is_ok_and(|p| !p.data.is_empty())
}

/// The stream chunks a datagram carries (none if it does not parse).
pub fn chunks(d: &[u8]) -> Vec<Chunk<&[u8]>> {
    Packet::parse(d).map_or_else(|_| Vec::new(), |p| parse_chunks(p.data).map_while(Result::ok).collect())
}

/// The data chunks a datagram carries.
pub fn data_chunks(d: &[u8]) -> Vec<DataChunk<&[u8]>> {
    chunks(d)
        .into_iter()
        .filter_map(|c| match c {
            Chunk::Data(d) => Some(d),
            _ => None,
        })
        .collect()
}

/// A packet carrying a data chunk of `stream` (data bytes or a bare stream FIN).
pub fn carries_stream(d: &[u8], stream: u16) -> bool {
    data_chunks(d).iter().any(|c| c.stream == StreamId::new(stream))
}

/// A packet that consumes a sequence number (spec §5.1): SYN, FIN, a
/// cookie echo, or any data.
pub fn is_sequenced(d: &[u8]) -> bool {
    Packet::parse(d).is_ok_and(|p| {
        let f = p.header.flags;
        f.contains(Flags::SYN) || f.contains(Flags::FIN) || p.cookie.is_some() || !p.data.is_empty()
    })
}

/// A packet that asks for an immediate ack (KLV).
pub fn is_klv(d: &[u8]) -> bool {
    header(d).is_some_and(|h| h.flags.contains(Flags::KLV))
}

pub fn is_fin(d: &[u8]) -> bool {
    header(d).is_some_and(|h| h.flags.contains(Flags::FIN))
}

pub fn is_rst(d: &[u8]) -> bool {
    header(d).is_some_and(|h| h.flags.contains(Flags::RST))
}

/// A bare acknowledgement: ACK with no data, no SYN/FIN/RST/cookie.
pub fn is_pure_ack(d: &[u8]) -> bool {
    Packet::parse(d).is_ok_and(|p| {
        let f = p.header.flags;
        f.contains(Flags::ACK)
            && p.data.is_empty()
            && p.cookie.is_none()
            && !f.contains(Flags::SYN)
            && !f.contains(Flags::FIN)
            && !f.contains(Flags::RST)
    })
}

/// A drop rule that drops what either `a` or `b` drops (each counting
/// only what it saw first).
pub fn either(
    mut a: impl FnMut(SocketAddr, SocketAddr, &[u8]) -> bool + 'static,
    mut b: impl FnMut(SocketAddr, SocketAddr, &[u8]) -> bool + 'static,
) -> impl FnMut(SocketAddr, SocketAddr, &[u8]) -> bool + 'static {
    move |f, t, d| a(f, t, d) || b(f, t, d)
}

/// A drop rule that drops the first `n` datagrams `from` -> `to` matching `pred`.
pub fn drop_first(
    n: u32,
    from: SocketAddr,
    to: SocketAddr,
    pred: fn(&[u8]) -> bool,
) -> impl FnMut(SocketAddr, SocketAddr, &[u8]) -> bool + 'static {
    let mut left = n;
    move |f, t, d| {
        if left > 0 && f == from && t == to && pred(d) {
            left -= 1;
            true
        } else {
            false
        }
    }
}
