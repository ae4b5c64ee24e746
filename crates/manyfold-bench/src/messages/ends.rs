//! The processes of one `messages` run (hidden subcommands, run inside the
//! lab's namespaces): a sender that sends the [`Workload`] on its schedule
//! and a receiver that checks every message and prints its latency; and
//! the link's RTT probe (a UDP echo and its pinger).
//!
//! Both senders keep time the same way: the main thread sleeps until a
//! message is due (`std::thread::sleep`), then hands it to the transport
//! (the manyfold sender through `block_on` on the library's multi-thread
//! runtime, whose workers run the driver meanwhile). The receivers stamp
//! a message when the transport returns it whole.
//!
//! Output, on stdout, `key=value` words: the receiver prints one line
//! `arrival stream=S seq=N latency_ns=L` per message, then
//! `delivered=N complete=0|1`; the sender prints `sent=N late_max_ms=X`
//! and, for manyfold, how many messages found the congestion window full
//! and its connection's counters.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use socket2::SockAddr;

use super::wire::{self, now_ns, Tracker, Workload, FRAME};

/// Between the connection's set-up and the first message's due time.
pub(crate) const LEAD: Duration = Duration::from_millis(200);
/// How long a receiver with every message waits for the sender's close.
const LINGER: Duration = Duration::from_secs(10);

/// How the messages travel.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// manyfold, logical stream s on manyfold stream s.
    Manyfold,
    /// manyfold, every message on stream 0.
    ManyfoldOne,
    /// manyfold, logical stream s on manyfold stream s, each message
    /// unordered (delivered as soon as it is whole).
    ManyfoldUnordered,
    /// One TCP connection, messages framed (also the KCP row's ends).
    Tcp,
}

impl Kind {
    /// The transport stream a message of logical stream `s` travels on.
    fn stream_of(self, s: u16) -> u16 {
        match self {
            Kind::Manyfold | Kind::ManyfoldUnordered | Kind::Tcp => s,
            Kind::ManyfoldOne => 0,
        }
    }

    fn ordered(self) -> bool {
        self != Kind::ManyfoldUnordered
    }
}

/// Sleeps until `due_ns` of CLOCK_MONOTONIC; returns how late it woke, ns.
fn wait_until(due_ns: u64) -> u64 {
    let now = now_ns();
    if due_ns > now {
        std::thread::sleep(Duration::from_nanos(due_ns - now));
    }
    now_ns().saturating_sub(due_ns)
}

/// Runs `send` for each message on schedule; returns the worst lateness, ms.
fn schedule(w: &Workload, mut send: impl FnMut(u32, &[u8]) -> Result<()>) -> Result<f64> {
    let t0 = now_ns() + LEAD.as_nanos() as u64;
    let mut msg = vec![0u8; w.size as usize];
    let mut late_max = 0u64;
    for k in 0..w.count {
        let due = t0 + k as u64 * w.period_ns();
        late_max = late_max.max(wait_until(due));
        w.fill(k, due, &mut msg);
        send(k, &msg).with_context(|| format!("sending message {k}"))?;
    }
    Ok(late_max as f64 / 1e6)
}

/// What both ends of a run are told.
#[derive(clap::Args, Debug, Clone)]
pub struct End {
    #[arg(long, value_enum)]
    pub kind: Kind,
    /// manyfold controller or kernel TCP congestion control.
    #[arg(long)]
    pub cc: String,
    /// Seconds: the receiver reports what it has by then (from its
    /// start-up); the sender's close, or its wait for the receiver's
    /// answer, may take as long.
    #[arg(long)]
    pub limit: f64,
    #[command(flatten)]
    pub workload: Workload,
    /// manyfold rows: write this end's qlog trace (spec §18) into this
    /// directory.
    #[arg(long)]
    pub qlog: Option<PathBuf>,
}

impl End {
    fn limit(&self) -> Duration {
        Duration::from_secs_f64(self.limit.max(0.0))
    }

    /// The manyfold endpoint's configuration: the controller, and the
    /// qlog directory when one was asked for.
    fn mf_config(&self) -> Result<manyfold::Config> {
        let mut config = crate::loopback::mf::config_for(&self.cc)?;
        config.qlog_dir = self.qlog.clone();
        Ok(config)
    }
}

pub fn send(to: SocketAddr, e: &End) -> Result<()> {
    let w = &e.workload;
    w.check()?;
    match e.kind {
        Kind::Manyfold | Kind::ManyfoldOne | Kind::ManyfoldUnordered => {
            mf_send(e.kind, to, e.mf_config()?, w, e.limit())
        }
        Kind::Tcp => tcp_send(to, &e.cc, w, e.limit()),
    }
}

pub fn recv(listen: SocketAddr, e: &End) -> Result<()> {
    let w = &e.workload;
    w.check()?;
    let deadline = Instant::now() + e.limit();
    let t = match e.kind {
        Kind::Manyfold | Kind::ManyfoldOne | Kind::ManyfoldUnordered => {
            mf_recv(e.kind, listen, e.mf_config()?, w, deadline)?
        }
        Kind::Tcp => tcp_recv(listen, &e.cc, w, deadline)?,
    };
    let mut out = String::new();
    for a in &t.arrivals {
        out += &format!("arrival stream={} seq={} latency_ns={}\n", a.stream, a.seq, a.latency_ns);
    }
    out += &format!("delivered={} complete={}\n", t.arrivals.len(), u8::from(t.done()));
    std::io::stdout().write_all(out.as_bytes())?;
    Ok(())
}

fn mf_send(kind: Kind, to: SocketAddr, config: manyfold::Config, w: &Workload, limit: Duration) -> Result<()> {
    let rt = crate::runtime()?;
    let endpoint = rt.block_on(manyfold::Endpoint::bind("0.0.0.0:0".parse()?, config))?;
    let mut conn = rt.block_on(endpoint.connect(to)).with_context(|| format!("connecting to {to}"))?;
    let streams = conn.streams();
    // Messages that found the congestion window full when queued: they
    // wait for acks before they can leave.
    let mut window_full = 0u32;
    let late = schedule(w, |k, msg| {
        let s = conn.stats();
        window_full += u32::from(s.unacked_bytes >= s.cwnd);
        let stream = kind.stream_of(w.slot(k).0);
        let opts = manyfold::MessageOptions { unordered: !kind.ordered(), ..Default::default() };
        Ok(rt.block_on(streams.send_message_with(stream, msg.to_vec(), opts))?)
    })?;
    // Everything acknowledged, FIN included; a failure here is the
    // receiver's to report (it counts what arrived).
    match rt.block_on(async { tokio::time::timeout(limit, conn.close()).await }) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("note: closing: {e}"),
        Err(_) => eprintln!("note: the close was not acknowledged within {limit:?}"),
    }
    let s = conn.stats();
    println!(
        "sent={} late_max_ms={late:.3} window_full={window_full} retransmissions={} lost_packets={} spurious_losses={} rto_expiries={} srtt_ms={:.1} min_rtt_ms={:.1}",
        w.count,
        s.retransmissions,
        s.lost_packets,
        s.spurious_losses,
        s.rto_expiries,
        s.srtt.as_secs_f64() * 1e3,
        s.min_rtt.as_secs_f64() * 1e3
    );
    let shutdown = endpoint.shutdown_within(Duration::from_secs(1));
    let _ = rt.block_on(async { tokio::time::timeout(Duration::from_secs(2), shutdown).await });
    Ok(())
}

fn mf_recv(
    kind: Kind,
    listen: SocketAddr,
    config: manyfold::Config,
    w: &Workload,
    deadline: Instant,
) -> Result<Tracker> {
    let give_up = tokio::time::Instant::from_std(deadline);
    crate::runtime()?.block_on(async {
        let endpoint = manyfold::Endpoint::bind(listen, config).await.with_context(|| format!("binding {listen}"))?;
        endpoint.listen();
        let conn = tokio::time::timeout_at(give_up, endpoint.accept())
            .await
            .context("no sender connected in time")?
            .context("the endpoint closed before a sender connected")?;
        let streams = conn.streams();
        let mut t = Tracker::new(*w, kind.ordered());
        while !t.done() {
            match tokio::time::timeout_at(give_up, streams.recv_message()).await {
                Err(_) => break, // out of time: the report says how many arrived
                Ok(Ok(Some((on, manyfold::StreamItem::Message(m))))) => {
                    t.take(&m, now_ns(), on, |s| kind.stream_of(s))?;
                }
                // The sender's close ends every stream: fine for a stream
                // whose messages are all in, while others' may still be on
                // their way; anywhere else it is a message lost.
                Ok(Ok(Some((on, manyfold::StreamItem::Finished))))
                    if (0..w.streams).all(|s| kind.stream_of(s) != on || t.stream_done(s)) => {}
                Ok(Ok(Some((on, other)))) => bail!("stream {on}: {other:?} where a message was due"),
                Ok(Ok(None)) => bail!("the connection ended after {} of {} messages", t.arrivals.len(), w.count),
                Ok(Err(e)) => return Err(e).context("receiving"),
            }
        }
        if t.done() {
            // Until the sender's FIN, so that its close completes.
            let linger = tokio::time::Instant::now() + LINGER;
            while let Ok(Ok(Some(_))) = tokio::time::timeout_at(linger.min(give_up), streams.recv_message()).await {}
        }
        drop(streams);
        drop(conn);
        let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.shutdown_within(Duration::from_secs(1))).await;
        Ok(t)
    })
}

fn tcp_send(to: SocketAddr, cc: &str, w: &Workload, limit: Duration) -> Result<()> {
    let mut s = tcp_connect(to, cc)?;
    s.set_nodelay(true)?;
    let mut frame = Vec::with_capacity(FRAME + w.size as usize);
    let late = schedule(w, |k, msg| {
        wire::frame(w.slot(k).0, msg, &mut frame);
        Ok(s.write_all(&frame)?)
    })?;
    // No half-close: kcptun, which carries the KCP row, has none. The
    // receiver answers once it has every message.
    s.set_read_timeout(Some(limit))?;
    let mut ok = [0u8; 2];
    match s.read_exact(&mut ok) {
        Ok(()) if &ok == b"ok" => {}
        Ok(()) => eprintln!("note: the receiver answered {ok:?}"),
        Err(e) => eprintln!("note: no answer from the receiver: {e}"),
    }
    println!("sent={} late_max_ms={late:.3}", w.count);
    Ok(())
}

fn tcp_connect(to: SocketAddr, cc: &str) -> Result<TcpStream> {
    for _ in 0..200 {
        let s = crate::loopback::tcp::socket(cc)?;
        if s.connect(&SockAddr::from(to)).is_ok() {
            return Ok(s.into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    bail!("no TCP listener at {to} after 2 s")
}

fn tcp_recv(listen: SocketAddr, cc: &str, w: &Workload, deadline: Instant) -> Result<Tracker> {
    let mut s = crate::loopback::tcp::accept_by(listen, cc, deadline)?;
    let mut t = Tracker::new(*w, true);
    let mut msg = vec![0u8; w.size as usize];
    while !t.done() {
        let mut head = [0u8; FRAME];
        if !read_by(&mut s, &mut head, deadline)? {
            break;
        }
        let (stream, len) = wire::parse_frame(head);
        if len != msg.len() {
            bail!("a frame of {len} bytes, expected {}", msg.len());
        }
        if !read_by(&mut s, &mut msg, deadline)? {
            break;
        }
        t.take(&msg, now_ns(), stream, |s| s)?;
    }
    if t.done() {
        s.write_all(b"ok")?;
        // Let the answer leave before the connection closes: wait
        // (bounded) for the sender to hang up first.
        s.set_read_timeout(Some(LINGER))?;
        let _ = s.read(&mut [0u8; 16]);
    }
    Ok(t)
}

/// Fills `buf` from `s`; false if `deadline` passed first.
fn read_by(s: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> Result<bool> {
    let mut at = 0;
    while at < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        s.set_read_timeout(Some(left))?;
        match s.read(&mut buf[at..]) {
            Ok(0) => bail!("the connection ended mid-run"),
            Ok(n) => at += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
            Err(e) => return Err(e).context("reading"),
        }
    }
    Ok(true)
}

/// The RTT probe's echo: returns every datagram to its sender until
/// `secs` have passed.
pub fn echo(listen: SocketAddr, secs: f64) -> Result<()> {
    let sock = UdpSocket::bind(listen).with_context(|| format!("binding {listen}"))?;
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut buf = [0u8; 64];
    while let Some(left) = end.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) {
        sock.set_read_timeout(Some(left))?;
        if let Ok((n, from)) = sock.recv_from(&mut buf) {
            let _ = sock.send_to(&buf[..n], from);
        }
    }
    Ok(())
}

/// The RTT probe: `count` stamped datagrams, one every `interval_ms`, to
/// the echo; prints `sent=N received=M` and every round trip as
/// `rtt_ns=R` words.
pub fn ping(to: SocketAddr, count: u32, interval_ms: f64) -> Result<()> {
    let sock = UdpSocket::bind("0.0.0.0:0")?;
    sock.connect(to)?;
    let rx = sock.try_clone()?;
    let period = (interval_ms * 1e6) as u64;
    let listen_for = Duration::from_nanos(period * count as u64) + Duration::from_secs(2);
    let receiver = std::thread::spawn(move || -> Vec<u64> {
        let end = Instant::now() + listen_for;
        let mut rtts = Vec::new();
        let mut buf = [0u8; 64];
        while let Some(left) = end.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) {
            if rx.set_read_timeout(Some(left)).is_err() {
                break;
            }
            if let Ok(8) = rx.recv(&mut buf) {
                let sent = u64::from_be_bytes(buf[..8].try_into().expect("8 bytes"));
                rtts.push(now_ns().saturating_sub(sent));
            }
        }
        rtts
    });
    let t0 = now_ns();
    for k in 0..count {
        wait_until(t0 + k as u64 * period);
        let _ = sock.send(&now_ns().to_be_bytes());
    }
    let rtts = receiver.join().map_err(|_| anyhow::anyhow!("the probe's receiver panicked"))?;
    let words: Vec<String> = rtts.iter().map(|r| format!("rtt_ns={r}")).collect();
    println!("sent={count} received={} {}", rtts.len(), words.join(" "));
    Ok(())
}
