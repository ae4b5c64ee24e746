//! The `fanout` scenario (groups issue, spec §14; BENCH.md's "fan-out to N
//! receivers" anchor): one file of 1 GiB to N = 1, 4, 16 and 64 receivers
//! on 127.0.0.1, as one manyfold group beside N kernel TCP connections
//! sending the same file in the same run. Figures per N: the time until
//! every receiver has the whole file and verified it, the aggregate
//! goodput (N × size / time), the sender's CPU seconds and peak RSS, the
//! receivers' CPU. Targets: time-to-all ≤ the TCP fan-out's; the manyfold
//! sender's peak RSS at N = 64 ≤ 1.2 × its peak RSS at N = 1.
//!
//! Each run is two processes of this binary, measured by `wait4`
//! ([`crate::child`]):
//! - the receivers: one process hosting all N receiving ends (N manyfold
//!   endpoints that `listen` + `accept`, or N TCP listeners), each hashing
//!   what arrives with BLAKE3; a receiver whose length or hash differs
//!   fails the run (nothing is written to disk);
//! - the sender: reads the file from disk and sends it — manyfold: in
//!   messages of `--chunk` bytes (`Bytes`, one copy whatever N) to a group
//!   in mode All, then `close`; TCP: N threads, each with its own
//!   connection, re-reading the file (from the page cache) in 1 MiB reads
//!   and waiting for its receiver's "ok" ([`crate::tcp::send`]).
//!
//! Time-to-all runs from the sender's stamp before its connect (or
//! `Endpoint::group`) to the last receiver's stamp after its hash matched,
//! both read from CLOCK_MONOTONIC, which every process shares. Rows
//! alternate manyfold, TCP for each N within a repetition.
//!
//! Modules: [`ends`] (the two processes), [`report`] (table, JSON,
//! charts), [`runs`] (a child's ready file, shared with `handshake` and
//! `sessions`); the report's frame is [`crate::report`].

mod ends;
mod report;
pub(crate) mod runs;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Subcommand, ValueEnum};

use crate::child;
use crate::loopback::data::{Pattern, MISMATCH};
use crate::loopback::{human, parse_size};
use report::{Report, RunResult};
use runs::wait_for_file;

pub type Args = crate::ScenarioArgs<Internal, Options>;

/// Which transport a run's two processes use.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One manyfold group (mode All) to N plain manyfold endpoints.
    Manyfold,
    /// N kernel TCP connections, one thread each.
    Tcp,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Manyfold => "manyfold group (All)",
            Kind::Tcp => "N × kernel TCP",
        }
    }
}

/// The scenario's own processes (hidden subcommands of this binary).
#[derive(Subcommand, Debug)]
pub enum Internal {
    /// (internal) The sender: the file to every address in `--peers-file`.
    #[command(hide = true)]
    Send {
        #[arg(long, value_enum)]
        kind: Kind,
        #[arg(long)]
        file: PathBuf,
        #[arg(long)]
        peers_file: PathBuf,
        /// Bytes per group message (manyfold).
        #[arg(long)]
        chunk: usize,
        /// Seconds before the sender gives up.
        #[arg(long)]
        limit: f64,
        /// manyfold on a current-thread runtime.
        #[arg(long)]
        one_thread: bool,
    },
    /// (internal) The N receivers in one process; writes their addresses
    /// to `--ready` once all are bound.
    #[command(hide = true)]
    Recv {
        #[arg(long, value_enum)]
        kind: Kind,
        #[arg(long)]
        peers: usize,
        #[arg(long)]
        bytes: u64,
        #[arg(long)]
        hash: String,
        #[arg(long)]
        ready: PathBuf,
        #[arg(long)]
        limit: f64,
        /// manyfold on a current-thread runtime.
        #[arg(long)]
        one_thread: bool,
    },
}

/// What to measure. Lists are comma-separated.
#[derive(clap::Args, Debug, Clone)]
#[command(mut_arg("plot", |a| a.help(
    "Also draw PNG charts into this directory (created if missing): fanout-time.png (time-to-all against N) and fanout-rss.png (sender peak RSS against N)"
)))]
pub struct Options {
    /// A smoke run: 64 MiB, N = 1 and 4, one repetition. Explicit --size,
    /// --peers and --reps still win.
    #[arg(long)]
    pub quick: bool,
    /// File sizes, e.g. 1GiB,256MiB [default: 1GiB; --quick: 64MiB].
    #[arg(long, alias = "sizes", value_delimiter = ',')]
    pub size: Option<Vec<String>>,
    /// Numbers of receivers [default: 1,4,16,64; --quick: 1,4].
    #[arg(long, value_delimiter = ',')]
    pub peers: Option<Vec<usize>>,
    /// Repetitions of every (N, row) pair [default: 3; --quick: 1].
    #[arg(long)]
    pub reps: Option<usize>,
    /// Bytes per group message.
    #[arg(long, default_value = "1MiB")]
    pub chunk: String,
    /// Seed of the file's pseudo-random bytes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Per-run time limit in seconds (sender and receivers alike).
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Where to make the scratch directory (the file; always deleted).
    #[arg(long)]
    pub scratch: Option<PathBuf>,
    /// Run manyfold's sender and receivers on a current-thread tokio
    /// runtime (the driver and the application's tasks on one thread)
    /// instead of the multi-thread one.
    #[arg(long)]
    pub one_thread: bool,
    #[command(flatten)]
    pub out: crate::report::Outputs,
}

pub fn run(args: Args) -> Result<()> {
    match args.internal {
        Some(Internal::Send { kind, file, peers_file, chunk, limit, one_thread }) => {
            ends::send(kind, &file, &peers_file, chunk, Duration::from_secs_f64(limit), one_thread)
        }
        Some(Internal::Recv { kind, peers, bytes, hash, ready, limit, one_thread }) => {
            ends::recv(kind, peers, bytes, &hash, &ready, Duration::from_secs_f64(limit), one_thread)
        }
        None => measure(&args.opts),
    }
}

/// Everything a run needs, resolved from the options.
#[derive(Debug, Clone)]
pub struct Plan {
    pub sizes: Vec<u64>,
    pub peers: Vec<usize>,
    pub reps: usize,
    pub chunk: usize,
    pub seed: u64,
    pub limit: Duration,
    /// manyfold on a current-thread runtime.
    pub one_thread: bool,
}

impl Plan {
    pub fn from_options(o: &Options) -> Result<Plan> {
        let sizes = match &o.size {
            Some(v) => v.iter().map(|s| parse_size(s)).collect::<Result<Vec<u64>>>()?,
            None => vec![if o.quick { 64 << 20 } else { 1 << 30 }],
        };
        let peers = o.peers.clone().unwrap_or(if o.quick { vec![1, 4] } else { vec![1, 4, 16, 64] });
        if sizes.contains(&0) || peers.is_empty() || peers.iter().any(|&n| n == 0 || n > 1024) {
            bail!("need sizes > 0 and 1 ≤ N ≤ 1024 receivers");
        }
        let chunk = parse_size(&o.chunk)? as usize;
        if !(1..=64 << 20).contains(&chunk) {
            bail!("--chunk must be 1 byte to 64 MiB");
        }
        let reps = o.reps.unwrap_or(if o.quick { 1 } else { 3 }).max(1);
        let limit = Duration::from_secs(o.timeout.max(1));
        Ok(Plan { sizes, peers, reps, chunk, seed: o.seed, limit, one_thread: o.one_thread })
    }
}

fn measure(o: &Options) -> Result<()> {
    let plan = Plan::from_options(o)?;
    let bench = std::env::current_exe()?;
    let mut b = tempfile::Builder::new();
    b.prefix("manyfold-bench-fanout-");
    let work = match &o.scratch {
        Some(dir) => b.tempdir_in(dir)?,
        None => b.tempdir()?,
    };
    delete_on_interrupt(work.path().to_path_buf());
    let mut report = Report::new(&plan);
    for &bytes in &plan.sizes {
        let file = work.path().join(format!("sample-{bytes}.bin"));
        let t = Instant::now();
        let hash = write_sample(&file, &Pattern::new(plan.seed, bytes))?;
        eprintln!("fanout: wrote {} of pseudo-random bytes in {:.1} s", human(bytes), t.elapsed().as_secs_f64());
        for rep in 0..plan.reps {
            for &n in &plan.peers {
                for kind in [Kind::Manyfold, Kind::Tcp] {
                    let dir = work.path().join(format!("run-{}", report.runs.len()));
                    std::fs::create_dir(&dir)?;
                    let r = match run_one(&bench, &plan, kind, n, &file, bytes, &hash, &dir) {
                        Ok(r) => r,
                        Err(e) if format!("{e:#}").contains(MISMATCH) => {
                            return Err(e.context(format!("{} to {n}: wrong bytes arrived", kind.label())))
                        }
                        Err(e) => RunResult::failed(kind, n, bytes, format!("{e:#}")),
                    };
                    let r = RunResult { rep, ..r };
                    eprintln!("rep {} {}", rep + 1, r.progress());
                    report.runs.push(r);
                    std::fs::remove_dir_all(&dir)?;
                }
            }
        }
        std::fs::remove_file(&file)?;
    }
    drop(work);
    report.finish();
    crate::report::publish(&report, &o.out)
}

/// Writes the seeded stream of [`Pattern`] to `path` a chunk at a time
/// (this process stays small: a child's peak RSS would count its pages)
/// and returns its BLAKE3 hash.
fn write_sample(path: &Path, p: &Pattern) -> Result<String> {
    use std::io::Write;
    let mut f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut h = blake3::Hasher::new();
    let mut buf = vec![0u8; crate::loopback::data::CHUNK];
    for i in 0..p.chunks() {
        let n = p.fill(i, &mut buf);
        h.update(&buf[..n]);
        f.write_all(&buf[..n])?;
    }
    f.sync_all()?;
    Ok(h.finalize().to_hex().to_string())
}

/// One run: the receivers, then the sender; both must succeed.
#[allow(clippy::too_many_arguments)]
fn run_one(
    bench: &Path,
    plan: &Plan,
    kind: Kind,
    n: usize,
    file: &Path,
    bytes: u64,
    hash: &str,
    dir: &Path,
) -> Result<RunResult> {
    let limit = plan.limit.as_secs_f64().to_string();
    let kind_arg = kind.to_possible_value().map(|v| v.get_name().to_string()).unwrap_or_default();
    let ready = dir.join("peers");
    let mut r = std::process::Command::new(bench);
    r.env("RUST_BACKTRACE", "0").args(["fanout", "recv", "--kind", &kind_arg, "--peers", &n.to_string()]);
    r.args(["--bytes", &bytes.to_string(), "--hash", hash, "--limit", &limit]).arg("--ready").arg(&ready);
    if plan.one_thread {
        r.arg("--one-thread");
    }
    let recv = child::launch(r, dir, "recv", format!("{} receivers ({n})", kind.label()))?;
    if let Err(e) = wait_for_file(&ready, Duration::from_secs(30)) {
        recv.kill();
        return Err(e);
    }
    let mut s = std::process::Command::new(bench);
    s.env("RUST_BACKTRACE", "0").args(["fanout", "send", "--kind", &kind_arg, "--chunk", &plan.chunk.to_string()]);
    s.args(["--limit", &limit]).arg("--file").arg(file).arg("--peers-file").arg(&ready);
    if plan.one_thread {
        s.arg("--one-thread");
    }
    let send = match child::launch(s, dir, "send", format!("{} sender ({n})", kind.label())) {
        Ok(s) => s,
        Err(e) => {
            recv.kill();
            return Err(e);
        }
    };
    let grace = Duration::from_secs(30);
    let sent = match send.finish(plan.limit + grace) {
        Ok(s) => s,
        Err(e) => {
            // The receivers' own error (a hash mismatch) says more.
            return Err(match recv.finish(grace) {
                Err(r) => r.context(format!("{e:#}")),
                Ok(_) => e,
            });
        }
    };
    let got = recv.finish(plan.limit + grace)?;
    RunResult::parse(kind, n, bytes, &sent, &got)
}

/// The scratch directory goes on Ctrl-C and SIGTERM too (its `TempDir`
/// removes it on every return and error); the children are bounded by
/// their own `--limit`.
fn delete_on_interrupt(dir: PathBuf) {
    crate::wan::sys::install_interrupt_flag();
    std::thread::spawn(move || loop {
        if crate::wan::sys::interrupted() {
            eprintln!("fanout: interrupted; deleting {}", dir.display());
            let _ = std::fs::remove_dir_all(&dir);
            std::process::exit(130);
        }
        std::thread::sleep(Duration::from_millis(50));
    });
}
