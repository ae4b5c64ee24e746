//! `manyfold trace FILE [--plot OUT.png]`: a qlog trace written with
//! `--qlog DIR` (spec §18), summarized, and drawn as three panels over
//! time: congestion window and bytes in flight, RTT, and retransmissions
//! and losses.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use manyfold::qlog::{Record, Trace};
use manyfold_plot::Panel;
use serde_json::Value;

#[derive(Args, Debug)]
pub struct TraceArgs {
    /// A trace file (client-<id>.sqlog or server-<id>.sqlog).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// Also draw the trace into this PNG file.
    #[arg(long, value_name = "OUT.png")]
    pub plot: Option<PathBuf>,
}

pub fn run(args: &TraceArgs) -> Result<()> {
    let trace =
        manyfold::qlog::read(&args.file).with_context(|| format!("cannot read trace {}", args.file.display()))?;
    if trace.events.is_empty() {
        bail!("{} holds a qlog header but no event", args.file.display());
    }
    let summary = trace.summary();
    stdout_text(&summary.to_string());
    if let Some(out) = &args.plot {
        if out.extension().is_none_or(|e| !e.eq_ignore_ascii_case("png")) {
            bail!("--plot writes a PNG image: give a file name ending in .png, not {}", out.display());
        }
        let title = format!("manyfold connection {} ({}) with {}", summary.local_id, summary.role, summary.remote);
        manyfold_plot::panels(out, &title, "time since the connection began, s", &panels(&trace))?;
        stdout_text(&format!("plot written to {}\n", out.display()));
    }
    Ok(())
}

/// Writes `text` to standard output. A reader that went away (`| head -1`)
/// is no failure: the work goes on (the plot is still drawn) and the
/// command ends quietly instead of panicking on the broken pipe.
fn stdout_text(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// The series drawn: x is seconds since the connection began.
fn panels(trace: &Trace) -> Vec<Panel> {
    let secs = |e: &Record| e.time / 1e3;
    let metrics = || trace.events.iter().filter(|e| e.name == "recovery:metrics_updated");
    let metric = |key: &'static str, scale: f64| -> Vec<(f64, f64)> {
        metrics().filter_map(|e| Some((secs(e), e.data.get(key)?.as_f64()? * scale))).collect()
    };
    // The smoothed RTT before the first sample is a guess (a third of the
    // initial RTO), not a measurement: left out.
    let srtt: Vec<(f64, f64)> = metrics()
        .filter(|e| e.data.get("rtt_samples").and_then(Value::as_u64).unwrap_or(0) > 0)
        .filter_map(|e| Some((secs(e), e.data.get("smoothed_rtt")?.as_f64()?)))
        .collect();
    // RTT samples: the metrics records whose sample count moved on.
    let mut last = 0;
    let mut samples = Vec::new();
    for e in metrics() {
        let n = e.data.get("rtt_samples").and_then(Value::as_u64).unwrap_or(0);
        if n > last {
            last = n;
            samples.push((secs(e), e.data.get("latest_rtt").and_then(Value::as_f64).unwrap_or(0.0)));
        }
    }
    let cumulative = |pick: &dyn Fn(&Record) -> bool| -> Vec<(f64, f64)> {
        let mut n = 0.0;
        trace
            .events
            .iter()
            .filter(|e| pick(e))
            .map(|e| {
                n += 1.0;
                (secs(e), n)
            })
            .collect()
    };
    let resent = |e: &Record| e.name == "transport:packet_sent" && e.data.get("trigger").is_some();
    let lost = |e: &Record| e.name == "recovery:packet_lost";
    vec![
        Panel {
            y_label: "KiB".into(),
            series: vec![
                ("congestion window".into(), metric("congestion_window", 1.0 / 1024.0)),
                ("bytes in flight".into(), metric("bytes_in_flight", 1.0 / 1024.0)),
            ],
        },
        Panel {
            y_label: "RTT, ms".into(),
            series: vec![("RTT sample".into(), samples), ("smoothed RTT".into(), srtt)],
        },
        Panel {
            y_label: "packets (cumulative)".into(),
            series: vec![("retransmissions".into(), cumulative(&resent)), ("declared lost".into(), cumulative(&lost))],
        },
    ]
}
