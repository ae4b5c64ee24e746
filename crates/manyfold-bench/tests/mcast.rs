//! CI's short run of the `mcast` scenario (`--quick`: N = 1 and 3, 8 MiB,
//! one repetition, every setup): the bridged namespaces, tbf, the nftables
//! loss and counters, the smcroute router, one transfer per row (manyfold,
//! and uftp and udpcast where installed) with every receiver's copy checked
//! by BLAKE3, the table, the targets' lines, the JSON, and the cleanup.
//! Proves the harness, not a speed (BENCH.md). Needs root; skips with the
//! reason otherwise.

mod common;

use std::path::Path;

fn installed(program: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|d| d.join(program).is_file())
}

#[test]
fn mcast_quick_delivers_verified_copies_on_every_row_and_cleans_up() {
    if let Some(why) = common::namespaces_unavailable("mcast") {
        eprintln!("skipped: {why}");
        return;
    }
    for tool in ["nft", "tc", "ss"] {
        if !installed(tool) {
            eprintln!("skipped: `{tool}` is not installed");
            return;
        }
    }
    let bench = env!("CARGO_BIN_EXE_manyfold-bench");
    let manyfold = Path::new(bench).parent().unwrap().join("manyfold");
    if !manyfold.exists() {
        eprintln!("skipped: {} not built; run `cargo test --workspace`", manyfold.display());
        return;
    }
    let json = tempfile::NamedTempFile::new().unwrap();
    let ran = common::run_bench(&[
        "mcast".as_ref(),
        "--quick".as_ref(),
        "--manyfold".as_ref(),
        manyfold.as_os_str(),
        "--json".as_ref(),
        json.path().as_os_str(),
    ]);
    let (stdout, stderr) = (&ran.stdout, &ran.stderr);
    // The anchors are other people's programs: on a loaded two-core
    // machine udpcast has left a receiver running after its sender; such a
    // run is reported as failed (and the bench exits non-zero), which
    // proves the harness as well. manyfold's rows must all deliver.
    let failed: Vec<&str> = stdout.lines().chain(stderr.lines()).filter(|l| l.contains(": FAILED")).collect();
    assert!(ran.ok || failed.iter().all(|l| !l.contains(" manyfold rep ")), "bench failed:\n{stdout}\n{stderr}");
    let mut rows = vec!["manyfold"];
    if installed("uftp") && installed("uftpd") {
        rows.extend(["uftp (TFMCC)", "uftp (fixed rate = bottleneck)"]);
    } else {
        assert!(stdout.contains("uftp (TFMCC): skipped:"), "{stdout}");
    }
    if installed("udp-sender") && installed("udp-receiver") {
        rows.push("udpcast (max-bitrate = bottleneck)");
    } else {
        assert!(stdout.contains("udpcast (max-bitrate = bottleneck): skipped:"), "{stdout}");
    }
    let mut setups = vec!["#### asym:", "#### lossy:"];
    if installed("smcrouted") {
        setups.push("#### routed:");
    } else {
        assert!(stdout.contains("routed setup: skipped:"), "{stdout}");
    }
    // Each setup's table: every row at N = 1 and 3 delivered every copy.
    for setup in &setups {
        let at = stdout.find(setup).unwrap_or_else(|| panic!("no {setup} table:\n{stdout}\n{stderr}"));
        let table: Vec<&str> = stdout[at..].lines().skip(1).skip_while(|l| !l.starts_with('|')).collect();
        let table: Vec<&str> = table.into_iter().take_while(|l| l.starts_with('|')).collect();
        for n in [1, 3] {
            for row in &rows {
                let delivered = format!("| {n} | {row} | 1 of 1 |");
                let line = table.iter().find(|l| l.starts_with(&delivered));
                if *row != "manyfold" && line.is_none() {
                    let reported = format!("| {n} | {row} | 0 of 1 |");
                    assert!(table.iter().any(|l| l.starts_with(&reported)), "{setup} no row {row}:\n{stdout}");
                    continue;
                }
                let line = line.unwrap_or_else(|| panic!("{setup} no row {delivered}:\n{stdout}\n{stderr}"));
                assert!(!line.contains("NaN") && !line.contains("inf"), "{line}");
            }
        }
    }
    for target in [
        "Target, manyfold feedback ≤ 2 packets per window per network",
        "Target, manyfold time to all ≤ uftp's",
        "Target, manyfold goodput ≥ 90% of the bottleneck",
    ] {
        assert!(stdout.contains(target), "{stdout}");
    }
    let json = std::fs::read_to_string(json.path()).unwrap();
    assert!(json.starts_with("{\"scenario\":\"mcast\""), "{json}");
    let runs = setups.len() * 2 * rows.len();
    assert_eq!(json.matches("\"error\":").count(), runs, "{json}");
    assert!(json.matches("\"error\":null").count() >= setups.len() * 2, "manyfold's runs: {json}");
    assert!(json.contains("\"feedback_per_window_per_network\":"), "{json}");
    assert!(json.contains("\"feedback_per_window_per_group\":"), "{json}");
    assert!(stdout.contains("| feedback per window per network | feedback per window per group |"), "{stdout}");
    common::assert_namespaces_removed(ran.pid);
}
