//! `manyfold trace FILE [--plot OUT.png]`: a qlog trace written with
//! `--qlog DIR` (spec §18), summarized, and drawn ([`plot`]: window and
//! bytes in flight with loss marks, throughput, RTT, and the events).

mod plot;

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;

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
        plot::draw(&trace, out, &title)?;
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
