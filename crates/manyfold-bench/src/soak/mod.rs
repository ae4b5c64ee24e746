//! `manyfold-bench soak`: a long run with churn (issue 10). For
//! `--duration`, in this one process on 127.0.0.1, with 5% of the datagrams
//! dropped each way (the driver's fault injection on the client-side
//! endpoints), two loads run at once:
//!
//! - [`pairs`]: a pool of clients that connect to one echo server, send a
//!   random-size frame, read its echo and close, over and over, each
//!   client replacing its endpoint every few connections;
//! - [`group`]: one group sender sending frames to receivers that join
//!   (`add_destination`) and leave, gracefully (`remove_destination`) or
//!   by closing their endpoint; every `--epoch` the group is closed, its
//!   sender's endpoint too, and a new one opened.
//!
//! Every byte that arrives is checked ([`frame`]); any wrong byte, lost
//! frame, unexpected error or operation over its time limit is a failure.
//! [`memory`] samples the resident set; a second-half slope above
//! `--max-growth` MiB per minute fails the run ("flat memory"). Every
//! operation has a time limit, every loop stops itself at the deadline and
//! every task is joined; the exit status is non-zero on any failure.
//! `--encrypted` runs the same churn over protected connections (spec §19).

mod frame;
mod group;
mod memory;
mod pairs;
mod report;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Result};
use tokio::time::Instant;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// How long the churn runs, e.g. 30m, 2m, 90s, 1h.
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    duration: Duration,
    /// Protect every connection (spec §19: a pre-shared key, then
    /// ChaCha20-Poly1305 on every packet).
    #[arg(long)]
    encrypted: bool,
    /// Percent of datagrams dropped each way (on the client-side endpoints,
    /// as they send and as they receive).
    #[arg(long, default_value_t = 5.0)]
    loss: f64,
    /// Point-to-point clients running at once.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Largest point-to-point payload (each is random in 0..=this), e.g. 256KiB.
    #[arg(long, default_value = "256KiB")]
    max_payload: String,
    /// Connections a client makes before it replaces its endpoint.
    #[arg(long, default_value_t = 16)]
    conns_per_endpoint: u32,
    /// Fewest group receivers kept (leaves happen only above it).
    #[arg(long, default_value_t = 2)]
    min_receivers: usize,
    /// Most group receivers at once (joins happen only below it).
    #[arg(long, default_value_t = 6)]
    max_receivers: usize,
    /// Group messages per second.
    #[arg(long, default_value_t = 200)]
    group_rate: u32,
    /// Largest group message payload (each is random in 0..=this).
    #[arg(long, default_value = "16KiB")]
    max_message: String,
    /// A membership change (a join or a leave) this often.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    churn_every: Duration,
    /// Each group (and its sender's endpoint) lives this long.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    epoch: Duration,
    /// How often memory is sampled.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    sample_every: Duration,
    /// Largest second-half RSS slope that counts as flat, MiB per minute.
    #[arg(long, default_value_t = 1.0)]
    max_growth: f64,
    /// Seed of sizes, ids, choices and fault injection.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also write the summary and every memory sample as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// `30m`, `2m`, `90s`, `1h`, `500ms`, or seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("bad duration {s:?}"))?;
    let secs = match unit.trim() {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("bad duration unit in {s:?} (ms, s, m or h)")),
    };
    Ok(Duration::from_secs_f64(secs))
}

/// What the run needs to know everywhere.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub encrypted: bool,
    pub loss: f64,
    pub clients: usize,
    pub max_payload: u32,
    pub conns_per_endpoint: u32,
    pub min_receivers: usize,
    pub max_receivers: usize,
    pub group_rate: u32,
    pub max_message: u32,
    pub churn_every: Duration,
    pub epoch: Duration,
    pub seed: u64,
    /// When the churn stops (operations under way finish).
    pub deadline: Instant,
}

/// Time limit of one operation: a connection's whole exchange, a group's
/// handshake, one group send, a close. At 5% loss each way a healthy one
/// takes well under a second; this is for a stuck one, and holds a
/// handshake that runs to [`CONNECT_LIMIT`].
pub(crate) const OP_LIMIT: Duration = Duration::from_secs(180);

/// `ConnectionConfig::connect_timeout` of every endpoint. A handshake
/// round trip fails at 5% loss each way with odds q = 1 - 0.95² ≈ 0.0975,
/// and the SYN is repeated after 1, 2, 4, 8 ... s. With the library's 10 s
/// a connect gets 4 tries (q⁴ ≈ 9·10⁻⁵: 1.6 give-ups expected in 18,000
/// connections, and a first run saw 1); with 30 s, 5 (q⁵ ≈ 9·10⁻⁶: 0.7 in
/// 75,000, and the 30-minute run saw 1). With 120 s, 7 tries: q⁷ ≈ 8·10⁻⁸,
/// so a give-up in a 30-minute run is not chance.
const CONNECT_LIMIT: Duration = Duration::from_secs(120);

impl Plan {
    /// The configuration of an endpoint: `lossy` ones (clients, the group
    /// sender) drop `loss` of what they send and of what they receive,
    /// so every datagram between them and the plain ones (the echo server,
    /// the receivers) has one chance of loss per direction.
    pub fn config(&self, lossy: bool, fault_seed: u64) -> manyfold::Config {
        let mut config = manyfold::Config::default();
        // A connect that gives up is a failure here, so it must mean more
        // than bad luck: see CONNECT_LIMIT.
        config.endpoint.connection.connect_timeout = CONNECT_LIMIT;
        config.endpoint.seed = self.seed.wrapping_mul(0x1_0000_0001).wrapping_add(fault_seed).max(1);
        if lossy && self.loss > 0.0 {
            config.faults = manyfold::FaultConfig { seed: fault_seed, loss: self.loss / 100.0, ..Default::default() };
        }
        if self.encrypted {
            crate::loopback::mf::encrypt(&mut config);
        }
        config
    }

    pub fn running(&self) -> bool {
        Instant::now() < self.deadline
    }
}

/// The run's counters, shared by every task.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub conns_opened: AtomicU64,
    pub conns_completed: AtomicU64,
    pub conns_accepted: AtomicU64,
    /// Server closes whose FIN was not acknowledged in time (the client's
    /// endpoint was already gone: its verdict decides).
    pub server_close_unconfirmed: AtomicU64,
    pub client_endpoints: AtomicU64,
    pub pair_bytes_verified: AtomicU64,
    pub groups_opened: AtomicU64,
    pub groups_closed: AtomicU64,
    pub group_messages: AtomicU64,
    pub group_messages_delivered: AtomicU64,
    pub group_messages_undeliverable: AtomicU64,
    pub joins_at_open: AtomicU64,
    pub joins: AtomicU64,
    pub leaves_removed: AtomicU64,
    pub leaves_dropped: AtomicU64,
    pub leaves_at_close: AtomicU64,
    pub receiver_endpoints: AtomicU64,
    pub group_bytes_verified: AtomicU64,
    pub failure_count: AtomicU64,
    failures: Mutex<Vec<String>>,
}

/// Failure messages kept for the report (all are counted).
const KEPT_FAILURES: usize = 20;

impl Tally {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    pub fn fail(&self, what: impl Into<String>) {
        let what = what.into();
        eprintln!("FAILURE: {what}");
        self.failure_count.fetch_add(1, Ordering::Relaxed);
        let mut f = self.failures.lock().expect("failure list");
        if f.len() < KEPT_FAILURES {
            f.push(what);
        }
    }

    pub fn failures(&self) -> Vec<String> {
        self.failures.lock().expect("failure list").clone()
    }
}

/// A fresh endpoint on 127.0.0.1.
pub(crate) async fn bind(config: manyfold::Config) -> Result<manyfold::Endpoint> {
    let any: SocketAddr = "127.0.0.1:0".parse()?;
    Ok(manyfold::Endpoint::bind(any, config).await?)
}

pub fn run(args: Args) -> Result<()> {
    if !(0.0..100.0).contains(&args.loss) {
        bail!("--loss is a percentage in [0, 100), got {}", args.loss);
    }
    if args.min_receivers == 0 || args.max_receivers < args.min_receivers {
        bail!("need 1 <= --min-receivers <= --max-receivers");
    }
    if args.clients == 0 || args.group_rate == 0 || args.conns_per_endpoint == 0 {
        bail!("--clients, --group-rate and --conns-per-endpoint must be at least 1");
    }
    let size = |s: &str| -> Result<u32> {
        let n = crate::loopback::parse_size(s)?;
        u32::try_from(n).map_err(|_| anyhow::anyhow!("{s} is above 4 GiB"))
    };
    let max_payload = size(&args.max_payload)?;
    let max_message = size(&args.max_message)?;
    let load_before = crate::report::load();
    let started_at = crate::sh("date", &["-u", "+%Y-%m-%d %H:%M UTC"]);
    let outcome = crate::runtime()?.block_on(async {
        let start = Instant::now();
        let plan = Plan {
            encrypted: args.encrypted,
            loss: args.loss,
            clients: args.clients,
            max_payload,
            conns_per_endpoint: args.conns_per_endpoint,
            min_receivers: args.min_receivers,
            max_receivers: args.max_receivers,
            group_rate: args.group_rate,
            max_message,
            churn_every: args.churn_every,
            epoch: args.epoch,
            seed: args.seed,
            deadline: start + args.duration,
        };
        soak(plan, start, args.sample_every).await
    })?;
    let wall = outcome.wall;
    let rep = report::Report {
        args: &args,
        started_at,
        load_before,
        load_after: crate::report::load(),
        wall,
        memory: memory::summarise(&outcome.samples, args.duration.as_secs_f64() / 2.0),
        samples: &outcome.samples,
        server_conns_at_end: outcome.server_conns_at_end,
        tally: &outcome.tally,
    };
    print!("{}", rep.markdown());
    if let Some(path) = &args.json {
        crate::report::write_file(path, &rep.json())?;
    }
    let failures = Tally::get(&outcome.tally.failure_count);
    let growth = rep.memory.slope_mib_per_min;
    if failures > 0 {
        bail!("{failures} failure(s); the first: {}", outcome.tally.failures().first().cloned().unwrap_or_default());
    }
    if growth.is_nan() || growth > args.max_growth {
        bail!("memory grew {growth:.2} MiB per minute over the second half (limit {} MiB/min)", args.max_growth);
    }
    if Tally::get(&outcome.tally.pair_bytes_verified) == 0 || Tally::get(&outcome.tally.group_bytes_verified) == 0 {
        bail!("nothing was verified");
    }
    Ok(())
}

/// What the run left behind.
struct Outcome {
    tally: Arc<Tally>,
    samples: Vec<memory::Sample>,
    server_conns_at_end: usize,
    wall: Duration,
}

/// Extra time, after the deadline, for the operations under way to finish
/// and every task to be joined; past it the run is a failure.
const DRAIN_LIMIT: Duration = Duration::from_secs(240);

async fn soak(plan: Plan, start: Instant, sample_every: Duration) -> Result<Outcome> {
    let tally = Arc::new(Tally::default());
    let server = bind(plan.config(false, 0)).await?;
    server.listen();
    let server_addr = server.local_addr()?;
    let minutes = |s: f64| s / 60.0;
    let progress = {
        let tally = tally.clone();
        move |s: &memory::Sample| {
            // About once a minute.
            if (s.at as u64) % 60 < sample_every.as_secs().max(1) {
                eprintln!(
                    "soak {:.1} min: {} connections, {} group messages, {} joins, {:.1} MB verified, RSS {:.1} MiB, server holds {} connections, {} failures",
                    minutes(s.at),
                    Tally::get(&tally.conns_completed),
                    Tally::get(&tally.group_messages),
                    Tally::get(&tally.joins) + Tally::get(&tally.joins_at_open),
                    (Tally::get(&tally.pair_bytes_verified) + Tally::get(&tally.group_bytes_verified)) as f64 / 1e6,
                    s.rss_mib,
                    s.server_conns,
                    Tally::get(&tally.failure_count),
                );
            }
        }
    };
    let watch = tokio::spawn(memory::watch(start, plan.deadline, sample_every, server.clone(), progress));
    let serving = tokio::spawn(pairs::serve(server.clone(), plan.clone(), tally.clone()));
    let clients: Vec<_> =
        (0..plan.clients).map(|i| tokio::spawn(pairs::client(i, server_addr, plan.clone(), tally.clone()))).collect();
    let grouping = tokio::spawn(group::run(plan.clone(), tally.clone()));

    let finish = async {
        for c in clients {
            if let Err(e) = c.await {
                tally.fail(format!("a client task panicked: {e}"));
            }
        }
        if let Err(e) = grouping.await {
            tally.fail(format!("the group task panicked: {e}"));
        }
        let samples = watch.await.unwrap_or_default();
        // Every exchange is over: what the server still holds is TIME-WAIT
        // and closes under way, which must drain.
        let mut held = server.connection_count();
        let t = Instant::now();
        while held > 0 && t.elapsed() < Duration::from_secs(30) {
            tokio::time::sleep(Duration::from_millis(200)).await;
            held = server.connection_count();
        }
        server.shutdown_within(Duration::from_secs(5)).await;
        if let Err(e) = serving.await {
            tally.fail(format!("the server task panicked: {e}"));
        }
        (samples, held)
    };
    let (samples, server_conns_at_end) = match tokio::time::timeout_at(plan.deadline + DRAIN_LIMIT, finish).await {
        Ok(r) => r,
        Err(_) => {
            tally.fail(format!("the run did not stop within {} s of its deadline", DRAIN_LIMIT.as_secs()));
            (Vec::new(), usize::MAX)
        }
    };
    if server_conns_at_end > 0 && server_conns_at_end != usize::MAX {
        tally
            .fail(format!("the echo server still held {server_conns_at_end} connections 30 s after the last exchange"));
    }
    Ok(Outcome { tally, samples, server_conns_at_end, wall: start.elapsed() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("3 fortnights").is_err());
    }
}
