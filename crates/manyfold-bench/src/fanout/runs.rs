//! What the two group scenarios, `fanout` and `handshake`, share around
//! their runs: the report's frame (the plan, the runs, the load average
//! before and after), its publication (Markdown on stdout, JSON, charts,
//! then an error naming the failed runs), and the file a child process
//! writes once it is ready.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::loopback::report::json_str;
use crate::loopback::rows::load;

/// The runs of one invocation under one plan.
#[derive(Debug)]
pub struct Runs<P, R> {
    pub plan: P,
    pub runs: Vec<R>,
    pub load_before: String,
    pub load_after: String,
}

impl<P: Clone, R> Runs<P, R> {
    pub fn new(plan: &P) -> Self {
        Runs { plan: plan.clone(), runs: Vec::new(), load_before: load(), load_after: String::new() }
    }

    /// Notes the load average once the last run is over.
    pub fn finish(&mut self) {
        self.load_after = load();
    }

    /// The JSON document: the scenario's name, `fields` (JSON members
    /// describing the plan), the load averages and each run as `run` writes it.
    pub fn json_document(&self, scenario: &str, fields: &str, run: impl Fn(&R) -> String) -> String {
        let runs: Vec<String> = self.runs.iter().map(run).collect();
        format!(
            "{{\"scenario\":{},{fields},\"load_before\":{},\"load_after\":{},\"runs\":[\n{}\n]}}\n",
            json_str(scenario),
            json_str(&self.load_before),
            json_str(&self.load_after),
            runs.join(",\n")
        )
    }
}

/// What a scenario's report gives.
pub trait Figures {
    fn markdown(&self) -> String;
    fn json(&self) -> String;
    /// Draws the charts into `dir`; returns the files written.
    fn charts(&self, dir: &Path) -> Result<Vec<PathBuf>>;
    /// One line per failed run.
    fn failures(&self) -> Vec<String>;
}

/// Where a scenario's results go besides the Markdown on stdout.
#[derive(clap::Args, Debug, Clone)]
pub struct Outputs {
    /// Also write every measurement as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also draw PNG charts into this directory (created if missing).
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
}

/// Prints the Markdown (and the failed runs, left out of its figures),
/// writes the JSON and the charts if asked, and fails if any run did.
pub fn publish(report: &impl Figures, out: &Outputs) -> Result<()> {
    print!("{}", report.markdown());
    let failed = report.failures();
    if !failed.is_empty() {
        println!("\nFailed runs (left out of the figures): {}", failed.join("; "));
    }
    if let Some(path) = &out.json {
        crate::loopback::report::write_file(path, &report.json())?;
    }
    if let Some(dir) = &out.plot {
        crate::loopback::report::note_charts(&report.charts(dir)?);
    }
    if !failed.is_empty() {
        bail!("{} run(s) failed: {}", failed.len(), failed.join("; "));
    }
    Ok(())
}

/// Waits until `path` exists (a child writes it once ready, by rename).
pub fn wait_for_file(path: &Path, limit: Duration) -> Result<()> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if path.exists() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    bail!("{} did not appear within {limit:?}", path.display())
}

/// Writes `body` to `path` whole: a reader polling for `path` never sees
/// it half written.
pub fn write_ready(path: &Path, body: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, body).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}
