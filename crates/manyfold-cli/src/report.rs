//! What a person sees during and after a transfer: the progress bar (bytes,
//! rate, ETA; hidden when stderr is not a terminal) and the final report
//! (bytes, time, goodput, retransmissions, loss seen, RTT) — paper 04 §3.2's
//! upload report, with the transport's own counters.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use manyfold::Protection;
use manyfold_proto::ConnStats;

use crate::net::Role;
use crate::size::{human_bytes, human_duration, human_rate};
use crate::transfer::TreeSummary;

/// How results are printed on stdout: text reports (the default), one
/// JSON object per transfer (`--json`), or nothing but errors (`-q`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Text,
    Json,
    Quiet,
}

static OUTPUT: AtomicU8 = AtomicU8::new(0);

/// Sets the output of this process (from the global flags).
pub fn set_output(output: Output) {
    OUTPUT.store(output as u8, Ordering::Relaxed);
}

pub fn output() -> Output {
    match OUTPUT.load(Ordering::Relaxed) {
        1 => Output::Json,
        2 => Output::Quiet,
        _ => Output::Text,
    }
}

/// `println!` for standard output that its reader may close early
/// (`manyfold ftp ADDR ls | head -1`): see [`write_stdout`].
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::report::write_stdout(format_args!($($arg)*))
    };
}
pub(crate) use outln;

/// Writes one line to standard output. A reader that went away is no
/// failure: the command goes on and ends quietly, as `ls | head` does,
/// instead of panicking like `println!` on the broken pipe (the rest of
/// its output goes nowhere).
pub fn write_stdout(line: std::fmt::Arguments) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = out.write_fmt(line).and_then(|()| out.write_all(b"\n"));
}

/// Prints a result: `text` in text mode, `json()` as one line with
/// `--json`, nothing with `-q`.
pub fn emit(text: &dyn std::fmt::Display, json: impl FnOnce() -> serde_json::Value) {
    match output() {
        Output::Text => outln!("{text}"),
        Output::Json => outln!("{}", json()),
        Output::Quiet => {}
    }
}

/// Prints `json()` as one line with `--json`, nothing otherwise: for an
/// object per item where the text report sums up the items together.
pub fn emit_json(json: impl FnOnce() -> serde_json::Value) {
    if output() == Output::Json {
        outln!("{}", json());
    }
}

/// Prints a line about what is going on (banners, "receiving ..."): in
/// text mode only, so that `--json` output stays one object per line.
pub fn say(text: &dyn std::fmt::Display) {
    if output() == Output::Text {
        outln!("{text}");
    }
}

/// Where progress bars are drawn: stderr when it is a terminal and not
/// `-q`, nowhere otherwise (so logs and pipes get only the reports).
pub fn multi_progress() -> MultiProgress {
    let target = if std::io::stderr().is_terminal() && output() != Output::Quiet {
        ProgressDrawTarget::stderr_with_hz(10)
    } else {
        ProgressDrawTarget::hidden()
    };
    MultiProgress::with_draw_target(target)
}

/// A byte-counting bar of `total` bytes labelled `label`.
pub fn transfer_bar(multi: &MultiProgress, total: u64, label: &str) -> ProgressBar {
    let bar = multi.add(ProgressBar::new(total));
    bar.set_style(moving_style());
    bar.set_prefix(label.to_string());
    bar
}

fn moving_style() -> ProgressStyle {
    with_keys(
        ProgressStyle::with_template(
            "{prefix:>10.bold} [{bar:32.cyan/blue}] {decimal_bytes:>9}/{decimal_total_bytes:<9} \
             {decimal_bytes_per_sec:>11} {eta_known}",
        )
        .expect("static template"),
    )
    .progress_chars("=> ")
}

/// The keys every bar of the CLI may use besides indicatif's own:
/// `{eta_known}`, "eta 12s" once something moved ("eta ?" before, not a
/// made-up "eta 0s"), and `{rate_whole}`, a count per second without
/// fractions ("1050/s", not "1,049.8597/s").
pub fn with_keys(style: ProgressStyle) -> ProgressStyle {
    style
        .with_key("eta_known", |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = if state.pos() == 0 || state.per_sec() <= 0.0 {
                write!(w, "eta ?")
            } else {
                write!(w, "eta {}", human_duration_short(state.eta()))
            };
        })
        .with_key("rate_whole", |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = write!(w, "{:.0}/s", state.per_sec());
        })
}

/// `7s`, `3m05s`, `1h02m`: an ETA at a glance, rounded up to the second,
/// so that work still left never reads "0s" (0.8 s left is "1s").
fn human_duration_short(d: Duration) -> String {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s / 60 % 60),
    }
}

/// A bar whose size is not known yet (a multicast receiver before any
/// session): it says what it waits for instead of a full "0 B/0 B" bar;
/// [`show_known`] turns it into a byte bar.
pub fn waiting_bar(multi: &MultiProgress, label: &str, waiting_for: &str) -> ProgressBar {
    let bar = multi.add(ProgressBar::new(0));
    bar.set_style(ProgressStyle::with_template("{prefix:>10.bold} {msg}").expect("static template"));
    bar.set_prefix(label.to_string());
    bar.set_message(waiting_for.to_string());
    bar
}

/// A [`waiting_bar`] whose size became known: `total` bytes from now on.
pub fn show_known(bar: &ProgressBar, total: u64) {
    if bar.length() == Some(0) && total > 0 {
        bar.set_style(moving_style());
        bar.set_message("");
    }
    bar.set_length(total);
}

/// The same bar while the peer is silent: the rate and ETA of a stalled
/// transfer mean nothing, the silence does.
fn stalled_style() -> ProgressStyle {
    ProgressStyle::with_template(
        "{prefix:>10.bold} [{bar:32.yellow/blue}] {decimal_bytes:>9}/{decimal_total_bytes:<9} {msg:.yellow}",
    )
    .expect("static template")
    .progress_chars("=> ")
}

/// Ends the bar of a peer that failed where it stood, saying so in red,
/// instead of a rate and an ETA that would go on as if it were still in
/// progress; it stays on screen while the others move on.
pub fn end_failed(bar: &ProgressBar, why: &str) {
    if bar.is_finished() {
        return;
    }
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix:>10.bold} [{bar:32.red/blue}] {decimal_bytes:>9}/{decimal_total_bytes:<9} {msg:.red}",
        )
        .expect("static template")
        .progress_chars("=> "),
    );
    bar.abandon_with_message(format!("FAILED: {why}"));
}

/// A peer silent for less than this is only a slow round trip.
const STALL_SHOWN_AFTER: Duration = Duration::from_secs(1);

/// Moves a sending bar to `position` and, while the connection has had
/// data outstanding without any answer for a second or more
/// (`ConnStats::stalled_since`), says "no answer from the receiver for
/// N s" instead of a frozen rate and ETA (issue 19 item 4).
pub fn show_sending(bar: &ProgressBar, position: u64, stats: &ConnStats, peer: Role) {
    bar.set_position(position);
    match stalled_for(stats) {
        Some(silent) => {
            bar.set_style(stalled_style());
            bar.set_message(format!("no answer from the {peer} for {} s", silent.as_secs()));
        }
        None => {
            if !bar.message().is_empty() {
                bar.set_style(moving_style());
                bar.set_message("");
            }
        }
    }
}

/// How long the peer has been silent with data outstanding, once that is
/// worth showing.
pub fn stalled_for(stats: &ConnStats) -> Option<Duration> {
    let silent = stats.stalled_since?.elapsed();
    (silent >= STALL_SHOWN_AFTER).then_some(silent)
}

/// Which end of a transfer a report describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Sent,
    Received,
}

/// The final figures of one transfer.
#[derive(Debug, Clone)]
pub struct Report {
    pub direction: Direction,
    pub name: String,
    pub peer: SocketAddr,
    pub bytes: u64,
    /// Of `bytes`, those an interrupted earlier attempt had moved.
    pub resumed: u64,
    pub elapsed: Duration,
    pub stats: ConnStats,
    /// The file's BLAKE3; none for a tree (each file has its own).
    pub hash: Option<blake3::Hash>,
    /// Several entries (`send DIR`, `send A B`): what they were.
    pub tree: Option<TreeSummary>,
    /// Whether the connection was encrypted, and the peer's proven key.
    pub security: Protection,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.stats;
        let (verb, prep) = match self.direction {
            Direction::Sent => ("sent", "to"),
            Direction::Received => ("received", "from"),
        };
        let mut out = String::new();
        let counts = self.tree.as_ref().map_or(String::new(), |t| format!("{}, ", t.counts()));
        let _ = writeln!(
            out,
            "{verb} {} {prep} {}: {counts}{} ({} bytes) in {}",
            self.name,
            self.peer,
            human_bytes(self.bytes),
            self.bytes,
            human_duration(self.elapsed)
        );
        let moved = self.bytes - self.resumed;
        if self.resumed > 0 {
            let _ = writeln!(
                out,
                "  resumed          {} were already on the receiver; {} moved now",
                human_bytes(self.resumed),
                human_bytes(moved)
            );
        }
        let _ = writeln!(out, "  goodput          {}", human_rate(moved, self.elapsed));
        let _ = writeln!(
            out,
            "  retransmissions  {} ({} retransmission timeouts, {} tail-loss probes)",
            s.retransmissions, s.rto_expiries, s.tail_loss_probes
        );
        let _ = writeln!(out, "  loss seen        {}", loss_seen(s.lost_packets, s.packets_sent));
        let _ = writeln!(out, "  packets          {} sent, {} received", s.packets_sent, s.packets_received);
        let _ = writeln!(out, "  rtt              srtt {}, min {}", human_duration(s.srtt), human_duration(s.min_rtt));
        let _ = writeln!(out, "  security         {}", self.security);
        match (&self.hash, &self.tree) {
            (Some(hash), _) => {
                let _ = write!(out, "  blake3           {}", hash.to_hex());
            }
            (None, Some(tree)) => {
                let _ = tree.write_files(&mut out);
            }
            (None, None) => {}
        }
        f.write_str(out.trim_end())
    }
}

impl Report {
    /// The report as JSON (`--json`): every figure of the text report,
    /// in plain units (bytes, seconds, bytes per second).
    pub fn to_json(&self) -> serde_json::Value {
        let s = &self.stats;
        let secs = self.elapsed.as_secs_f64();
        let (encrypted, peer_key) = match self.security {
            Protection::Encrypted { peer_key } => (true, peer_key.map(hex)),
            _ => (false, None),
        };
        let mut v = serde_json::json!({
            "direction": match self.direction { Direction::Sent => "sent", Direction::Received => "received" },
            "name": self.name,
            "peer": self.peer.to_string(),
            "bytes": self.bytes,
            "resumed_bytes": self.resumed,
            "seconds": secs,
            "goodput_bytes_per_second": if secs > 0.0 { (self.bytes - self.resumed) as f64 / secs } else { 0.0 },
            "retransmissions": s.retransmissions,
            "retransmission_timeouts": s.rto_expiries,
            "tail_loss_probes": s.tail_loss_probes,
            "lost_packets": s.lost_packets,
            "packets_sent": s.packets_sent,
            "packets_received": s.packets_received,
            "srtt_seconds": s.srtt.as_secs_f64(),
            "min_rtt_seconds": s.min_rtt.as_secs_f64(),
            "encrypted": encrypted,
            "peer_key": peer_key,
            "blake3": self.hash.map(|h| h.to_hex().to_string()),
        });
        // A tree: one entry per file, and the other entries counted.
        if let Some(tree) = &self.tree {
            tree.add_to_json(&mut v);
        }
        v
    }
}

fn hex(key: [u8; 32]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// `4.91% (812 of 16543 packets sent)`.
pub fn loss_seen(lost: u64, sent: u64) -> String {
    if sent == 0 {
        return "n/a (no packets sent)".into();
    }
    format!("{:.2}% ({lost} of {sent} packets sent)", lost as f64 * 100.0 / sent as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etas_read_at_a_glance() {
        assert_eq!(human_duration_short(Duration::from_secs(7)), "7s");
        assert_eq!(human_duration_short(Duration::from_secs(185)), "3m05s");
        assert_eq!(human_duration_short(Duration::from_secs(3720)), "1h02m");
        // Rounded up: a bar mid-way never says 0 s (CI saw "eta 0s" with
        // 99 MB left at 130 MB/s, 0.77 s).
        assert_eq!(human_duration_short(Duration::from_millis(770)), "1s");
        assert_eq!(human_duration_short(Duration::from_millis(59_200)), "1m00s");
        assert_eq!(human_duration_short(Duration::ZERO), "0s");
    }

    #[test]
    fn report_names_every_figure() {
        let report = Report {
            direction: Direction::Sent,
            name: "f.bin".into(),
            peer: "127.0.0.1:7008".parse().unwrap(),
            bytes: 20_000_000,
            resumed: 0,
            elapsed: Duration::from_secs(2),
            stats: ConnStats {
                packets_sent: 1000,
                lost_packets: 50,
                retransmissions: 52,
                rto_expiries: 3,
                tail_loss_probes: 4,
                srtt: Duration::from_micros(310),
                min_rtt: Duration::from_micros(40),
                ..ConnStats::default()
            },
            hash: Some(blake3::hash(b"")),
            tree: None,
            security: Protection::Encrypted { peer_key: Some([0xab; 32]) },
        };
        let text = report.to_string();
        for needle in [
            "sent f.bin to 127.0.0.1:7008: 20.00 MB (20000000 bytes) in 2.00 s",
            "goodput          10.00 MB/s (80.0 Mbit/s)",
            "retransmissions  52 (3 retransmission timeouts, 4 tail-loss probes)",
            "loss seen        5.00% (50 of 1000 packets sent)",
            "srtt 310 µs, min 40 µs",
            "security         encrypted (Noise XX + ChaCha20-Poly1305), peer key abab",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
    }
}
