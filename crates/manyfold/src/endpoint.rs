//! The public endpoint: one UDP socket, its driver task, and the
//! connections behind it (spec §2, §6).

use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use manyfold_proto::EndpointStats;

use crate::config::{Config, DriverStats, FaultConfig, FaultStats};
use crate::connection::{ConnRef, Connection};
use crate::driver::{now, Driver};
use crate::error::ConnectError;
use crate::fault::Faults;
use crate::qlog::QlogWriter;
use crate::shared::{ConnState, Inner, Phase, Shared};
use crate::socket::{self, UdpIo};
use crate::trace::PacketTrace;

/// How long [`Endpoint::shutdown`] waits for connections to close.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// A bound UDP socket driving any number of connections. Cloning is cheap
/// (an `Arc`); the endpoint stops accepting when the last clone is dropped,
/// and its driver ends once every connection is closed and released.
///
/// Dropping it ends nothing at once: connections still open close
/// gracefully in the background, but only while the tokio runtime runs.
/// Before a process exits, call [`Endpoint::wait_idle`] (after closing
/// your connections) or [`Endpoint::shutdown`] (which closes them), or
/// [`Endpoint::abort_all`] to give up and tell every peer why.
#[derive(Debug)]
pub struct Endpoint {
    shared: Arc<Shared>,
}

impl Endpoint {
    /// Binds a UDP socket to `addr` and starts its driver on the current
    /// tokio runtime (any flavour; calling it outside a runtime panics).
    ///
    /// # Errors
    ///
    /// The OS's error when the socket cannot be bound, keeping its kind
    /// (`AddrInUse`, `AddrNotAvailable`, `PermissionDenied`) and naming the
    /// address; `InvalidInput` for a security configuration that cannot
    /// authenticate the peer (spec §19.1); the OS's error when the qlog
    /// directory cannot be created or no randomness can be had.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is left behind by a dropped future. The socket
    /// is bound and the driver started in one poll, at the end, so a
    /// future dropped before it returned has bound nothing.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (it spawns the driver task).
    pub async fn bind(addr: SocketAddr, config: Config) -> io::Result<Endpoint> {
        Endpoint::bind_socket(addr, config, false).await
    }

    /// `count` endpoints on one address, each with its own socket
    /// (SO_REUSEPORT), engine and driver task, so that a server spreads
    /// over the cores (spec §15): the kernel hands each peer's datagrams
    /// to one socket by address hash, so each connection stays with one
    /// engine. With port 0 the first binding picks the port.
    ///
    /// # Errors
    ///
    /// As [`Endpoint::bind`], for the first binding that fails; those
    /// already made are dropped.
    ///
    /// # Cancel safety
    ///
    /// As [`Endpoint::bind`]: it completes in the poll that starts it.
    pub async fn bind_reuseport(addr: SocketAddr, config: Config, count: usize) -> io::Result<Vec<Endpoint>> {
        let mut out: Vec<Endpoint> = Vec::with_capacity(count);
        for i in 0..count.max(1) {
            let at = out.first().map_or(Ok(addr), |first| first.local_addr())?;
            let mut c = config.clone();
            if c.endpoint.seed != 0 {
                c.endpoint.seed = c.endpoint.seed.wrapping_add(i as u64);
            }
            out.push(Endpoint::bind_socket(at, c, true).await?);
        }
        Ok(out)
    }

    async fn bind_socket(addr: SocketAddr, config: Config, reuse_port: bool) -> io::Result<Endpoint> {
        let Config { endpoint: mut engine_config, faults, trace, qlog_dir } = config;
        if engine_config.seed == 0 {
            engine_config.seed = os_seed()?;
        }
        prepare_security(engine_config.security.as_ref(), &mut engine_config.crypto_seed)?;
        let qlog = match qlog_dir {
            Some(dir) => {
                std::fs::create_dir_all(&dir).map_err(|e| {
                    io::Error::new(e.kind(), format!("cannot create the qlog directory {}: {e}", dir.display()))
                })?;
                engine_config.connection.qlog = true;
                Some(QlogWriter::new(dir))
            }
            None => None,
        };
        let max_datagram = usize::from(engine_config.connection.max_datagram).max(1);
        let max_accepted = usize::from(engine_config.connection.max_accepted_datagram());
        let io = UdpIo::new(socket::bind(addr, reuse_port)?)?;
        // spec §6.7: ICMP errors for our datagrams, read by the driver. (The
        // multicast sockets leave them off: spec §16 ignores ICMP.)
        crate::icmp::enable(io.get_ref(), addr.is_ipv6());
        let local_addr = io.local_addr()?;
        let start = now();
        let engine = manyfold_proto::Endpoint::new(engine_config, start);
        let faults = faults.is_active().then(|| Faults::new(faults));
        let shared = Arc::new(Shared::new(Inner::new(engine, faults), local_addr));
        let driver = Driver::new(shared.clone(), io, max_datagram, max_accepted, PacketTrace::new(trace, start), qlog);
        tokio::spawn(driver.run());
        Ok(Endpoint { shared })
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Starts accepting connections (the LISTEN state, spec §4.1).
    pub fn listen(&self) {
        let mut inner = self.shared.lock();
        if inner.is_running() {
            inner.engine.set_listening(true);
        }
    }

    /// Opens a connection to `addr` and waits for the handshake (spec §4.2).
    ///
    /// # Errors
    ///
    /// [`ConnectError::Refused`] when nothing listens there (at once where
    /// ICMP says so) or the listener refuses; [`ConnectError::TimedOut`]
    /// when nothing answers within `connect_timeout`;
    /// [`ConnectError::Closed`] when the handshake ends otherwise (host
    /// unreachable, protection mismatch, failed authentication);
    /// [`ConnectError::TooManyConnections`] when the endpoint holds its
    /// maximum; [`ConnectError::InvalidAddress`] for an unspecified
    /// address, port 0, or an IPv6 address from an IPv4 socket;
    /// [`ConnectError::EndpointClosed`] after a shutdown.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the attempt: the half-open connection
    /// is aborted and released.
    pub async fn connect(&self, addr: SocketAddr) -> Result<Connection, ConnectError> {
        if self.shared.local_addr.is_ipv4() && addr.is_ipv6() {
            // The SYN could never leave; say so now rather than after connect_timeout.
            return Err(ConnectError::InvalidAddress { addr, why: "an IPv6 address from an IPv4 socket" });
        }
        let handle = {
            let mut inner = self.shared.lock();
            if !inner.is_running() {
                return Err(ConnectError::EndpointClosed);
            }
            let h = inner.engine.connect(now(), addr)?;
            inner.conns.insert(h, ConnState::default());
            h
        };
        self.shared.wake_driver();
        // Built before waiting so that a cancelled connect releases (and aborts) it.
        let conn = ConnRef::new(self.shared.clone(), handle, addr);
        poll_fn(|cx| conn.poll_connected(cx)).await?;
        Ok(Connection::new(conn))
    }

    /// Waits for the next incoming connection. `None` once the endpoint is
    /// shut down (or its driver stopped). Only an endpoint that called
    /// [`Endpoint::listen`] receives any.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a connection is taken from the queue only when the
    /// future returns it; one that arrives after the drop waits for the
    /// next call.
    pub async fn accept(&self) -> Option<Connection> {
        poll_fn(|cx| {
            let mut inner = self.shared.lock();
            if !inner.is_running() {
                return Poll::Ready(None);
            }
            if let Some(h) = inner.engine.accept() {
                inner.conns.entry(h).or_insert_with(|| ConnState { connected: true, ..ConnState::default() });
                let peer = inner.engine.conn(h).remote_addr().unwrap_or(self.shared.local_addr);
                return Poll::Ready(Some((h, peer)));
            }
            if !inner.accept_waiters.iter().any(|w| w.will_wake(cx.waker())) {
                inner.accept_waiters.push(cx.waker().clone());
            }
            Poll::Pending
        })
        .await
        .map(|(h, peer)| Connection::new(ConnRef::new(self.shared.clone(), h, peer)))
    }

    /// The address the socket is bound to (with the port the OS chose).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.shared.local_addr)
    }

    /// The engine's endpoint-wide counters.
    pub fn stats(&self) -> EndpointStats {
        *self.shared.lock().engine.stats()
    }

    /// The peers the listener turned away since the last call, oldest
    /// first, each with its address and cause (spec §6.4): what a server
    /// logs. At most 256 wait; later ones are only counted, in
    /// [`EndpointStats::refusals_unreported`].
    pub fn take_refusals(&self) -> Vec<crate::Refusal> {
        let mut inner = self.shared.lock();
        std::iter::from_fn(|| inner.engine.poll_refusal()).collect()
    }

    /// What fault injection did so far (all zero without faults).
    pub fn fault_stats(&self) -> FaultStats {
        self.shared.lock().faults.as_ref().map(|f| f.stats).unwrap_or_default()
    }

    /// Changes the fault injection of this running endpoint (a drop rate
    /// switched on mid-connection, say): it applies to every datagram
    /// from now on; datagrams already held keep their times. An inactive
    /// config switches injection off once nothing is held.
    pub fn set_faults(&self, faults: FaultConfig) {
        let mut inner = self.shared.lock();
        match inner.faults.as_mut() {
            Some(f) => f.reconfigure(faults),
            None if faults.is_active() => inner.faults = Some(Faults::new(faults)),
            None => {}
        }
        drop(inner);
        self.shared.wake_driver();
    }

    /// The driver's own counters (datagrams, GSO/GRO batches, socket errors).
    pub fn driver_stats(&self) -> DriverStats {
        self.shared.lock().driver_stats
    }

    /// Connections the engine holds, in any state.
    pub fn connection_count(&self) -> usize {
        self.shared.lock().engine.connection_count()
    }

    /// Stops accepting, closes every connection gracefully, waits until they
    /// are closed (at most [`DEFAULT_SHUTDOWN_TIMEOUT`], then the rest are
    /// aborted) and stops the driver. Later calls fail with `EndpointClosed`.
    ///
    /// # Cancel safety
    ///
    /// The shutdown begins on the first poll and goes on in the driver:
    /// dropping the future only stops the waiting for its end.
    pub async fn shutdown(&self) {
        self.shutdown_within(DEFAULT_SHUTDOWN_TIMEOUT).await;
    }

    /// [`Endpoint::shutdown`] with a chosen bound.
    ///
    /// # Cancel safety
    ///
    /// As [`Endpoint::shutdown`].
    pub async fn shutdown_within(&self, limit: Duration) {
        {
            let mut inner = self.shared.lock();
            let t = now();
            inner.begin_shutdown(t, t + limit);
        }
        self.wait_stopped().await;
    }

    /// Ends everything at once: every connection and group member of this
    /// endpoint is aborted with `code` (a RST carrying it, spec §4.6), the
    /// RSTs are sent, and the driver stops. The peers learn it within one
    /// trip across the network and report
    /// [`CloseReason::PeerReset`](crate::CloseReason::PeerReset)`(Some(code))`
    /// instead of waiting for a timeout. What an interrupted program
    /// calls on its way out, with [`ErrorCode::INTERRUPTED`](crate::ErrorCode::INTERRUPTED).
    ///
    /// # Cancel safety
    ///
    /// The aborts happen on the first poll; dropping the future only stops
    /// the waiting for the RSTs to go out and the driver to stop.
    pub async fn abort_all(&self, code: crate::ErrorCode) {
        self.shared.lock().begin_abort(now(), code);
        self.wait_stopped().await;
    }

    /// Waits until every connection of this endpoint has finished with its
    /// peer (spec §4.8): closed, or in TIME-WAIT long enough to answer a
    /// peer whose last ack was lost (four RTOs, at least 250 ms, a fraction
    /// of a second on most paths). Bounded by twice `time_wait` (30 s at
    /// the defaults) in case a peer never finishes.
    ///
    /// Call it after closing (or dropping) your connections and before the
    /// process exits: the endpoint's socket dies with the process, and a
    /// peer whose last ack was lost would otherwise retransmit its FIN into
    /// nothing (it learns of it from ICMP or its stall timeout, not at once).
    /// It closes nothing itself, so open connections keep it waiting until
    /// the bound. Returns at once if the driver has stopped.
    ///
    /// It also tells the engine that the process means to exit
    /// ([`manyfold_proto::Endpoint::prepare_exit`]): connections in
    /// TIME-WAIT, and those that enter it later, send their final ack twice
    /// more unasked, so that a peer whose last ack was lost hears it before
    /// we go.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits (the final-ack repeats it asked for go
    /// out anyway).
    pub async fn wait_idle(&self) {
        let limit = {
            let mut inner = self.shared.lock();
            // spec §4.8: the process means to exit; TIME-WAIT repeats its final ack.
            inner.engine.prepare_exit(now());
            inner.engine.config().connection.time_wait * 2
        };
        self.shared.wake_driver();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            {
                let inner = self.shared.lock();
                if inner.phase == Phase::Stopped || inner.engine.is_idle(now()) {
                    return;
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(crate::driver::IDLE_POLL).await;
        }
    }

    /// Wakes the driver and waits until it has stopped.
    async fn wait_stopped(&self) {
        self.shared.wake_driver();
        poll_fn(|cx| {
            let mut inner = self.shared.lock();
            if inner.phase == Phase::Stopped {
                return Poll::Ready(());
            }
            if !inner.stop_waiters.iter().any(|w| w.will_wake(cx.waker())) {
                inner.stop_waiters.push(cx.waker().clone());
            }
            Poll::Pending
        })
        .await;
    }
}

impl Clone for Endpoint {
    fn clone(&self) -> Self {
        self.shared.lock().endpoint_refs += 1;
        Endpoint { shared: self.shared.clone() }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        {
            let mut inner = self.shared.lock();
            inner.endpoint_refs -= 1;
            if inner.endpoint_refs == 0 {
                // Nobody can accept any more: refuse new peers, drop the queue.
                inner.engine.set_listening(false);
                inner.abort_unaccepted(now());
                for w in inner.accept_waiters.drain(..) {
                    w.wake();
                }
            }
        }
        self.shared.wake_driver();
    }
}

/// spec §19.1: a security configuration must authenticate the peer, and
/// keys are drawn from 256 bits of the OS's randomness (all zeros: not set).
pub(crate) fn prepare_security(
    security: Option<&manyfold_proto::SecurityConfig>,
    crypto_seed: &mut [u8; 32],
) -> io::Result<()> {
    if let Some(security) = security {
        security.check().map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    }
    if *crypto_seed == [0; 32] {
        getrandom::getrandom(crypto_seed).map_err(|e| io::Error::other(format!("cannot seed from the OS: {e}")))?;
    }
    Ok(())
}

/// A seed for the engine's RNG and secrets from the OS.
fn os_seed() -> io::Result<u64> {
    let mut b = [0u8; 8];
    getrandom::getrandom(&mut b).map_err(|e| io::Error::other(format!("cannot seed from the OS: {e}")))?;
    Ok(u64::from_le_bytes(b).max(1))
}
