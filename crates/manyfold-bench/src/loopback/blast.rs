//! The ceiling: a raw UDP blast with GSO and GRO (quinn-udp) and no
//! reliability, flow or congestion control. The sender cuts the stream into
//! 1,452-byte datagrams (manyfold's default datagram size) and hands the
//! kernel up to 44 of them per `sendmsg` (UDP_SEGMENT); the receiver reads
//! with GRO and counts bytes. Loss is allowed here: the row reports what
//! fraction arrived, and its goodput counts only those bytes.

use std::io::IoSliceMut;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Result};
use quinn_udp::{RecvMeta, Transmit, UdpSocketState};

use super::data::{Pattern, CHUNK};

/// Payload bytes per datagram (manyfold's default `max_datagram`).
pub const DATAGRAM: usize = 1452;
/// Datagrams per GSO send: 44 × 1,452 stays under the 64 KiB UDP limit.
const SEGMENTS: usize = 44;
/// Kernel socket buffers asked for (capped by net.core.{r,w}mem_max, as
/// manyfold's own driver is).
const SOCKET_BUFFER: usize = 8 << 20;
/// The receiver stops after this long without a datagram.
const IDLE_END: Duration = Duration::from_millis(300);

/// Sends `pattern` to `to` as fast as the kernel takes it (blocking sends).
pub fn send(to: SocketAddr, pattern: &Pattern) -> Result<()> {
    let socket = UdpSocket::bind("127.0.0.1:0")?;
    let state = UdpSocketState::new((&socket).into())?;
    // quinn-udp makes the socket non-blocking; a blocking send lets the
    // kernel pace us instead of a spin on EAGAIN.
    socket.set_nonblocking(false)?;
    let _ = state.set_send_buffer_size((&socket).into(), SOCKET_BUFFER);
    let per_send = state.max_gso_segments().clamp(1, SEGMENTS);
    let mut buf = vec![0u8; CHUNK];
    for i in 0..pattern.chunks() {
        let n = pattern.fill(i, &mut buf);
        for batch in buf[..n].chunks(DATAGRAM * per_send) {
            let t = Transmit {
                destination: to,
                ecn: None,
                contents: batch,
                segment_size: (batch.len() > DATAGRAM).then_some(DATAGRAM),
                src_ip: None,
            };
            state.try_send((&socket).into(), &t)?;
        }
    }
    Ok(())
}

/// Counts what arrives on `listen` until `len` bytes came or the sender fell
/// silent; prints `received BYTES LAST_UNIX_NANOS` for the scenario.
pub fn recv(listen: SocketAddr, len: u64) -> Result<()> {
    let socket = UdpSocket::bind(listen)?;
    let state = UdpSocketState::new((&socket).into())?;
    socket.set_nonblocking(false)?;
    let _ = state.set_recv_buffer_size((&socket).into(), SOCKET_BUFFER);
    // Waits up to 30 s for the first datagram, then IDLE_END between them.
    socket.set_read_timeout(Some(Duration::from_secs(30)))?;
    // One buffer per call: with more, a blocking recvmmsg waits to fill
    // them all (up to the timeout), which would misdate the last arrival.
    // With GRO one call still takes up to 64 KiB of datagrams.
    let mut storage = vec![[0u8; 65536]; 1];
    let mut meta = [RecvMeta::default(); 1];
    let mut got = 0u64;
    let mut last = SystemTime::now();
    let mut bufs: Vec<IoSliceMut<'_>> = storage.iter_mut().map(|b| IoSliceMut::new(&mut b[..])).collect();
    while got < len {
        match state.recv((&socket).into(), &mut bufs, &mut meta) {
            Ok(n) => {
                got += meta[..n].iter().map(|m| m.len as u64).sum::<u64>();
                last = SystemTime::now();
                socket.set_read_timeout(Some(IDLE_END))?;
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => break,
            Err(e) => return Err(e.into()),
        }
    }
    if got == 0 {
        bail!("nothing arrived");
    }
    println!("received {got} {}", last.duration_since(UNIX_EPOCH)?.as_nanos());
    Ok(())
}
