//! The multicast sender (spec §16) of a small file, fed feedback from
//! hostile or confused receivers: REGISTER, ACK, NACK, REPAIR, STATUS (and
//! every other type) built from fuzzer fields, raw or header-fixed bytes,
//! at non-decreasing times, with timers, `start`, and a stream's growth
//! and end (spec §16.6).
//!
//! Input: a setup byte (FEC on or off, file or stream, size), then
//! operations read by `manyfold_fuzz::Reader`: 0 a built packet from one
//! of 256 addresses, 1 raw bytes, 2 advance the clock, 3 jump to the next
//! deadline, 4 `start` (with bit 6 of the op: `abort` with a fuzzed code),
//! 5 `extend` / `finish_source`.
//!
//! Invariants: no panic; the receiver table stays within `max_receivers`;
//! what the sender sends parses, goes to the group or to an address that
//! wrote to it, and fits `max_datagram`; datagrams and events per
//! operation are bounded; handling a timeout moves the deadline on.
#![no_main]

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use manyfold_fuzz::{address, fixup, origin, write_mc, Reader};
use manyfold_proto::mcast::{Announcement, McastSender, SenderConfig};
use manyfold_proto::wire::ErrorCode;

const MAX_OPS: usize = 500;
const MAX_RECEIVERS: usize = 4;
const MAX_DATAGRAM: usize = 600;

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let setup = r.u8();
    let size = u64::from(r.u16()) * 4;
    let stream = setup & 2 != 0;
    let cfg = SenderConfig {
        seed: 7,
        max_datagram: MAX_DATAGRAM,
        max_receivers: MAX_RECEIVERS,
        max_repair_queue: 64,
        max_packets: 4096,
        fec_k: if setup & 1 != 0 { 4 } else { 0 },
        fec_proactive: u16::from((setup >> 2) & 3),
        pace: setup & 0x10 != 0,
        max_loss: (setup & 0x20 != 0).then_some(0.5),
        completion_timeout: Duration::from_secs(10),
        receiver_timeout: Duration::from_secs(2),
        max_repair_passes: 8,
        // Bit 6: a protected session (spec §19.7), IK with bit 7.
        security: (setup & 0x40 != 0).then(|| manyfold_fuzz::mcast_keys(setup & 0x80 != 0)),
        ..Default::default()
    };
    let group: SocketAddr = "239.1.2.3:7001".parse().expect("address");
    let info = Announcement {
        size: (!stream).then_some(size),
        block: 0,
        artp_max_us: 0,
        repair_interval_ms: 0,
        fec_k: 0,
        hash: (!stream).then_some([3; 32]),
        name: "file.bin".into(),
    };
    let mut now = origin();
    let mut tx = McastSender::new(cfg, group, info, now);
    let session = tx.session_id();
    let default_peer: SocketAddr = "10.9.0.2:7002".parse().expect("address");
    let mut peers: HashSet<SocketAddr> = HashSet::new();
    let mut buf = vec![0u8; 70_000];
    let mut out = vec![0u8; 70_000];
    let mut available = 0u64;
    let mut ops = 0;
    while !r.is_empty() && ops < MAX_OPS {
        ops += 1;
        let op = r.u8();
        match op % 6 {
            0 | 1 => {
                let from = address(r.u8(), default_peer);
                let d = if op % 6 == 0 {
                    let client = 1 + u32::from(r.u8() % 8);
                    let n = write_mc(&mut r, &mut buf, session, client);
                    buf[..n].to_vec()
                } else {
                    let mut d = r.bytes().to_vec();
                    if op & 0x80 != 0 {
                        fixup(&mut d);
                    }
                    d
                };
                peers.insert(from);
                tx.handle_datagram(now, from, &d);
            }
            2 => now += Duration::from_millis(u64::from(r.u16())),
            3 => {
                if let Some(t) = tx.poll_timeout() {
                    now = now.max(t);
                }
            }
            4 if op & 0x40 != 0 => {
                // spec §16.7: the session ends at once; nothing more is due.
                tx.abort(now, ErrorCode(r.u16()));
                assert!(tx.is_done() && tx.poll_timeout().is_none(), "an aborted sender stays awake");
            }
            4 => tx.start(now),
            _ => {
                if stream {
                    available = (available + u64::from(r.u16())).min(size);
                    if op & 0x80 != 0 {
                        tx.finish_source(available, [3; 32]);
                    } else {
                        tx.extend(available);
                    }
                }
            }
        }
        for round in 0.. {
            tx.handle_timeout(now);
            let mut sent = 0;
            while let Some(t) = tx.poll_transmit(now, &mut out, &mut |off, b: &mut [u8]| {
                let n = b.len().min(size.saturating_sub(off) as usize);
                b[..n].fill((off % 251) as u8);
                n
            }) {
                sent += 1;
                assert!(sent <= 20_000, "unbounded output");
                assert!(t.size <= MAX_DATAGRAM, "datagram of {} bytes over max_datagram", t.size);
                assert!(t.destination == group || peers.contains(&t.destination), "to {}", t.destination);
                manyfold_fuzz::check_sent_mc(&out[..t.size], "the sender");
            }
            if tx.poll_timeout().is_none_or(|t| t > now) {
                break;
            }
            assert!(round < 64, "a timer stays due");
        }
        let mut events = 0;
        while tx.poll_event().is_some() {
            events += 1;
            assert!(events <= 1_000, "unbounded events");
        }
        assert!(tx.receivers().len() <= MAX_RECEIVERS, "receiver table over max_receivers");
    }
});
