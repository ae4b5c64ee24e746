//! The manyfold rows: `mf-send` / `mf-recv`, two processes on the
//! `manyfold` library (async API, multi-thread tokio runtime as the CLI
//! uses). The sender writes the stream, closes (FIN, complete when the peer
//! acknowledged everything) and waits for the receiver's "ok", which comes
//! only after the receiver's BLAKE3 matched.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use manyfold_proto::CongestionAlgorithm;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::data::{Check, Pattern, CHUNK};

/// Every controller the lab runs a row for: all of them
/// (`CongestionAlgorithm::ALL`), so a new controller gets its row.
pub fn controllers() -> impl Iterator<Item = CongestionAlgorithm> {
    CongestionAlgorithm::ALL.into_iter()
}

fn controller(name: &str) -> Result<CongestionAlgorithm> {
    name.parse().map_err(anyhow::Error::msg)
}

/// Settings both sides of a manyfold row share.
#[derive(clap::Args, Debug, Clone)]
pub struct MfOpts {
    /// Congestion controller (`CongestionAlgorithm::name`).
    #[arg(long, default_value = "newreno")]
    pub cc: String,
    /// ConnectionConfig::send_buffer in bytes (default: the library's).
    #[arg(long)]
    pub send_buffer: Option<usize>,
    /// ConnectionConfig::recv_buffer in bytes (default: the library's).
    #[arg(long)]
    pub recv_buffer: Option<usize>,
}

impl MfOpts {
    fn config(&self) -> Result<manyfold::Config> {
        let mut config = manyfold::Config::default();
        let conn = &mut config.endpoint.connection;
        conn.congestion = controller(&self.cc)?;
        if let Some(b) = self.send_buffer {
            conn.send_buffer = b;
        }
        if let Some(b) = self.recv_buffer {
            conn.recv_buffer = b;
        }
        Ok(config)
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
}

pub fn send(to: SocketAddr, opts: &MfOpts, pattern: &Pattern) -> Result<()> {
    runtime()?.block_on(async {
        let endpoint = manyfold::Endpoint::bind("127.0.0.1:0".parse()?, opts.config()?).await?;
        let mut conn = endpoint.connect(to).await.context("connecting")?;
        let mut buf = vec![0u8; CHUNK];
        for i in 0..pattern.chunks() {
            let n = pattern.fill(i, &mut buf);
            conn.write_all(&buf[..n]).await?;
        }
        conn.close().await.context("closing")?;
        let mut reply = Vec::new();
        conn.read_to_end(&mut reply).await.context("waiting for the receiver's verdict")?;
        if reply != b"ok" {
            bail!("receiver did not confirm");
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.shutdown_within(Duration::from_secs(1))).await;
        Ok(())
    })
}

pub fn recv(listen: SocketAddr, opts: &MfOpts, len: u64, hash: &str) -> Result<()> {
    runtime()?.block_on(async {
        let endpoint = manyfold::Endpoint::bind(listen, opts.config()?).await?;
        endpoint.listen();
        let mut conn = endpoint.accept().await.context("endpoint closed")?;
        let mut check = Check::default();
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = conn.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            check.update(&buf[..n]);
        }
        check.finish(len, hash)?;
        conn.write_all(b"ok").await?;
        conn.close().await.context("closing")?;
        let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.shutdown_within(Duration::from_secs(1))).await;
        Ok(())
    })
}
