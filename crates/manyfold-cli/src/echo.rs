//! `manyfold echo-server` and `manyfold echo`: the Echo Protocol (RFC 862)
//! over manyfold, as librusp's `echos`/`echoc` (paper 04 §3.2): a quick way
//! to check a path and measure its round-trip time.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;

use crate::net::{self, Connection, NetArgs};
use crate::report::outln;
use crate::size::human_duration;
use crate::{keys, report};

#[derive(Args, Debug)]
pub struct EchoServerArgs {
    /// Address to listen on, HOST:PORT (port 0 picks a free port; the
    /// address actually used is printed).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7007")]
    pub listen: String,

    #[command(flatten)]
    pub net: NetArgs,
}

#[derive(Args, Debug)]
pub struct EchoArgs {
    /// Address of the echo server, HOST:PORT.
    #[arg(value_name = "ADDR")]
    pub addr: String,

    /// Lines to send, one per argument. Without any, lines are read from
    /// standard input until its end.
    #[arg(value_name = "MESSAGE")]
    pub messages: Vec<String>,

    #[command(flatten)]
    pub net: NetArgs,
}

/// RFC 862: "Once a connection is established any data received is sent
/// back. This continues until the calling user terminates the connection."
pub async fn run_server(args: EchoServerArgs) -> Result<()> {
    let server = net::listen(&args.listen, &args.net, |_| {}).await?;
    let (endpoint, local, mode) = (Arc::clone(&server.endpoint), server.local, &server.mode);
    let banner = format!("manyfold echo-server: listening on {local} ({mode}; RFC 862; Ctrl-C to stop)");
    // With --json too: a script needs the address (port 0 picks one).
    report::emit(&banner, || serde_json::json!({ "listening": local.to_string() }));

    let mut sessions = JoinSet::new();
    let ctrl_c = net::interrupted();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            _ = &mut ctrl_c => break,
            conn = endpoint.accept() => {
                let Some(conn) = conn else { break };
                sessions.spawn(echo_session(conn));
            }
            Some(_) = sessions.join_next() => {}
        }
    }
    sessions.shutdown().await;
    let _ = tokio::time::timeout(Duration::from_secs(5), endpoint.shutdown()).await;
    Ok(())
}

/// Echoes everything `conn` receives until the peer finishes its side;
/// then one line, or with `--json` one object: `peer`, `encrypted`,
/// `bytes` (echoed), `seconds`, `ended` (null, or why the session broke
/// off).
async fn echo_session(conn: Connection) {
    let (peer, security, start) = (conn.peer_addr(), conn.protection(), Instant::now());
    report::say(&format_args!("{peer}: connected ({})", keys::short(security)));
    let (mut send, mut recv) = conn.split();
    let mut bytes = 0u64;
    let copied: std::io::Result<()> = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = recv.read(&mut buf).await?;
            if n == 0 {
                return Ok(());
            }
            send.write_all(&buf[..n]).await?;
            bytes += n as u64;
        }
    }
    .await;
    let ended = match copied {
        Ok(()) => {
            let _ = send.shutdown().await;
            None
        }
        Err(e) => Some(format!("{:#}", net::explain(e.into(), net::Role::Client))),
    };
    let line = match &ended {
        None => format!("{peer}: closed after echoing {bytes} bytes"),
        Some(why) => format!("{peer}: connection failed after echoing {bytes} bytes: {why}"),
    };
    report::emit(&line, || {
        serde_json::json!({
            "peer": peer.to_string(),
            "encrypted": matches!(security, manyfold::Protection::Encrypted { .. }),
            "bytes": bytes,
            "seconds": start.elapsed().as_secs_f64(),
            "ended": ended,
        })
    });
}

/// Sends each line, waits for its echo, prints it; RTTs go to stderr.
pub async fn run_client(args: EchoArgs) -> Result<()> {
    let peer = net::resolve(&args.addr).await?;
    let (endpoint, mut conn) = net::connect(peer, args.net.config()?).await?;
    let local = endpoint.local_addr().context("cannot read the bound address")?;
    let security = conn.protection();
    eprintln!("connected to {peer} (local port {}; {security})", local.port());

    let mut rtts = Vec::new();
    let mut stdout = tokio::io::stdout();
    if args.messages.is_empty() {
        let stdin = tokio::io::stdin();
        if std::io::stdin().is_terminal() {
            eprintln!("type lines to echo; end with Ctrl-D");
        }
        let mut input = tokio::io::BufReader::new(stdin);
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = input.read_until(b'\n', &mut line).await.context("cannot read standard input")?;
            if n == 0 {
                break;
            }
            if line.last() != Some(&b'\n') {
                line.push(b'\n');
            }
            rtts.push(echo_line(&mut conn, &line, &mut stdout).await?);
        }
    } else {
        for message in &args.messages {
            let mut line = message.clone().into_bytes();
            line.push(b'\n');
            rtts.push(echo_line(&mut conn, &line, &mut stdout).await?);
        }
    }

    let _ = tokio::time::timeout(Duration::from_secs(5), conn.close()).await;
    let _ = tokio::time::timeout(Duration::from_secs(5), endpoint.shutdown()).await;
    let bytes: u64 = rtts.iter().map(|(_, n)| *n as u64).sum();
    let rtts: Vec<Duration> = rtts.into_iter().map(|(t, _)| t).collect();
    let avg = (!rtts.is_empty()).then(|| rtts.iter().sum::<Duration>() / rtts.len() as u32);
    let (min, max) = (rtts.iter().min().copied(), rtts.iter().max().copied());
    if crate::report::output() == crate::report::Output::Json {
        let secs = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
        outln!(
            "{}",
            serde_json::json!({
                "peer": peer.to_string(),
                "encrypted": matches!(security, manyfold::Protection::Encrypted { .. }),
                "lines": rtts.len(),
                "bytes": bytes,
                "rtt_min_seconds": secs(min),
                "rtt_avg_seconds": secs(avg),
                "rtt_max_seconds": secs(max),
            })
        );
    } else if let (Some(min), Some(avg), Some(max)) = (min, avg, max) {
        eprintln!(
            "{} line(s) echoed; round trip min {}, avg {}, max {}",
            rtts.len(),
            human_duration(min),
            human_duration(avg),
            human_duration(max)
        );
    }
    Ok(())
}

/// Sends `line`, reads back as many bytes, checks them and prints them
/// (not with --json: stdout holds only the session's object); returns the
/// round trip and the line's length.
async fn echo_line(conn: &mut Connection, line: &[u8], out: &mut tokio::io::Stdout) -> Result<(Duration, usize)> {
    let start = Instant::now();
    conn.write_all(line).await.context("connection lost while sending")?;
    conn.flush().await.context("connection lost while sending")?;
    let mut echoed = vec![0u8; line.len()];
    conn.read_exact(&mut echoed).await.context("connection lost while waiting for the echo")?;
    let rtt = start.elapsed();
    if echoed != line {
        bail!("the server echoed {:?} for {:?}", String::from_utf8_lossy(&echoed), String::from_utf8_lossy(line));
    }
    if crate::report::output() != crate::report::Output::Json {
        out.write_all(&echoed).await?;
        out.flush().await?;
    }
    Ok((rtt, line.len()))
}
