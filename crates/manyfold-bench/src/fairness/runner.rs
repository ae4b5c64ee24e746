//! Runs the fairness pairs: builds the `wan` lab once (two namespaces, the
//! relay set to the bottleneck), then for each repetition and pair starts
//! two receivers in namespace b, two senders in namespace a with one shared
//! start time, waits for all four, and reads their reports.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use manyfold_proto::CongestionAlgorithm;

use super::flows::{Kind, GRACE};
use super::report::{FlowResult, LinkCounters, Report, RunData, RunResult};
use super::stream::{json_f64, json_u64, parse_bins};
use super::Options;
use crate::child;
use crate::wan::link::LinkConfig;
use crate::wan::netns::{self, Lab, ADDR_B};

/// Between launching the receivers and the run's start: time for `ip netns
/// exec` and the four processes and their runtimes to come up (the
/// receivers must listen within half of it), so that both flows really
/// start together.
const START_DELAY: Duration = Duration::from_secs(2);
/// How long past its expected end a flow process may take before it is
/// killed and the run counted as failed.
const OVERTIME: Duration = Duration::from_secs(15);
/// First port of the flows; each run takes the next two.
const FIRST_PORT: u16 = 21_000;

/// One flow of a pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Flow {
    /// manyfold with this controller.
    Manyfold(String),
    /// Kernel TCP with this congestion control.
    Tcp(String),
}

impl Flow {
    pub fn label(&self) -> String {
        match self {
            Flow::Manyfold(cc) => format!("manyfold ({cc})"),
            Flow::Tcp(cc) => format!("kernel TCP {cc}"),
        }
    }

    fn kind(&self) -> Kind {
        match self {
            Flow::Manyfold(_) => Kind::Manyfold,
            Flow::Tcp(_) => Kind::Tcp,
        }
    }

    fn cc(&self) -> &str {
        match self {
            Flow::Manyfold(cc) | Flow::Tcp(cc) => cc,
        }
    }

    fn kind_arg(&self) -> &'static str {
        match self.kind() {
            Kind::Manyfold => "manyfold",
            Kind::Tcp => "tcp",
        }
    }
}

/// Two flows sharing the bottleneck.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pair(pub [Flow; 2]);

impl Pair {
    pub fn label(&self) -> String {
        format!("{} + {}", self.0[0].label(), self.0[1].label())
    }
}

/// Everything a full run needs, resolved from the options.
#[derive(Debug, Clone)]
pub struct Plan {
    pub secs: f64,
    pub warmup: f64,
    pub interval: f64,
    pub pairs: Vec<Pair>,
    pub reps: usize,
    pub link: LinkConfig,
    pub rtt_ms: f64,
    pub seed: u64,
}

impl Plan {
    pub fn from_options(o: &Options) -> Result<Plan> {
        let secs = o.secs.unwrap_or(if o.quick { 5.0 } else { 60.0 });
        let warmup = o.warmup.unwrap_or(if o.quick { 1.0 } else { 10.0 });
        if !(secs.is_finite() && secs > 0.0) {
            bail!("--secs must be positive");
        }
        if !(o.interval.is_finite() && o.interval > 0.0) || o.interval > secs {
            bail!("--interval must be positive and at most --secs");
        }
        if !(warmup.is_finite() && warmup >= 0.0 && warmup + o.interval <= secs) {
            bail!("--warmup must leave at least one interval of the run to measure");
        }
        let intervals = secs / o.interval;
        if (intervals - intervals.round()).abs() > 1e-6 {
            bail!("--secs ({secs}) must be a whole number of --interval ({})", o.interval);
        }
        if !(o.rtt.is_finite() && o.rtt >= 0.0 && o.queue_bdp.is_finite() && o.queue_bdp > 0.0) {
            bail!("--rtt must be non-negative and --queue-bdp positive");
        }
        let mut ccs: Vec<String> = match &o.cc {
            Some(list) => list.clone(),
            None => CongestionAlgorithm::ALL.iter().map(|c| c.name().to_string()).collect(),
        };
        for cc in &ccs {
            cc.parse::<CongestionAlgorithm>().map_err(anyhow::Error::msg)?;
        }
        if o.quick {
            ccs.truncate(1);
        }
        let tcp = Flow::Tcp(o.tcp_cc.clone());
        let mut pairs = Vec::new();
        for p in &o.pairs {
            if !["tcp", "mixed", "same"].contains(&p.as_str()) {
                bail!("unknown pair {p:?} (tcp, mixed, same)");
            }
        }
        if o.pairs.iter().any(|p| p == "tcp") {
            pairs.push(Pair([tcp.clone(), tcp.clone()]));
        }
        for cc in &ccs {
            let mf = Flow::Manyfold(cc.clone());
            if o.pairs.iter().any(|p| p == "mixed") {
                pairs.push(Pair([mf.clone(), tcp.clone()]));
            }
            if o.pairs.iter().any(|p| p == "same") {
                pairs.push(Pair([mf.clone(), mf]));
            }
        }
        if pairs.is_empty() {
            bail!("nothing to run: --pairs and --cc select no pair");
        }
        let rate_bps = crate::wan::parse_rate(&o.rate)?;
        let bdp = rate_bps as f64 / 8.0 * (o.rtt / 1e3);
        let link = LinkConfig {
            rate_bps,
            delay: Duration::from_secs_f64(o.rtt / 2.0 / 1e3),
            // The wan scenario's floor: a queue never shorter than 100 packets.
            queue_bytes: (bdp * o.queue_bdp).max(100.0 * 1500.0) as u64,
            seed: o.seed,
            ..LinkConfig::default()
        };
        Ok(Plan { secs, warmup, interval: o.interval, pairs, reps: o.reps.max(1), link, rtt_ms: o.rtt, seed: o.seed })
    }

    /// Wall time of the whole scenario, roughly: every run plus its start
    /// delay and grace.
    pub fn estimate(&self) -> Duration {
        let per_run = START_DELAY + GRACE + Duration::from_secs_f64(self.secs + 1.0);
        per_run * (self.pairs.len() * self.reps) as u32
    }
}

pub fn run(o: &Options) -> Result<()> {
    let plan = Plan::from_options(o)?;
    let bench = std::env::current_exe()?;
    let work = tempfile::Builder::new().prefix("manyfold-bench-fairness-").tempdir()?;
    netns::register_dir(work.path());
    eprintln!(
        "fairness: {} runs of {} s, about {:.0} s in all",
        plan.pairs.len() * plan.reps,
        plan.secs,
        plan.estimate().as_secs_f64()
    );
    let mut report = Report::new(&plan);
    {
        let mut lab = Lab::create(&bench)?;
        lab.configure(&plan.link)?;
        let mut port = FIRST_PORT;
        for rep in 0..plan.reps {
            for pair in &plan.pairs {
                let ports = [port, port + 1];
                port = if port >= 65_000 { FIRST_PORT } else { port + 2 };
                let dir = work.path().join(format!("run-{}", report.runs.len()));
                std::fs::create_dir(&dir)?;
                let r = run_pair(&mut lab, &bench, &plan, pair, ports, &dir);
                let result = match r {
                    Ok(data) => {
                        let r = RunResult::new(pair.label(), rep, data, &plan);
                        eprintln!("{}", r.progress_line());
                        r
                    }
                    Err(e) => {
                        lab.kill_leftovers();
                        eprintln!("rep {} {}: failed: {e:#}", rep + 1, pair.label());
                        RunResult::failed(pair.label(), rep, format!("{e:#}"))
                    }
                };
                report.runs.push(result);
            }
        }
    } // the lab (namespaces, relay) goes here, before any output
    report.finish();
    print!("{}", report.markdown());
    o.out.write_json(|| report.json())?;
    o.out.draw(|dir| report.plot(dir))?;
    let failed: Vec<String> = report.failures();
    if !failed.is_empty() {
        bail!("{} run(s) failed: {}", failed.len(), failed.join("; "));
    }
    Ok(())
}

fn flow_command(lab: &Lab, bench: &Path, ns: &str, role: &str, flow: &Flow, addr: &str, t: [String; 4]) -> Command {
    let mut c = lab.exec(ns, bench);
    let [start_ns, secs, interval, seed] = t;
    c.args(["fairness", role, "--kind", flow.kind_arg(), "--cc", flow.cc()]);
    c.args([if role == "send" { "--to" } else { "--listen" }, addr]);
    c.args(["--start-ns", &start_ns, "--secs", &secs, "--interval", &interval, "--seed", &seed]);
    c
}

/// One run of one pair: both flows started together, both verified.
fn run_pair(lab: &mut Lab, bench: &Path, plan: &Plan, pair: &Pair, ports: [u16; 2], dir: &Path) -> Result<RunData> {
    let addrs = ports.map(|p| format!("{ADDR_B}:{p}"));
    let seeds = [plan.seed.wrapping_mul(2), plan.seed.wrapping_mul(2) + 1];
    // One start for all four processes, on the command line of each: far
    // enough ahead that the receivers listen and the senders are up by then.
    let start = SystemTime::now() + START_DELAY;
    let start_ns = start.duration_since(UNIX_EPOCH)?.as_nanos() as u64;
    let timing =
        |i: usize| [start_ns.to_string(), plan.secs.to_string(), plan.interval.to_string(), seeds[i].to_string()];
    let mut recvs = Vec::new();
    for (i, flow) in pair.0.iter().enumerate() {
        let c = flow_command(lab, bench, &lab.ns_b, "recv", flow, &addrs[i], timing(i));
        recvs.push(child::launch(c, dir, &format!("recv{i}"), format!("flow {} receiver ({})", i + 1, flow.label()))?);
    }
    for p in ports {
        lab.wait_listening(&lab.ns_b, p, START_DELAY / 2)?;
    }
    let relay_before = lab.stats()?;
    let drops_before = lab.host_drops();
    let mut sends = Vec::new();
    for (i, flow) in pair.0.iter().enumerate() {
        let c = flow_command(lab, bench, &lab.ns_a, "send", flow, &addrs[i], timing(i));
        sends.push(child::launch(c, dir, &format!("send{i}"), format!("flow {} sender ({})", i + 1, flow.label()))?);
    }
    // Everything ends by itself by the run's end (receivers: plus the
    // grace); the limits only catch a process that hangs.
    let until_end = start.duration_since(SystemTime::now()).unwrap_or_default() + Duration::from_secs_f64(plan.secs);
    let limit = until_end + GRACE + OVERTIME;
    let sent: Vec<Result<child::Finished>> = sends.into_iter().map(|s| s.finish(limit)).collect();
    let got: Vec<Result<child::Finished>> = recvs.into_iter().map(|r| r.finish(limit)).collect();
    let relay_after = lab.stats()?;
    let drops_after = lab.host_drops();
    let mut flows = Vec::new();
    for (i, (s, r)) in sent.into_iter().zip(got).enumerate() {
        let (s, r) = (s?, r?);
        let bins = parse_bins(&r.stdout).with_context(|| format!("flow {}'s receiver report", i + 1))?;
        let summary = r.stdout.lines().last().unwrap_or_default();
        let verified =
            json_u64(summary, "verified").with_context(|| format!("flow {}: no summary in {summary:?}", i + 1))?;
        let sender = s.stdout.lines().last().unwrap_or_default().trim().to_string();
        if json_u64(&sender, "written").is_none() {
            bail!("flow {}: the sender printed no summary ({sender:?})", i + 1);
        }
        flows.push(FlowResult {
            name: pair.0[i].label(),
            bins,
            verified,
            late_ms: json_f64(&sender, "late_ms").unwrap_or(0.0),
            sender,
            send: s.usage,
            recv: r.usage,
        });
    }
    let counter = |s: &netns::RelayStats, d: (u64, u64)| (s.a2b.forwarded, s.a2b.queue_drops, d.0);
    let (fwd0, q0, ring0) = counter(&relay_before, drops_before);
    let (fwd1, q1, ring1) = counter(&relay_after, drops_after);
    let link = LinkCounters {
        forwarded: fwd1.saturating_sub(fwd0),
        queue_drops: q1.saturating_sub(q0),
        ring_drops: ring1.saturating_sub(ring0),
    };
    Ok(RunData { flows, link })
}
