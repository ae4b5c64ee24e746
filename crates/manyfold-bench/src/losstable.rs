//! `manyfold-bench loss-table`: paper 04's experiment (§4, Figs. 21–22;
//! issue 3, lab item 4). The paper moved a 100 MB file with RUSP, a fixed
//! sliding window of 4 to 64 packets and no congestion control, while
//! librusp dropped 0 to 30% of the segments (`RUSP_ATTR_DROP`, §2.2). Here
//! manyfold does the same over 127.0.0.1, memory to memory, through the
//! loopback lab's processes ([`crate::loopback::rows`]: spawn, CPU and peak
//! RSS from `wait4`, BLAKE3 at the receiver), and the table prints its
//! goodput beside the paper's figures.
//!
//! The window: the receiver never advertises more than
//! `ConnectionConfig::recv_buffer` (spec §7.1; auto-tuning, §7.4, only
//! grows the advertised window up to it), and the sender counts everything
//! above the cumulative ack against that window, so `recv_buffer = N ×
//! payload` keeps at most N full packets unacknowledged, where payload is
//! `max_datagram` minus the 24-byte header. One more row runs the library's
//! default (auto-tuned) window for context.
//!
//! The loss: each side's driver drops that share of the datagrams it sends
//! (`FaultConfig::send_loss`, the fault injection behind `manyfold send
//! --loss`), so every datagram, data or ack, handshake or close, is
//! dropped once with that probability in each direction; the injectors are
//! seeded, so a seed gives the same drops.
//!
//! A transfer that times out or fails (a connection abandoned after its
//! retransmission limit, say) is reported as such in its cell and the run
//! goes on; a receiver that got wrong bytes stops the run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args as ClapArgs;
use manyfold_proto::{CongestionAlgorithm, ConnectionConfig};

use crate::loopback::data::{Pattern, MISMATCH};
use crate::loopback::report::json_fields;
use crate::loopback::rows::{self, Failed, MfRow, Row, TimedOut};
use crate::loopback::{human, parse_size, Sample};
use crate::report::{header, json_str, load, Outputs};
use crate::stats::{med_range, median};

/// Paper 04, Fig. 22 ("RUSP Speed Test (tabular)"): the loss percentages
/// of its columns, and per window size in packets the rate at each one.
/// The paper does not state the unit.
const PAPER_LOSS: [f64; 5] = [0.0, 5.0, 10.0, 20.0, 30.0];
const PAPER: [(usize, [f64; 5]); 5] = [
    (4, [7628.0, 7024.0, 6744.0, 6372.0, 3403.0]),
    (8, [10126.0, 8307.0, 5539.0, 4673.0, 3819.0]),
    (16, [14704.0, 9187.0, 4974.0, 4666.0, 4379.0]),
    (32, [24604.0, 12906.0, 11785.0, 9191.0, 8426.0]),
    (64, [27567.0, 14219.0, 12837.0, 10534.0, 9000.0]),
];

/// The paper's figure for a window (packets) and a loss (percent), if it has one.
fn paper(window: usize, loss: f64) -> Option<f64> {
    let col = PAPER_LOSS.iter().position(|&l| (l - loss).abs() < 1e-9)?;
    PAPER.iter().find(|(w, _)| *w == window).map(|(_, v)| v[col])
}

#[derive(ClapArgs, Debug)]
#[command(mut_arg("json", |a| a.help("Also write every transfer as JSON to this file")))]
#[command(mut_arg("plot", |a| a.help(
    "Also draw PNG charts into this directory (created if missing): loss-table-goodput.png (manyfold) and loss-table-paper.png (Fig. 22)"
)))]
pub struct Args {
    /// Bytes per transfer, e.g. 100MB (paper 04's file), 2MB, 1GiB.
    #[arg(long, default_value = "100MB")]
    size: String,
    /// Sliding windows in packets, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [4usize, 8, 16, 32, 64])]
    windows: Vec<usize>,
    /// Loss in percent per datagram and direction, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = PAPER_LOSS)]
    loss: Vec<f64>,
    /// Repetitions of each cell (medians are reported).
    #[arg(long, default_value_t = 1)]
    reps: usize,
    /// Per-transfer time limit in seconds; a transfer still running then is
    /// reported as timed out and the run goes on.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Seed of the data stream and of the sender's fault injector (the
    /// receiver's is seed + 1).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Congestion controller on both sides (default: the library's).
    #[arg(long)]
    cc: Option<CongestionAlgorithm>,
    /// CI's short run: 2 MB, windows 4 and 64, loss 0 and 10%.
    #[arg(long, conflicts_with_all = ["size", "windows", "loss"])]
    quick: bool,
    #[command(flatten)]
    out: Outputs,
}

/// What became of one transfer.
#[derive(Debug, Clone)]
enum Outcome {
    Done(Sample),
    TimedOut,
    /// The transfer failed without wrong bytes (the children's words).
    Failed(String),
}

/// One row of the table: a fixed window in packets, or the default.
#[derive(Debug, Clone, Copy)]
struct Window {
    packets: Option<usize>,
}

impl Window {
    /// The table's first column.
    fn label(&self) -> String {
        match self.packets {
            Some(n) => format!("{n} packets"),
            None => "default (auto-tuned)".to_string(),
        }
    }

    /// The window named on its own (progress lines, chart legends).
    fn name(&self) -> String {
        match self.packets {
            Some(n) => format!("window {n} packets"),
            None => "default window (auto-tuned)".to_string(),
        }
    }
}

/// The settings a run resolved from its arguments.
#[derive(Debug)]
struct Plan {
    bytes: u64,
    windows: Vec<Window>,
    loss: Vec<f64>,
    cc: CongestionAlgorithm,
    payload: usize,
    limit: Duration,
}

impl Plan {
    fn new(args: &Args) -> Result<Plan> {
        let (size, mut windows, loss) = if args.quick {
            ("2MB", vec![4, 64], vec![0.0, 10.0])
        } else {
            (args.size.as_str(), args.windows.clone(), args.loss.clone())
        };
        if windows.contains(&0) {
            bail!("--windows: a window holds at least one packet");
        }
        if let Some(l) = loss.iter().find(|l| !(0.0..100.0).contains(*l)) {
            bail!("--loss: {l} is not a percentage in [0, 100)");
        }
        if args.reps == 0 {
            bail!("--reps must be at least 1");
        }
        windows.dedup();
        let defaults = ConnectionConfig::default();
        // spec §3.4: a full data packet carries max_datagram minus the
        // header (a one-way transfer's data packets carry no SACK section).
        let payload = usize::from(defaults.max_datagram) - manyfold_proto::wire::HEADER_LEN;
        let mut rows: Vec<Window> = windows.into_iter().map(|n| Window { packets: Some(n) }).collect();
        rows.push(Window { packets: None });
        Ok(Plan {
            bytes: parse_size(size)?,
            windows: rows,
            loss,
            cc: args.cc.unwrap_or(defaults.congestion),
            payload,
            limit: Duration::from_secs(args.timeout),
        })
    }

    fn row(&self, w: Window, loss: f64, seed: u64) -> Row {
        Row::Manyfold(MfRow {
            cc: self.cc,
            recv_buffer: w.packets.map(|n| n * self.payload),
            loss,
            fault_seed: seed,
            // The handshake crosses the same loss; at 30% each way the
            // library's 10 s can run out before the transfer starts. The
            // paper's transfers had no such limit, so it is the transfer's.
            connect_timeout: Some(self.limit),
            ..MfRow::default()
        })
    }
}

pub fn run(args: &Args) -> Result<()> {
    let plan = Plan::new(args)?;
    let work = tempfile::Builder::new().prefix("manyfold-bench-loss-").tempdir()?;
    let load_before = load();
    let hash = Pattern::new(args.seed, plan.bytes).hash();
    // cells[loss][window] = one outcome per repetition
    let mut cells = vec![vec![Vec::new(); plan.windows.len()]; plan.loss.len()];
    let mut log = Vec::new();
    for rep in 0..args.reps {
        for (li, &loss) in plan.loss.iter().enumerate() {
            for (wi, &w) in plan.windows.iter().enumerate() {
                let row = plan.row(w, loss, args.seed);
                let outcome = match rows::run(&row, work.path(), plan.bytes, args.seed, &hash, plan.limit) {
                    Ok(s) => Outcome::Done(s),
                    Err(e) if e.downcast_ref::<TimedOut>().is_some() => Outcome::TimedOut,
                    Err(e) => {
                        if format!("{e:#}").contains(MISMATCH) {
                            return Err(e.context("the receiver got wrong bytes: no figure from this run"));
                        }
                        eprintln!("{e:#}");
                        Outcome::Failed(match e.downcast_ref::<Failed>() {
                            Some(f) => f.last_words(),
                            None => format!("{e:#}"),
                        })
                    }
                };
                eprintln!("rep {} {}, loss {loss}%: {}", rep + 1, w.name(), progress(&outcome, plan.limit));
                log.push(json_cell(&plan, w, loss, rep, &outcome));
                cells[li][wi].push(outcome);
            }
        }
    }
    print_table(args, &plan, &cells, &load_before);
    args.out.write_json(|| {
        format!(
            "{{\"scenario\":\"loss-table\",\"bytes\":{},\"seed\":{},\"cc\":{},\"payload_bytes_per_packet\":{},\"timeout_s\":{},\
             \"loss\":\"each side's driver drops loss_percent of the datagrams it sends (FaultConfig::send_loss); fault seeds: sender seed, receiver seed + 1\",\
             \"paper\":\"paper 04 Fig. 22, unit not stated\",\"cells\":[\n{}\n]}}\n",
            plan.bytes,
            args.seed,
            json_str(plan.cc.name()),
            plan.payload,
            plan.limit.as_secs(),
            log.join(",\n")
        )
    })?;
    args.out.draw(|dir| charts(dir, &plan, &cells))
}

fn progress(o: &Outcome, limit: Duration) -> String {
    match o {
        Outcome::Done(s) => format!("{:.2} s, {:.1} MB/s", s.wall, s.goodput()),
        Outcome::TimedOut => format!("timed out after {} s", limit.as_secs()),
        Outcome::Failed(e) => format!("failed: {e}"),
    }
}

fn json_cell(plan: &Plan, w: Window, loss: f64, rep: usize, o: &Outcome) -> String {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "null".into());
    let head = format!(
        "\"window_packets\":{},\"recv_buffer\":{},\"loss_percent\":{loss},\"rep\":{rep},\"paper\":{}",
        opt(w.packets.map(|n| n.to_string())),
        opt(w.packets.map(|n| (n * plan.payload).to_string())),
        opt(w.packets.and_then(|n| paper(n, loss)).map(|v| v.to_string())),
    );
    match o {
        Outcome::Done(s) => format!("{{{head},\"status\":\"ok\",{}}}", json_fields(s)),
        Outcome::TimedOut => format!("{{{head},\"status\":\"timeout\"}}"),
        Outcome::Failed(e) => format!("{{{head},\"status\":\"failed\",\"error\":{}}}", json_str(e)),
    }
}

/// The finished transfers of a cell, and a note on the others.
fn split(outcomes: &[Outcome]) -> (Vec<Sample>, String) {
    let done: Vec<Sample> =
        outcomes.iter().filter_map(|o| if let Outcome::Done(s) = o { Some(*s) } else { None }).collect();
    let timeouts = outcomes.iter().filter(|o| matches!(o, Outcome::TimedOut)).count();
    let failed = outcomes.iter().filter(|o| matches!(o, Outcome::Failed(_))).count();
    let mut note = Vec::new();
    if timeouts > 0 {
        note.push(format!("{timeouts} timed out"));
    }
    if failed > 0 {
        note.push(format!("{failed} failed"));
    }
    (done, note.join(", "))
}

/// A goodput cell: the median (and range) of the finished transfers, with
/// the others counted, or what became of them when none finished.
fn goodput_cell(outcomes: &[Outcome], limit: Duration) -> String {
    let (done, note) = split(outcomes);
    if done.is_empty() {
        return match outcomes.first() {
            Some(Outcome::Failed(e)) if outcomes.len() == 1 => format!("failed: {}", short(e)),
            Some(Outcome::TimedOut) if outcomes.len() == 1 => format!("timed out (> {} s)", limit.as_secs()),
            _ => note,
        };
    }
    let rates: Vec<f64> = done.iter().map(Sample::goodput).collect();
    let digits = if median(&rates) < 10.0 { 2 } else { 1 };
    let cell = med_range(&rates, digits);
    if note.is_empty() {
        cell
    } else {
        format!("{cell} (+{note})")
    }
}

/// An error message fit for a Markdown cell: no pipes, at most 100 characters.
fn short(e: &str) -> String {
    let e = e.replace('|', "/");
    if e.chars().count() > 100 {
        format!("{}…", e.chars().take(100).collect::<String>())
    } else {
        e
    }
}

fn print_table(args: &Args, plan: &Plan, cells: &[Vec<Vec<Outcome>>], load_before: &str) {
    println!(
        "### loss-table: paper 04's experiment (§4, Fig. 22), {} over 127.0.0.1, memory to memory",
        human(plan.bytes)
    );
    println!();
    let sizes = format!("{} ({} bytes) per transfer, {} reps", human(plan.bytes), plan.bytes, args.reps);
    println!("{}", header(&sizes, args.seed, load_before, &load()));
    println!();
    let mut head = "| window | receive buffer |".to_string();
    let mut rule = "|---|---|".to_string();
    for l in &plan.loss {
        head += &format!(" {l}%: manyfold MB/s | {l}%: paper |");
        rule += "---|---|";
    }
    println!("{head}");
    println!("{rule}");
    let default_buffer = ConnectionConfig::default().recv_buffer;
    for (wi, w) in plan.windows.iter().enumerate() {
        let buffer = match w.packets {
            Some(n) => format!("{} B", n * plan.payload),
            None => format!("up to {}", human(default_buffer as u64)),
        };
        let mut line = format!("| {} | {buffer} |", w.label());
        for (li, &l) in plan.loss.iter().enumerate() {
            let p = w.packets.and_then(|n| paper(n, l)).map_or("–".to_string(), |v| format!("{v:.0}"));
            line += &format!(" {} | {p} |", goodput_cell(&cells[li][wi], plan.limit));
        }
        println!("{line}");
    }
    println!();
    println!("Per transfer (medians over the finished repetitions; counters are the sender's, `ConnStats`):");
    println!();
    println!(
        "| window | loss % | time s | retransmissions | RTO expiries | sender CPU s/GB | receiver CPU s/GB | sender peak RSS MiB | receiver peak RSS MiB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let gb = plan.bytes as f64 / 1e9;
    for (wi, w) in plan.windows.iter().enumerate() {
        for (li, &l) in plan.loss.iter().enumerate() {
            let (done, note) = split(&cells[li][wi]);
            if done.is_empty() {
                println!("| {} | {l} | {note} | | | | | | |", w.label());
                continue;
            }
            let col = |f: &dyn Fn(&Sample) -> f64| med_range(&done.iter().map(f).collect::<Vec<f64>>(), 2);
            let count = |f: &dyn Fn(&rows::MfStats) -> u64| {
                median(&done.iter().filter_map(|s| s.mf.as_ref().map(f)).map(|v| v as f64).collect::<Vec<f64>>())
            };
            println!(
                "| {} | {l} | {}{} | {:.0} | {:.0} | {} | {} | {} | {} |",
                w.label(),
                col(&|s| s.wall),
                if note.is_empty() { String::new() } else { format!(" (+{note})") },
                count(&|m| m.retransmissions),
                count(&|m| m.rto_expiries),
                col(&|s| s.send_cpu / gb),
                col(&|s| s.recv_cpu / gb),
                col(&|s| s.send_rss_mib),
                col(&|s| s.recv_rss_mib),
            );
        }
    }
    println!();
    println!(
        "Window: `ConnectionConfig::recv_buffer` = packets × {} B on both sides (max_datagram {} minus the 24-byte header): the receiver never advertises more, \
         so at most that many full packets are unacknowledged; the default row runs the library's auto-tuned window (spec §7.4). \
         Congestion control: {} on both sides, which can hold the sender below the window under loss (RUSP had none).",
        plan.payload,
        ConnectionConfig::default().max_datagram,
        plan.cc.name()
    );
    println!(
        "Loss: each side's driver drops the given share of the datagrams it sends (`FaultConfig::send_loss`, the fault injection behind `manyfold send --loss`), \
         so every datagram (data and acks, handshake and close) is dropped once with that probability in each direction; fault seeds {} (sender) and {} (receiver). \
         Connect timeout: the transfer's limit ({} s), since the handshake crosses the same loss.",
        args.seed,
        args.seed.wrapping_add(1),
        plan.limit.as_secs()
    );
    println!(
        "Goodput: MB/s (10^6 bytes per second) from the sender's start to its exit after the receiver's BLAKE3-checked \"ok\"; cells alternate windows within each loss and repetition. \
         Paper: Fig. 22 of paper 04 as printed; the paper does not state its unit (a 100 MB file over a WLAN between an Intel i5 and an Atom N280). \
         Compare how each column falls with loss and rises with the window, not the values."
    );
}

/// `--plot`: manyfold's median goodput against loss, one line per window
/// (a missing point is a cell with no finished transfer), and the paper's
/// Fig. 22 the same way for its windows.
fn charts(dir: &Path, plan: &Plan, cells: &[Vec<Vec<Outcome>>]) -> Result<Vec<PathBuf>> {
    let series: Vec<(String, Vec<(f64, f64)>)> = plan
        .windows
        .iter()
        .enumerate()
        .map(|(wi, w)| {
            let pts = plan
                .loss
                .iter()
                .enumerate()
                .map(|(li, &l)| {
                    let (done, _) = split(&cells[li][wi]);
                    (l, median(&done.iter().map(Sample::goodput).collect::<Vec<f64>>()))
                })
                .collect();
            (w.name(), pts)
        })
        .collect();
    let ours = dir.join("loss-table-goodput.png");
    manyfold_plot::lines(
        &ours,
        &format!("manyfold, {} over 127.0.0.1: goodput against loss ({})", human(plan.bytes), plan.cc.name()),
        "loss, % of datagrams each direction",
        "goodput, MB/s (10^6 bytes)",
        &series,
    )?;
    let theirs = dir.join("loss-table-paper.png");
    let paper_series: Vec<(String, Vec<(f64, f64)>)> = PAPER
        .iter()
        .map(|(w, v)| (format!("window {w} packets"), PAPER_LOSS.iter().copied().zip(v.iter().copied()).collect()))
        .collect();
    manyfold_plot::lines(
        &theirs,
        "paper 04, Fig. 22: RUSP, 100 MB over a WLAN",
        "segment loss, %",
        "speed (the paper's figure; unit not stated)",
        &paper_series,
    )?;
    Ok(vec![ours, theirs])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_figures_are_found_by_window_and_loss() {
        assert_eq!(paper(4, 0.0), Some(7628.0));
        assert_eq!(paper(64, 30.0), Some(9000.0));
        assert_eq!(paper(16, 10.0), Some(4974.0));
        assert_eq!(paper(12, 10.0), None);
        assert_eq!(paper(4, 15.0), None);
    }

    #[test]
    fn a_cell_without_finished_transfers_says_why() {
        let limit = Duration::from_secs(60);
        assert_eq!(goodput_cell(&[Outcome::TimedOut], limit), "timed out (> 60 s)");
        let failed = Outcome::Failed("sender: connecting: connection abandoned | gave up".into());
        assert_eq!(
            goodput_cell(std::slice::from_ref(&failed), limit),
            "failed: sender: connecting: connection abandoned / gave up"
        );
        assert_eq!(goodput_cell(&[Outcome::TimedOut, failed], limit), "1 timed out, 1 failed");
    }

    #[test]
    fn a_cell_counts_the_transfers_that_did_not_finish() {
        let s = Sample {
            wall: 2.0,
            send_cpu: 0.0,
            recv_cpu: 0.0,
            send_rss_mib: 0.0,
            recv_rss_mib: 0.0,
            delivered: 100_000_000,
            mf: None,
        };
        let limit = Duration::from_secs(60);
        assert_eq!(goodput_cell(&[Outcome::Done(s)], limit), "50.0");
        assert_eq!(goodput_cell(&[Outcome::Done(s), Outcome::TimedOut], limit), "50.0 (+1 timed out)");
    }

    #[test]
    fn quick_plan_is_small_and_keeps_the_default_row() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let cli = Cli::parse_from(["x", "--quick"]);
        let plan = Plan::new(&cli.args).unwrap();
        assert_eq!(plan.bytes, 2_000_000);
        assert_eq!(plan.loss, vec![0.0, 10.0]);
        let windows: Vec<Option<usize>> = plan.windows.iter().map(|w| w.packets).collect();
        assert_eq!(windows, vec![Some(4), Some(64), None]);
        assert!(Cli::try_parse_from(["x", "--quick", "--size", "1MB"]).is_err());
        let full = Plan::new(&Cli::parse_from(["x"]).args).unwrap();
        assert_eq!(full.bytes, 100_000_000);
        assert_eq!(full.windows.len(), 6);
        assert_eq!(full.payload, usize::from(ConnectionConfig::default().max_datagram) - 24);
    }
}
