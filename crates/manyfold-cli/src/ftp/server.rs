//! `manyfold ftp-server`: serves one directory tree to `manyfold ftp`
//! clients (spec §17). Each connection's requests arrive on its control
//! stream and run as tasks of their own, so a long transfer or copy never
//! holds up a listing; transfers use the streams the client names.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use manyfold::{Connection, StreamItem, Streams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;

use super::root::{hash_prefix, FsResult, Root};
use super::wire::{
    Code, Failure, Reply, Request, CONTROL_STREAM, FIRST_TRANSFER_STREAM, HASH_LEN, STREAM_ABANDONED, VERSION,
};
use crate::net::{self, NetArgs};
use crate::size::{human_bytes, size_arg};

/// A client must say hello (and show its token) within this time.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client with a wrong token waits before it is told and closed.
const BAD_TOKEN_DELAY: Duration = Duration::from_secs(1);
/// Requests of one connection running at once; more wait to be read.
const MAX_INFLIGHT: usize = 32;
/// Transfer I/O unit.
const CHUNK: usize = 256 * 1024;

#[derive(Args, Debug)]
pub struct ServerArgs {
    /// Directory to serve. Clients see it as `/`; nothing outside it can
    /// be named, whatever `..` or symbolic links a path holds.
    #[arg(long, value_name = "DIR")]
    pub root: PathBuf,

    /// Address to listen on, HOST:PORT (port 0 picks a free port; the
    /// address used is printed).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7021")]
    pub listen: String,

    /// Refuse every change: uploads, mkdir, rm, mv, cp.
    #[arg(long)]
    pub read_only: bool,

    /// File holding the token clients must present (`manyfold ftp
    /// --token-file`). Compared in constant time; a wrong token closes
    /// the connection after a delay.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,

    /// Largest file a client may upload (e.g. 4GiB) [default: no limit
    /// but the free space].
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    pub max_file_size: Option<u64>,

    /// Most clients connected at once; more are told the server is busy.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub max_clients: usize,

    #[command(flatten)]
    pub net: NetArgs,
}

/// Reads a token file: its first line, which must not be empty.
pub fn read_token(path: &std::path::Path) -> Result<Vec<u8>> {
    let text = std::fs::read(path).with_context(|| format!("cannot read the token file {}", path.display()))?;
    let line = text.split(|&b| b == b'\n').next().unwrap_or(&[]);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.is_empty() {
        bail!("the token file {} is empty", path.display());
    }
    Ok(line.to_vec())
}

/// What every connection shares: the tree, and the uploads running in it.
pub struct Service {
    pub root: Root,
    uploads: std::sync::Mutex<std::collections::HashMap<String, (u64, Arc<tokio::sync::Notify>)>>,
    tickets: std::sync::atomic::AtomicU64,
}

impl Service {
    pub fn new(root: Root) -> Service {
        Service { root, uploads: Default::default(), tickets: Default::default() }
    }
}

/// How long a new upload waits for an older one of the same file to let go.
const TAKEOVER_WAIT: Duration = Duration::from_secs(5);

pub async fn run(args: ServerArgs) -> Result<()> {
    let meta = std::fs::metadata(&args.root).with_context(|| format!("cannot serve {}", args.root.display()))?;
    if !meta.is_dir() {
        bail!("{} is not a directory", args.root.display());
    }
    if args.max_clients == 0 {
        bail!("--max-clients must be at least 1");
    }
    let token = args.token_file.as_deref().map(read_token).transpose()?.map(Arc::new);
    let root = Root::open(&args.root, args.read_only, args.max_file_size.unwrap_or(u64::MAX))
        .with_context(|| format!("cannot serve {}", args.root.display()))?;
    let root = Arc::new(Service::new(root));
    let server = net::listen(&args.listen, &args.net, |_| {}).await?;
    let (endpoint, local) = (Arc::clone(&server.endpoint), server.local);
    let mut notes = vec![server.mode.clone()];
    if args.read_only {
        notes.push("read-only".to_string());
    }
    if token.is_some() {
        notes.push("token required".to_string());
    }
    if let Some(m) = args.max_file_size {
        notes.push(format!("uploads up to {}", human_bytes(m)));
    }
    let banner = format!(
        "manyfold ftp-server: listening on {local} ({}), serving {} (Ctrl-C to stop)",
        notes.join(", "),
        args.root.display()
    );
    // With --json too: a script needs the address (port 0 picks one).
    crate::report::emit(
        &banner,
        || serde_json::json!({ "listening": local.to_string(), "root": args.root, "read_only": args.read_only }),
    );

    let (mut conn_rx, acceptor) = net::spawn_acceptor(Arc::clone(&endpoint));
    let mut clients: JoinSet<ClientEnd> = JoinSet::new();
    let mut refused = net::PeerLog::new(Duration::from_secs(10));
    let mut accepting = true;
    let ctrl_c = net::interrupted();
    tokio::pin!(ctrl_c);
    let outcome = loop {
        tokio::select! {
            _ = &mut ctrl_c => break Ok(()),
            conn = conn_rx.recv(), if accepting => {
                let Some(conn) = conn else {
                    match net::accepting_ended(&mut accepting) {
                        Ok(()) => continue,
                        Err(e) => break Err(e),
                    }
                };
                if clients.len() >= args.max_clients {
                    clients.spawn(refuse_busy(conn));
                    continue;
                }
                let (root, token) = (Arc::clone(&root), token.clone());
                clients.spawn(async move { serve(conn, &root, token.as_deref().map(Vec::as_slice)).await });
            }
            Some(joined) = clients.join_next() => match joined {
                // A wrong token is a failed login: logged, at most once a
                // period per address, so a guessing loop cannot flood the log.
                Ok(ClientEnd { line, unauthorized: Some(peer), .. }) => refused.note(peer, &line),
                Ok(ClientEnd { line, json, unauthorized: None }) => crate::report::emit(&line, || json),
                Err(e) => eprintln!("error: a client task failed: {e}"),
            },
        }
    };
    acceptor.abort();
    clients.shutdown().await;
    let bound = Duration::from_millis(500);
    let _ = tokio::time::timeout(bound + Duration::from_secs(1), endpoint.shutdown_within(bound)).await;
    outcome
}

struct Summary {
    peer: SocketAddr,
    security: manyfold::Protection,
    start: Instant,
    requests: u64,
    bytes_in: u64,
    bytes_out: u64,
}

impl Summary {
    fn new(peer: SocketAddr, security: manyfold::Protection) -> Summary {
        Summary { peer, security, start: Instant::now(), requests: 0, bytes_in: 0, bytes_out: 0 }
    }

    /// The client's line, and the same as JSON (`--json`): `peer`,
    /// `encrypted`, `requests`, `bytes_in` (uploaded), `bytes_out`
    /// (downloaded and listed), `seconds`, `ended` (null when the client
    /// closed, else why the connection ended: "server full", an error).
    fn end(&self, ended: Option<String>, unauthorized: Option<SocketAddr>) -> ClientEnd {
        let seconds = self.start.elapsed().as_secs_f64();
        let line = format!(
            "{} ({}): {} request(s), {} in, {} out, {seconds:.1} s, {}",
            self.peer,
            crate::keys::short(self.security),
            self.requests,
            human_bytes(self.bytes_in),
            human_bytes(self.bytes_out),
            ended.as_ref().map_or("closed".to_string(), |why| format!("ended: {why}")),
        );
        let json = serde_json::json!({
            "peer": self.peer.to_string(),
            "encrypted": matches!(self.security, manyfold::Protection::Encrypted { .. }),
            "requests": self.requests,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "seconds": seconds,
            "ended": ended,
        });
        ClientEnd { line, json, unauthorized }
    }
}

/// How a client's connection ended: its line and object, and its address
/// if it was refused for a wrong token.
pub(super) struct ClientEnd {
    pub line: String,
    pub json: serde_json::Value,
    pub unauthorized: Option<SocketAddr>,
}

async fn refuse_busy(mut conn: Connection) -> ClientEnd {
    let summary = Summary::new(conn.peer_addr(), conn.protection());
    let streams = conn.streams();
    let _ =
        streams.send_message(CONTROL_STREAM, &Reply::Error(Failure::new(Code::Busy, "server full")).encode(0)).await;
    let _ = tokio::time::timeout(Duration::from_secs(2), conn.close()).await;
    summary.end(Some("refused: server full".into()), None)
}

async fn send(streams: &Streams, id: u32, reply: Reply) -> Result<()> {
    streams.send_message(CONTROL_STREAM, &reply.encode(id)).await.context("cannot reply")
}

/// Serves one client's connection until it closes; returns the line that
/// sums it up.
pub(super) async fn serve(conn: Connection, root: &Arc<Service>, token: Option<&[u8]>) -> ClientEnd {
    let peer = conn.peer_addr();
    let security = conn.protection();
    let mut s = Summary::new(peer, security);
    let r = serve_client(conn, root, token, &mut s).await;
    let unauthorized = matches!(&r, Err(e) if e.downcast_ref::<WrongToken>().is_some()).then_some(peer);
    s.end(r.err().map(|e| format!("{:#}", net::explain(e, net::Role::Client))), unauthorized)
}

/// A client that showed a wrong token (or none where one is required).
#[derive(Debug, thiserror::Error)]
#[error("wrong token")]
struct WrongToken;

/// Runs one client's connection until it closes.
async fn serve_client(
    mut conn: Connection,
    root: &Arc<Service>,
    token: Option<&[u8]>,
    sum: &mut Summary,
) -> Result<()> {
    let streams = conn.streams();
    streams.set_priority(CONTROL_STREAM, 64, 1);
    let first = tokio::time::timeout(HELLO_TIMEOUT, streams.recv_message_on(CONTROL_STREAM))
        .await
        .map_err(|_| anyhow!("no hello within {HELLO_TIMEOUT:?}"))??;
    let Some(StreamItem::Message(m)) = first else { bail!("closed before saying hello") };
    let (id, given) = match Request::parse(&m) {
        Ok((id, Request::Hello { version, token })) if version == VERSION => (id, token),
        Ok((id, Request::Hello { version, .. })) => {
            let text = format!("protocol version {version}; this server speaks version {VERSION}");
            send(&streams, id, Reply::Error(Failure::new(Code::Unsupported, text.clone()))).await?;
            let _ = tokio::time::timeout(Duration::from_secs(2), conn.close()).await;
            bail!("{text}");
        }
        _ => bail!("the first message was not a hello"),
    };
    if let Some(expected) = token {
        if !constant_time_eq::constant_time_eq(&given, expected) {
            tokio::time::sleep(BAD_TOKEN_DELAY).await;
            send(&streams, id, Reply::Error(Failure::new(Code::Unauthorized, "wrong or missing token"))).await?;
            let _ = tokio::time::timeout(Duration::from_secs(2), conn.close()).await;
            return Err(WrongToken.into());
        }
    }
    let (read_only, max_file) = (root.root.read_only, root.root.max_file);
    send(&streams, id, Reply::Welcome { version: VERSION, read_only, max_file }).await?;

    let permits = Arc::new(Semaphore::new(MAX_INFLIGHT));
    let busy: Busy = Arc::default();
    let mut tasks: JoinSet<(u64, u64)> = JoinSet::new();
    let result = loop {
        let permit = Arc::clone(&permits).acquire_owned().await.expect("never closed");
        let item = tokio::select! {
            item = streams.recv_message_on(CONTROL_STREAM) => item,
            Some(done) = tasks.join_next() => {
                if let Ok((i, o)) = done {
                    sum.bytes_in += i;
                    sum.bytes_out += o;
                }
                continue;
            }
        };
        let m = match item {
            Ok(Some(StreamItem::Message(m))) => m,
            Ok(None) | Ok(Some(StreamItem::Finished)) => break Ok(()),
            Ok(Some(other)) => break Err(anyhow!("control stream: {other:?}")),
            Err(e) => break Err(e.into()),
        };
        let (id, req) = match Request::parse(&m) {
            Ok(r) => r,
            Err(e) => {
                let _ = send(&streams, 0, Reply::Error(Failure::new(Code::BadRequest, e.to_string()))).await;
                break Err(anyhow!("malformed request: {e}"));
            }
        };
        sum.requests += 1;
        let (root, streams, busy) = (Arc::clone(root), streams.clone(), Arc::clone(&busy));
        tasks.spawn(async move {
            let _permit = permit;
            handle(&root, &streams, &busy, id, req).await
        });
    };
    // The client closed (or broke) the connection: whatever still runs
    // has nobody to report to.
    while let Some(done) = tasks.join_next().await {
        if let Ok((i, o)) = done {
            sum.bytes_in += i;
            sum.bytes_out += o;
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), conn.close()).await;
    result
}

/// Runs a blocking file-system call off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> FsResult<T> + Send + 'static) -> FsResult<T> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| Err(Failure::new(Code::Io, format!("task failed: {e}"))))
}

/// The transfer streams of one connection in use by a running transfer.
type Busy = Arc<std::sync::Mutex<std::collections::HashSet<u16>>>;

/// A transfer's claim on its stream, given back when the transfer ends.
struct Claim {
    busy: Busy,
    stream: u16,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.busy.lock().expect("not poisoned").remove(&self.stream);
    }
}

/// Claims `stream` for a transfer: a transfer stream (not the control
/// stream, nor stream 0) that no other running transfer uses. The client
/// picks the number, so nothing else stops two transfers from mixing
/// their bytes on one stream, or a file's bytes from landing among the
/// replies.
fn claim(busy: &Busy, stream: u16) -> FsResult<Claim> {
    if stream < FIRST_TRANSFER_STREAM {
        return Err(Failure::new(Code::BadRequest, format!("stream {stream} cannot carry a transfer")));
    }
    if !busy.lock().expect("not poisoned").insert(stream) {
        return Err(Failure::new(Code::BadRequest, format!("stream {stream} already carries a transfer")));
    }
    Ok(Claim { busy: Arc::clone(busy), stream })
}

/// Answers one request; returns the bytes it received and sent.
async fn handle(service: &Arc<Service>, streams: &Streams, busy: &Busy, id: u32, req: Request) -> (u64, u64) {
    let root = service;
    let r = Arc::clone(service);
    // A transfer's stream is its own while it runs.
    let _claim = match &req {
        Request::Get { stream, .. } | Request::Put { stream, .. } => match claim(busy, *stream) {
            Ok(c) => Some(c),
            Err(f) => {
                let _ = send(streams, id, Reply::Error(f)).await;
                return (0, 0);
            }
        },
        _ => None,
    };
    let simple = match req {
        Request::Hello { .. } => Err(Failure::new(Code::BadRequest, "hello twice")),
        Request::Stat { path } => blocking(move || r.root.stat(&path)).await.map(Reply::Stat),
        Request::List { path } => return (0, list(root, streams, id, path).await),
        Request::Mkdir { path, parents } => blocking(move || r.root.mkdir(&path, parents)).await.map(|()| Reply::Done),
        Request::Rmdir { path } => blocking(move || r.root.rmdir(&path)).await.map(|()| Reply::Done),
        Request::Remove { path, recursive } => {
            blocking(move || r.root.remove(&path, recursive)).await.map(|()| Reply::Done)
        }
        Request::Move { from, to, force } => {
            blocking(move || r.root.rename(&from, &to, force)).await.map(|()| Reply::Done)
        }
        Request::Copy { from, to, recursive, force } => {
            blocking(move || r.root.copy(&from, &to, recursive, force)).await.map(|()| Reply::Done)
        }
        Request::Get { path, stream, offset, prefix } => {
            let mut started = false;
            return match get(root, streams, id, &path, stream, offset, prefix, &mut started).await {
                Ok(n) => (0, n),
                Err(f) => {
                    // A stream never used is left alone.
                    if started {
                        streams.reset_stream(stream, STREAM_ABANDONED);
                    }
                    let _ = send(streams, id, Reply::Error(f)).await;
                    (0, 0)
                }
            };
        }
        Request::Put { path, stream, size, mtime, force } => {
            let mut started = false;
            let r = put(root, streams, id, &path, stream, size, mtime, force, &mut started).await;
            let reply = match r {
                Ok(n) => {
                    let _ = send(streams, id, Reply::Done).await;
                    return (n, 0);
                }
                Err(f) => f,
            };
            if started {
                // Its reset is taken when it comes, so that the stream is
                // forgotten (spec §13.9).
                streams.stop_stream(stream, STREAM_ABANDONED);
                super::take_end_later(streams, stream);
            }
            let _ = send(streams, id, Reply::Error(reply)).await;
            return (0, 0);
        }
    };
    let reply = simple.unwrap_or_else(Reply::Error);
    let _ = send(streams, id, reply).await;
    (0, 0)
}

/// Sends a listing in parts; returns the bytes sent.
async fn list(root: &Arc<Service>, streams: &Streams, id: u32, path: String) -> u64 {
    let (tx, mut rx) = mpsc::channel(2);
    let r = Arc::clone(root);
    let walk = tokio::task::spawn_blocking(move || r.root.list(&path, &mut |part| tx.blocking_send(part).is_ok()));
    // One part is held back so that the last can say it is the last.
    let mut held: Option<Vec<_>> = None;
    let mut sent = 0u64;
    while let Some(part) = rx.recv().await {
        if let Some(prev) = held.replace(part) {
            let m = Reply::Entries { more: true, entries: prev }.encode(id);
            sent += m.len() as u64;
            if streams.send_message(CONTROL_STREAM, &m).await.is_err() {
                return sent;
            }
        }
    }
    let outcome = walk.await.unwrap_or_else(|e| Err(Failure::new(Code::Io, format!("task failed: {e}"))));
    let last = match outcome {
        Ok(()) => Reply::Entries { more: false, entries: held.unwrap_or_default() },
        Err(f) => Reply::Error(f),
    };
    let m = last.encode(id);
    let _ = streams.send_message(CONTROL_STREAM, &m).await;
    sent + m.len() as u64
}

/// Sends a file on `stream` (spec §17.4): from `offset` if the client's
/// prefix matches ours, else from 0; then the whole file's hash.
/// `started` says whether the stream was used.
#[allow(clippy::too_many_arguments)]
async fn get(
    root: &Arc<Service>,
    streams: &Streams,
    id: u32,
    path: &str,
    stream: u16,
    offset: u64,
    prefix: [u8; HASH_LEN],
    started: &mut bool,
) -> FsResult<u64> {
    let r = Arc::clone(root);
    let p = path.to_string();
    let (src, hasher, from) = blocking(move || {
        let src = r.root.open_read(&p)?;
        if offset > 0 && offset <= src.size {
            let (h, n) = hash_prefix(&src.file, offset).map_err(|e| Failure::new(Code::Io, e.to_string()))?;
            if n == offset && *h.finalize().as_bytes() == prefix {
                return Ok((src, h, offset));
            }
        }
        Ok((src, blake3::Hasher::new(), 0))
    })
    .await?;
    send(streams, id, Reply::GetStart { size: src.size, mtime: src.mtime, from })
        .await
        .map_err(|e| Failure::new(Code::Io, e.to_string()))?;
    *started = true;
    let lost = |e: std::io::Error| Failure::new(Code::Io, format!("sending /{path}: {e}"));
    let mut file = tokio::fs::File::from_std(src.file);
    tokio::io::AsyncSeekExt::seek(&mut file, std::io::SeekFrom::Start(from)).await.map_err(lost)?;
    let mut io = streams.io(stream);
    let mut hasher = hasher;
    let mut left = src.size - from;
    let mut buf = vec![0u8; CHUNK];
    while left > 0 {
        let want = left.min(CHUNK as u64) as usize;
        let n = file.read(&mut buf[..want]).await.map_err(lost)?;
        if n == 0 {
            return Err(Failure::new(Code::Io, format!("/{path} shrank while being sent")));
        }
        hasher.update(&buf[..n]);
        io.write_all(&buf[..n]).await.map_err(lost)?;
        left -= n as u64;
    }
    io.write_all(hasher.finalize().as_bytes()).await.map_err(lost)?;
    io.shutdown().await.map_err(lost)?;
    // Queued is not delivered: the stream stays this transfer's until the
    // client has it all (a send buffer larger than the client's credit
    // would otherwise free the stream while its bytes still wait).
    streams.wait_for_send(stream).await.map_err(|e| lost(e.into()))?;
    Ok(src.size - from)
}

/// Receives a file on `stream` (spec §17.5) into its partial file, checks
/// its hash and moves it into place; returns the bytes received.
#[allow(clippy::too_many_arguments)]
async fn put(
    root: &Arc<Service>,
    streams: &Streams,
    id: u32,
    path: &str,
    stream: u16,
    size: u64,
    mtime: i64,
    force: bool,
    started: &mut bool,
) -> FsResult<u64> {
    // An older upload of the same file (its client gone, or retrying)
    // is told to let go; the newest attempt wins.
    let key = super::root::components(path).map(|c| c.join("/")).unwrap_or_default();
    let ticket = root.tickets.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let cancel = Arc::new(tokio::sync::Notify::new());
    let older = root.uploads.lock().expect("not poisoned").insert(key.clone(), (ticket, Arc::clone(&cancel)));
    let _registered = Registered { service: Arc::clone(root), key, ticket };
    if let Some((_, older)) = &older {
        older.notify_one();
    }
    let deadline = tokio::time::Instant::now() + TAKEOVER_WAIT;
    let (upload, hasher) = loop {
        let r = Arc::clone(root);
        let p = path.to_string();
        let attempt = blocking(move || {
            let up = r.root.begin_upload(&p, size, force)?;
            let (h, _) = hash_prefix(&up.file, up.have).map_err(|e| Failure::new(Code::Io, e.to_string()))?;
            Ok((up, h))
        })
        .await;
        match attempt {
            Err(f) if f.code == Code::Busy && older.is_some() && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => break other?,
        }
    };
    let have = upload.have;
    send(streams, id, Reply::PutReady { have, prefix: *hasher.finalize().as_bytes() })
        .await
        .map_err(|e| Failure::new(Code::Io, e.to_string()))?;
    *started = true;
    let cut = |e: std::io::Error| Failure::new(Code::Io, format!("upload of /{path} interrupted: {e}"));
    let mut io = streams.io(stream);
    let taken_over = || Failure::new(Code::Busy, format!("/{path} is busy (a newer upload of it took over)"));
    // A client that died before it started the stream would otherwise hold
    // the partial file until the connection times out.
    let from = tokio::select! {
        from = io.read_u64() => from.map_err(cut)?,
        _ = cancel.notified() => return Err(taken_over()),
    };
    let mut hasher = match from {
        f if f == have => hasher,
        0 => blake3::Hasher::new(),
        f => return Err(Failure::new(Code::BadRequest, format!("resume from {f}, the server holds {have}"))),
    };
    let mut writeback = crate::fsutil::Writeback::new(&upload.file).map_err(cut)?;
    let mut file = tokio::fs::File::from_std(upload.file.try_clone().map_err(cut)?);
    file.set_len(from).await.map_err(cut)?;
    tokio::io::AsyncSeekExt::seek(&mut file, std::io::SeekFrom::Start(from)).await.map_err(cut)?;
    let mut left = size - from;
    let mut buf = vec![0u8; CHUNK];
    while left > 0 {
        let want = left.min(CHUNK as u64) as usize;
        let n = tokio::select! {
            n = io.read(&mut buf[..want]) => n.map_err(cut)?,
            _ = cancel.notified() => {
                let _ = file.sync_data().await;
                return Err(taken_over());
            }
        };
        if n == 0 {
            // Kept for the next attempt.
            let _ = file.sync_data().await;
            return Err(Failure::new(Code::Io, format!("upload of /{path} ended early; its part is kept")));
        }
        hasher.update(&buf[..n]);
        file.write_all(&buf[..n]).await.map_err(cut)?;
        writeback.wrote(n as u64);
        left -= n as u64;
    }
    file.flush().await.map_err(cut)?;
    let mut theirs = [0u8; HASH_LEN];
    io.read_exact(&mut theirs).await.map_err(cut)?;
    if io.read(&mut [0u8; 1]).await.map_err(cut)? != 0 {
        return Err(Failure::new(Code::BadRequest, format!("/{path}: more data than the size announced")));
    }
    // Taking the stream's end lets both sides forget it (spec §13.9).
    let _ = tokio::time::timeout(Duration::from_secs(5), streams.recv_message_on(stream)).await;
    if *hasher.finalize().as_bytes() != theirs {
        upload.discard();
        return Err(Failure::new(Code::Corrupted, format!("/{path}: the upload did not match its hash; discarded")));
    }
    let p = path.to_string();
    blocking(move || {
        upload.commit(force, mtime).map_err(|mut f| {
            if f.text.is_empty() {
                f.text = format!("/{p}");
            }
            f
        })
    })
    .await?;
    Ok(size - from)
}

/// An upload's entry in the registry, removed when it ends (unless a
/// newer upload of the same file replaced it).
struct Registered {
    service: Arc<Service>,
    key: String,
    ticket: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut u = self.service.uploads.lock().expect("not poisoned");
        if u.get(&self.key).is_some_and(|(t, _)| *t == self.ticket) {
            u.remove(&self.key);
        }
    }
}
