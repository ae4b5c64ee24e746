//! CI's short run of each lab scenario: proves the harness works end to end
//! (BENCH.md: speed targets live in the lab, never in timed tests).

use std::process::Command;

#[test]
fn loopback_file_scenario_runs_and_verifies() {
    let bench = env!("CARGO_BIN_EXE_manyfold-bench");
    let dir = std::path::Path::new(bench).parent().unwrap();
    let manyfold = dir.join("manyfold");
    if !manyfold.exists() {
        // `cargo test --workspace` (the README's command) builds it; a
        // package-only run may not have.
        eprintln!("skipped: {} not built; run `cargo test --workspace`", manyfold.display());
        return;
    }
    let out = Command::new(bench)
        .args(["loopback-file", "--size", "2MB", "--reps", "1", "--timeout", "60", "--manyfold"])
        .arg(&manyfold)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "bench failed: {}\n{}", stdout, String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("| manyfold (bbr, the default) |"), "{stdout}");
    assert!(stdout.contains("| kernel TCP"), "{stdout}");
}

/// The memory-to-memory loopback scenario: every row (manyfold per
/// controller, manyfold encrypted, TCP cubic and bbr, quinn, the UDP
/// ceiling) moves 2 MB once and its receiver checks the hash; the
/// encrypted row gets its cost table.
#[test]
fn loopback_scenario_runs_every_row() {
    let bench = env!("CARGO_BIN_EXE_manyfold-bench");
    let json = tempfile::NamedTempFile::new().unwrap();
    let out = Command::new(bench)
        .args(["loopback", "--size", "2MB", "--reps", "1", "--timeout", "60", "--json"])
        .arg(json.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "bench failed: {}\n{}", stdout, String::from_utf8_lossy(&out.stderr));
    for row in [
        "| manyfold (newreno) |",
        "| manyfold (cubic) |",
        "| manyfold (bbr), encrypted |",
        "| manyfold (bbr), datagrams fixed at 1452 B |",
        "| kernel TCP (cubic) |",
        "| kernel TCP (bbr) |",
        "| quinn (encrypts",
        "| raw UDP blast",
    ] {
        assert!(stdout.contains(row), "no row {row:?} in\n{stdout}");
    }
    assert!(stdout.contains("Encryption's cost") && stdout.contains("| × goodput |"), "{stdout}");
    let json = std::fs::read_to_string(json.path()).unwrap();
    assert!(json.contains("\"scenario\":\"loopback\"") && json.contains("\"row\":\"kernel TCP (bbr)\""), "{json}");
}

/// `--windows`: manyfold with each buffer size beside TCP.
#[test]
fn loopback_windows_runs() {
    let bench = env!("CARGO_BIN_EXE_manyfold-bench");
    let out = Command::new(bench)
        .args(["loopback", "--windows", "--size", "2MB", "--reps", "1", "--timeout", "60"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "bench failed: {}\n{}", stdout, String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("buffers 64 KiB |"), "{stdout}");
    assert!(stdout.contains("buffers 16 MiB |"), "{stdout}");
}

/// A receiver given the wrong hash fails the run: wrong bytes are never a number.
#[test]
fn loopback_receiver_rejects_a_wrong_hash() {
    let bench = env!("CARGO_BIN_EXE_manyfold-bench");
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let mut recv = Command::new(bench)
        .args(["tcp-mem-recv", "--listen", &addr, "--cc", "cubic", "--hash", "00", "--bytes", "100000", "--seed", "1"])
        .spawn()
        .unwrap();
    let send = Command::new(bench)
        .args(["tcp-mem-send", "--to", &addr, "--cc", "cubic", "--bytes", "100000", "--seed", "1"])
        .output()
        .unwrap();
    assert!(!recv.wait().unwrap().success(), "receiver accepted a wrong hash");
    assert!(!send.status.success(), "sender reported success without the receiver's ok");
}

/// `--sweep`: paper 00's sizes (1 to 32 MB) once each, with the linear fit.
#[test]
fn loopback_sweep_runs_and_fits() {
    let bench = env!("CARGO_BIN_EXE_manyfold-bench");
    let out = Command::new(bench).args(["loopback", "--sweep", "--reps", "1", "--timeout", "60"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "bench failed: {}\n{}", stdout, String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("| 32 |"), "{stdout}");
    assert!(stdout.contains("R²"), "{stdout}");
}
