//! The `mcast` scenario (spec §16, paper 03's SOMA; BENCH.md "multicast
//! replication"): one sender and N receivers in network namespaces joined
//! by a bridge, one file sent to all of them by `manyfold mcast` and, in
//! the same run on the same lab with the same file, by uftp (TFMCC, and a
//! fixed rate) and udpcast. Each (setup, N) gets a fresh lab
//! ([`topo`]); the rows alternate within each repetition (A B C D A B C D).
//!
//! Setups ([`Setup`]): **asym** (half the receivers behind a tbf rate limit,
//! paper 03's wired/wireless asymmetry), **lossy** (the same, plus random
//! loss at half the receivers from an nftables rule that hits every
//! protocol alike) and **routed** (two networks joined by an smcroute
//! multicast router, the second behind the rate limit).
//!
//! Figures ([`report`]): time until every receiver holds a verified copy,
//! goodput and its share of the bottleneck, bytes the sender sent per file
//! byte, feedback packets per window per network (manyfold's sender report)
//! and per MB (every protocol, from nftables counters at the receivers).
//! Targets: feedback ≤ 2 per window per network whatever N; time-to-all ≤
//! uftp's; goodput ≥ 90% of the bottleneck (paper 03: 97 of 100 Mbit/s).
//!
//! Modules: [`topo`] (namespaces, bridge, router, tbf, nftables),
//! [`rows`] (one transfer per protocol), [`report`] (table, JSON).

mod report;
mod rows;
mod topo;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::ValueEnum;

use crate::loopback::data::{Pattern, CHUNK};
use crate::loopback::{human, parse_size};
use crate::wan::netns;
use report::{Report, RunResult};
pub use rows::Proto;
use topo::Topo;

/// One arrangement of the lab.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Setup {
    /// One bridge; half the receivers (the even ones) behind a tbf limit.
    Asym,
    /// As asym, and receivers with i mod 4 < 2 drop `--loss`% of UDP.
    Lossy,
    /// Two bridged networks joined by an smcroute router; the second
    /// (the even receivers) behind the tbf limit.
    Routed,
}

impl Setup {
    pub fn key(self) -> &'static str {
        match self {
            Setup::Asym => "asym",
            Setup::Lossy => "lossy",
            Setup::Routed => "routed",
        }
    }
}

/// What to measure. Lists are comma-separated.
#[derive(clap::Args, Debug, Clone)]
pub struct Options {
    /// A smoke run: N = 1 and 3, 8 MiB, one repetition. Explicit
    /// --receivers, --size and --reps still win.
    #[arg(long)]
    pub quick: bool,
    /// Setups to run (routed is left out, with its reason, when smcroute
    /// is not installed).
    #[arg(long, value_enum, value_delimiter = ',', default_values = ["asym", "lossy", "routed"])]
    pub setups: Vec<Setup>,
    /// Numbers of receivers [default: 1,8,32; --quick: 1,3].
    #[arg(long, value_delimiter = ',')]
    pub receivers: Option<Vec<usize>>,
    /// File size, e.g. 256MiB [default: 256MiB; --quick: 8MiB].
    #[arg(long)]
    pub size: Option<String>,
    /// Repetitions per row and (setup, N) [default: 3; --quick: 1].
    #[arg(long)]
    pub reps: Option<usize>,
    /// The bottleneck: tbf rate towards the slow receivers (bit/s; K, M, G).
    #[arg(long, default_value = "100M")]
    pub rate: String,
    /// Random loss at the lossy setup's lossy receivers, percent of the
    /// UDP datagrams they receive.
    #[arg(long, default_value_t = 2.0)]
    pub loss: f64,
    /// Rows to run, in this order within each repetition.
    #[arg(long, value_enum, value_delimiter = ',', default_values = ["manyfold", "uftp-tfmcc", "uftp-fixed", "udpcast"])]
    pub rows: Vec<Proto>,
    /// The manyfold binary [default: $MANYFOLD_BIN, else next to this one].
    #[arg(long)]
    pub manyfold: Option<PathBuf>,
    /// Per-transfer time limit, seconds [default: 60 + 5 × the file's time
    /// at the bottleneck rate].
    #[arg(long)]
    pub timeout: Option<u64>,
    /// Seed of the sample file.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also write every run as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Keep each manyfold sender's whole `--json` report (per-receiver
    /// losses, every window) in this directory, as
    /// `SETUP-nN-repR.json`, and each receiver's as `…-rI.json` (created
    /// if missing).
    #[arg(long)]
    pub keep_reports: Option<PathBuf>,
}

/// Everything the runs need, resolved from the options.
#[derive(Debug, Clone)]
pub struct Plan {
    pub setups: Vec<Setup>,
    pub receivers: Vec<usize>,
    pub size: String,
    pub bytes: u64,
    pub reps: usize,
    pub rate_bps: u64,
    pub loss: f64,
    pub rows: Vec<Proto>,
    pub limit: Duration,
    pub seed: u64,
}

impl Plan {
    pub fn from_options(o: &Options) -> Result<Plan> {
        let receivers = o.receivers.clone().unwrap_or(if o.quick { vec![1, 3] } else { vec![1, 8, 32] });
        // 198.18.{1,2}.x hosts 1..=126 per network, and the pid-named
        // namespaces stay a manageable number.
        if receivers.is_empty() || receivers.iter().any(|&n| n == 0 || n > 200) {
            bail!("need 1 ≤ N ≤ 200 receivers");
        }
        let size = o.size.clone().unwrap_or_else(|| if o.quick { "8MiB" } else { "256MiB" }.to_string());
        let bytes = parse_size(&size)?;
        if bytes == 0 {
            bail!("--size must be positive");
        }
        let reps = o.reps.unwrap_or(if o.quick { 1 } else { 3 }).clamp(1, 100);
        let rate_bps = crate::wan::parse_rate(&o.rate)?;
        if !(0.0..100.0).contains(&o.loss) {
            bail!("--loss must be 0 to 100 (percent)");
        }
        let mut rows = o.rows.clone();
        rows.dedup();
        let mut setups = o.setups.clone();
        setups.dedup();
        if rows.is_empty() || setups.is_empty() {
            bail!("need at least one row and one setup");
        }
        let ideal = bytes as f64 * 8.0 / rate_bps as f64;
        let limit = Duration::from_secs(o.timeout.unwrap_or((60.0 + 5.0 * ideal).ceil() as u64));
        Ok(Plan { setups, receivers, size, bytes, reps, rate_bps, loss: o.loss, rows, limit, seed: o.seed })
    }
}

pub fn run(o: Options) -> Result<()> {
    if let Some(why) = netns::skip_reason() {
        println!("mcast: skipped: {why}");
        return Ok(());
    }
    for tool in ["nft", "tc", "ss"] {
        if rows::which(tool).is_none() {
            println!("mcast: skipped: `{tool}` is not installed (apt-get install nftables iproute2)");
            return Ok(());
        }
    }
    let plan = Plan::from_options(&o)?;
    let manyfold = manyfold_binary(o.manyfold.as_deref());
    let work = tempfile::Builder::new().prefix("manyfold-bench-mcast-").tempdir()?;
    netns::register_dir(work.path());
    let name = "sample.bin";
    let file = work.path().join(name);
    let hash = write_sample(&file, plan.seed, plan.bytes)?;
    let mut report = Report::new(&plan);
    for &proto in &plan.rows {
        if let Some(why) = proto.missing(&manyfold) {
            report.skipped.push(format!("{}: skipped: {why}", proto.label()));
        }
    }
    let rows: Vec<Proto> = plan.rows.iter().copied().filter(|p| p.missing(&manyfold).is_none()).collect();
    for &setup in &plan.setups {
        if setup == Setup::Routed && rows::which("smcrouted").is_none() {
            report.skipped.push("routed setup: skipped: smcrouted is not installed (apt-get install smcroute)".into());
            continue;
        }
        for &n in &plan.receivers {
            let topo = match Topo::build(setup, n, plan.rate_bps, plan.loss) {
                Ok(t) => t,
                Err(e) => {
                    let why = format!("{} setup, N = {n}: the lab could not be built: {e:#}", setup.key());
                    eprintln!("{why}");
                    report.skipped.push(why);
                    continue;
                }
            };
            for rep in 0..plan.reps {
                for &proto in &rows {
                    let dir = work.path().join(format!("run-{}", report.runs.len()));
                    std::fs::create_dir(&dir)?;
                    let job = rows::Job {
                        topo: &topo,
                        file: &file,
                        name,
                        hash: &hash,
                        rate_bps: plan.rate_bps,
                        dir: &dir,
                        limit: plan.limit,
                        manyfold: manyfold.as_deref().ok(),
                    };
                    let started = Instant::now();
                    let r = match rows::run(proto, &job) {
                        Ok(m) => RunResult::ok(setup, n, proto, rep, &topo, m),
                        Err(e) => RunResult::failed(setup, n, proto, rep, format!("{e:#}")),
                    };
                    eprintln!("{} ({:.0} s)", r.progress(&plan), started.elapsed().as_secs_f64());
                    if let (Some(keep), true) = (&o.keep_reports, proto.is_manyfold()) {
                        std::fs::create_dir_all(keep)?;
                        let stem = format!("{}-n{n}-rep{rep}", setup.key());
                        let keep_one = |from: &str, to: String| {
                            if let Err(e) = std::fs::copy(dir.join(from), keep.join(&to)) {
                                eprintln!("note: could not keep {from} as {to}: {e}");
                            }
                        };
                        keep_one("sender.json", format!("{stem}.json"));
                        for i in 0..n {
                            keep_one(&format!("r{i}.out"), format!("{stem}-r{i}.json"));
                        }
                    }
                    report.runs.push(r);
                    // The copies can be N × the file: gone before the next run.
                    std::fs::remove_dir_all(&dir)?;
                }
            }
        }
    }
    report.finish();
    print!("{}", report.markdown());
    if let Some(path) = &o.json {
        crate::report::write_file(path, &report.json())?;
    }
    let failed = report.failures();
    if !failed.is_empty() {
        bail!("{} run(s) failed: {}", failed.len(), failed.join("; "));
    }
    Ok(())
}

/// `--manyfold`, else `$MANYFOLD_BIN`, else the binary beside this one;
/// an error says why the manyfold rows cannot run.
fn manyfold_binary(opt: Option<&Path>) -> std::result::Result<PathBuf, String> {
    let p = match opt.map(Path::to_path_buf).or_else(|| std::env::var_os("MANYFOLD_BIN").map(PathBuf::from)) {
        Some(p) => p,
        None => return crate::sibling("manyfold").map_err(|e| e.to_string()),
    };
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!("{} does not exist", p.display()))
    }
}

/// Writes the sample (the loopback scenarios' seeded pattern) and returns
/// its BLAKE3.
fn write_sample(path: &Path, seed: u64, bytes: u64) -> Result<String> {
    let pattern = Pattern::new(seed, bytes);
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut h = blake3::Hasher::new();
    let mut buf = vec![0u8; CHUNK];
    for i in 0..pattern.chunks() {
        let n = pattern.fill(i, &mut buf);
        f.write_all(&buf[..n])?;
        h.update(&buf[..n]);
    }
    f.flush().with_context(|| format!("writing {}", path.display()))?;
    eprintln!("mcast: sample {} ({}) written", path.display(), human(bytes));
    Ok(h.finalize().to_hex().to_string())
}
