//! Groups (spec §14; paper 00 §4.2, paper 01): one sender, many receivers
//! over unicast. `mf_group_connect` runs the parallel handshake,
//! `mf_group_send` sends a message held once for every peer,
//! `mf_group_wait` is paper 00's WaitForSend, `mf_group_recv_message`
//! reads what peers send back, `mf_group_close` closes. Receivers are
//! plain listeners: `mf_accept`, then `mf_recv_message` (each group message
//! is one message on stream 0) or `mf_receive` (its bytes).

use std::ffi::{c_char, c_int, c_void};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::attrs::SocketAttrs;
use crate::cabi;
use crate::error::{entry, kind_code, Error, MF_EBADF, MF_ECONNREFUSED, MF_ETIMEDOUT, MF_OK};
use crate::message::{receive, MfMessage};
use crate::table::{self, in_runtime, GroupEntry, Handle};

/// Delivery mode: a message is delivered when every peer acknowledged it.
pub const MF_MODE_ALL: c_int = 0;
/// Delivery mode: one acknowledgement suffices; the other copies are given up.
pub const MF_MODE_ANY: c_int = 1;
/// Delivery mode: at least `p` peers acknowledge.
pub const MF_MODE_AT_LEAST: c_int = 2;
/// Delivery mode: each message goes to the `k` least loaded peers and is
/// delivered when `p` of them acknowledge (paper 00's CBAL).
pub const MF_MODE_BALANCED: c_int = 3;

fn mode(mode: c_int, p: c_int, k: c_int) -> Result<mf::Mode, Error> {
    let count = |v: c_int, name: &str| {
        u16::try_from(v).map_err(|_| Error::invalid(format!("mf_group_connect: {name} = {v} is not in 0..=65535")))
    };
    let m = match mode {
        MF_MODE_ALL => mf::Mode::All,
        MF_MODE_ANY => mf::Mode::Any,
        MF_MODE_AT_LEAST => mf::Mode::AtLeast(count(p, "p")?),
        MF_MODE_BALANCED => mf::Mode::Subset { k: count(k, "k")?, p: count(p, "p")? },
        _ => return Err(Error::invalid(format!("mf_group_connect: unknown mode {mode}"))),
    };
    m.check().map_err(|e| Error::invalid(format!("mf_group_connect: {e}")))?;
    Ok(m)
}

/// The code that says why a peer is not in the group.
fn unreachable_code(why: mf::Unreachable) -> c_int {
    match why {
        mf::Unreachable::NoAnswer => MF_ETIMEDOUT,
        mf::Unreachable::Refused => MF_ECONNREFUSED,
        mf::Unreachable::Failed(reason) => kind_code(mf::ConnectionError::Closed(reason).kind()),
    }
}

/// Opens a group from a fresh socket to the `count` receivers named in
/// `addrs` ("ip:port" or "host:port" strings, each a listener), with every
/// handshake at once; returns when all answered or after 10 seconds with
/// those that did. `mode` is `MF_MODE_ALL`, `MF_MODE_ANY`,
/// `MF_MODE_AT_LEAST` (with `p`) or `MF_MODE_BALANCED` (with `k` and `p`);
/// `p` and `k` are ignored by the modes that do not use them. The group
/// takes its attributes from `MF_DEFAULTS` as they are now.
///
/// If `status` is not NULL it receives `count` codes, one per address: 0
/// if that peer is in the group, else why not (`MF_ECONNREFUSED`,
/// `MF_ETIMEDOUT`, ...). The group is formed if at least as many peers
/// answered as the mode needs (1 for all and any, `p` for the others).
///
/// Returns the group's descriptor (> 0), or a negative code:
/// `MF_EUNREACHABLE` if too few peers answered, `MF_EINVAL` for a bad
/// address, mode, `p` or `k`.
///
/// # Safety
/// `addrs` points to `count` NUL-terminated strings; `status` is NULL or
/// points to `count` writable ints.
#[no_mangle]
pub unsafe extern "C" fn mf_group_connect(
    addrs: *const *const c_char,
    count: usize,
    mode: c_int,
    p: c_int,
    k: c_int,
    status: *mut c_int,
) -> c_int {
    entry("mf_group_connect", || {
        if count == 0 {
            return Err(Error::invalid("mf_group_connect: count is 0: a group needs at least one peer"));
        }
        if addrs.is_null() {
            return Err(Error::invalid("mf_group_connect: addrs is NULL"));
        }
        let mode = self::mode(mode, p, k)?;
        // SAFETY: `count` string pointers at `addrs` by the contract above
        // (count * size_of pointer fits: the array exists in memory).
        let names = unsafe { std::slice::from_raw_parts(addrs, count) };
        let mut peers: Vec<SocketAddr> = Vec::with_capacity(count);
        for (i, &name) in names.iter().enumerate() {
            let what = format!("mf_group_connect: addrs[{i}]");
            // SAFETY: each a NUL-terminated string (null is refused) by the contract above.
            let s = unsafe { cabi::text(name, &what) }?;
            peers.push(cabi::resolve_pair(s, &what)?);
        }
        let status = if status.is_null() {
            None
        } else {
            // SAFETY: `count` writable ints at `status` by the contract above.
            Some(unsafe { std::slice::from_raw_parts_mut(status, count) })
        };
        let min_peers = match mode {
            mf::Mode::All | mf::Mode::Any => 1,
            mf::Mode::AtLeast(p) | mf::Mode::Subset { p, .. } => usize::from(p).max(1),
        };
        let config = mf::GroupConfig { mode, min_peers, ..mf::GroupConfig::default() };
        let v6 = peers[0].is_ipv6();
        let local: SocketAddr = if v6 { ([0u16; 8], 0).into() } else { ([0, 0, 0, 0], 0).into() };
        in_runtime(|rt| {
            let formed = rt.block_on(async {
                // Entered before the handshakes: `MF_ALL` reaches it meanwhile.
                let (attrs, bind_config) = SocketAttrs::from_defaults();
                let endpoint = mf::Endpoint::bind(local, bind_config.clone())
                    .await
                    .map_err(|e| Err(Error::io("mf_group_connect: bind", &e)))?;
                attrs.attach(&endpoint, &bind_config);
                let formed = endpoint.group(&peers, config).await;
                if formed.is_err() {
                    // No group: release the socket now, ending any half-made peer.
                    attrs.detach();
                    endpoint.shutdown_within(Duration::ZERO).await;
                }
                match formed {
                    Ok((group, unreachable)) => Ok((endpoint, group, unreachable, attrs)),
                    Err(mf::GroupError::Unreachable(unreachable)) => {
                        let e = Error::group("mf_group_connect", &mf::GroupError::Unreachable(unreachable.clone()));
                        Err(Ok((e, unreachable)))
                    }
                    Err(e) => Err(Err(Error::group("mf_group_connect", &e))),
                }
            });
            let fill = |status: Option<&mut [c_int]>, unreachable: &[(SocketAddr, mf::Unreachable)]| {
                if let Some(status) = status {
                    for (slot, addr) in status.iter_mut().zip(&peers) {
                        *slot =
                            unreachable.iter().find(|(a, _)| a == addr).map_or(0, |(_, why)| unreachable_code(*why));
                    }
                }
            };
            match formed {
                Ok((endpoint, group, unreachable, attrs)) => {
                    fill(status, &unreachable);
                    let entry =
                        GroupEntry { group, endpoint, attrs, pending: Mutex::new(None), closing: Default::default() };
                    table::insert(Handle::Group(Arc::new(entry)))
                }
                Err(Ok((e, unreachable))) => {
                    fill(status, &unreachable);
                    Err(e)
                }
                Err(Err(e)) => Err(e),
            }
        })
    })
}

/// Sends `len` bytes at `buf` as one message to the group `group`, in its
/// mode; blocks while the shared send buffer (64 MiB) is full. The data is
/// held once in memory whatever the number of peers. Returns the message's
/// group sequence number (0, 1, 2, ...), or a negative code
/// (`MF_EUNREACHABLE` if no live peer is left, `MF_ECLOSED` if
/// another thread closed `group` while this call was blocked, `MF_EBADF`
/// if `group` is not an open group).
///
/// # Safety
/// `buf` points to `len` readable bytes (or is NULL with `len` 0).
#[no_mangle]
pub unsafe extern "C" fn mf_group_send(group: c_int, buf: *const c_void, len: usize) -> i64 {
    entry("mf_group_send", || {
        let g = table::group(group, "mf_group_send")?;
        // SAFETY: `len` readable bytes at `buf` by the contract above.
        let data = unsafe { cabi::data(buf, len, "mf_group_send: buf") }?;
        let seq = in_runtime(|rt| {
            let what = || format!("mf_group_send on group {group}");
            g.closing
                .block_on(rt, what, async { g.group.send(data.to_vec()).await.map_err(|e| Error::conn(&what(), &e)) })
        })?;
        Ok(i64::try_from(seq).unwrap_or(i64::MAX))
    })
}

/// Blocks until every message sent to the group `group` is delivered in
/// its mode's sense (paper 00's WaitForSend). Returns `MF_OK` or a
/// negative code (`MF_ECLOSED` if another thread closed `group` while this
/// call was blocked, `MF_EBADF` if `group` is not an open group).
#[no_mangle]
pub extern "C" fn mf_group_wait(group: c_int) -> c_int {
    entry("mf_group_wait", || {
        let g = table::group(group, "mf_group_wait")?;
        in_runtime(|rt| {
            let what = || format!("mf_group_wait on group {group}");
            g.closing.block_on(rt, what, async { g.group.wait_for_send().await.map_err(|e| Error::conn(&what(), &e)) })
        })?;
        Ok(MF_OK)
    })
}

/// Blocks until the next message (or notice) that any peer of `group`
/// sends back arrives, as `mf_recv_message` does for a connection;
/// `info->peer` says which peer. Returns 1 when something was received, 0
/// once the group is closed and nothing is left, or a negative code
/// (`MF_ETOOBIG` keeps the message for the next call; `MF_ECLOSED` if
/// another thread closed `group` while this call was blocked).
///
/// # Safety
/// `info` points to a writable `mf_message`; `buf` to `cap` writable bytes
/// (or is NULL with `cap` 0).
#[no_mangle]
pub unsafe extern "C" fn mf_group_recv_message(
    group: c_int,
    info: *mut MfMessage,
    buf: *mut c_void,
    cap: usize,
) -> c_int {
    entry("mf_group_recv_message", || {
        let g = table::group(group, "mf_group_recv_message")?;
        // SAFETY: a writable mf_message or null by the contract above.
        let info = unsafe { cabi::out(info) }.ok_or_else(|| Error::invalid("mf_group_recv_message: info is NULL"))?;
        // SAFETY: `cap` writable bytes at `buf` by the contract above.
        let buf = unsafe { cabi::buffer(buf, cap, "mf_group_recv_message: buf") }?;
        let next = || {
            in_runtime(|rt| {
                let what = || format!("mf_group_recv_message on group {group}");
                g.closing.block_on(rt, what, async { Ok(g.group.recv_message().await) })
            })
        };
        receive(&g.pending, next, |d: mf::Destination| (d.stream.get(), d.peer.0), info, buf, "mf_group_recv_message")
    })
}

/// The group's close as `mf_close` of a connection does it (see
/// `close_connection`): every peer has acknowledged everything, then each
/// peer's own end is awaited (at most 5 seconds in all); the endpoint's
/// shutdown then lingers in TIME-WAIT, so that receivers closing after the
/// sender can complete their close even if the sender's process exits next.
pub(crate) async fn close_group(group: &mf::Group) -> Result<(), mf::CloseError> {
    use tokio::io::AsyncReadExt;
    group.close().await?;
    let peers = group.peers();
    let mut waiting: Vec<mf::PeerId> =
        peers.iter().filter(|(_, p)| p.state != mf::PeerState::Gone).map(|(id, _)| *id).collect();
    let deadline = tokio::time::Instant::now() + crate::stream::PEER_END_WAIT;
    let mut scratch = vec![0u8; 64 << 10];
    while !waiting.is_empty() && tokio::time::Instant::now() < deadline {
        let mut still = Vec::new();
        for id in waiting {
            let mut reader = group.reader(id, 0);
            // A short wait per turn: the reader's wakeups come from group
            // events, so poll again rather than trust one to come.
            let ended = loop {
                match tokio::time::timeout(Duration::from_millis(20), reader.read(&mut scratch)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => break true,
                    Ok(Ok(_)) => continue, // data after our close is discarded
                    Err(_) => break false,
                }
            };
            if !ended {
                still.push(id);
            }
        }
        waiting = still;
    }
    // The TIME-WAIT linger is the endpoint's shutdown's (`stream::close`).
    Ok(())
}

/// Closes the group `group`: blocks until every peer has acknowledged
/// everything sent, or is gone, and then (at most 5 seconds) until each
/// has ended its side, followed by a short TIME-WAIT (as `mf_close` of a
/// connection); the descriptor is invalid afterwards.
/// Returns `MF_OK` or a negative code (`MF_EBADF` if `group` is not a
/// group: then it stays open).
#[no_mangle]
pub extern "C" fn mf_group_close(group: c_int) -> c_int {
    entry("mf_group_close", || {
        if !matches!(table::get(group)?, Handle::Group(_)) {
            return Err(Error::new(MF_EBADF, format!("mf_group_close: descriptor {group} is not a group")));
        }
        crate::stream::close(group)
    })
}
