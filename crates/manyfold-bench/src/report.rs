//! What every scenario's report shares (shared/BENCH.md: every table
//! names its command line, date, `nproc`, kernel, sizes and seed): the
//! header line and the machine it names, the `--json FILE` and
//! `--plot DIR` options ([`Outputs`], flattened into a scenario's options)
//! and their writing, JSON string literals, and the frame of a report
//! whose runs are a list ([`Runs`], [`Figures`], [`publish`]). The
//! statistics are [`crate::stats`].

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::child::Usage;

/// The line under every table's title: command, date, machine, load.
pub fn header(sizes: &str, seed: u64, load_before: &str, load_after: &str) -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!(
        "`manyfold-bench {}` · {} · {sizes} · seed {seed} · load average before {load_before}, after {load_after}",
        args.join(" "),
        machine()
    )
}

/// When and where a table was measured (BENCH.md): `DATE · nproc N ·
/// kernel RELEASE`.
pub fn machine() -> String {
    format!(
        "{} · nproc {} · kernel {}",
        crate::sh("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        crate::sh("uname", &["-r"]),
    )
}

/// A process's peak RSS in MiB; NaN (no figure, crate::stats) for a
/// process that did not finish.
pub fn mib(u: &Option<Usage>) -> f64 {
    u.map_or(f64::NAN, |u| u.max_rss_kib as f64 / 1024.0)
}

/// A process's CPU seconds (user + sys); NaN for one that did not finish.
pub fn cpu(u: &Option<Usage>) -> f64 {
    u.map_or(f64::NAN, |u| u.cpu.as_secs_f64())
}

/// A string as a JSON string literal (no serde in the lab: labels and
/// error messages are the only strings).
pub fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON number, or null for NaN and infinities (JSON has neither).
pub fn json_num(x: f64) -> String {
    if x.is_finite() {
        format!("{x}")
    } else {
        "null".into()
    }
}

/// [`json_num`] with `digits` decimals.
pub fn json_fixed(x: f64, digits: usize) -> String {
    if x.is_finite() {
        format!("{x:.digits$}")
    } else {
        "null".into()
    }
}

/// A child's cost as a JSON object (wall and CPU seconds, peak RSS), or
/// null for a child that did not finish.
pub fn json_usage(u: &Option<Usage>) -> String {
    match u {
        Some(u) => format!(
            "{{\"wall_s\":{:.4},\"cpu_s\":{:.4},\"peak_rss_mib\":{:.1}}}",
            u.wall.as_secs_f64(),
            u.cpu.as_secs_f64(),
            u.max_rss_kib as f64 / 1024.0
        ),
        None => "null".into(),
    }
}

/// Writes `body` to `path`, creating its directory if needed.
pub fn write_file(path: &Path, body: &str) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("creating {}: {e}", dir.display()))?;
    }
    std::fs::write(path, body).map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))
}

/// Tells which chart files were written (on stderr, beside the progress).
pub fn note_charts(files: &[PathBuf]) {
    for f in files {
        eprintln!("wrote {}", f.display());
    }
}

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

/// `uptime`'s load averages, to note the noise beside each table.
pub fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .context("reading /proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
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

impl Outputs {
    /// Writes the JSON that `body` makes to `--json`'s file, if asked.
    pub fn write_json(&self, body: impl FnOnce() -> String) -> Result<()> {
        self.json.as_deref().map_or(Ok(()), |path| write_file(path, &body()))
    }

    /// Draws `charts` into `--plot`'s directory, if asked, and tells which
    /// files were written.
    pub fn draw(&self, charts: impl FnOnce(&Path) -> Result<Vec<PathBuf>>) -> Result<()> {
        if let Some(dir) = &self.plot {
            note_charts(&charts(dir)?);
        }
        Ok(())
    }
}

/// Prints the Markdown (and the failed runs, left out of its figures),
/// writes the JSON and the charts if asked, and fails if any run did.
pub fn publish(report: &impl Figures, out: &Outputs) -> Result<()> {
    print!("{}", report.markdown());
    let failed = report.failures();
    if !failed.is_empty() {
        println!("\nFailed runs (left out of the figures): {}", failed.join("; "));
    }
    out.write_json(|| report.json())?;
    out.draw(|dir| report.charts(dir))?;
    if !failed.is_empty() {
        bail!("{} run(s) failed: {}", failed.len(), failed.join("; "));
    }
    Ok(())
}
