//! CI's short run of the `wan` scenario (`--quick`): the namespaces, the
//! relay, one manyfold and two kernel-TCP transfers across it, and the
//! cleanup. Proves the harness, not a speed (BENCH.md). Needs root and
//! /dev/net/tun; skips with the reason otherwise.

use std::process::Command;

fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0").unwrap_or(false)
}

#[test]
fn wan_quick_runs_verifies_and_cleans_up() {
    if !is_root() {
        eprintln!("skipped: not root (the wan scenario creates network namespaces)");
        return;
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        eprintln!("skipped: /dev/net/tun is missing");
        return;
    }
    let bench = env!("CARGO_BIN_EXE_manyfold-bench");
    let manyfold = std::path::Path::new(bench).parent().unwrap().join("manyfold");
    if !manyfold.exists() {
        eprintln!("skipped: {} not built; run `cargo test --workspace`", manyfold.display());
        return;
    }
    let child = Command::new(bench)
        .args(["wan", "--quick", "--size", "1MB", "--timeout", "20", "--manyfold"])
        .arg(&manyfold)
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
    for row in ["| manyfold", "| kernel TCP cubic |", "| kernel TCP bbr |"] {
        assert!(stdout.contains(row), "no {row} row:\n{stdout}");
    }
    // Each row moved and verified its file (no failure notes).
    assert!(!stdout.contains("+ 1 failed") && !stdout.contains("+ 1 timeout"), "{stdout}\n{stderr}");
    let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(!list.contains(&format!("mfb-{pid}-")), "namespaces left behind: {list}");
}
