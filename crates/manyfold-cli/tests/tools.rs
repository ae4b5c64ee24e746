//! `manyfold samplegen`, `echo-server`/`echo` and `demo`, run as a user would.

mod common;

use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use common::{entries, manyfold, run_args, samplegen, Running};

const LIMIT: Duration = Duration::from_secs(90);

#[test]
fn samplegen_writes_exact_sizes() {
    let tmp = tempfile::tempdir().unwrap();
    for (size, bytes) in [
        ("0", 0u64),
        ("4096", 4096),
        ("512k", 512_000),
        ("1KiB", 1024),
        ("2MB", 2_000_000),
        ("1MiB", 1 << 20),
        ("1.5k", 1500),
    ] {
        let path = tmp.path().join(format!("s-{size}"));
        samplegen(&path, size, 0);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), bytes, "{size}");
    }
    let names = entries(tmp.path());
    assert!(names.iter().all(|n| n.starts_with("s-")), "temporary files left: {names:?}");
}

#[test]
fn samplegen_is_deterministic_by_seed() {
    let tmp = tempfile::tempdir().unwrap();
    let [a, b, c] = ["a", "b", "c"].map(|n| tmp.path().join(n));
    samplegen(&a, "300k", 7);
    samplegen(&b, "300k", 7);
    samplegen(&c, "300k", 8);
    let a = std::fs::read(a).unwrap();
    assert_eq!(a, std::fs::read(b).unwrap(), "same seed, same bytes");
    assert_ne!(a, std::fs::read(c).unwrap(), "another seed, other bytes");
    assert!(a.iter().any(|&x| x != 0));
}

#[test]
fn samplegen_rejects_bad_sizes() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("x");
    for (bad, why) in [("10XB", "unknown unit"), ("MB", "expected a number"), ("-1", "expected a number")] {
        let out = run_args(&["samplegen", "--", bad, path.to_str().unwrap()], LIMIT);
        out.assert_failure();
        assert!(out.stderr.contains(why), "{bad}: {out}");
    }
    assert!(!path.exists());
}

fn echo_server() -> (Running, String) {
    let mut cmd = manyfold();
    cmd.args(["echo-server", "--listen", "127.0.0.1:0"]);
    let mut server = Running::spawn(cmd);
    let addr = server.listening_addr().to_string();
    (server, addr)
}

#[test]
fn echo_round_trip_from_arguments() {
    let (server, addr) = echo_server();
    let out = run_args(&["echo", &addr, "hello", "manyfold world"], LIMIT);
    out.assert_success();
    assert_eq!(out.stdout, "hello\nmanyfold world\n");
    assert!(out.stderr.contains("2 line(s) echoed"), "{out}");
    let log = server.kill();
    assert!(log.stdout.contains("connected"), "{log}");
}

#[test]
fn echo_round_trip_from_stdin_with_loss() {
    let (server, addr) = echo_server();
    let mut cmd = manyfold();
    cmd.args(["echo", &addr, "--loss", "5"]).stdin(Stdio::piped());
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let lines: String = (0..20).map(|i| format!("line {i}\n")).collect();
    child.stdin.take().unwrap().write_all(lines.as_bytes()).unwrap();
    // Wait with a deadline; kill on timeout.
    let deadline = std::time::Instant::now() + LIMIT;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("echo client did not finish");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), lines);
    drop(server);
}

#[test]
fn demo_runs() {
    let out = run_args(&["demo", "--size", "1MB"], LIMIT);
    out.assert_success();
    assert!(out.stdout.contains("verified"), "{out}");
    assert!(out.stdout.contains("cleaned up"), "{out}");
    assert!(out.stdout.contains("goodput"), "{out}");
}

#[test]
fn help_explains_every_subcommand() {
    let out = run_args(&["--help"], LIMIT);
    out.assert_success();
    for sub in ["demo", "recv", "send", "echo-server", "echo", "samplegen"] {
        assert!(out.stdout.contains(sub), "{sub} missing from --help\n{out}");
    }
    let out = run_args(&["send", "--help"], LIMIT);
    assert!(out.stdout.contains("--loss") && out.stdout.contains("[default: 0]"), "{out}");
}

#[test]
fn echo_works_with_jumbo_datagrams_on_loopback() {
    let mut cmd = manyfold();
    cmd.args(["echo-server", "--listen", "127.0.0.1:0", "--max-datagram", "9000"]);
    let mut server = Running::spawn(cmd);
    let addr = server.listening_addr().to_string();
    let line = "x".repeat(20_000);
    let out = run_args(&["echo", &addr, "--max-datagram", "9000", &line], LIMIT);
    out.assert_success();
    assert_eq!(out.stdout.trim_end(), line);
    server.kill();
}

#[test]
fn max_datagram_outside_its_range_is_refused_naming_the_range() {
    for bad in ["100", "65508", "big"] {
        let out = run_args(&["echo", "127.0.0.1:9", "--max-datagram", bad, "hello"], LIMIT);
        assert!(!out.status.success(), "{bad} accepted\n{out}");
        assert!(out.stderr.contains("--max-datagram"), "{out}");
    }
    let out = run_args(&["echo", "127.0.0.1:9", "--max-datagram", "100", "hello"], LIMIT);
    assert!(out.stderr.contains("576..=65507"), "{out}");
}
