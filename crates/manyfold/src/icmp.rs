//! ICMP errors for our datagrams (spec §6.7): the socket's error queue
//! (Linux's IP_RECVERR / IPV6_RECVERR), read without blocking and turned
//! into `(destination, kind, quote)` for the engine's `handle_icmp`.
//!
//! A UDP socket learns nothing of ICMP by default: port unreachable from a
//! peer whose process died is dropped by the kernel, and the connection
//! retransmits into silence until a timer gives up. With IP_RECVERR the
//! kernel queues each error with the datagram it quotes and the address
//! that datagram went to; matching it to a connection is the engine's job
//! (by the ids and sequence number in the quote, never by address alone).
//!
//! Only Linux has the error queue; elsewhere `enable` does nothing and
//! `drain` finds nothing, and peers' failures are found by the timers.

use std::io;
use std::net::SocketAddr;

use manyfold_proto::UnreachableKind;

/// Asks the kernel to queue ICMP errors on `socket` (both families on a
/// dual-stack IPv6 socket). A refusal only costs the early warning.
pub(crate) fn enable(socket: &std::net::UdpSocket, ipv6: bool) {
    #[cfg(target_os = "linux")]
    {
        use nix::sys::socket::{setsockopt, sockopt};
        let v4 = setsockopt(socket, sockopt::Ipv4RecvErr, &true);
        let v6 = if ipv6 { setsockopt(socket, sockopt::Ipv6RecvErr, &true) } else { Ok(()) };
        if let Err(e) = v4.and(v6) {
            tracing::debug!(error = %e, "cannot enable IP_RECVERR; ICMP errors will be ignored");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (socket, ipv6);
}

/// What an ICMP error says, if it is one the engine acts on (spec §6.7):
/// ICMPv4 type 3 / ICMPv6 type 1, port unreachable or the host, network or
/// route unreachable or prohibited. Fragmentation needed, time exceeded,
/// and errors the kernel raised itself are none of these.
#[cfg(target_os = "linux")]
fn classify(origin: u8, icmp_type: u8, code: u8) -> Option<UnreachableKind> {
    const ORIGIN_ICMP: u8 = 2; // SO_EE_ORIGIN_ICMP
    const ORIGIN_ICMP6: u8 = 3; // SO_EE_ORIGIN_ICMP6
    match (origin, icmp_type, code) {
        // RFC 792: destination unreachable; code 3 port, 4 is fragmentation needed.
        (ORIGIN_ICMP, 3, 3) => Some(UnreachableKind::Port),
        (ORIGIN_ICMP, 3, 0..=2 | 5..=15) => Some(UnreachableKind::Host),
        // RFC 4443 §3.1: code 4 port unreachable; 0 no route, 1 prohibited,
        // 3 address unreachable, 5 and 6 policy or reject route.
        (ORIGIN_ICMP6, 1, 4) => Some(UnreachableKind::Port),
        (ORIGIN_ICMP6, 1, 0..=3 | 5 | 6) => Some(UnreachableKind::Host),
        _ => None,
    }
}

/// Room for the control messages of one error-queue entry: the extended
/// error and its offender, plus what the socket's other options add
/// (packet info, TOS, GRO segment size). Allocated once, so aligned for
/// `cmsghdr`.
pub(crate) fn control_buffer() -> Vec<u8> {
    vec![0u8; 512]
}

/// Reads every queued error without blocking, calling `each` with the
/// datagram's destination, what the error says and its quote of our
/// datagram. Errors of other kinds are read and counted in the return
/// value's second field. Ends with `WouldBlock` when the queue is empty.
#[cfg(target_os = "linux")]
pub(crate) fn drain(
    socket: &std::net::UdpSocket,
    buf: &mut [u8],
    control: &mut [u8],
    mut each: impl FnMut(SocketAddr, UnreachableKind, &[u8]),
) -> io::Result<(usize, usize)> {
    use std::io::IoSliceMut;
    use std::os::fd::AsRawFd;

    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, SockaddrStorage};

    let (mut taken, mut other) = (0, 0);
    loop {
        let mut iov = [IoSliceMut::new(buf)];
        let flags = MsgFlags::MSG_ERRQUEUE | MsgFlags::MSG_DONTWAIT;
        let msg = match recvmsg::<SockaddrStorage>(socket.as_raw_fd(), &mut iov, Some(&mut control[..]), flags) {
            Ok(m) => m,
            Err(nix::errno::Errno::EAGAIN) if taken + other > 0 => return Ok((taken, other)),
            Err(e) => return Err(io::Error::from(e)),
        };
        let destination = msg.address.as_ref().and_then(socket_addr);
        let mut kind = None;
        if let Ok(cmsgs) = msg.cmsgs() {
            for c in cmsgs {
                if let ControlMessageOwned::Ipv4RecvErr(e, _) | ControlMessageOwned::Ipv6RecvErr(e, _) = c {
                    kind = classify(e.ee_origin, e.ee_type, e.ee_code);
                }
            }
        }
        let len = msg.bytes.min(buf.len());
        match (destination, kind) {
            (Some(to), Some(kind)) => {
                taken += 1;
                each(to, kind, &buf[..len]);
            }
            _ => other += 1,
        }
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn drain(
    _socket: &std::net::UdpSocket,
    _buf: &mut [u8],
    _control: &mut [u8],
    _each: impl FnMut(SocketAddr, UnreachableKind, &[u8]),
) -> io::Result<(usize, usize)> {
    Err(io::ErrorKind::WouldBlock.into())
}

#[cfg(target_os = "linux")]
fn socket_addr(s: &nix::sys::socket::SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = s.as_sockaddr_in() {
        return Some(SocketAddr::V4(std::net::SocketAddrV4::from(*v4)));
    }
    s.as_sockaddr_in6().map(|v6| SocketAddr::V6(std::net::SocketAddrV6::from(*v6)))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn only_unreachables_are_acted_on() {
        assert_eq!(classify(2, 3, 3), Some(UnreachableKind::Port));
        assert_eq!(classify(2, 3, 1), Some(UnreachableKind::Host));
        assert_eq!(classify(2, 3, 13), Some(UnreachableKind::Host));
        assert_eq!(classify(2, 3, 4), None, "fragmentation needed is path MTU, not a failure");
        assert_eq!(classify(2, 11, 0), None, "time exceeded");
        assert_eq!(classify(3, 1, 4), Some(UnreachableKind::Port));
        assert_eq!(classify(3, 1, 0), Some(UnreachableKind::Host));
        assert_eq!(classify(3, 2, 0), None, "packet too big");
        assert_eq!(classify(1, 3, 3), None, "a local error is not the peer's answer");
    }
}
