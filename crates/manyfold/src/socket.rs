//! The UDP socket: binding with large kernel buffers (socket2), and batched
//! send and receive through quinn-udp (GSO and GRO where the kernel has
//! them, one datagram per call where it does not). [`RecvBatch`] holds the
//! receive buffers of one batched read and splits what it got into
//! datagrams, for the unicast driver and the multicast driver alike.

use std::collections::VecDeque;
use std::io::{self, IoSliceMut};
use std::net::{SocketAddr, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use bytes::{Bytes, BytesMut};
use quinn_udp::{RecvMeta, UdpSocketState, BATCH_SIZE};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// Kernel buffer size asked for in each direction. The kernel may cap it
/// (Linux: net.core.rmem_max / wmem_max); a smaller buffer only costs
/// throughput, so a refusal is not an error.
const SOCKET_BUFFER: usize = 8 << 20;

/// Largest UDP payload of one GSO send: the IPv4 total length field is 16
/// bits, and the kernel refuses (EMSGSIZE) a batch that exceeds it.
const MAX_GSO_BYTES: usize = 65_000;

/// Whether a send failed because the datagram is larger than the
/// interface's MTU allows (EMSGSIZE). quinn-udp sets DF on the socket
/// (`IP_PMTUDISC_PROBE`), so the kernel refuses such a datagram rather
/// than fragmenting it; path MTU discovery relies on that (spec §3.7).
pub(crate) fn is_too_large(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EMSGSIZE)
}

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

/// A bound socket with quinn-udp's state.
///
/// The socket is registered with the runtime for reading (and its error
/// queue) only. A UDP socket becomes writable again each time the kernel
/// frees one of its sent datagrams, so a registration for writing would
/// wake the runtime's poller once per datagram sent, on the sending
/// thread, for nothing: sends are tried at once, and only a driver whose
/// send was refused for lack of room waits for writability, through a
/// second registration of a duplicate descriptor that lives as long as
/// that wait ([`UdpIo::writable`]).
#[derive(Debug)]
pub(crate) struct UdpIo {
    socket: AsyncFd<std::net::UdpSocket>,
    /// A duplicate of the socket's descriptor, registered for writing
    /// only while a driver waits for room.
    room: OwnedFd,
    state: UdpSocketState,
    ipv6: bool,
}

impl UdpIo {
    /// Wraps a socket from [`bind`]; must run inside a tokio runtime.
    pub(crate) fn new(socket: std::net::UdpSocket) -> io::Result<Self> {
        let ipv6 = socket.local_addr()?.is_ipv6();
        let room = socket.as_fd().try_clone_to_owned()?;
        let state = UdpSocketState::new((&socket).into())?;
        // Deprecated for owners that may swap their descriptor; a
        // `std::net::UdpSocket` holds one for its whole life.
        #[allow(deprecated)]
        let socket = AsyncFd::with_interest(socket, Interest::READABLE | Interest::ERROR)?;
        Ok(UdpIo { socket, room, state, ipv6 })
    }

    /// The socket itself, for its options and address.
    pub(crate) fn get_ref(&self) -> &std::net::UdpSocket {
        self.socket.get_ref()
    }

    /// The socket's local address.
    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.get_ref().local_addr()
    }

    /// Waits until a datagram may be waiting (the next [`UdpIo::recv`]
    /// clears that when there was none).
    pub(crate) async fn readable(&self) -> io::Result<()> {
        self.socket.readable().await?.retain_ready();
        Ok(())
    }

    /// Waits until the socket's error queue may hold an error (ICMP).
    pub(crate) async fn error_ready(&self) -> io::Result<()> {
        self.socket.ready(Interest::ERROR).await?.retain_ready();
        Ok(())
    }

    /// Reads the error queue with `read` (which returns `WouldBlock` once
    /// it is empty; readiness is then cleared until the next error).
    pub(crate) fn try_error<R>(&self, read: impl FnOnce(&std::net::UdpSocket) -> io::Result<R>) -> io::Result<R> {
        self.socket.try_io(Interest::ERROR, read)
    }

    /// Waits until the socket has room for a datagram: for a sender whose
    /// last send was refused with `WouldBlock`. Registers the duplicate
    /// descriptor for writing for the length of the wait.
    pub(crate) async fn writable(&self) -> io::Result<()> {
        // As in `new`: the borrowed descriptor stays open for the wait.
        #[allow(deprecated)]
        let wait = AsyncFd::with_interest(self.room.as_fd(), Interest::WRITABLE)?;
        wait.writable().await?.retain_ready();
        Ok(())
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
    ///
    /// Where the kernel reads a batch at once (`recvmmsg`), a read that
    /// fills fewer buffers than it had found the queue empty: it clears the
    /// readiness there and then, as a `WouldBlock` would, instead of the
    /// driver asking again only to be told so (a wasted call per wake-up,
    /// a third of a sessions server's system calls). Nothing is missed: a
    /// datagram that arrives later raises a new readiness event (the
    /// registration is edge-triggered), and tokio clears only the readiness
    /// of the event this read followed.
    pub(crate) fn recv(&self, bufs: &mut [IoSliceMut<'_>], meta: &mut [RecvMeta]) -> io::Result<usize> {
        let batched = cfg!(any(target_os = "linux", target_os = "android")) && bufs.len() > 1;
        let mut short = 0;
        let read = self.socket.try_io(Interest::READABLE, |s| {
            let n = self.state.recv(s.into(), bufs, meta)?;
            if batched && n < bufs.len() {
                short = n;
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        match read {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && short > 0 => Ok(short),
            other => other,
        }
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
        self.state.try_send(self.get_ref().into(), &transmit)
    }

    /// Sends one datagram made of `head` then `tail` (spec §7.2: the engine
    /// left a large payload out of its buffer), as one `sendmsg` with two
    /// iovecs: the payload is not copied in user space.
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd", target_os = "netbsd"))]
    pub(crate) fn send_gathered(&self, destination: SocketAddr, head: &[u8], tail: &[u8]) -> io::Result<()> {
        use nix::sys::socket::{sendmsg, MsgFlags, SockaddrStorage};
        use std::io::IoSlice;
        let iov = [IoSlice::new(head), IoSlice::new(tail)];
        let addr = SockaddrStorage::from(self.to_socket_family(destination));
        let fd = self.socket.as_raw_fd();
        sendmsg(fd, &iov, &[], MsgFlags::empty(), Some(&addr)).map(|_| ()).map_err(io::Error::from)
    }

    /// Elsewhere: the two pieces joined, one datagram through quinn-udp.
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd", target_os = "netbsd")))]
    pub(crate) fn send_gathered(&self, destination: SocketAddr, head: &[u8], tail: &[u8]) -> io::Result<()> {
        self.send(destination, &[head, tail].concat(), None)
    }

    /// Sends single datagrams to their destinations in one `sendmmsg`
    /// call (at most [`crate::batch::MAX_BATCH`]); returns how many the
    /// kernel took, in order. An error means the first one was refused.
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd", target_os = "netbsd"))]
    pub(crate) fn send_many<'a>(&self, datagrams: impl Iterator<Item = (SocketAddr, &'a [u8])>) -> io::Result<usize> {
        use nix::sys::socket::{sendmmsg, MsgFlags, MultiHeaders, SockaddrStorage};
        use std::io::IoSlice;
        const N: usize = crate::batch::MAX_BATCH;
        let mut slices: [[IoSlice<'a>; 1]; N] = std::array::from_fn(|_| [IoSlice::new(&[])]);
        let mut addrs: [Option<SockaddrStorage>; N] = [None; N];
        let mut n = 0;
        for ((to, d), (slice, addr)) in datagrams.zip(slices.iter_mut().zip(addrs.iter_mut())) {
            *slice = [IoSlice::new(d)];
            *addr = Some(SockaddrStorage::from(self.to_socket_family(to)));
            n += 1;
        }
        if n == 0 {
            return Ok(0);
        }
        thread_local! {
            /// The message headers of `sendmmsg`, made once per thread
            /// rather than per call (three allocations each time). A call
            /// fills and passes only the first `n`.
            static HEADERS: std::cell::RefCell<MultiHeaders<SockaddrStorage>> =
                std::cell::RefCell::new(MultiHeaders::preallocate(N, None));
        }
        let fd = self.socket.as_raw_fd();
        HEADERS.with_borrow_mut(|headers| {
            let cmsgs: [nix::sys::socket::ControlMessage<'_>; 0] = [];
            sendmmsg(fd, headers, &slices[..n], &addrs[..n], cmsgs, MsgFlags::empty())
                .map(|sent| sent.count())
                .map_err(io::Error::from)
        })
    }

    /// Elsewhere: one `sendmsg` per datagram (quinn-udp), stopping at the
    /// first refusal.
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd", target_os = "netbsd")))]
    pub(crate) fn send_many<'a>(&self, datagrams: impl Iterator<Item = (SocketAddr, &'a [u8])>) -> io::Result<usize> {
        let mut n = 0;
        for (to, d) in datagrams {
            match self.send(to, d, None) {
                Ok(()) => n += 1,
                Err(e) if n == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(n)
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

/// The buffers of one batched read: `BATCH_SIZE` slots (recvmmsg where
/// available), each holding one datagram or, with GRO, several of one
/// stride coalesced by the kernel.
///
/// A slot holding one datagram that fills most of it can be handed to the
/// engine whole ([`RecvBatch::take_owned`]), which may keep slices of it
/// instead of copying its payload (spec §7.2); the slot gets a buffer the
/// engine has released, or a new one.
#[derive(Debug)]
pub(crate) struct RecvBatch {
    slots: Vec<BytesMut>,
    slot_len: usize,
    metas: [RecvMeta; BATCH_SIZE],
    /// Buffers handed over whole, oldest first, to be reused once the engine
    /// lets go of them (at most `MAX_LENT` remembered).
    lent: VecDeque<Bytes>,
    /// Buffers the engine let go of beyond the one reused, at most `SPARE`:
    /// more are freed, so that a burst of held buffers is not kept after.
    spare: Vec<BytesMut>,
}

/// Free buffers a [`RecvBatch`] keeps for the next datagrams: four reads'
/// worth (8 MiB of 64 KiB slots). An application reads in bursts and lets
/// go of a read's worth of buffers at once; with 8 kept, two of three
/// datagrams of a 1 GiB loopback transfer got a new zeroed buffer
/// (memset and page faults: 8% of the receiver's CPU, RESULTS §40), with
/// one read's worth still one in five.
const SPARE: usize = 4 * BATCH_SIZE;

/// Buffers handed over that a [`RecvBatch`] remembers for reuse: at 64 KiB
/// each, 64 MiB, a default receive window's worth.
const MAX_LENT: usize = 1024;

impl RecvBatch {
    /// `BATCH_SIZE` slots of `slot_len` bytes each. A GRO batch larger than
    /// a slot makes the read fail (EMSGSIZE); without GRO a slot needs one
    /// datagram.
    pub(crate) fn new(slot_len: usize) -> Self {
        RecvBatch {
            slots: (0..BATCH_SIZE).map(|_| BytesMut::zeroed(slot_len)).collect(),
            slot_len,
            metas: [RecvMeta::default(); BATCH_SIZE],
            lent: VecDeque::new(),
            spare: Vec::new(),
        }
    }

    /// One non-blocking receive call into every slot; returns how many
    /// slots were filled (`WouldBlock` when nothing is waiting).
    pub(crate) fn read(&mut self, io: &UdpIo) -> io::Result<usize> {
        let mut slots = self.slots.iter_mut();
        let mut bufs: [IoSliceMut<'_>; BATCH_SIZE] =
            std::array::from_fn(|_| IoSliceMut::new(slots.next().expect("BATCH_SIZE slots")));
        io.recv(&mut bufs, &mut self.metas)
    }

    /// What the first `n` slots of the last read hold, each with its source
    /// (mutable: a protected session's datagrams are opened in place, spec
    /// §19.7).
    pub(crate) fn slots(&mut self, n: usize) -> impl Iterator<Item = RecvSlot<'_>> {
        let slot_len = self.slot_len;
        self.slots.iter_mut().zip(self.metas.iter()).take(n).map(move |(slot, meta)| filled(slot, meta, slot_len))
    }

    /// Slot `i` of the last read (`i` below what it returned).
    pub(crate) fn slot(&mut self, i: usize) -> RecvSlot<'_> {
        filled(&mut self.slots[i], &self.metas[i], self.slot_len)
    }

    /// The source of slot `i` of the last read, canonical.
    pub(crate) fn source(&self, i: usize) -> SocketAddr {
        canonical(self.metas[i].addr)
    }

    /// The datagrams of the first `n` slots, with their sources.
    pub(crate) fn datagrams(&mut self, n: usize) -> impl Iterator<Item = (SocketAddr, &mut [u8])> + '_ {
        self.slots(n).flat_map(|slot| {
            let from = slot.from;
            slot.datagrams().map(move |d| (from, d))
        })
    }

    /// Slot `i` of the last read as one owned datagram, if it holds one
    /// datagram of at least half the slot (so that whatever the engine
    /// keeps of it holds little more memory than it carries); the slot gets
    /// another buffer. `None` leaves the slot as it is.
    pub(crate) fn take_owned(&mut self, i: usize) -> Option<Bytes> {
        let meta = self.metas.get(i)?;
        let len = meta.len.min(self.slot_len);
        let single = meta.stride == 0 || meta.stride >= len;
        if !single || 2 * len < self.slot_len {
            return None;
        }
        let fresh = self.reclaim().unwrap_or_else(|| BytesMut::zeroed(self.slot_len));
        let whole = std::mem::replace(&mut self.slots[i], fresh).freeze();
        if self.lent.len() == MAX_LENT {
            self.lent.pop_front();
        }
        self.lent.push_back(whole.clone());
        Some(whole.slice(..len))
    }

    /// A buffer handed over that nothing else holds any more. The oldest
    /// are looked at until four still held were passed (those go to the
    /// back: a stream the application does not read does not stop the
    /// reuse of the others); of the free ones, one is reused, up to
    /// `SPARE` are kept and the rest freed.
    fn reclaim(&mut self) -> Option<BytesMut> {
        let mut held_passed = 0;
        while held_passed < 4 {
            let Some(oldest) = self.lent.pop_front() else { break };
            match oldest.try_into_mut() {
                Ok(buf) if buf.len() == self.slot_len && self.spare.len() < SPARE => self.spare.push(buf),
                Ok(_) => {}
                Err(held) => {
                    self.lent.push_back(held);
                    held_passed += 1;
                }
            }
        }
        self.spare.pop()
    }
}

/// What `meta` says `slot` holds.
fn filled<'a>(slot: &'a mut [u8], meta: &RecvMeta, slot_len: usize) -> RecvSlot<'a> {
    let buf = &mut slot[..meta.len.min(slot_len)];
    let stride = if meta.stride == 0 { buf.len().max(1) } else { meta.stride };
    RecvSlot { from: canonical(meta.addr), buf, stride }
}

/// One filled slot of a [`RecvBatch`]: the bytes from one source, one
/// datagram or a GRO batch of them.
#[derive(Debug)]
pub(crate) struct RecvSlot<'a> {
    /// The source, canonical (see [`canonical`]).
    pub(crate) from: SocketAddr,
    buf: &'a mut [u8],
    stride: usize,
}

impl<'a> RecvSlot<'a> {
    /// Whether the kernel coalesced several datagrams into this slot (GRO).
    pub(crate) fn coalesced(&self) -> bool {
        self.buf.len() > self.stride
    }

    /// The slot split into its datagrams (all of one stride; the last may
    /// be shorter).
    pub(crate) fn datagrams(self) -> std::slice::ChunksMut<'a, u8> {
        self.buf.chunks_mut(self.stride)
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

    /// A read that finds fewer datagrams than it has buffers ends the
    /// socket's readiness at once, and the next datagram raises it again:
    /// each of a run of single datagrams wakes the reader, none is left
    /// waiting in the socket.
    #[tokio::test]
    async fn a_short_read_leaves_the_next_datagram_to_wake_the_reader() {
        let io = UdpIo::new(bind("127.0.0.1:0".parse().expect("literal"), false).expect("bind")).expect("io");
        let to = io.local_addr().expect("local addr");
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind peer");
        let mut batch = RecvBatch::new(1 << 16);
        for i in 0..20u8 {
            peer.send_to(&[i; 10], to).expect("send");
            let got = tokio::time::timeout(std::time::Duration::from_secs(5), async {
                loop {
                    io.readable().await.expect("readable");
                    match batch.read(&io) {
                        Ok(n) => break batch.datagrams(n).map(|(_, d)| d.to_vec()).collect::<Vec<_>>(),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                        Err(e) => panic!("receive failed: {e}"),
                    }
                }
            })
            .await
            .unwrap_or_else(|_| panic!("datagram {i} did not wake the reader"));
            assert_eq!(got, vec![vec![i; 10]]);
        }
    }

    /// Waiting for room registers the socket's duplicate for that wait only:
    /// a socket with room answers at once, again and again (a registration
    /// left behind would make the next one fail), and a datagram sent
    /// meanwhile still arrives.
    #[tokio::test]
    async fn a_wait_for_room_ends_at_once_on_a_socket_with_room_and_can_repeat() {
        let io = UdpIo::new(bind("127.0.0.1:0".parse().expect("literal"), false).expect("bind")).expect("io");
        let to = io.local_addr().expect("local addr");
        for _ in 0..3 {
            tokio::time::timeout(std::time::Duration::from_secs(5), io.writable())
                .await
                .expect("a socket with room is writable at once")
                .expect("registration");
        }
        io.send(to, b"after", None).expect("send");
        let mut batch = RecvBatch::new(1 << 16);
        let got = loop {
            io.readable().await.expect("readable");
            match batch.read(&io) {
                Ok(n) => break batch.datagrams(n).map(|(_, d)| d.to_vec()).collect::<Vec<_>>(),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => panic!("receive failed: {e}"),
            }
        };
        assert_eq!(got, vec![b"after".to_vec()]);
    }

    /// Three datagrams (the last shorter, so GRO may coalesce them into one
    /// slot) come out of a batch as three, in order, from their source.
    #[tokio::test]
    async fn a_batch_splits_into_its_datagrams() {
        let io = UdpIo::new(bind("127.0.0.1:0".parse().expect("literal"), false).expect("bind")).expect("io");
        let to = io.local_addr().expect("local addr");
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind peer");
        let sent: [&[u8]; 3] = [&[1; 100], &[2; 100], &[3; 40]];
        for d in sent {
            peer.send_to(d, to).expect("send");
        }
        let mut batch = RecvBatch::new(1 << 16);
        let mut got: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        while got.len() < sent.len() {
            io.readable().await.expect("readable");
            match batch.read(&io) {
                Ok(n) => got.extend(batch.datagrams(n).map(|(from, d)| (from, d.to_vec()))),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => panic!("receive failed: {e}"),
            }
        }
        let from = peer.local_addr().expect("peer addr");
        let want: Vec<(SocketAddr, Vec<u8>)> = sent.iter().map(|d| (from, d.to_vec())).collect();
        assert_eq!(got, want);
    }

    /// A datagram filling most of its slot is handed over whole; the slot's
    /// buffer comes back once the engine let go of it, no more than `SPARE`
    /// free buffers are kept after a burst, and a small datagram stays in
    /// its slot (spec §7.2).
    #[tokio::test]
    async fn a_full_slot_is_handed_over_and_its_buffer_reused_once_released() {
        let io = UdpIo::new(bind("127.0.0.1:0".parse().expect("literal"), false).expect("bind")).expect("io");
        let to = io.local_addr().expect("local addr");
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind peer");
        let slot_len = 16_384;
        let mut batch = RecvBatch::new(slot_len);
        async fn read_one(batch: &mut RecvBatch, io: &UdpIo, peer: &std::net::UdpSocket, to: SocketAddr, d: &[u8]) {
            peer.send_to(d, to).expect("send");
            loop {
                io.readable().await.expect("readable");
                match batch.read(io) {
                    Ok(n) => {
                        assert_eq!(n, 1);
                        return;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => panic!("receive failed: {e}"),
                }
            }
        }
        read_one(&mut batch, &io, &peer, to, &[1; 10_000]).await;
        let first = batch.take_owned(0).expect("10,000 of 16,384 bytes");
        assert_eq!(&first[..], &[1; 10_000][..]);
        let at = first.as_ptr();
        read_one(&mut batch, &io, &peer, to, &[2; 12_000]).await;
        let held = batch.take_owned(0).expect("12,000 bytes");
        assert_ne!(held.as_ptr(), at, "the first buffer is still held");
        drop(first);
        read_one(&mut batch, &io, &peer, to, &[3; 9_000]).await;
        let third = batch.take_owned(0).expect("9,000 bytes");
        assert_eq!(&third[..], &[3; 9_000][..]);
        // The released buffer replaced the third's in the slot.
        read_one(&mut batch, &io, &peer, to, &[5; 16_000]).await;
        let fourth = batch.take_owned(0).expect("16,000 bytes");
        assert_eq!(fourth.as_ptr(), at, "the first buffer, released, was reused");
        assert_eq!(&fourth[..], &[5; 16_000][..]);
        assert_eq!(&held[..], &[2; 12_000][..], "a held buffer is never reused");
        // A burst held, then released: only SPARE free buffers stay.
        let mut burst = Vec::new();
        for _ in 0..SPARE + 20 {
            read_one(&mut batch, &io, &peer, to, &[6; 15_000]).await;
            burst.push(batch.take_owned(0).expect("15,000 bytes"));
        }
        drop((burst, held, third, fourth));
        read_one(&mut batch, &io, &peer, to, &[7; 15_000]).await;
        let last = batch.take_owned(0).expect("15,000 bytes");
        assert!(
            batch.spare.len() < SPARE && batch.lent.len() <= 1,
            "{} spare, {} lent",
            batch.spare.len(),
            batch.lent.len()
        );
        drop(last);
        read_one(&mut batch, &io, &peer, to, &[4; 1_000]).await;
        assert!(batch.take_owned(0).is_none(), "a small datagram is not worth its slot");
        assert_eq!(batch.datagrams(1).next().map(|(_, d)| d.len()), Some(1_000));
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
