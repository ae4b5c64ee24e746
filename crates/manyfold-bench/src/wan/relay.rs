//! The relay process (`manyfold-bench wan relay`): owns the two TUN
//! devices that join the lab's namespaces and moves every packet from one
//! to the other through a [`Link`] per direction.
//!
//! Control is a line protocol on stdin/stdout, so the bench can change the
//! link between cells without recreating the devices:
//! `set <LinkConfig line>` → `ok`; `stats` → one line of counters;
//! end of input → the relay exits (and the devices vanish with it), so a
//! bench that dies never leaves a relay behind.

use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufRead, ErrorKind, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::link::{Link, LinkConfig, LinkStats, Verdict};
use super::sys;

/// Room above the devices' MTU in a packet buffer.
const HEADROOM: usize = 64;
/// Packets read per wake-up before delivering what is due.
const READ_BATCH: usize = 64;
/// Packets due this soon are delivered now: at 1 Gbit/s a packet is due
/// every 12 µs, and one wake-up per packet would cost more than the
/// packets. The cost is a burst of at most this much link time.
const SLACK: Duration = Duration::from_micros(50);

#[derive(Debug, Default)]
struct Counters {
    forwarded: AtomicU64,
    forwarded_bytes: AtomicU64,
    lost: AtomicU64,
    queue_drops: AtomicU64,
    dropped_bytes: AtomicU64,
    reordered: AtomicU64,
    write_errors: AtomicU64,
    stalls: AtomicU64,
    max_stall_us: AtomicU64,
}

impl Counters {
    fn publish(&self, s: &LinkStats) {
        self.forwarded.store(s.forwarded, Ordering::Relaxed);
        self.forwarded_bytes.store(s.forwarded_bytes, Ordering::Relaxed);
        self.lost.store(s.lost, Ordering::Relaxed);
        self.queue_drops.store(s.queue_drops, Ordering::Relaxed);
        self.dropped_bytes.store(s.dropped_bytes, Ordering::Relaxed);
        self.reordered.store(s.reordered, Ordering::Relaxed);
    }

    fn publish_stalls(&self, s: &Stalls) {
        self.stalls.store(s.count, Ordering::Relaxed);
        self.max_stall_us.store(s.longest.as_micros() as u64, Ordering::Relaxed);
    }

    fn line(&self) -> String {
        format!(
            "fwd={} fwdbytes={} lost={} qdrop={} dropbytes={} reord={} werr={} stalls={} maxstall={}",
            self.forwarded.load(Ordering::Relaxed),
            self.forwarded_bytes.load(Ordering::Relaxed),
            self.lost.load(Ordering::Relaxed),
            self.queue_drops.load(Ordering::Relaxed),
            self.dropped_bytes.load(Ordering::Relaxed),
            self.reordered.load(Ordering::Relaxed),
            self.write_errors.load(Ordering::Relaxed),
            self.stalls.load(Ordering::Relaxed),
            self.max_stall_us.load(Ordering::Relaxed),
        )
    }
}

#[derive(Debug)]
struct Shared {
    cfg: Mutex<LinkConfig>,
    epoch: AtomicU64,
    stop: AtomicBool,
    counters: [Counters; 2],
}

/// One packet's bytes: a fixed buffer, recycled through a pool, so the
/// packet path never allocates or zeroes memory once the pool has grown to
/// the link's bandwidth-delay product.
/// Each is the devices' MTU plus [`HEADROOM`] long.
type Buf = Box<[u8]>;

/// A packet waiting in the delay line, ordered by delivery time (then by
/// arrival, so equal times keep their order).
#[derive(Debug)]
struct Pending {
    at: Instant,
    seq: u64,
    len: usize,
    data: Buf,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Pending {}

impl Ord for Pending {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // Reversed: BinaryHeap is a max-heap, we want the earliest first.
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Runs the relay between TUN devices `dev_a` and `dev_b`, whose MTU is
/// `mtu`, until stdin ends.
pub fn main(dev_a: &str, dev_b: &str, mtu: usize) -> Result<()> {
    let a = Arc::new(sys::open_tun(dev_a).with_context(|| format!("creating TUN device {dev_a}"))?);
    let b = Arc::new(sys::open_tun(dev_b).with_context(|| format!("creating TUN device {dev_b}"))?);
    let shared = Arc::new(Shared {
        cfg: Mutex::new(LinkConfig::default()),
        epoch: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        counters: [Counters::default(), Counters::default()],
    });
    let mut threads = Vec::new();
    for (dir, (from, to)) in
        [(Arc::clone(&a), Arc::clone(&b)), (Arc::clone(&b), Arc::clone(&a))].into_iter().enumerate()
    {
        let shared = Arc::clone(&shared);
        threads.push(std::thread::spawn(move || direction(dir, &from, &to, &shared, mtu + HEADROOM)));
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready")?;
    out.flush()?;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let reply = if let Some(rest) = line.strip_prefix("set ") {
            match LinkConfig::from_line(rest) {
                Some(c) => {
                    *shared.cfg.lock().unwrap_or_else(|e| e.into_inner()) = c;
                    shared.epoch.fetch_add(1, Ordering::SeqCst);
                    // Let both directions pick it up before confirming.
                    std::thread::sleep(Duration::from_millis(120));
                    "ok".to_string()
                }
                None => format!("error: bad config {rest:?}"),
            }
        } else if line == "stats" {
            format!("a2b {} b2a {}", shared.counters[0].line(), shared.counters[1].line())
        } else {
            format!("error: unknown command {line:?}")
        };
        writeln!(out, "{reply}")?;
        out.flush()?;
    }
    shared.stop.store(true, Ordering::SeqCst);
    for t in threads {
        let _ = t.join();
    }
    Ok(())
}

/// One pass of a packet thread's loop does at most [`READ_BATCH`] reads
/// and [`SLACK`]'s worth of writes, well under a millisecond; a pass (or a
/// timed wait's overshoot) longer than this means the thread was held off
/// its core, and packets arriving meanwhile reach the emulated queue as
/// one burst when it resumes.
const STALL: Duration = Duration::from_millis(1);

/// How often, and for how long at most, a packet thread was held off its
/// core (see [`STALL`]): the evidence that separates the host's CPU
/// contention from the link model when the self-check loses packets.
#[derive(Debug, Default)]
struct Stalls {
    count: u64,
    longest: Duration,
}

impl Stalls {
    fn note(&mut self, late: Duration) {
        if late > STALL {
            self.count += 1;
            self.longest = self.longest.max(late);
        }
    }
}

/// Real-time priority of the packet threads (1–99; low, as only the
/// relay's own two threads use the class).
const RT_PRIORITY: i32 = 10;
/// Buffers made up front per direction (grows on demand past that).
const POOL_START: usize = 1024;

/// One direction: read what `from` emits, pass it through the link, write
/// it into `to` when due. Single-threaded per direction: no locks on the
/// packet path, one `read` and one `write` per packet, and a wait only
/// when nothing is readable and nothing is due.
fn direction(dir: usize, from: &File, to: &File, shared: &Shared, buf_len: usize) {
    let new_buf = || -> Buf { vec![0u8; buf_len].into_boxed_slice() };
    if let Err(e) = sys::set_realtime(RT_PRIORITY) {
        eprintln!(
            "wan relay: could not raise the packet thread to SCHED_FIFO ({e}); \
             under CPU load the emulator may drop packets in bursts"
        );
    }
    let mut epoch = u64::MAX;
    let mut link = Link::new(LinkConfig::default(), dir as u64);
    let mut heap: BinaryHeap<Pending> = BinaryHeap::with_capacity(POOL_START);
    let mut seq = 0u64;
    let mut pool: Vec<Buf> = (0..POOL_START).map(|_| new_buf()).collect();
    let counters = &shared.counters[dir];
    let mut stalls = Stalls::default();
    // When the previous pass ended and how long it then meant to wait.
    let mut last_pass = Instant::now();
    let mut slept = Duration::ZERO;
    while !shared.stop.load(Ordering::Relaxed) {
        let e = shared.epoch.load(Ordering::SeqCst);
        if e != epoch {
            epoch = e;
            let cfg = *shared.cfg.lock().unwrap_or_else(|e| e.into_inner());
            link = Link::new(cfg, dir as u64);
            stalls = Stalls::default();
            counters.publish(&link.stats);
            counters.publish_stalls(&stalls);
        }
        let now = Instant::now();
        stalls.note(now.saturating_duration_since(last_pass + slept));
        last_pass = now;
        slept = Duration::ZERO;
        // Deliver everything due.
        while heap.peek().is_some_and(|p| p.at <= now + SLACK) {
            let Some(p) = heap.pop() else { break };
            if (&*to).write(&p.data[..p.len]).is_err() {
                counters.write_errors.fetch_add(1, Ordering::Relaxed);
            }
            pool.push(p.data);
        }
        // Read what is waiting; wait only if nothing was.
        let mut read = 0;
        while read < READ_BATCH {
            let mut buf = pool.pop().unwrap_or_else(new_buf);
            match (&*from).read(&mut buf[..]) {
                Ok(n) => {
                    read += 1;
                    match link.offer(n, Instant::now()) {
                        Verdict::Deliver(at) => {
                            heap.push(Pending { at, seq, len: n, data: buf });
                            seq += 1;
                        }
                        Verdict::Lost | Verdict::QueueFull => pool.push(buf),
                    }
                }
                Err(e) => {
                    pool.push(buf);
                    if e.kind() != ErrorKind::WouldBlock {
                        // Device going away or down: don't spin on it.
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    break;
                }
            }
        }
        counters.publish(&link.stats);
        counters.publish_stalls(&stalls);
        if read > 0 {
            continue; // more may be waiting, and something may be due
        }
        let now = Instant::now();
        let wait = heap.peek().map_or(Duration::from_millis(100), |p| p.at.saturating_duration_since(now));
        if wait > SLACK {
            let wait = wait.min(Duration::from_millis(100));
            match sys::wait_readable(from, wait) {
                // Woken by a packet: how soon after its arrival is unknown.
                Ok(true) => slept = Instant::now().saturating_duration_since(last_pass),
                // Timed out: anything past the timeout was a late wake-up.
                Ok(false) => slept = wait,
                Err(_) => return,
            }
        }
    }
}
