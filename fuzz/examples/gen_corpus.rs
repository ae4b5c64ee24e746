//! Writes the seed corpus, fuzz/corpus/<target>/, from real exchanges:
//! a connection's handshake, stream data under loss (SACKs), messages of
//! every kind, FIN, RST and a refusal; a multicast session with FEC and
//! loss (every multicast packet type); and operation sequences for the
//! structured targets that drive those exchanges.
//!
//! Run from fuzz/: `cargo +nightly run --release --example gen_corpus`.
//! It replaces the files it names (`seed-*`) and leaves others alone.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use manyfold_fuzz::{origin, Net, Writer};
use manyfold_proto::mcast::{Announcement, McPacket, McastReceiver, McastSender, ReceiverConfig, SenderConfig};
use manyfold_proto::wire::{ErrorCode, Packet};
use manyfold_proto::{ConnectionConfig, EndpointConfig, MessageOptions, StreamId};

fn write(target: &str, name: &str, data: &[u8]) {
    let dir = Path::new("corpus").join(target);
    std::fs::create_dir_all(&dir).expect("corpus dir");
    std::fs::write(dir.join(format!("seed-{name}")), data).expect("write seed");
}

fn config(seed: u64) -> EndpointConfig {
    EndpointConfig {
        seed,
        connection: ConnectionConfig { max_datagram: 700, ..Default::default() },
        ..Default::default()
    }
}

/// A connection's life under 10% loss: every datagram either side sent.
fn connection_datagrams() -> Vec<Vec<u8>> {
    let mut net = Net::new(config(1), config(2));
    net.record = Some(Vec::new());
    let a = net.a.connect(net.now, net.b_addr).expect("connect");
    // A request riding on the handshake (spec §15).
    let _ = net.a.conn_mut(a).stream_send(StreamId::new(0), b"GET /");
    net.flush(6, Duration::from_millis(5));
    let b = net.b.accept().expect("accepted");
    let mut lcg = 7u64;
    let mut lossy = |net: &mut Net, rounds: usize| {
        for _ in 0..rounds {
            net.pump(100_000);
            for to_b in [true, false] {
                let q = if to_b { &mut net.to_b } else { &mut net.to_a };
                q.retain(|_| {
                    lcg = lcg.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    (lcg >> 33) % 10 != 0
                });
            }
            net.flush(1, Duration::from_millis(5));
            net.advance(Duration::from_millis(30));
        }
    };
    let block: Vec<u8> = (0..6000u32).map(|i| (i % 251) as u8).collect();
    let _ = net.a.conn_mut(a).stream_send(StreamId::new(0), &block);
    let _ = net.a.conn_mut(a).stream_send(StreamId::new(1), &block[..900]);
    let _ = net.b.conn_mut(b).stream_send(StreamId::new(0), b"reply");
    let now = net.now;
    let _ = net.a.conn_mut(a).send_message(now, StreamId::new(2), b"ordered", MessageOptions::default());
    let _ = net.a.conn_mut(a).send_message(now, StreamId::new(2), b"", MessageOptions::default());
    let un = MessageOptions { unordered: true, ..Default::default() };
    let _ = net.a.conn_mut(a).send_message(now, StreamId::new(5), &block[..1500], un);
    let pr = MessageOptions { lifetime: Some(Duration::from_millis(1)), ..Default::default() };
    let _ = net.a.conn_mut(a).send_message(now, StreamId::new(4), &block[..2000], pr);
    lossy(&mut net, 20);
    let mut buf = vec![0u8; 1 << 16];
    while let Ok(Some(n)) = net.b.conn_mut(b).stream_recv(StreamId::new(0), &mut buf) {
        if n == 0 {
            break;
        }
    }
    while let Ok(Some(_)) = net.b.conn_mut(b).recv_message() {}
    net.a.conn_mut(a).reset_stream(StreamId::new(1), 9);
    net.b.conn_mut(b).stop_stream(StreamId::new(3), 4);
    let _ = net.a.conn_mut(a).finish_stream(StreamId::new(2));
    net.flush(4, Duration::from_millis(5));
    net.a.conn_mut(a).close();
    net.b.conn_mut(b).close();
    lossy(&mut net, 10);
    net.flush(6, Duration::from_millis(5));
    // A second connection, aborted (RST with a code).
    let a2 = net.a.connect(net.now, net.b_addr).expect("connect");
    net.flush(4, Duration::from_millis(5));
    let now = net.now;
    net.a.conn_mut(a2).abort(now, ErrorCode::APPLICATION);
    net.flush(4, Duration::from_millis(5));
    // Refused: nobody listening.
    net.b.set_listening(false);
    let _ = net.a.connect(net.now, net.b_addr);
    net.flush(4, Duration::from_millis(5));
    net.record.take().unwrap_or_default()
}

/// A multicast session (one sender, two receivers, FEC, loss at one
/// receiver): every datagram, as (from the sender?, destination, bytes).
fn mcast_datagrams() -> Vec<(bool, Vec<u8>)> {
    let group: SocketAddr = "239.1.2.3:7001".parse().expect("address");
    let sender_addr: SocketAddr = "10.9.0.1:7000".parse().expect("address");
    let cfg = SenderConfig { seed: 7, max_datagram: 200, fec_k: 4, fec_proactive: 1, ..Default::default() };
    let size = 8000u64;
    let info = Announcement {
        size: Some(size),
        block: 0,
        artp_max_us: 0,
        repair_interval_ms: 0,
        fec_k: 0,
        hash: Some([3; 32]),
        name: "file.bin".into(),
    };
    let mut now = origin();
    let mut tx = McastSender::new(cfg, group, info, now);
    let addrs: [SocketAddr; 2] = ["10.9.0.2:7002".parse().expect("a"), "10.9.1.3:7002".parse().expect("a")];
    let mut rx: Vec<McastReceiver> = (0..2)
        .map(|i| McastReceiver::new(ReceiverConfig { seed: 10 + i, network: i as u32, ..Default::default() }, group))
        .collect();
    let mut log = Vec::new();
    let mut buf = vec![0u8; 2048];
    let mut lcg = 3u64;
    for _ in 0..4000 {
        let mut out: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        while let Some(t) = tx.poll_transmit(now, &mut buf, &mut |off, b: &mut [u8]| {
            let n = b.len().min(size.saturating_sub(off) as usize);
            b[..n].fill((off % 251) as u8);
            n
        }) {
            log.push((true, buf[..t.size].to_vec()));
            out.push((t.destination, buf[..t.size].to_vec()));
        }
        for (dest, d) in out {
            for (i, r) in rx.iter_mut().enumerate() {
                lcg = lcg.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                if (dest == group || dest == addrs[i]) && !(i == 1 && (lcg >> 33) % 3 == 0) {
                    // Opened in place when sealed: each receiver gets its own copy.
                    r.handle_datagram(now, sender_addr, &mut d.clone());
                }
            }
        }
        for (i, r) in rx.iter_mut().enumerate() {
            let _ = r.decode(&mut |_, b: &mut [u8]| b.len());
            r.handle_timeout(now);
            while let Some(t) = r.poll_transmit(now, &mut buf) {
                log.push((false, buf[..t.size].to_vec()));
                tx.handle_datagram(now, addrs[i], &buf[..t.size]);
            }
            while let Some(e) = r.poll_event() {
                if e == manyfold_proto::mcast::ReceiverEvent::Complete {
                    r.finish(true);
                }
            }
        }
        while tx.poll_event().is_some() {}
        if tx.is_done() {
            break;
        }
        tx.handle_timeout(now);
        let next = [tx.poll_timeout(), rx[0].poll_timeout(), rx[1].poll_timeout()].into_iter().flatten().min();
        now = next.map_or(now + Duration::from_millis(1), |t| t.max(now + Duration::from_micros(100)));
    }
    log
}

fn main() {
    // datagram and chunks: distinct connection packets, one per shape.
    let conn = connection_datagrams();
    let mut shapes = BTreeSet::new();
    let mut n = 0;
    for d in &conn {
        let Ok(p) = Packet::parse(d) else { continue };
        let shape = (p.header.flags.0, p.data.len() / 8, p.data.first().copied(), p.sack.map(|s| s.ranges().len()));
        if shapes.insert(shape) && n < 60 {
            write("datagram", &format!("{n:03}"), d);
            if !p.data.is_empty() {
                write("chunks", &format!("{n:03}"), p.data);
            }
            n += 1;
        }
    }
    // mcast_wire: up to 6 of each multicast type.
    let mc = mcast_datagrams();
    let mut per_type = [0usize; 16];
    for (i, (_, d)) in mc.iter().enumerate() {
        if McPacket::parse(d).is_err() {
            continue;
        }
        let t = usize::from(d[0] & 0x0f);
        if per_type[t] < 6 {
            per_type[t] += 1;
            write("mcast_wire", &format!("{t}-{i:04}"), d);
        }
    }
    // mcast_receiver: the sender's datagrams in order, raw (op 1, from
    // the sender), with clock steps between; one seed per run of 40.
    for (k, part) in mc.iter().filter(|(s, _)| *s).map(|(_, d)| d).collect::<Vec<_>>().chunks(40).take(4).enumerate() {
        let mut w = Writer::default();
        w.u8(0);
        for d in part {
            w.u8(1).u8(0).bytes(d);
            w.u8(2).u8(0).u16(2);
        }
        write("mcast_receiver", &format!("session-{k}"), &w.out);
    }
    // mcast_sender: the receivers' feedback, raw (op 1, from the default
    // peer), with clock steps; a 3000-byte file, FEC on.
    let mut w = Writer::default();
    w.u8(0x05).u16(2000);
    for d in mc.iter().filter(|(s, _)| !*s).map(|(_, d)| d).take(80) {
        w.u8(1).u8(0).bytes(d);
        w.u8(2).u16(5);
    }
    write("mcast_sender", "feedback", &w.out);
    let mut w = Writer::default();
    w.u8(0x02).u16(100);
    w.u8(0).u8(0).u8(5).u8(1).u8(0).u32(0).u32(0).u32(0); // REGISTER from client 5
    w.u8(4).u8(5).u16(100).u8(2).u16(50).u8(3);
    write("mcast_sender", "stream", &w.out);

    // endpoint_input: hand-made operation sequences (see the target's OP_*).
    let sample = conn.iter().find(|d| d.len() > 100).cloned().unwrap_or_default();
    let seeds: Vec<(&str, Vec<u8>)> = vec![
        ("syn-flood", {
            let mut w = Writer::default();
            for i in 1..40u8 {
                w.u8(2).u8(i).u32(1000 + u32::from(i)).u32(77).u16(1452);
            }
            w.out
        }),
        ("hostile-handshakes", {
            let mut w = Writer::default();
            for i in 1..12u8 {
                w.u8(2).u8(i).u32(5000 + u32::from(i)).u32(9).u16(1200);
                w.u8(3).u8(i).u8(0x02).bytes(&[5, 5, 5]);
                w.u8(9).u8(1).u16(u16::from(i));
            }
            w.u8(7).u16(3000);
            w.out
        }),
        ("traffic", {
            let mut w = Writer::default();
            w.u8(10).u8(0).u16(300).u8(11).u8(9).u8(1).u16(0).u8(11);
            w.u8(10).u8(2).u16(0x0103).u8(11).u8(8).u8(11).u8(10).u8(3).u16(0).u8(11).u8(11);
            w.out
        }),
        ("forged-in-window", {
            let mut w = Writer::default();
            w.u8(10).u8(0).u16(200);
            w.u8(0).u8(0).u8(0x06).bytes(&sample);
            w.u8(1).u8(0).u8(0x06).bytes(&sample);
            w.u8(0).u8(7).u8(0x01).bytes(&sample);
            w.u8(11).u8(8);
            w.out
        }),
        ("loss", {
            let mut w = Writer::default();
            w.u8(10).u8(0).u16(2000).u8(6).u8(0).u8(6).u8(1).u8(5).u8(3).u8(8).u8(8).u8(11);
            w.out
        }),
    ];
    for (name, s) in seeds {
        write("endpoint_input", name, &s);
    }

    // connection_ops: setup byte, knobs byte, then operations.
    let mut seeds: Vec<(&str, Vec<u8>)> = Vec::new();
    let mut w = Writer::default();
    w.u8(0).u8(100);
    w.u8(0).u8(0).u16(5000).u8(19).u8(3).u8(4 | 0x80).u8(0).u16(8000);
    w.u8(1).u8(0).u16(300).u8(1).u8(1).u16(0).u8(19).u8(4).u8(5 | 0x80).u8(0).u8(5 | 0x80).u8(0);
    w.u8(11).u8(19).u8(7).u8(4 | 0x80).u8(0).u16(100);
    seeds.push(("bytes-and-messages", w.out));
    let mut w = Writer::default();
    w.u8(1).u8(50);
    w.u8(2).u16(500).u8(1).u8(3).u8(0).u16(700).u8(2);
    w.u8(3 | 0x40).u8(1).u16(900).u8(5);
    w.u8(20).u8(0).u8(21).u8(1).u8(22).u8(0).u8(2).u8(23).u8(0).u8(1).u16(77).u8(24).u8(1).u16(30);
    w.u8(16).u8(0).u8(16).u8(1).u8(15).u8(19).u8(2).u8(6 | 0x80).u8(6 | 0x80).u8(6 | 0x80);
    seeds.push(("lossy-messages", w.out));
    let mut w = Writer::default();
    w.u8(0x82).u8(0);
    for _ in 0..6 {
        w.u8(16).u8(0).u8(16 | 0x80).u8(0).u8(15);
    }
    w.u8(0).u8(0).u16(3000).u8(8).u8(0).u16(3).u8(9 | 0x80).u8(1).u16(4).u8(19).u8(4);
    w.u8(12).u16(1).u8(19).u8(2);
    seeds.push(("handshake-by-hand", w.out));
    let mut w = Writer::default();
    w.u8(0).u8(0);
    w.u8(0).u8(1).u16(3000).u8(25).u8(3).bytes(&sample).u8(19).u8(4);
    seeds.push(("inject", w.out));
    for (name, s) in seeds {
        write("connection_ops", name, &s);
    }
    println!("{} connection datagrams, {} multicast datagrams", conn.len(), mc.len());
}
