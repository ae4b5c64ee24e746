//! A listening endpoint (the server) and a client endpoint with an
//! established connection to it, fed hostile datagrams from any source
//! address at non-decreasing times, interleaved with the real traffic
//! between them, timers, and application calls (spec §2, §4, §6).
//!
//! The input is a sequence of operations read by `manyfold_fuzz::Reader`
//! (see `OP_*` below). Fuzzer datagrams go in raw, or with their header
//! fixed (version, length, CRC), or addressed to a live connection id seen
//! on the wire (and then fixed), or as a SYN, or as the echo of a cookie
//! the server really sent, so that hostile peers can complete handshakes.
//!
//! Invariants: no panic; `connection_count() <= max_connections` on both
//! endpoints; every datagram either endpoint sends parses, is no larger
//! than what an end accepts (`max_accepted_datagram`, spec §3.7), and the datagrams and events produced per operation
//! are bounded; timers make progress (handling a timeout does not leave a
//! deadline in the past forever).
#![no_main]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use manyfold_fuzz::{address, datagrams, fixup, origin, Reader};
use manyfold_proto::wire::{seal, ErrorCode, Flags, Packet, PacketType, PathPacket, HEADER_LEN};
use manyfold_proto::{ConnHandle, ConnectionConfig, Endpoint, EndpointConfig, StreamId};

const OP_TO_SERVER: u8 = 0;
const OP_TO_CLIENT: u8 = 1;
const OP_SYN: u8 = 2;
const OP_ECHO_COOKIE: u8 = 3;
const OP_CONNECT: u8 = 4;
const OP_DELIVER: u8 = 5;
const OP_DROP: u8 = 6;
const OP_ADVANCE: u8 = 7;
const OP_TIMERS: u8 = 8;
const OP_SERVER_APP: u8 = 9;
const OP_CLIENT_APP: u8 = 10;
const OP_FLUSH: u8 = 11;
const OPS: u8 = 12;

/// Most operations per input: bounds the run time of one input.
const MAX_OPS: usize = 400;
/// Most datagrams one operation may make an endpoint send.
const MAX_TRANSMITS_PER_OP: usize = 4_000;
const MAX_EVENTS_PER_OP: usize = 4_000;
const MAX_CONNECTIONS: usize = 8;

fn config(seed: u64) -> EndpointConfig {
    EndpointConfig {
        seed,
        max_connections: MAX_CONNECTIONS,
        max_connections_per_source: 4,
        accept_backlog: 4,
        cookie_lifetime: Duration::from_secs(10),
        max_resets_per_sec: 50,
        max_qlog_events: 256,
        connection: ConnectionConfig {
            max_datagram: 1200,
            send_buffer: 256 << 10,
            recv_buffer: 128 << 10,
            max_streams: 8,
            max_message: 16 << 10,
            stream_window: 32 << 10,
            time_wait: Duration::from_secs(2),
            idle_timeout: Some(Duration::from_secs(20)),
            keepalive_interval: Some(Duration::from_secs(5)),
            connect_timeout: Duration::from_secs(5),
            qlog: seed == 2,
            ..Default::default()
        },
        ..Default::default()
    }
}

struct World {
    now: Instant,
    server: Endpoint,
    client: Endpoint,
    server_addr: SocketAddr,
    client_addr: SocketAddr,
    /// Real traffic in flight: (to the server?, datagram).
    wire: Vec<(bool, Vec<u8>)>,
    /// The last SYN-ACK the server sent to each address.
    syn_acks: HashMap<SocketAddr, Vec<u8>>,
    /// Connection ids seen in headers to the server and to the client,
    /// with the last (seq, ack) seen, newest last.
    ids_server: Vec<(u32, u32, u32)>,
    ids_client: Vec<(u32, u32, u32)>,
    accepted: Vec<ConnHandle>,
    client_conns: Vec<ConnHandle>,
    buf: Vec<u8>,
}

fn note_id(ids: &mut Vec<(u32, u32, u32)>, d: &[u8]) {
    if let Ok(p) = Packet::parse(d) {
        let h = p.header;
        if h.conn_id != 0 {
            ids.retain(|e| e.0 != h.conn_id);
            ids.push((h.conn_id, h.seq, h.ack));
            if ids.len() > 16 {
                ids.remove(0);
            }
        }
    }
}

impl World {
    fn new() -> Self {
        let now = origin();
        let mut server = Endpoint::new(config(2), now);
        server.set_listening(true);
        let client = Endpoint::new(config(1), now);
        let mut w = World {
            now,
            server,
            client,
            server_addr: "192.0.2.1:443".parse().expect("address"),
            client_addr: "198.51.100.7:40000".parse().expect("address"),
            wire: Vec::new(),
            syn_acks: HashMap::new(),
            ids_server: Vec::new(),
            ids_client: Vec::new(),
            accepted: Vec::new(),
            client_conns: Vec::new(),
            buf: Vec::new(),
        };
        let h = w.client.connect(w.now, w.server_addr).expect("connect");
        w.client_conns.push(h);
        for _ in 0..4 {
            w.flush();
        }
        w
    }

    /// Takes what both endpoints send; checks each datagram.
    fn pump(&mut self) {
        let mut count = 0;
        for from_server in [true, false] {
            let ep = if from_server { &mut self.server } else { &mut self.client };
            // spec §3.7: path MTU discovery may go up to what an end accepts.
            let max = ep.config().connection.max_accepted_datagram() as usize;
            while let Some(t) = ep.poll_transmit(self.now, 4, &mut self.buf) {
                for d in datagrams(&self.buf, t.size, t.segment_size) {
                    count += 1;
                    assert!(count <= MAX_TRANSMITS_PER_OP, "unbounded output");
                    assert!(d.len() <= max, "datagram over what an end accepts");
                    // spec §6.8: a path challenge or response, to a new address of the peer.
                    if d.first().is_some_and(|b| b & 0x0f == PacketType::Path as u8) {
                        PathPacket::parse(d).expect("an endpoint sent a PATH packet that does not parse");
                        continue;
                    }
                    let p = Packet::parse(d).expect("an endpoint sent a datagram that does not parse");
                    assert_eq!(p.header.ptype, PacketType::Segment);
                    if from_server {
                        if t.destination == self.client_addr {
                            note_id(&mut self.ids_client, d);
                            self.wire.push((false, d.to_vec()));
                        } else if p.header.flags.contains(Flags::SYN | Flags::ACK) && self.syn_acks.len() < 512 {
                            self.syn_acks.insert(t.destination, d.to_vec());
                        }
                    } else if t.destination == self.server_addr {
                        note_id(&mut self.ids_server, d);
                        self.wire.push((true, d.to_vec()));
                    }
                }
            }
        }
        if self.wire.len() > 512 {
            self.wire.drain(..self.wire.len() - 512);
        }
        let mut events = 0;
        while self.server.poll_event().is_some() {
            events += 1;
            assert!(events <= MAX_EVENTS_PER_OP, "unbounded events");
        }
        while self.client.poll_event().is_some() {
            events += 1;
            assert!(events <= MAX_EVENTS_PER_OP, "unbounded events");
        }
        let mut qlog = 0;
        while self.server.poll_qlog().is_some() {
            qlog += 1;
            assert!(qlog <= 256, "qlog over max_qlog_events");
        }
        assert!(self.server.connection_count() <= MAX_CONNECTIONS);
        assert!(self.client.connection_count() <= MAX_CONNECTIONS);
    }

    fn flush(&mut self) {
        self.pump();
        self.now += Duration::from_millis(10);
        for (to_server, d) in std::mem::take(&mut self.wire) {
            self.input(to_server, None, &d);
        }
        self.timers();
        self.pump();
    }

    fn input(&mut self, to_server: bool, from: Option<SocketAddr>, d: &[u8]) {
        if to_server {
            self.server.handle_datagram(self.now, from.unwrap_or(self.client_addr), d);
        } else {
            self.client.handle_datagram(self.now, from.unwrap_or(self.server_addr), d);
        }
    }

    /// Fires what is due at `now`; each round must move the deadline on.
    fn timers(&mut self) {
        for _ in 0..64 {
            self.server.handle_timeout(self.now);
            self.client.handle_timeout(self.now);
            self.pump();
            let due = [self.server.poll_timeout(), self.client.poll_timeout()].into_iter().flatten().min();
            if due.is_none_or(|t| t > self.now) {
                return;
            }
        }
        panic!("a timer stays due after 64 rounds of handle_timeout");
    }

    /// A fuzzer datagram, prepared as `mode` says.
    fn prepare(&self, to_server: bool, mode: u8, bytes: &[u8]) -> Vec<u8> {
        let mut d = bytes.to_vec();
        match mode & 3 {
            0 => {}
            1 => fixup(&mut d),
            2 => {
                let ids = if to_server { &self.ids_server } else { &self.ids_client };
                if d.len() < HEADER_LEN {
                    d.resize(HEADER_LEN, 0);
                }
                if let Some(&(id, seq, ack)) = ids.get(usize::from(mode >> 4) % ids.len().max(1)) {
                    d[4..8].copy_from_slice(&id.to_be_bytes());
                    if mode & 4 != 0 {
                        // Near the real sequence space: the fuzzer's bytes
                        // there become small offsets.
                        let ds = i32::from(d[8] as i8);
                        let da = i32::from(d[12] as i8);
                        d[8..12].copy_from_slice(&seq.wrapping_add_signed(ds).to_be_bytes());
                        d[12..16].copy_from_slice(&ack.wrapping_add_signed(da).to_be_bytes());
                    }
                }
                d[0] &= 0xf0; // a segment
                fixup(&mut d);
            }
            _ => {
                if d.len() >= 8 {
                    d[4..8].fill(0);
                }
                fixup(&mut d);
            }
        }
        d
    }

    fn syn(&mut self, from: SocketAddr, conn_id: u32, seq: u32, max_datagram: u16) {
        // Written as bytes (spec §3.1, §3.3.2): header, then the parameters.
        let mut out = vec![0u8; HEADER_LEN + 8];
        Packet::bare(PacketType::Segment, Flags::SYN, 0, seq, 0, 65_536).emit(&mut out);
        out[2..4].copy_from_slice(&8u16.to_be_bytes());
        out[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&conn_id.to_be_bytes());
        out[HEADER_LEN + 4..HEADER_LEN + 6].copy_from_slice(&max_datagram.to_be_bytes());
        seal(&mut out);
        self.server.handle_datagram(self.now, from, &out);
    }

    /// Completes a hostile handshake: echoes the cookie of the SYN-ACK the
    /// server sent to `from`, with `flags` and a data area.
    fn echo(&mut self, from: SocketAddr, flags: u8, data: &[u8]) {
        let Some(sa) = self.syn_acks.get(&from) else { return };
        let Ok(p) = Packet::parse(sa) else { return };
        let (Some(params), Some(cookie)) = (p.params, p.cookie) else { return };
        let flags = Flags(flags & !(Flags::SYN.0 | Flags::CKE.0 | Flags::SCK.0 | Flags::ERR.0)) | Flags::ACK;
        let mut e = Packet::bare(
            PacketType::Segment,
            flags,
            params.conn_id,
            p.header.ack,
            p.header.seq.wrapping_add(1),
            65_536,
        );
        e.cookie = Some(cookie);
        e.data = data;
        let mut out = vec![0u8; e.len()];
        e.emit(&mut out);
        self.server.handle_datagram(self.now, from, &out);
    }

    fn app(&mut self, server: bool, what: u8, arg: u16) {
        let (ep, conns) = if server {
            while let Some(h) = self.server.accept() {
                self.accepted.push(h);
            }
            (&mut self.server, &mut self.accepted)
        } else {
            (&mut self.client, &mut self.client_conns)
        };
        let Some(&h) = conns.get(usize::from(arg) % conns.len().max(1)) else { return };
        let stream = (arg >> 8) as u16 % 10;
        let now = self.now;
        match what % 8 {
            0 => {
                let data = vec![what; usize::from(arg) * 4];
                let _ = ep.conn_mut(h).stream_send(StreamId::new(stream), &data);
            }
            1 => {
                let mut buf = vec![0u8; 65_536];
                while let Ok(Some(n)) = ep.conn_mut(h).stream_recv(StreamId::new(stream), &mut buf) {
                    if n == 0 {
                        break;
                    }
                }
                while let Ok(Some(_)) = ep.conn_mut(h).recv_message() {}
            }
            2 => {
                let opts = manyfold_proto::MessageOptions {
                    unordered: arg & 1 == 1,
                    lifetime: (arg & 2 == 2).then_some(Duration::from_millis(u64::from(arg >> 4))),
                    max_retransmissions: (arg & 4 == 4).then_some(u32::from(arg >> 12)),
                };
                let _ =
                    ep.conn_mut(h).send_message(now, StreamId::new(stream), &vec![1u8; usize::from(arg) % 3000], opts);
            }
            3 => ep.conn_mut(h).close(),
            4 => ep.conn_mut(h).abort(now, ErrorCode(arg)),
            5 => {
                ep.conn_mut(h).release();
                conns.retain(|&c| c != h);
            }
            6 => {
                let _ = ep.conn_mut(h).finish_stream(StreamId::new(stream));
                ep.conn_mut(h).reset_stream(StreamId::new((stream + 1) % 10), arg);
                ep.conn_mut(h).stop_stream(StreamId::new((stream + 2) % 10), arg);
            }
            _ => {
                if server {
                    let on = !ep.is_listening();
                    ep.set_listening(on);
                }
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut w = World::new();
    let mut r = Reader::new(data);
    let mut ops = 0;
    while !r.is_empty() && ops < MAX_OPS {
        ops += 1;
        match r.u8() % OPS {
            op @ (OP_TO_SERVER | OP_TO_CLIENT) => {
                let to_server = op == OP_TO_SERVER;
                let from = r.u8();
                let mode = r.u8();
                let bytes = r.bytes();
                let d = w.prepare(to_server, mode, bytes);
                let fixed = if to_server { w.client_addr } else { w.server_addr };
                w.input(to_server, Some(address(from, fixed)), &d);
            }
            OP_SYN => {
                let from = address(r.u8(), w.client_addr);
                let (id, seq, max) = (r.u32(), r.u32(), r.u16());
                w.syn(from, id, seq, max);
            }
            OP_ECHO_COOKIE => {
                let from = address(r.u8(), w.client_addr);
                let flags = r.u8();
                let data = r.bytes();
                w.echo(from, flags, data);
            }
            OP_CONNECT => {
                if let Ok(h) = w.client.connect(w.now, w.server_addr) {
                    w.client_conns.push(h);
                }
            }
            OP_DELIVER => {
                let i = usize::from(r.u8());
                if !w.wire.is_empty() {
                    let (to_server, d) = w.wire.remove(i % w.wire.len());
                    w.input(to_server, None, &d);
                }
            }
            OP_DROP => {
                let i = usize::from(r.u8());
                if !w.wire.is_empty() {
                    let n = w.wire.len();
                    w.wire.remove(i % n);
                }
            }
            OP_ADVANCE => {
                let ms = r.u16();
                w.now += Duration::from_millis(u64::from(ms));
                w.timers();
            }
            OP_TIMERS => {
                let next = [w.server.poll_timeout(), w.client.poll_timeout()].into_iter().flatten().min();
                if let Some(t) = next {
                    w.now = w.now.max(t);
                }
                w.timers();
            }
            op @ (OP_SERVER_APP | OP_CLIENT_APP) => {
                let what = r.u8();
                let arg = r.u16();
                w.app(op == OP_SERVER_APP, what, arg);
            }
            OP_FLUSH => w.flush(),
            _ => unreachable!("op % OPS"),
        }
        w.pump();
    }
    // Let it all settle: nothing may spin.
    for _ in 0..3 {
        w.flush();
    }
});
