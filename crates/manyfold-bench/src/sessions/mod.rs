//! The `sessions` scenario (issue 6; paper 02, RUDP; BENCH.md's "many
//! short sessions" anchor): N clients on 127.0.0.1, each one connection
//! carrying one request and one reply, beside kernel TCP doing connect,
//! request, reply and close per client in the same run. Four parts:
//!
//! - **grid**: N = 1,000, 10,000 and 50,000 requests of 1 KiB (reply the
//!   same size) at concurrency 100 and 1,000; rows manyfold, kernel TCP,
//!   and kernel TCP with its clients spread over 64 source addresses (as
//!   distinct devices; on one address TCP's clients share one ephemeral
//!   port range with their TIME-WAITs), alternating within each
//!   repetition. Target: ≥ 3× TCP's requests/s (paper 02 reports 3–12×),
//!   no failures;
//! - **sizes**: paper 02 §4.3, 2,000 requests at 64 B … 16 KiB;
//! - **rto**: paper 02 §4.4 (its "maximum waiting time"), 2,000 requests of
//!   1 KiB under several `min_rto` / `initial_rto` settings, without loss
//!   and with emulated loss on the client endpoints (the driver's fault
//!   injection: each datagram between client and server is dropped with
//!   probability p, each way), where the setting matters;
//! - **grid** also runs **manyfold with 0-RTT tokens** (spec §6.9): the
//!   client endpoints reuse tokens, so after its endpoint's first session
//!   each request goes on the SYN. Target: ≥ 2× TCP's requests/s; and
//!   **manyfold with an inline handler** (spec §15.4): the server's
//!   handler runs inside its driver task (`Endpoint::serve_inline`), the
//!   clients as in the plain row;
//! - **link**: manyfold with and without tokens over an emulated path of
//!   `--link-rtt-ms` (default 50 ms: half of it added to every datagram
//!   each client endpoint sends, half to every one it receives, by the
//!   driver's fault injection), `--sweep-requests` sessions; p50 and p99 in
//!   round trips. Target: p50 of one round trip with tokens (the full
//!   handshake takes two). Kernel TCP is not in it: the kernel has no
//!   netem here and the driver's delay applies to manyfold only;
//! - **hold**: one listener holding `--hold` sessions established and idle,
//!   once bare and once after each sent a 16-byte hello (data makes the
//!   receiving side allocate its buffer); the server's RSS growth per
//!   session against the 4 KiB target, and the time to establish them.
//!
//! Each run is two processes of this binary measured by `wait4`
//! ([`crate::child`]): the server ([`server`]) and the load generator
//! ([`client`]). A session: the client stamps its start, connects, writes
//! the request, finishes its sending side (FIN), reads the reply to its
//! end and checks it is the request reversed; the server reads the request
//! to its end, writes the reply and closes second (the client holds
//! TIME-WAIT, spec §4.4). Many client sessions share few client endpoints:
//! one UDP socket per `--per-endpoint` concurrent sessions.
//!
//! Modules: [`server`], [`client`] (both processes), [`report`] (tables,
//! JSON, charts, targets); the report's frame is [`crate::report`].

mod client;
mod report;
mod server;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Subcommand, ValueEnum};

use crate::child;
use crate::fanout::runs::{wait_for_file, write_ready};
use crate::loopback::parse_size;
use report::{HoldFigures, Part, Report, RunResult};

pub type Args = crate::ScenarioArgs<Internal, Options>;

/// Which transport a run's two processes use.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// manyfold: connect, write, finish, read to the end; the server closes second.
    Manyfold,
    /// manyfold whose client endpoints reuse address-validation tokens
    /// (spec §6.9): `Endpoint::request`, which sends the request and FIN on
    /// the SYN once the endpoint holds the server's token.
    ManyfoldTokens,
    /// manyfold whose server runs its handler inside the driver task
    /// (`Endpoint::serve_inline`, spec §15.4): no task per session. The
    /// clients are the plain manyfold row's.
    ManyfoldInline,
    /// Kernel TCP (tokio): connect, write, shutdown(write), read to EOF, close.
    Tcp,
    /// Kernel TCP with the clients spread over [`TCP_SOURCES`] source
    /// addresses (127.0.0.2 …), as distinct devices would be: one address
    /// has only the ephemeral port range (28,232 ports here) for its
    /// connections and their TIME-WAITs.
    TcpSpread,
}

/// The grid's rows, in the order each repetition runs them (manyfold and
/// TCP alternate within a repetition).
pub const GRID_ROWS: &[Kind] =
    &[Kind::Manyfold, Kind::ManyfoldInline, Kind::ManyfoldTokens, Kind::Tcp, Kind::TcpSpread];

/// Source addresses of the [`Kind::TcpSpread`] clients.
pub const TCP_SOURCES: u8 = 64;

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Manyfold => "manyfold",
            Kind::ManyfoldTokens => "manyfold, 0-RTT tokens",
            Kind::ManyfoldInline => "manyfold, inline handler",
            Kind::Tcp => "kernel TCP",
            Kind::TcpSpread => "kernel TCP, 64 client addresses",
        }
    }

    /// The manyfold rows.
    pub fn is_manyfold(self) -> bool {
        matches!(self, Kind::Manyfold | Kind::ManyfoldTokens | Kind::ManyfoldInline)
    }

    fn arg(self) -> String {
        self.to_possible_value().map(|v| v.get_name().to_string()).unwrap_or_default()
    }
}

/// The retransmission-timeout settings of both ends (ConnectionConfig).
#[derive(clap::Args, Debug, Clone, Copy, PartialEq)]
pub struct Rto {
    /// `min_rto` in ms (library default 20).
    #[arg(long, default_value_t = 20)]
    pub min_rto_ms: u64,
    /// `initial_rto` in ms (library default 1000).
    #[arg(long, default_value_t = 1000)]
    pub initial_rto_ms: u64,
}

impl Default for Rto {
    fn default() -> Self {
        Rto { min_rto_ms: 20, initial_rto_ms: 1000 }
    }
}

impl Rto {
    /// The engine's settings with these timeouts.
    pub fn endpoint_config(self) -> manyfold::EndpointConfig {
        let mut c = manyfold::EndpointConfig::default();
        // Every client of the lab is 127.0.0.1: one source address holds
        // all the sessions, so its share is the whole table (spec §6.4).
        c.max_connections_per_source = c.max_connections;
        c.connection.min_rto = Duration::from_millis(self.min_rto_ms);
        c.connection.initial_rto = Duration::from_millis(self.initial_rto_ms);
        c
    }

    /// `MIN/INITIAL` in ms, as `--rto` takes it.
    fn parse(s: &str) -> Result<Rto> {
        let (min, initial) = s.split_once('/').with_context(|| format!("--rto wants MIN/INITIAL in ms, got {s:?}"))?;
        Ok(Rto { min_rto_ms: min.trim().parse()?, initial_rto_ms: initial.trim().parse()? })
    }
}

/// The scenario's own processes (hidden subcommands of this binary).
#[derive(Subcommand, Debug)]
pub enum Internal {
    /// (internal) The server: answers every session with its request
    /// reversed (or, with `--hold`, keeps each session open and idle)
    /// until `--stop` appears; writes its address to `--ready`.
    #[command(hide = true)]
    Server {
        #[arg(long, value_enum)]
        kind: Kind,
        #[arg(long)]
        ready: PathBuf,
        #[arg(long)]
        stop: PathBuf,
        /// Accept backlog (manyfold `accept_backlog`, TCP `listen`).
        #[arg(long)]
        backlog: usize,
        #[command(flatten)]
        rto: Rto,
        /// Hold mode: read each session's hello and keep it; measure RSS
        /// when `--measure` appears (it holds the number of sessions to wait for).
        #[arg(long)]
        measure: Option<PathBuf>,
        /// Hold mode: bytes of each session's hello (0: none, the session
        /// is kept as soon as it is accepted).
        #[arg(long, default_value_t = 16)]
        hello: usize,
        #[arg(long)]
        limit: f64,
    },
    /// (internal) The load generator: `--requests` sessions, at most
    /// `--concurrency` at once.
    #[command(hide = true)]
    Client {
        #[arg(long, value_enum)]
        kind: Kind,
        #[arg(long)]
        server: SocketAddr,
        #[arg(long)]
        requests: usize,
        #[arg(long)]
        concurrency: usize,
        #[arg(long)]
        size: usize,
        /// Concurrent sessions per client endpoint (manyfold).
        #[arg(long)]
        per_endpoint: usize,
        /// Emulated loss on the client endpoints, percent each way (manyfold).
        #[arg(long, default_value_t = 0.0)]
        loss: f64,
        /// Emulated round trip added by the client endpoints, ms (manyfold).
        #[arg(long, default_value_t = 0)]
        rtt_ms: u64,
        #[arg(long)]
        seed: u64,
        #[command(flatten)]
        rto: Rto,
        /// Seconds before one session counts as failed.
        #[arg(long)]
        request_timeout: f64,
        #[arg(long)]
        limit: f64,
    },
    /// (internal) The hold's clients: `--sessions` manyfold sessions, each
    /// sending a hello and staying open until `--stop` appears; writes its
    /// figures to `--held` once all are up.
    #[command(hide = true)]
    HoldClient {
        #[arg(long)]
        server: SocketAddr,
        #[arg(long)]
        sessions: usize,
        #[arg(long)]
        concurrency: usize,
        /// Sessions per client endpoint.
        #[arg(long)]
        per_endpoint: usize,
        /// Bytes each session sends once up (0: none).
        #[arg(long)]
        hello: usize,
        #[arg(long)]
        held: PathBuf,
        #[arg(long)]
        stop: PathBuf,
        #[arg(long)]
        limit: f64,
    },
}

/// What to measure. Lists are comma-separated.
#[derive(clap::Args, Debug, Clone)]
#[command(mut_arg("plot", |a| a.help(
    "Also draw PNG charts into this directory (created if missing): sessions-rate.png (requests/s against N), sessions-p99.png (p99 latency against N), sessions-sizes.png"
)))]
pub struct Options {
    /// A smoke run: N = 1,000 at concurrency 100, the sweeps with 200
    /// requests, a hold of 10,000, one repetition. Explicit options still win.
    #[arg(long)]
    pub quick: bool,
    /// Which parts to run [default: grid,sizes,rto,hold].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub parts: Option<Vec<Part>>,
    /// Requests (clients) per grid run [default: 1000,10000,50000; --quick: 1000].
    #[arg(long, value_delimiter = ',')]
    pub requests: Option<Vec<usize>>,
    /// Sessions at once in the grid [default: 100,1000; --quick: 100].
    #[arg(long, value_delimiter = ',')]
    pub concurrency: Option<Vec<usize>>,
    /// Request (and reply) size of the grid and the rto sweep.
    #[arg(long, default_value = "1KiB")]
    pub size: String,
    /// Repetitions of every run [default: 3; --quick: 1].
    #[arg(long)]
    pub reps: Option<usize>,
    /// Requests per run of the two sweeps [default: 2000; --quick: 200].
    #[arg(long)]
    pub sweep_requests: Option<usize>,
    /// Concurrency of the two sweeps.
    #[arg(long, default_value_t = 100)]
    pub sweep_concurrency: usize,
    /// Sizes of the size sweep.
    #[arg(long, value_delimiter = ',', default_value = "64,256,1KiB,4KiB,16KiB")]
    pub sweep_sizes: Vec<String>,
    /// RTO settings of the rto sweep, each MIN/INITIAL in ms.
    #[arg(long, value_delimiter = ',', default_value = "5/1000,20/1000,200/1000,20/200,20/3000")]
    pub rto: Vec<String>,
    /// Emulated loss of the rto sweep's lossy runs, percent each way (0: none).
    #[arg(long, default_value_t = 2.0)]
    pub rto_loss: f64,
    /// Round trip of the link part's emulated path, ms.
    #[arg(long, default_value_t = 50)]
    pub link_rtt_ms: u64,
    /// Sessions the hold establishes and keeps idle [default: 100000; --quick: 10000].
    #[arg(long)]
    pub hold: Option<usize>,
    /// Bytes each held session sends once up, one hold per value: 0 (a bare
    /// established session) and 16 (a session that received data).
    #[arg(long, value_delimiter = ',', default_value = "0,16")]
    pub hold_hello: Vec<usize>,
    /// Handshakes in flight at once while the hold builds up.
    #[arg(long, default_value_t = 1000)]
    pub hold_concurrency: usize,
    /// Concurrent sessions per manyfold client endpoint (one UDP socket).
    #[arg(long, default_value_t = 100)]
    pub per_endpoint: usize,
    /// Held sessions per manyfold client endpoint in the hold.
    #[arg(long, default_value_t = 1000)]
    pub hold_per_endpoint: usize,
    /// The server's accept backlog (manyfold `accept_backlog`; TCP
    /// `listen(2)`, which the kernel caps at net.core.somaxconn).
    #[arg(long, default_value_t = 4096)]
    pub backlog: usize,
    /// Seconds before one session counts as failed.
    #[arg(long, default_value_t = 30.0)]
    pub request_timeout: f64,
    /// Seed of the requests' pseudo-random bytes (and of the fault injection).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Per-run time limit in seconds (each process).
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
    #[command(flatten)]
    pub out: crate::report::Outputs,
}

pub fn run(args: Args) -> Result<()> {
    match args.internal {
        Some(Internal::Server { kind, ready, stop, backlog, rto, measure, hello, limit }) => {
            let limit = Duration::from_secs_f64(limit);
            let hold = measure.as_deref().map(|m| (m, hello));
            server::run(kind, &ready, &stop, backlog, rto, hold, limit)
        }
        Some(Internal::Client {
            kind,
            server,
            requests,
            concurrency,
            size,
            per_endpoint,
            loss,
            rtt_ms,
            seed,
            rto,
            request_timeout,
            limit,
        }) => {
            let load = client::Load {
                kind,
                server,
                requests,
                concurrency,
                size,
                per_endpoint,
                loss: loss / 100.0,
                rtt: Duration::from_millis(rtt_ms),
                seed,
                rto,
                request_timeout: Duration::from_secs_f64(request_timeout),
            };
            client::run(&load, Duration::from_secs_f64(limit))
        }
        Some(Internal::HoldClient { server, sessions, concurrency, per_endpoint, hello, held, stop, limit }) => {
            let hold = client::Hold { server, sessions, concurrency, per_endpoint, hello };
            client::hold(&hold, &held, &stop, Duration::from_secs_f64(limit))
        }
        None => measure(&args.opts),
    }
}

/// Everything a run needs, resolved from the options.
#[derive(Debug, Clone)]
pub struct Plan {
    pub parts: Vec<Part>,
    pub requests: Vec<usize>,
    pub concurrency: Vec<usize>,
    pub size: usize,
    pub reps: usize,
    pub sweep_requests: usize,
    pub sweep_concurrency: usize,
    pub sweep_sizes: Vec<usize>,
    pub rtos: Vec<Rto>,
    pub rto_loss: f64,
    pub link_rtt_ms: u64,
    pub hold: usize,
    pub hold_hello: Vec<usize>,
    pub hold_concurrency: usize,
    pub per_endpoint: usize,
    pub hold_per_endpoint: usize,
    pub backlog: usize,
    pub request_timeout: f64,
    pub seed: u64,
    pub limit: Duration,
}

impl Plan {
    pub fn from_options(o: &Options) -> Result<Plan> {
        let q = o.quick;
        let size_of = |s: &String| -> Result<usize> {
            let b = parse_size(s)? as usize;
            if !(1..=16 << 20).contains(&b) {
                bail!("request sizes must be 1 byte to 16 MiB, not {s}");
            }
            Ok(b)
        };
        let plan = Plan {
            parts: o.parts.clone().unwrap_or(vec![Part::Grid, Part::Sizes, Part::Rto, Part::Link, Part::Hold]),
            requests: o.requests.clone().unwrap_or(if q { vec![1000] } else { vec![1000, 10_000, 50_000] }),
            concurrency: o.concurrency.clone().unwrap_or(if q { vec![100] } else { vec![100, 1000] }),
            size: size_of(&o.size)?,
            reps: o.reps.unwrap_or(if q { 1 } else { 3 }).max(1),
            sweep_requests: o.sweep_requests.unwrap_or(if q { 200 } else { 2000 }),
            sweep_concurrency: o.sweep_concurrency,
            sweep_sizes: o.sweep_sizes.iter().map(size_of).collect::<Result<_>>()?,
            rtos: o.rto.iter().map(|s| Rto::parse(s)).collect::<Result<_>>()?,
            rto_loss: o.rto_loss,
            link_rtt_ms: o.link_rtt_ms,
            hold: o.hold.unwrap_or(if q { 10_000 } else { 100_000 }),
            hold_hello: o.hold_hello.clone(),
            hold_concurrency: o.hold_concurrency,
            per_endpoint: o.per_endpoint,
            hold_per_endpoint: o.hold_per_endpoint,
            backlog: o.backlog,
            request_timeout: o.request_timeout,
            seed: o.seed,
            limit: Duration::from_secs(o.timeout.max(1)),
        };
        let counts =
            plan.requests.iter().chain(&plan.concurrency).chain([&plan.sweep_requests, &plan.sweep_concurrency]);
        if counts.copied().any(|n| n == 0) || plan.requests.is_empty() || plan.concurrency.is_empty() {
            bail!("requests and concurrencies must be at least 1");
        }
        if plan.per_endpoint == 0 || plan.hold_per_endpoint == 0 || plan.hold_concurrency == 0 || plan.backlog == 0 {
            bail!("--per-endpoint, --hold-per-endpoint, --hold-concurrency and --backlog must be at least 1");
        }
        if plan.link_rtt_ms == 0 || plan.link_rtt_ms > 10_000 {
            bail!("--link-rtt-ms must be 1 to 10000");
        }
        if !(0.0..50.0).contains(&plan.rto_loss) {
            bail!("--rto-loss is a percentage below 50");
        }
        Ok(plan)
    }
}

/// One request-reply run: what the load generator does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spec {
    pub part: Part,
    pub kind: Kind,
    pub requests: usize,
    pub concurrency: usize,
    pub size: usize,
    pub rto: Rto,
    /// Emulated loss, percent each way (manyfold only).
    pub loss: f64,
    /// Emulated round trip in ms (manyfold only; 0: none).
    pub rtt_ms: u64,
}

fn measure(o: &Options) -> Result<()> {
    let plan = Plan::from_options(o)?;
    let bench = std::env::current_exe()?;
    let work = tempfile::Builder::new().prefix("manyfold-bench-sessions-").tempdir()?;
    delete_on_interrupt(work.path().to_path_buf());
    let mut report = Report::new(&plan);
    let mut runs: Vec<Vec<Spec>> = vec![Vec::new(); plan.reps];
    let spec = |part, kind, requests, concurrency, size| Spec {
        part,
        kind,
        requests,
        concurrency,
        size,
        rto: Rto::default(),
        loss: 0.0,
        rtt_ms: 0,
    };
    for rep in runs.iter_mut() {
        if plan.parts.contains(&Part::Grid) {
            for &n in &plan.requests {
                for &c in &plan.concurrency {
                    for &kind in GRID_ROWS {
                        rep.push(spec(Part::Grid, kind, n, c, plan.size));
                    }
                }
            }
        }
        if plan.parts.contains(&Part::Sizes) {
            for &size in &plan.sweep_sizes {
                for kind in [Kind::Manyfold, Kind::Tcp] {
                    rep.push(spec(Part::Sizes, kind, plan.sweep_requests, plan.sweep_concurrency, size));
                }
            }
        }
        if plan.parts.contains(&Part::Rto) {
            let base = spec(Part::Rto, Kind::Tcp, plan.sweep_requests, plan.sweep_concurrency, plan.size);
            rep.push(base);
            let losses = if plan.rto_loss > 0.0 { vec![0.0, plan.rto_loss] } else { vec![0.0] };
            for &loss in &losses {
                for &rto in &plan.rtos {
                    rep.push(Spec { kind: Kind::Manyfold, rto, loss, ..base });
                }
            }
        }
        if plan.parts.contains(&Part::Link) {
            for kind in [Kind::Manyfold, Kind::ManyfoldTokens] {
                let s = spec(Part::Link, kind, plan.sweep_requests, plan.sweep_concurrency, plan.size);
                rep.push(Spec { rtt_ms: plan.link_rtt_ms, ..s });
            }
        }
    }
    for (rep, specs) in runs.iter().enumerate() {
        for s in specs {
            let dir = work.path().join(format!("run-{}", report.runs.len()));
            std::fs::create_dir(&dir)?;
            let lab_rss_kib = server::vm_rss_kib().unwrap_or(0);
            let r = run_one(&bench, &plan, s, &dir).unwrap_or_else(|e| RunResult::failed(s, format!("{e:#}")));
            let r = RunResult { rep, lab_rss_kib, ..r };
            eprintln!("rep {} {}", rep + 1, r.progress());
            report.runs.push(r);
            std::fs::remove_dir_all(&dir)?;
        }
    }
    if plan.parts.contains(&Part::Hold) && plan.hold > 0 {
        for &hello in &plan.hold_hello {
            let dir = work.path().join(format!("hold-{hello}"));
            std::fs::create_dir(&dir)?;
            let s = spec(Part::Hold, Kind::Manyfold, plan.hold, plan.hold_concurrency, hello);
            let lab_rss_kib = server::vm_rss_kib().unwrap_or(0);
            let r = run_hold(&bench, &plan, hello, &dir).unwrap_or_else(|e| RunResult::failed(&s, format!("{e:#}")));
            let r = RunResult { lab_rss_kib, ..r };
            eprintln!("hold {}", r.progress());
            report.runs.push(r);
            std::fs::remove_dir_all(&dir)?;
        }
    }
    drop(work);
    report.finish();
    crate::report::publish(&report, &o.out)
}

/// The scratch directory goes on Ctrl-C and SIGTERM too (its `TempDir`
/// removes it on every return and error); the children are bounded by
/// their own `--limit`.
fn delete_on_interrupt(dir: PathBuf) {
    crate::wan::sys::install_interrupt_flag();
    std::thread::spawn(move || loop {
        if crate::wan::sys::interrupted() {
            eprintln!("sessions: interrupted; deleting {}", dir.display());
            let _ = std::fs::remove_dir_all(&dir);
            std::process::exit(130);
        }
        std::thread::sleep(Duration::from_millis(50));
    });
}

/// Starts the server of `kind` in `dir` and waits for its address.
fn start_server(
    bench: &Path,
    plan: &Plan,
    kind: Kind,
    rto: Rto,
    hold: Option<usize>,
    dir: &Path,
) -> Result<(child::Launched, SocketAddr)> {
    let ready = dir.join("ready");
    let mut c = std::process::Command::new(bench);
    c.env("RUST_BACKTRACE", "0").args(["sessions", "server", "--kind", &kind.arg()]);
    c.arg("--ready").arg(&ready).arg("--stop").arg(dir.join("stop"));
    c.args(["--backlog", &plan.backlog.to_string(), "--limit", &plan.limit.as_secs_f64().to_string()]);
    c.args(["--min-rto-ms", &rto.min_rto_ms.to_string(), "--initial-rto-ms", &rto.initial_rto_ms.to_string()]);
    if let Some(hello) = hold {
        c.arg("--measure").arg(dir.join("measure")).args(["--hello", &hello.to_string()]);
    }
    let server = child::launch(c, dir, "server", format!("{} server", kind.label()))?;
    if let Err(e) = wait_for_file(&ready, Duration::from_secs(30)) {
        server.kill();
        return Err(e);
    }
    let addr = std::fs::read_to_string(&ready)?.trim().parse().context("the server's address")?;
    Ok((server, addr))
}

/// TIME-WAIT sockets left by earlier runs above which a plain TCP run
/// waits for them to expire: its clients share 127.0.0.1's ephemeral ports.
const TIME_WAIT_SETTLE: usize = 5000;

/// Kernel TCP sockets in TIME-WAIT whose local address is 127.0.0.1 (the
/// plain TCP row's clients), from /proc/net/tcp, read a line at a time:
/// this process must stay small, since a child's peak RSS (wait4) counts
/// its parent's resident pages at the fork.
fn loopback_time_waits() -> usize {
    use std::io::BufRead;
    let Ok(table) = std::fs::File::open("/proc/net/tcp") else { return 0 };
    std::io::BufReader::new(table)
        .lines()
        .skip(1)
        .map_while(|l| l.ok())
        .filter(|l| {
            let mut f = l.split_whitespace().skip(1);
            let local = f.next().unwrap_or("");
            let state = f.nth(1).unwrap_or("");
            local.starts_with("0100007F:") && state == "06"
        })
        .count()
}

/// Before a plain TCP run: waits (at most 65 s, Linux's TIME-WAIT being
/// 60 s) until earlier runs' TIME-WAITs on 127.0.0.1 fall below
/// [`TIME_WAIT_SETTLE`]; returns how many remain.
fn settle_time_waits() -> usize {
    let start = std::time::Instant::now();
    let mut n = loopback_time_waits();
    if n >= TIME_WAIT_SETTLE {
        eprintln!("sessions: waiting for {n} TIME-WAIT sockets on 127.0.0.1 to expire");
    }
    while n >= TIME_WAIT_SETTLE && start.elapsed() < Duration::from_secs(65) {
        std::thread::sleep(Duration::from_millis(500));
        n = loopback_time_waits();
    }
    n
}

/// One request-reply run: the server, then the load generator; once the
/// load generator is done, the server is told to stop.
fn run_one(bench: &Path, plan: &Plan, s: &Spec, dir: &Path) -> Result<RunResult> {
    let time_waits = if s.kind == Kind::Tcp { settle_time_waits() } else { loopback_time_waits() };
    let busy = machine_cpu_s();
    let (server, addr) = start_server(bench, plan, s.kind, s.rto, None, dir)?;
    let mut c = std::process::Command::new(bench);
    c.env("RUST_BACKTRACE", "0").args(["sessions", "client", "--kind", &s.kind.arg()]);
    c.args(["--server", &addr.to_string(), "--requests", &s.requests.to_string()]);
    c.args(["--concurrency", &s.concurrency.to_string(), "--size", &s.size.to_string()]);
    c.args(["--per-endpoint", &plan.per_endpoint.to_string(), "--loss", &s.loss.to_string()]);
    c.args(["--rtt-ms", &s.rtt_ms.to_string()]);
    c.args(["--seed", &plan.seed.to_string(), "--request-timeout", &plan.request_timeout.to_string()]);
    c.args(["--min-rto-ms", &s.rto.min_rto_ms.to_string(), "--initial-rto-ms", &s.rto.initial_rto_ms.to_string()]);
    c.args(["--limit", &plan.limit.as_secs_f64().to_string()]);
    let client = match child::launch(c, dir, "client", format!("{} load generator", s.kind.label())) {
        Ok(c) => c,
        Err(e) => {
            server.kill();
            return Err(e);
        }
    };
    let grace = Duration::from_secs(30);
    let got = client.finish(plan.limit + grace);
    write_ready(&dir.join("stop"), "stop")?;
    let served = server.finish(grace);
    let (got, served) = (got?, served?);
    let ours = (got.usage.cpu + served.usage.cpu).as_secs_f64();
    let other_cpu_s = machine_cpu_s() - busy - ours;
    Ok(RunResult { time_waits, other_cpu_s, ..RunResult::parse(s, &got, &served)? })
}

/// CPU seconds the whole machine spent in processes so far (user, nice
/// and system of /proc/stat's first line, in USER_HZ = 100 ticks a
/// second). Interrupt and softirq time is left out: loopback traffic's
/// own packet processing lands there.
fn machine_cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<f64> =
        stat.lines().next().unwrap_or("").split_whitespace().skip(1).filter_map(|t| t.parse().ok()).collect();
    ticks.iter().take(3).sum::<f64>() / 100.0
}

/// The hold: one server, `plan.hold` sessions established and idle, each
/// having sent `hello` bytes; the server's RSS before and with them.
fn run_hold(bench: &Path, plan: &Plan, hello: usize, dir: &Path) -> Result<RunResult> {
    let (server, addr) = start_server(bench, plan, Kind::Manyfold, Rto::default(), Some(hello), dir)?;
    let held = dir.join("held");
    let mut c = std::process::Command::new(bench);
    c.env("RUST_BACKTRACE", "0").args(["sessions", "hold-client", "--server", &addr.to_string()]);
    c.args(["--sessions", &plan.hold.to_string(), "--concurrency", &plan.hold_concurrency.to_string()]);
    c.args(["--per-endpoint", &plan.hold_per_endpoint.to_string(), "--limit", &plan.limit.as_secs_f64().to_string()]);
    c.args(["--hello", &hello.to_string()]);
    c.arg("--held").arg(&held).arg("--stop").arg(dir.join("stop"));
    let client = match child::launch(c, dir, "client", "hold clients".into()) {
        Ok(c) => c,
        Err(e) => {
            server.kill();
            return Err(e);
        }
    };
    let up = wait_for_file(&held, plan.limit).and_then(|()| {
        let text = std::fs::read_to_string(&held)?;
        let ok = crate::wan::probe::field(&text, "ok").context("the hold clients wrote no count")?;
        write_ready(&dir.join("measure"), &format!("{ok}"))?;
        wait_for_file(&dir.join("measured"), Duration::from_secs(60))
    });
    // Both stop whatever happened; each is bounded by its own limit too.
    write_ready(&dir.join("stop"), "stop")?;
    let grace = Duration::from_secs(30);
    let got = client.finish(grace);
    let served = server.finish(grace);
    up?;
    let (got, served) = (got?, served?);
    let hold = HoldFigures::parse(&got.stdout, &served.stdout)?;
    Ok(RunResult::held(plan, hello, hold, got.usage, served.usage))
}
