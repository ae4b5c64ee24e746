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
    assert!(stdout.contains("| manyfold (NewReno) |"), "{stdout}");
    assert!(stdout.contains("| kernel TCP"), "{stdout}");
}
