//! The QUIC anchor: quinn (the crate) with its default rustls crypto, so
//! this row encrypts and authenticates every byte, which the others do not.
//! The receiver makes a self-signed certificate (rcgen) and writes it where
//! the sender reads it as its only trusted root, then binds; the sender opens
//! one bidirectional stream, writes the stream and finishes it; the receiver
//! hashes, compares and answers "ok" on the same stream.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use quinn::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use super::data::{Check, Pattern, CHUNK};

const SERVER_NAME: &str = "localhost";

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
}

pub fn recv(listen: SocketAddr, cert_path: &Path, len: u64, hash: &str) -> Result<()> {
    let key = rcgen::generate_simple_self_signed(vec![SERVER_NAME.to_string()])?;
    let cert = key.cert.der().clone();
    std::fs::write(cert_path, cert.as_ref()).with_context(|| format!("writing {}", cert_path.display()))?;
    let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.signing_key.serialize_der()));
    let config = quinn::ServerConfig::with_single_cert(vec![cert], private)?;
    runtime()?.block_on(async {
        let endpoint = quinn::Endpoint::server(config, listen)?;
        let conn = endpoint.accept().await.context("endpoint closed")?.await?;
        let (mut send, mut recv) = conn.accept_bi().await?;
        let mut check = Check::default();
        while let Some(chunk) = recv.read_chunk(CHUNK, true).await? {
            check.update(&chunk.bytes);
        }
        check.finish(len, hash)?;
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
    let cert = std::fs::read(cert_path).with_context(|| format!("reading {}", cert_path.display()))?;
    let mut roots = quinn::rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(cert))?;
    let config = quinn::ClientConfig::with_root_certificates(Arc::new(roots))?;
    runtime()?.block_on(async {
        let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse()?)?;
        endpoint.set_default_client_config(config);
        let conn = endpoint.connect(to, SERVER_NAME)?.await.context("connecting")?;
        let (mut send, mut recv) = conn.open_bi().await?;
        let mut buf = vec![0u8; CHUNK];
        for i in 0..pattern.chunks() {
            let n = pattern.fill(i, &mut buf);
            send.write_all(&buf[..n]).await?;
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
