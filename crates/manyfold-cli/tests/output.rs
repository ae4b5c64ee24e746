//! Issue 23 item 3 for `send` and `recv`: `--json` (one object per
//! transfer, every field parsed and checked), `-q` (errors only), `-v`
//! (documented logging) and `--rate` (measured within ±10% over 5 s).

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use common::{manyfold, run_args, samplegen, Running};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(60);

/// `recv --once --json` into `dir`; its first line is `{"listening": ADDR}`.
fn recv_json(dir: &Path) -> (Running, String) {
    let mut cmd = manyfold();
    cmd.args(["recv", "--listen", "127.0.0.1:0", "--once", "--json", "--dir"]).arg(dir);
    let mut p = Running::spawn(cmd);
    let line = p.wait_for_line("listening", LIMIT);
    let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    (p, v["listening"].as_str().expect("listening address").to_string())
}

/// The only line of `stdout`, parsed.
fn one_object(stdout: &str) -> Value {
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON object expected:\n{stdout}");
    serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("not JSON ({e}): {}", lines[0]))
}

fn setup(size: &str) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("f.bin");
    samplegen(&src, size, 9);
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    (tmp, src, inbox)
}

fn check_transfer(v: &Value, direction: &str, size: u64, hash: &str) {
    assert_eq!(v["direction"], direction, "{v}");
    assert_eq!(v["name"], "f.bin", "{v}");
    assert!(v["peer"].as_str().and_then(|p| p.parse::<SocketAddr>().ok()).is_some(), "{v}");
    assert_eq!(v["bytes"].as_u64(), Some(size), "{v}");
    let secs = v["seconds"].as_f64().expect("seconds");
    assert!(secs > 0.0 && secs < 60.0, "{v}");
    let goodput = v["goodput_bytes_per_second"].as_f64().expect("goodput");
    assert!((goodput - size as f64 / secs).abs() <= 1.0, "goodput is bytes / seconds: {v}");
    for counter in ["retransmissions", "retransmission_timeouts", "lost_packets", "packets_sent", "packets_received"] {
        assert!(v[counter].is_u64(), "{counter} in {v}");
    }
    assert!(v["packets_sent"].as_u64() > Some(0) && v["packets_received"].as_u64() > Some(0), "{v}");
    let (srtt, min_rtt) = (v["srtt_seconds"].as_f64().unwrap(), v["min_rtt_seconds"].as_f64().unwrap());
    assert!(min_rtt >= 0.0 && srtt >= min_rtt && srtt < 1.0, "{v}");
    assert_eq!(v["encrypted"], false, "{v}");
    assert!(v["peer_key"].is_null(), "{v}");
    assert_eq!(v["blake3"], hash, "{v}");
}

#[test]
fn send_and_recv_print_one_json_object_each_with_every_field() {
    let (_tmp, src, inbox) = setup("2MB");
    let hash = blake3::hash(&std::fs::read(&src).unwrap()).to_hex().to_string();
    let (receiver, addr) = recv_json(&inbox);
    let sent = run_args(&["send", src.to_str().unwrap(), "--to", &addr, "--json"], LIMIT);
    sent.assert_success();
    check_transfer(&one_object(&sent.stdout), "sent", 2_000_000, &hash);
    let received = receiver.wait(LIMIT);
    received.assert_success();
    // Two objects: where it listened, then the transfer.
    let (listening, report) = received.stdout.split_once('\n').expect("two lines");
    let listening: Value = serde_json::from_str(listening).unwrap();
    assert_eq!(listening["listening"], addr.as_str());
    assert_eq!(listening["dir"], inbox.to_str().unwrap());
    check_transfer(&one_object(report), "received", 2_000_000, &hash);
}

#[test]
fn group_send_prints_one_json_object_with_a_line_per_receiver() {
    let (_tmp, src, inbox) = setup("1MB");
    let (a_dir, b_dir) = common::two_dirs(&inbox);
    let ((a, a_addr), (b, b_addr)) = (recv_json(&a_dir), recv_json(&b_dir));
    let to = format!("{a_addr},{b_addr}");
    let sent = run_args(&["send", src.to_str().unwrap(), "--to", &to, "--json"], LIMIT);
    sent.assert_success();
    let v = one_object(&sent.stdout);
    assert_eq!(
        (v["name"].as_str(), v["bytes"].as_u64(), v["saved"].as_u64()),
        (Some("f.bin"), Some(1_000_000), Some(2))
    );
    assert_eq!(v["mode"], "all");
    let receivers = v["receivers"].as_array().expect("receivers");
    let addrs: Vec<&str> = receivers.iter().map(|r| r["addr"].as_str().unwrap()).collect();
    assert_eq!(addrs, [a_addr.as_str(), b_addr.as_str()]);
    for r in receivers {
        assert_eq!(r["outcome"], "saved", "{r}");
        assert!(r["detail"].as_str().unwrap().starts_with("saved f.bin"), "{r}");
        assert!(r["seconds"].as_f64().unwrap() > 0.0, "{r}");
    }
    a.wait(LIMIT).assert_success();
    b.wait(LIMIT).assert_success();
}

#[test]
fn quiet_prints_nothing_but_errors() {
    let (_tmp, src, inbox) = setup("100k");
    let (receiver, addr) = recv_json(&inbox);
    let sent = run_args(&["send", "-q", src.to_str().unwrap(), "--to", &addr], LIMIT);
    sent.assert_success();
    assert!(sent.stdout.is_empty() && sent.stderr.is_empty(), "{sent}");
    receiver.wait(LIMIT).assert_success();
    // Another file of that name (another size): refused, and the error
    // still shows. (The same file again would be skipped as already here.)
    samplegen(&src, "50k", 10);
    let (receiver, addr) = recv_json(&inbox);
    let again = run_args(&["send", "-q", src.to_str().unwrap(), "--to", &addr], LIMIT);
    again.assert_failure();
    assert!(again.stdout.is_empty() && again.stderr.contains("file exists"), "{again}");
    receiver.wait(LIMIT).assert_failure();
}

#[test]
fn verbose_logs_state_changes_and_very_verbose_every_packet() {
    let (_tmp, src, inbox) = setup("100k");
    let (receiver, addr) = recv_json(&inbox);
    let sent = run_args(&["send", "-v", src.to_str().unwrap(), "--to", &addr], LIMIT);
    sent.assert_success();
    assert!(sent.stderr.contains("ESTABLISHED") && !sent.stderr.contains("manyfold::packet"), "{sent}");
    receiver.wait(LIMIT).assert_success();
    let (receiver, addr) = recv_json(&inbox);
    let sent = run_args(&["send", "-vv", src.to_str().unwrap(), "--to", &addr, "--name", "g.bin"], LIMIT);
    sent.assert_success();
    assert!(sent.stderr.contains("manyfold::packet"), "{sent}");
    receiver.wait(LIMIT).assert_success();
}

#[test]
fn rate_caps_send_within_ten_percent_over_five_seconds() {
    // 10 MB at 2 MB/s: 5 s. The figure is the sender's own report.
    let (_tmp, src, inbox) = setup("10MB");
    let (receiver, addr) = recv_json(&inbox);
    let sent = run_args(&["send", src.to_str().unwrap(), "--to", &addr, "--rate", "16Mbit", "--json"], LIMIT);
    sent.assert_success();
    let v = one_object(&sent.stdout);
    let goodput = v["goodput_bytes_per_second"].as_f64().unwrap();
    eprintln!("--rate 16Mbit (2 MB/s): {goodput:.0} B/s over {} s", v["seconds"]);
    assert!((goodput / 2e6 - 1.0).abs() <= 0.10, "goodput {goodput:.0} B/s is not within 10% of 2 MB/s\n{v}");
    receiver.wait(LIMIT).assert_success();
}

#[test]
fn a_rate_without_a_number_is_refused_naming_the_forms() {
    let out = run_args(&["send", "x", "--to", "127.0.0.1:9", "--rate", "fast"], LIMIT);
    out.assert_failure();
    assert!(out.stderr.contains("bits per second"), "{out}");
}

/// Runs `cmd` and returns its wall time, checking it succeeded.
fn timed(cmd: std::process::Command) -> Duration {
    let start = std::time::Instant::now();
    common::run(cmd, LIMIT).assert_success();
    start.elapsed()
}

fn within_ten_percent_of_five_seconds(took: Duration, what: &str) {
    eprintln!("{what}: {took:?} (5 s expected)");
    assert!((took.as_secs_f64() / 5.0 - 1.0).abs() <= 0.10, "{what} took {took:?}, not 5 s ± 10%");
}

#[test]
fn serve_rate_caps_a_fetch_within_ten_percent_over_five_seconds() {
    // 20 MB at 32 Mbit/s (4 MB/s): 5 s, in 1 MiB segments.
    let (tmp, src, inbox) = setup("20MB");
    let served = tmp.path().join("served");
    std::fs::create_dir(&served).unwrap();
    std::fs::hard_link(&src, served.join("f.bin")).unwrap();
    let mut cmd = manyfold();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--rate", "32Mbit", "--dir"]).arg(&served);
    let mut server = Running::spawn(cmd);
    let addr = server.listening_addr().to_string();
    let mut fetch = manyfold();
    fetch.args(["fetch", "f.bin", "--from", &addr, "--out"]).arg(inbox.join("f.bin"));
    within_ten_percent_of_five_seconds(timed(fetch), "fetch from serve --rate 32Mbit");
    assert!(std::fs::read(&src).unwrap() == std::fs::read(inbox.join("f.bin")).unwrap());
}

#[test]
fn ftp_rate_caps_a_get_within_ten_percent_over_five_seconds() {
    // 10 MB at 2 MB/s: 5 s, the client reading no faster.
    let (tmp, _src, local) = setup("10MB");
    let mut cmd = manyfold();
    cmd.args(["ftp-server", "--listen", "127.0.0.1:0", "--root"]).arg(tmp.path());
    let mut server = Running::spawn(cmd);
    let addr = server.listening_addr().to_string();
    let mut get = manyfold();
    get.current_dir(&local).args(["ftp", "--rate", "2MB/s", &addr, "get", "f.bin"]);
    within_ten_percent_of_five_seconds(timed(get), "ftp --rate 2MB/s get");
    assert!(std::fs::read(tmp.path().join("f.bin")).unwrap() == std::fs::read(local.join("f.bin")).unwrap());
}

#[test]
fn fetch_rate_caps_the_total_from_two_servers_within_ten_percent_over_five_seconds() {
    // 20 MB at 32 Mbit/s (4 MB/s) from two servers together: 5 s, in
    // 256 KiB segments (the cap's grain: one segment may come at once).
    let (tmp, src, inbox) = setup("20MB");
    let mut servers = Vec::new();
    for i in 0..2 {
        let served = tmp.path().join(format!("served{i}"));
        std::fs::create_dir(&served).unwrap();
        std::fs::hard_link(&src, served.join("f.bin")).unwrap();
        let mut cmd = manyfold();
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--segment", "256KiB", "--dir"]).arg(&served);
        let mut server = Running::spawn(cmd);
        let addr = server.listening_addr().to_string();
        servers.push((server, addr));
    }
    let from = format!("{},{}", servers[0].1, servers[1].1);
    let out = inbox.join("f.bin");
    let got = run_args(
        &["fetch", "f.bin", "--from", &from, "--rate", "32Mbit", "--json", "--out", out.to_str().unwrap()],
        LIMIT,
    );
    got.assert_success();
    let v = one_object(&got.stdout);
    let goodput = v["goodput_bytes_per_second"].as_f64().unwrap();
    eprintln!("fetch --rate 32Mbit (4 MB/s) from two servers: {goodput:.0} B/s over {} s", v["seconds"]);
    assert!((goodput / 4e6 - 1.0).abs() <= 0.10, "goodput {goodput:.0} B/s is not within 10% of 4 MB/s\n{v}");
    let served: Vec<u64> = v["servers"].as_array().unwrap().iter().map(|s| s["bytes"].as_u64().unwrap()).collect();
    assert!(served.iter().all(|&b| b > 0), "both servers served part of it, the cap on their sum: {v}");
    assert!(std::fs::read(&src).unwrap() == std::fs::read(&out).unwrap());
}

#[test]
fn rate_caps_a_tree_sent_to_a_group_within_ten_percent_over_five_seconds() {
    // Two files of 5 MB to two receivers at 2 MB/s: 5 s, the same bytes
    // reaching both (the cap is on what the sender hands the group).
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("t");
    std::fs::create_dir(&tree).unwrap();
    samplegen(&tree.join("a.bin"), "5MB", 21);
    samplegen(&tree.join("b.bin"), "5MB", 22);
    let (a_dir, b_dir) = common::two_dirs(tmp.path());
    let (a, a_addr) = common::recv_into(&a_dir, &["--once"]);
    let (b, b_addr) = common::recv_into(&b_dir, &["--once"]);
    let to = format!("{a_addr},{b_addr}");
    let sent = run_args(&["send", tree.to_str().unwrap(), "--to", &to, "--rate", "16Mbit", "--json"], LIMIT);
    sent.assert_success();
    let v = one_object(&sent.stdout);
    let (bytes, secs) = (v["bytes"].as_f64().unwrap(), v["seconds"].as_f64().unwrap());
    eprintln!("group send of a tree, --rate 16Mbit (2 MB/s): {:.0} B/s over {secs:.2} s", bytes / secs);
    assert_eq!(bytes, 10e6, "{v}");
    assert!((bytes / secs / 2e6 - 1.0).abs() <= 0.10, "{:.0} B/s is not within 10% of 2 MB/s\n{v}", bytes / secs);
    a.wait(LIMIT).assert_success();
    b.wait(LIMIT).assert_success();
    assert_eq!(std::fs::read(a_dir.join("t/b.bin")).unwrap(), std::fs::read(tree.join("b.bin")).unwrap());
}
