//! TEMPORARY stand-in for the `manyfold` library API while the driver is
//! being written: the same types and signatures, carried over TCP so the
//! application code and its tests can run. Fault injection and the
//! transport's statistics are not emulated. Removed when `manyfold` lands.

#![allow(dead_code)]

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use manyfold_proto::{ConnStats, EndpointConfig, EndpointStats};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

#[derive(Debug, Clone, Default)]
pub struct FaultConfig {
    pub seed: u64,
    pub send_loss: f64,
    pub recv_loss: f64,
    pub duplicate: f64,
    pub reorder: f64,
    pub delay: Duration,
    pub jitter: Duration,
}

#[derive(Debug, Clone, Default)]
pub struct Config {
    pub endpoint: EndpointConfig,
    pub faults: FaultConfig,
    pub trace: bool,
}

#[derive(Debug)]
pub enum ConnectionError {
    ConnectTimeout,
    Refused,
    Io(io::Error),
}

impl std::fmt::Display for ConnectionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectionError::ConnectTimeout => write!(f, "peer did not answer the handshake"),
            ConnectionError::Refused => write!(f, "connection refused by peer"),
            ConnectionError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ConnectionError {}

impl From<io::Error> for ConnectionError {
    fn from(e: io::Error) -> Self {
        ConnectionError::Io(e)
    }
}

#[derive(Debug)]
pub struct Endpoint {
    listener: TcpListener,
}

impl Endpoint {
    pub async fn bind(addr: SocketAddr, _config: Config) -> io::Result<Endpoint> {
        Ok(Endpoint { listener: TcpListener::bind(addr).await? })
    }

    pub fn listen(&self) {}

    pub async fn connect(&self, addr: SocketAddr) -> Result<Connection, ConnectionError> {
        match tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(addr)).await {
            Err(_) => Err(ConnectionError::ConnectTimeout),
            Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => Err(ConnectionError::Refused),
            Ok(Err(e)) => Err(e.into()),
            Ok(Ok(stream)) => Ok(Connection { stream }),
        }
    }

    pub async fn accept(&self) -> Option<Connection> {
        self.listener.accept().await.ok().map(|(stream, _)| Connection { stream })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    pub fn stats(&self) -> EndpointStats {
        EndpointStats::default()
    }

    pub async fn shutdown(&self) {}
}

#[derive(Debug)]
pub struct Connection {
    stream: TcpStream,
}

pub type SendHalf = tokio::net::tcp::OwnedWriteHalf;
pub type RecvHalf = tokio::net::tcp::OwnedReadHalf;

impl Connection {
    pub fn split(self) -> (SendHalf, RecvHalf) {
        let (r, w) = self.stream.into_split();
        (w, r)
    }

    pub fn peer_addr(&self) -> SocketAddr {
        self.stream.peer_addr().expect("connected")
    }

    pub fn stats(&self) -> ConnStats {
        ConnStats::default()
    }

    pub async fn close(&mut self) -> Result<(), ConnectionError> {
        self.stream.shutdown().await?;
        Ok(())
    }
}

impl AsyncRead for Connection {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
