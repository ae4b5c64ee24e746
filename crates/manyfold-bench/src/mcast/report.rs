//! The `mcast` figures: one result per transfer, then per setup a Markdown
//! table of medians with their (min–max) spread per N and row, manyfold's
//! time as a ratio to each anchor's taken repetition by repetition
//! (BENCH.md), the three targets judged, and the JSON.

use std::collections::BTreeSet;

use super::rows::{Measured, Proto};
use super::topo::{Counters, Topo, TBF_LATENCY_MS};
use super::{Plan, Setup};
use crate::loopback::human;
use crate::report::Runs;
use crate::report::{header, json_str};
use crate::stats::{self, med_range, median};

/// The figures of `manyfold mcast send --json` this scenario uses.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MfReport {
    pub elapsed_s: f64,
    /// From the first DATA until every packet went out once (the data
    /// phase); absent when no data went.
    pub data_s: Option<f64>,
    /// From the first DATA to the end: the data phase, then repairs and
    /// confirmations. `elapsed_s − transfer_s` is the announce phase.
    pub transfer_s: Option<f64>,
    pub data_packets: u64,
    pub repair_multicast: u64,
    pub repair_unicast: u64,
    pub acks: u64,
    pub nacks: u64,
    pub late_acks: u64,
    pub repair_requests: u64,
    pub status_reports: u64,
    pub windows_confirmed: u64,
    pub windows_expired: u64,
    /// Distinct receiver networks in the sender's report.
    pub networks: usize,
    /// Receivers whose outcome is not `Completed`.
    pub not_completed: usize,
    /// Groups the sender formed from shared losses (spec §16.12).
    pub groups: usize,
    /// Receivers marked behind at the end (spec §16.7): each acks every
    /// window unsuppressed, as a network of its own.
    pub behind: usize,
    /// What windows awaited an ACK from at the end (spec §16.3, §16.7,
    /// §16.12): each receiver's assigned group, else its network, and each
    /// receiver behind its network on its own.
    pub feedback_groups: usize,
}

/// A JSON number, or `null`.
fn opt(v: Option<f64>) -> String {
    v.map_or("null".to_string(), |v| v.to_string())
}

/// The number after `"key":` in a flat JSON text.
fn num(json: &str, key: &str) -> Option<f64> {
    let pat = format!("\"{key}\":");
    let at = json.find(&pat)? + pat.len();
    let rest = &json[at..];
    let end =
        rest.find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '-' | 'e' | 'E' | '+'))).unwrap_or(rest.len());
    rest[..end].parse().ok()
}

impl MfReport {
    pub fn parse(json: &str) -> Option<MfReport> {
        let u = |k: &str| num(json, k).map(|v| v as u64);
        let networks: BTreeSet<&str> =
            json.split("\"network\":").skip(1).filter_map(|s| s.split([',', '}']).next()).collect();
        let outcomes = json.matches("\"outcome\":").count();
        let completed = json.matches("\"outcome\":\"Completed\"").count();
        let groups: BTreeSet<&str> = json
            .split("\"group\":")
            .skip(1)
            .filter_map(|s| s.split([',', '}']).next())
            .filter(|g| *g != "null")
            .collect();
        Some(MfReport {
            elapsed_s: num(json, "elapsed_s")?,
            data_s: num(json, "data_s"),
            transfer_s: num(json, "transfer_s"),
            data_packets: u("data_packets")?,
            repair_multicast: u("repair_multicast")?,
            repair_unicast: u("repair_unicast")?,
            acks: u("acks")?,
            nacks: u("nacks")?,
            late_acks: u("late_acks")?,
            repair_requests: u("repair_requests")?,
            status_reports: u("status_reports")?,
            windows_confirmed: u("windows_confirmed")?,
            windows_expired: u("windows_expired")?,
            networks: networks.len(),
            not_completed: outcomes - completed,
            groups: groups.len(),
            behind: json.matches("\"behind\":true").count(),
            feedback_groups: feedback_groups(json),
        })
    }

    /// (ACK + NACK) per window per receiver network (spec §16.4's target).
    pub fn feedback_per_window_per_network(&self) -> f64 {
        let windows = (self.windows_confirmed + self.windows_expired).max(1);
        (self.acks + self.nacks) as f64 / windows as f64 / self.networks.max(1) as f64
    }

    /// (ACK + NACK) per window per feedback group (spec §16.12: the sets
    /// whose ACKs windows await: automatic groups, networks, receivers
    /// behind on their own), beside the per-network figure.
    pub fn feedback_per_window_per_group(&self) -> f64 {
        let windows = (self.windows_confirmed + self.windows_expired).max(1);
        (self.acks + self.nacks) as f64 / windows as f64 / self.feedback_groups.max(1) as f64
    }

    fn json(&self) -> String {
        format!(
            "{{\"elapsed_s\":{},\"data_s\":{},\"transfer_s\":{},\"data_packets\":{},\"repair_multicast\":{},\"repair_unicast\":{},\"acks\":{},\"nacks\":{},\"late_acks\":{},\"repair_requests\":{},\"status_reports\":{},\"windows_confirmed\":{},\"windows_expired\":{},\"networks\":{},\"groups\":{},\"behind\":{},\"feedback_groups\":{}}}",
            self.elapsed_s,
            opt(self.data_s),
            opt(self.transfer_s),
            self.data_packets,
            self.repair_multicast,
            self.repair_unicast,
            self.acks,
            self.nacks,
            self.late_acks,
            self.repair_requests,
            self.status_reports,
            self.windows_confirmed,
            self.windows_expired,
            self.networks,
            self.groups,
            self.behind,
            self.feedback_groups
        )
    }
}

/// The feedback groups of a manyfold sender report's receivers (spec
/// §16.12): a receiver behind its network is one of its own, else its
/// assigned group, else its network.
fn feedback_groups(json: &str) -> usize {
    let mut keys = BTreeSet::new();
    for r in json.split("{\"addr\":").skip(1) {
        let r = r.split('}').next().unwrap_or("");
        let key = if r.contains("\"behind\":true") {
            format!("receiver {}", r.split(',').next().unwrap_or(""))
        } else if let Some(g) = num(r, "group") {
            format!("group {g}")
        } else {
            format!("network {}", num(r, "network").unwrap_or(f64::NAN))
        };
        keys.insert(key);
    }
    keys.len()
}

/// The receivers of a manyfold sender report that did not complete, as
/// `addr outcome (lost L, passes P)`, for a failed run's message.
pub fn not_completed(json: &str) -> String {
    let mut out = Vec::new();
    for r in json.split("{\"addr\":").skip(1) {
        let r = r.split('}').next().unwrap_or("");
        let addr = r.split(',').next().unwrap_or("").trim_matches('"');
        let outcome = r.split("\"outcome\":\"").nth(1).and_then(|o| o.split('"').next()).unwrap_or("?");
        if outcome != "Completed" {
            let lost = num(r, "reported_lost").unwrap_or(f64::NAN);
            let passes = num(r, "repair_passes").unwrap_or(f64::NAN);
            out.push(format!("{addr} {outcome} (lost {lost}, passes {passes})"));
        }
    }
    if out.is_empty() {
        "every receiver completed".into()
    } else {
        out.join(", ")
    }
}

/// What one transfer gave.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub setup: Setup,
    pub n: usize,
    pub proto: Proto,
    pub rep: usize,
    pub networks: usize,
    pub m: Measured,
    pub error: Option<String>,
}

impl RunResult {
    pub fn ok(setup: Setup, n: usize, proto: Proto, rep: usize, topo: &Topo, m: Measured) -> RunResult {
        let mut r = RunResult { setup, n, proto, rep, networks: topo.networks(), m, error: None };
        if let Some(mf) = &r.m.mf {
            if mf.not_completed > 0 {
                r.error = Some(format!("manyfold's report: {} receiver(s) not completed", mf.not_completed));
            }
        }
        r
    }

    pub fn failed(setup: Setup, n: usize, proto: Proto, rep: usize, error: String) -> RunResult {
        RunResult { setup, n, proto, rep, networks: 0, m: Measured::default(), error: Some(error) }
    }

    fn goodput_mbps(&self, plan: &Plan) -> f64 {
        plan.bytes as f64 * 8.0 / 1e6 / self.m.time_to_all
    }

    fn bottleneck_pct(&self, plan: &Plan) -> f64 {
        self.goodput_mbps(plan) * 1e6 / plan.rate_bps as f64 * 100.0
    }

    /// The sender's UDP payload per file byte.
    fn sent_per_byte(&self, plan: &Plan) -> f64 {
        self.m.counters.sender_payload() as f64 / plan.bytes as f64
    }

    /// Datagrams from all receivers per MB (10^6 bytes) of the file.
    fn feedback_per_mb(&self, plan: &Plan) -> f64 {
        self.m.counters.feedback as f64 / (plan.bytes as f64 / 1e6)
    }

    fn fb_window(&self) -> Option<f64> {
        self.m.mf.as_ref().map(MfReport::feedback_per_window_per_network)
    }

    fn fb_window_group(&self) -> Option<f64> {
        self.m.mf.as_ref().map(MfReport::feedback_per_window_per_group)
    }

    pub fn progress(&self, plan: &Plan) -> String {
        let what = format!("{} N={} {} rep {}", self.setup.key(), self.n, self.proto.label(), self.rep + 1);
        match &self.error {
            Some(e) => format!("{what}: FAILED: {e}"),
            None => format!(
                "{what}: all in {:.2} s, {:.1} Mbit/s ({:.0}% of the bottleneck), {:.3} bytes sent per byte, {:.1} feedback/MB{}, {} dropped by the loss rule",
                self.m.time_to_all,
                self.goodput_mbps(plan),
                self.bottleneck_pct(plan),
                self.sent_per_byte(plan),
                self.feedback_per_mb(plan),
                self.m
                    .mf
                    .as_ref()
                    .map(|m| format!(
                        ", {:.2} per window per network, {:.2} per window per group ({} group{})",
                        m.feedback_per_window_per_network(),
                        m.feedback_per_window_per_group(),
                        m.feedback_groups,
                        if m.feedback_groups == 1 { "" } else { "s" }
                    ))
                    .unwrap_or_default(),
                self.m.counters.dropped,
            ),
        }
    }

    fn json(&self, plan: &Plan) -> String {
        let c: &Counters = &self.m.counters;
        let f = |v: f64| if v.is_finite() { format!("{v}") } else { "null".into() };
        let ok = self.error.is_none();
        format!(
            "{{\"setup\":\"{}\",\"receivers\":{},\"row\":\"{}\",\"rep\":{},\"networks\":{},\"time_to_all_s\":{},\"goodput_mbps\":{},\"bottleneck_pct\":{},\"sent_bytes_per_file_byte\":{},\"sender_udp_packets\":{},\"sender_ip_bytes\":{},\"feedback_packets\":{},\"feedback_per_mb\":{},\"feedback_per_window_per_network\":{},\"feedback_per_window_per_group\":{},\"dropped_by_loss_rule\":{},\"sender_cpu_s\":{},\"receivers_cpu_s\":{},\"sender_peak_rss_kib\":{},\"manyfold\":{},\"error\":{}}}",
            self.setup.key(),
            self.n,
            self.proto.key(),
            self.rep,
            self.networks,
            f(if ok { self.m.time_to_all } else { f64::NAN }),
            f(if ok { self.goodput_mbps(plan) } else { f64::NAN }),
            f(if ok { self.bottleneck_pct(plan) } else { f64::NAN }),
            f(if ok { self.sent_per_byte(plan) } else { f64::NAN }),
            c.sender_packets,
            c.sender_bytes,
            c.feedback,
            f(if ok { self.feedback_per_mb(plan) } else { f64::NAN }),
            self.fb_window().map_or("null".into(), f),
            self.fb_window_group().map_or("null".into(), f),
            c.dropped,
            f(self.m.send_cpu),
            f(self.m.recv_cpu),
            self.m.send_rss_kib,
            self.m.mf.as_ref().map_or("null".into(), MfReport::json),
            self.error.as_deref().map_or("null".into(), json_str),
        )
    }
}

/// Every run of one invocation, and the rows or setups left out.
#[derive(Debug)]
pub struct Report {
    pub runs: Vec<RunResult>,
    pub skipped: Vec<String>,
    frame: Runs<Plan, ()>,
}

impl Report {
    pub fn new(plan: &Plan) -> Report {
        Report { runs: Vec::new(), skipped: Vec::new(), frame: Runs::new(plan) }
    }

    pub fn finish(&mut self) {
        self.frame.finish();
    }

    fn plan(&self) -> &Plan {
        &self.frame.plan
    }

    fn ok(&self, setup: Setup, n: usize, proto: Proto) -> Vec<&RunResult> {
        self.runs.iter().filter(|r| r.setup == setup && r.n == n && r.proto == proto && r.error.is_none()).collect()
    }

    fn of(&self, setup: Setup, n: usize, proto: Proto) -> Vec<&RunResult> {
        self.runs.iter().filter(|r| r.setup == setup && r.n == n && r.proto == proto).collect()
    }

    /// manyfold's time ÷ `anchor`'s, within each repetition both finished.
    fn time_ratios(&self, setup: Setup, n: usize, anchor: Proto) -> Vec<f64> {
        let time = |r: &&RunResult| (r.rep, r.m.time_to_all);
        let anchor: Vec<(usize, f64)> = self.ok(setup, n, anchor).iter().map(time).collect();
        stats::ratios_by_rep(self.ok(setup, n, Proto::Manyfold).iter().map(time), &anchor)
    }

    pub fn failures(&self) -> Vec<String> {
        self.runs
            .iter()
            .filter_map(|r| {
                let e = r.error.as_ref()?;
                Some(format!("{} N={} {} rep {}: {e}", r.setup.key(), r.n, r.proto.label(), r.rep + 1))
            })
            .collect()
    }

    fn setups(&self) -> Vec<Setup> {
        let s: BTreeSet<Setup> = self.runs.iter().map(|r| r.setup).collect();
        s.into_iter().collect()
    }

    fn setup_title(&self, s: Setup) -> String {
        let p = self.plan();
        let rate = crate::wan::rate_label(p.rate_bps);
        match s {
            Setup::Asym => format!("asym: one bridge; receivers 0, 2, 4, … behind tbf {rate} each (on the bridge's port towards them), the others unlimited"),
            Setup::Lossy => format!("lossy: as asym, and receivers with i mod 4 < 2 (slow and fast alike) drop {}% of the UDP datagrams they receive, one by one (nftables `numgen random`; their bridge ports segment GSO batches)", p.loss),
            Setup::Routed => format!("routed: net A (sender, receivers 1, 3, …) and net B (receivers 0, 2, …) on two bridges joined by an smcroute router, tbf {rate} on its interface towards B (shared by B's receivers)"),
        }
    }

    pub fn markdown(&self) -> String {
        let p = self.plan();
        let gb = p.bytes as f64 / 1e9;
        let mut t = String::new();
        t += &format!(
            "### mcast: one file ({}, {} bytes) to N receivers, bottleneck {}\n\n",
            human(p.bytes),
            p.bytes,
            crate::wan::rate_label(p.rate_bps)
        );
        let sizes = format!("file {} · N = {:?} · {} rep(s)", human(p.bytes), p.receivers, p.reps);
        t += &header(&sizes, p.seed, &self.frame.load_before, &self.frame.load_after);
        t += "\n\n";
        for s in &self.skipped {
            t += &format!("- {s}\n");
        }
        if !self.skipped.is_empty() {
            t += "\n";
        }
        for setup in self.setups() {
            t += &format!("#### {}\n\n", self.setup_title(setup));
            t += "| N | row | ok | time to all s | goodput Mbit/s | % of bottleneck | bytes sent per file byte | feedback per window per network | feedback per window per group | feedback packets per MB | dropped by the loss rule | sender CPU s/GB | receivers' CPU s/GB (mean) | sender peak RSS MiB | manyfold ÷ row, time |\n";
            t += "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
            for &n in &p.receivers {
                for &proto in &p.rows {
                    let all = self.of(setup, n, proto);
                    if all.is_empty() {
                        continue;
                    }
                    let ok = self.ok(setup, n, proto);
                    let col = |f: &dyn Fn(&RunResult) -> f64| ok.iter().map(|r| f(r)).collect::<Vec<f64>>();
                    let fbw: Vec<f64> = ok.iter().filter_map(|r| r.fb_window()).collect();
                    let fbg: Vec<f64> = ok.iter().filter_map(|r| r.fb_window_group()).collect();
                    let ratio = if proto == Proto::Manyfold { vec![] } else { self.time_ratios(setup, n, proto) };
                    t += &format!(
                        "| {n} | {} | {} of {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                        proto.label(),
                        ok.len(),
                        all.len(),
                        med_range(&col(&|r| r.m.time_to_all), 2),
                        med_range(&col(&|r| r.goodput_mbps(p)), 1),
                        med_range(&col(&|r| r.bottleneck_pct(p)), 0),
                        med_range(&col(&|r| r.sent_per_byte(p)), 3),
                        med_range(&fbw, 2),
                        med_range(&fbg, 2),
                        med_range(&col(&|r| r.feedback_per_mb(p)), 1),
                        med_range(&col(&|r| r.m.counters.dropped as f64), 0),
                        med_range(&col(&|r| r.m.send_cpu / gb), 2),
                        med_range(&col(&|r| r.m.recv_cpu / r.n as f64 / gb), 2),
                        med_range(&col(&|r| r.m.send_rss_kib as f64 / 1024.0), 0),
                        med_range(&ratio, 2),
                    );
                }
            }
            t += "\n";
        }
        t += &self.targets();
        t += &self.notes();
        let failed = self.failures();
        if !failed.is_empty() {
            t += &format!("\nFailed runs (left out of the figures): {}\n", failed.join("; "));
        }
        t
    }

    fn targets(&self) -> String {
        let p = self.plan();
        let mut fb = Vec::new();
        let mut time = Vec::new();
        let mut good = Vec::new();
        let (mut fb_met, mut time_met, mut good_met) = (true, true, true);
        for setup in self.setups() {
            for &n in &p.receivers {
                let mf = self.ok(setup, n, Proto::Manyfold);
                if mf.is_empty() {
                    continue;
                }
                let at = format!("{} N={n}", setup.key());
                let f = median(&mf.iter().filter_map(|r| r.fb_window()).collect::<Vec<_>>());
                let g = median(&mf.iter().filter_map(|r| r.fb_window_group()).collect::<Vec<_>>());
                fb_met &= f <= 2.0;
                fb.push(format!("{at} {f:.2} (per group {g:.2})"));
                let g = median(&mf.iter().map(|r| r.bottleneck_pct(p)).collect::<Vec<_>>());
                good_met &= g >= 90.0;
                good.push(format!("{at} {g:.0}%"));
                for anchor in [Proto::UftpTfmcc, Proto::UftpFixed] {
                    let r = self.time_ratios(setup, n, anchor);
                    if !r.is_empty() {
                        let m = median(&r);
                        time_met &= m <= 1.0;
                        time.push(format!("{at} ÷ {} {m:.2}", anchor.label()));
                    }
                }
            }
        }
        let verdict = |met: bool, any: bool| match (any, met) {
            (false, _) => "not measured",
            (true, true) => "met",
            (true, false) => "missed",
        };
        let mut t = String::new();
        t += &format!(
            "Target, manyfold feedback ≤ 2 packets per window per network whatever N ((ACK + NACK) ÷ windows ÷ receiver networks, from its sender's report, and in brackets ÷ feedback groups: automatic groups, networks without one, receivers behind on their own, at the end; median): {} — {}.\n\n",
            fb.join(", "),
            verdict(fb_met, !fb.is_empty())
        );
        t += &format!(
            "Target, manyfold time to all ≤ uftp's (median of the per-repetition ratios; ≤ 1.00 meets it): {} — {}.\n\n",
            time.join(", "),
            verdict(time_met, !time.is_empty())
        );
        t += &format!(
            "Target, manyfold goodput ≥ 90% of the bottleneck (paper 03: 97 of 100 Mbit/s; median): {} — {}.\n\n",
            good.join(", "),
            verdict(good_met, !good.is_empty())
        );
        t
    }

    fn notes(&self) -> String {
        let p = self.plan();
        format!(
            "Every row sends the same file ({}, seed {}) from the same namespaces in the same run, rows alternating within each repetition; every receiver's copy is compared with the source by BLAKE3, and a missing or different copy fails the run. \
Time to all: from the sender's start (receivers already up and bound) until it and every receiver that ends by itself have exited; uftp's clients are daemons, so its time ends with the server's exit, which follows every client's COMPLETE. It includes each protocol's announce/registration phase. \
Goodput: file bytes ÷ time to all; the bottleneck is tbf at {} (burst 32 KB, queue {TBF_LATENCY_MS} ms), which counts Ethernet frames: a 1,452-byte manyfold datagram carries 1,428 file bytes in a 1,494-byte frame, so ≈ 95.6% is manyfold's ceiling. \
Bytes sent per file byte: the UDP payload of every datagram out of the sender's namespace (nftables counter, IP bytes less 28 per datagram) ÷ the file size: 1.0 would be the file once with no headers, repairs or control. \
Feedback packets per MB: every UDP datagram the receivers sent (nftables counters in each receiver's namespace: ACK, NACK, REGISTER, REPAIR, STATUS for manyfold; uftp's and udpcast's replies alike) ÷ the file's MB (10^6 bytes). \
Settings: manyfold defaults (`manyfold mcast send --receivers N`); uftp 4 unencrypted, `-b {}`, a closed group (`-H` every client) so it starts once all registered, `-C tfmcc`, or `-C none -R {}` (the bottleneck in Kbit/s); udpcast `--min-receivers N --max-bitrate {}k` (it has no congestion control). Per-transfer limit {} s.\n",
            human(p.bytes),
            p.seed,
            crate::wan::rate_label(p.rate_bps),
            "1400",
            p.rate_bps / 1000,
            p.rate_bps / 1000,
            p.limit.as_secs()
        )
    }

    pub fn json(&self) -> String {
        let p = self.plan();
        let rows: Vec<String> = p.rows.iter().map(|r| json_str(r.key())).collect();
        let setups: Vec<String> = p.setups.iter().map(|s| json_str(s.key())).collect();
        let skipped: Vec<String> = self.skipped.iter().map(|s| json_str(s)).collect();
        let args: Vec<String> = std::env::args().skip(1).collect();
        let fields = format!(
            "\"command\":{},\"size\":{},\"bytes\":{},\"receivers\":{:?},\"setups\":[{}],\"rows\":[{}],\"reps\":{},\"rate_bps\":{},\"loss_percent\":{},\"tbf_burst\":\"32kb\",\"tbf_latency_ms\":{TBF_LATENCY_MS},\"sample_seed\":{},\"limit_s\":{},\"skipped\":[{}]",
            json_str(&format!("manyfold-bench {}", args.join(" "))),
            json_str(&p.size),
            p.bytes,
            p.receivers,
            setups.join(","),
            rows.join(","),
            p.reps,
            p.rate_bps,
            p.loss,
            p.seed,
            p.limit.as_secs(),
            skipped.join(",")
        );
        let runs: Vec<String> = self.runs.iter().map(|r| r.json(p)).collect();
        format!(
            "{{\"scenario\":\"mcast\",{fields},\"load_before\":{},\"load_after\":{},\"runs\":[\n{}\n]}}\n",
            json_str(&self.frame.load_before),
            json_str(&self.frame.load_after),
            runs.join(",\n")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SENDER_JSON: &str = "{\"name\":\"f\",\"elapsed_s\":2.5,\"packets\":14006,\"block\":1428,\"data_packets\":14006,\"repair_multicast\":3,\"repair_unicast\":1,\"acks\":380,\"nacks\":20,\"late_acks\":1,\"repair_requests\":2,\"status_reports\":4,\"windows_confirmed\":190,\"windows_expired\":10,\"artp_max_us\":600,\"receivers\":[{\"addr\":\"198.18.1.1:4\",\"network\":12980737,\"outcome\":\"Completed\",\"joined_at\":0,\"reported_lost\":0,\"repair_passes\":0},{\"addr\":\"198.18.2.1:5\",\"network\":12980738,\"group\":7,\"behind\":true,\"outcome\":\"Completed\",\"joined_at\":0,\"reported_lost\":0,\"repair_passes\":0},{\"addr\":\"198.18.2.2:5\",\"network\":12980738,\"group\":null,\"behind\":false,\"outcome\":\"Incomplete\",\"joined_at\":0,\"reported_lost\":0,\"repair_passes\":0}],\"windows\":[[1,1,2,100000]]}";

    fn receivers(rx: &[(&str, u32, &str, bool)]) -> String {
        let one = |(addr, network, group, behind): &(&str, u32, &str, bool)| {
            format!("{{\"addr\":\"{addr}\",\"network\":{network},\"group\":{group},\"behind\":{behind},\"outcome\":\"Completed\"}}")
        };
        format!("{{\"receivers\":[{}]}}", rx.iter().map(one).collect::<Vec<_>>().join(","))
    }

    #[test]
    fn feedback_groups_are_assigned_groups_networks_and_receivers_behind() {
        // Two of four receivers grouped across two networks: group 5 and
        // networks 1 and 2.
        let json = receivers(&[
            ("a:1", 1, "5", false),
            ("b:1", 2, "5", false),
            ("c:1", 1, "null", false),
            ("d:1", 2, "null", false),
        ]);
        assert_eq!(feedback_groups(&json), 3);
        // Every receiver in one group: one.
        assert_eq!(feedback_groups(&receivers(&[("a:1", 1, "5", false), ("b:1", 2, "5", false)])), 1);
        // Two receivers behind: each on its own, beside their network.
        let json = receivers(&[("a:1", 1, "null", true), ("b:1", 1, "null", true), ("c:1", 1, "null", false)]);
        assert_eq!(feedback_groups(&json), 3);
    }

    #[test]
    fn the_sender_report_parses() {
        let r = MfReport::parse(SENDER_JSON).unwrap();
        assert_eq!(r.acks, 380);
        assert_eq!(r.nacks, 20);
        assert_eq!(r.windows_expired, 10);
        assert_eq!(r.networks, 2);
        assert_eq!(r.not_completed, 1);
        assert_eq!((r.groups, r.behind), (1, 1));
        // Network 12980737; the receiver behind on its own; network 12980738.
        assert_eq!(r.feedback_groups, 3);
        assert!((r.feedback_per_window_per_group() - 2.0 / 3.0).abs() < 1e-12);
        assert!((r.elapsed_s - 2.5).abs() < 1e-12);
        // 400 feedback packets, 200 windows, 2 networks.
        assert!((r.feedback_per_window_per_network() - 1.0).abs() < 1e-12);
        assert_eq!(MfReport::parse("{}"), None);
        assert_eq!(not_completed(SENDER_JSON), "198.18.2.2:5 Incomplete (lost 0, passes 0)");
    }
}
