//! CI's short run of the `sessions` scenario (`--quick`: 1,000 sessions at
//! concurrency 100, the size and RTO sweeps with 200 requests each, two
//! holds of 10,000 idle sessions, one repetition) on 127.0.0.1: every row of
//! every part ran, every session was answered with its request reversed
//! (0 failures), the targets' lines, the JSON and the charts. Proves the
//! harness, not a rate (BENCH.md). Needs no root.

// Not every helper of `common` is used here (no namespaces).
#[allow(dead_code)]
mod common;

/// The table line starting with `prefix`, with numbers in every column.
fn line<'a>(stdout: &'a str, stderr: &str, prefix: &str) -> &'a str {
    let line = stdout.lines().find(|l| l.starts_with(prefix));
    let line = line.unwrap_or_else(|| panic!("no row {prefix}:\n{stdout}\n{stderr}"));
    assert!(!line.contains("NaN") && !line.contains("inf"), "{line}");
    line
}

#[test]
fn sessions_quick_answers_every_session_on_every_row() {
    let quick = common::run_quick("sessions");
    let (stdout, stderr) = (&quick.ran.stdout, &quick.ran.stderr);
    // Runs, then four figures, then the failures: "1 of 1 | … | 0 |".
    let no_failures = |l: &str| {
        let cells: Vec<&str> = l.split('|').map(str::trim).collect();
        let runs = cells.iter().position(|c| *c == "1 of 1").unwrap_or_else(|| panic!("not one run: {l}"));
        assert_eq!(cells[runs + 6], "0", "failures in {l}");
    };
    no_failures(line(stdout, stderr, "| 1000 | 100 | kernel TCP, 64 client addresses |"));
    no_failures(line(stdout, stderr, "| 1000 | 100 | manyfold, inline handler |"));
    for row in ["manyfold", "kernel TCP"] {
        no_failures(line(stdout, stderr, &format!("| 1000 | 100 | {row} |")));
        for size in ["64 B", "256 B", "1 KiB", "4 KiB", "16 KiB"] {
            no_failures(line(stdout, stderr, &format!("| {size} | {row} |")));
        }
    }
    no_failures(line(stdout, stderr, "| – | – | 0% | kernel TCP"));
    for loss in ["0%", "2%"] {
        for rto in ["| 5 | 1000 |", "| 20 | 1000 |", "| 200 | 1000 |", "| 20 | 200 |", "| 20 | 3000 |"] {
            no_failures(line(stdout, stderr, &format!("{rto} {loss} | manyfold |")));
        }
    }
    for hello in [0, 16] {
        let hold = line(stdout, stderr, &format!("| 10000 | {hello} | 10000 | 10000 | 0 |"));
        assert!(hold.split('|').count() > 12, "{hold}");
    }
    for target in [
        "Target, manyfold ≥ 3× TCP's requests/s",
        "Target, no failures: 0 of 3000 manyfold sessions failed (met)",
        "Target (issue 21), manyfold with an inline handler ≥ 1.5× TCP's requests/s",
        "Target, memory per idle session ≤ 4 KiB",
    ] {
        assert!(stdout.contains(target), "no line {target:?}:\n{stdout}");
    }
    let json = &quick.json;
    assert!(json.starts_with("{\"scenario\":\"sessions\""), "{json}");
    // 3 grid + the 0-RTT tokens and inline handler rows + 2 link runs (with
    // and without tokens) + 10 sizes + 11 rto runs + two holds, none failed.
    assert_eq!(json.matches("\"error\":null").count(), 30, "{json}");
    assert_eq!(json.matches("\"failures\":0,").count(), 30, "{json}");
    for png in ["sessions-rate.png", "sessions-p99.png", "sessions-sizes.png"] {
        let bytes = std::fs::read(quick.charts.path().join(png)).unwrap_or_else(|e| panic!("{png}: {e}\n{stderr}"));
        assert!(bytes.starts_with(b"\x89PNG"), "{png} is not a PNG");
    }
}
