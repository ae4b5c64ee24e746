//! Whole messages on a connection's streams (spec §13): `mf_send_message`
//! and `mf_recv_message`, and the `mf_message` record that says what was
//! received (also used by `mf_group_recv_message`).

use std::ffi::{c_int, c_void};
use std::sync::Mutex;

use crate::cabi;
use crate::error::{entry, Error, MF_ETOOBIG, MF_OK};
use crate::table::{self, in_runtime};

/// `mf_message.kind`: a whole message, its bytes in the buffer.
pub const MF_MSG_DATA: c_int = 1;
/// `mf_message.kind`: the sender gave up a message (partial reliability);
/// nothing is in the buffer.
pub const MF_MSG_ABANDONED: c_int = 2;
/// `mf_message.kind`: the sender finished the stream; nothing follows on it.
pub const MF_MSG_FINISHED: c_int = 3;
/// `mf_message.kind`: the sender reset the stream with `reset_code`;
/// nothing follows on it.
pub const MF_MSG_RESET: c_int = 4;

/// What `mf_recv_message` / `mf_group_recv_message` received.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MfMessage {
    /// `MF_MSG_DATA`, `MF_MSG_ABANDONED`, `MF_MSG_FINISHED` or `MF_MSG_RESET`.
    pub kind: c_int,
    /// The stream it came on (0..65535).
    pub stream: u16,
    /// For `MF_MSG_RESET`: the sender's error code.
    pub reset_code: u16,
    /// For a group: the peer it came from (a number the group gives each
    /// peer, never reused); 0 on a connection.
    pub peer: u32,
    /// For `MF_MSG_DATA`: the message's length in bytes, also when it did
    /// not fit in the buffer (`MF_ETOOBIG`); else 0.
    pub len: usize,
}

/// Hands one received item to the caller: its record into `info`, a
/// message's bytes into `buf`. A message larger than `buf` is given back
/// (to be kept for the next call) with `MF_ETOOBIG`.
pub(crate) fn deliver<K>(
    key: K,
    stream: u16,
    peer: u32,
    item: mf::StreamItem,
    info: &mut MfMessage,
    buf: &mut [u8],
    call: &str,
) -> Result<(), (Error, Option<(K, mf::StreamItem)>)> {
    let mut m = MfMessage { stream, peer, ..MfMessage::default() };
    match item {
        mf::StreamItem::Message(data) => {
            m.kind = MF_MSG_DATA;
            m.len = data.len();
            *info = m;
            let Some(dst) = buf.get_mut(..data.len()) else {
                let e = Error::new(
                    MF_ETOOBIG,
                    format!(
                        "{call}: a message of {} bytes does not fit the buffer of {}; it is kept for the next call",
                        data.len(),
                        buf.len()
                    ),
                );
                return Err((e, Some((key, mf::StreamItem::Message(data)))));
            };
            dst.copy_from_slice(&data);
        }
        mf::StreamItem::Abandoned => m.kind = MF_MSG_ABANDONED,
        mf::StreamItem::Finished => m.kind = MF_MSG_FINISHED,
        mf::StreamItem::Reset(code) => {
            m.kind = MF_MSG_RESET;
            m.reset_code = code;
        }
    }
    *info = m;
    Ok(())
}

/// Receives the next item for a caller: a kept one first, else `next()`.
pub(crate) fn receive<K: Copy>(
    pending: &Mutex<Option<(K, mf::StreamItem)>>,
    next: impl FnOnce() -> Result<Option<(K, mf::StreamItem)>, Error>,
    describe: impl Fn(K) -> (u16, u32),
    info: &mut MfMessage,
    buf: &mut [u8],
    call: &str,
) -> Result<c_int, Error> {
    // Held while waiting, so that a message kept for being too big is the
    // next one any thread receives.
    let mut kept = pending.lock().unwrap_or_else(|p| p.into_inner());
    let got = match kept.take() {
        Some(item) => Some(item),
        None => next()?,
    };
    let Some((key, item)) = got else {
        *info = MfMessage::default();
        return Ok(0);
    };
    let (stream, peer) = describe(key);
    match deliver(key, stream, peer, item, info, buf, call) {
        Ok(()) => Ok(1),
        Err((e, back)) => {
            *kept = back;
            Err(e)
        }
    }
}

/// Sends `len` bytes at `buf` as one whole message on stream `stream` of
/// the connection `conn`, reliably and in that stream's order (opening the
/// stream if new). Blocks while the send buffer has no room for the whole
/// message. A message is received whole by `mf_recv_message`; messages on
/// different streams do not wait for each other's losses. Stream 0 is also
/// the byte stream of `mf_send`: do not mix the two on it.
///
/// Returns `MF_OK`, or `MF_ETOOBIG` for a message over the connection's
/// maximum (16 MiB; nothing is sent), `MF_ELIMIT` when too many streams are
/// open, `MF_ECLOSED` if another thread closed `conn` while this call was
/// blocked, `MF_EBADF` if `conn` is not an open connection (also after
/// `mf_close`), or the connection's error as `mf_send` gives it.
///
/// # Safety
/// `buf` points to `len` readable bytes (or is NULL with `len` 0).
#[no_mangle]
pub unsafe extern "C" fn mf_send_message(conn: c_int, stream: u16, buf: *const c_void, len: usize) -> c_int {
    entry("mf_send_message", || {
        let s = table::stream(conn, "mf_send_message")?;
        // SAFETY: `len` readable bytes at `buf` by the contract above.
        let data = unsafe { cabi::data(buf, len, "mf_send_message: buf") }?;
        in_runtime(|rt| {
            let what = || format!("mf_send_message on connection {conn} stream {stream}");
            s.closing.block_on(rt, what, async {
                // Copied: the library holds a message until it is
                // acknowledged, and the caller's buffer is theirs again on return.
                s.streams.send_message(stream, data.to_vec()).await.map_err(|e| Error::conn(&what(), &e))
            })
        })?;
        Ok(MF_OK)
    })
}

/// Blocks until the next message (or notice) of any stream of `conn`
/// arrives, streams taking turns. Fills `*info` (which stream, what kind,
/// how long) and copies a message's bytes into `buf`.
///
/// Returns 1 when something was received, 0 once the peer closed and
/// everything was read, or a negative code. `MF_ETOOBIG`: the message
/// (`info->len` bytes) does not fit in `cap`; nothing is lost, the next call
/// returns it (with a large enough buffer). `MF_ECLOSED` if another thread
/// closed `conn` while this call was blocked, `MF_EBADF` if `conn` is not
/// an open connection (also after `mf_close`), or the connection's error
/// as `mf_receive` gives it.
///
/// # Safety
/// `info` points to a writable `mf_message`; `buf` to `cap` writable bytes
/// (or is NULL with `cap` 0).
#[no_mangle]
pub unsafe extern "C" fn mf_recv_message(conn: c_int, info: *mut MfMessage, buf: *mut c_void, cap: usize) -> c_int {
    entry("mf_recv_message", || {
        let s = table::stream(conn, "mf_recv_message")?;
        // SAFETY: a writable mf_message or null by the contract above.
        let info = unsafe { cabi::out(info) }.ok_or_else(|| Error::invalid("mf_recv_message: info is NULL"))?;
        // SAFETY: `cap` writable bytes at `buf` by the contract above.
        let buf = unsafe { cabi::buffer(buf, cap, "mf_recv_message: buf") }?;
        let next = || {
            in_runtime(|rt| {
                let what = || format!("mf_recv_message on connection {conn}");
                s.closing
                    .block_on(rt, what, async { s.streams.recv_message().await.map_err(|e| Error::conn(&what(), &e)) })
            })
        };
        let got = receive(&s.pending, next, |stream| (stream, 0), info, buf, "mf_recv_message")?;
        if got == 0 {
            s.peer_ended.store(true, std::sync::atomic::Ordering::Release);
        }
        Ok(got)
    })
}
