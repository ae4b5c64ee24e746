//! The kernel TCP anchor for file copies: a plain `std::net` sender and
//! receiver doing what `manyfold send` / `manyfold recv` do — stream the
//! file, write it to disk, hash it with BLAKE3 and compare.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;

use anyhow::{bail, Context, Result};

const CHUNK: usize = 1 << 20;

/// Accepts one connection, stores what arrives in `out`, and checks its hash.
pub fn recv(listen: SocketAddr, out: &Path, expect_hash: &str) -> Result<()> {
    let listener = TcpListener::bind(listen).with_context(|| format!("binding {listen}"))?;
    let (mut s, _) = listener.accept()?;
    let mut file = BufWriter::with_capacity(CHUNK, File::create(out)?);
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        file.write_all(&buf[..n])?;
    }
    file.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    let got = hasher.finalize().to_hex();
    if got.as_str() != expect_hash {
        bail!("hash mismatch: got {got}, expected {expect_hash}");
    }
    s.write_all(b"ok")?;
    Ok(())
}

/// Sends `file` to `to`, then waits for the receiver's "ok".
pub fn send(file: &Path, to: SocketAddr) -> Result<()> {
    send_with(file, to, |_| Ok(()))
}

/// [`send`], with `configure` applied to the connected socket before any
/// data (the `wan` scenario sets TCP_CONGESTION there).
pub fn send_with(file: &Path, to: SocketAddr, configure: impl FnOnce(&TcpStream) -> Result<()>) -> Result<()> {
    let mut f = File::open(file).with_context(|| format!("opening {}", file.display()))?;
    let mut s = connect_retry(to)?;
    configure(&s)?;
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        s.write_all(&buf[..n])?;
    }
    s.shutdown(std::net::Shutdown::Write)?;
    let mut ok = [0u8; 2];
    s.read_exact(&mut ok).context("receiver did not confirm")?;
    Ok(())
}

fn connect_retry(to: SocketAddr) -> Result<TcpStream> {
    for _ in 0..200 {
        if let Ok(s) = TcpStream::connect(to) {
            return Ok(s);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    bail!("no TCP listener at {to}")
}
