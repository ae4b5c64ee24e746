//! `manyfold serve --dir DIR`: answers `manyfold fetch` (protocol in
//! [`super`]) with the files of one directory, many clients at once, until
//! interrupted. A file's manifest is computed once and cached by name,
//! size, modification time and inode; segments are read at their offsets
//! and checked against the manifest before they are sent.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context, Result};
use clap::Args;
use manyfold::StreamItem;
use tokio::task::JoinSet;

use super::wire::{check_name, segment_header, Manifest, Reply, Request, MAX_SEGMENT, MIN_SEGMENT, SEGMENT_HEADER};
use crate::net::{self, Connection, NetArgs};
use crate::size::{human_bytes, human_duration, size_arg};

/// A client silent for this long between requests is closed.
const IDLE: Duration = Duration::from_secs(120);
/// How long a new client has for its first request.
const FIRST_REQUEST: Duration = Duration::from_secs(10);
/// Manifests kept in memory (each at most 8 MiB of hashes; usually far less).
const CACHE_ENTRIES: usize = 256;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Directory whose files are served. Only plain base names are
    /// served; a symbolic link is followed only if it stays inside DIR.
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,

    /// Address to listen on, HOST:PORT (port 0 picks a free port; the
    /// address actually used is printed).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7009")]
    pub listen: String,

    /// Segment size (4KiB to 8MiB). Servers of one file must use the same
    /// size for a client to use them together. A file too large for
    /// 262,144 segments of this size gets larger segments.
    #[arg(long, value_name = "SIZE", default_value = "1MiB", value_parser = size_arg)]
    pub segment: u64,

    /// The cap is on all clients together.
    #[command(flatten)]
    pub rate: crate::pace::RateArgs,

    #[command(flatten)]
    pub net: NetArgs,
}

pub async fn run(args: ServeArgs) -> Result<()> {
    if !(u64::from(MIN_SEGMENT)..=u64::from(MAX_SEGMENT)).contains(&args.segment) {
        bail!(
            "--segment {} ({} bytes) is out of range: from {} ({} bytes) to {} ({} bytes)",
            human_bytes(args.segment),
            args.segment,
            human_bytes(MIN_SEGMENT.into()),
            MIN_SEGMENT,
            human_bytes(MAX_SEGMENT.into()),
            MAX_SEGMENT
        );
    }
    let dir = std::fs::canonicalize(&args.dir)
        .with_context(|| format!("cannot use {} as the served directory", args.dir.display()))?;
    if !dir.is_dir() {
        bail!("{} is not a directory", args.dir.display());
    }
    let library = Arc::new(Library {
        dir,
        segment: args.segment as u32,
        cache: Mutex::default(),
        pacer: crate::pace::shared(args.rate.rate),
    });
    let server = net::listen(&args.listen, &args.net, |_| {}).await?;
    let (endpoint, local, mode) = (Arc::clone(&server.endpoint), server.local, &server.mode);
    let banner = format!(
        "manyfold serve: listening on {local} ({mode}), serving {} in segments of {} (Ctrl-C to stop)",
        args.dir.display(),
        human_bytes(args.segment)
    );
    // With --json too: a script needs the address (port 0 picks one).
    crate::report::emit(&banner, || serde_json::json!({ "listening": local.to_string(), "dir": args.dir }));

    let (mut conn_rx, acceptor) = net::spawn_acceptor(Arc::clone(&endpoint));
    let mut tasks: JoinSet<(Ended, u64)> = JoinSet::new();
    let (mut sessions, mut segments) = (0u64, 0u64);
    let mut accepting = true;
    let ctrl_c = net::interrupted();
    tokio::pin!(ctrl_c);
    let outcome = loop {
        tokio::select! {
            _ = &mut ctrl_c => {
                tasks.shutdown().await;
                break Ok(());
            }
            conn = conn_rx.recv(), if accepting => {
                let Some(conn) = conn else {
                    match net::accepting_ended(&mut accepting) {
                        Ok(()) => continue,
                        Err(e) => break Err(e),
                    }
                };
                let library = Arc::clone(&library);
                tasks.spawn(async move {
                    let peer = conn.peer_addr();
                    let mut session = Session::new(peer, conn.protection());
                    let result = serve_one(conn, &library, &mut session).await;
                    (session.summary(result.err()), session.segments)
                });
            }
            Some(joined) = tasks.join_next() => {
                sessions += 1;
                match joined {
                    Ok((ended, served)) => {
                        segments += served;
                        crate::report::emit(&ended.line, || ended.json);
                    }
                    Err(e) => eprintln!("error: a session task failed: {e}"),
                }
            }
        }
    };
    acceptor.abort();
    crate::report::say(&format_args!("manyfold serve: {sessions} session(s) ended, {segments} segment(s) served"));
    let bound = Duration::from_millis(500);
    let _ = tokio::time::timeout(bound + Duration::from_secs(1), endpoint.shutdown_within(bound)).await;
    outcome
}

/// What one client got, for its summary line.
#[derive(Debug)]
struct Session {
    peer: std::net::SocketAddr,
    security: manyfold::Protection,
    start: Instant,
    names: Vec<String>,
    segments: u64,
    bytes: u64,
    errors: Vec<String>,
}

impl Session {
    fn new(peer: std::net::SocketAddr, security: manyfold::Protection) -> Session {
        Session { peer, security, start: Instant::now(), names: Vec::new(), segments: 0, bytes: 0, errors: Vec::new() }
    }

    /// `127.0.0.1:5000 (plain): served 7 segments (7.34 MB) of f.bin in
    /// 812 ms`, then what went wrong, if anything; and the same as JSON
    /// (`--json`: `peer`, `encrypted`, `names`, `segments`, `bytes`,
    /// `seconds`, `answered` (errors sent), `ended` (null or why)).
    fn summary(&self, error: Option<anyhow::Error>) -> Ended {
        let of = if self.names.is_empty() { String::new() } else { format!(" of {}", self.names.join(", ")) };
        let mut line = format!(
            "{} ({}): served {} segment(s) ({}){of} in {}",
            self.peer,
            crate::keys::short(self.security),
            self.segments,
            human_bytes(self.bytes),
            human_duration(self.start.elapsed())
        );
        for e in &self.errors {
            line.push_str(&format!("; answered: {e}"));
        }
        let ended = error.map(|e| format!("{:#}", net::explain(e, net::Role::Client)));
        if let Some(why) = &ended {
            line.push_str(&format!("; ended: {why}"));
        }
        let json = serde_json::json!({
            "peer": self.peer.to_string(),
            "encrypted": matches!(self.security, manyfold::Protection::Encrypted { .. }),
            "names": self.names,
            "segments": self.segments,
            "bytes": self.bytes,
            "seconds": self.start.elapsed().as_secs_f64(),
            "answered": self.errors,
            "ended": ended,
        });
        Ended { line, json }
    }
}

/// A session's line, as text and as JSON.
#[derive(Debug)]
struct Ended {
    line: String,
    json: serde_json::Value,
}

/// Answers one client's requests until it closes.
async fn serve_one(conn: Connection, library: &Arc<Library>, session: &mut Session) -> Result<()> {
    let mut current: Option<Served> = None;
    let mut asked = false;
    loop {
        // A client of another kind (`manyfold send` writes its list as
        // bytes, never a whole message) is closed after FIRST_REQUEST, so
        // that it learns at once instead of waiting without end.
        let wait = if asked { IDLE } else { FIRST_REQUEST };
        let item = match tokio::time::timeout(wait, conn.recv_message()).await {
            Err(_) if !asked => {
                bail!("no request within {} (not a `manyfold fetch`?)", human_duration(wait))
            }
            Err(_) => bail!("no request for {}", human_duration(IDLE)),
            Ok(r) => r.context("connection lost")?,
        };
        let message = match item {
            None | Some((_, StreamItem::Finished)) => return Ok(()),
            Some((_, StreamItem::Message(m))) => {
                asked = true;
                m
            }
            Some((_, StreamItem::Abandoned)) => continue,
            Some((_, StreamItem::Reset(code))) => bail!("the client reset its stream (code {code})"),
        };
        let reply = match Request::parse(&message) {
            Err(e) => {
                let why = format!("bad request: {e}");
                let _ = conn.send_message(0, &Reply::Error(why.clone()).encode()).await;
                bail!(why);
            }
            Ok(Request::Manifest { name }) => {
                let lib = Arc::clone(library);
                let opened = tokio::task::spawn_blocking(move || lib.open(&name))
                    .await
                    .unwrap_or_else(|e| Err(format!("manifest task failed: {e}")));
                match opened {
                    Ok(served) => {
                        let reply = Reply::Manifest((*served.manifest).clone()).encode();
                        session.names.push(served.manifest.name.clone());
                        current = Some(served);
                        reply
                    }
                    Err(why) => {
                        session.errors.push(why.clone());
                        current = None;
                        Reply::Error(why).encode()
                    }
                }
            }
            Ok(Request::Segment { index }) => match &current {
                None => Reply::Error("segment request before any manifest".into()).encode(),
                Some(served) => {
                    let served = served.clone();
                    let lib = Arc::clone(library);
                    let read = tokio::task::spawn_blocking(move || lib.segment(&served, index))
                        .await
                        .unwrap_or_else(|e| Err(format!("read task failed: {e}")));
                    match read {
                        Ok(message) => {
                            library.pacer.lock().await.wait(message.len()).await;
                            session.segments += 1;
                            session.bytes += (message.len() - SEGMENT_HEADER) as u64;
                            message
                        }
                        Err(why) => {
                            session.errors.push(why.clone());
                            current = None;
                            Reply::Error(why).encode()
                        }
                    }
                }
            },
        };
        conn.send_message(0, &reply).await.context("connection lost while answering")?;
    }
}

/// A file being served on one connection: its open handle and manifest.
#[derive(Debug, Clone)]
struct Served {
    file: Arc<File>,
    manifest: Arc<Manifest>,
}

#[derive(Debug)]
struct Cached {
    size: u64,
    mtime: SystemTime,
    ino: u64,
    manifest: Arc<Manifest>,
}

/// The served directory and its manifests.
#[derive(Debug)]
struct Library {
    /// Canonical.
    dir: PathBuf,
    segment: u32,
    cache: Mutex<HashMap<String, Cached>>,
    /// `--rate`: segments go out no faster, all clients together.
    pacer: crate::pace::SharedPacer,
}

impl Library {
    /// Opens `name` in the directory and gives its manifest (blocking).
    /// The error text goes to the client as it is.
    fn open(&self, name: &str) -> Result<Served, String> {
        check_name(name)?;
        let real = match std::fs::canonicalize(self.dir.join(name)) {
            Ok(p) => p,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(format!("not found: {name}")),
            Err(e) => return Err(format!("cannot open {name}: {e}")),
        };
        if !real.starts_with(&self.dir) {
            return Err(format!("refused: {name} leads outside the served directory"));
        }
        if !std::fs::metadata(&real).is_ok_and(|m| m.is_file()) {
            return Err(format!("not a regular file: {name}"));
        }
        // No link at the end of the path, and never block on a FIFO put
        // there since the checks above.
        let flags = (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits();
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(flags as i32)
            .open(&real)
            .map_err(|e| format!("cannot open {name}: {e}"))?;
        let meta = file.metadata().map_err(|e| format!("cannot read the metadata of {name}: {e}"))?;
        if !meta.is_file() {
            return Err(format!("not a regular file: {name}"));
        }
        let (size, mtime, ino) = (meta.len(), meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), meta.ino());
        let cached = self
            .cache
            .lock()
            .expect("cache lock")
            .get(name)
            .and_then(|c| ((c.size, c.mtime, c.ino) == (size, mtime, ino)).then(|| Arc::clone(&c.manifest)));
        let manifest = match cached {
            Some(m) => m,
            None => {
                let m = Arc::new(compute_manifest(&file, name, size, self.segment)?);
                let after = file.metadata().map_err(|e| format!("cannot read the metadata of {name}: {e}"))?;
                if (after.len(), after.modified().unwrap_or(SystemTime::UNIX_EPOCH)) != (size, mtime) {
                    return Err(format!("{name} changed while it was being hashed; try again"));
                }
                let mut cache = self.cache.lock().expect("cache lock");
                if cache.len() >= CACHE_ENTRIES {
                    cache.clear();
                }
                cache.insert(name.to_string(), Cached { size, mtime, ino, manifest: Arc::clone(&m) });
                m
            }
        };
        Ok(Served { file: Arc::new(file), manifest })
    }

    /// Segment `index` as a whole reply message, checked against the
    /// manifest (blocking).
    fn segment(&self, served: &Served, index: u32) -> Result<Vec<u8>, String> {
        let m = &served.manifest;
        if index >= m.count() {
            return Err(format!("no segment {index}: {} has {} segments", m.name, m.count()));
        }
        let len = m.segment_len(index) as usize;
        let mut message = Vec::with_capacity(SEGMENT_HEADER + len);
        message.extend_from_slice(&segment_header(index, len as u32));
        message.resize(SEGMENT_HEADER + len, 0);
        served
            .file
            .read_exact_at(&mut message[SEGMENT_HEADER..], m.offset(index))
            .map_err(|e| format!("cannot read segment {index} of {}: {e}", m.name))?;
        if blake3::hash(&message[SEGMENT_HEADER..]).as_bytes() != &m.segments[index as usize] {
            self.cache.lock().expect("cache lock").remove(&m.name);
            return Err(format!("{} changed since its manifest was made; fetch it again", m.name));
        }
        Ok(message)
    }
}

/// Hashes `file` segment by segment and as a whole.
fn compute_manifest(file: &File, name: &str, size: u64, wanted: u32) -> Result<Manifest, String> {
    let segment_size = Manifest::segment_size_for(size, wanted).ok_or_else(|| {
        format!("too large: {name} is {} bytes, more than this server can describe in one manifest", size)
    })?;
    let mut whole = blake3::Hasher::new();
    let mut segments = Vec::with_capacity(size.div_ceil(u64::from(segment_size)) as usize);
    let mut buf = vec![0u8; segment_size as usize];
    let mut offset = 0u64;
    while offset < size {
        let n = (size - offset).min(u64::from(segment_size)) as usize;
        file.read_exact_at(&mut buf[..n], offset).map_err(|e| format!("cannot read {name}: {e}"))?;
        whole.update(&buf[..n]);
        segments.push(*blake3::hash(&buf[..n]).as_bytes());
        offset += n as u64;
    }
    Ok(Manifest { name: name.to_string(), size, segment_size, hash: *whole.finalize().as_bytes(), segments })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn library(dir: &Path, segment: u32) -> Library {
        Library {
            dir: std::fs::canonicalize(dir).unwrap(),
            segment,
            cache: Mutex::default(),
            pacer: crate::pace::shared(None),
        }
    }

    #[test]
    fn serves_plain_files_and_refuses_the_rest_with_a_reason() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("served");
        std::fs::create_dir(&dir).unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.join("f.bin"), &data).unwrap();
        std::fs::write(root.path().join("secret"), b"outside").unwrap();
        std::fs::create_dir(dir.join("sub")).unwrap();
        std::os::unix::fs::symlink(root.path().join("secret"), dir.join("escape")).unwrap();
        std::os::unix::fs::symlink(dir.join("f.bin"), dir.join("alias")).unwrap();
        let lib = library(&dir, 4096);

        let served = lib.open("f.bin").unwrap();
        let m = &served.manifest;
        assert_eq!((m.size, m.segment_size, m.count()), (10_000, 4096, 3));
        assert_eq!(m.hash, *blake3::hash(&data).as_bytes());
        assert_eq!(m.segments[2], *blake3::hash(&data[8192..]).as_bytes());
        let seg = lib.segment(&served, 2).unwrap();
        assert_eq!(Reply::parse(&seg), Ok(Reply::Segment { index: 2, data: &data[8192..] }));
        assert!(lib.segment(&served, 3).unwrap_err().contains("has 3 segments"));
        assert!(Arc::ptr_eq(&lib.open("f.bin").unwrap().manifest, &served.manifest), "cached");
        assert_eq!(lib.open("alias").unwrap().manifest.hash, m.hash, "a link inside DIR is followed");

        for (name, why) in [
            ("missing", "not found: missing"),
            ("escape", "leads outside"),
            ("sub", "not a regular file"),
            ("../secret", "path separator"),
            ("..", "not a file name"),
        ] {
            let err = lib.open(name).unwrap_err();
            assert!(err.contains(why), "{name}: {err}");
        }
    }

    #[test]
    fn a_changed_file_is_noticed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), vec![1u8; 8192]).unwrap();
        let lib = library(dir.path(), 4096);
        let served = lib.open("f").unwrap();
        // Changed in place behind the open handle: the segment is refused.
        std::fs::OpenOptions::new().write(true).open(dir.path().join("f")).unwrap().write_all_at(b"x", 5000).unwrap();
        assert!(lib.segment(&served, 1).unwrap_err().contains("changed since its manifest"));
        assert!(lib.segment(&served, 0).is_ok(), "the rest is unchanged");
        let again = lib.open("f").unwrap();
        assert_ne!(again.manifest.segments[1], served.manifest.segments[1], "a new manifest");
    }
}
