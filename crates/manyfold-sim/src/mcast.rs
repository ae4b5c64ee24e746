//! A multicast session on the simulated network (spec §11, §16): one
//! [`McastSender`] and receivers, where a datagram to the group address
//! goes to every other node, each copy through its own link (so loss,
//! delay and rate limits apply per receiver, as behind separate LANs).
//!
//! The file is [`crate::pattern`] bytes; each receiver writes what it is
//! delivered into its own buffer, and on completion the buffer is compared
//! with the file (the CLI checks a BLAKE3 hash instead).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use manyfold_proto::mcast::{
    Announcement, McastReceiver, McastSender, ReceiverConfig, ReceiverEvent, SenderConfig, SenderEvent, WindowRecord,
};

use crate::link::{Arrival, LinkConfig};
use crate::net::Network;
use crate::time::{Clock, EventQueue};
use crate::transfer::pattern;

/// One receiver node and what it has received.
#[derive(Debug)]
pub struct McReceiverNode {
    pub addr: SocketAddr,
    pub engine: McastReceiver,
    pub file: Vec<u8>,
    /// Virtual time since the start when it held every packet.
    pub complete_at: Option<Duration>,
    /// Whether its file matched, once complete.
    pub verified: Option<bool>,
    /// The session's end as this receiver saw it.
    pub ended: Option<ReceiverEvent>,
    pub events: Vec<ReceiverEvent>,
    /// Not started yet (a late joiner), or stopped (a dead receiver).
    pub running: bool,
    /// Its network id (`ReceiverConfig::network`).
    pub network: u32,
    /// Its process is descheduled now and then (a busy host): nothing is
    /// read, no timer fires and nothing is sent while stalled; what
    /// arrived meanwhile is read at the stall's end, in order.
    pub stall: Option<Stall>,
    feedback_sent: u64,
    /// Light mode: bytes written, and deliveries that differed from the file.
    written: u64,
    mismatched: u64,
}

/// A receiver's process stalled for `length` every `period`, from
/// `phase` on (the oversubscribed host of the lab: more processes than
/// cores, each waiting for its time slice).
#[derive(Debug, Clone, Copy)]
pub struct Stall {
    pub period: Duration,
    pub length: Duration,
    pub phase: Duration,
    /// On waking, the process runs its due timers and sends before it
    /// reads what queued meanwhile (a driver that does not drain its
    /// sockets first: manyfold's before issue 22, whose `tokio::select!`
    /// took the timer or one batch); else it reads everything first.
    pub timers_first: bool,
}

impl Stall {
    /// When a stall under way at `elapsed` ends, if one is.
    fn until(&self, elapsed: Duration) -> Option<Duration> {
        let since = elapsed.checked_sub(self.phase)?;
        let period = self.period.max(Duration::from_micros(1));
        let into = Duration::from_nanos((since.as_nanos() % period.as_nanos()) as u64);
        (into < self.length).then(|| elapsed + (self.length - into))
    }
}

/// The session: sender, receivers, network.
#[derive(Debug)]
pub struct McastWorld {
    clock: Clock,
    net: Network,
    queue: EventQueue<(SocketAddr, SocketAddr, Vec<u8>)>,
    pub group: SocketAddr,
    pub sender_addr: SocketAddr,
    pub sender: McastSender,
    pub receivers: Vec<McReceiverNode>,
    pub sender_events: Vec<(Duration, SenderEvent)>,
    file_seed: u64,
    file_len: u64,
    buf: Vec<u8>,
    /// Datagrams each node sent: (from, to, bytes) counts by kind.
    pub sent_by_sender: u64,
    pub sent_bytes_by_sender: u64,
    /// Loss before the group fans out: a multicast datagram of the sender
    /// is lost for every receiver at once with this probability.
    pub upstream_loss: f64,
    /// Bottlenecks shared by some receivers (by index): a multicast
    /// datagram of the sender is lost for all of one bottleneck's
    /// receivers at once with its probability (a lossy router or link
    /// upstream of them), independently of the others'.
    pub shared_loss: Vec<(Vec<usize>, f64)>,
    rng: rand_chacha::ChaCha8Rng,
    /// A stream of unknown length (spec §16.6): bytes/s the source yields.
    stream_rate: Option<f64>,
    stream_done: bool,
    /// Every datagram put on the wire (from, to, bytes), once, before any
    /// loss, when set: what an eavesdropper on the group would see.
    pub capture: Option<Vec<(SocketAddr, SocketAddr, Vec<u8>)>>,
    /// A receiver's multicast reaches only the sender and the receivers of
    /// its own network (LANs joined by a router that forwards the group
    /// only from the sender), instead of every node.
    pub lan_scoped_feedback: bool,
    /// Light mode ([`McastWorld::light`]): the file once, every delivery
    /// compared with it instead of stored per receiver.
    expected: Option<Vec<u8>>,
    /// Receiver index by address.
    index: std::collections::HashMap<SocketAddr, usize>,
}

impl McastWorld {
    /// A session of a `file_len`-byte file from `sender_addr` to `group`,
    /// with the given receivers (each with its network id and config).
    pub fn new(
        seed: u64,
        mut sender_cfg: SenderConfig,
        file_len: u64,
        group: SocketAddr,
        sender_addr: SocketAddr,
        receivers: Vec<(SocketAddr, ReceiverConfig)>,
    ) -> Self {
        let clock = Clock::new();
        sender_cfg.seed = seed;
        let info = Announcement {
            size: Some(file_len),
            block: 0,
            artp_max_us: 0,
            repair_interval_ms: 0,
            fec_k: 0,
            hash: Some([1; 32]),
            name: "file.bin".into(),
        };
        let sender = McastSender::new(sender_cfg, group, info, clock.now());
        let index = receivers.iter().enumerate().map(|(i, (addr, _))| (*addr, i)).collect();
        let receivers = receivers
            .into_iter()
            .map(|(addr, cfg)| McReceiverNode {
                addr,
                network: cfg.network,
                stall: None,
                written: 0,
                mismatched: 0,
                engine: McastReceiver::new(cfg, group),
                file: vec![0; file_len as usize],
                complete_at: None,
                verified: None,
                ended: None,
                events: Vec::new(),
                running: true,
                feedback_sent: 0,
            })
            .collect();
        McastWorld {
            clock,
            net: Network::new(seed),
            queue: EventQueue::new(),
            group,
            sender_addr,
            sender,
            receivers,
            sender_events: Vec::new(),
            file_seed: seed,
            file_len,
            buf: vec![0; 65_536],
            sent_by_sender: 0,
            sent_bytes_by_sender: 0,
            upstream_loss: 0.0,
            shared_loss: Vec::new(),
            rng: rand::SeedableRng::seed_from_u64(seed ^ 0x5eed),
            stream_rate: None,
            stream_done: false,
            capture: None,
            lan_scoped_feedback: false,
            expected: None,
            index,
        }
    }

    /// The same world for many receivers: the file is kept once, each
    /// delivery (and each block parity rebuilds) is compared with it where
    /// it lands, and a receiver's file is exact when every byte was written
    /// once and none differed. Parity reads back what a receiver stored
    /// from the file, which its deliveries matched.
    pub fn light(mut self) -> Self {
        let mut want = vec![0u8; self.file_len as usize];
        pattern(self.file_seed, 0, &mut want);
        self.expected = Some(want);
        for r in &mut self.receivers {
            r.file = Vec::new();
        }
        self
    }

    /// Puts `data` on the wire from `from` to `to` now, as an attacker
    /// would (through the links like any datagram).
    pub fn inject(&mut self, from: SocketAddr, to: SocketAddr, data: Vec<u8>) {
        let mut arrivals = Vec::new();
        let now = self.clock.now();
        self.send(now, from, to, data, &mut arrivals);
    }

    /// The same session with the file given as a stream of unknown length
    /// that yields `rate` bytes per second of virtual time, its size and
    /// hash told to the sender only at its end.
    pub fn new_stream(
        seed: u64,
        sender_cfg: SenderConfig,
        file_len: u64,
        rate: f64,
        group: SocketAddr,
        sender_addr: SocketAddr,
        receivers: Vec<(SocketAddr, ReceiverConfig)>,
    ) -> Self {
        let mut w = McastWorld::new(seed, sender_cfg.clone(), file_len, group, sender_addr, receivers);
        let mut cfg = sender_cfg;
        cfg.seed = seed;
        let info = Announcement {
            size: None,
            block: 0,
            artp_max_us: 0,
            repair_interval_ms: 0,
            fec_k: 0,
            hash: None,
            name: "stream".into(),
        };
        w.sender = McastSender::new(cfg, group, info, w.clock.now());
        w.stream_rate = Some(rate);
        w
    }

    fn feed_stream(&mut self) {
        let Some(rate) = self.stream_rate else { return };
        if self.stream_done {
            return;
        }
        let available = ((self.clock.elapsed().as_secs_f64() * rate) as u64).min(self.file_len);
        if available == self.file_len {
            self.sender.finish_source(self.file_len, [1; 32]);
            self.stream_done = true;
        } else {
            self.sender.extend(available);
        }
    }

    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    pub fn elapsed(&self) -> Duration {
        self.clock.elapsed()
    }

    /// The link `from` -> `to`, one direction.
    pub fn set_link(&mut self, from: SocketAddr, to: SocketAddr, config: LinkConfig) {
        self.net.set_link(from, to, config);
    }

    pub fn set_default_link(&mut self, config: LinkConfig) {
        self.net.set_default_link(config);
    }

    pub fn network(&self) -> &Network {
        &self.net
    }

    /// The sender's windows so far.
    pub fn windows(&self) -> Vec<WindowRecord> {
        self.sender_events
            .iter()
            .filter_map(|(_, e)| if let SenderEvent::Window(w) = e { Some(*w) } else { None })
            .collect()
    }

    /// Feedback datagrams (everything a receiver sent) of receiver `i`.
    pub fn feedback_sent(&self, i: usize) -> u64 {
        self.receivers[i].feedback_sent
    }

    fn transmit_all(&mut self) {
        let now = self.clock.now();
        let (seed, len) = (self.file_seed, self.file_len);
        let mut source = |offset: u64, out: &mut [u8]| {
            let n = (len.saturating_sub(offset) as usize).min(out.len());
            pattern(seed, offset, &mut out[..n]);
            n
        };
        let mut arrivals = Vec::new();
        while let Some(t) = self.sender.poll_transmit(now, &mut self.buf, &mut source) {
            self.sent_by_sender += 1;
            self.sent_bytes_by_sender += t.size as u64;
            let data = self.buf[..t.size].to_vec();
            self.send(now, self.sender_addr, t.destination, data, &mut arrivals);
        }
        while let Some(e) = self.sender.poll_event() {
            self.sender_events.push((self.clock.elapsed(), e));
        }
        let elapsed = self.clock.elapsed();
        for i in 0..self.receivers.len() {
            if !self.receivers[i].running || self.stalled_until(i, elapsed).is_some() {
                continue;
            }
            // Twice: what its events make it send (a finished file's
            // report, spec §16.1 step 4) goes at once, as a driver sends it.
            for _ in 0..2 {
                while let Some(t) = self.receivers[i].engine.poll_transmit(now, &mut self.buf) {
                    self.receivers[i].feedback_sent += 1;
                    let data = self.buf[..t.size].to_vec();
                    let from = self.receivers[i].addr;
                    self.send(now, from, t.destination, data, &mut arrivals);
                }
                self.drain_receiver_events(i);
            }
        }
    }

    fn drain_receiver_events(&mut self, i: usize) {
        let elapsed = self.clock.elapsed();
        let (seed, len) = (self.file_seed, self.file_len);
        let expected = self.expected.as_ref();
        let r = &mut self.receivers[i];
        while let Some(e) = r.engine.poll_event() {
            match &e {
                ReceiverEvent::Complete => {
                    r.complete_at = Some(elapsed);
                    let ok = if expected.is_some() {
                        r.mismatched == 0 && r.written == len
                    } else {
                        let mut want = vec![0u8; len as usize];
                        pattern(seed, 0, &mut want);
                        want == r.file
                    };
                    r.verified = Some(ok);
                    r.engine.finish(ok);
                }
                ReceiverEvent::Confirmed | ReceiverEvent::Ended { .. } | ReceiverEvent::SenderLost => {
                    r.ended = Some(e.clone());
                }
                _ => {}
            }
            r.events.push(e);
        }
    }

    fn send(&mut self, now: Instant, from: SocketAddr, to: SocketAddr, data: Vec<u8>, arrivals: &mut Vec<Arrival>) {
        if let Some(c) = self.capture.as_mut() {
            c.push((from, to, data.clone()));
        }
        if to == self.group && from == self.sender_addr && self.upstream_loss > 0.0 {
            use rand::Rng;
            if self.rng.gen_bool(self.upstream_loss) {
                return;
            }
        }
        let mut cut: Vec<usize> = Vec::new();
        if to == self.group && from == self.sender_addr {
            use rand::Rng;
            for (members, p) in &self.shared_loss {
                if self.rng.gen_bool(p.clamp(0.0, 1.0)) {
                    cut.extend(members);
                }
            }
        }
        let cut: Vec<SocketAddr> = cut.iter().filter_map(|&i| self.receivers.get(i).map(|r| r.addr)).collect();
        let targets: Vec<SocketAddr> = if to == self.group {
            let scope = match self.index.get(&from) {
                Some(&i) if self.lan_scoped_feedback => Some(self.receivers[i].network),
                _ => None,
            };
            std::iter::once(self.sender_addr)
                .chain(
                    self.receivers.iter().filter(|r| r.running && scope.is_none_or(|n| n == r.network)).map(|r| r.addr),
                )
                .filter(|&a| a != from && !cut.contains(&a))
                .collect()
        } else {
            vec![to]
        };
        for target in targets {
            arrivals.clear();
            self.net.transmit(now, from, target, data.clone(), arrivals);
            for a in arrivals.drain(..) {
                self.queue.push(a.at, (from, target, a.data));
            }
        }
    }

    /// When receiver `i`'s stall under way at `elapsed` ends, if it is stalled.
    fn stalled_until(&self, i: usize, elapsed: Duration) -> Option<Duration> {
        self.receivers[i].stall.and_then(|s| s.until(elapsed))
    }

    fn next_time(&self) -> Option<Instant> {
        let mut t = self.queue.peek_time();
        let mut take = |x: Option<Instant>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |t: Instant| t.min(x)));
            }
        };
        take(self.sender.poll_timeout());
        let (now, elapsed) = (self.clock.now(), self.clock.elapsed());
        for (i, r) in self.receivers.iter().enumerate().filter(|(_, r)| r.running) {
            // A stalled receiver wakes at its stall's end at the soonest.
            let wake = self.stalled_until(i, elapsed).map(|end| now + (end - elapsed));
            take(r.engine.poll_timeout().map(|d| wake.map_or(d, |w| d.max(w))));
        }
        t
    }

    /// One step: deliver what is due, fire timers, send. Returns false
    /// when nothing is left to happen.
    pub fn step(&mut self) -> bool {
        self.feed_stream();
        self.transmit_all();
        let next = self.next_time();
        // A stream still growing is a reason to wake up (every millisecond).
        let next = match (next, self.stream_rate.is_some() && !self.stream_done) {
            (n, true) => Some(n.map_or(self.clock.now() + Duration::from_millis(1), |t| {
                t.min(self.clock.now() + Duration::from_millis(1))
            })),
            (n, false) => n,
        };
        let Some(t) = next else { return false };
        let t = t.max(self.clock.now());
        self.clock.advance_to(t);
        let elapsed = self.clock.elapsed();
        while let Some((_, (from, to, mut data))) = self.queue.pop_due(t) {
            let stalled = self.index.get(&to).and_then(|&i| self.stalled_until(i, elapsed));
            if let Some(end) = stalled {
                // Read once the process runs again, in arrival order (after
                // its timers and sends, with `timers_first`).
                let late = self.index.get(&to).and_then(|&i| self.receivers[i].stall).is_some_and(|s| s.timers_first);
                let read_at = t + (end - elapsed) + if late { Duration::from_micros(1) } else { Duration::ZERO };
                self.queue.push(read_at, (from, to, data));
                continue;
            }
            if to == self.sender_addr {
                self.sender.handle_datagram(t, from, &data);
            } else if let Some(&i) = self.index.get(&to).filter(|&&i| self.receivers[i].running) {
                let r = &mut self.receivers[i];
                let expected = self.expected.as_deref();
                if let Some(d) = r.engine.handle_datagram(t, from, &mut data) {
                    r.land(expected, d.offset, &data[d.payload]);
                }
                // Blocks that parity made whole (spec §16.9).
                let McReceiverNode { engine, file, .. } = r;
                let stored: &[u8] = expected.unwrap_or(file);
                let rebuilt = engine.decode(&mut |offset, out| {
                    let at = (offset as usize).min(stored.len());
                    let n = out.len().min(stored.len() - at);
                    out[..n].copy_from_slice(&stored[at..at + n]);
                    n
                });
                for (offset, bytes) in rebuilt {
                    r.land(expected, offset, &bytes);
                }
            }
        }
        if self.sender.poll_timeout().is_some_and(|d| d <= t) {
            self.sender.handle_timeout(t);
        }
        for r in self.receivers.iter_mut().filter(|r| r.running && r.stall.is_none_or(|s| s.until(elapsed).is_none())) {
            if r.engine.poll_timeout().is_some_and(|d| d <= t) {
                r.engine.handle_timeout(t);
            }
        }
        true
    }

    /// Runs until `cond` holds or `max` of virtual time has passed.
    pub fn run_until(&mut self, mut cond: impl FnMut(&mut McastWorld) -> bool, max: Duration) -> bool {
        let end = self.clock.now() + max;
        loop {
            if cond(self) {
                return true;
            }
            if self.clock.now() >= end || !self.step() {
                return cond(self);
            }
        }
    }

    /// Runs until the sender is done (or `max`).
    pub fn run_to_end(&mut self, max: Duration) -> bool {
        // The sender's last packets (its ENDs, a confirmation) may still be
        // queued on a slow link when it is done: they are delivered too.
        self.run_until(|w| w.sender.is_done(), max) && self.run_until(|w| w.queue.is_empty(), max)
    }
}

impl McReceiverNode {
    /// Bytes delivered at `offset`: stored, or in light mode compared with
    /// the file where they land.
    fn land(&mut self, expected: Option<&[u8]>, offset: u64, bytes: &[u8]) {
        match expected {
            None => write_at(&mut self.file, offset, bytes),
            Some(want) => {
                let at = (offset as usize).min(want.len());
                let end = (at + bytes.len()).min(want.len());
                self.written += (end - at) as u64;
                self.mismatched += u64::from(want[at..end] != bytes[..end - at] || end - at != bytes.len());
            }
        }
    }
}

fn write_at(file: &mut [u8], offset: u64, bytes: &[u8]) {
    let at = (offset as usize).min(file.len());
    let end = (at + bytes.len()).min(file.len());
    file[at..end].copy_from_slice(&bytes[..end - at]);
}
