//! CI's short run of the `wan` scenario (`--quick`): the namespaces, the
//! relay and its self-check, one transfer per row across it (manyfold per
//! controller, kernel TCP cubic and bbr, quinn, and KCP through kcptun when
//! kcptun is installed), the chart, and the cleanup. Proves the harness,
//! not a speed (BENCH.md). Needs root and /dev/net/tun; skips with the
//! reason otherwise.

mod common;

use std::collections::BTreeSet;
use std::process::Command;

/// Pids of running kcptun processes (to find a tunnel left behind).
fn kcptun_pids() -> BTreeSet<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return BTreeSet::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim().starts_with("kcptun"))
        })
        .collect()
}

#[test]
fn wan_quick_runs_every_row_verifies_and_cleans_up() {
    if let Some(why) = common::namespaces_unavailable("wan") {
        eprintln!("skipped: {why}");
        return;
    }
    let bench = env!("CARGO_BIN_EXE_manyfold-bench");
    let manyfold = std::path::Path::new(bench).parent().unwrap().join("manyfold");
    if !manyfold.exists() {
        eprintln!("skipped: {} not built; run `cargo test --workspace`", manyfold.display());
        return;
    }
    let kcp = common::kcptun_installed();
    let tunnels_before = kcptun_pids();
    let charts = tempfile::tempdir().unwrap();
    let child = Command::new(bench)
        .args(["wan", "--quick", "--size", "1MB", "--timeout", "20", "--manyfold"])
        .arg(&manyfold)
        .arg("--plot")
        .arg(charts.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("Emulator self-check"), "{stdout}");
    let mut rows =
        vec!["| manyfold", "| kernel TCP cubic |", "| kernel TCP bbr |", "| quinn (encrypts: TLS 1.3 via rustls) |"];
    if kcp {
        rows.push("| KCP via kcptun |");
    } else {
        // Not installed: the row is left out with its reason, not failed.
        assert!(stdout.contains("KCP via kcptun: skipped: kcptun is not installed"), "{stdout}");
        assert!(!stdout.contains("| KCP via kcptun |"), "{stdout}");
    }
    for row in rows {
        assert!(stdout.contains(row), "no {row} row:\n{stdout}");
    }
    // Each row moved and verified its file (no failure notes).
    assert!(!stdout.contains("+ 1 failed") && !stdout.contains("+ 1 timeout"), "{stdout}\n{stderr}");
    // The settings of the quinn and KCP rows are written out.
    assert!(stdout.contains("the only row that encrypts"), "{stdout}");
    if kcp {
        assert!(stdout.contains("--mode fast --crypt none --nocomp"), "{stdout}");
    }
    let chart = charts.path().join("wan-100M-50ms.png");
    let png = std::fs::read(&chart).unwrap_or_else(|e| panic!("{}: {e}\n{stderr}", chart.display()));
    assert!(png.starts_with(b"\x89PNG"), "{} is not a PNG", chart.display());
    // Nothing left behind: namespaces and tunnels.
    let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(!list.contains(&format!("mfb-{pid}-")), "namespaces left behind: {list}");
    let left: Vec<u32> = kcptun_pids().difference(&tunnels_before).copied().collect();
    assert!(left.is_empty(), "kcptun processes left behind: {left:?}");
}
