//! CI's short run of the `messages` scenario (`--quick`: 300 messages, one
//! repetition): the lab at KCP's test conditions, the RTT probe, every row
//! (manyfold on 4 streams, on one, and on 4 with unordered messages; kernel
//! TCP; KCP through kcptun when kcptun is installed) delivering and
//! verifying every message, the JSON, the charts, and the cleanup. Proves the harness, not a latency
//! (BENCH.md). Needs root and /dev/net/tun; skips with the reason otherwise.

mod common;

#[test]
fn messages_quick_delivers_and_times_every_message_on_every_row() {
    if let Some(why) = common::namespaces_unavailable("messages") {
        eprintln!("skipped: {why}");
        return;
    }
    let quick = common::run_quick("messages");
    let (stdout, stderr) = (&quick.ran.stdout, &quick.ran.stderr);
    let mut rows = vec![
        "| manyfold (bbr), 4 streams |",
        "| manyfold (bbr), all on stream 0 |",
        "| manyfold (bbr), 4 streams, unordered |",
        "| kernel TCP bbr, one connection |",
    ];
    if common::kcptun_installed() {
        rows.push("| KCP via kcptun (fast3) |");
    } else {
        assert!(stdout.contains("KCP via kcptun: skipped: kcptun is not installed"), "{stdout}");
    }
    for row in &rows {
        // The summary line: one run, all 300 messages, numbers in every column.
        let line = stdout.lines().find(|l| l.starts_with(row)).unwrap_or_else(|| panic!("no row {row}:\n{stdout}"));
        assert!(line.contains("| 1 | 300 of 300 |"), "{line}\n{stderr}");
        assert!(!line.contains("NaN") && !line.contains("inf"), "{line}");
    }
    assert!(stdout.contains("Measured RTT: mean"), "{stdout}");
    assert!(stdout.contains("Target (issue 4)") && stdout.contains("nproc"), "{stdout}");
    let json = &quick.json;
    assert!(json.starts_with("{\"scenario\":\"messages\""), "{json}");
    assert_eq!(json.matches("\"delivered\":300,").count(), rows.len(), "{json}");
    assert!(!json.contains("\"error\":\""), "{json}");
    for png in ["messages-latency.png", "messages-cdf.png"] {
        let bytes = std::fs::read(quick.charts.path().join(png)).unwrap_or_else(|e| panic!("{png}: {e}\n{stderr}"));
        assert!(bytes.starts_with(b"\x89PNG"), "{png} is not a PNG");
    }
    common::assert_namespaces_removed(quick.ran.pid);
}
