//! Two endpoints with one connection between them, driven by a sequence
//! of operations: application calls on either side (stream bytes, ordered,
//! partially reliable and unordered messages, receive, finish, reset,
//! stop, priority, close, abort, release), the clock, and the network:
//! deliver, drop, duplicate, reorder, corrupt (1–3 bit flips), truncate,
//! or inject a fuzzer datagram (spec §4, §5, §7, §13).
//!
//! Streams by use, the same on both sides: 0 and 1 carry bytes; 2 and 3
//! ordered reliable messages; 4 ordered partially reliable messages; 5 and
//! 6 unordered messages, some partially reliable. Every byte and message
//! is a function of its direction, stream and position, so the receiver
//! checks what it gets without keeping copies.
//!
//! Invariants: no panic; the bytes read on a stream are a prefix of those
//! sent on it, and its end comes only after all of them and a finish or
//! close; ordered reliable messages arrive whole, in order, none skipped
//! or abandoned; partially reliable ones arrive whole, in order, each at
//! most once; unordered ones whole and at most once; a corrupted or
//! truncated datagram never parses (the CRC catches it); unacknowledged
//! bytes stay within the send buffer, open streams within `max_streams`;
//! every datagram sent parses. An injected datagram that parses could be
//! a forgery (the protocol has no authentication), so after one the
//! integrity checks stop but the others go on.
#![no_main]

use std::collections::HashSet;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use manyfold_fuzz::{fixup, Net, Reader};
use manyfold_proto::wire::{ErrorCode, Packet, HEADER_LEN};
use manyfold_proto::{
    CongestionAlgorithm, ConnHandle, ConnectionConfig, EndpointConfig, MessageOptions, RecvError, StreamId, StreamItem,
};

const MAX_OPS: usize = 2_000;
const SEND_BUFFER: usize = 256 << 10;
const MAX_MESSAGE: usize = 16 << 10;
const MAX_STREAMS: usize = 16;
const STREAMS: u16 = 7;

fn class(s: u16) -> Class {
    match s {
        0 | 1 => Class::Bytes,
        2 | 3 => Class::Ordered,
        4 => Class::Partial,
        _ => Class::Unordered,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Bytes,
    Ordered,
    Partial,
    Unordered,
}

fn byte_at(dir: usize, s: u16, off: u64) -> u8 {
    ((off.wrapping_mul(31) ^ (off >> 8) ^ (off >> 16)) as u8).wrapping_add((s as u8).wrapping_mul(7))
        ^ (dir as u8 * 0x5a)
}

fn msg_byte(dir: usize, s: u16, k: u32, i: usize) -> u8 {
    (k.wrapping_mul(131) as u8).wrapping_add((i as u8).wrapping_mul(17)).wrapping_add(s as u8) ^ (dir as u8 * 0xa5)
}

/// A message of stream class Ordered: `len` bytes, checked by position.
fn ordered_msg(dir: usize, s: u16, k: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| msg_byte(dir, s, k, i)).collect()
}

/// A self-describing message: its number and length, then its bytes.
fn tagged_msg(dir: usize, s: u16, k: u32, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + len);
    v.extend_from_slice(&k.to_be_bytes());
    v.extend_from_slice(&(len as u32).to_be_bytes());
    v.extend((0..len).map(|i| msg_byte(dir, s, k, i)));
    v
}

fn check_tagged(dir: usize, s: u16, v: &[u8], sent: u32) -> u32 {
    assert!(v.len() >= 8, "a tagged message lost its head: {} bytes", v.len());
    let k = u32::from_be_bytes(v[..4].try_into().expect("4 bytes"));
    let len = u32::from_be_bytes(v[4..8].try_into().expect("4 bytes")) as usize;
    assert!(k < sent, "message {k} on stream {s} was never sent ({sent} sent)");
    assert_eq!(v, &tagged_msg(dir, s, k, len)[..], "message {k} on stream {s} corrupted");
    k
}

/// What one direction sent and what its receiver has taken, per stream.
#[derive(Default)]
struct Flow {
    sent_bytes: [u64; STREAMS as usize],
    read_bytes: [u64; STREAMS as usize],
    /// Ordered messages' lengths, and how many were received.
    ordered: [Vec<usize>; STREAMS as usize],
    ordered_read: [usize; STREAMS as usize],
    /// Tagged messages sent, and the last (Partial) or all (Unordered) received.
    tagged_sent: [u32; STREAMS as usize],
    partial_last: Option<u32>,
    unordered_seen: HashSet<(u16, u32)>,
    /// The sender finished the stream (or closed the connection).
    finished: [bool; STREAMS as usize],
    /// The sender reset the stream or its receiver stopped it: it may end
    /// before everything sent was read (spec §13.9).
    cut: [bool; STREAMS as usize],
}

struct World {
    net: Net,
    /// a's connection, b's (once accepted).
    conn: [Option<ConnHandle>; 2],
    flows: [Flow; 2],
    /// An injected datagram parsed: from here on a forgery may have
    /// changed the streams, so integrity is no longer checked.
    tainted: bool,
    buf: Vec<u8>,
}

impl World {
    fn side(&mut self, b: bool) -> (&mut manyfold_proto::Endpoint, Option<ConnHandle>) {
        if b {
            (&mut self.net.b, self.conn[1])
        } else {
            (&mut self.net.a, self.conn[0])
        }
    }

    fn settle(&mut self) {
        self.net.pump(50_000);
        if self.conn[1].is_none() {
            self.conn[1] = self.net.b.accept();
        }
        while self.net.a.poll_event().is_some() {}
        while self.net.b.poll_event().is_some() {}
        for (i, ep) in [&self.net.a, &self.net.b].into_iter().enumerate() {
            assert!(ep.connection_count() <= 2, "connections pile up");
            if let Some(h) = self.conn[i] {
                if let Some(st) = ep.conn(h).stats() {
                    assert!(
                        st.unacked_bytes as usize <= SEND_BUFFER,
                        "unacked bytes {} over the send buffer",
                        st.unacked_bytes
                    );
                    assert!(st.open_streams <= MAX_STREAMS, "open streams {}", st.open_streams);
                }
            }
        }
    }

    fn send(&mut self, b: bool, s: u16, len: usize) {
        let dir = usize::from(b);
        let off = self.flows[dir].sent_bytes[usize::from(s)];
        let data: Vec<u8> = (0..len as u64).map(|i| byte_at(dir, s, off + i)).collect();
        let (ep, Some(h)) = self.side(b) else { return };
        if let Ok(n) = ep.conn_mut(h).stream_send(StreamId::new(s), &data) {
            self.flows[dir].sent_bytes[usize::from(s)] += n as u64;
        }
    }

    fn send_message(&mut self, b: bool, s: u16, len: usize, opts: MessageOptions) {
        let dir = usize::from(b);
        let now = self.net.now;
        let si = usize::from(s);
        let msg = match class(s) {
            Class::Ordered => ordered_msg(dir, s, self.flows[dir].ordered[si].len() as u32, len),
            _ => tagged_msg(dir, s, self.flows[dir].tagged_sent[si], len),
        };
        let (ep, Some(h)) = self.side(b) else { return };
        if ep.conn_mut(h).send_message(now, StreamId::new(s), &msg, opts).is_ok() {
            match class(s) {
                Class::Ordered => self.flows[dir].ordered[si].push(len),
                _ => self.flows[dir].tagged_sent[si] += 1,
            }
        }
    }

    /// Checks bytes read on stream `s` by side `b` (so sent the other way).
    fn got_bytes(&mut self, dir: usize, s: u16, data: &[u8]) {
        let si = usize::from(s);
        let f = &mut self.flows[dir];
        let off = f.read_bytes[si];
        f.read_bytes[si] += data.len() as u64;
        if self.tainted {
            return;
        }
        assert!(f.read_bytes[si] <= f.sent_bytes[si], "stream {s}: read past what was sent");
        for (i, &x) in data.iter().enumerate() {
            assert_eq!(x, byte_at(dir, s, off + i as u64), "stream {s}: byte {} corrupted", off + i as u64);
        }
    }

    fn got_end(&mut self, dir: usize, s: u16) {
        let si = usize::from(s);
        let f = &self.flows[dir];
        if self.tainted {
            return;
        }
        assert!(f.finished[si] || f.cut[si], "stream {s} ended but its sender never finished it");
        if f.cut[si] {
            return;
        }
        match class(s) {
            Class::Bytes => assert_eq!(f.read_bytes[si], f.sent_bytes[si], "stream {s} ended early"),
            Class::Ordered => assert_eq!(f.ordered_read[si], f.ordered[si].len(), "stream {s} ended early"),
            _ => {}
        }
    }

    fn got_item(&mut self, dir: usize, s: u16, item: StreamItem) {
        let si = usize::from(s);
        if s >= STREAMS {
            assert!(self.tainted, "an item on stream {s}, which nobody used");
            return;
        }
        match item {
            StreamItem::Message(v) => match class(s) {
                Class::Bytes => self.got_bytes(dir, s, &v),
                _ if self.tainted => {}
                Class::Ordered => {
                    let f = &mut self.flows[dir];
                    let k = f.ordered_read[si];
                    assert!(k < f.ordered[si].len(), "stream {s}: message {k} never sent");
                    assert_eq!(v, ordered_msg(dir, s, k as u32, f.ordered[si][k]), "stream {s}: message {k}");
                    f.ordered_read[si] += 1;
                }
                Class::Partial => {
                    let k = check_tagged(dir, s, &v, self.flows[dir].tagged_sent[si]);
                    let f = &mut self.flows[dir];
                    assert!(f.partial_last.is_none_or(|l| k > l), "stream {s}: message {k} out of order");
                    f.partial_last = Some(k);
                }
                Class::Unordered => {
                    let k = check_tagged(dir, s, &v, self.flows[dir].tagged_sent[si]);
                    assert!(self.flows[dir].unordered_seen.insert((s, k)), "stream {s}: message {k} twice");
                }
            },
            StreamItem::Abandoned => {
                assert!(
                    self.tainted || matches!(class(s), Class::Partial | Class::Unordered),
                    "stream {s}: a reliable message was abandoned"
                );
            }
            StreamItem::Finished => self.got_end(dir, s),
            StreamItem::Reset(_) => {}
        }
    }

    fn recv(&mut self, b: bool, s: u16, max: usize) {
        let dir = usize::from(!b);
        let mut buf = std::mem::take(&mut self.buf);
        buf.resize(max.max(1), 0);
        let (ep, Some(h)) = self.side(b) else { return };
        let got = ep.conn_mut(h).stream_recv(StreamId::new(s), &mut buf);
        match got {
            Ok(Some(0)) => self.got_end(dir, s),
            Ok(Some(n)) => self.got_bytes(dir, s, &buf[..n]),
            Ok(None) | Err(RecvError::StreamReset(_) | RecvError::Closed(_) | RecvError::UnknownConnection) => {}
            Err(e) => panic!("unexpected {e:?}"),
        }
        self.buf = buf;
    }

    fn recv_message(&mut self, b: bool, s: Option<u16>) {
        let dir = usize::from(!b);
        let (ep, Some(h)) = self.side(b) else { return };
        let got = match s {
            Some(s) => ep.conn_mut(h).recv_message_on(StreamId::new(s)).map(|o| o.map(|i| (s, i))),
            None => ep.conn_mut(h).recv_message().map(|o| o.map(|(s, i)| (s.get(), i))),
        };
        if let Ok(Some((s, item))) = got {
            self.got_item(dir, s, item);
        }
    }

    fn queue(&mut self, to_b: bool) -> &mut Vec<Vec<u8>> {
        if to_b {
            &mut self.net.to_b
        } else {
            &mut self.net.to_a
        }
    }
}

fn options(r: &mut Reader, partial: bool) -> MessageOptions {
    let x = r.u8();
    MessageOptions {
        unordered: false,
        lifetime: (partial && x & 1 == 1).then(|| Duration::from_millis(u64::from(x >> 1) * 4)),
        max_retransmissions: (partial && x & 1 == 0).then_some(u32::from(x >> 6)),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let setup = r.u8();
    let knobs = r.u8();
    let congestion = CongestionAlgorithm::ALL[usize::from(setup % 3)];
    let connection = ConnectionConfig {
        max_datagram: 576 + u16::from(knobs) * 3,
        send_buffer: SEND_BUFFER,
        recv_buffer: 64 << 10,
        max_streams: MAX_STREAMS,
        max_message: MAX_MESSAGE,
        stream_window: 32 << 10,
        ack_frequency: 1 + u32::from((setup >> 2) & 3),
        initial_window_packets: 2 + u32::from((setup >> 4) & 7),
        time_wait: Duration::from_secs(1),
        max_retransmissions: 6,
        congestion,
        ..Default::default()
    };
    let cfg = |seed| EndpointConfig {
        seed,
        max_connections: 4,
        accept_backlog: 2,
        connection: connection.clone(),
        ..Default::default()
    };
    let mut w = World {
        net: Net::new(cfg(1), cfg(2)),
        conn: [None, None],
        flows: Default::default(),
        tainted: false,
        buf: Vec::new(),
    };
    w.conn[0] = Some(w.net.a.connect(w.net.now, w.net.b_addr).expect("connect"));
    if setup & 0x80 == 0 {
        // Established before the operations start (else they make it happen).
        w.net.flush(4, Duration::from_millis(10));
    }
    w.settle();

    let mut ops = 0;
    while !r.is_empty() && ops < MAX_OPS {
        ops += 1;
        let op = r.u8();
        let side = op & 0x80 != 0; // false: a, true: b
        match op & 0x1f {
            0 => {
                let s = u16::from(r.u8() % 2);
                let len = usize::from(r.u16());
                w.send(side, s, len);
            }
            1 => {
                let s = 2 + u16::from(r.u8() % 2);
                let len = usize::from(r.u16()) % (MAX_MESSAGE + 1);
                w.send_message(side, s, len, MessageOptions::default());
            }
            2 => {
                let len = usize::from(r.u16()) % (MAX_MESSAGE - 7);
                let opts = options(&mut r, true);
                w.send_message(side, 4, len, opts);
            }
            3 => {
                let s = 5 + u16::from(r.u8() % 2);
                let len = usize::from(r.u16()) % (MAX_MESSAGE - 7);
                let mut opts = options(&mut r, op & 0x40 != 0);
                opts.unordered = true;
                w.send_message(side, s, len, opts);
            }
            4 => {
                let s = u16::from(r.u8() % 2);
                let max = usize::from(r.u16());
                w.recv(side, s, max);
            }
            5 => {
                let s = 2 + u16::from(r.u8() % 5);
                w.recv_message(side, Some(s));
            }
            6 => w.recv_message(side, None),
            7 => {
                let s = u16::from(r.u8()) % STREAMS;
                let dir = usize::from(side);
                // Streams never sent on too (a send after such a finish was
                // once accepted and silently lost: artifacts-found/
                // connection_ops/reopened-empty-finished-stream-loses-data).
                if let (ep, Some(h)) = w.side(side) {
                    if ep.conn_mut(h).finish_stream(StreamId::new(s)).is_ok() {
                        w.flows[dir].finished[usize::from(s)] = true;
                    }
                }
            }
            8 => {
                let s = u16::from(r.u8()) % STREAMS;
                let code = r.u16();
                w.flows[usize::from(side)].cut[usize::from(s)] = true;
                if let (ep, Some(h)) = w.side(side) {
                    ep.conn_mut(h).reset_stream(StreamId::new(s), code);
                }
            }
            9 => {
                let s = u16::from(r.u8()) % STREAMS;
                let code = r.u16();
                w.flows[usize::from(!side)].cut[usize::from(s)] = true;
                if let (ep, Some(h)) = w.side(side) {
                    ep.conn_mut(h).stop_stream(StreamId::new(s), code);
                }
            }
            10 => {
                let s = u16::from(r.u8()) % STREAMS;
                let (p, wt) = (r.u8(), r.u16());
                if let (ep, Some(h)) = w.side(side) {
                    ep.conn_mut(h).set_stream_priority(StreamId::new(s), p, wt);
                }
            }
            11 => {
                let dir = usize::from(side);
                if let (ep, Some(h)) = w.side(side) {
                    ep.conn_mut(h).close();
                    w.flows[dir].finished = [true; STREAMS as usize];
                }
            }
            12 => {
                let code = r.u16();
                let now = w.net.now;
                if let (ep, Some(h)) = w.side(side) {
                    ep.conn_mut(h).abort(now, ErrorCode(code));
                }
            }
            13 => {
                if op & 0x40 != 0 {
                    if let (ep, Some(h)) = w.side(side) {
                        // Releasing a connection closes it (a FIN follows the data).
                        ep.conn_mut(h).release();
                        w.conn[usize::from(side)] = None;
                        w.flows[usize::from(side)].finished = [true; STREAMS as usize];
                    }
                }
            }
            14 => w.net.advance(Duration::from_millis(u64::from(r.u16()))),
            15 => {
                w.net.next_timer();
            }
            16 | 17 | 18 => {
                let i = usize::from(r.u8());
                w.net.deliver(side, i);
            }
            19 => {
                let rounds = 1 + usize::from(r.u8() % 8);
                w.net.flush(rounds, Duration::from_millis(5));
            }
            20 => {
                let i = usize::from(r.u8());
                let q = w.queue(side);
                if !q.is_empty() {
                    let n = q.len();
                    q.remove(i % n);
                }
            }
            21 => {
                let i = usize::from(r.u8());
                let q = w.queue(side);
                if !q.is_empty() {
                    let d = q[i % q.len()].clone();
                    q.push(d);
                }
            }
            22 => {
                let (i, j) = (usize::from(r.u8()), usize::from(r.u8()));
                let q = w.queue(side);
                if !q.is_empty() {
                    let n = q.len();
                    q.swap(i % n, j % n);
                }
            }
            23 => {
                let i = usize::from(r.u8());
                let flips = 1 + usize::from(r.u8() % 3);
                let bits: Vec<u16> = (0..flips).map(|_| r.u16()).collect();
                let q = w.queue(side);
                if !q.is_empty() {
                    let n = q.len();
                    let mut d = q.remove(i % n);
                    let nbits = d.len() * 8;
                    let mut flipped = HashSet::new();
                    for b in bits {
                        let b = usize::from(b) % nbits;
                        if flipped.insert(b) {
                            d[b / 8] ^= 1 << (b % 8);
                        }
                    }
                    assert!(Packet::parse(&d).is_err(), "{} flipped bits passed the CRC", flipped.len());
                    w.net.inject(side, &d);
                }
            }
            24 => {
                let i = usize::from(r.u8());
                let len = usize::from(r.u16());
                let q = w.queue(side);
                if !q.is_empty() {
                    let n = q.len();
                    let mut d = q.remove(i % n);
                    d.truncate(len % d.len());
                    assert!(Packet::parse(&d).is_err(), "a truncated datagram parsed");
                    w.net.inject(side, &d);
                }
            }
            25 => {
                let mode = r.u8();
                let mut d = r.bytes().to_vec();
                if mode & 1 == 1 && d.len() >= HEADER_LEN {
                    // Addressed to the live connection, as a blind attacker
                    // that saw one packet would.
                    let q = w.queue(side);
                    if let Some(last) = q.last() {
                        d[4..8].copy_from_slice(&last[4..8]);
                    }
                    d[0] &= 0xf0;
                }
                if mode & 2 == 2 {
                    fixup(&mut d);
                }
                if Packet::parse(&d).is_ok() {
                    w.tainted = true;
                }
                w.net.inject(side, &d);
            }
            _ => {
                // A quiet stretch: every datagram delivered at once.
                w.net.flush(2, Duration::from_millis(1));
            }
        }
        w.settle();
    }
    // Deliver everything and take every item: nothing may spin, and what
    // arrives must still check out.
    for _ in 0..4 {
        w.net.flush(8, Duration::from_millis(10));
        w.net.next_timer();
        for side in [false, true] {
            for s in 0..2 {
                w.recv(side, s, 1 << 16);
            }
            for _ in 0..64 {
                w.recv_message(side, None);
            }
        }
        w.settle();
    }
});
