//! The loopback tables: medians with their spread (min–max), ratios taken
//! pair by pair within one repetition (BENCH.md; rules in crate::stats),
//! the samples as JSON and the bulk charts.

use super::rows::Sample;
use crate::report::json_str;
use crate::stats::{self, med_range, median};

/// Per-repetition ratios of goodput `a[i] / b[i]`.
pub fn ratios(a: &[Sample], b: &[Sample]) -> Vec<f64> {
    let goodputs = |s: &[Sample]| s.iter().map(Sample::goodput).collect::<Vec<f64>>();
    stats::ratios(&goodputs(a), &goodputs(b))
}

/// The main loopback table. `anchor` and `ceiling` index `rows`.
pub fn bulk_table(bytes: u64, rows: &[(String, Vec<Sample>)], anchor: Option<usize>, ceiling: Option<usize>) -> String {
    let gb = bytes as f64 / 1e9;
    let mut t = String::new();
    t += "| row | goodput MB/s | time s | sender CPU s/GB | receiver CPU s/GB | sender peak RSS MiB | receiver peak RSS MiB | × TCP (cubic) | × ceiling | delivered |\n";
    t += "|---|---|---|---|---|---|---|---|---|---|\n";
    for (name, s) in rows {
        let col = |f: &dyn Fn(&Sample) -> f64| s.iter().map(f).collect::<Vec<f64>>();
        let ratio = |i: Option<usize>| match i {
            Some(i) => med_range(&ratios(s, &rows[i].1), 2),
            None => "–".into(),
        };
        let delivered = median(&col(&|x| x.delivered as f64 / bytes as f64 * 100.0));
        t += &format!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            med_range(&col(&|x| x.goodput()), 0),
            med_range(&col(&|x| x.wall), 2),
            med_range(&col(&|x| x.send_cpu / gb), 2),
            med_range(&col(&|x| x.recv_cpu / gb), 2),
            med_range(&col(&|x| x.send_rss_mib), 0),
            med_range(&col(&|x| x.recv_rss_mib), 0),
            ratio(anchor),
            ratio(ceiling),
            if delivered >= 100.0 { "100%".to_string() } else { format!("{delivered:.1}%") },
        );
    }
    t
}

/// Encryption's cost (issue 10): for each (encrypted, plain) pair of rows,
/// the per-repetition ratios encrypted ÷ plain of goodput and of each
/// side's CPU per GB, and the extra CPU seconds per GB both sides spend.
pub fn encryption_table(bytes: u64, rows: &[(String, Vec<Sample>)], pairs: &[(usize, usize)]) -> String {
    let gb = bytes as f64 / 1e9;
    let mut t = String::new();
    t += "| encrypted row | goodput MB/s plain → encrypted | × goodput | sender CPU s/GB plain → encrypted | × sender CPU | receiver CPU s/GB plain → encrypted | × receiver CPU | extra CPU s/GB, both sides |\n";
    t += "|---|---|---|---|---|---|---|---|\n";
    for &(e, p) in pairs {
        let (enc, plain) = (&rows[e].1, &rows[p].1);
        let med = |s: &[Sample], f: &dyn Fn(&Sample) -> f64| median(&s.iter().map(f).collect::<Vec<f64>>());
        let col = |s: &[Sample], f: &dyn Fn(&Sample) -> f64| s.iter().map(f).collect::<Vec<f64>>();
        let ratio = |f: &dyn Fn(&Sample) -> f64| stats::ratios(&col(enc, f), &col(plain, f));
        let send = |x: &Sample| x.send_cpu / gb;
        let recv = |x: &Sample| x.recv_cpu / gb;
        let extra: Vec<f64> = enc.iter().zip(plain).map(|(a, b)| send(a) + recv(a) - send(b) - recv(b)).collect();
        t += &format!(
            "| {} | {:.0} → {:.0} | {} | {:.2} → {:.2} | {} | {:.2} → {:.2} | {} | {} |\n",
            rows[e].0,
            med(plain, &Sample::goodput),
            med(enc, &Sample::goodput),
            med_range(&ratio(&Sample::goodput), 2),
            med(plain, &send),
            med(enc, &send),
            med_range(&ratio(&send), 2),
            med(plain, &recv),
            med(enc, &recv),
            med_range(&ratio(&recv), 2),
            med_range(&extra, 2),
        );
    }
    t
}

/// One sample's measured fields, as JSON members (no braces), with the
/// manyfold sender's counters when the row has them.
pub fn json_fields(s: &Sample) -> String {
    let mut f = format!(
        "\"wall_s\":{:.6},\"delivered\":{},\"goodput_mb_s\":{:.3},\"send_cpu_s\":{:.4},\"recv_cpu_s\":{:.4},\"send_rss_mib\":{:.1},\"recv_rss_mib\":{:.1}",
        s.wall,
        s.delivered,
        s.goodput(),
        s.send_cpu,
        s.recv_cpu,
        s.send_rss_mib,
        s.recv_rss_mib
    );
    if let Some(m) = s.mf {
        f += &format!(
            ",\"packets_sent\":{},\"retransmissions\":{},\"lost_packets\":{},\"rto_expiries\":{},\"limited_us\":{{\"application\":{},\"peer_window\":{},\"congestion\":{},\"pacing\":{}}}",
            m.packets_sent,
            m.retransmissions,
            m.lost_packets,
            m.rto_expiries,
            m.limited_app_us,
            m.limited_peer_us,
            m.limited_cwnd_us,
            m.limited_pacing_us
        );
    }
    f
}

/// One sample as a JSON object.
pub fn json_sample(row: &str, bytes: u64, rep: usize, s: &Sample) -> String {
    format!("{{\"row\":{},\"bytes\":{bytes},\"rep\":{rep},{}}}", json_str(row), json_fields(s))
}

/// The JSON document of one run's samples.
pub fn json_document(mode: &str, seed: u64, samples: &[String]) -> String {
    format!(
        "{{\"scenario\":\"loopback\",\"mode\":\"{mode}\",\"seed\":{seed},\"samples\":[\n{}\n]}}\n",
        samples.join(",\n")
    )
}

/// `--plot` for a table of rows: the median goodput of each row
/// (`<prefix>-goodput.png`) and its median sender and receiver CPU seconds
/// per GB (`<prefix>-cpu.png`). Returns the files written.
pub fn bulk_charts(
    dir: &std::path::Path,
    prefix: &str,
    what: &str,
    bytes: u64,
    rows: &[(String, Vec<Sample>)],
) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let gb = bytes as f64 / 1e9;
    let names: Vec<String> = rows.iter().map(|(n, _)| n.clone()).collect();
    let med = |f: &dyn Fn(&Sample) -> f64| -> Vec<f64> {
        rows.iter().map(|(_, s)| median(&s.iter().map(f).collect::<Vec<f64>>())).collect()
    };
    let reps = rows.iter().map(|(_, s)| s.len()).max().unwrap_or(0);
    let goodput = dir.join(format!("{prefix}-goodput.png"));
    manyfold_plot::bars(
        &goodput,
        &format!("{what}: goodput"),
        "goodput, MB/s (10^6 bytes)",
        &names,
        &[(format!("median of {reps}"), med(&|s| s.goodput()))],
    )?;
    let cpu = dir.join(format!("{prefix}-cpu.png"));
    manyfold_plot::bars(
        &cpu,
        &format!("{what}: CPU per GB moved"),
        "CPU seconds (user + sys) per GB",
        &names,
        &[
            (format!("sender (median of {reps})"), med(&|s| s.send_cpu / gb)),
            (format!("receiver (median of {reps})"), med(&|s| s.recv_cpu / gb)),
        ],
    )?;
    Ok(vec![goodput, cpu])
}
