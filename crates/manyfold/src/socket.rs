//! The UDP socket: binding with large kernel buffers (socket2), and batched
//! send and receive through quinn-udp (GSO and GRO where the kernel has
//! them, one datagram per call where it does not).

use std::io::{self, IoSliceMut};
use std::net::{SocketAddr, SocketAddrV6};

use quinn_udp::{RecvMeta, UdpSocketState};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::Interest;

/// Kernel buffer size asked for in each direction. The kernel may cap it
/// (Linux: net.core.rmem_max / wmem_max); a smaller buffer only costs
/// throughput, so a refusal is not an error.
const SOCKET_BUFFER: usize = 8 << 20;

/// Largest UDP payload of one GSO send: the IPv4 total length field is 16
/// bits, and the kernel refuses (EMSGSIZE) a batch that exceeds it.
const MAX_GSO_BYTES: usize = 65_000;

/// Creates, configures and binds a non-blocking UDP socket, with
/// SO_REUSEPORT if `reuse_port` (several sockets on one port, the kernel
/// spreading peers over them by address hash; spec §15). Errors keep
/// their `io::ErrorKind` (e.g. `AddrInUse`) and name the address.
pub(crate) fn bind(addr: SocketAddr, reuse_port: bool) -> io::Result<std::net::UdpSocket> {
    let context = |what: &str, e: io::Error| io::Error::new(e.kind(), format!("{what} {addr}: {e}"));
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
        .map_err(|e| context("cannot create a UDP socket for", e))?;
    if addr.is_ipv6() && addr.ip().is_unspecified() {
        // Accept IPv4 peers too (as v4-mapped addresses) where the OS allows it.
        let _ = socket.set_only_v6(false);
    }
    #[cfg(unix)]
    if reuse_port {
        socket.set_reuse_port(true).map_err(|e| context("cannot set SO_REUSEPORT for", e))?;
    }
    #[cfg(not(unix))]
    if reuse_port {
        return Err(io::Error::new(io::ErrorKind::Unsupported, format!("SO_REUSEPORT is not available for {addr}")));
    }
    socket.bind(&addr.into()).map_err(|e| context("cannot bind UDP socket to", e))?;
    if let Err(e) = socket.set_send_buffer_size(SOCKET_BUFFER) {
        tracing::debug!(error = %e, "could not enlarge the socket send buffer");
    }
    if let Err(e) = socket.set_recv_buffer_size(SOCKET_BUFFER) {
        tracing::debug!(error = %e, "could not enlarge the socket receive buffer");
    }
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// A bound socket with quinn-udp's state. Every call is non-blocking and
/// clears tokio's readiness on `WouldBlock`, so the driver can await it.
#[derive(Debug)]
pub(crate) struct UdpIo {
    pub(crate) socket: tokio::net::UdpSocket,
    state: UdpSocketState,
    ipv6: bool,
}

impl UdpIo {
    /// Wraps a socket from [`bind`]; must run inside a tokio runtime.
    pub(crate) fn new(socket: std::net::UdpSocket) -> io::Result<Self> {
        let ipv6 = socket.local_addr()?.is_ipv6();
        let socket = tokio::net::UdpSocket::from_std(socket)?;
        let state = UdpSocketState::new((&socket).into())?;
        Ok(UdpIo { socket, state, ipv6 })
    }

    /// How many datagrams the kernel reads into one buffer (GRO); 1 without GRO.
    pub(crate) fn gro_segments(&self) -> usize {
        self.state.gro_segments().max(1)
    }

    /// Most datagrams of `datagram_len` bytes one send may carry (GSO).
    pub(crate) fn max_segments(&self, datagram_len: usize) -> usize {
        self.state.max_gso_segments().min(MAX_GSO_BYTES / datagram_len.max(1)).max(1)
    }

    /// Receives up to `bufs.len()` buffers; each may hold several datagrams
    /// of `meta.stride` bytes (GRO).
    pub(crate) fn recv(&self, bufs: &mut [IoSliceMut<'_>], meta: &mut [RecvMeta]) -> io::Result<usize> {
        self.socket.try_io(Interest::READABLE, || self.state.recv((&self.socket).into(), bufs, meta))
    }

    /// Sends `contents` to `destination`: one datagram, or with
    /// `segment_size` a GSO batch of datagrams of that size.
    pub(crate) fn send(&self, destination: SocketAddr, contents: &[u8], segment_size: Option<usize>) -> io::Result<()> {
        let transmit = quinn_udp::Transmit {
            destination: self.to_socket_family(destination),
            ecn: None,
            contents,
            segment_size,
            src_ip: None,
        };
        self.socket.try_io(Interest::WRITABLE, || self.state.try_send((&self.socket).into(), &transmit))
    }

    /// Whether GSO was switched off after the kernel refused a batch; quinn-udp
    /// then reports 1 and the driver resends that batch one datagram at a time.
    pub(crate) fn gso_disabled(&self) -> bool {
        self.state.max_gso_segments() <= 1
    }

    /// An IPv6 socket sends to IPv4 peers through v4-mapped addresses.
    fn to_socket_family(&self, addr: SocketAddr) -> SocketAddr {
        match addr {
            SocketAddr::V4(v4) if self.ipv6 => {
                SocketAddr::V6(SocketAddrV6::new(v4.ip().to_ipv6_mapped(), v4.port(), 0, 0))
            }
            other => other,
        }
    }
}

/// The address the engine should see: v4-mapped IPv6 addresses become IPv4,
/// so that a peer has one address whichever socket family we use.
pub(crate) fn canonical(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), v6.port()),
            None => addr,
        },
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_addresses_become_ipv4() {
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:5000".parse().expect("literal");
        assert_eq!(canonical(mapped), "127.0.0.1:5000".parse::<SocketAddr>().expect("literal"));
        let v6: SocketAddr = "[::1]:5000".parse().expect("literal");
        assert_eq!(canonical(v6), v6);
    }

    #[test]
    fn bind_reports_addr_in_use() {
        let first = bind("127.0.0.1:0".parse().expect("literal"), false).expect("bind");
        let taken = first.local_addr().expect("local addr");
        let err = bind(taken, false).expect_err("second bind must fail");
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        assert!(err.to_string().contains(&taken.to_string()), "{err}");
    }
}
