//! The emulator's self-check: a paced UDP stream offered at the link rate
//! (`wan udp-send`) and a counting receiver (`wan udp-recv`). With loss set
//! to 0 the relay must deliver the link rate and lose nothing; if it can't
//! (CPU, TUN overhead), every figure above that rate is the emulator's,
//! not the transport's, and the report says so.
//!
//! Datagrams carry a sequence number in their first 8 bytes; `u64::MAX`
//! marks the end.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// IPv4 + UDP header bytes, counted in the link rate (the relay sees IP
/// packets).
pub const HEADERS: usize = 28;
const END: u64 = u64::MAX;
/// The probe's real-time priority: below the relay's, so the relay still
/// preempts it. The self-check measures the emulator; a probe that waits
/// behind other processes for a core would offer a bursty, late stream
/// and the check would measure the machine's load instead.
const PROBE_PRIORITY: i32 = 5;

fn realtime(who: &str) {
    if let Err(e) = super::sys::set_realtime(PROBE_PRIORITY) {
        eprintln!("wan {who}: could not switch to SCHED_FIFO ({e}); the check may reflect CPU contention");
    }
}

/// Sends `secs` of datagrams of `payload` bytes so that the IP packets
/// add up to `rate_bps`; prints `sent=N`.
pub fn send(to: SocketAddr, rate_bps: u64, secs: f64, payload: usize) -> Result<()> {
    realtime("udp-send");
    let sock = UdpSocket::bind("0.0.0.0:0")?;
    sock.connect(to)?;
    let mut buf = vec![0u8; payload.max(8)];
    let per_sec = rate_bps as f64 / ((payload + HEADERS) * 8) as f64;
    let start = Instant::now();
    let limit = Duration::from_secs_f64(secs);
    let (mut sent, mut skipped) = (0u64, 0u64);
    while start.elapsed() < limit {
        let due = (start.elapsed().as_secs_f64() * per_sec) as u64;
        // Never burst more than 64 behind schedule: a late wake-up lowers
        // the offered load instead of overflowing the bottleneck queue.
        if due > sent + skipped + 64 {
            skipped = due - sent - 64;
        }
        while sent + skipped < due {
            buf[..8].copy_from_slice(&sent.to_be_bytes());
            // ENOBUFS and friends: the datagram was not offered; retry later.
            if sock.send(&buf).is_err() {
                break;
            }
            sent += 1;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    buf[..8].copy_from_slice(&END.to_be_bytes());
    for _ in 0..10 {
        let _ = sock.send(&buf);
        std::thread::sleep(Duration::from_millis(10));
    }
    println!("sent={sent} secs={:.3}", start.elapsed().as_secs_f64());
    Ok(())
}

/// Counts datagrams until the end mark (or 3 s of silence, or `limit`);
/// prints `received=N bytes=B secs=S reordered=R`, where `secs` spans the
/// first to the last data datagram.
pub fn recv(listen: SocketAddr, limit: f64) -> Result<()> {
    realtime("udp-recv");
    let sock = UdpSocket::bind(listen).with_context(|| format!("binding {listen}"))?;
    sock.set_read_timeout(Some(Duration::from_secs(3)))?;
    super::sys::force_rcvbuf(&sock, 32 << 20)?;
    let mut buf = vec![0u8; 65536];
    let (mut received, mut bytes, mut reordered, mut highest) = (0u64, 0u64, 0u64, None::<u64>);
    let (mut first, mut last) = (None::<Instant>, None::<Instant>);
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < limit {
        let n = match sock.recv(&mut buf) {
            Ok(n) => n,
            Err(_) if first.is_some() => break,
            Err(_) => continue,
        };
        let Some(seq) = buf.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes) else { continue };
        if seq == END {
            break;
        }
        let now = Instant::now();
        first.get_or_insert(now);
        last = Some(now);
        received += 1;
        bytes += (n + HEADERS) as u64;
        match highest {
            Some(h) if seq < h => reordered += 1,
            _ => highest = Some(seq),
        }
    }
    let secs = match (first, last) {
        (Some(f), Some(l)) => (l - f).as_secs_f64(),
        _ => 0.0,
    };
    println!("received={received} bytes={bytes} secs={secs:.3} reordered={reordered}");
    Ok(())
}

/// `key=value` fields of a probe's report line.
pub fn field(line: &str, key: &str) -> Option<f64> {
    line.split_whitespace().find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_fields_parse() {
        let l = "received=10 bytes=15000 secs=1.500 reordered=0";
        assert_eq!(field(l, "received"), Some(10.0));
        assert_eq!(field(l, "secs"), Some(1.5));
        assert_eq!(field(l, "reorder"), None);
    }
}
