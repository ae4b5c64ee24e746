//! The I/O driver: one tokio task per endpoint that owns the socket and
//! moves datagrams between it and the engine, in the engine's calling
//! order (manyfold-proto crate docs; spec §2):
//!
//! 1. receive batches of datagrams (quinn-udp, GRO buffers split by stride)
//!    and feed each to `handle_datagram`;
//! 2. `handle_timeout`, then send what waits: a transmit the socket refused
//!    earlier, held (fault-injected) datagrams that are due, then
//!    `poll_transmit` until it has nothing (GSO batches when the kernel has GSO;
//!    single datagrams, for any peers, gathered into `sendmmsg` batches);
//! 3. `poll_event` until empty, turning events into waker calls;
//! 4. sleep until the socket is readable (or writable, when a send was
//!    refused), an application command notifies us, or the next deadline.
//!
//! Application commands run on the application's tasks under the same lock
//! and notify this task. The driver is the only code that reads the clock
//! for the engine's inputs and outputs. Buffers are allocated once; the hot
//! path allocates nothing per packet.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use manyfold_proto::wire::ErrorCode;
use manyfold_proto::Transmit;

use crate::batch::SendBatch;
use crate::icmp;
use crate::inline::InlineWork;
use crate::qlog::QlogWriter;
use crate::shared::{Inner, Phase, Shared};
use crate::socket::{canonical, RecvBatch, UdpIo};
use crate::trace::{Direction, PacketTrace};

/// Receive calls per iteration before the driver sends and yields, so that a
/// flood of input cannot starve output.
const RECV_ROUNDS: usize = 8;
/// Bytes received per iteration before the driver sends and yields: it
/// stops after the receive call that brings the iteration to this or
/// more (one call of 32 datagrams of 64 KiB, spec §3.7, holds 2 MiB).
/// Acks sent and readers woken only after up to 16 MiB held a loopback
/// sender's window full, and on a current-thread runtime, where the
/// reader runs only when the driver yields, the receive window too: 1 GiB
/// took 0.76 s (median of five) on one thread before this bound and
/// 0.63–0.77 s in four sets after (issue 20, RESULTS §28).
const RECV_BYTES: usize = 1 << 20;
/// Cost of the `poll_transmit` calls of one iteration before the driver
/// releases the lock and yields: a GSO batch costs 4, a single datagram 1,
/// so at most ~1 MiB (16 GSO batches) or 64 small datagrams go per lock
/// hold, and application calls wait well under a millisecond.
const TRANSMIT_BUDGET: usize = 64;
/// What a GSO batch costs of [`TRANSMIT_BUDGET`].
const GSO_COST: usize = 4;
/// Largest single datagram copied into the send batch. A larger one (a
/// path MTU search's 64 KiB datagrams on loopback) goes in its own call
/// from where the engine built it: its copy would cost more than the
/// system call that joining the batch saves (issue 20 item 3; it was 4% of
/// a bulk sender's CPU).
const BATCH_COPY_MAX: usize = 4096;

/// How often a closing endpoint looks whether its connections have finished.
pub(crate) const IDLE_POLL: Duration = Duration::from_millis(10);

/// The clock of the driver (tokio's, so that paused-time tests work too).
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// What one iteration left to do.
struct Step {
    /// Next time something is due (engine timer, held datagram, shutdown deadline).
    deadline: Option<Instant>,
    /// The socket refused a send: wait for it to become writable.
    blocked: bool,
    /// The transmit budget ran out: go round again after yielding.
    busy: bool,
    /// A GSO batch or large datagram waits in `tx_pending` to be sent
    /// once the lock is released ([`Driver::send_unlocked`]), at `now`.
    send: Option<Instant>,
}

#[derive(Debug)]
pub(crate) struct Driver {
    shared: Arc<Shared>,
    io: UdpIo,
    recv: RecvBatch,
    /// Filled by `poll_transmit`; holds a refused transmit until it is sent.
    tx_buf: Vec<u8>,
    /// A transmit the socket refused, still in `tx_buf`, with the payload
    /// the engine left out of it (spec §7.2).
    tx_pending: Option<(Transmit, Option<Bytes>)>,
    /// Single datagrams waiting for one `sendmmsg` (issue 21).
    batch: SendBatch,
    max_datagram: usize,
    trace: PacketTrace,
    /// Writes the connections' qlog traces (spec §18), when asked for.
    qlog: Option<QlogWriter>,
    /// Where ICMP errors' quotes of our datagrams are read (spec §6.7).
    icmp_buf: Box<[u8]>,
    icmp_control: Vec<u8>,
    /// The inline sessions' reused buffers (spec §15.4).
    inline: InlineWork,
    /// The loop ended: the endpoint shut down or has nothing left. A
    /// driver dropped before that resets its peers ([`Drop`]).
    finished: bool,
}

impl Driver {
    pub(crate) fn new(
        shared: Arc<Shared>,
        io: UdpIo,
        max_datagram: usize,
        max_accepted: usize,
        trace: PacketTrace,
        qlog: Option<QlogWriter>,
    ) -> Self {
        // A GRO buffer holds at most 64 KiB (one coalesced UDP payload);
        // without GRO a slot needs the largest datagram we accept (spec §3.7).
        let slot_len = if io.gro_segments() > 1 { 1 << 16 } else { max_accepted.max(2048) };
        let tx_capacity = io.max_segments(max_datagram) * max_datagram;
        Driver {
            shared,
            recv: RecvBatch::new(slot_len),
            tx_buf: Vec::with_capacity(tx_capacity),
            tx_pending: None,
            batch: SendBatch::new(max_datagram),
            max_datagram,
            trace,
            qlog,
            icmp_buf: vec![0u8; 2048].into_boxed_slice(),
            icmp_control: icmp::control_buffer(),
            inline: InlineWork::default(),
            finished: false,
            io,
        }
    }

    pub(crate) async fn run(mut self) {
        let shared = self.shared.clone();
        let _stop = StopGuard(shared.clone());
        let sleep = tokio::time::sleep(Duration::from_secs(3600));
        tokio::pin!(sleep);
        loop {
            let mut more_input = false;
            let mut received = 0;
            for round in 0..RECV_ROUNDS {
                match self.recv.read(&self.io) {
                    Ok(n) => received += self.handle_batch(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    // An ICMP error surfaces once as the socket's pending
                    // error; the error queue holds the whole of it.
                    Err(e) if is_icmp_error(&e) => continue,
                    Err(e) => {
                        shared.lock().driver_stats.recv_errors += 1;
                        tracing::debug!(error = %e, "UDP receive failed");
                        break;
                    }
                }
                more_input = round + 1 == RECV_ROUNDS || received >= RECV_BYTES;
                if more_input {
                    break;
                }
            }
            self.drain_icmp();
            if shared.inline_on() {
                // Requests complete now are answered before the transmit
                // step, so that the reply carries their ack (spec §15.4).
                self.inline.run(&shared);
            }

            let step = self.step(&mut shared.lock());
            let Some(step) = step else {
                // What the last step left to send goes before the socket
                // closes (an abort's RST, the last acks).
                if matches!(self.tx_pending, Some((_, None))) {
                    self.send_unlocked(now());
                }
                break;
            };
            if let Some(now) = step.send {
                self.send_unlocked(now);
                // Yield only once tokio's cooperative budget is spent, not
                // after every batch: each `yield_now` on the multi-thread
                // runtime put this task in the stealable queue and woke the
                // idle worker to take it, a wake-up and a move between
                // cores per GSO batch. Loopback at 1,452-byte datagrams:
                // 934–948 → 1,027–1,072 MB/s, sender CPU 0.77 → 0.63–0.67
                // s/GB (RESULTS §42). The budget still yields in time for
                // the application's task when data keeps coming.
                tokio::task::coop::consume_budget().await;
                continue;
            }
            if step.busy || more_input {
                tokio::task::yield_now().await;
                continue;
            }
            if let Some(d) = step.deadline {
                sleep.as_mut().reset(tokio::time::Instant::from_std(d));
            }
            tokio::select! {
                _ = shared.notified() => {}
                _ = self.io.readable() => {}
                _ = self.io.error_ready() => {}
                _ = self.io.writable(), if step.blocked => {}
                _ = &mut sleep, if step.deadline.is_some() => {}
            }
        }
        // The socket closes before the stop guard wakes `shutdown`'s
        // waiters: once it returns, the port is free.
        self.finished = true;
        drop(self);
    }

    /// Feeds the ICMP errors the kernel queued for our datagrams to the
    /// engine (spec §6.7). Reads only when the socket reports an error,
    /// and takes the lock only then.
    fn drain_icmp(&mut self) {
        let Driver { shared, io, icmp_buf, icmp_control, .. } = self;
        let mut inner = None;
        let now = now();
        let read = io.try_error(|socket| {
            icmp::drain(socket, icmp_buf, icmp_control, |to, kind, quote| {
                let inner = inner.get_or_insert_with(|| shared.lock());
                inner.engine.handle_icmp(now, canonical(to), kind, quote);
            })
        });
        if let Ok((_, other)) = read {
            inner.get_or_insert_with(|| shared.lock()).driver_stats.other_socket_errors += other as u64;
        }
    }

    /// Feeds the datagrams of one receive call to the engine; returns the
    /// bytes they held.
    fn handle_batch(&mut self, n: usize) -> usize {
        let mut bytes = 0;
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        let now = now();
        inner.clock = now;
        for i in 0..n {
            // spec §7.2: a datagram that fills its slot goes over whole, and
            // the engine keeps large in-order data as slices of it (not
            // under fault injection, which may repeat a datagram).
            if inner.faults.is_none() {
                if let Some(datagram) = self.recv.take_owned(i) {
                    let from = self.recv.source(i);
                    inner.driver_stats.datagrams_received += 1;
                    bytes += datagram.len();
                    self.trace.log(now, Direction::Recv, from, &datagram);
                    inner.engine.handle_datagram_owned(now, from, datagram);
                    continue;
                }
            }
            let slot = self.recv.slot(i);
            let from = slot.from;
            if slot.coalesced() {
                inner.driver_stats.gro_receives += 1;
            }
            for datagram in slot.datagrams() {
                inner.driver_stats.datagrams_received += 1;
                bytes += datagram.len();
                let copies = match inner.faults.as_mut() {
                    Some(f) => {
                        let fate = f.on_receive(now, from, datagram);
                        if fate.dropped {
                            self.trace.log(now, Direction::DropRecv, from, datagram);
                        }
                        fate.now
                    }
                    None => 1,
                };
                for _ in 0..copies {
                    self.trace.log(now, Direction::Recv, from, datagram);
                    inner.engine.handle_datagram(now, from, datagram);
                }
            }
        }
        bytes
    }

    /// Timers, output and events, under one lock. `None`: the driver is done.
    fn step(&mut self, inner: &mut Inner) -> Option<Step> {
        let now = now();
        inner.clock = now;
        inner.engine.handle_timeout(now);

        // What the socket refused last time goes first, in the order made.
        let mut blocked = self.flush_batch(inner, now);
        if let (Some((t, tail)), false) = (self.tx_pending.take(), blocked) {
            blocked = self.send_plain(inner, now, t, tail.as_ref());
            if blocked {
                self.tx_pending = Some((t, tail));
            }
        }
        if !blocked {
            blocked = self.flush_held(inner, now, now);
        }
        let mut busy = false;
        let mut send = None;
        if !blocked {
            let mut cost = 0;
            loop {
                if cost >= TRANSMIT_BUDGET {
                    busy = true;
                    break;
                }
                let max = self.io.max_segments(self.max_datagram);
                // Fault injection takes datagrams whole; otherwise a large
                // payload may stay out of `tx_buf` (spec §7.2).
                let next = match inner.faults {
                    Some(_) => inner.engine.poll_transmit(now, max, &mut self.tx_buf).map(|t| (t, None)),
                    None => inner.engine.poll_transmit_gather(now, max, &mut self.tx_buf),
                };
                let Some((t, tail)) = next else { break };
                if inner.faults.is_some() {
                    cost += GSO_COST;
                    blocked = self.send_faulty(inner, now, t);
                } else if tail.is_none() && t.size <= BATCH_COPY_MAX && t.segment_size.is_none_or(|s| s >= t.size) {
                    // One small datagram: it joins the batch for one sendmmsg.
                    cost += 1;
                    self.batch.push(t.destination, &self.tx_buf[..t.size]);
                    if self.batch.is_full() {
                        blocked = self.flush_batch(inner, now);
                    }
                } else if tail.is_none() {
                    // A GSO batch, or one large datagram, in `tx_buf`: after
                    // the batch (the order made), it is sent once the lock
                    // is released. Its system call is most of a bulk
                    // sender's driver time, and under the lock every
                    // application call waited for it: a 32-byte message
                    // writer blocked on the lock 6,000 times a second
                    // (RESULTS §32).
                    blocked = self.flush_batch(inner, now);
                    self.tx_pending = Some((t, tail));
                    if !blocked {
                        send = Some(now);
                    }
                    break;
                } else {
                    // One datagram gathered from `tx_buf` and a kept slice.
                    cost += 1;
                    // The batch leaves first, to keep the order made.
                    blocked = self.flush_batch(inner, now) || self.send_plain(inner, now, t, tail.as_ref());
                    if blocked {
                        self.tx_pending = Some((t, tail));
                    }
                }
                if blocked {
                    break;
                }
            }
            if !blocked {
                blocked = self.flush_batch(inner, now);
            }
        }
        while let Some((h, ev)) = inner.engine.poll_event() {
            inner.dispatch(h, ev);
        }
        // Inline sessions that moved are looked at without waiting for input.
        busy |= inner.inline.as_ref().is_some_and(|s| s.has_ready());
        while let Some((g, ev)) = inner.engine.poll_group_event() {
            inner.dispatch_group(g, ev);
        }
        self.write_qlog(inner);

        let mut deadline = inner.engine.poll_timeout();
        match inner.phase {
            Phase::ShuttingDown { deadline: limit } => {
                if inner.all_closed(now) || now >= limit {
                    inner.abort_all(now);
                    // Best effort: let the RSTs and last acks out before the socket closes,
                    // those the fault emulation still delays first, early (an interrupted
                    // receiver's RST held by `--delay` would otherwise be lost with the
                    // socket, and its peer learn of the exit only from ICMP).
                    self.send_all_at_exit(inner, now);
                    self.write_qlog(inner);
                    return None;
                }
                // TIME-WAIT lingering ends on no timer of the engine's: look again soon.
                deadline = min_deadline(deadline, Some(limit.min(now + IDLE_POLL)));
            }
            Phase::Stopped => return None,
            Phase::Running => {}
        }
        if inner.endpoint_refs == 0 && inner.conns.is_empty() && inner.engine.connection_count() == 0 {
            return None;
        }
        if let Some(f) = inner.faults.as_ref() {
            deadline = min_deadline(deadline, f.next_release());
        }
        Some(Step { deadline, blocked, busy, send })
    }

    /// Everything left to send, at the endpoint's exit, best effort: the
    /// batch, a pending transmit, every held datagram (also those not yet
    /// due) and whatever the engine still has, straight to the socket
    /// (the runtime's reactor may be gone already).
    fn send_all_at_exit(&mut self, inner: &mut Inner, now: Instant) {
        self.flush_batch(inner, now);
        if let Some((t, tail)) = self.tx_pending.take() {
            self.send_plain(inner, now, t, tail.as_ref());
        }
        self.flush_held(inner, now, now + Duration::from_secs(86_400));
        while let Some(t) = inner.engine.poll_transmit(now, 1, &mut self.tx_buf) {
            let _ = self.io.send(t.destination, &self.tx_buf[..t.size], None);
        }
    }

    /// Sends the GSO batch or large datagram that [`Driver::step`] left in
    /// `tx_buf` (and `tx_pending`) without holding the lock; the lock is
    /// taken again only to count it. A refusal or failure puts it back in
    /// `tx_pending`, where the next step sends it under the lock with the
    /// usual handling (waiting for the socket, GSO fallback, ICMP).
    fn send_unlocked(&mut self, now: Instant) {
        let Some((t, None)) = self.tx_pending.take() else {
            unreachable!("step leaves a plain transmit");
        };
        let contents = &self.tx_buf[..t.size];
        if self.io.send(t.destination, contents, t.segment_size).is_err() {
            self.tx_pending = Some((t, None));
            return;
        }
        Self::count_sent(&mut self.shared.lock().driver_stats, &mut self.trace, now, &t, contents);
    }

    /// Counts and traces the datagrams of `t` (`contents`, in segments of
    /// `t.segment_size`) that the socket took.
    fn count_sent(
        stats: &mut crate::DriverStats,
        trace: &mut PacketTrace,
        now: Instant,
        t: &Transmit,
        contents: &[u8],
    ) {
        let segment = t.segment_size.unwrap_or(t.size).max(1);
        let count = t.size.div_ceil(segment) as u64;
        stats.datagrams_sent += count;
        stats.gso_sends += u64::from(count > 1);
        for datagram in contents.chunks(segment) {
            trace.log(now, Direction::Send, t.destination, datagram);
        }
    }

    /// Writes the connections' trace events (spec §18) to their files.
    fn write_qlog(&mut self, inner: &mut Inner) {
        if let Some(q) = self.qlog.as_mut() {
            while let Some((h, ev)) = inner.engine.poll_qlog() {
                q.write(h, &ev);
            }
        }
    }

    /// Sends the batched single datagrams (issue 21). Returns true if the
    /// socket refused some for now (they wait in the batch).
    fn flush_batch(&mut self, inner: &mut Inner, now: Instant) -> bool {
        if self.batch.is_empty() {
            return false;
        }
        let stats = &mut inner.driver_stats;
        let trace = &mut self.trace;
        let mut multi = (0, 0);
        let r = self.batch.flush(
            &self.io,
            |to, d| trace.log(now, Direction::Send, to, d),
            |to, e| tracing::debug!(error = %e, destination = %to, "UDP send failed"),
            |n| multi = (multi.0 + 1, multi.1 + n as u64),
        );
        let (sent, failed) = self.batch.take_counts();
        stats.datagrams_sent += sent;
        stats.send_errors += failed;
        stats.mmsg_sends += multi.0;
        stats.mmsg_datagrams += multi.1;
        match r {
            Ok(()) => false,
            Err(_) => {
                stats.send_would_block += 1;
                true
            }
        }
    }

    /// Sends the transmit in `tx_buf` as is. Returns true if the socket
    /// refused it for now (the caller keeps it and waits for writability).
    fn send_plain(&mut self, inner: &mut Inner, now: Instant, t: Transmit, tail: Option<&Bytes>) -> bool {
        if let Some(tail) = tail {
            return self.send_gathered(inner, now, t, tail);
        }
        let contents = &self.tx_buf[..t.size];
        let segment = t.segment_size.unwrap_or(t.size).max(1);
        match self.io.send(t.destination, contents, t.segment_size) {
            Ok(()) => {
                Self::count_sent(&mut inner.driver_stats, &mut self.trace, now, &t, contents);
                false
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                inner.driver_stats.send_would_block += 1;
                true
            }
            Err(e) if t.segment_size.is_some() && self.io.gso_disabled() => {
                // The kernel or NIC refused segmentation offload; quinn-udp
                // has switched it off. Resend this batch one datagram at a time.
                tracing::debug!(error = %e, "GSO send failed; falling back to one datagram per send");
                for datagram in contents.chunks(segment) {
                    match self.io.send(t.destination, datagram, None) {
                        Ok(()) => {
                            inner.driver_stats.datagrams_sent += 1;
                            self.trace.log(now, Direction::Send, t.destination, datagram);
                        }
                        // Lost like any datagram; recovery retransmits it.
                        Err(e) => inner.send_failed(now, t.destination, datagram, &e),
                    }
                }
                false
            }
            Err(e) => {
                tracing::debug!(error = %e, destination = %t.destination, "UDP send failed");
                let first = &contents[..segment.min(contents.len())];
                inner.send_failed(now, t.destination, first, &e);
                false
            }
        }
    }

    /// Sends one datagram that is `tx_buf`'s head then `tail` (spec §7.2).
    /// Returns whether the socket was full (the caller keeps it pending).
    fn send_gathered(&mut self, inner: &mut Inner, now: Instant, t: Transmit, tail: &Bytes) -> bool {
        let head = &self.tx_buf[..t.size - tail.len()];
        match self.io.send_gathered(t.destination, head, tail) {
            Ok(()) => {
                inner.driver_stats.datagrams_sent += 1;
                if self.trace.is_on() {
                    self.trace.log(now, Direction::Send, t.destination, &[head, &tail[..]].concat());
                }
                false
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                inner.driver_stats.send_would_block += 1;
                true
            }
            Err(e) => {
                tracing::debug!(error = %e, destination = %t.destination, "UDP send failed");
                inner.send_failed(now, t.destination, &[head, &tail[..]].concat(), &e);
                false
            }
        }
    }

    /// Sends the transmit in `tx_buf` through fault injection, datagram by
    /// datagram. Whatever the socket refuses waits in the delay queue.
    fn send_faulty(&mut self, inner: &mut Inner, now: Instant, t: Transmit) -> bool {
        let Inner { faults, driver_stats, engine, .. } = inner;
        let Some(faults) = faults.as_mut() else { return false };
        let segment = t.segment_size.unwrap_or(t.size).max(1);
        let mut blocked = false;
        for datagram in self.tx_buf[..t.size].chunks(segment) {
            let fate = faults.on_send(now, t.destination, datagram);
            if fate.dropped {
                self.trace.log(now, Direction::DropSend, t.destination, datagram);
            }
            for _ in 0..fate.now {
                // Queue behind datagrams already waiting, to keep their order.
                if blocked || faults.has_queued_due(now) {
                    faults.hold(now, t.destination, datagram);
                    continue;
                }
                match self.io.send(t.destination, datagram, None) {
                    Ok(()) => {
                        driver_stats.datagrams_sent += 1;
                        self.trace.log(now, Direction::Send, t.destination, datagram);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        driver_stats.send_would_block += 1;
                        blocked = true;
                        faults.hold(now, t.destination, datagram);
                    }
                    Err(e) => send_failed(engine, driver_stats, now, t.destination, datagram, &e),
                }
            }
        }
        blocked
    }

    /// Releases held datagrams due by `until` (`now`, or later at the
    /// exit): received ones to the engine, sent ones to the socket.
    /// Returns true if the socket refused one.
    fn flush_held(&mut self, inner: &mut Inner, now: Instant, until: Instant) -> bool {
        let Inner { faults, driver_stats, engine, .. } = inner;
        let Some(faults) = faults.as_mut() else { return false };
        while let Some(due) = faults.peek_due(until) {
            let (destination, datagram) = (due.peer, due.data);
            if due.inbound {
                self.trace.log(now, Direction::Recv, destination, datagram);
                engine.handle_datagram(now, destination, datagram);
                faults.pop();
                continue;
            }
            match self.io.send(destination, datagram, None) {
                Ok(()) => {
                    driver_stats.datagrams_sent += 1;
                    self.trace.log(now, Direction::Send, destination, datagram);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    driver_stats.send_would_block += 1;
                    return true;
                }
                Err(e) => send_failed(engine, driver_stats, now, destination, datagram, &e),
            }
            faults.pop();
        }
        false
    }
}

/// A datagram the socket refused for good (not `WouldBlock`): counted, and
/// when the kernel found it larger than the interface allows (EMSGSIZE:
/// the socket sets DF, so a path MTU probe too large for the first hop
/// fails here), the engine hears of it at once (spec §3.7) instead of
/// waiting a round trip to call the probe lost.
fn send_failed(
    engine: &mut manyfold_proto::Endpoint,
    stats: &mut crate::DriverStats,
    now: Instant,
    destination: std::net::SocketAddr,
    datagram: &[u8],
    e: &io::Error,
) {
    if crate::socket::is_too_large(e) && engine.handle_too_large(now, destination, datagram) {
        stats.probes_refused += 1;
    } else {
        stats.send_errors += 1;
    }
}

impl Inner {
    fn send_failed(&mut self, now: Instant, destination: std::net::SocketAddr, datagram: &[u8], e: &io::Error) {
        send_failed(&mut self.engine, &mut self.driver_stats, now, destination, datagram, e);
    }
}

/// The errors a receive call returns for an ICMP error (IP_RECVERR sets
/// the socket's pending error as well as queueing it).
fn is_icmp_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::HostUnreachable | io::ErrorKind::NetworkUnreachable
    )
}

fn min_deadline(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// spec §8.3: a driver dropped before its loop ended was dropped with its
/// runtime, which is shutting down: a program returned from `main` (with
/// an error, maybe) or dropped its runtime with connections open. Its
/// peers hear of it now, by a RST each (code APPLICATION), instead of
/// from their keep-alive or stall timeout half a minute later: what a
/// kernel does for a TCP socket whose process exits. Best effort, and
/// not while unwinding from a panic in the engine.
impl Drop for Driver {
    fn drop(&mut self) {
        if self.finished || std::thread::panicking() {
            return;
        }
        let shared = self.shared.clone();
        let mut inner = shared.lock();
        let now = now();
        inner.abort_everything(now, ErrorCode::APPLICATION);
        self.send_all_at_exit(&mut inner, now);
    }
}

/// Marks the endpoint stopped however the driver task ends (return, panic
/// in the engine, runtime shutdown), so that no handle waits forever.
struct StopGuard(Arc<Shared>);

impl Drop for StopGuard {
    fn drop(&mut self) {
        self.0.lock().stopped();
    }
}
