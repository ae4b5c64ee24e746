//! The processes of one `rate` run (hidden subcommands): a sender that
//! sends messages on its [`Schedule`] — as fast as the transport takes
//! them, or paced at an offered rate — and then one end marker per
//! stream, and a receiver that checks every message ([`Checker`]) and
//! measures the rate ([`Meter`]) and, for paced runs, each message's
//! one-way latency.
//!
//! manyfold: one connection on the library's async API (multi-thread
//! tokio runtime, as the CLI runs it), `send_message_with` per message,
//! `recv_message` per message; or, with `--batch N`, `send_messages` of
//! every message due (up to N) and `recv_messages_into` one reused batch; kernel TCP: one connection with
//! TCP_NODELAY, one `write` per length-prefixed message, the receiver
//! reading through a 1 MiB buffer.
//!
//! Output, on stdout, `key=value` words: the receiver prints
//! `delivered=N rate_mps=R span_s=S` and, for paced runs,
//! `p50_ns= p99_ns= p999_ns= max_ns=`; the sender prints `sent=N` and, for
//! manyfold, its connection's counters.

use std::io::{BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

use super::pace::{precise_sleep, LoopClock, Meter, Schedule};
use super::wire::{self, fill, fill_end, now_ns, slot, Checker, HEADER, PREFIX};
use crate::loopback::mf::{check_protection, connect_mf, encrypt};
use crate::stats;

/// How the messages travel.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Manyfold,
    Tcp,
}

/// What both ends of a run are told.
#[derive(clap::Args, Debug, Clone)]
pub struct End {
    #[arg(long, value_enum)]
    pub transport: Transport,
    /// manyfold streams; message k goes on stream k mod streams.
    #[arg(long, default_value_t = 1)]
    pub streams: u16,
    /// manyfold: every message unordered (delivered as soon as whole).
    #[arg(long)]
    pub unordered: bool,
    /// manyfold: protect the connection (spec §19, the lab's key).
    #[arg(long)]
    pub encrypt: bool,
    /// manyfold: the batch API, up to this many messages per call (one
    /// stream, ordered); 0: one message per call.
    #[arg(long, default_value_t = 0)]
    pub batch: usize,
    /// manyfold: the connection's flush delay in µs (spec §5.7); 0 sends
    /// at once, the library's default.
    #[arg(long, default_value_t = 0)]
    pub flush_delay_us: u64,
    /// Bytes per message, header included.
    #[arg(long)]
    pub size: usize,
    /// Seconds of sending.
    #[arg(long)]
    pub secs: f64,
    /// Offered messages per second; 0 = as fast as the transport takes them.
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    /// Seconds from the first arrival before the receiver starts counting.
    #[arg(long, default_value_t = 0.0)]
    pub warmup: f64,
    #[arg(long)]
    pub seed: u64,
    /// Seconds either end may take in all before it gives up.
    #[arg(long)]
    pub limit: f64,
}

impl End {
    fn check(&self) -> Result<()> {
        ensure!(self.size >= HEADER, "--size must be at least {HEADER} bytes");
        ensure!(self.streams > 0, "--streams must be positive");
        ensure!(self.secs.is_finite() && self.secs > 0.0, "--secs must be positive");
        ensure!(self.rate.is_finite() && self.rate >= 0.0, "--rate must be 0 or positive");
        ensure!(self.transport == Transport::Manyfold || self.streams == 1, "the TCP row has one stream");
        ensure!(
            self.batch == 0 || (self.transport == Transport::Manyfold && self.streams == 1 && !self.unordered),
            "--batch is for manyfold on one stream, ordered"
        );
        ensure!(self.transport == Transport::Manyfold || self.flush_delay_us == 0, "--flush-delay-us is for manyfold");
        Ok(())
    }

    fn deadline(&self) -> Instant {
        Instant::now() + Duration::from_secs_f64(self.limit.max(1.0))
    }

    /// Paced runs keep every message's latency.
    fn paced(&self) -> bool {
        self.rate > 0.0
    }

    fn config(&self) -> manyfold::Config {
        let mut config = manyfold::Config::default();
        if self.encrypt {
            encrypt(&mut config);
        }
        config.endpoint.connection.flush_delay = Duration::from_micros(self.flush_delay_us);
        config
    }
}

/// Messages of stream `s` among the first `k` of a run on `streams`.
fn sent_on(k: u64, s: u16, streams: u16) -> u64 {
    let n = streams as u64;
    k / n + u64::from((s as u64) < k % n)
}

pub fn send(to: SocketAddr, e: &End) -> Result<()> {
    e.check()?;
    precise_sleep();
    match e.transport {
        Transport::Manyfold => mf_send(to, e),
        Transport::Tcp => tcp_send(to, e),
    }
}

pub fn recv(listen: SocketAddr, e: &End) -> Result<()> {
    e.check()?;
    let mut checker = Checker::new(e.seed, e.size, e.streams, !e.unordered, e.paced());
    let mut meter = Meter::new(e.warmup);
    match e.transport {
        Transport::Manyfold => mf_recv(listen, e, &mut checker, &mut meter)?,
        Transport::Tcp => tcp_recv(listen, e, &mut checker, &mut meter)?,
    }
    let mut out = format!(
        "delivered={} announced={} rate_mps={:.1} span_s={:.4}",
        checker.delivered,
        checker.announced(),
        meter.rate(),
        meter.span_secs()
    );
    if let Some(l) = &mut checker.latencies_ns {
        l.sort_unstable();
        let at = |q: f64| stats::rank(l.len(), q).map_or(0, |r| l[r - 1]);
        out += &format!(" p50_ns={} p99_ns={} p999_ns={} max_ns={}", at(50.0), at(99.0), at(99.9), at(100.0));
    }
    println!("{out}");
    Ok(())
}

fn mf_send(to: SocketAddr, e: &End) -> Result<()> {
    let rt = crate::runtime()?;
    let limit = Duration::from_secs_f64(e.limit.max(1.0));
    rt.block_on(async {
        let endpoint = manyfold::Endpoint::bind("127.0.0.1:0".parse()?, e.config()).await?;
        let mut conn = connect_mf(&endpoint, to).await?;
        check_protection(&conn, e.encrypt)?;
        let streams = conn.streams();
        let opts = manyfold::MessageOptions { unordered: e.unordered, ..Default::default() };
        let mut msg = vec![0u8; e.size];
        let schedule = Schedule::new(e.rate, e.secs);
        let mut clock = LoopClock::new(schedule.is_paced());
        let mut k = 0u64;
        if e.batch > 0 {
            k = mf_send_batches(&streams, e, &schedule).await?;
        }
        while let (0, Some(due)) = (e.batch, schedule.wait_with(k, &mut clock)) {
            let (s, seq) = slot(k, e.streams);
            fill(e.seed, s, seq, due, &mut msg);
            streams.send_message_with(s, &msg, opts).await.with_context(|| format!("sending message {k}"))?;
            k += 1;
        }
        for s in 0..e.streams {
            fill_end(e.seed, s, sent_on(k, s, e.streams), &mut msg);
            streams.send_message_with(s, &msg, opts).await.context("sending an end marker")?;
        }
        // Everything acknowledged; a failure here is the receiver's to
        // report (it checks what arrived).
        match tokio::time::timeout(limit, conn.close()).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => eprintln!("note: closing: {err}"),
            Err(_) => eprintln!("note: the close was not acknowledged within {limit:?}"),
        }
        let st = conn.stats();
        println!(
            "sent={k} packets_sent={} packets_received={} retransmissions={} lost_packets={} rto_expiries={} srtt_us={:.0} \
             held_ms: application={} peer_window={} congestion={} pacing={}",
            st.packets_sent,
            st.packets_received,
            st.retransmissions,
            st.lost_packets,
            st.rto_expiries,
            st.srtt.as_secs_f64() * 1e6,
            st.limited.application.as_millis(),
            st.limited.peer_window.as_millis(),
            st.limited.congestion.as_millis(),
            st.limited.pacing.as_millis()
        );
        let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.shutdown_within(Duration::from_secs(1))).await;
        Ok(())
    })
}

/// The batch row's sending: every message due now, up to `--batch`, in
/// one `send_messages` call of borrowed slices of one buffer. Returns how
/// many were sent.
async fn mf_send_batches(streams: &manyfold::Streams, e: &End, schedule: &Schedule) -> Result<u64> {
    let mut buf = vec![0u8; e.size * e.batch];
    let mut k = 0u64;
    while let Some(due) = schedule.wait(k) {
        let mut n = 0;
        fill(e.seed, 0, k, due, &mut buf[..e.size]);
        n += 1;
        // One clock reading for the rest of the batch (a reading per
        // message was 7% of this row's CPU at 32 bytes); unpaced, `wait`
        // has just read it.
        let now = if schedule.is_paced() { now_ns() } else { due };
        while n < e.batch {
            let Some(due) = schedule.due_at(k + n as u64, now) else { break };
            fill(e.seed, 0, k + n as u64, due, &mut buf[n * e.size..(n + 1) * e.size]);
            n += 1;
        }
        streams
            .send_messages(0, buf[..n * e.size].chunks(e.size))
            .await
            .with_context(|| format!("sending messages {k}..{}", k + n as u64))?;
        k += n as u64;
    }
    Ok(k)
}

/// `fut`'s output if it is ready at its first poll.
fn poll_once<F: std::future::Future>(fut: F) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => Some(v),
        std::task::Poll::Pending => None,
    }
}

fn mf_recv(listen: SocketAddr, e: &End, checker: &mut Checker, meter: &mut Meter) -> Result<()> {
    let give_up = tokio::time::Instant::from_std(e.deadline());
    crate::runtime()?.block_on(async {
        let endpoint =
            manyfold::Endpoint::bind(listen, e.config()).await.with_context(|| format!("binding {listen}"))?;
        endpoint.listen();
        let conn = tokio::time::timeout_at(give_up, endpoint.accept())
            .await
            .context("no sender connected in time")?
            .context("the endpoint closed before a sender connected")?;
        check_protection(&conn, e.encrypt)?;
        let streams = conn.streams();
        if e.batch > 0 {
            mf_recv_batches(&streams, give_up, checker, meter).await?;
        }
        let mut clock = LoopClock::new(checker.latencies_ns.is_some());
        while !checker.done() {
            // A message already there is taken without arming a timer (a
            // reader without a deadline pays none); otherwise wait for one
            // until the run's deadline.
            let next = match poll_once(streams.recv_message()) {
                Some(r) => Ok(r),
                None => tokio::time::timeout_at(give_up, streams.recv_message()).await,
            };
            match next {
                Err(_) => bail!("out of time after {} messages", checker.delivered),
                Ok(Ok(Some((on, manyfold::StreamItem::Message(m))))) => {
                    let now = clock.now();
                    if checker.take(&m, on, now)? {
                        meter.tick(now);
                    }
                }
                // The sender's close finishes every stream: fine after the
                // stream's end marker, while others' may still be on their way.
                Ok(Ok(Some((on, manyfold::StreamItem::Finished)))) if checker.ended(on) => {}
                Ok(Ok(Some((on, other)))) => {
                    bail!("stream {on}: {other:?} after {} messages, before the end marker", checker.delivered)
                }
                Ok(Ok(None)) => bail!("the connection ended after {} messages", checker.delivered),
                Ok(Err(err)) => return Err(err).context("receiving"),
            }
        }
        // Until the sender's FIN, so that its close completes (bounded).
        let linger = tokio::time::Instant::now() + Duration::from_secs(5);
        while let Ok(Ok(Some(_))) = tokio::time::timeout_at(linger.min(give_up), streams.recv_message()).await {}
        drop(streams);
        drop(conn);
        let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.shutdown_within(Duration::from_secs(1))).await;
        Ok(())
    })
}

/// The batch row's receiving: `recv_messages_into` one reused batch
/// until every stream's end marker was checked.
async fn mf_recv_batches(
    streams: &manyfold::Streams,
    give_up: tokio::time::Instant,
    checker: &mut Checker,
    meter: &mut Meter,
) -> Result<()> {
    let mut batch = manyfold::MessageBatch::with_capacity(1024, 64 << 10);
    while !checker.done() {
        let n = match tokio::time::timeout_at(give_up, streams.recv_messages_into(&mut batch, 1024)).await {
            Err(_) => bail!("out of time after {} messages", checker.delivered),
            Ok(r) => r.context("receiving")?,
        };
        ensure!(n > 0, "the connection ended after {} messages", checker.delivered);
        let now = now_ns();
        for (on, item) in batch.iter() {
            match item {
                manyfold::BatchItem::Message(m) => {
                    if checker.take(m, on, now)? {
                        meter.tick(now);
                    }
                }
                manyfold::BatchItem::Finished if checker.ended(on) => {}
                other => bail!("stream {on}: {other:?} after {} messages, before the end marker", checker.delivered),
            }
        }
    }
    Ok(())
}

fn tcp_send(to: SocketAddr, e: &End) -> Result<()> {
    let mut s = connect_retry(to)?;
    s.set_nodelay(true)?;
    let mut msg = vec![0u8; e.size];
    let mut frame = Vec::with_capacity(PREFIX + e.size);
    let schedule = Schedule::new(e.rate, e.secs);
    let mut clock = LoopClock::new(schedule.is_paced());
    let mut k = 0u64;
    while let Some(due) = schedule.wait_with(k, &mut clock) {
        fill(e.seed, 0, k, due, &mut msg);
        wire::frame(&msg, &mut frame);
        s.write_all(&frame).with_context(|| format!("sending message {k}"))?;
        k += 1;
    }
    fill_end(e.seed, 0, k, &mut msg);
    wire::frame(&msg, &mut frame);
    s.write_all(&frame).context("sending the end marker")?;
    s.shutdown(std::net::Shutdown::Write)?;
    // Until the receiver, which has checked everything, hangs up.
    s.set_read_timeout(Some(Duration::from_secs_f64(e.limit.max(1.0))))?;
    let _ = s.read(&mut [0u8; 16]);
    println!("sent={k}");
    Ok(())
}

fn connect_retry(to: SocketAddr) -> Result<TcpStream> {
    for _ in 0..200 {
        if let Ok(s) = TcpStream::connect(to) {
            return Ok(s);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    bail!("no TCP listener at {to} after 2 s")
}

fn tcp_recv(listen: SocketAddr, e: &End, checker: &mut Checker, meter: &mut Meter) -> Result<()> {
    let deadline = e.deadline();
    let listener = TcpListener::bind(listen).with_context(|| format!("binding {listen}"))?;
    listener.set_nonblocking(true)?;
    let s = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(err) if err.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(err) if err.kind() == ErrorKind::WouldBlock => bail!("no sender connected in time"),
            Err(err) => return Err(err).context("accepting"),
        }
    };
    s.set_nonblocking(false)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1))))?;
    let mut r = BufReader::with_capacity(1 << 20, &s);
    let mut msg = vec![0u8; e.size];
    let mut clock = LoopClock::new(checker.latencies_ns.is_some());
    while !checker.done() {
        let mut prefix = [0u8; PREFIX];
        r.read_exact(&mut prefix).with_context(|| format!("reading after {} messages", checker.delivered))?;
        let len = u32::from_be_bytes(prefix) as usize;
        ensure!(len == e.size, "a frame of {len} bytes, expected {}", e.size);
        r.read_exact(&mut msg).with_context(|| format!("reading after {} messages", checker.delivered))?;
        let now = clock.now();
        if checker.take(&msg, 0, now)? {
            meter.tick(now);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_markers_count_each_streams_share() {
        assert_eq!((0..8).map(|s| sent_on(19, s, 8)).collect::<Vec<_>>(), [3, 3, 3, 2, 2, 2, 2, 2]);
        assert_eq!(sent_on(19, 0, 1), 19);
        assert_eq!(sent_on(0, 3, 8), 0);
    }
}
