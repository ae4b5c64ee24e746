//! What a person types: the command language shared by the interactive
//! shell, scripts on standard input and one-shot use (`manyfold ftp ADDR
//! get PATH`), remote paths relative to a remote working directory,
//! background transfers (`... &`, `jobs`, `wait`) and tab completion.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use tokio::task::JoinSet;

use super::client::{local_target, Client, Transferred};
use super::wire::{shown, Entry, Kind};
use crate::report::{multi_progress, outln, transfer_bar};
use crate::size::{human_bytes, human_rate};

/// Name, usage, what it does.
pub const COMMANDS: &[(&str, &str, &str)] = &[
    ("help", "help [COMMAND]", "list the commands, or explain one"),
    ("pwd", "pwd", "print the remote directory"),
    ("cd", "cd [DIR]", "change the remote directory (without DIR: to the root, /)"),
    (
        "ls",
        "ls [PATH...]",
        "list remote directories or files: type and permissions, size, modification time (UTC), name",
    ),
    ("mkdir", "mkdir [-p] DIR...", "make remote directories (-p: with their parents; existing ones are fine)"),
    ("rmdir", "rmdir DIR...", "remove empty remote directories"),
    ("rm", "rm [-r] PATH...", "remove remote files or links (-r: directories with everything in them)"),
    (
        "cp",
        "cp [-r] [-f] SRC DST",
        "copy on the server (-r: a directory tree; -f: replace DST); into DST if it is a directory",
    ),
    (
        "mv",
        "mv [-f] SRC DST",
        "move or rename on the server, directories too (-f: replace DST); into DST if it is a directory",
    ),
    (
        "get",
        "get [-f] REMOTE [LOCAL]",
        "download a file, verified by its hash; an interrupted get resumes (-f: replace LOCAL)",
    ),
    (
        "put",
        "put [-f] LOCAL [REMOTE]",
        "upload a file, verified by the server; an interrupted put resumes (-f: replace REMOTE)",
    ),
    ("mget", "mget [-f] REMOTE...", "download several files at once; * and ? match in the last part of a path"),
    ("mput", "mput [-f] LOCAL...", "upload several files at once into the remote directory"),
    ("lcd", "lcd [DIR]", "change the local directory (without DIR: to $HOME)"),
    ("lpwd", "lpwd", "print the local directory"),
    ("lls", "lls [DIR]", "list a local directory"),
    (
        "jobs",
        "jobs",
        "show background transfers; get, put, mget, mput and cp run in the background when the line ends with &",
    ),
    ("wait", "wait", "wait until the background transfers have finished"),
    ("quit", "quit", "close the connection and leave (also: exit, bye, Ctrl-D)"),
];

/// How many transfers an mget or mput runs at once.
const PARALLEL: usize = 4;

/// Splits a command line into words: blanks separate them, quotes ('…',
/// "…") and backslashes keep blanks in one.
pub fn split_line(line: &str) -> Result<Vec<String>> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '\\' => {
                cur.push(chars.next().context("the line ends with a lone backslash")?);
                in_word = true;
            }
            '\'' | '"' => {
                let quote = c;
                in_word = true;
                loop {
                    match chars.next() {
                        Some(q) if q == quote => break,
                        Some('\\') if quote == '"' => cur.push(chars.next().context("unterminated quote")?),
                        Some(ch) => cur.push(ch),
                        None => bail!("unterminated quote ({quote})"),
                    }
                }
            }
            c => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// The path sent to the server for `arg` typed in remote directory `cwd`:
/// relative to the root, without a leading `/` (spec §17.6). `/` is the
/// root; `..` may not climb above it.
pub fn resolve(cwd: &str, arg: &str) -> Result<String> {
    let mut parts: Vec<&str> =
        if arg.starts_with('/') { Vec::new() } else { cwd.split('/').filter(|c| !c.is_empty()).collect() };
    for c in arg.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    bail!("{arg}: outside the served root");
                }
            }
            c => parts.push(c),
        }
    }
    Ok(parts.join("/"))
}

/// `*` and `?` wildcard match of a whole name.
pub fn wildcard(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// `YYYY-MM-DD HH:MM` (UTC) of a Unix time.
pub fn utc(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}", rem / 3600, rem % 3600 / 60)
}

/// One `ls` line.
pub fn ls_line(e: &Entry) -> String {
    let t = match e.kind {
        Kind::Dir => 'd',
        Kind::Symlink => 'l',
        Kind::File => '-',
        Kind::Other => '?',
    };
    let mut perms = String::with_capacity(9);
    for shift in [6, 3, 0] {
        let bits = (e.mode >> shift) & 7;
        perms.push(if bits & 4 != 0 { 'r' } else { '-' });
        perms.push(if bits & 2 != 0 { 'w' } else { '-' });
        perms.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    let size = if e.kind == Kind::Dir { "-".to_string() } else { human_bytes(e.size) };
    let suffix = match e.kind {
        Kind::Dir => "/",
        Kind::Symlink => "@",
        _ => "",
    };
    format!("{t}{perms} {size:>10}  {}  {}{suffix}", utc(e.mtime), super::wire::printable(&e.name))
}

/// Whether the session is a person at a terminal, a script, or one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Interactive,
    Script,
    OneShot,
}

pub enum Flow {
    Continue,
    Quit,
}

struct Job {
    id: u32,
    what: String,
    done: Arc<AtomicU64>,
    total: Arc<AtomicU64>,
    handle: tokio::task::JoinHandle<()>,
}

/// Where notices of finished background jobs go (the shell's printer).
pub type Notify = Arc<dyn Fn(String) + Send + Sync>;

pub struct Session {
    pub client: Arc<Client>,
    /// The remote working directory, as a wire path.
    pub cwd: Arc<Mutex<String>>,
    jobs: Vec<Job>,
    next_job: u32,
    notify: Notify,
}

impl Session {
    pub fn new(client: Arc<Client>, notify: Notify) -> Session {
        Session { client, cwd: Arc::default(), jobs: Vec::new(), next_job: 1, notify }
    }

    fn cwd(&self) -> String {
        self.cwd.lock().expect("not poisoned").clone()
    }

    fn path(&self, arg: &str) -> Result<String> {
        resolve(&self.cwd(), arg)
    }

    /// The prompt: `ftp HOST:PORT:/dir> `.
    pub fn prompt(&self) -> String {
        format!("ftp {}:{}> ", self.client.peer, shown(&self.cwd()))
    }

    /// Runs one command line (already split into words).
    pub async fn exec(&mut self, mut words: Vec<String>) -> Result<Flow> {
        self.jobs.retain(|j| !j.handle.is_finished());
        let background = words.last().is_some_and(|w| w == "&");
        if background {
            words.pop();
        }
        let Some(cmd) = words.first().cloned() else { return Ok(Flow::Continue) };
        let (flags, args) = flags_and_args(&words[1..]);
        let has = |f: char| flags.contains(&f);
        let allowed = |ok: &str| -> Result<()> {
            match flags.iter().find(|f| !ok.contains(**f)) {
                Some(f) => bail!("{cmd}: unknown option -{f} (usage: {})", usage(&cmd).unwrap_or("see help")),
                None => Ok(()),
            }
        };
        let need = |min: usize, max: usize| -> Result<()> {
            if args.len() < min || args.len() > max {
                bail!("usage: {}", usage(&cmd).unwrap_or(&cmd));
            }
            Ok(())
        };
        if background && !matches!(cmd.as_str(), "get" | "put" | "mget" | "mput" | "cp") {
            bail!("only get, put, mget, mput and cp run in the background");
        }
        match cmd.as_str() {
            "help" | "?" => {
                need(0, 1)?;
                help(args.first().map(String::as_str))?;
            }
            "quit" | "exit" | "bye" => {
                need(0, 0)?;
                return Ok(Flow::Quit);
            }
            "pwd" => {
                need(0, 0)?;
                outln!("{}", shown(&self.cwd()));
            }
            "cd" => {
                need(0, 1)?;
                let target = self.path(args.first().map_or("/", String::as_str))?;
                if !target.is_empty() && self.client.stat(&target).await?.kind != Kind::Dir {
                    bail!("{}: not a directory", shown(&target));
                }
                *self.cwd.lock().expect("not poisoned") = target;
            }
            "ls" | "dir" => {
                allowed("la")?;
                let targets = if args.is_empty() { vec![".".to_string()] } else { args.clone() };
                let many = targets.len() > 1;
                let mut failed = None;
                for t in &targets {
                    let p = self.path(t)?;
                    match self.client.list(&p).await {
                        Ok(entries) => {
                            if many {
                                outln!("{}:", shown(&p));
                            }
                            for e in &entries {
                                outln!("{}", ls_line(e));
                            }
                        }
                        Err(e) => failed = Some(e),
                    }
                }
                if let Some(e) = failed {
                    return Err(e);
                }
            }
            "mkdir" => {
                allowed("p")?;
                need(1, usize::MAX)?;
                for a in &args {
                    self.client.mkdir(&self.path(a)?, has('p')).await?;
                }
            }
            "rmdir" => {
                need(1, usize::MAX)?;
                for a in &args {
                    self.client.rmdir(&self.path(a)?).await?;
                }
            }
            "rm" | "del" => {
                allowed("rf")?;
                need(1, usize::MAX)?;
                for a in &args {
                    self.client.remove(&self.path(a)?, has('r')).await?;
                }
            }
            "mv" | "rename" => {
                allowed("f")?;
                need(2, 2)?;
                self.client.rename(&self.path(&args[0])?, &self.path(&args[1])?, has('f')).await?;
            }
            "cp" => {
                allowed("rf")?;
                need(2, 2)?;
                let (from, to) = (self.path(&args[0])?, self.path(&args[1])?);
                let (recursive, force) = (has('r'), has('f'));
                if background {
                    let what = format!("cp {} {}", shown(&from), shown(&to));
                    self.spawn(what, 0, move |c, _, _| async move {
                        c.copy(&from, &to, recursive, force).await?;
                        Ok("copied".to_string())
                    });
                } else {
                    self.client.copy(&from, &to, recursive, force).await?;
                }
            }
            "get" => {
                allowed("f")?;
                need(1, 2)?;
                let remote = self.path(&args[0])?;
                let local = local_target(&remote, args.get(1).map(String::as_str))?;
                self.transfer(vec![Xfer::Get { remote, local }], has('f'), background).await?;
            }
            "put" => {
                allowed("f")?;
                need(1, 2)?;
                let local = PathBuf::from(&args[0]);
                let remote = self.put_target(&local, args.get(1).map(String::as_str)).await?;
                self.transfer(vec![Xfer::Put { local, remote }], has('f'), background).await?;
            }
            "mget" => {
                allowed("f")?;
                need(1, usize::MAX)?;
                let mut list = Vec::new();
                for a in &args {
                    for remote in self.expand(a).await? {
                        let local = local_target(&remote, None)?;
                        list.push(Xfer::Get { remote, local });
                    }
                }
                self.transfer(list, has('f'), background).await?;
            }
            "mput" => {
                allowed("f")?;
                need(1, usize::MAX)?;
                let mut list = Vec::new();
                for a in &args {
                    let local = PathBuf::from(a);
                    let remote = self.put_target(&local, None).await?;
                    list.push(Xfer::Put { local, remote });
                }
                self.transfer(list, has('f'), background).await?;
            }
            "lcd" => {
                need(0, 1)?;
                let dir = match args.first() {
                    Some(d) => PathBuf::from(d),
                    None => PathBuf::from(std::env::var_os("HOME").context("HOME is not set")?),
                };
                std::env::set_current_dir(&dir).with_context(|| format!("lcd {}", dir.display()))?;
                outln!("{}", std::env::current_dir()?.display());
            }
            "lpwd" => {
                need(0, 0)?;
                outln!("{}", std::env::current_dir()?.display());
            }
            "lls" => {
                need(0, 1)?;
                let dir = PathBuf::from(args.first().map_or(".", String::as_str));
                let mut names: Vec<_> = std::fs::read_dir(&dir)
                    .with_context(|| format!("cannot list {}", dir.display()))?
                    .filter_map(|e| e.ok())
                    .map(|e| {
                        let dir = e.file_type().is_ok_and(|t| t.is_dir());
                        format!("{}{}", e.file_name().to_string_lossy(), if dir { "/" } else { "" })
                    })
                    .collect();
                names.sort();
                for n in names {
                    outln!("{n}");
                }
            }
            "jobs" => {
                need(0, 0)?;
                if self.jobs.is_empty() {
                    outln!("no background transfers");
                }
                for j in &self.jobs {
                    let (d, t) = (j.done.load(Ordering::Relaxed), j.total.load(Ordering::Relaxed));
                    let pct = (d * 100).checked_div(t).map_or_else(|| "   -".to_string(), |p| format!("{p:>3}%"));
                    outln!("[{}] {pct} {} of {}  {}", j.id, human_bytes(d), human_bytes(t), j.what);
                }
            }
            "wait" => {
                need(0, 0)?;
                self.wait_jobs().await;
            }
            other => bail!("unknown command {other:?}; `help` lists the commands"),
        }
        Ok(Flow::Continue)
    }

    /// Background jobs still running.
    pub fn running(&mut self) -> usize {
        self.jobs.retain(|j| !j.handle.is_finished());
        self.jobs.len()
    }

    pub async fn wait_jobs(&mut self) {
        for j in self.jobs.drain(..) {
            let _ = j.handle.await;
        }
    }

    /// Where `put LOCAL [REMOTE]` lands: REMOTE, or into it if it is a
    /// directory, or the local name in the remote directory.
    async fn put_target(&self, local: &Path, remote: Option<&str>) -> Result<String> {
        let name = local.file_name().context("the local path has no file name")?.to_string_lossy().into_owned();
        match remote {
            None => self.path(&name),
            Some(r) => {
                let p = self.path(r)?;
                match self.client.stat(&p).await {
                    Ok(e) if e.kind == Kind::Dir || p.is_empty() => {
                        Ok(if p.is_empty() { name } else { format!("{p}/{name}") })
                    }
                    _ => Ok(p),
                }
            }
        }
    }

    /// The remote files an mget argument names (wildcards in its last part).
    async fn expand(&self, arg: &str) -> Result<Vec<String>> {
        let p = self.path(arg)?;
        let (dir, pat) = match p.rfind('/') {
            Some(i) => (p[..i].to_string(), p[i + 1..].to_string()),
            None => (String::new(), p.clone()),
        };
        if !pat.contains(['*', '?']) {
            return Ok(vec![p]);
        }
        let found: Vec<String> = self
            .client
            .list(&dir)
            .await?
            .into_iter()
            .filter(|e| e.kind == Kind::File && wildcard(&pat, &e.name))
            .map(|e| if dir.is_empty() { e.name } else { format!("{dir}/{}", e.name) })
            .collect();
        if found.is_empty() {
            bail!("{}: no file matches", shown(&p));
        }
        Ok(found)
    }

    fn spawn<F, Fut>(&mut self, what: String, total: u64, f: F)
    where
        F: FnOnce(Arc<Client>, Arc<AtomicU64>, Arc<AtomicU64>) -> Fut,
        Fut: std::future::Future<Output = Result<String>> + Send + 'static,
    {
        let id = self.next_job;
        self.next_job += 1;
        let (done, tot) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(total)));
        let fut = f(Arc::clone(&self.client), Arc::clone(&done), Arc::clone(&tot));
        let notify = Arc::clone(&self.notify);
        let w = what.clone();
        let handle = tokio::spawn(async move {
            match fut.await {
                Ok(summary) => notify(format!("[{id}] done: {w} ({summary})")),
                Err(e) => notify(format!("[{id}] failed: {w}: {e:#}")),
            }
        });
        outln!("[{id}] {what}");
        self.jobs.push(Job { id, what, done, total: tot, handle });
    }

    /// Runs transfers, [`PARALLEL`] at a time, in the foreground with
    /// progress bars (Ctrl-C interrupts them, keeping what came for a
    /// resume) or as one background job.
    async fn transfer(&mut self, list: Vec<Xfer>, force: bool, background: bool) -> Result<()> {
        if background {
            let what = match list.as_slice() {
                [one] => one.describe(),
                many => format!("{} transfers", many.len()),
            };
            self.spawn(what, 0, move |c, done, total| async move {
                let bytes = run_all(&c, list, force, None, Some((done, total)), std::future::pending::<()>()).await?;
                Ok(bytes)
            });
            return Ok(());
        }
        let multi = multi_progress();
        let summary =
            run_all(&self.client, list, force, Some(&multi), None, crate::net::lifecycle::foreground_interrupt())
                .await?;
        crate::report::say(&summary);
        Ok(())
    }
}

/// Every transfer stopped (their partial files kept) and the bars gone
/// before the prompt comes back.
async fn stop_interrupted<T: 'static>(
    set: &mut tokio::task::JoinSet<T>,
    multi: Option<&indicatif::MultiProgress>,
) -> anyhow::Error {
    set.shutdown().await;
    if let Some(m) = multi {
        let _ = m.clear();
    }
    crate::net::lifecycle::account("interrupted; what arrived is kept, and the same command resumes".into())
}

/// One transfer of a command.
pub enum Xfer {
    Get { remote: String, local: PathBuf },
    Put { local: PathBuf, remote: String },
}

impl Xfer {
    fn describe(&self) -> String {
        match self {
            Xfer::Get { remote, local } => format!("get {} -> {}", shown(remote), local.display()),
            Xfer::Put { local, remote } => format!("put {} -> {}", local.display(), shown(remote)),
        }
    }

    /// The transfer's object for `--json`: `direction` (`get`/`put`),
    /// `remote`, `local`, `ok`, `error` (null or why), `bytes` (the file's
    /// size), `resumed_bytes` (held from an earlier attempt), `seconds`,
    /// `goodput_bytes_per_second` (of the bytes moved now) and `blake3`.
    fn to_json(&self, result: &Result<Transferred>, took: Duration) -> serde_json::Value {
        let (direction, remote, local) = match self {
            Xfer::Get { remote, local } => ("get", remote, local),
            Xfer::Put { local, remote } => ("put", remote, local),
        };
        let secs = took.as_secs_f64();
        let (bytes, resumed, hash, error) = match result {
            Ok(t) => (Some(t.size), Some(t.resumed), Some(t.hash.to_hex().to_string()), None),
            Err(e) => (None, None, None, Some(format!("{e:#}"))),
        };
        let moved = bytes.zip(resumed).map(|(b, r)| b - r);
        serde_json::json!({
            "direction": direction,
            "remote": remote,
            "local": local,
            "ok": result.is_ok(),
            "error": error,
            "bytes": bytes,
            "resumed_bytes": resumed,
            "seconds": secs,
            "goodput_bytes_per_second": moved.map(|m| if secs > 0.0 { m as f64 / secs } else { 0.0 }),
            "blake3": hash,
        })
    }
}

/// Runs `list`; bars in `multi`, or totals in `counters`, until done or
/// `interrupt` resolves. Returns a summary.
async fn run_all(
    client: &Arc<Client>,
    list: Vec<Xfer>,
    force: bool,
    multi: Option<&indicatif::MultiProgress>,
    counters: Option<(Arc<AtomicU64>, Arc<AtomicU64>)>,
    interrupt: impl std::future::Future,
) -> Result<String> {
    tokio::pin!(interrupt);
    let start = std::time::Instant::now();
    let count = list.len();
    let mut set: JoinSet<Result<(String, Transferred)>> = JoinSet::new();
    // Text: one summary for the command (below); --json: one object per
    // transfer as it ends (Xfer::to_json), and no summary.
    let mut queue = list.into_iter();
    let (mut bytes, mut resumed, mut errors) = (0u64, 0u64, Vec::new());
    let sizes = Arc::new(Mutex::new(Vec::<(u64, u64)>::new()));
    loop {
        while set.len() < PARALLEL {
            let Some(x) = queue.next() else { break };
            let c = Arc::clone(client);
            let label = match &x {
                Xfer::Get { remote, .. } => remote.rsplit('/').next().unwrap_or("").to_string(),
                Xfer::Put { local, .. } => {
                    local.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
                }
            };
            let bar = multi.map(|m| transfer_bar(m, 0, &short(&label)));
            let slot = {
                let mut s = sizes.lock().expect("not poisoned");
                s.push((0, 0));
                s.len() - 1
            };
            let (sizes, counters) = (Arc::clone(&sizes), counters.clone());
            set.spawn(async move {
                let progress = move |done: u64, total: u64| {
                    if let Some(b) = &bar {
                        b.set_length(total);
                        b.set_position(done);
                    }
                    let mut s = sizes.lock().expect("not poisoned");
                    s[slot] = (done, total);
                    if let Some((d, t)) = &counters {
                        d.store(s.iter().map(|x| x.0).sum(), Ordering::Relaxed);
                        t.store(s.iter().map(|x| x.1).sum(), Ordering::Relaxed);
                    }
                };
                let what = x.describe();
                let began = std::time::Instant::now();
                let r = match &x {
                    Xfer::Get { remote, local } => c.get(remote, local, force, &progress).await,
                    Xfer::Put { local, remote } => c.put(local, remote, force, &progress).await,
                };
                crate::report::emit_json(|| x.to_json(&r, began.elapsed()));
                r.map(|t| (what.clone(), t)).with_context(|| what)
            });
        }
        let joined = tokio::select! {
            j = set.join_next() => j,
            _ = &mut interrupt => return Err(stop_interrupted(&mut set, multi).await),
        };
        let Some(joined) = joined else { break };
        // Our own interruption resets the connection first: a transfer
        // failing from it is the interruption, not a failure of its own.
        if matches!(joined, Ok(Err(_))) && crate::net::lifecycle::signal().is_some() {
            return Err(stop_interrupted(&mut set, multi).await);
        }
        match joined {
            Ok(Ok((_, t))) => {
                bytes += t.size - t.resumed;
                resumed += t.resumed;
            }
            Ok(Err(e)) => errors.push(e),
            Err(e) => errors.push(anyhow::anyhow!("a transfer task failed: {e}")),
        }
    }
    if let Some(m) = multi {
        let _ = m.clear();
    }
    let elapsed = start.elapsed();
    let ok = count - errors.len();
    let mut summary = format!(
        "{ok} of {count} file(s), {} in {:.1} s ({}), verified",
        human_bytes(bytes),
        elapsed.as_secs_f64(),
        human_rate(bytes, elapsed.max(Duration::from_millis(1)))
    );
    if resumed > 0 {
        summary.push_str(&format!("; {} resumed from before", human_bytes(resumed)));
    }
    match errors.len() {
        0 => Ok(summary),
        1 => Err(errors.pop().expect("one")),
        n => {
            let all: Vec<String> = errors.iter().map(|e| format!("{e:#}")).collect();
            bail!("{n} of {count} transfers failed:\n  {}", all.join("\n  "))
        }
    }
}

/// A progress bar label of bounded width.
fn short(name: &str) -> String {
    if name.chars().count() <= 10 {
        return name.to_string();
    }
    let tail: String = name.chars().rev().take(9).collect::<Vec<_>>().into_iter().rev().collect();
    format!("…{tail}")
}

/// Single-letter flags (`-rf`) before the arguments; `--` ends them.
/// `--overwrite`, the command line's name for replacing, is `-f`.
fn flags_and_args(words: &[String]) -> (Vec<char>, Vec<String>) {
    let (mut flags, mut args, mut more) = (Vec::new(), Vec::new(), true);
    for w in words {
        if more && w == "--" {
            more = false;
        } else if more && w == "--overwrite" && args.is_empty() {
            flags.push('f');
        } else if more && w.len() > 1 && w.starts_with('-') && args.is_empty() {
            flags.extend(w[1..].chars());
        } else {
            args.push(w.clone());
        }
    }
    (flags, args)
}

fn usage(cmd: &str) -> Option<&'static str> {
    COMMANDS.iter().find(|c| c.0 == cmd).map(|c| c.1)
}

fn help(cmd: Option<&str>) -> Result<()> {
    match cmd {
        None => {
            outln!("Commands (paths are remote unless the command starts with l; `help COMMAND` for one):");
            for (_, u, what) in COMMANDS {
                outln!("  {u:<26} {what}");
            }
        }
        Some(c) => {
            let (_, u, what) = COMMANDS.iter().find(|x| x.0 == c).with_context(|| format!("no command {c:?}"))?;
            outln!("{u}\n  {what}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_on_blanks_and_keep_quoted_or_escaped_ones() {
        assert_eq!(split_line("  get  'a b'  c\\ d \"e\\\"f\" ").unwrap(), ["get", "a b", "c d", "e\"f"]);
        assert_eq!(split_line("put x &").unwrap(), ["put", "x", "&"]);
        assert!(split_line("get 'open").is_err());
        assert!(split_line("get x\\").is_err());
        assert!(split_line("").unwrap().is_empty());
    }

    #[test]
    fn remote_paths_resolve_against_the_directory_and_stay_inside_the_root() {
        assert_eq!(resolve("", "a/b").unwrap(), "a/b");
        assert_eq!(resolve("a/b", "../c").unwrap(), "a/c");
        assert_eq!(resolve("a/b", "/x/./y/").unwrap(), "x/y");
        assert_eq!(resolve("a", "..").unwrap(), "");
        assert!(resolve("a", "../..").unwrap_err().to_string().contains("outside the served root"));
        assert!(resolve("", "/../etc/passwd").is_err());
    }

    #[test]
    fn wildcards_match_whole_names() {
        assert!(wildcard("*.iso", "disk.iso"));
        assert!(!wildcard("*.iso", "disk.iso.part"));
        assert!(wildcard("f?le*", "file-1"));
        assert!(wildcard("*", ""));
        assert!(!wildcard("a*b", "acbd"));
    }

    #[test]
    fn dates_are_civil_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00");
        assert_eq!(utc(1_795_305_600 + 3_660), "2026-11-22 01:01");
        assert_eq!(utc(-60), "1969-12-31 23:59");
    }

    #[test]
    fn flags_come_before_the_arguments() {
        let w = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(flags_and_args(&w(&["-rf", "a", "-b"])), (vec!['r', 'f'], w(&["a", "-b"])));
        assert_eq!(flags_and_args(&w(&["--", "-a"])), (vec![], w(&["-a"])));
        assert_eq!(flags_and_args(&w(&["--overwrite", "a"])), (vec!['f'], w(&["a"])), "the CLI's name works too");
    }
}
