//! The soak's summary: a Markdown table of what was opened, joined, left
//! and verified, the memory figures and the verdict, with the header line
//! every lab table has (command, date, machine, load); and the same as
//! JSON with every memory sample.

use std::time::Duration;

use super::memory::{Sample, Summary};
use super::{Args, Tally};
use crate::report::json_str;

pub struct Report<'a> {
    pub args: &'a Args,
    pub started_at: String,
    pub load_before: String,
    pub load_after: String,
    pub wall: Duration,
    pub memory: Summary,
    pub samples: &'a [Sample],
    pub server_conns_at_end: usize,
    pub tally: &'a Tally,
}

impl Report<'_> {
    /// (label, value) rows of the summary, in order; the JSON keys are
    /// the second element.
    fn counts(&self) -> Vec<(&'static str, &'static str, u64)> {
        let t = self.tally;
        let g = Tally::get;
        vec![
            ("point-to-point connections opened", "conns_opened", g(&t.conns_opened)),
            ("… completed (echo verified, closed)", "conns_completed", g(&t.conns_completed)),
            ("… accepted by the echo server", "conns_accepted", g(&t.conns_accepted)),
            ("… server FINs not acknowledged within 10 s", "server_close_unconfirmed", g(&t.server_close_unconfirmed)),
            ("client endpoints opened and shut down", "client_endpoints", g(&t.client_endpoints)),
            ("bytes verified, point to point (both ways)", "pair_bytes_verified", g(&t.pair_bytes_verified)),
            ("groups opened", "groups_opened", g(&t.groups_opened)),
            ("groups closed (every peer drained)", "groups_closed", g(&t.groups_closed)),
            ("group messages sent", "group_messages", g(&t.group_messages)),
            ("… delivered (Mode::All)", "group_messages_delivered", g(&t.group_messages_delivered)),
            (
                "… undeliverable (every copy's peer gone)",
                "group_messages_undeliverable",
                g(&t.group_messages_undeliverable),
            ),
            ("receivers in a group at its open", "joins_at_open", g(&t.joins_at_open)),
            ("receivers joined later (add_destination)", "joins", g(&t.joins)),
            ("receivers removed (remove_destination, stream read to its end)", "leaves_removed", g(&t.leaves_removed)),
            ("receivers dropped out (endpoint closed at once)", "leaves_dropped", g(&t.leaves_dropped)),
            ("receivers in at a group's close (read everything)", "leaves_at_close", g(&t.leaves_at_close)),
            ("receiver endpoints opened and shut down", "receiver_endpoints", g(&t.receiver_endpoints)),
            ("bytes verified, group (all receivers)", "group_bytes_verified", g(&t.group_bytes_verified)),
            ("failures", "failures", g(&t.failure_count)),
        ]
    }

    fn verdict(&self) -> String {
        let failures = Tally::get(&self.tally.failure_count);
        let slope = self.memory.slope_mib_per_min;
        let flat = slope.is_finite() && slope <= self.args.max_growth;
        match (failures, flat) {
            (0, true) => "pass: no failure, memory flat".into(),
            (0, false) => format!("FAIL: memory grew {slope:.2} MiB/min (limit {})", self.args.max_growth),
            (n, true) => format!("FAIL: {n} failure(s)"),
            (n, false) => format!("FAIL: {n} failure(s); memory grew {slope:.2} MiB/min"),
        }
    }

    pub fn markdown(&self) -> String {
        let a = self.args;
        let mins = a.duration.as_secs_f64() / 60.0;
        let mut t = format!(
            "### soak: {mins:.0} min of churn over 127.0.0.1, {}% loss each way, {}\n\n",
            a.loss,
            if a.encrypted { "encrypted (PSK)" } else { "plain" }
        );
        let args: Vec<String> = std::env::args().skip(1).collect();
        t += &format!(
            "`manyfold-bench {}` · {} · nproc {} · kernel {} · seed {} · {} clients, payloads 0–{}, {} connections per client endpoint · receivers {}–{}, {} messages/s of 0–{}, a membership change every {:.1} s, a new group every {:.0} s · load average before {}, after {}\n\n",
            args.join(" "),
            self.started_at,
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            crate::sh("uname", &["-r"]),
            a.seed,
            a.clients,
            a.max_payload,
            a.conns_per_endpoint,
            a.min_receivers,
            a.max_receivers,
            a.group_rate,
            a.max_message,
            a.churn_every.as_secs_f64(),
            a.epoch.as_secs_f64(),
            self.load_before,
            self.load_after,
        );
        t += "| what | count |\n|---|---|\n";
        t += &format!("| run (churn, then draining and joining every task), s | {:.1} |\n", self.wall.as_secs_f64());
        for (label, _, n) in self.counts() {
            t += &format!("| {label} | {n} |\n");
        }
        let m = &self.memory;
        t += &format!("| RSS MiB: start / peak / end | {:.1} / {:.1} / {:.1} |\n", m.start_mib, m.peak_mib, m.end_mib);
        t += &format!(
            "| RSS slope over the second half, MiB/min ({} samples; limit {}) | {:.3} |\n",
            m.fitted, a.max_growth, m.slope_mib_per_min
        );
        t += &format!(
            "| echo server's connections: peak / after the drain | {} / {} |\n",
            m.peak_server_conns,
            if self.server_conns_at_end == usize::MAX {
                "–".to_string()
            } else {
                self.server_conns_at_end.to_string()
            }
        );
        t += &format!("| verdict | {} |\n", self.verdict());
        let failures = self.tally.failures();
        if !failures.is_empty() {
            t += "\nFailures (the first ones):\n\n";
            for f in failures {
                t += &format!("- {f}\n");
            }
        }
        t
    }

    pub fn json(&self) -> String {
        let a = self.args;
        let m = &self.memory;
        let mut fields = vec![
            "\"scenario\":\"soak\"".to_string(),
            format!("\"duration_s\":{}", a.duration.as_secs_f64()),
            format!("\"encrypted\":{}", a.encrypted),
            format!("\"loss_percent\":{}", a.loss),
            format!("\"seed\":{}", a.seed),
            format!("\"wall_s\":{:.3}", self.wall.as_secs_f64()),
        ];
        for (_, key, n) in self.counts() {
            fields.push(format!("\"{key}\":{n}"));
        }
        fields.push(format!("\"rss_start_mib\":{:.2}", m.start_mib));
        fields.push(format!("\"rss_peak_mib\":{:.2}", m.peak_mib));
        fields.push(format!("\"rss_end_mib\":{:.2}", m.end_mib));
        let slope = if m.slope_mib_per_min.is_finite() { format!("{:.4}", m.slope_mib_per_min) } else { "null".into() };
        fields.push(format!("\"rss_slope_mib_per_min\":{slope}"));
        fields.push(format!("\"max_growth_mib_per_min\":{}", a.max_growth));
        fields.push(format!("\"verdict\":{}", json_str(&self.verdict())));
        let failures: Vec<String> = self.tally.failures().iter().map(|f| json_str(f)).collect();
        fields.push(format!("\"failure_messages\":[{}]", failures.join(",")));
        let samples: Vec<String> =
            self.samples.iter().map(|s| format!("[{:.1},{:.2},{}]", s.at, s.rss_mib, s.server_conns)).collect();
        fields.push(format!("\"samples_at_s_rss_mib_server_conns\":[{}]", samples.join(",")));
        format!("{{{}}}\n", fields.join(","))
    }
}
