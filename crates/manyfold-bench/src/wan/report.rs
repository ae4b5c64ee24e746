//! The `wan` scenario's output: the self-check table and one table of the
//! grid, in Markdown with the command, date, machine, sizes and seed
//! (BENCH.md), the same as JSON, and with `--plot` one chart per rate and
//! RTT (goodput as a fraction of the link against loss, a line per row).

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::grid::Cell;
use super::netns::RelayStats;
use super::{rate_label, Options};
use crate::stats;

/// One hash-verified transfer.
#[derive(Debug, Clone, Copy)]
pub struct Transfer {
    /// Sender start to sender exit (connect, transfer, receiver's confirmation).
    pub wall: f64,
    pub send_cpu: f64,
    pub recv_cpu: f64,
    pub send_rss_mib: f64,
    pub recv_rss_mib: f64,
    /// Mean IP packet size sender → receiver across the link during the
    /// transfer (the datagram size a path MTU search settled on shows here).
    pub mean_packet: Option<f64>,
}

#[derive(Debug)]
pub struct RowResult {
    pub name: String,
    pub transfers: Vec<Transfer>,
    /// Why the row stopped in this cell (timeout, failure).
    pub note: Option<String>,
}

#[derive(Debug)]
pub struct CellResult {
    pub cell: Cell,
    pub bytes: u64,
    pub rows: Vec<RowResult>,
    pub relay: RelayStats,
}

#[derive(Debug)]
pub struct CheckResult {
    pub rate_bps: u64,
    pub secs: f64,
    pub offered_bps: f64,
    pub delivered_bps: f64,
    pub sent: u64,
    pub lost: u64,
    pub relay: RelayStats,
    /// Dropped by the sender side's TUN ring (the relay fell behind).
    pub ring_drops: u64,
    /// Dropped by the receiver's socket buffer (the receiver fell behind).
    pub rcvbuf_drops: u64,
    /// The relay's CPU seconds over the check (both directions).
    pub relay_cpu: f64,
}

#[derive(Debug)]
pub struct Report {
    command: String,
    opts: Options,
    reps: usize,
    pub checks: Vec<CheckResult>,
    pub cells: Vec<CellResult>,
    /// How rows were configured, and rows skipped here and why.
    pub notes: Vec<String>,
}

impl Report {
    pub fn new(opts: &Options, reps: usize) -> Self {
        let args: Vec<String> = std::env::args().skip(1).collect();
        Self {
            command: format!("manyfold-bench {}", args.join(" ")),
            opts: opts.clone(),
            reps,
            checks: vec![],
            cells: vec![],
            notes: vec![],
        }
    }

    fn goodputs(bytes: u64, r: &RowResult) -> Vec<f64> {
        r.transfers.iter().map(|t| bytes as f64 * 8.0 / t.wall / 1e6).collect()
    }

    pub fn print(&self) {
        let o = &self.opts;
        println!("### wan: bulk transfers over an emulated link");
        println!();
        println!(
            "`{}` · {} · link MTU {} B · seed {} · queue {} BDP (≥ 100 packets) · jitter {} ms · reordering {}% · up to {} reps per row",
            self.command,
            crate::report::machine(),
            o.mtu,
            o.seed,
            o.queue_bdp,
            o.jitter,
            o.reorder,
            self.reps,
        );
        println!();
        self.print_checks();
        if self.cells.is_empty() {
            self.print_notes();
            return;
        }
        println!("| link | RTT ms | loss % | file MB | row | goodput Mbit/s (median, min–max) | of link | reps | sender CPU s/GB | receiver CPU s/GB | peak RSS MiB send / recv | mean IP packet a→b B | ratio to TCP bbr | relay a→b lost / queue drops (cell) |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for c in &self.cells {
            let mut first = true;
            let bbr =
                c.rows.iter().find(|r| r.name == "kernel TCP bbr").map(|r| stats::median(&Self::goodputs(c.bytes, r)));
            for r in &c.rows {
                let relay = if std::mem::take(&mut first) {
                    format!("{} / {}", c.relay.a2b.lost, c.relay.a2b.queue_drops)
                } else {
                    String::new()
                };
                println!("{}", self.row_line(c, r, bbr, &relay));
            }
        }
        println!();
        println!(
            "Goodput = file bytes × 8 / time from the sender's start to its exit (connect, transfer, the receiver's hash confirmation), \
             so the RTT's handshakes count; the link rate counts whole IP packets, so payload goodput tops out near 96% of it. \
             Every transfer crosses the userspace relay between two namespaces, is written to disk and checked with BLAKE3. \
             Mean IP packet a→b: the relay's bytes ÷ packets forwarded sender → receiver during the transfer (median over reps), \
             where the datagram size a path MTU search settled on shows. \
             Rows alternate A B C A B C within a cell; a row that fails or times out in a cell is not repeated there."
        );
        self.print_notes();
        for c in &self.cells {
            for r in &c.rows {
                if let Some(n) = &r.note {
                    println!(
                        "- {} · {} ms · {}% · {}: {}",
                        rate_label(c.cell.rate_bps),
                        c.cell.rtt_ms,
                        c.cell.loss_pct,
                        r.name,
                        n
                    );
                }
            }
        }
    }

    /// One row's line of the main table; `bbr` is the cell's TCP bbr
    /// median goodput, `relay` the cell's relay column (its first line only).
    fn row_line(&self, c: &CellResult, r: &RowResult, bbr: Option<f64>, relay: &str) -> String {
        let g = Self::goodputs(c.bytes, r);
        let gb = c.bytes as f64 / 1e9;
        let rss = if r.transfers.is_empty() {
            "–".to_string()
        } else {
            format!(
                "{:.0} / {:.0}",
                stats::median(&r.transfers.iter().map(|t| t.send_rss_mib).collect::<Vec<_>>()),
                stats::median(&r.transfers.iter().map(|t| t.recv_rss_mib).collect::<Vec<_>>())
            )
        };
        let (gp, frac, ratio, cpu_s, cpu_r) = match stats::min_max(&g) {
            Some((min, max)) => {
                let m = stats::median(&g);
                (
                    format!("{m:.1} ({min:.1}–{max:.1})"),
                    format!("{:.0}%", m * 1e6 / c.cell.rate_bps as f64 * 100.0),
                    bbr.filter(|b| !b.is_nan()).map_or("–".into(), |b| format!("{:.2}", m / b)),
                    format!("{:.2}", stats::median(&r.transfers.iter().map(|t| t.send_cpu / gb).collect::<Vec<_>>())),
                    format!("{:.2}", stats::median(&r.transfers.iter().map(|t| t.recv_cpu / gb).collect::<Vec<_>>())),
                )
            }
            None => ("–".into(), "–".into(), "–".into(), "–".into(), "–".into()),
        };
        let reps = match &r.note {
            Some(n) if n.contains("did not finish") => {
                format!("{} + 1 timeout (> {} s)", r.transfers.len(), self.opts.timeout)
            }
            Some(_) => format!("{} + 1 failed", r.transfers.len()),
            None => r.transfers.len().to_string(),
        };
        let sizes: Vec<f64> = r.transfers.iter().filter_map(|t| t.mean_packet).collect();
        let packet = if sizes.is_empty() { "–".to_string() } else { format!("{:.0}", stats::median(&sizes)) };
        format!(
            "| {} | {} | {} | {:.0} | {} | {gp} | {frac} | {reps} | {cpu_s} | {cpu_r} | {rss} | {packet} | {ratio} | {relay} |",
            rate_label(c.cell.rate_bps),
            c.cell.rtt_ms,
            c.cell.loss_pct,
            c.bytes as f64 / 1e6,
            r.name,
        )
    }
    /// The emulator's self-check table, if it ran.
    fn print_checks(&self) {
        if self.checks.is_empty() {
            return;
        }
        println!("Emulator self-check (paced UDP, 1,500-byte IP packets offered at the link rate, RTT 1 ms, loss 0):");
        println!();
        println!("| link | offered Mbit/s | delivered Mbit/s | fraction of link | datagrams sent | lost | of which: relay queue / TUN ring / receiver buffer | relay CPU, % of a core | relay stalls > 1 ms (longest) |");
        println!("|---|---|---|---|---|---|---|---|---|");
        for c in &self.checks {
            println!(
                "| {} | {:.1} | {:.1} | {:.1}% | {} | {} | {} / {} / {} | {:.0}% | {} ({:.1} ms) |",
                rate_label(c.rate_bps),
                c.offered_bps / 1e6,
                c.delivered_bps / 1e6,
                c.delivered_bps / c.rate_bps as f64 * 100.0,
                c.sent,
                c.lost,
                c.relay.a2b.queue_drops,
                c.ring_drops,
                c.rcvbuf_drops,
                c.relay_cpu / c.secs * 100.0,
                c.relay.a2b.stalls,
                c.relay.a2b.max_stall_us as f64 / 1e3,
            );
        }
        println!();
    }

    fn print_notes(&self) {
        for n in &self.notes {
            println!("- {n}");
        }
    }

    /// The median goodput of `r` in `c` as a fraction of the link rate.
    fn fraction(c: &CellResult, r: &RowResult) -> Option<f64> {
        Some(stats::median(&Self::goodputs(c.bytes, r)))
            .filter(|m| !m.is_nan())
            .map(|m| m * 1e6 / c.cell.rate_bps as f64)
    }

    /// `--plot`: one PNG per rate and RTT in `dir`, goodput (fraction of
    /// the link rate) against loss, a line per row; a row that timed out or
    /// failed at a loss has no point there. Returns the files written.
    pub fn charts(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        let mut groups: Vec<(u64, f64)> = Vec::new();
        for c in &self.cells {
            if !groups.contains(&(c.cell.rate_bps, c.cell.rtt_ms)) {
                groups.push((c.cell.rate_bps, c.cell.rtt_ms));
            }
        }
        let mut files = Vec::new();
        for (rate, rtt) in groups {
            let cells: Vec<&CellResult> =
                self.cells.iter().filter(|c| c.cell.rate_bps == rate && c.cell.rtt_ms == rtt).collect();
            let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
            for c in &cells {
                for r in &c.rows {
                    let point = (c.cell.loss_pct, Self::fraction(c, r).unwrap_or(f64::NAN));
                    match series.iter_mut().find(|(n, _)| *n == r.name) {
                        Some((_, pts)) => pts.push(point),
                        None => series.push((r.name.clone(), vec![point])),
                    }
                }
            }
            if series.iter().all(|(_, pts)| pts.iter().all(|p| !p.1.is_finite())) {
                eprintln!("wan: no chart for {} at {rtt} ms: no row finished there", rate_label(rate));
                continue;
            }
            let path = dir.join(chart_name(rate, rtt));
            let title = format!("wan: goodput against loss, {} link, RTT {rtt} ms", rate_label(rate));
            manyfold_plot::lines(&path, &title, "random loss, % each direction", "goodput / link rate", &series)?;
            files.push(path);
        }
        Ok(files)
    }

    pub fn json(&self) -> String {
        let mut cells = Vec::new();
        for c in &self.cells {
            let rows: Vec<String> = c
                .rows
                .iter()
                .map(|r| {
                    let g: Vec<String> = Self::goodputs(c.bytes, r).iter().map(|x| format!("{x:.3}")).collect();
                    format!(
                        "{{\"row\":{:?},\"goodput_mbps\":[{}],\"note\":{}}}",
                        r.name,
                        g.join(","),
                        r.note.as_ref().map_or("null".into(), |n| format!("{n:?}"))
                    )
                })
                .collect();
            cells.push(format!(
                "{{\"rate_bps\":{},\"rtt_ms\":{},\"loss_pct\":{},\"bytes\":{},\"rows\":[{}]}}",
                c.cell.rate_bps,
                c.cell.rtt_ms,
                c.cell.loss_pct,
                c.bytes,
                rows.join(",")
            ));
        }
        let checks: Vec<String> = self
            .checks
            .iter()
            .map(|c| {
                format!(
                    "{{\"rate_bps\":{},\"secs\":{},\"offered_bps\":{:.0},\"delivered_bps\":{:.0},\"sent\":{},\"lost\":{},\"relay_cpu_s\":{:.3}}}",
                    c.rate_bps, c.secs, c.offered_bps, c.delivered_bps, c.sent, c.lost, c.relay_cpu
                )
            })
            .collect();
        let notes: Vec<String> = self.notes.iter().map(|n| format!("{n:?}")).collect();
        format!(
            "{{\"scenario\":\"wan\",\"command\":{:?},\"mtu\":{},\"seed\":{},\"checks\":[{}],\"cells\":[{}],\"notes\":[{}]}}\n",
            self.command,
            self.opts.mtu,
            self.opts.seed,
            checks.join(","),
            cells.join(","),
            notes.join(",")
        )
    }
}

/// `wan-100M-50ms.png`, `wan-1G-0.5ms.png`.
fn chart_name(rate_bps: u64, rtt_ms: f64) -> String {
    let rate = if rate_bps.is_multiple_of(1_000_000_000) {
        format!("{}G", rate_bps / 1_000_000_000)
    } else if rate_bps.is_multiple_of(1_000_000) {
        format!("{}M", rate_bps / 1_000_000)
    } else {
        rate_bps.to_string()
    };
    format!("wan-{rate}-{rtt_ms}ms.png")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_names_carry_rate_and_rtt() {
        assert_eq!(chart_name(100_000_000, 50.0), "wan-100M-50ms.png");
        assert_eq!(chart_name(1_000_000_000, 0.5), "wan-1G-0.5ms.png");
        assert_eq!(chart_name(1_500_000, 1.0), "wan-1500000-1ms.png");
    }
}
