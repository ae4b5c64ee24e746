//! Request/reply sessions served inside the driver task
//! ([`Endpoint::serve_inline`](crate::Endpoint::serve_inline), spec §15.4):
//! the sessions under way and what the driver does for them in each of
//! its iterations, between receiving and sending:
//!
//! 1. under the lock, it takes the connections the engine accepted, reads
//!    the requests that are complete (FIN received) into one reused
//!    buffer, and refuses those over the limit;
//! 2. without the lock, it runs the handler on each, catching panics, and
//!    appends the replies to a second reused buffer;
//! 3. under the lock again, it writes each reply into its connection and
//!    closes it (the reply, its FIN and the ack of the request then leave
//!    in the driver's transmit step that follows).
//!
//! Once warm, none of it allocates per session: the buffers, the job list
//! and the session table keep their capacity. A request that arrives over
//! several iterations keeps its bytes so far in a buffer of its own, and
//! so does the part of a reply the send buffer could not take yet.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use manyfold_proto::wire::ErrorCode;
use manyfold_proto::{ConnHandle, StreamId};

use crate::session::{HANDLER_FAILED, REQUEST_TOO_LARGE};
use crate::shared::{Inner, Shared};

/// A handler, type-erased: appends its reply to the buffer it is given.
pub(crate) type InlineHandler = dyn Fn(SocketAddr, &[u8], &mut Vec<u8>) + Send + Sync;

/// A handler call longer than this is logged and counted.
const SLOW_HANDLER: Duration = Duration::from_millis(10);

/// Bytes read from the engine per `recv` call, at most.
const READ_CHUNK: usize = 4096;

/// What [`Endpoint::serve_inline`](crate::Endpoint::serve_inline) did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct InlineStats {
    /// Sessions whose handler ran and whose reply was queued whole.
    pub served: u64,
    /// Requests refused for being over the limit ([`REQUEST_TOO_LARGE`]).
    pub too_large: u64,
    /// Handler calls that panicked: their sessions were reset with
    /// [`HANDLER_FAILED`].
    pub handler_panics: u64,
    /// Handler calls that took over 10 ms (the driver stood still meanwhile).
    pub slow_handlers: u64,
    /// Sessions that ended before their request or reply was through (the
    /// client reset or vanished, or the endpoint was aborted).
    pub failed: u64,
}

/// Where one session is.
#[derive(Debug)]
enum Session {
    /// Waiting for more of the request: the bytes so far.
    Reading(Vec<u8>),
    /// The request is complete; its handler runs in this iteration.
    Serving,
    /// The reply's rest, waiting for room in the send buffer.
    Writing(Vec<u8>),
}

/// The inline server of an endpoint, behind the endpoint's lock.
pub(crate) struct InlineServer {
    handler: Arc<InlineHandler>,
    max_request: usize,
    /// Takes newly accepted connections (false once its future ended).
    accepting: bool,
    /// Which `serve_inline` call installed the handler.
    generation: u64,
    /// Sessions under way, until their reply is queued whole.
    sessions: HashMap<ConnHandle, Session>,
    /// Sessions with an engine event since the driver last looked.
    ready: Vec<ConnHandle>,
    pub(crate) stats: InlineStats,
}

impl std::fmt::Debug for InlineServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InlineServer")
            .field("max_request", &self.max_request)
            .field("accepting", &self.accepting)
            .field("sessions", &self.sessions.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl InlineServer {
    pub(crate) fn new(handler: Arc<InlineHandler>, max_request: usize) -> Self {
        InlineServer {
            handler,
            max_request,
            accepting: true,
            generation: 0,
            sessions: HashMap::new(),
            ready: Vec::new(),
            stats: InlineStats::default(),
        }
    }

    /// A later `serve_inline` call: its handler and limit serve the
    /// sessions that follow. Returns its generation.
    pub(crate) fn replace(&mut self, handler: Arc<InlineHandler>, max_request: usize) -> u64 {
        self.handler = handler;
        self.max_request = max_request;
        self.accepting = true;
        self.generation += 1;
        self.generation
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    pub(crate) fn stop_accepting(&mut self) {
        self.accepting = false;
    }

    /// Whether it takes newly accepted connections.
    pub(crate) fn is_accepting(&self) -> bool {
        self.accepting
    }

    /// No session under way.
    pub(crate) fn is_idle(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Whether sessions had events the driver has not looked at.
    pub(crate) fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// An engine event of connection `h`, which the application does not
    /// hold: the driver looks at it if it is one of ours.
    pub(crate) fn note_event(&mut self, h: ConnHandle) {
        if self.sessions.contains_key(&h) {
            self.ready.push(h);
        }
    }

    /// Aborts every session under way with `code` (shutdown deadline,
    /// `abort_all`): their clients learn it from the RST.
    pub(crate) fn abort_sessions(&mut self, engine: &mut manyfold_proto::Endpoint, now: Instant, code: ErrorCode) {
        for (h, _) in self.sessions.drain() {
            engine.conn_mut(h).abort(now, code);
            engine.conn_mut(h).release();
            self.stats.failed += 1;
        }
        self.ready.clear();
    }
}

/// A complete request and, after the handler ran, its reply.
#[derive(Debug)]
struct Job {
    h: ConnHandle,
    peer: SocketAddr,
    request: Range<usize>,
    /// `None`: the handler panicked.
    reply: Option<Range<usize>>,
    /// The handler took over [`SLOW_HANDLER`].
    slow: bool,
}

/// The driver's reused buffers for the inline sessions.
#[derive(Debug, Default)]
pub(crate) struct InlineWork {
    requests: Vec<u8>,
    replies: Vec<u8>,
    jobs: Vec<Job>,
    ready: Vec<ConnHandle>,
}

/// How reading a request ended for now.
enum Read {
    /// The FIN came: the request is whole.
    Done,
    /// More is to come.
    More,
    /// Over the limit.
    TooLarge,
    /// The connection or its stream ended first.
    Failed,
}

/// Reads what `h` has of its request onto the end of `buf` (which holds
/// `start..` of it so far), at most `max` bytes of request.
fn read_request(
    engine: &mut manyfold_proto::Endpoint,
    h: ConnHandle,
    buf: &mut Vec<u8>,
    start: usize,
    max: usize,
) -> Read {
    loop {
        let len = buf.len();
        // One byte past the limit tells an over-long request.
        let want = (max + 1).saturating_sub(len - start).clamp(1, READ_CHUNK);
        buf.resize(len + want, 0);
        let got = engine.conn_mut(h).recv(&mut buf[len..]);
        match got {
            Ok(Some(0)) => {
                buf.truncate(len);
                return Read::Done;
            }
            Ok(Some(n)) => {
                buf.truncate(len + n);
                if buf.len() - start > max {
                    return Read::TooLarge;
                }
            }
            Ok(None) => {
                buf.truncate(len);
                return Read::More;
            }
            Err(_) => {
                buf.truncate(len);
                return Read::Failed;
            }
        }
    }
}

/// Writes as much of `reply` as `h` takes. Returns the bytes taken, or
/// `None` when the connection can take none any more.
fn write_reply(engine: &mut manyfold_proto::Endpoint, h: ConnHandle, reply: &[u8]) -> Option<usize> {
    if reply.is_empty() {
        return Some(0);
    }
    engine.conn_mut(h).send(reply).ok()
}

/// The reply is queued whole: our FIN follows it, and the engine frees the
/// connection once the FIN is acknowledged (spec §15: no TIME-WAIT here).
fn finish(engine: &mut manyfold_proto::Endpoint, h: ConnHandle) {
    let mut c = engine.conn_mut(h);
    c.close();
    c.release();
}

/// Ends a session that cannot be served: its stream reset with `code` (and
/// the rest of the request stopped, spec §13.9), the connection closed and
/// released.
fn refuse(engine: &mut manyfold_proto::Endpoint, h: ConnHandle, code: u16) {
    let mut c = engine.conn_mut(h);
    c.stop_stream(StreamId::BYTES, code);
    c.reset_stream(StreamId::BYTES, code);
    c.close();
    c.release();
}

impl InlineWork {
    /// One round of the inline sessions (the module docs' steps 1–3).
    /// Returns without taking the lock twice when no request is complete.
    pub(crate) fn run(&mut self, shared: &Shared) {
        let handler = {
            let mut inner = shared.lock();
            let handler = self.collect(&mut inner);
            if handler.is_none() {
                retire(shared, &mut inner);
            }
            match handler {
                Some(handler) => handler,
                None => return,
            }
        };
        self.call(&*handler);
        let mut inner = shared.lock();
        self.deliver(&mut inner);
        retire(shared, &mut inner);
    }

    /// Step 1, under the lock. Returns the handler when some request is
    /// complete.
    fn collect(&mut self, inner: &mut Inner) -> Option<Arc<InlineHandler>> {
        // Events first: they tell which of our sessions moved.
        while let Some((h, ev)) = inner.engine.poll_event() {
            inner.dispatch(h, ev);
        }
        let Inner { engine, inline, conns, .. } = inner;
        let server = inline.as_mut()?;
        if server.accepting {
            while let Some(h) = engine.accept() {
                // Accepted before serve_inline began: no handle of the
                // application's was made of it, only the event's entry.
                conns.remove(&h);
                server.sessions.insert(h, Session::Reading(Vec::new()));
                server.ready.push(h);
            }
        }
        self.requests.clear();
        self.replies.clear();
        self.jobs.clear();
        std::mem::swap(&mut self.ready, &mut server.ready);
        for &h in &self.ready {
            let Some(session) = server.sessions.get_mut(&h) else { continue };
            match session {
                Session::Serving => continue,
                Session::Writing(rest) => {
                    match write_reply(engine, h, rest) {
                        Some(n) if n == rest.len() => {
                            finish(engine, h);
                            server.stats.served += 1;
                            server.sessions.remove(&h);
                        }
                        Some(n) => {
                            rest.drain(..n);
                        }
                        None => {
                            engine.conn_mut(h).release();
                            server.stats.failed += 1;
                            server.sessions.remove(&h);
                        }
                    }
                    continue;
                }
                Session::Reading(_) => {}
            }
            let start = self.requests.len();
            if let Session::Reading(so_far) = session {
                self.requests.extend_from_slice(so_far);
            }
            match read_request(engine, h, &mut self.requests, start, server.max_request) {
                Read::Done => {
                    let peer = engine.conn(h).remote_addr().unwrap_or(shared_unspecified());
                    self.jobs.push(Job { h, peer, request: start..self.requests.len(), reply: None, slow: false });
                    *session = Session::Serving;
                }
                Read::More => {
                    if let Session::Reading(so_far) = session {
                        so_far.clear();
                        so_far.extend_from_slice(&self.requests[start..]);
                    }
                    self.requests.truncate(start);
                }
                Read::TooLarge => {
                    // spec §15: the client reads a reset with REQUEST_TOO_LARGE.
                    self.requests.truncate(start);
                    refuse(engine, h, REQUEST_TOO_LARGE);
                    server.stats.too_large += 1;
                    server.sessions.remove(&h);
                }
                Read::Failed => {
                    self.requests.truncate(start);
                    engine.conn_mut(h).release();
                    server.stats.failed += 1;
                    server.sessions.remove(&h);
                }
            }
        }
        self.ready.clear();
        if self.jobs.is_empty() {
            return None;
        }
        Some(server.handler.clone())
    }

    /// Step 2, without the lock: the handlers, each under `catch_unwind`.
    fn call(&mut self, handler: &InlineHandler) {
        let InlineWork { requests, replies, jobs, .. } = self;
        for job in jobs.iter_mut() {
            let start = replies.len();
            let began = Instant::now();
            let request = &requests[job.request.clone()];
            let ran = catch_unwind(AssertUnwindSafe(|| handler(job.peer, request, replies)));
            let took = began.elapsed();
            if took > SLOW_HANDLER {
                tracing::warn!(peer = %job.peer, ?took, "an inline handler ran over 10 ms: the endpoint stood still meanwhile");
                job.slow = true;
            }
            match ran {
                Ok(()) => job.reply = Some(start..replies.len()),
                Err(_) => {
                    tracing::warn!(peer = %job.peer, "an inline handler panicked: its session is reset");
                    replies.truncate(start);
                    job.reply = None;
                }
            }
        }
    }

    /// Step 3, under the lock: each reply into its connection.
    fn deliver(&mut self, inner: &mut Inner) {
        let Inner { engine, inline, .. } = inner;
        let Some(server) = inline.as_mut() else {
            // An abort dropped the sessions meanwhile (they were reset).
            return;
        };
        for job in self.jobs.drain(..) {
            server.stats.slow_handlers += u64::from(job.slow);
            // Aborted meanwhile (endpoint abort): nothing to write to.
            if !matches!(server.sessions.get(&job.h), Some(Session::Serving)) {
                continue;
            }
            let Some(range) = job.reply else {
                refuse(engine, job.h, HANDLER_FAILED);
                server.stats.handler_panics += 1;
                server.sessions.remove(&job.h);
                continue;
            };
            let reply = &self.replies[range];
            match write_reply(engine, job.h, reply) {
                Some(n) if n == reply.len() => {
                    finish(engine, job.h);
                    server.stats.served += 1;
                    server.sessions.remove(&job.h);
                }
                Some(n) => {
                    // The rest goes as the send buffer drains (Writable).
                    server.sessions.insert(job.h, Session::Writing(reply[n..].to_vec()));
                }
                None => {
                    engine.conn_mut(job.h).release();
                    server.stats.failed += 1;
                    server.sessions.remove(&job.h);
                }
            }
        }
    }
}

/// Stops the driver's rounds for an inline server whose `serve_inline`
/// ended, once its last session is through (its counters stay).
fn retire(shared: &Shared, inner: &mut Inner) {
    if inner.inline.as_ref().is_some_and(|s| !s.accepting && s.sessions.is_empty()) {
        shared.set_inline(false);
    }
}

/// The address a handler is given when the engine no longer knows the
/// peer's (never for a connection that just delivered its request).
fn shared_unspecified() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 0))
}
