//! Configuration of an endpoint and of its connections, with the defaults
//! docs/spec.md §10 justifies.

use std::time::Duration;

/// Which congestion controller a connection runs (spec §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CongestionAlgorithm {
    /// RFC 6582 / RFC 9002 NewReno with byte counting.
    NewReno,
    /// RFC 9438 CUBIC.
    Cubic,
    /// A model-based controller in the style of BBR v1 (spec §9.5); the
    /// default (spec §9.1).
    #[default]
    Bbr,
}

impl CongestionAlgorithm {
    /// Every controller, for tests and the lab to iterate over.
    pub const ALL: [CongestionAlgorithm; 3] =
        [CongestionAlgorithm::NewReno, CongestionAlgorithm::Cubic, CongestionAlgorithm::Bbr];

    /// The controller's name as the CLI and traces spell it (`newreno`, `cubic`, `bbr`).
    pub fn name(self) -> &'static str {
        match self {
            CongestionAlgorithm::NewReno => "newreno",
            CongestionAlgorithm::Cubic => "cubic",
            CongestionAlgorithm::Bbr => "bbr",
        }
    }
}

impl std::str::FromStr for CongestionAlgorithm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        CongestionAlgorithm::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown congestion controller {s:?} (known: newreno, cubic, bbr)"))
    }
}

/// The largest UDP payload over IPv4 (65,535 less the IP and UDP headers).
pub const MAX_UDP_PAYLOAD: u16 = 65_507;

/// Settings of one connection (spec §10).
#[derive(Debug, Clone)]
pub struct ConnectionConfig {
    /// Datagram size, header included, that a connection starts with and
    /// falls back to; with discovery off, the only size (spec §3.4).
    pub max_datagram: u16,
    /// Path MTU discovery (spec §3.7): the largest datagram it may find,
    /// which is also the largest this end accepts. `None` keeps every
    /// datagram at `max_datagram`. The default, 65,507, is the largest UDP
    /// payload over IPv4: what loopback carries.
    pub path_mtu_discovery: Option<u16>,
    /// Most bytes queued or unacknowledged on the sending side; below it the
    /// buffer is auto-tuned to twice what can be in flight (spec §7.4).
    pub send_buffer: usize,
    /// Most bytes we advertise and ever hold on the receiving side; the
    /// advertised window starts at 4 MiB and grows toward it (spec §7.4).
    /// 64 MiB fills 1 Gbit/s × 200 ms (25 MB) with room to spare; memory is
    /// only used by data actually queued.
    pub recv_buffer: usize,
    /// RTO before the first RTT sample (RFC 6298 (2.1) says 1 s).
    pub initial_rto: Duration,
    /// Lower bound of the RTO (RFC 6298 (2.4) asks 1 s, Linux uses 200 ms;
    /// tail-loss probes catch most tails first, so 20 ms; spec §5.4, §10).
    pub min_rto: Duration,
    /// Upper bound of the backed-off RTO.
    pub max_rto: Duration,
    /// Consecutive RTO expiries without progress before the connection is abandoned.
    pub max_retransmissions: u32,
    /// How long `connect` waits for the handshake before failing.
    pub connect_timeout: Duration,
    /// Close the connection when nothing has been received for this long.
    pub idle_timeout: Option<Duration>,
    /// Give up when the peer's receive window has stayed at zero this long
    /// while we have data for it (its application stopped reading): the
    /// connection closes with `ZeroWindowTimeout` and the peer gets a RST
    /// with code 7 (spec §7.3). `None` waits forever, as TCP does.
    pub zero_window_timeout: Option<Duration>,
    /// Give up when data has been outstanding this long without any ack
    /// from the peer: the connection closes with `StallTimeout` (spec §4.7)
    /// instead of retransmitting for minutes into silence. `None` leaves it
    /// to `max_retransmissions` and `idle_timeout`.
    pub stall_timeout: Option<Duration>,
    /// Send a keep-alive after this long without sending anything.
    pub keepalive_interval: Option<Duration>,
    /// Length of TIME-WAIT on the side that closes first (spec §4.4).
    pub time_wait: Duration,
    /// Acknowledge at least every this many data packets (spec §5.3).
    pub ack_frequency: u32,
    /// Longest an acknowledgement is delayed; asked of the peer too when
    /// it takes ACK_FREQUENCY requests (spec §5.6).
    pub max_ack_delay: Duration,
    /// Ask the peer to acknowledge about every eighth of the congestion
    /// window instead of every `ack_frequency` packets (spec §5.6), when it
    /// announces that it takes such requests.
    pub adaptive_acks: bool,
    /// How long the ack of a FIN that ends the peer's data (a whole
    /// request) waits for our reply to carry it, at most `max_ack_delay`;
    /// zero acks at once (spec §5.3).
    pub reply_ack_delay: Duration,
    /// Longest a datagram that would carry less than a full packet of
    /// stream data waits for more messages to join it, while packets are
    /// in flight and the congestion window is open (spec §5.7): coalescing
    /// on a timer, as Nagle's algorithm does on an ack. It never delays a
    /// datagram when nothing is in flight, when a full packet is ready, or
    /// when the window is closed. Zero, the default, sends at once.
    pub flush_delay: Duration,
    /// How long a client's cookie echo, with nothing to carry, waits for
    /// the application's first write after the SYN-ACK (spec §6.2), so
    /// that the request rides on it: one datagram fewer each way for a
    /// client that connects and then writes (the echo alone, then the data
    /// and the listener's ack of the echo). Anything queued meanwhile
    /// (data, an empty message, a stream's FIN or control, the FIN) sends
    /// it at once, and so does [`crate::ConnMut::end_echo_hold`], which a
    /// driver calls when the application waits to read (a protocol whose
    /// server speaks first). Without that call, a server that speaks
    /// first hears of the connection this much later. Zero sends the echo
    /// at once. Default 10 ms: a loaded client's task may run its first
    /// write several milliseconds after the SYN-ACK (RESULTS §30).
    pub echo_delay: Duration,
    /// Initial congestion window in packets (RFC 6928 uses 10).
    pub initial_window_packets: u32,
    /// The congestion controller.
    pub congestion: CongestionAlgorithm,
    /// Most streams with state at once, stream 0 included (spec §13.8).
    pub max_streams: usize,
    /// Largest message `send_message` accepts (spec §13.5).
    pub max_message: usize,
    /// Credit window of each stream but stream 0, which has
    /// `recv_buffer`: how far beyond what the application consumed the
    /// peer may send on it (spec §13.7). At least `max_message`.
    pub stream_window: usize,
    /// Record trace events (spec §18), read with
    /// [`crate::Endpoint::poll_qlog`]. Off by default: it costs an
    /// allocation or two per packet.
    pub qlog: bool,
}

impl ConnectionConfig {
    /// The largest datagram this end accepts: what its handshake announces
    /// (spec §3.3.2) and what a receive buffer must hold.
    pub fn max_accepted_datagram(&self) -> u16 {
        self.max_datagram.max(self.path_mtu_discovery.unwrap_or(0))
    }
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        ConnectionConfig {
            max_datagram: 1452,
            path_mtu_discovery: Some(MAX_UDP_PAYLOAD),
            send_buffer: 64 << 20,
            recv_buffer: 64 << 20,
            initial_rto: Duration::from_secs(1),
            min_rto: Duration::from_millis(20),
            max_rto: Duration::from_secs(60),
            max_retransmissions: 12,
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Some(Duration::from_secs(60)),
            zero_window_timeout: Some(Duration::from_secs(120)),
            stall_timeout: Some(Duration::from_secs(15)),
            keepalive_interval: Some(Duration::from_secs(15)),
            time_wait: Duration::from_secs(15),
            ack_frequency: 2,
            max_ack_delay: Duration::from_millis(25),
            adaptive_acks: true,
            reply_ack_delay: Duration::from_millis(2),
            flush_delay: Duration::ZERO,
            echo_delay: Duration::from_millis(10),
            initial_window_packets: 10,
            congestion: CongestionAlgorithm::Bbr,
            max_streams: 1024,
            max_message: 16 << 20,
            stream_window: 16 << 20,
            qlog: false,
        }
    }
}

/// Settings of an endpoint: the table of connections behind one socket.
#[derive(Debug, Clone)]
pub struct EndpointConfig {
    /// Seeds the endpoint's RNG and secrets (cookie and ISN keys). A driver
    /// fills it from the OS; tests fix it.
    pub seed: u64,
    /// Most connections held at once, in any state (spec §6.4).
    pub max_connections: usize,
    /// Most connections held with peers at one IP address; beyond it SYNs
    /// and echoes from that address are refused explicitly (spec §6.4), so
    /// one host cannot fill the table. Hosts behind one NAT share it.
    pub max_connections_per_source: usize,
    /// Most accepted-but-not-yet-taken connections; beyond it a new
    /// connection is refused explicitly (spec §6.4).
    pub accept_backlog: usize,
    /// How long a SYN-ACK cookie stays valid (spec §6.2).
    pub cookie_lifetime: Duration,
    /// Most RST and refusal packets sent per second (spec §6.5).
    pub max_resets_per_sec: u32,
    /// Most bytes all connections together may hold: queued and
    /// unacknowledged on the sending side, buffered on the receiving side
    /// (spec §7.5). At the limit, sends are refused until memory frees up,
    /// receive windows stop growing, and arriving data is dropped (and
    /// recovered later) instead of stored.
    pub max_buffered_bytes: u64,
    /// Most trace events (spec §18) held for [`crate::Endpoint::poll_qlog`];
    /// beyond it new ones are dropped and counted in
    /// [`crate::EndpointStats::qlog_dropped`].
    pub max_qlog_events: usize,
    /// Seeds the randomness of Noise handshakes (ephemeral keys, spec §19.1):
    /// 256 bits, which a driver fills from the OS. All zeros derives it from
    /// `seed`, which only simulations and tests may rely on: 64 bits are
    /// too few for keys.
    pub crypto_seed: [u8; 32],
    /// Keys for protected connections (spec §19): with them, every
    /// connection of this endpoint is encrypted and authenticated, and
    /// plain peers are refused; without, the papers' plain protocol.
    pub security: Option<crate::SecurityConfig>,
    /// Settings for every connection of this endpoint.
    pub connection: ConnectionConfig,
    /// How long the address-validation tokens a listener hands out stay
    /// good (spec §6.9). `Duration::ZERO` hands out none and takes no 0-RTT
    /// data. At most 24 days (the timestamp's half range).
    pub token_lifetime: Duration,
    /// What a listener does with data on a SYN that presents a good token
    /// (spec §6.9).
    pub early_data: EarlyData,
    /// As a client: ask listeners for tokens, keep the latest per server
    /// address, and present it on the next SYN there, with the queued data
    /// (0-RTT, spec §6.9). Only for requests the server may see twice, or
    /// servers that keep a replay window. Off by default; protected
    /// endpoints never use it.
    pub reuse_tokens: bool,
    /// Most servers whose token a client keeps; past it the oldest is
    /// forgotten (spec §6.9).
    pub max_tokens: usize,
    /// Most finished connections whose emptied containers the endpoint
    /// keeps for the connections it builds next (spec §15.3): a short
    /// session then costs the engine 2 allocations instead of 34. Each
    /// spare holds about 3.3 KB after a short session (stream 0's state,
    /// its small queues and buffers, the sent queue's lists up to 16
    /// entries, the congestion controller; more only after a longer
    /// exchange: its stream queues are kept up to 64 entries, its receive
    /// ring and write buffer up to 1 KiB each), so the default, 256, holds
    /// under 1 MB. The `manyfold` driver keeps as many emptied
    /// per-connection states. A burst of more sessions than this
    /// allocates for the rest; 0 keeps none.
    pub max_spare_connections: usize,
    /// Most peers whose round trip the endpoint remembers between
    /// connections (spec §5.4.1); past it the peer remembered first is
    /// forgotten. Until its first sample of data, a new connection's PTO
    /// and RTO then allow for the time the peer took to answer data
    /// before, not only for its handshake's round trip, which a stateless
    /// listener answers at once. 0 remembers nothing.
    pub max_peer_rtts: usize,
    /// How long a remembered round trip stays good after the last
    /// connection to that peer reported it (spec §5.4.1).
    pub peer_rtt_lifetime: Duration,
}

/// A listener's policy for 0-RTT data (spec §6.9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EarlyData {
    /// Take none: every SYN runs the full handshake (tokens are still
    /// handed out, for a later policy).
    Refuse,
    /// Take it, and remember up to this many first packets for their
    /// token's lifetime, so that a replayed one is not served twice: it
    /// falls back to the full handshake. When the window is full, tokens
    /// older than its oldest entry fall back too.
    ReplayWindow(usize),
    /// Take it with no replay window: the application says its requests
    /// are safe to serve more than once.
    Idempotent,
}
impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            seed: 0,
            max_connections: 1 << 20,
            max_connections_per_source: 4096,
            accept_backlog: 1024,
            cookie_lifetime: Duration::from_secs(60),
            max_resets_per_sec: 1000,
            max_buffered_bytes: 2 << 30,
            max_qlog_events: 1 << 16,
            crypto_seed: [0; 32],
            security: None,
            connection: ConnectionConfig::default(),
            token_lifetime: Duration::from_secs(600),
            early_data: EarlyData::ReplayWindow(1 << 16),
            reuse_tokens: false,
            max_tokens: 1024,
            max_spare_connections: 256,
            max_peer_rtts: 1024,
            peer_rtt_lifetime: Duration::from_secs(600),
        }
    }
}
