//! The file service's client side: one connection, requests matched to
//! their replies by id (a reader task routes them), each transfer on a
//! stream of its own (spec §17.3). Used by the shell and the one-shot
//! commands alike.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::{anyhow, bail, Context, Result};
use manyfold::{Connection, Endpoint, StreamItem, Streams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::root::hash_prefix;
use super::wire::{Entry, Reply, Request, CONTROL_STREAM, FIRST_TRANSFER_STREAM, HASH_LEN, STREAM_ABANDONED, VERSION};
use crate::fsutil::ResumeFile;
use crate::net::{self, Config};

const CHUNK: usize = 256 * 1024;

type Pending = Arc<Mutex<HashMap<u32, mpsc::UnboundedSender<Reply>>>>;

/// A connected client.
pub struct Client {
    endpoint: Endpoint,
    conn: tokio::sync::Mutex<Connection>,
    streams: Streams,
    pending: Pending,
    /// Why the connection ended, once it has.
    ended: Arc<Mutex<Option<String>>>,
    next_id: AtomicU32,
    next_stream: AtomicU32,
    reader: tokio::task::JoinHandle<()>,
    pub peer: SocketAddr,
    pub read_only: bool,
    pub max_file: u64,
    /// Whether the connection is encrypted, and the server's proven key.
    pub security: manyfold::Protection,
    /// `--rate`: downloads are read and uploads written no faster, together.
    pub pacer: crate::pace::SharedPacer,
}

/// How far a transfer is: bytes done of the total (both known once the
/// server answered).
pub type Progress<'a> = &'a (dyn Fn(u64, u64) + Send + Sync);

/// What a finished transfer did.
#[derive(Debug, Clone)]
pub struct Transferred {
    pub size: u64,
    /// Bytes an earlier attempt had moved already.
    pub resumed: u64,
    /// The whole file's BLAKE3, as both ends checked it.
    pub hash: blake3::Hash,
}

/// A request waiting for its replies; dropped, it stops waiting.
struct Call {
    id: u32,
    rx: mpsc::UnboundedReceiver<Reply>,
    pending: Pending,
}

impl Drop for Call {
    fn drop(&mut self) {
        self.pending.lock().expect("not poisoned").remove(&self.id);
    }
}

/// Ends the direction of an abandoned transfer's stream that it used (once
/// the server accepted the transfer: before, the stream was never used):
/// a download is stopped and its reset taken when it comes, an upload is
/// reset. The direction never used is left alone: a RESET or STOP there
/// would open it on the far side, which would then hold the stream.
struct StreamGuard {
    streams: Streams,
    stream: u16,
    receiving: bool,
    armed: bool,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if self.receiving {
            self.streams.stop_stream(self.stream, STREAM_ABANDONED);
            super::take_end_later(&self.streams, self.stream);
        } else {
            self.streams.reset_stream(self.stream, STREAM_ABANDONED);
        }
    }
}

impl Client {
    /// Connects and says hello (with the token, if any).
    pub async fn connect(addr: SocketAddr, token: Option<Vec<u8>>, config: Config) -> Result<Client> {
        let (endpoint, conn) = net::connect(addr, config).await?;
        let security = conn.protection();
        let streams = conn.streams();
        streams.set_priority(CONTROL_STREAM, 64, 1);
        let pending: Pending = Arc::default();
        let ended = Arc::new(Mutex::new(None));
        let reader = tokio::spawn(read_replies(streams.clone(), Arc::clone(&pending), Arc::clone(&ended)));
        let mut client = Client {
            endpoint,
            conn: tokio::sync::Mutex::new(conn),
            streams,
            pending,
            ended,
            next_id: AtomicU32::new(0),
            next_stream: AtomicU32::new(u32::from(FIRST_TRANSFER_STREAM)),
            reader,
            peer: addr,
            read_only: false,
            max_file: u64::MAX,
            security,
            pacer: crate::pace::shared(None),
        };
        match client.one(Request::Hello { version: VERSION, token: token.unwrap_or_default() }).await? {
            Reply::Welcome { read_only, max_file, .. } => {
                client.read_only = read_only;
                client.max_file = max_file;
                // After an answer: the server's key is proven by now.
                client.security = client.conn.lock().await.protection();
                Ok(client)
            }
            other => bail!("unexpected answer to hello: {other:?}"),
        }
    }

    /// Closes the connection once everything sent is acknowledged.
    pub async fn close(&self) {
        let mut conn = self.conn.lock().await;
        let _ = tokio::time::timeout(Duration::from_secs(5), conn.close()).await;
        self.reader.abort();
        let bound = Duration::from_millis(300);
        let _ = tokio::time::timeout(bound + Duration::from_secs(1), self.endpoint.shutdown_within(bound)).await;
    }

    fn lost(&self) -> anyhow::Error {
        match self.ended.lock().expect("not poisoned").as_deref() {
            Some(why) => anyhow!("the connection to {} ended: {why}", self.peer),
            None => anyhow!("the connection to {} ended", self.peer),
        }
    }

    /// Sends a request; its replies arrive on the returned [`Call`].
    async fn call(&self, req: Request) -> Result<Call> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        {
            // Under the lock the reader takes to give up: a request either
            // sees that the replies have stopped or is told when they do.
            let mut pending = self.pending.lock().expect("not poisoned");
            if self.ended.lock().expect("not poisoned").is_some() {
                return Err(self.lost());
            }
            pending.insert(id, tx);
        }
        let call = Call { id, rx, pending: Arc::clone(&self.pending) };
        if self.streams.send_message(CONTROL_STREAM, &req.encode(id)).await.is_err() {
            return Err(self.lost());
        }
        Ok(call)
    }

    async fn next(&self, call: &mut Call) -> Result<Reply> {
        match call.rx.recv().await {
            Some(Reply::Error(f)) => Err(f.into()),
            Some(r) => Ok(r),
            None => Err(self.lost()),
        }
    }

    /// A request with one reply.
    async fn one(&self, req: Request) -> Result<Reply> {
        let mut call = self.call(req).await?;
        self.next(&mut call).await
    }

    async fn done(&self, req: Request) -> Result<()> {
        match self.one(req).await? {
            Reply::Done => Ok(()),
            other => bail!("unexpected answer: {other:?}"),
        }
    }

    fn new_stream(&self) -> Result<u16> {
        let s = self.next_stream.fetch_add(1, Ordering::Relaxed);
        u16::try_from(s).map_err(|_| anyhow!("this connection has used all its 65,534 transfer streams; reconnect"))
    }

    pub async fn stat(&self, path: &str) -> Result<Entry> {
        match self.one(Request::Stat { path: path.into() }).await? {
            Reply::Stat(e) => Ok(e),
            other => bail!("unexpected answer: {other:?}"),
        }
    }

    pub async fn list(&self, path: &str) -> Result<Vec<Entry>> {
        let mut call = self.call(Request::List { path: path.into() }).await?;
        let mut all = Vec::new();
        loop {
            match self.next(&mut call).await? {
                Reply::Entries { more, entries } => {
                    all.extend(entries);
                    if !more {
                        break;
                    }
                }
                other => bail!("unexpected answer: {other:?}"),
            }
        }
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    pub async fn mkdir(&self, path: &str, parents: bool) -> Result<()> {
        self.done(Request::Mkdir { path: path.into(), parents }).await
    }

    pub async fn rmdir(&self, path: &str) -> Result<()> {
        self.done(Request::Rmdir { path: path.into() }).await
    }

    pub async fn remove(&self, path: &str, recursive: bool) -> Result<()> {
        self.done(Request::Remove { path: path.into(), recursive }).await
    }

    pub async fn rename(&self, from: &str, to: &str, force: bool) -> Result<()> {
        self.done(Request::Move { from: from.into(), to: to.into(), force }).await
    }

    pub async fn copy(&self, from: &str, to: &str, recursive: bool, force: bool) -> Result<()> {
        self.done(Request::Copy { from: from.into(), to: to.into(), recursive, force }).await
    }

    /// Downloads `remote` to `local` (spec §17.4): into its partial file,
    /// resuming what an earlier attempt left there, verified against the
    /// server's hash, then renamed into place.
    pub async fn get(&self, remote: &str, local: &Path, force: bool, progress: Progress<'_>) -> Result<Transferred> {
        if !force && std::fs::symlink_metadata(local).is_ok() {
            bail!("{} exists (use -f to overwrite it)", local.display());
        }
        let (part, have) = ResumeFile::open(local)?;
        let f = part.file().try_clone()?;
        let (hasher, have) = tokio::task::spawn_blocking(move || hash_prefix(&f, have)).await??;
        let stream = self.new_stream()?;
        let mut guard = StreamGuard { streams: self.streams.clone(), stream, receiving: true, armed: false };
        let prefix = *hasher.finalize().as_bytes();
        let mut call = self.call(Request::Get { path: remote.into(), stream, offset: have, prefix }).await?;
        let (size, mtime, from) = match self.next(&mut call).await {
            Ok(Reply::GetStart { size, mtime, from }) => (size, mtime, from),
            refused => {
                // Refused before a byte came: leave no empty partial file.
                if have == 0 {
                    part.discard();
                }
                match refused {
                    Err(e) => return Err(e),
                    Ok(other) => bail!("unexpected answer: {other:?}"),
                }
            }
        };
        guard.armed = true;
        // The server may send from 0 or from what we hold, nothing else.
        if from > size || (from != 0 && from != have) {
            bail!("the server offered {remote} from byte {from} of {size}; this client holds {have}");
        }
        let mut hasher = if from == have { hasher } else { blake3::Hasher::new() };
        let mut writeback = crate::fsutil::Writeback::new(part.file())?;
        let mut file = tokio::fs::File::from_std(part.file().try_clone()?);
        file.set_len(from).await?;
        tokio::io::AsyncSeekExt::seek(&mut file, std::io::SeekFrom::Start(from)).await?;
        progress(from, size);
        let mut io = self.streams.io(stream);
        let mut left = size - from;
        let mut buf = vec![0u8; CHUNK];
        let kept = |done: u64| format!("{} of {} bytes are kept in its partial file; the same get resumes", done, size);
        while left > 0 {
            let want = left.min(CHUNK as u64) as usize;
            let read = tokio::select! {
                r = io.read(&mut buf[..want]) => r,
                // The server gave up (and reset the stream, or could not
                // use it at all): its reason, at once.
                reply = call.rx.recv() => {
                    let _ = file.sync_data().await;
                    let why = match reply {
                        Some(Reply::Error(f)) => f.to_string(),
                        Some(other) => format!("unexpected answer: {other:?}"),
                        None => format!("{:#}", self.lost()),
                    };
                    bail!("{why}; {}", kept(size - left));
                }
            };
            let n = match read {
                Ok(n) => n,
                Err(e) => {
                    let _ = file.sync_data().await;
                    let why = self.failure_or(&mut call, server_failure(e)).await;
                    bail!("{why}; {}", kept(size - left));
                }
            };
            if n == 0 {
                let _ = file.sync_data().await;
                let why = self.failure_or(&mut call, "the stream ended early".into()).await;
                bail!("{why}; {}", kept(size - left));
            }
            hasher.update(&buf[..n]);
            // Read slower, the stream's window holds the server back.
            self.pacer.lock().await.wait(n).await;
            file.write_all(&buf[..n]).await?;
            writeback.wrote(n as u64);
            left -= n as u64;
            progress(size - left, size);
        }
        file.flush().await?;
        let mut theirs = [0u8; HASH_LEN];
        io.read_exact(&mut theirs).await.context("the file's hash did not arrive")?;
        if io.read(&mut [0u8; 1]).await? != 0 {
            bail!("the server sent more than the file and its hash");
        }
        // Taking the stream's end lets both sides forget it (spec §13.9).
        let _ = tokio::time::timeout(Duration::from_secs(5), self.streams.recv_message_on(stream)).await;
        guard.armed = false;
        let hash = hasher.finalize();
        if *hash.as_bytes() != theirs {
            part.discard();
            bail!("{}: the copy does not match the server's hash; its partial file was removed", local.display());
        }
        let mtime = std::time::UNIX_EPOCH.checked_add(Duration::from_secs(mtime.max(0) as u64));
        part.commit(force, mtime)?;
        Ok(Transferred { size, resumed: from, hash })
    }

    /// The server's explanation of a broken transfer, if it sent one soon.
    async fn failure_or(&self, call: &mut Call, fallback: String) -> String {
        match tokio::time::timeout(Duration::from_secs(1), call.rx.recv()).await {
            Ok(Some(Reply::Error(f))) => f.to_string(),
            _ => fallback,
        }
    }

    /// Uploads `local` to `remote` (spec §17.5), resuming what an earlier
    /// attempt left on the server; the server verifies the hash and renames.
    pub async fn put(&self, local: &Path, remote: &str, force: bool, progress: Progress<'_>) -> Result<Transferred> {
        let file = std::fs::File::open(local).with_context(|| format!("cannot read {}", local.display()))?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            bail!("{} is not a regular file", local.display());
        }
        let size = meta.len();
        if size > self.max_file {
            bail!("{} is {size} bytes; the server takes files up to {} bytes", local.display(), self.max_file);
        }
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs() as i64);
        let stream = self.new_stream()?;
        let mut guard = StreamGuard { streams: self.streams.clone(), stream, receiving: false, armed: false };
        let mut call = self.call(Request::Put { path: remote.into(), stream, size, mtime, force }).await?;
        let (have, theirs) = match self.next(&mut call).await? {
            Reply::PutReady { have, prefix } => (have, prefix),
            other => bail!("unexpected answer: {other:?}"),
        };
        guard.armed = true;
        let f = file.try_clone()?;
        let (hasher, from) = tokio::task::spawn_blocking(move || -> std::io::Result<_> {
            if have > 0 && have <= size {
                let (h, n) = hash_prefix(&f, have)?;
                if n == have && *h.finalize().as_bytes() == theirs {
                    return Ok((h, have));
                }
            }
            Ok((blake3::Hasher::new(), 0))
        })
        .await??;
        let mut hasher = hasher;
        let mut io = self.streams.io(stream);
        let mut file = tokio::fs::File::from_std(file);
        tokio::io::AsyncSeekExt::seek(&mut file, std::io::SeekFrom::Start(from)).await?;
        let broken = |e: std::io::Error| anyhow!("upload of {} interrupted: {e}", local.display());
        io.write_u64(from).await.map_err(broken)?;
        progress(from, size);
        let mut left = size - from;
        let mut buf = vec![0u8; CHUNK];
        while left > 0 {
            let want = left.min(CHUNK as u64) as usize;
            let n = file.read(&mut buf[..want]).await?;
            if n == 0 {
                bail!("{} shrank while being sent", local.display());
            }
            hasher.update(&buf[..n]);
            self.pacer.lock().await.wait(n).await;
            if let Err(e) = io.write_all(&buf[..n]).await {
                let why = self.failure_or(&mut call, server_failure(e)).await;
                bail!("{why}");
            }
            left -= n as u64;
            progress(size - left, size);
        }
        let hash = hasher.finalize();
        io.write_all(hash.as_bytes()).await.map_err(broken)?;
        io.shutdown().await.map_err(broken)?;
        guard.armed = false;
        match self.next(&mut call).await? {
            Reply::Done => Ok(Transferred { size, resumed: from, hash }),
            other => bail!("unexpected answer: {other:?}"),
        }
    }
}

/// Routes replies to their requests until the connection ends; then the
/// waiting requests learn it (their channels close).
async fn read_replies(streams: Streams, pending: Pending, ended: Arc<Mutex<Option<String>>>) {
    let why = loop {
        match streams.recv_message_on(CONTROL_STREAM).await {
            Ok(Some(StreamItem::Message(m))) => match Reply::parse(&m) {
                Ok((id, reply)) => {
                    let mut p = pending.lock().expect("not poisoned");
                    // A connection-wide refusal (server full, bad request).
                    if let (0, Reply::Error(f)) = (id, &reply) {
                        if !p.contains_key(&0) {
                            break f.to_string();
                        }
                    }
                    if let Some(tx) = p.get(&id) {
                        if tx.send(reply).is_err() {
                            p.remove(&id);
                        }
                    }
                }
                Err(e) => break format!("the server sent a malformed reply: {e}"),
            },
            Ok(None) | Ok(Some(StreamItem::Finished)) => break "the server closed it".to_string(),
            Ok(Some(other)) => break format!("control stream: {other:?}"),
            Err(e) => break server_failure(e),
        }
    };
    let mut pending = pending.lock().expect("not poisoned");
    *ended.lock().expect("not poisoned") = Some(why);
    pending.clear();
}

/// Where a download of `remote` lands given the LOCAL argument (or none):
/// into LOCAL if it is a directory, as LOCAL otherwise, else in the
/// current directory under the remote name.
pub fn local_target(remote: &str, local: Option<&str>) -> Result<PathBuf> {
    let base =
        remote.rsplit('/').next().filter(|b| !b.is_empty()).context("the root cannot be downloaded as a file")?;
    Ok(match local {
        None => PathBuf::from(base),
        Some(l) if Path::new(l).is_dir() => Path::new(l).join(base),
        Some(l) => PathBuf::from(l),
    })
}

/// A broken connection said as the client sees it: "the server was
/// interrupted (...)", "the server is gone (port unreachable)", ...
fn server_failure(e: impl Into<anyhow::Error>) -> String {
    format!("{:#}", net::explain(e.into(), net::Role::Server))
}
