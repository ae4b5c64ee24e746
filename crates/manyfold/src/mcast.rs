//! Multicast file replication over real sockets (spec §16): drives the
//! sans-IO [`McastSender`] and [`McastReceiver`] with tokio, over IPv4 or
//! IPv6 groups; a sender's admission of receivers and a receiver's
//! session after session (spec §16.10) are here too.
//!
//! Each side has two sockets: a **unicast** one on an ephemeral port, from
//! which it sends everything and on which the other side's unicast replies
//! arrive, and a **group** one bound to the group's address and port and
//! joined to it, on which it hears multicast. So several receivers can run
//! on one host (tests, loopback), each with its own unicast port.

use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use manyfold_proto::mcast::{McPacket, McastReceiver, McastSender, ReceiverEvent};
use manyfold_proto::wire::{Flags, Header, PacketType};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::sync::watch;

use crate::socket::{RecvBatch, UdpIo};

pub use manyfold_proto::mcast::{network_of, ReceiverOutcome, ReceiverReport, SenderError, WindowRecord};
/// The session's settings and announcement, so that `manyfold::mcast` is all a
/// program needs.
pub use manyfold_proto::mcast::{Announcement, ReceiverConfig, ReceiverStats, SenderConfig, SenderEvent, SenderStats};
pub use manyfold_proto::wire::ErrorCode;

/// The codes of [`ReceiveOutcome::Ended`] as numbers: [`ErrorCode`]'s
/// (spec §8.3, §16.7), for `match` arms.
pub mod codes {
    use manyfold_proto::wire::ErrorCode;

    /// The sender refused this receiver (its table of receivers is full).
    pub const REFUSED: u16 = ErrorCode::REFUSED.0;
    /// One side protects its packets and the other does not (spec §19.7).
    pub const PROTECTION_MISMATCH: u16 = ErrorCode::PROTECTION_MISMATCH.0;
    /// The receiver's key was not accepted (spec §19.7).
    pub const AUTHENTICATION_FAILED: u16 = ErrorCode::AUTHENTICATION_FAILED.0;
    /// The sender was interrupted (a signal) and ended the session.
    pub const INTERRUPTED: u16 = ErrorCode::INTERRUPTED.0;
    /// The receiver's whole-file hash did not match.
    pub const HASH_MISMATCH: u16 = ErrorCode::HASH_MISMATCH.0;
    /// Dropped: still missing packets at the completion timeout.
    pub const INCOMPLETE: u16 = ErrorCode::INCOMPLETE.0;
    /// Dropped: nothing heard from it for `receiver_timeout`.
    pub const UNRESPONSIVE: u16 = ErrorCode::UNRESPONSIVE.0;
    /// Dropped: more repair passes than `max_repair_passes`.
    pub const TOO_MANY_PASSES: u16 = ErrorCode::TOO_MANY_PASSES.0;
    /// Dropped: reported loss above `max_loss`.
    pub const TOO_LOSSY: u16 = ErrorCode::TOO_LOSSY.0;
    /// Dropped: it held the session below `min_rate` (spec §16.7).
    pub const TOO_SLOW: u16 = ErrorCode::TOO_SLOW.0;
    /// The sender gave up the whole session.
    pub const ABORTED: u16 = ErrorCode::ABORTED.0;
}

/// Where the session runs.
#[derive(Debug, Clone)]
pub struct McastNet {
    /// The multicast group and port: IPv4 (224.0.0.0/4) or IPv6 (ff00::/8).
    pub group: SocketAddr,
    /// The interface to send and join on (by name); default: the routing
    /// table's choice.
    pub iface: Option<String>,
    /// Hops multicast may cross (IP_MULTICAST_TTL, IPV6_MULTICAST_HOPS).
    pub ttl: u32,
    /// Local address of the unicast socket (port 0: any); of the group's
    /// family.
    pub bind: SocketAddr,
}

impl McastNet {
    /// The group with the defaults: the routing table's interface, TTL 1
    /// (this network only), any local address of the group's family.
    pub fn new(group: impl Into<SocketAddr>) -> Self {
        let group = group.into();
        let any = match group {
            SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        };
        McastNet { group, iface: None, ttl: 1, bind: SocketAddr::new(any, 0) }
    }

    fn check(&self) -> io::Result<()> {
        if !self.group.ip().is_multicast() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                match self.group.ip() {
                    IpAddr::V4(ip) => format!("{ip} is not an IPv4 multicast address (224.0.0.0/4)"),
                    IpAddr::V6(ip) => format!("{ip} is not an IPv6 multicast address (ff00::/8)"),
                },
            ));
        }
        if self.group.is_ipv4() != self.bind.is_ipv4() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the local address {} is not of the group {}'s family", self.bind, self.group),
            ));
        }
        if self.group.port() == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "the group needs a port other than 0"));
        }
        Ok(())
    }
}

/// The interface index of `name` (Linux: /sys/class/net/NAME/ifindex).
fn ifindex(name: &str) -> io::Result<u32> {
    let path = format!("/sys/class/net/{name}/ifindex");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| io::Error::new(io::ErrorKind::NotFound, format!("no network interface named {name:?}: {e}")))?;
    text.trim()
        .parse()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("unreadable interface index in {path}")))
}

struct Sockets {
    unicast: UdpIo,
    group: UdpIo,
}

/// Which side of a session opens the sockets: a sender's group socket
/// takes only the receivers' feedback (spec §16.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Sender,
    Receiver,
}

/// A socket filter (classic BPF) that drops DATA and PARITY packets in the
/// kernel: a sender's group socket gets its own multicast back
/// (`IP_MULTICAST_LOOP`, on so that receivers on the sender's host get
/// the data), 8,000 datagrams a second at 100 Mbit/s that it would copy
/// out, check and throw away (RESULTS §36). A UDP socket's filter sees the
/// UDP header at offset 0, so the packet type is the low nibble of byte 8
/// (spec §3.1). Sealed packets (spec §19.7) hide their type and pass.
fn feedback_only(sock: &Socket) -> io::Result<()> {
    const UDP_HEADER: u32 = 8;
    let op = |code: u32, jt: u8, jf: u8, k: u32| libc::sock_filter { code: code as u16, jt, jf, k };
    let program = [
        op(libc::BPF_LD | libc::BPF_B | libc::BPF_ABS, 0, 0, UDP_HEADER),
        op(libc::BPF_ALU | libc::BPF_AND | libc::BPF_K, 0, 0, 0x0f),
        op(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, 2, 0, PacketType::McData as u32),
        op(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, 1, 0, PacketType::McParity as u32),
        op(libc::BPF_RET | libc::BPF_K, 0, 0, u32::MAX),
        op(libc::BPF_RET | libc::BPF_K, 0, 0, 0),
    ];
    sock.attach_filter(&program)
}

/// Sends one datagram, or a GSO batch of `seg`-byte datagrams (the last may
/// be shorter), waiting for room in the socket. A batch the kernel refuses
/// goes again one datagram at a time.
async fn send_io(io: &UdpIo, dest: SocketAddr, contents: &[u8], seg: Option<usize>) -> io::Result<()> {
    loop {
        match io.send(dest, contents, seg) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => io.writable().await?,
            Err(e) => match seg {
                Some(seg) if io.gso_disabled() => {
                    for d in contents.chunks(seg) {
                        Box::pin(send_io(io, dest, d, None)).await?;
                    }
                    return Ok(());
                }
                _ => return Err(e),
            },
        }
    }
}

/// Longest a receiver whose sink failed before it registered keeps
/// registering, so that its departure reaches the sender (spec §16.7).
const LEAVE_AFTER_REGISTER: Duration = Duration::from_secs(2);

/// A slot of a multicast receive batch holds a GRO batch: up to 64
/// datagrams (UDP_GRO_CNT_MAX) of up to ~1.5 KB, more than 64 KiB; a
/// smaller slot makes the read fail with EMSGSIZE.
const RECV_SLOT: usize = 1 << 17;

/// Waits for and reads a batch into `batch`; returns how many slots were
/// filled. A failed read (a GRO batch larger than a slot: EMSGSIZE; an
/// ICMP error queued on the socket) loses what it held, which repair
/// recovers; only a run of failures is an error.
async fn recv_io(batch: &mut RecvBatch, io: &UdpIo) -> io::Result<usize> {
    let mut failures = 0;
    loop {
        io.readable().await?;
        match batch.read(io) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) if failures < 1_000 => {
                failures += 1;
                tracing::debug!(error = %e, "multicast receive failed; datagrams lost");
            }
            Err(e) => return Err(e),
        }
    }
}

/// A side's two receive paths, its unicast socket and its group socket:
/// `recv` reads from whichever is readable first, `datagrams` yields what
/// that read got.
struct Inbound {
    unicast: RecvBatch,
    group: RecvBatch,
    from_group: bool,
}

impl Inbound {
    fn new() -> Self {
        Inbound { unicast: RecvBatch::new(RECV_SLOT), group: RecvBatch::new(RECV_SLOT), from_group: false }
    }

    async fn recv(&mut self, socks: &Sockets) -> io::Result<usize> {
        let (from_group, n) = tokio::select! {
            r = recv_io(&mut self.unicast, &socks.unicast) => (false, r?),
            r = recv_io(&mut self.group, &socks.group) => (true, r?),
        };
        self.from_group = from_group;
        Ok(n)
    }

    fn datagrams(&mut self, n: usize) -> impl Iterator<Item = (SocketAddr, &mut [u8])> + '_ {
        if self.from_group { &mut self.group } else { &mut self.unicast }.datagrams(n)
    }

    /// What is already queued on either socket (the group's first),
    /// without waiting: `None` when neither has a datagram ready.
    fn try_recv(&mut self, socks: &Sockets) -> Option<usize> {
        for from_group in [true, false] {
            let (batch, io) =
                if from_group { (&mut self.group, &socks.group) } else { (&mut self.unicast, &socks.unicast) };
            match batch.read(io) {
                Ok(n) => {
                    self.from_group = from_group;
                    return Some(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The blocking path (`recv`) counts and reports failures.
                Err(e) => tracing::debug!(error = %e, "multicast receive failed; datagrams lost"),
            }
        }
        None
    }
}

/// Most receive batches read in one go before the receiver's timers run
/// and its feedback goes (spec §16.4): bounded, so that a flood cannot
/// keep it from sending.
const DRAIN_BATCHES: usize = 64;

/// What the receiver's loop feeds each datagram read to: the engine, and
/// the sink through the coalescer (unless the sink already failed).
struct Taker<'a> {
    r: &'a mut McastReceiver,
    skip: &'a HashSet<u32>,
    writes: &'a mut Coalescer,
    sink: &'a mut (dyn McastSink + Send),
    error: &'a mut Option<io::Error>,
    described: &'a mut bool,
}

/// Tells `sink` of the session before its first write: the engine takes a
/// session's data only once it is described, but the event that says so is
/// handled after a drain that may already have flushed data (several
/// batches read at once, spec §16.4). `announced` may come again.
fn describe_first(r: &McastReceiver, sink: &mut (dyn McastSink + Send), described: &mut bool) -> io::Result<()> {
    if !*described {
        if let Some(info) = r.announcement() {
            sink.announced(info)?;
            *described = true;
        }
    }
    Ok(())
}

impl Taker<'_> {
    /// The `n` slots `inbound` just read.
    fn absorb(&mut self, inbound: &mut Inbound, n: usize) {
        let now = Instant::now();
        for (from, d) in inbound.datagrams(n) {
            if !self.skip.is_empty() && Header::peek(d).is_some_and(|h| self.skip.contains(&h.conn_id)) {
                continue;
            }
            if let Some(del) = self.r.handle_datagram(now, from, d) {
                if self.error.is_some() {
                    continue;
                }
                let pushed = describe_first(self.r, self.sink, self.described)
                    .and_then(|()| self.writes.push(self.sink, del.offset, &d[del.payload]));
                if let Err(e) = pushed {
                    *self.error = Some(e);
                }
            }
        }
    }

    /// What is already queued, up to `DRAIN_BATCHES` reads.
    fn drain(&mut self, inbound: &mut Inbound, socks: &Sockets) {
        for _ in 0..DRAIN_BATCHES {
            let Some(n) = inbound.try_recv(socks) else { break };
            self.absorb(inbound, n);
        }
    }
}

/// Joins writes of consecutive bytes into one (a receiver gets a window's
/// packets in order, so most of them coalesce).
struct Coalescer {
    offset: u64,
    buf: Vec<u8>,
}

impl Coalescer {
    const MAX: usize = 1 << 20;

    fn push(&mut self, sink: &mut (dyn McastSink + Send), offset: u64, data: &[u8]) -> io::Result<()> {
        if !self.buf.is_empty()
            && (offset != self.offset + self.buf.len() as u64 || self.buf.len() + data.len() > Self::MAX)
        {
            self.flush(sink)?;
        }
        if self.buf.is_empty() {
            self.offset = offset;
        }
        self.buf.extend_from_slice(data);
        Ok(())
    }

    fn flush(&mut self, sink: &mut dyn McastSink) -> io::Result<()> {
        if !self.buf.is_empty() {
            sink.write_at(self.offset, &self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }
}

fn open(net: &McastNet, side: Side) -> io::Result<Sockets> {
    net.check()?;
    let ctx = |what: &str, e: io::Error| io::Error::new(e.kind(), format!("{what}: {e}"));
    let index = net.iface.as_deref().map(ifindex).transpose()?;
    let domain = if net.group.is_ipv4() { Domain::IPV4 } else { Domain::IPV6 };

    let uni = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    if let Some(name) = &net.iface {
        uni.bind_device(Some(name.as_bytes())).map_err(|e| ctx(&format!("cannot send on interface {name}"), e))?;
    }
    if net.group.is_ipv4() {
        uni.set_multicast_ttl_v4(net.ttl)?;
        uni.set_multicast_loop_v4(true)?;
    } else {
        uni.set_only_v6(true)?;
        uni.set_multicast_hops_v6(net.ttl)?;
        uni.set_multicast_loop_v6(true)?;
        if let Some(i) = index {
            uni.set_multicast_if_v6(i)?;
        }
    }
    let _ = uni.set_send_buffer_size(8 << 20);
    let _ = uni.set_recv_buffer_size(8 << 20);
    uni.bind(&net.bind.into()).map_err(|e| ctx(&format!("cannot bind {}", net.bind), e))?;
    uni.set_nonblocking(true)?;
    let uni: std::net::UdpSocket = uni.into();

    let grp = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    grp.set_reuse_address(true)?;
    grp.set_reuse_port(true)?;
    let _ = grp.set_recv_buffer_size(8 << 20);
    let join_err = |e| ctx(&format!("cannot join {} (is there a multicast route?)", net.group.ip()), e);
    match net.group {
        SocketAddr::V4(g) => {
            grp.bind(&net.group.into()).map_err(|e| ctx(&format!("cannot bind the group {}", net.group), e))?;
            let iface = match index {
                Some(i) => socket2::InterfaceIndexOrAddress::Index(i),
                None => socket2::InterfaceIndexOrAddress::Address(Ipv4Addr::UNSPECIFIED),
            };
            grp.join_multicast_v4_n(g.ip(), &iface).map_err(join_err)?;
        }
        SocketAddr::V6(g) => {
            grp.set_only_v6(true)?;
            // Bound to the group: only its datagrams, not other groups'
            // on the same port (Linux filters by the bound address).
            grp.bind(&net.group.into()).map_err(|e| ctx(&format!("cannot bind the group {}", net.group), e))?;
            grp.join_multicast_v6(g.ip(), index.unwrap_or(0)).map_err(join_err)?;
        }
    }
    if side == Side::Sender {
        // Only a saving: the engine ignores DATA and PARITY anyway, so a
        // kernel without socket filters still runs the session.
        let _ = feedback_only(&grp);
    }
    grp.set_nonblocking(true)?;
    let grp: std::net::UdpSocket = grp.into();
    // No IP_RECVERR here (only connection endpoints enable it): a
    // session learns of departures from its own packets (spec §16.7).
    Ok(Sockets { unicast: UdpIo::new(uni)?, group: UdpIo::new(grp)? })
}

/// Where a sender's bytes come from: a file, or anything that reads at an
/// offset (the CLI's directory bundle, spec §16.10). A short read past
/// the end is the end.
pub trait McastSource {
    /// Copies the bytes at `offset` into `out`; returns how many (0: the end).
    fn copy_at(&self, offset: u64, out: &mut [u8]) -> io::Result<usize>;
}

impl McastSource for File {
    fn copy_at(&self, offset: u64, out: &mut [u8]) -> io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(self, out, offset)
    }
}

/// Which receivers a sender lets in (the CLI's `--hosts`): asked with the
/// address and client id of each REGISTER (spec §16.8) before the engine
/// sees it. One refused is told at once (END with `REFUSED`) and never
/// joins.
pub trait Admission {
    /// Whether the receiver at `addr` with client id `client` may join.
    fn admits(&mut self, addr: SocketAddr, client: u32) -> bool;
}

/// Lets every receiver in (the engine's own limits aside).
#[derive(Debug, Clone, Copy, Default)]
pub struct AdmitAll;

impl Admission for AdmitAll {
    fn admits(&mut self, _: SocketAddr, _: u32) -> bool {
        true
    }
}

impl<F: FnMut(SocketAddr, u32) -> bool> Admission for F {
    fn admits(&mut self, addr: SocketAddr, client: u32) -> bool {
        self(addr, client)
    }
}

/// If `d` is a REGISTER that `admission` refuses, the END (ERR,
/// `REFUSED`) that tells its receiver, written into `out` (spec §16.8:
/// the refusal a full table gives, in the clear: the receiver has no key).
fn refusal(admission: &mut dyn Admission, from: SocketAddr, d: &[u8], out: &mut [u8]) -> Option<usize> {
    if Header::peek(d)?.ptype != PacketType::McRegister {
        return None;
    }
    let McPacket::Register { session, client, .. } = McPacket::parse(d).ok()? else { return None };
    if admission.admits(from, client) {
        return None;
    }
    manyfold_proto::mcast::wire::emit(out, PacketType::McEnd, Flags::ERR, session, 0, 0, client, |o| {
        manyfold_proto::mcast::wire::emit_code(o, ErrorCode::REFUSED)
    })
}

/// How a stream source grows (standard input spooled to a file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceGrowth {
    /// This many bytes can be read so far.
    Available(u64),
    /// The source ended at this size with this BLAKE3.
    Finished {
        /// The source's final size, bytes.
        size: u64,
        /// BLAKE3 of the whole source.
        hash: [u8; 32],
    },
}

/// What the sender reports while it runs and at the end.
#[derive(Debug, Clone)]
pub struct SenderView {
    /// The sender's counters (packets, repairs, feedback).
    pub stats: SenderStats,
    /// Every receiver that registered, with what it last reported and how it ended.
    pub receivers: Vec<ReceiverReport>,
    /// Packets sent once, and the total when known.
    pub progress: (u32, Option<u32>),
    /// Payload bytes per DATA packet.
    pub block: u16,
    /// The window now, in packets (spec §16.3).
    pub window: u32,
    /// The window's timer now.
    pub timeout: Duration,
    /// The feedback backoff bound receivers use now (`ARTP_max`, spec §16.4).
    pub artp_max: Duration,
    /// Since the sender started (announce phase included).
    pub elapsed: Duration,
    /// Since the data phase began (zero before).
    pub transfer: Duration,
    /// Windows so far (only the last `MAX_WINDOW_LOG` are kept).
    pub windows: Vec<WindowRecord>,
    /// Why the session failed, if it did (no receiver, all gone...).
    pub failed: Option<SenderError>,
}

const MAX_WINDOW_LOG: usize = 100_000;

fn view(
    s: &McastSender,
    start: Instant,
    data_start: Option<Instant>,
    windows: &[WindowRecord],
    failed: Option<SenderError>,
) -> SenderView {
    let (w, t) = s.window();
    SenderView {
        stats: s.stats(),
        receivers: s.receivers().to_vec(),
        progress: s.progress(),
        block: s.block(),
        window: w,
        timeout: t,
        artp_max: s.artp_max(),
        elapsed: start.elapsed(),
        transfer: data_start.map_or(Duration::ZERO, |t| t.elapsed()),
        windows: windows.to_vec(),
        failed,
    }
}

/// Sends `file` (described by `info`) to the group until every receiver is
/// done or dropped. `growth` feeds a stream's progress (spec §16.6).
/// `on_event` sees each engine event; `on_tick` gets a view every 100 ms.
///
/// # Errors
///
/// `InvalidInput` when the group is not an IPv4 multicast address or the
/// security configuration cannot authenticate; the OS's error when the
/// sockets cannot be opened, bound or joined, or the file cannot be read.
/// How the session went for each receiver is in the returned view, not an
/// error.
///
/// # Cancel safety
///
/// Not cancel safe: the session runs inside this future, with its own
/// sockets. Dropping it stops sending at once and closes the sockets,
/// without the END that tells receivers (they give up after their
/// `sender_timeout`). To stop early and tell them why, use
/// [`send_until`] with an `abort` future instead.
pub async fn send(
    net: &McastNet,
    cfg: SenderConfig,
    info: Announcement,
    source: impl McastSource,
    growth: Option<watch::Receiver<SourceGrowth>>,
    on_event: impl FnMut(&SenderEvent),
    on_tick: impl FnMut(&SenderView),
) -> io::Result<SenderView> {
    send_until(net, cfg, info, source, growth, std::future::pending(), on_event, on_tick).await
}

/// [`send`], ended early when `abort` resolves with a code (spec §16.7):
/// e.g. a SIGINT handler's future yielding [`ErrorCode::INTERRUPTED`].
/// The session's END with that code goes to every receiver at once, and
/// the view comes back with `failed: Some(SenderError::Aborted(code))`.
///
/// # Errors
///
/// As [`send`].
///
/// # Cancel safety
///
/// As [`send`]: resolve `abort` rather than dropping the future.
#[allow(clippy::too_many_arguments)]
pub async fn send_until(
    net: &McastNet,
    cfg: SenderConfig,
    info: Announcement,
    source: impl McastSource,
    growth: Option<watch::Receiver<SourceGrowth>>,
    abort: impl std::future::Future<Output = ErrorCode>,
    on_event: impl FnMut(&SenderEvent),
    on_tick: impl FnMut(&SenderView),
) -> io::Result<SenderView> {
    send_admitting(net, cfg, info, source, growth, AdmitAll, abort, on_event, on_tick).await
}

/// [`send_until`], letting in only the receivers `admission` admits (the
/// CLI's `--hosts`): a REGISTER it refuses gets END with `REFUSED` at
/// once and never reaches the engine, so it neither joins nor counts
/// towards `min_receivers`.
///
/// # Errors
///
/// As [`send`].
///
/// # Cancel safety
///
/// As [`send`]: resolve `abort` rather than dropping the future.
#[allow(clippy::too_many_arguments)]
pub async fn send_admitting(
    net: &McastNet,
    cfg: SenderConfig,
    info: Announcement,
    source: impl McastSource,
    mut growth: Option<watch::Receiver<SourceGrowth>>,
    mut admission: impl Admission,
    abort: impl std::future::Future<Output = ErrorCode>,
    mut on_event: impl FnMut(&SenderEvent),
    mut on_tick: impl FnMut(&SenderView),
) -> io::Result<SenderView> {
    tokio::pin!(abort);
    let mut aborted = false;
    let mut cfg = cfg;
    crate::endpoint::prepare_security(cfg.security.as_ref(), &mut cfg.crypto_seed)?;
    let socks = open(net, Side::Sender)?;
    let start = Instant::now();
    let group = net.group;
    let mut s = McastSender::new(cfg, group, info, start);
    let mut buf = vec![0u8; 65_536];
    let mut gso: Vec<u8> = Vec::with_capacity(65_536);
    let mut inbound = Inbound::new();
    let mut windows = Vec::new();
    let mut failed = None;
    let mut data_start = None;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut read_error: Option<io::Error> = None;
    let mut gso_seg: Option<usize> = None;
    loop {
        let now = Instant::now();
        loop {
            let mut source = |offset: u64, out: &mut [u8]| match source.copy_at(offset, out) {
                Ok(n) => n,
                Err(e) => {
                    read_error.get_or_insert(e);
                    0
                }
            };
            let Some(t) = s.poll_transmit(now, &mut buf, &mut source) else { break };
            if let Some(e) = read_error.take() {
                return Err(io::Error::new(e.kind(), format!("cannot read the source: {e}")));
            }
            // Datagrams to the group go out in GSO batches of equal size
            // (a shorter one ends a batch). Not when they may be routed
            // (TTL > 1): over veth a GSO batch reaches a Linux multicast
            // router whole, and ipmr drops what exceeds the MTU instead of
            // segmenting it (a NIC would have segmented it on the wire).
            let seg = gso_seg.unwrap_or(t.size);
            let fits = t.destination == group && t.size <= seg && gso.len() + t.size <= 65_000;
            if net.ttl > 1 {
                send_io(&socks.unicast, t.destination, &buf[..t.size], None).await?;
                continue;
            }
            if !gso.is_empty() && !fits {
                send_io(&socks.unicast, group, &gso, Some(gso_seg.expect("batch has a size"))).await?;
                gso.clear();
                gso_seg = None;
            }
            if t.destination == group {
                gso_seg.get_or_insert(t.size);
                gso.extend_from_slice(&buf[..t.size]);
                if t.size < gso_seg.expect("just set") || gso.len() / t.size >= socks.unicast.max_segments(t.size) {
                    send_io(&socks.unicast, group, &gso, gso_seg).await?;
                    gso.clear();
                    gso_seg = None;
                }
            } else {
                send_io(&socks.unicast, t.destination, &buf[..t.size], None).await?;
            }
        }
        if !gso.is_empty() {
            send_io(&socks.unicast, group, &gso, gso_seg).await?;
            gso.clear();
            gso_seg = None;
        }
        while let Some(e) = s.poll_event() {
            match &e {
                SenderEvent::Window(w) if windows.len() < MAX_WINDOW_LOG => windows.push(*w),
                SenderEvent::Failed(err) => failed = Some(*err),
                SenderEvent::DataStarted => data_start = Some(Instant::now()),
                _ => {}
            }
            on_event(&e);
        }
        if s.is_done() {
            return Ok(view(&s, start, data_start, &windows, failed));
        }
        let deadline = s.poll_timeout().unwrap_or(now + Duration::from_secs(1));
        // What a turn read (and refused) from the receivers.
        let mut refused = Vec::new();
        tokio::select! {
            r = inbound.recv(&socks) => {
                let n = r?;
                take_feedback(&mut s, &mut inbound, n, &mut admission, &mut buf, &mut refused);
                drain_feedback(&mut s, &mut inbound, &socks, &mut admission, &mut buf, &mut refused);
            }
            _ = tokio::time::sleep_until(deadline.into()) => {
                // spec §16.7: what the receivers said is read before the
                // timers run, or on a busy host their feedback waits in
                // the sockets behind this loop's sends until a receiver
                // that is speaking seems silent (RESULTS §36).
                drain_feedback(&mut s, &mut inbound, &socks, &mut admission, &mut buf, &mut refused);
                s.handle_timeout(Instant::now());
            }
            code = &mut abort, if !aborted => {
                // Its ENDs go out at the top of the loop, then `is_done`.
                aborted = true;
                s.abort(Instant::now(), code);
            }
            r = async { growth.as_mut().expect("guarded").changed().await }, if growth.is_some() => {
                match r {
                    Ok(()) => match *growth.as_ref().expect("guarded").borrow() {
                        SourceGrowth::Available(n) => s.extend(n),
                        SourceGrowth::Finished { size, hash } => s.finish_source(size, hash),
                    },
                    Err(_) => growth = None,
                }
            }
            _ = tick.tick() => on_tick(&view(&s, start, data_start, &windows, failed)),
        }
        for (to, end) in refused {
            send_io(&socks.unicast, to, &end, None).await?;
        }
    }
}

/// The sender takes the `n` datagrams `inbound` read; a registration the
/// admission refuses gets its END (queued in `refused`).
fn take_feedback(
    s: &mut McastSender,
    inbound: &mut Inbound,
    n: usize,
    admission: &mut dyn Admission,
    buf: &mut [u8],
    refused: &mut Vec<(SocketAddr, Vec<u8>)>,
) {
    let now = Instant::now();
    for (from, d) in inbound.datagrams(n) {
        match refusal(admission, from, d, buf) {
            Some(len) => refused.push((from, buf[..len].to_vec())),
            None => s.handle_datagram(now, from, d),
        }
    }
}

/// The sender reads what is already queued on both its sockets, at most
/// `DRAIN_BATCHES` batches, without waiting.
fn drain_feedback(
    s: &mut McastSender,
    inbound: &mut Inbound,
    socks: &Sockets,
    admission: &mut dyn Admission,
    buf: &mut [u8],
    refused: &mut Vec<(SocketAddr, Vec<u8>)>,
) {
    for _ in 0..DRAIN_BATCHES {
        let Some(n) = inbound.try_recv(socks) else { break };
        take_feedback(s, inbound, n, admission, buf, refused);
    }
}

/// Where a receiver puts the file (the CLI's temporary file, a device...).
pub trait McastSink {
    /// The session was described (again, if its size or hash became known).
    fn announced(&mut self, info: &Announcement) -> io::Result<()>;
    /// Stores `data` at `offset` of the file.
    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()>;
    /// Reads back stored bytes (FEC decoding needs a block's survivors).
    fn read_at(&mut self, offset: u64, out: &mut [u8]) -> io::Result<usize>;
    /// Every packet is held: check the whole file against the announced hash.
    fn verify(&mut self, info: &Announcement) -> io::Result<bool>;
}

/// Runs the sink's whole-file check on a thread of its own while this
/// one keeps the receiver alive (spec §16.7): its timers run, what they
/// send (STATUS every `status_interval`) goes out, and what arrives is
/// read, so that a long check (a large file, a slow disk, many receivers
/// of one host hashing at once) is not taken for a dead receiver by the
/// sender's `receiver_timeout`, nor a quiet sender for a lost one. Blocks
/// the calling task for the check's duration, as the check itself did.
/// Events the engine raises meanwhile wait for the caller's loop.
fn verify_alive(
    r: &mut McastReceiver,
    sink: &mut (dyn McastSink + Send),
    info: &Announcement,
    socks: &Sockets,
    inbound: &mut Inbound,
) -> io::Result<bool> {
    /// How often the check is looked at and the engine's timers run.
    const TURN: Duration = Duration::from_millis(20);
    std::thread::scope(|scope| {
        // The check says when it is done, so that a quick one (the hash
        // kept while writing) ends the wait at once, not a TURN later.
        let (done, finished) = std::sync::mpsc::sync_channel::<()>(1);
        let check = std::thread::Builder::new().name("mcast-verify".into()).spawn_scoped(scope, move || {
            let ok = sink.verify(info);
            let _ = done.send(());
            ok
        })?;
        let mut buf = vec![0u8; 65_536];
        while finished.recv_timeout(TURN) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
            let now = Instant::now();
            for (batch, io) in [(&mut inbound.unicast, &socks.unicast), (&mut inbound.group, &socks.group)] {
                // Non-blocking; every packet is held, so nothing to store.
                if let Ok(n) = batch.read(io) {
                    for (from, d) in batch.datagrams(n) {
                        r.handle_datagram(now, from, d);
                    }
                }
            }
            if r.poll_timeout().is_some_and(|t| t <= now) {
                r.handle_timeout(now);
            }
            while let Some(t) = r.poll_transmit(now, &mut buf) {
                // A full socket buffer loses one keep-alive; the next goes.
                let _ = socks.unicast.send(t.destination, &buf[..t.size], None);
            }
        }
        check.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// How a receiver's session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiveOutcome {
    /// The file is whole, its hash matched and the sender confirmed.
    Completed,
    /// Every packet came but the hash did not match.
    HashMismatch,
    /// The sender ended the session for us or for everyone, with this code.
    Ended {
        /// The sender's error code ([`codes`]), if it gave one.
        code: Option<u16>,
    },
    /// Nothing from the sender for the receiver's `sender_timeout`.
    SenderLost,
}

#[derive(Debug, Clone)]
/// What a receiver reports while it runs and at the end.
pub struct ReceiverView {
    /// The session's announcement, once heard.
    pub info: Option<Announcement>,
    /// The sender's unicast address, once heard.
    pub sender: Option<SocketAddr>,
    /// Packets held so far.
    pub held: u64,
    /// Packets in the file, when known.
    pub total: Option<u32>,
    /// The receiver's counters (first-hand, repaired, rebuilt, feedback).
    pub stats: ReceiverStats,
    /// Since the receiver started.
    pub elapsed: Duration,
    /// The last session heard but not joined, and why (spec §19.7).
    pub ignored: Option<(u32, manyfold_proto::mcast::Ignored)>,
    /// The session joined, once there is one.
    pub session: Option<u32>,
    /// This receiver's client id (spec §16.2).
    pub client: u32,
    /// Since the session was first described to this receiver (zero
    /// before): the session's time, without the wait for it.
    pub session_elapsed: Duration,
}

/// Receives one session from the group into `sink`. Returns how it ended.
/// A receiver with no session heard within `wait` fails with `TimedOut`.
///
/// # Errors
///
/// `TimedOut` as above; `InvalidInput` for a group that is not an IPv4
/// multicast address or a security configuration that cannot
/// authenticate; the OS's error when the sockets cannot be opened, bound
/// or joined; the sink's error when it cannot store what arrived. A
/// session that ended badly (dropped by the sender, sender lost) is a
/// [`ReceiveOutcome`], not an error.
///
/// # Cancel safety
///
/// Not cancel safe: the session runs inside this future. Dropping it
/// closes the sockets without telling the sender (which drops this
/// receiver after its `receiver_timeout`), and data received but not yet
/// written to `sink` is lost. To leave early, tell the sender and keep
/// what arrived, use [`receive_until`] with an `abort` future instead.
pub async fn receive(
    net: &McastNet,
    cfg: ReceiverConfig,
    sink: &mut (dyn McastSink + Send),
    wait: Option<Duration>,
    on_tick: impl FnMut(&ReceiverView),
) -> io::Result<(ReceiveOutcome, ReceiverView)> {
    receive_until(net, cfg, sink, wait, std::future::pending(), on_tick).await
}

/// [`receive`], left early when `abort` resolves with a code (spec §16.7):
/// e.g. a SIGINT handler's future yielding [`ErrorCode::INTERRUPTED`]. The
/// sender is told at once (this receiver's registration ends with that
/// code, so it stops awaiting it and reports why), what arrived is
/// flushed to `sink`, and the call fails with `ErrorKind::Interrupted`.
///
/// # Errors
///
/// `Interrupted` once `abort` resolved; otherwise as [`receive`].
///
/// # Cancel safety
///
/// As [`receive`]: resolve `abort` rather than dropping the future.
pub async fn receive_until(
    net: &McastNet,
    cfg: ReceiverConfig,
    sink: &mut (dyn McastSink + Send),
    wait: Option<Duration>,
    abort: impl std::future::Future<Output = ErrorCode>,
    on_tick: impl FnMut(&ReceiverView),
) -> io::Result<(ReceiveOutcome, ReceiverView)> {
    receive_session(net, cfg, sink, wait, &mut HashSet::new(), abort, on_tick).await
}

/// [`receive_until`], deaf to the sessions in `done` (a daemon's sessions
/// already received, still announcing or ending for other receivers): it
/// joins the next session the group carries, and adds that session's id
/// to `done` however the call ends (completed, failed, refused), so the
/// next call does not join it again.
///
/// A sink that fails (cannot store, refuses what it was given) makes this
/// receiver leave the session with `APPLICATION` (spec §16.7), so the
/// sender knows at once, and the call fails with the sink's error.
///
/// # Errors
///
/// As [`receive_until`].
///
/// # Cancel safety
///
/// As [`receive`]: resolve `abort` rather than dropping the future.
pub async fn receive_session(
    net: &McastNet,
    cfg: ReceiverConfig,
    sink: &mut (dyn McastSink + Send),
    wait: Option<Duration>,
    done: &mut HashSet<u32>,
    abort: impl std::future::Future<Output = ErrorCode>,
    on_tick: impl FnMut(&ReceiverView),
) -> io::Result<(ReceiveOutcome, ReceiverView)> {
    let mut joined = None;
    let r = receive_inner(net, cfg, sink, wait, done, &mut joined, abort, on_tick).await;
    done.extend(joined);
    r
}

/// [`receive_session`]'s loop: `joined` follows the session joined.
#[allow(clippy::too_many_arguments)]
async fn receive_inner(
    net: &McastNet,
    cfg: ReceiverConfig,
    sink: &mut (dyn McastSink + Send),
    wait: Option<Duration>,
    skip: &HashSet<u32>,
    joined: &mut Option<u32>,
    abort: impl std::future::Future<Output = ErrorCode>,
    mut on_tick: impl FnMut(&ReceiverView),
) -> io::Result<(ReceiveOutcome, ReceiverView)> {
    tokio::pin!(abort);
    let mut aborted: Option<ErrorCode> = None;
    let mut cfg = cfg;
    crate::endpoint::prepare_security(cfg.security.as_ref(), &mut cfg.crypto_seed)?;
    let socks = open(net, Side::Receiver)?;
    let start = Instant::now();
    let mut r = McastReceiver::new(cfg, net.group);
    let mut buf = vec![0u8; 65_536];
    let mut inbound = Inbound::new();
    let mut writes = Coalescer { offset: 0, buf: Vec::with_capacity(Coalescer::MAX) };
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut outcome = None;
    let mut hash_ok = None;
    let heard_at = std::cell::Cell::new(None::<Instant>);
    let view = |r: &McastReceiver| {
        let (held, total) = r.progress();
        ReceiverView {
            info: r.announcement().cloned(),
            sender: r.sender(),
            held,
            total,
            stats: r.stats(),
            elapsed: start.elapsed(),
            ignored: r.ignored(),
            session: r.session_id(),
            client: r.client_id(),
            session_elapsed: heard_at.get().map_or(Duration::ZERO, |t| t.elapsed()),
        }
    };
    // The sink's failure, told to the sender before it is returned.
    let mut sink_error: Option<io::Error> = None;
    let mut described = false;
    let mut leave_by: Option<Instant> = None;
    loop {
        *joined = r.session_id();
        while let Some(e) = r.poll_event() {
            if sink_error.is_some() {
                continue;
            }
            match e {
                ReceiverEvent::Announced(info) => {
                    if heard_at.get().is_none() {
                        heard_at.set(Some(Instant::now()));
                    }
                    described = true;
                    if let Err(e) = sink.announced(&info) {
                        sink_error = Some(e);
                    }
                }
                ReceiverEvent::Complete => {
                    let info = r.announcement().cloned().expect("complete implies announced");
                    match verify_alive(&mut r, sink, &info, &socks, &mut inbound) {
                        Ok(ok) => {
                            hash_ok = Some(ok);
                            r.finish(ok);
                        }
                        Err(e) => sink_error = Some(e),
                    }
                }
                ReceiverEvent::Confirmed => {
                    outcome = Some(if hash_ok == Some(true) {
                        ReceiveOutcome::Completed
                    } else {
                        ReceiveOutcome::HashMismatch
                    });
                }
                ReceiverEvent::Ended { error } => outcome = Some(ReceiveOutcome::Ended { code: error.map(|c| c.0) }),
                ReceiverEvent::SenderLost => outcome = Some(ReceiveOutcome::SenderLost),
                ReceiverEvent::Registered { .. } => {}
            }
        }
        let now = Instant::now();
        if sink_error.is_some() && aborted.is_none() {
            // spec §16.7: the sender learns at once that we left. A sink
            // that failed on the session's description (a file that
            // exists, say) fails before we registered, and a sender hears
            // a departure only from a registered receiver: registering
            // goes on (storing nothing) for up to `LEAVE_AFTER_REGISTER`.
            let until = *leave_by.get_or_insert(now + LEAVE_AFTER_REGISTER);
            if r.is_registered() || r.session_id().is_none() || now >= until {
                aborted = Some(ErrorCode::APPLICATION);
                r.abort(now, ErrorCode::APPLICATION);
            }
        }
        while let Some(t) = r.poll_transmit(now, &mut buf) {
            send_io(&socks.unicast, t.destination, &buf[..t.size], None).await?;
        }
        if aborted.is_some() {
            if let Some(e) = sink_error {
                return Err(e);
            }
        }
        if let Some(code) = aborted {
            return Err(io::Error::new(
                io::ErrorKind::Interrupted,
                format!("left the session (error code {}); the sender was told", code.0),
            ));
        }
        if let Some(o) = outcome.take() {
            return Ok((o, view(&r)));
        }
        if let (Some(w), false) = (wait, r.is_registered()) {
            if start.elapsed() >= w {
                // A session heard but not joined says why (spec §19.7).
                let heard = match r.ignored() {
                    Some((session, why)) => format!("; heard session {session:08x} but did not join: {why}"),
                    None => String::new(),
                };
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no session joined on {} within {:.1} s{heard}", net.group, w.as_secs_f64()),
                ));
            }
        }
        let deadline = r.poll_timeout().unwrap_or(now + Duration::from_millis(200));
        // spec §16.4: everything already queued is read before the timers
        // run and the feedback goes: on a busy host the process wakes
        // after a stall with its backoff expired and a neighbour's ACK
        // waiting behind the data, which must suppress ours first.
        let mut take = Taker {
            r: &mut r,
            skip,
            writes: &mut writes,
            sink: &mut *sink,
            error: &mut sink_error,
            described: &mut described,
        };
        tokio::select! {
            res = inbound.recv(&socks) => {
                let n = res?;
                take.absorb(&mut inbound, n);
                take.drain(&mut inbound, &socks);
            }
            _ = tokio::time::sleep_until(deadline.into()) => {
                take.drain(&mut inbound, &socks);
                r.handle_timeout(Instant::now());
            }
            code = &mut abort, if aborted.is_none() => {
                // Its STATUS goes out at the top of the loop.
                aborted = Some(code);
                r.abort(Instant::now(), code);
            }
            _ = tick.tick() => on_tick(&view(&r)),
        }
        if sink_error.is_some() {
            continue;
        }
        // Stored before anything reads it back (parity, the final hash).
        if let Err(e) = writes.flush(sink) {
            sink_error = Some(e);
            continue;
        }
        // Blocks that parity made whole (spec §16.9).
        let mut read_error = None;
        let rebuilt = r.decode(&mut |offset, out| match sink.read_at(offset, out) {
            Ok(n) => n,
            Err(e) => {
                read_error.get_or_insert(e);
                0
            }
        });
        if let Some(e) = read_error {
            sink_error = Some(io::Error::new(e.kind(), format!("cannot read back stored data: {e}")));
            continue;
        }
        for (offset, bytes) in rebuilt {
            if let Err(e) = describe_first(&r, sink, &mut described).and_then(|()| sink.write_at(offset, &bytes)) {
                sink_error.get_or_insert(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sender's group socket filter lets feedback through and drops
    /// DATA and PARITY in the kernel (its own multicast looped back).
    #[test]
    fn a_senders_group_socket_takes_feedback_and_not_data_or_parity() {
        let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).expect("socket");
        sock.bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into()).expect("bind");
        feedback_only(&sock).expect("attach the filter");
        let sock: std::net::UdpSocket = sock.into();
        sock.set_nonblocking(true).expect("nonblocking");
        let to = sock.local_addr().expect("local addr");
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind peer");
        let packet = |t: PacketType, tag: u8| {
            let mut p = vec![tag; 64];
            p[0] = (1 << 4) | t as u8;
            p
        };
        let sent = [
            packet(PacketType::McData, 1),
            packet(PacketType::McAck, 2),
            packet(PacketType::McParity, 3),
            packet(PacketType::McNack, 4),
            packet(PacketType::McData, 5),
            packet(PacketType::McStatus, 6),
            packet(PacketType::McSealed, 7),
        ];
        for p in &sent {
            peer.send_to(p, to).expect("send");
        }
        // Loopback delivers on send; what was kept is queued by now.
        let mut got = Vec::new();
        let mut buf = [0u8; 128];
        let deadline = Instant::now() + Duration::from_secs(2);
        while got.len() < 4 && Instant::now() < deadline {
            match sock.recv(&mut buf) {
                Ok(n) => got.push(buf[..n].to_vec()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => panic!("receive failed: {e}"),
            }
        }
        std::thread::sleep(Duration::from_millis(50));
        if let Ok(n) = sock.recv(&mut buf) {
            got.push(buf[..n].to_vec());
        }
        let tags: Vec<u8> = got.iter().map(|p| p[1]).collect();
        assert_eq!(tags, [2, 4, 6, 7], "ACK, NACK, STATUS and a sealed packet pass; DATA and PARITY do not");
    }
}
