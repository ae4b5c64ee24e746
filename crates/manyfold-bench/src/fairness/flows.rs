//! The processes of one fairness flow (`fairness send` / `fairness recv`,
//! hidden subcommands run inside the lab's namespaces): a sender that
//! writes the endless [`Stream`] from the run's start until its end, and a
//! receiver that verifies every byte and counts them per interval.
//!
//! Both flows of a run are given the same start, an absolute time
//! (nanoseconds since the Unix epoch: the namespaces share the host's
//! clock), about a second after the processes were launched, so that
//! process start-up does not stagger them. Each process maps that time
//! onto its monotonic clock once at start-up; everything after uses the
//! monotonic clock, so a clock step during the run cannot bend the series.
//!
//! At the run's end both kinds of sender stop at once and abandon what
//! they still hold (manyfold: the process exits without a graceful close;
//! TCP: `SO_LINGER` 0, a reset), so that neither flow keeps the link busy
//! into the next run. The receiver keeps reading for [`GRACE`] after the
//! end so that it is never the one that breaks the connection while a
//! sender is still inside its measured time; what arrives then is reported
//! as `after_end` and belongs to no figure.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use socket2::SockAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::stream::{Bins, Stream, Verifier, CHUNK};

/// How long a receiver keeps reading after the run's end.
pub const GRACE: Duration = Duration::from_secs(1);
/// A stream that ends this long before the run's end is a failure, not
/// the normal race between the sender's stop and the receiver's.
const EARLY_END: Duration = Duration::from_secs(1);
/// How often blocked TCP reads and writes look at the clock.
const POLL: Duration = Duration::from_millis(50);

/// The run's clock, shared by both flows: when it starts, how long it
/// lasts, the interval of the receiver's counts.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct Timing {
    /// The run's start, nanoseconds since the Unix epoch.
    #[arg(long)]
    pub start_ns: u64,
    /// The run's length in seconds.
    #[arg(long)]
    pub secs: f64,
    /// The receiver's counting interval in seconds.
    #[arg(long)]
    pub interval: f64,
    /// Seed of this flow's stream.
    #[arg(long)]
    pub seed: u64,
}

impl Timing {
    /// The start as an instant of this process's monotonic clock.
    fn start(&self) -> Instant {
        let start = UNIX_EPOCH + Duration::from_nanos(self.start_ns);
        let (sys, mono) = (SystemTime::now(), Instant::now());
        match start.duration_since(sys) {
            Ok(ahead) => mono + ahead,
            Err(behind) => mono.checked_sub(behind.duration()).unwrap_or(mono),
        }
    }

    fn length(&self) -> Duration {
        Duration::from_secs_f64(self.secs)
    }

    fn bins(&self) -> Bins {
        let n = (self.secs / self.interval).round().max(1.0) as usize;
        Bins::new(Duration::from_secs_f64(self.interval), n)
    }
}

/// The transport of a flow process.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Manyfold,
    Tcp,
}

/// What a receiver saw, printed after its interval lines.
fn receiver_summary(v: &Verifier, bins: &Bins, late_connect_ms: f64) -> String {
    format!(
        "{{\"verified\":{},\"counted\":{},\"after_end\":{},\"accepted_ms\":{late_connect_ms:.1}}}",
        v.offset(),
        bins.counts.iter().sum::<u64>(),
        bins.after_end
    )
}

/// Receives one flow until the run's end (plus [`GRACE`]), verifying every
/// byte; prints the interval counts as JSON lines, then a summary line.
pub fn recv(kind: Kind, listen: SocketAddr, cc: &str, t: &Timing) -> Result<()> {
    let start = t.start();
    let end = start + t.length();
    let (bins, verifier, accepted) = match kind {
        Kind::Manyfold => mf_recv(listen, cc, t, start, end)?,
        Kind::Tcp => tcp_recv(listen, cc, t, start, end)?,
    };
    print!("{}", bins.json_lines());
    println!("{}", receiver_summary(&verifier, &bins, accepted.as_secs_f64() * 1e3));
    Ok(())
}

/// Counts and verifies `data`, which arrived at `now`.
fn take(data: &[u8], now: Instant, start: Instant, v: &mut Verifier, bins: &mut Bins) -> Result<()> {
    v.check(data).map_err(|at| anyhow::anyhow!("wrong byte at stream offset {at}: the flow delivered corrupt data"))?;
    bins.add(now.saturating_duration_since(start), data.len() as u64);
    Ok(())
}

/// The end of the stream (or a reset) at `now`: fine near the run's end,
/// a failure well before it.
fn ended(now: Instant, end: Instant, how: &str) -> Result<()> {
    if now + EARLY_END < end {
        bail!("the stream {how} {:.1} s before the run's end", (end - now).as_secs_f64());
    }
    Ok(())
}

fn mf_recv(
    listen: SocketAddr,
    cc: &str,
    t: &Timing,
    start: Instant,
    end: Instant,
) -> Result<(Bins, Verifier, Duration)> {
    let give_up = tokio::time::Instant::from_std(end + GRACE);
    crate::runtime()?.block_on(async {
        let endpoint = manyfold::Endpoint::bind(listen, crate::loopback::mf::config_for(cc)?)
            .await
            .with_context(|| format!("binding {listen}"))?;
        endpoint.listen();
        let mut conn = tokio::time::timeout_at(give_up, endpoint.accept())
            .await
            .context("no sender connected before the run's end")?
            .context("the endpoint closed before a sender connected")?;
        let accepted = Instant::now().saturating_duration_since(start);
        let (mut v, mut bins) = (Verifier::new(t.seed), t.bins());
        let mut buf = vec![0u8; CHUNK];
        loop {
            match tokio::time::timeout_at(give_up, conn.read(&mut buf)).await {
                Err(_) => break, // the grace after the run's end is over
                Ok(Ok(0)) => {
                    ended(Instant::now(), end, "ended")?;
                    break;
                }
                Ok(Ok(n)) => take(&buf[..n], Instant::now(), start, &mut v, &mut bins)?,
                Ok(Err(e)) => {
                    ended(Instant::now(), end, "broke").with_context(|| format!("reading: {e}"))?;
                    break;
                }
            }
        }
        // Not a graceful close: the sender is gone or about to go.
        drop(conn);
        let _ = tokio::time::timeout(Duration::from_millis(500), endpoint.shutdown_within(Duration::from_millis(200)))
            .await;
        Ok((bins, v, accepted))
    })
}

fn tcp_recv(
    listen: SocketAddr,
    cc: &str,
    t: &Timing,
    start: Instant,
    end: Instant,
) -> Result<(Bins, Verifier, Duration)> {
    let give_up = end + GRACE;
    // The receiver's congestion control only matters for its acks, but it
    // is set all the same.
    let mut s = crate::loopback::tcp::accept_by(listen, cc, give_up)?;
    let accepted = Instant::now().saturating_duration_since(start);
    s.set_read_timeout(Some(POLL))?;
    let (mut v, mut bins) = (Verifier::new(t.seed), t.bins());
    let mut buf = vec![0u8; CHUNK];
    while Instant::now() < give_up {
        match s.read(&mut buf) {
            Ok(0) => {
                ended(Instant::now(), end, "ended")?;
                break;
            }
            Ok(n) => take(&buf[..n], Instant::now(), start, &mut v, &mut bins)?,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
            Err(e) => {
                ended(Instant::now(), end, "broke").with_context(|| format!("reading: {e}"))?;
                break;
            }
        }
    }
    Ok((bins, v, accepted))
}

/// Sends one flow from the run's start to its end; prints a summary line.
pub fn send(kind: Kind, to: SocketAddr, cc: &str, t: &Timing) -> Result<()> {
    let start = t.start();
    let end = start + t.length();
    let line = match kind {
        Kind::Manyfold => mf_send(to, cc, t, start, end)?,
        Kind::Tcp => tcp_send(to, cc, t, start, end)?,
    };
    println!("{line}");
    Ok(())
}

/// How late the sender began (it sleeps until the start, but a loaded
/// machine may wake it late), in ms.
fn late_ms(start: Instant) -> f64 {
    Instant::now().saturating_duration_since(start).as_secs_f64() * 1e3
}

fn mf_send(to: SocketAddr, cc: &str, t: &Timing, start: Instant, end: Instant) -> Result<String> {
    crate::runtime()?.block_on(async {
        let endpoint = manyfold::Endpoint::bind("0.0.0.0:0".parse()?, crate::loopback::mf::config_for(cc)?).await?;
        let stream = Stream::new(t.seed);
        let mut buf = vec![0u8; CHUNK];
        tokio::time::sleep_until(tokio::time::Instant::from_std(start)).await;
        let late = late_ms(start);
        let deadline = tokio::time::Instant::from_std(end);
        let mut conn = tokio::time::timeout_at(deadline, endpoint.connect(to))
            .await
            .context("the handshake did not finish before the run's end")?
            .with_context(|| format!("connecting to {to}"))?;
        let mut written = 0u64;
        for i in 0.. {
            stream.fill(i, &mut buf);
            match tokio::time::timeout_at(deadline, conn.write_all(&buf)).await {
                Err(_) => break, // the run's end
                Ok(Ok(())) => written += CHUNK as u64,
                Ok(Err(e)) => {
                    if Instant::now() + EARLY_END < end {
                        return Err(e).context("writing");
                    }
                    break;
                }
            }
        }
        let s = conn.stats();
        Ok(format!(
            "{{\"written\":{written},\"late_ms\":{late:.1},\"retransmissions\":{},\"lost_packets\":{},\"rto_expiries\":{},\"srtt_ms\":{:.1},\"min_rtt_ms\":{:.1},\"cwnd\":{}}}",
            s.retransmissions,
            s.lost_packets,
            s.rto_expiries,
            s.srtt.as_secs_f64() * 1e3,
            s.min_rtt.as_secs_f64() * 1e3,
            s.cwnd
        ))
        // Dropping the runtime abandons the connection: no graceful close.
    })
}

fn tcp_send(to: SocketAddr, cc: &str, t: &Timing, start: Instant, end: Instant) -> Result<String> {
    let stream = Stream::new(t.seed);
    let mut buf = vec![0u8; CHUNK];
    std::thread::sleep(start.saturating_duration_since(Instant::now()));
    let late = late_ms(start);
    let s = loop {
        let s = crate::loopback::tcp::socket(cc)?;
        match s.connect_timeout(&SockAddr::from(to), Duration::from_secs(1)) {
            Ok(()) => break s,
            Err(e) if Instant::now() + Duration::from_millis(20) < end => {
                // The receiver listens before the start; a refusal is a
                // glitch worth one more try, not a reason to lose the run.
                eprintln!("connecting to {to}: {e}; retrying");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e).with_context(|| format!("connecting to {to}")),
        }
    };
    // Abandon unsent data at the end (a reset), as the manyfold sender does.
    s.set_linger(Some(Duration::ZERO))?;
    let mut s: TcpStream = s.into();
    s.set_write_timeout(Some(POLL))?;
    let (mut i, mut at, mut written) = (0u64, 0usize, 0u64);
    stream.fill(i, &mut buf);
    while Instant::now() < end {
        match s.write(&buf[at..]) {
            Ok(n) => {
                written += n as u64;
                at += n;
                if at == CHUNK {
                    i += 1;
                    at = 0;
                    stream.fill(i, &mut buf);
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
            Err(e) => {
                if Instant::now() + EARLY_END < end {
                    return Err(e).context("writing");
                }
                break;
            }
        }
    }
    Ok(format!("{{\"written\":{written},\"late_ms\":{late:.1}}}"))
}
