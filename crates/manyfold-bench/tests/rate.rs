//! CI's short run of the `rate` scenario (`--quick`: 32 B and 1 KiB
//! messages, 0.5 s rate runs, 0.3 s paced runs at 10/50/90% load, one
//! repetition) on 127.0.0.1: every manyfold and TCP row delivered and
//! checked every message of every run, the tables, the targets' line, the
//! JSON and the charts. Proves the harness, not a rate (BENCH.md). Needs
//! no root.
//!
//! The Aeron row (Java, Maven, three JVMs) runs only with
//! `MANYFOLD_BENCH_AERON=1`; it is then skipped with its reason where Java
//! or Maven is missing, and that reason must be printed.

// Not every helper of `common` is used here (no namespaces).
#[allow(dead_code)]
mod common;

/// The table line starting with `prefix`, with numbers in every column.
fn line<'a>(stdout: &'a str, stderr: &str, prefix: &str) -> &'a str {
    let line = stdout.lines().find(|l| l.starts_with(prefix));
    let line = line.unwrap_or_else(|| panic!("no row {prefix}:\n{stdout}\n{stderr}"));
    assert!(!line.contains("NaN") && !line.contains("inf") && !line.contains("failed"), "{line}");
    line
}

#[test]
fn rate_quick_checks_every_message_on_every_row() {
    let aeron = std::env::var_os("MANYFOLD_BENCH_AERON").is_some_and(|v| v == "1");
    let json = tempfile::NamedTempFile::new().expect("a temporary file");
    let charts = tempfile::tempdir().expect("a temporary directory");
    let mut args = vec!["rate".to_string(), "--quick".into()];
    if aeron {
        args.extend([
            "--rows".into(),
            "manyfold,manyfold-batch,manyfold-8,manyfold-unordered,manyfold-encrypted,tcp,aeron".into(),
        ]);
        args.extend(["--aeron-pings".into(), "100".into()]);
    }
    args.extend([
        "--json".into(),
        json.path().display().to_string(),
        "--plot".into(),
        charts.path().display().to_string(),
    ]);
    let ran = common::run_bench(&args);
    let (stdout, stderr) = (&ran.stdout, &ran.stderr);
    assert!(ran.ok, "bench failed:\n{stdout}\n{stderr}");
    let rows = [
        ("manyfold, one stream", "no"),
        ("manyfold, one stream, batch API", "no"),
        ("manyfold, 8 streams", "no"),
        ("manyfold, one stream, unordered", "no"),
        ("manyfold encrypted, one stream", "yes"),
        ("kernel TCP, TCP_NODELAY", "no"),
    ];
    for size in ["32 B", "1 KiB"] {
        for (row, encrypts) in rows {
            // The rate table: one run, its encryption said.
            let l = line(stdout, stderr, &format!("| {size} | {row} | {encrypts} | 1 |"));
            assert!(l.split('|').count() > 10, "{l}");
            for load in ["10%", "50%", "90%"] {
                line(stdout, stderr, &format!("| {size} | {row} | {load} |"));
            }
        }
    }
    assert!(stdout.contains("Targets (issue 21), manyfold on one stream:"), "{stdout}");
    assert!(stdout.contains("nproc") && stdout.contains("load average"), "{stdout}");
    let json = std::fs::read_to_string(json.path()).expect("reading the JSON");
    assert!(json.starts_with("{\"scenario\":\"rate\""), "{json}");
    // Two sizes × six rows: a rate run and three paced runs each.
    assert_eq!(json.matches("\"messages_per_s\":").count(), 12 + if aeron { 2 } else { 0 }, "{json}");
    assert_eq!(json.matches("\"load_percent\":").count(), 36, "{json}");
    assert!(!json.contains("\"error\":\""), "{json}");
    if aeron {
        let skipped = stdout.contains("Aeron: skipped:");
        if !skipped {
            for size in ["32 B", "1 KiB"] {
                line(stdout, stderr, &format!("| {size} | Aeron 1.46.0 (its samples) | no | 1 |"));
                line(stdout, stderr, &format!("| {size} | Aeron 1.46.0 (its samples) | ping-pong"));
            }
        }
    } else {
        assert!(stdout.contains("Aeron: not run by --quick"), "{stdout}");
    }
    for png in ["rate-messages.png", "rate-p99.png"] {
        let bytes = std::fs::read(charts.path().join(png)).unwrap_or_else(|e| panic!("{png}: {e}\n{stderr}"));
        assert!(bytes.starts_with(b"\x89PNG"), "{png} is not a PNG");
    }
}
