//! The kernel TCP rows: the same stream over a std-socket TCP connection
//! whose congestion control is chosen per socket (`TCP_CONGESTION`, through
//! socket2: no unsafe here). The receiver hashes, compares and answers "ok".

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::data::{Check, Pattern, CHUNK};

/// The kernel's congestion controls the lab compares (BENCH.md: both are in
/// this kernel).
pub const CONTROLS: &[&str] = &["cubic", "bbr"];

/// A TCP socket with congestion control `cc`, read back so that a row or
/// flow never silently runs another algorithm.
pub(crate) fn socket(cc: &str) -> Result<Socket> {
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    s.set_tcp_congestion(cc.as_bytes()).with_context(|| format!("TCP_CONGESTION {cc}"))?;
    let got = s.tcp_congestion()?;
    let got = String::from_utf8_lossy(&got);
    if got.trim_end_matches('\0') != cc {
        bail!("asked for TCP congestion control {cc}, the kernel set {got}");
    }
    Ok(s)
}

pub fn send(to: SocketAddr, cc: &str, pattern: &Pattern) -> Result<()> {
    let mut s = connect_retry(to, cc)?;
    let mut buf = vec![0u8; CHUNK];
    for i in 0..pattern.chunks() {
        let n = pattern.fill(i, &mut buf);
        s.write_all(&buf[..n])?;
    }
    s.shutdown(std::net::Shutdown::Write)?;
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).context("waiting for the receiver's verdict")?;
    if reply != b"ok" {
        bail!("receiver did not confirm");
    }
    Ok(())
}

pub fn recv(listen: SocketAddr, cc: &str, len: u64, hash: &str) -> Result<()> {
    // Accepted sockets inherit the listener's congestion control.
    let l = socket(cc)?;
    l.set_reuse_address(true)?;
    l.bind(&SockAddr::from(listen)).with_context(|| format!("binding {listen}"))?;
    l.listen(1)?;
    let (s, _) = l.accept()?;
    let mut s: TcpStream = s.into();
    let mut check = Check::default();
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        check.update(&buf[..n]);
    }
    check.finish(len, hash)?;
    s.write_all(b"ok")?;
    Ok(())
}

/// Listens on `listen` with congestion control `cc` (accepted sockets
/// inherit it) and accepts one connection; fails if none came by
/// `deadline`.
pub(crate) fn accept_by(listen: SocketAddr, cc: &str, deadline: Instant) -> Result<TcpStream> {
    let l = socket(cc)?;
    l.set_reuse_address(true)?;
    l.bind(&SockAddr::from(listen)).with_context(|| format!("binding {listen}"))?;
    l.listen(1)?;
    l.set_nonblocking(true)?;
    let s = loop {
        match l.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    bail!("no sender connected to {listen} in time");
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(e).context("accepting"),
        }
    };
    s.set_nonblocking(false)?;
    Ok(s.into())
}

fn connect_retry(to: SocketAddr, cc: &str) -> Result<TcpStream> {
    for _ in 0..500 {
        let s = socket(cc)?;
        if s.connect(&SockAddr::from(to)).is_ok() {
            return Ok(s.into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    bail!("no TCP listener at {to}")
}
