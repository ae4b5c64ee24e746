//! The QUIC anchor: quinn (the crate) with its default rustls crypto, so
//! this row encrypts and authenticates every byte, which the others do not.
//! The receiver makes a self-signed certificate (rcgen) and writes it where
//! the sender reads it as its only trusted root, then binds; the sender opens
//! one bidirectional stream, writes the stream and finishes it; the receiver
//! hashes, compares and answers "ok" on the same stream.
//!
//! The `wan` scenario runs the same two functions inside its namespaces
//! ([`send_tuned`], [`recv_tuned`]) with flow-control windows sized to the
//! emulated path, as a user of a long fat pipe would configure them.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use quinn::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use super::data::{Check, ChunkPool, Pattern, CHUNK};

const SERVER_NAME: &str = "localhost";

/// quinn's transport settings with every flow-control window (stream,
/// connection, and the sender's buffer of unacknowledged data) set to
/// `window` bytes; `None` keeps quinn's defaults (a 1.25 MB stream window,
/// tuned for 100 Mbit/s at 100 ms), as the loopback rows use.
fn transport(window: Option<u64>) -> Result<Option<Arc<quinn::TransportConfig>>> {
    let Some(w) = window else { return Ok(None) };
    let v = quinn::VarInt::from_u64(w).context("window too large for QUIC")?;
    let mut t = quinn::TransportConfig::default();
    t.stream_receive_window(v).receive_window(v).send_window(w);
    Ok(Some(Arc::new(t)))
}

pub fn recv(listen: SocketAddr, cert_path: &Path, len: u64, hash: &str) -> Result<()> {
    recv_tuned(listen, cert_path, len, hash, None)
}

/// [`recv`] with every flow-control window set to `window` bytes.
pub fn recv_tuned(listen: SocketAddr, cert_path: &Path, len: u64, hash: &str, window: Option<u64>) -> Result<()> {
    let key = rcgen::generate_simple_self_signed(vec![SERVER_NAME.to_string()])?;
    let cert = key.cert.der().clone();
    std::fs::write(cert_path, cert.as_ref()).with_context(|| format!("writing {}", cert_path.display()))?;
    let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.signing_key.serialize_der()));
    let mut config = quinn::ServerConfig::with_single_cert(vec![cert], private)?;
    if let Some(t) = transport(window)? {
        config.transport_config(t);
    }
    let hash = hash.to_string();
    crate::run_app(crate::runtime()?, async move {
        let endpoint = quinn::Endpoint::server(config, listen)?;
        let conn = endpoint.accept().await.context("endpoint closed")?.await?;
        let (mut send, mut recv) = conn.accept_bi().await?;
        let mut check = Check::default();
        while let Some(chunk) = recv.read_chunk(CHUNK, true).await? {
            check.update(&chunk.bytes);
        }
        check.finish(len, &hash)?;
        send.write_all(b"ok").await?;
        send.finish()?;
        // The sender closes once it has read the verdict.
        let _ = tokio::time::timeout(Duration::from_secs(5), conn.closed()).await;
        endpoint.close(0u32.into(), b"done");
        let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
        Ok(())
    })
}

pub fn send(to: SocketAddr, cert_path: &Path, pattern: &Pattern) -> Result<()> {
    send_tuned(to, cert_path, pattern, None)
}

/// [`send`] with every flow-control window set to `window` bytes.
pub fn send_tuned(to: SocketAddr, cert_path: &Path, pattern: &Pattern, window: Option<u64>) -> Result<()> {
    let cert = std::fs::read(cert_path).with_context(|| format!("reading {}", cert_path.display()))?;
    let mut roots = quinn::rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(cert))?;
    let mut config = quinn::ClientConfig::with_root_certificates(Arc::new(roots))?;
    if let Some(t) = transport(window)? {
        config.transport_config(t);
    }
    let pattern = pattern.clone();
    crate::run_app(crate::runtime()?, async move {
        // The unspecified address of `to`'s family: the kernel picks the
        // source (127.0.0.1 on loopback, the namespace's own address in
        // the wan lab).
        let any = if to.is_ipv4() { Ipv4Addr::UNSPECIFIED.into() } else { Ipv6Addr::UNSPECIFIED.into() };
        let mut endpoint = quinn::Endpoint::client(SocketAddr::new(any, 0))?;
        endpoint.set_default_client_config(config);
        let conn = endpoint.connect(to, SERVER_NAME)?.await.context("connecting")?;
        let (mut send, mut recv) = conn.open_bi().await?;
        // Each chunk is handed over without a copy, as manyfold's row does.
        let mut pool = ChunkPool::default();
        for i in 0..pattern.chunks() {
            send.write_chunk(pool.chunk(&pattern, i)).await?;
        }
        send.finish()?;
        let reply = recv.read_to_end(16).await.context("waiting for the receiver's verdict")?;
        if reply != b"ok" {
            bail!("receiver did not confirm");
        }
        conn.close(0u32.into(), b"done");
        let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
        Ok(())
    })
}
