//! The multicast receiver (spec §16) fed datagrams: packets of every type
//! built from fuzzer fields for the session it follows (or another), raw
//! or header-fixed bytes, and real sessions' datagrams from the seed
//! corpus, at non-decreasing times, with timers, `finish` and FEC `decode`.
//!
//! Input: operations read by `manyfold_fuzz::Reader`: 0 a built packet,
//! 1 raw bytes (bit 0 of the mode: fix the header), 2 advance the clock,
//! 3 jump to the next deadline, 4 `finish` (with bit 6 of the op: `abort`
//! with a fuzzed code), 5 `decode`.
//!
//! Invariants: no panic; a delivery's range lies inside the datagram and
//! its offset inside `max_packets` blocks; what the receiver sends parses
//! as a multicast packet no larger than the buffer; datagrams and events
//! per operation are bounded; handling a timeout moves the deadline on.
#![no_main]

use std::net::SocketAddr;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use manyfold_fuzz::{address, fixup, origin, write_mc, Reader};
use manyfold_proto::mcast::{McastReceiver, ReceiverConfig};
use manyfold_proto::wire::ErrorCode;

const MAX_OPS: usize = 500;
const MAX_PACKETS: u32 = 4096;
/// The session of the seed corpus's sender (seed 7 in gen_corpus).
const SESSION_SEED: u64 = 7;

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let setup = r.u8();
    let sender: SocketAddr = "10.9.0.1:7000".parse().expect("address");
    let group: SocketAddr = "239.1.2.3:7001".parse().expect("address");
    let cfg = ReceiverConfig {
        seed: u64::from(setup),
        network: u32::from(setup >> 4),
        session: (setup & 1 == 1).then(|| manyfold_fuzz::mcast_session(SESSION_SEED)),
        max_packets: MAX_PACKETS,
        sender_timeout: Duration::from_secs(5),
        // Bit 1: a protected receiver (spec §19.7).
        security: (setup & 2 != 0).then(|| manyfold_fuzz::mcast_keys(setup & 4 != 0)),
        ..Default::default()
    };
    let mut rx = McastReceiver::new(cfg, group);
    let session = manyfold_fuzz::mcast_session(SESSION_SEED);
    let client = rx.client_id();
    let mut now = origin();
    let mut buf = vec![0u8; 70_000];
    let mut out = vec![0u8; 70_000];
    let mut ops = 0;
    while !r.is_empty() && ops < MAX_OPS {
        ops += 1;
        let op = r.u8();
        let from = address(r.u8(), sender);
        let mut fed: Option<Vec<u8>> = None;
        match op % 6 {
            0 => {
                let n = write_mc(&mut r, &mut buf, session, client);
                fed = Some(buf[..n].to_vec());
            }
            1 => {
                let mut d = r.bytes().to_vec();
                if op & 0x80 != 0 {
                    fixup(&mut d);
                }
                fed = Some(d);
            }
            2 => now += Duration::from_millis(u64::from(r.u16())),
            3 => {
                if let Some(t) = rx.poll_timeout() {
                    now = now.max(t);
                }
            }
            4 if op & 0x40 != 0 => {
                // spec §16.7: leaving at once; nothing more is due.
                rx.abort(now, ErrorCode(r.u16()));
                assert!(rx.is_finished() && rx.poll_timeout().is_none(), "an aborted receiver stays awake");
            }
            4 => {
                // A failed verdict with any announced block, however small
                // (a 1-byte block once overflowed the STATUS's error code:
                // artifacts-found/mcast_receiver/status-error-code-overflows-tiny-block).
                rx.finish(op & 0x80 != 0);
            }
            _ => {
                let mut reads = 0usize;
                let got = rx.decode(&mut |_off, b: &mut [u8]| {
                    reads += 1;
                    b.fill(0x5a);
                    b.len()
                });
                for (off, bytes) in got {
                    assert!(off + bytes.len() as u64 <= u64::from(MAX_PACKETS) * 65_536);
                }
            }
        }
        if let Some(mut d) = fed {
            if let Some(del) = rx.handle_datagram(now, from, &mut d) {
                assert!(
                    del.payload.start <= del.payload.end && del.payload.end <= d.len(),
                    "delivery outside the datagram"
                );
                let len = (del.payload.end - del.payload.start) as u64;
                assert!(del.offset + len <= u64::from(MAX_PACKETS) * 65_536, "delivery beyond max_packets");
            }
        }
        // Timers, then output: bounded, and every datagram parses.
        for round in 0.. {
            rx.handle_timeout(now);
            let mut sent = 0;
            while let Some(t) = rx.poll_transmit(now, &mut out) {
                sent += 1;
                assert!(sent <= 1_000, "unbounded output");
                assert!(t.size <= out.len());
                manyfold_fuzz::check_sent_mc(&out[..t.size], "the receiver");
            }
            if rx.poll_timeout().is_none_or(|t| t > now) {
                break;
            }
            assert!(round < 64, "a timer stays due");
        }
        let mut events = 0;
        while rx.poll_event().is_some() {
            events += 1;
            assert!(events <= 1_000, "unbounded events");
        }
        let (held, total) = rx.progress();
        assert!(held <= u64::from(MAX_PACKETS));
        let _ = total;
    }
});
