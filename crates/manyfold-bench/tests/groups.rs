//! CI's short runs of the two group scenarios (BENCH.md: a short version
//! of each scenario proves the harness, not a figure):
//! - `fanout --quick`: 64 MiB to N = 1 and 4 receivers on 127.0.0.1, one
//!   manyfold group beside N kernel TCP connections, every receiver
//!   verifying its copy; the table, both targets' lines, JSON and charts;
//! - `handshake --quick`: group connects across the emulated link at both
//!   link settings, beside N TCP connects; needs root and /dev/net/tun and
//!   skips with the reason otherwise.

mod common;

#[test]
fn fanout_quick_delivers_every_copy_on_both_rows() {
    let quick = common::run_quick("fanout");
    let (stdout, stderr) = (&quick.ran.stdout, &quick.ran.stderr);
    for n in [1, 4] {
        for row in ["manyfold group (All)", "N × kernel TCP"] {
            let prefix = format!("| {n} | {row} | 1 of 1 |");
            let line = stdout.lines().find(|l| l.starts_with(&prefix));
            let line = line.unwrap_or_else(|| panic!("no row {prefix}:\n{stdout}\n{stderr}"));
            assert!(!line.contains("NaN") && !line.contains("inf"), "{line}");
        }
    }
    assert!(stdout.contains("Target, time to all ≤ the TCP fan-out's"), "{stdout}");
    assert!(stdout.contains("Target, manyfold sender peak RSS at N = 4"), "{stdout}");
    let json = &quick.json;
    assert!(json.starts_with("{\"scenario\":\"fanout\""), "{json}");
    assert_eq!(json.matches("\"error\":null").count(), 4, "{json}");
    for png in ["fanout-time.png", "fanout-rss.png"] {
        let bytes = std::fs::read(quick.charts.path().join(png)).unwrap_or_else(|e| panic!("{png}: {e}\n{stderr}"));
        assert!(bytes.starts_with(b"\x89PNG"), "{png} is not a PNG");
    }
}

#[test]
fn handshake_quick_connects_every_peer_on_both_links() {
    if let Some(why) = common::namespaces_unavailable("handshake") {
        eprintln!("skipped: {why}");
        return;
    }
    let quick = common::run_quick("handshake");
    let (stdout, stderr) = (&quick.ran.stdout, &quick.ran.stderr);
    for link in ["| 50 ms · 0% |", "| 250 ms · 0.7% |"] {
        for n in [3, 10] {
            let prefix = format!("{link} {n} | manyfold group (GroupConfig defaults) |");
            let line = stdout.lines().find(|l| l.starts_with(&prefix));
            let line = line.unwrap_or_else(|| panic!("no row {prefix}:\n{stdout}\n{stderr}"));
            assert!(line.contains("| 5 of 5 |"), "every connect brought all {n} up: {line}");
        }
    }
    assert!(stdout.contains("Target, group handshake median ≤ 1.1 RTT"), "{stdout}");
    let json = &quick.json;
    assert!(json.starts_with("{\"scenario\":\"handshake\""), "{json}");
    assert!(!json.contains("\"error\":\""), "{json}");
    let png = quick.charts.path().join("handshake-time.png");
    assert!(std::fs::read(&png).unwrap_or_default().starts_with(b"\x89PNG"), "no chart\n{stderr}");
    common::assert_namespaces_removed(quick.ran.pid);
}
