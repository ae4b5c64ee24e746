//! librusp's connection calls (paper 04 §2.2) on manyfold connections:
//! `mf_listen`, `mf_accept`, `mf_connect`, `mf_send`, `mf_receive`,
//! `mf_close`, `mf_local`, `mf_peer`. A connection is manyfold's stream 0
//! (spec §13): a reliable, ordered byte stream each way.

use std::ffi::{c_char, c_int, c_void};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::attrs::SocketAttrs;
use crate::cabi;
use crate::error::{entry, Error, MF_EBADF, MF_ECLOSED, MF_OK};
use crate::table::{self, in_runtime, Closing, Handle, ListenerEntry, StreamEntry};

/// Opens a listening endpoint bound to `ip` and `port` (librusp's
/// `ruspListen`). `ip` is a literal IPv4 or IPv6 address or a host name;
/// NULL means every IPv4 address ("0.0.0.0"). `port` 0 picks a free port:
/// `mf_local` tells which. The listener takes its attributes (drop rate,
/// seed) from `MF_DEFAULTS` as they are now.
///
/// Returns the listener's descriptor (> 0), or a negative `MF_E*` code:
/// `MF_EINVAL` for an address that does not resolve or a port outside
/// 0..65535, `MF_EADDRINUSE` if the port is taken.
///
/// # Safety
/// `ip` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mf_listen(ip: *const c_char, port: c_int) -> c_int {
    entry("mf_listen", || {
        let host = if ip.is_null() {
            "0.0.0.0"
        } else {
            // SAFETY: non-null and NUL-terminated by the contract above.
            unsafe { cabi::text(ip, "mf_listen: ip") }?
        };
        let addr = cabi::resolve(host, port, "mf_listen")?[0];
        in_runtime(|rt| {
            let (attrs, config) = SocketAttrs::from_defaults();
            let endpoint = rt
                .block_on(mf::Endpoint::bind(addr, config.clone()))
                .map_err(|e| Error::io(&format!("mf_listen on {addr}"), &e))?;
            attrs.attach(&endpoint, &config);
            endpoint.listen();
            table::insert(Handle::Listener(Arc::new(ListenerEntry { endpoint, attrs, closing: Closing::default() })))
        })
    })
}

/// Waits for the next peer to complete its handshake with the listener
/// `listener` (librusp's `ruspAccept`) and returns the new connection's
/// descriptor (> 0). Blocks until one arrives; `mf_close` of the listener
/// from another thread makes it return `MF_ECLOSED`, and from then on no
/// connection is handed out: one whose handshake completed meanwhile is
/// ended at once, so that its peer is not left connected to nothing.
///
/// The connection shares the listener's socket, and with it the drop rate
/// and seed: setting them on either changes both (see `mf_set_attr`).
#[no_mangle]
pub extern "C" fn mf_accept(listener: c_int) -> c_int {
    entry("mf_accept", || {
        let l = table::listener(listener, "mf_accept")?;
        in_runtime(|rt| {
            let what = || format!("mf_accept on listener {listener}");
            let conn = l.closing.block_on(rt, what, async {
                l.endpoint.accept().await.ok_or_else(|| Error::new(MF_ECLOSED, format!("{}: endpoint stopped", what())))
            })?;
            if l.closing.is_closed() {
                // Closed while this connection was being handed over: it
                // would have no owner. Reset it, so that the peer knows at once.
                conn.abort(mf::ErrorCode::REFUSED);
                return Err(Error::new(MF_ECLOSED, format!("{}: closed by mf_close on another thread", what())));
            }
            let entry = StreamEntry {
                streams: conn.streams(),
                local: conn.local_addr().unwrap_or_else(|_| l.endpoint.local_addr().unwrap_or(unspecified(false))),
                peer: conn.peer_addr(),
                conn: Mutex::new(Some(conn)),
                endpoint: Mutex::new(None),
                closing: Closing::default(),
                attrs: l.attrs.clone(),
                pending: Mutex::new(None),
                peer_ended: AtomicBool::new(false),
            };
            table::insert(Handle::Stream(Arc::new(entry)))
        })
    })
}

fn unspecified(v6: bool) -> SocketAddr {
    if v6 {
        ([0u16; 8], 0).into()
    } else {
        ([0, 0, 0, 0], 0).into()
    }
}

/// Connects to the listener at `ip` and `port` (librusp's `ruspConnect`)
/// from a fresh socket on an ephemeral port, and returns the connection's
/// descriptor (> 0) once the handshake completed. `ip` is a literal
/// address or a host name; each address it resolves to is tried in turn.
/// The connection takes its attributes from `MF_DEFAULTS` as they are now.
///
/// Fails with `MF_ECONNREFUSED` at once if a manyfold endpoint there is
/// not listening or nothing listens on that port (the host answers ICMP
/// port unreachable), `MF_EHOSTUNREACH` if the network answers host
/// unreachable, `MF_ETIMEDOUT` if nothing answers within 10 seconds,
/// `MF_EINVAL` for an address that does not resolve.
///
/// # Safety
/// `ip` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mf_connect(ip: *const c_char, port: c_int) -> c_int {
    entry("mf_connect", || {
        // SAFETY: NUL-terminated (or null, which `text` refuses) by the contract above.
        let host = unsafe { cabi::text(ip, "mf_connect: ip") }?;
        let mut last = None;
        for addr in cabi::resolve(host, port, "mf_connect")? {
            let attempt = in_runtime(|rt| {
                rt.block_on(async {
                    let what = format!("mf_connect to {addr}");
                    // Entered before the handshake: `MF_ALL` reaches it meanwhile.
                    let (attrs, config) = SocketAttrs::from_defaults();
                    let endpoint = mf::Endpoint::bind(unspecified(addr.is_ipv6()), config.clone())
                        .await
                        .map_err(|e| Error::io(&what, &e))?;
                    attrs.attach(&endpoint, &config);
                    match endpoint.connect(addr).await {
                        Ok(conn) => Ok((endpoint, conn, attrs)),
                        Err(e) => {
                            // Release the socket now, not when the driver notices.
                            attrs.detach();
                            endpoint.shutdown_within(Duration::ZERO).await;
                            Err(Error::conn(&what, &e))
                        }
                    }
                })
            });
            match attempt {
                Ok((endpoint, conn, attrs)) => {
                    let entry = StreamEntry {
                        streams: conn.streams(),
                        local: endpoint.local_addr().unwrap_or(unspecified(addr.is_ipv6())),
                        peer: conn.peer_addr(),
                        conn: Mutex::new(Some(conn)),
                        endpoint: Mutex::new(Some(endpoint)),
                        closing: Closing::default(),
                        attrs,
                        pending: Mutex::new(None),
                        peer_ended: AtomicBool::new(false),
                    };
                    return table::insert(Handle::Stream(Arc::new(entry)));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::invalid("mf_connect: no address to connect to")))
    })
}

/// Sends all `len` bytes at `buf` on the connection `conn` (librusp's
/// `ruspSend`), blocking while its send buffer is full. Returns `len`, or
/// a negative code: `MF_ERESET`, `MF_ETIMEDOUT` or `MF_EHOSTUNREACH` if the
/// connection died, `MF_ECLOSED` if another thread closed `conn` while
/// this call was blocked (part of the data may have been sent),
/// `MF_EBADF` if `conn` is not an open connection (also after `mf_close`).
///
/// One thread may send while another receives on the same connection.
///
/// # Safety
/// `buf` points to `len` readable bytes (or is NULL with `len` 0).
#[no_mangle]
pub unsafe extern "C" fn mf_send(conn: c_int, buf: *const c_void, len: usize) -> isize {
    entry("mf_send", || {
        let s = table::stream(conn, "mf_send")?;
        // SAFETY: `len` readable bytes at `buf` by the contract above.
        let data = unsafe { cabi::data(buf, len, "mf_send: buf") }?;
        in_runtime(|rt| {
            let what = || format!("mf_send on connection {conn}");
            s.closing
                .block_on(rt, what, async { s.streams.io(0).write_all(data).await.map_err(|e| Error::io(&what(), &e)) })
        })?;
        Ok(data.len() as isize)
    })
}

/// Receives up to `cap` bytes from the connection `conn` into `buf`
/// (librusp's `ruspReceive`), blocking until at least one byte arrives.
/// Returns the number of bytes received, 0 at the end of the peer's data
/// (it closed), or a negative code: `MF_ERESET`, `MF_ETIMEDOUT` or
/// `MF_EHOSTUNREACH` if the connection died, `MF_ECLOSED` if another
/// thread closed `conn` while this call was blocked, `MF_EBADF` if `conn`
/// is not an open connection (also after `mf_close`), `MF_EINVAL` if
/// `cap` is 0.
///
/// # Safety
/// `buf` points to `cap` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn mf_receive(conn: c_int, buf: *mut c_void, cap: usize) -> isize {
    entry("mf_receive", || {
        let s = table::stream(conn, "mf_receive")?;
        if cap == 0 {
            return Err(Error::invalid("mf_receive: cap is 0, so nothing could be received"));
        }
        // SAFETY: `cap` writable bytes at `buf` by the contract above.
        let out = unsafe { cabi::buffer(buf, cap, "mf_receive: buf") }?;
        let n = in_runtime(|rt| {
            let what = || format!("mf_receive on connection {conn}");
            s.closing.block_on(rt, what, async { s.streams.io(0).read(out).await.map_err(|e| Error::io(&what(), &e)) })
        })?;
        if n == 0 {
            s.peer_ended.store(true, Ordering::Release);
        }
        Ok(n as isize)
    })
}

/// Closes the descriptor `desc`, of any kind (librusp's `ruspClose`); the
/// descriptor is invalid afterwards, whatever the result: later calls on
/// it fail with `MF_EBADF`. Every call blocked on `desc` in another thread
/// (`mf_receive`, `mf_send`, `mf_accept`, ...) returns `MF_ECLOSED` first.
///
/// - A connection: sends the end of our data and blocks until the peer
///   has acknowledged everything we sent; returns an error if the
///   connection died before that (the text says how many bytes were never
///   acknowledged). If the peer had not ended its side yet, then waits (at
///   most 5 seconds) for its end, discarding data it still sends, and for
///   a short TIME-WAIT (four retransmission timeouts, 250 ms to 1 s), so
///   that the peer's close completes even if this process exits right
///   after. The socket of a connection made by `mf_connect` is
///   released before `mf_close` returns, or, if the peer had not ended its
///   side within the 5 seconds, as soon as it does (a reset after 60 s).
///   Returns `MF_OK` when our data was all delivered; else the code of
///   why the connection died first (`MF_ERESET`: the peer reset it or is
///   gone; `MF_ETIMEDOUT`: it stopped answering; `MF_EHOSTUNREACH`), the
///   text saying how many bytes the peer never acknowledged.
/// - A listener: stops accepting new peers at once (their handshakes are
///   refused, and one that completed but was not yet accepted is reset);
///   connections it accepted stay open. An `mf_accept` blocked on it
///   returns `MF_ECLOSED`. Returns `MF_OK`.
/// - A group: as `mf_group_close`.
///
/// `MF_EBADF` if `desc` is not open (never opened, or closed already).
#[no_mangle]
pub extern "C" fn mf_close(desc: c_int) -> c_int {
    entry("mf_close", || close(desc))
}

pub(crate) fn close(desc: c_int) -> Result<c_int, Error> {
    let handle = table::remove(desc)?;
    in_runtime(|rt| {
        match handle {
            Handle::Listener(l) => {
                // Blocked accepts return and drop their references; the
                // last reference to the endpoint stops its listening and
                // ends the connections nobody accepted (`Endpoint::drop`).
                // The attributes, which the accepted connections share,
                // must not be one.
                l.closing.close();
                l.attrs.detach();
            }
            Handle::Stream(s) => {
                s.closing.close();
                let conn = s.conn.lock().unwrap_or_else(|p| p.into_inner()).take();
                let endpoint = s.endpoint.lock().unwrap_or_else(|p| p.into_inner()).take();
                if endpoint.is_some() {
                    s.attrs.detach();
                }
                let closed = match conn {
                    Some(mut conn) => rt.block_on(close_connection(&s, &mut conn, endpoint.is_none())),
                    None => Ok(Ended::Both),
                };
                if let Some(endpoint) = endpoint {
                    match closed {
                        // The connection has ended: free the socket once
                        // its TIME-WAIT has lingered (spec §4.8).
                        Ok(Ended::Both) => rt.block_on(endpoint.shutdown_within(LINGER_BOUND)),
                        Err(_) => rt.block_on(endpoint.shutdown_within(Duration::ZERO)),
                        // The peer has not ended its side yet: the socket
                        // stays for it, and goes as soon as it has (or
                        // with a reset after LATE_END_WAIT).
                        Ok(Ended::Ours) => {
                            rt.spawn(async move { endpoint.shutdown_within(LATE_END_WAIT).await });
                        }
                    }
                }
                closed.map_err(|e| Error::conn(&format!("mf_close of connection {desc}"), &e))?;
            }
            Handle::Group(g) => {
                g.closing.close();
                g.attrs.detach();
                let closed = rt.block_on(crate::group::close_group(&g.group));
                let bound = if closed.is_ok() { LINGER_BOUND } else { Duration::ZERO };
                rt.block_on(g.endpoint.shutdown_within(bound));
                closed.map_err(|e| Error::conn(&format!("mf_close of group {desc}"), &e))?;
            }
        }
        Ok(MF_OK)
    })
}

/// The longest `mf_close` waits for the peer to end its side after ours.
pub(crate) const PEER_END_WAIT: Duration = Duration::from_secs(5);

/// The longest the shutdown of a closed connection's socket waits for its
/// TIME-WAIT to linger (four RTOs, at least 250 ms: spec §4.8).
pub(crate) const LINGER_BOUND: Duration = Duration::from_secs(2);

/// How long, after `mf_close` returned, the socket of a connection whose
/// peer has not ended its side stays to let it (the connection's idle
/// timeout): then the connection is reset and the socket released.
const LATE_END_WAIT: Duration = Duration::from_secs(60);

/// How far a close got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// Both sides ended (and a short TIME-WAIT passed when we ended first).
    Both,
    /// Ours was acknowledged; the peer had not ended its side in
    /// `PEER_END_WAIT`.
    Ours,
}

/// librusp's close "blocks until the shutdown handshake has been
/// completed" (paper 04 §2.2): our FIN acknowledged, then (when we closed
/// first) the peer's FIN received, then a short TIME-WAIT in which a FIN
/// the peer repeats, because our acknowledgement of it was lost, is
/// acknowledged again (spec §4.4). The process may exit right after
/// `mf_close`, taking the connection's TIME-WAIT with it; without the
/// linger a lost last ACK would leave the peer in LAST-ACK, resending its
/// FIN to a closed port until its retransmission limit.
///
/// `linger`: stay in TIME-WAIT here. Not needed when the connection has
/// its own socket: the endpoint's shutdown lingers then.
async fn close_connection(s: &StreamEntry, conn: &mut mf::Connection, linger: bool) -> Result<Ended, mf::CloseError> {
    conn.close().await?;
    if s.peer_ended.load(Ordering::Acquire) {
        return Ok(Ended::Both); // passive close: the peer's FIN came first
    }
    let mut scratch = vec![0u8; 64 << 10];
    let mut io = s.streams.io(0);
    let drained = tokio::time::timeout(PEER_END_WAIT, async {
        // Data the peer sends after our close is discarded, as in librusp.
        while io.read(&mut scratch).await? > 0 {}
        std::io::Result::Ok(())
    })
    .await;
    match drained {
        Ok(Ok(())) => {
            if linger {
                tokio::time::sleep(time_wait(&conn.stats())).await;
            }
            Ok(Ended::Both)
        }
        // Reset or timed out while we waited: it has ended all the same.
        Ok(Err(_)) => Ok(Ended::Both),
        Err(_) => Ok(Ended::Ours),
    }
}

/// How long to stay for a peer's repeated FIN, as the engine's TIME-WAIT
/// lingers before an endpoint counts as idle (spec §4.8): four
/// retransmission timeouts, at least 250 ms (and here at most 1 s).
pub(crate) fn time_wait(st: &mf::ConnStats) -> Duration {
    (4 * (st.srtt + 4 * st.rttvar)).clamp(Duration::from_millis(250), Duration::from_secs(1))
}

/// Writes the local address of `desc` (a connection, listener or group)
/// into `buf` as a NUL-terminated "ip:port" string (`"[ip6]:port"` for
/// IPv6) (librusp's `ruspLocal`). A socket bound to every address shows
/// "0.0.0.0". Returns the string's length, `MF_EBADF` if `desc` is not
/// open, or `MF_ETOOBIG` if it does not fit in `cap` bytes with its NUL
/// (`MF_ADDRSTRLEN` always suffices).
///
/// # Safety
/// `buf` points to `cap` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn mf_local(desc: c_int, buf: *mut c_char, cap: usize) -> c_int {
    entry("mf_local", || {
        let local = table::get(desc)?.local();
        // SAFETY: `cap` writable bytes at `buf` by the contract above.
        let out = unsafe { cabi::buffer(buf.cast(), cap, "mf_local: buf") }?;
        cabi::put_str(out, &local.to_string(), "mf_local")
    })
}

/// Writes the peer's address of the connection `conn` into `buf` as a
/// NUL-terminated "ip:port" string (librusp's `ruspPeer`). Returns the
/// string's length; `MF_EBADF` for a listener or group, which have no one
/// peer; `MF_ETOOBIG` if it does not fit in `cap` bytes.
///
/// # Safety
/// `buf` points to `cap` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn mf_peer(conn: c_int, buf: *mut c_char, cap: usize) -> c_int {
    entry("mf_peer", || {
        let peer = table::stream(conn, "mf_peer")?.peer;
        // SAFETY: `cap` writable bytes at `buf` by the contract above.
        let out = unsafe { cabi::buffer(buf.cast(), cap, "mf_peer: buf") }?;
        cabi::put_str(out, &peer.to_string(), "mf_peer")
    })
}

/// The local address of `desc` as a `struct sockaddr_in` or
/// `sockaddr_in6` written into `*addr`, as librusp's `ruspLocal` gives it.
/// Returns the length of the address written (for `bind`-style calls), or
/// a negative code (`MF_EBADF` if `desc` is not open, `MF_EINVAL` for a
/// NULL `addr`). rusp.h's `ruspLocal` returns 0 instead of the length, as
/// librusp's.
///
/// # Safety
/// `addr` points to a writable `struct sockaddr_storage`.
#[no_mangle]
pub unsafe extern "C" fn mf_local_addr(desc: c_int, addr: *mut libc::sockaddr_storage) -> c_int {
    entry("mf_local_addr", || {
        let local = table::get(desc)?.local();
        // SAFETY: a writable sockaddr_storage by the contract above.
        unsafe { cabi::put_sockaddr(addr, local) }
    })
}

/// The peer's address of the connection `conn` as a `struct sockaddr_in`
/// or `sockaddr_in6` written into `*addr` (librusp's `ruspPeer`). Returns
/// the length of the address written, or a negative code (`MF_EBADF` for
/// a listener or group, or a descriptor not open). rusp.h's `ruspPeer`
/// returns 0 instead of the length, as librusp's.
///
/// # Safety
/// `addr` points to a writable `struct sockaddr_storage`.
#[no_mangle]
pub unsafe extern "C" fn mf_peer_addr(conn: c_int, addr: *mut libc::sockaddr_storage) -> c_int {
    entry("mf_peer_addr", || {
        let peer = match table::get(conn)? {
            Handle::Stream(s) => s.peer,
            _ => return Err(Error::new(MF_EBADF, format!("mf_peer_addr: descriptor {conn} is not a connection"))),
        };
        // SAFETY: a writable sockaddr_storage by the contract above.
        unsafe { cabi::put_sockaddr(addr, peer) }
    })
}
