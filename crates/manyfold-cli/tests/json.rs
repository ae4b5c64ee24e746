//! Issue 23 item 3, beyond send and recv: `fetch --json` and
//! `rr-client --json` print one object for the run, the servers their
//! address and then an object per session (rr-server one for its run),
//! `ftp --json` one per transfer, and nothing else on stdout, every
//! field parsed and checked.

mod common;

use std::time::Duration;

use common::{interrupt, manyfold, run, run_args, samplegen, Running};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(90);

/// The only line of `stdout`, parsed.
fn one_object(stdout: &str) -> Value {
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON object expected:\n{stdout}");
    serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("not JSON ({e}): {}", lines[0]))
}

#[test]
fn fetch_json_gives_the_file_and_each_server_in_one_object() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("f.bin");
    samplegen(&file, "3MB", 4);
    let mut servers = Vec::new();
    for i in 0..2 {
        let dir = tmp.path().join(format!("server{i}"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::hard_link(&file, dir.join("f.bin")).unwrap();
        let mut cmd = manyfold();
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--dir"]).arg(&dir);
        let mut server = Running::spawn(cmd);
        let addr = server.listening_addr().to_string();
        servers.push((server, addr));
    }
    let from: Vec<&str> = servers.iter().map(|(_, a)| a.as_str()).collect();
    let out_path = tmp.path().join("got.bin");
    let out =
        run_args(&["fetch", "f.bin", "--from", &from.join(","), "--out", out_path.to_str().unwrap(), "--json"], LIMIT);
    out.assert_success();
    let v = one_object(&out.stdout);
    let hash = blake3::hash(&std::fs::read(&file).unwrap()).to_hex().to_string();
    assert_eq!(std::fs::read(&out_path).unwrap(), std::fs::read(&file).unwrap());
    assert_eq!((v["direction"].as_str(), v["name"].as_str()), (Some("fetched"), Some("f.bin")), "{v}");
    assert_eq!(v["out"].as_str(), out_path.to_str(), "{v}");
    assert_eq!((v["complete"].as_bool(), v["bytes"].as_u64()), (Some(true), Some(3_000_000)), "{v}");
    let (segments, segment_size) = (v["segments"].as_u64().unwrap(), v["segment_size"].as_u64().unwrap());
    assert_eq!(segments, 3_000_000u64.div_ceil(segment_size), "{v}");
    assert_eq!(v["resumed_segments"].as_u64(), Some(0), "{v}");
    assert_eq!(v["blake3"].as_str(), Some(hash.as_str()), "{v}");
    assert_eq!(v["encrypted"], false, "{v}");
    let secs = v["seconds"].as_f64().unwrap();
    let fetched = v["fetched_bytes"].as_u64().unwrap();
    assert!(secs > 0.0 && fetched >= 3_000_000, "{v}");
    assert!((v["goodput_bytes_per_second"].as_f64().unwrap() - fetched as f64 / secs).abs() <= 1.0, "{v}");
    let list = v["servers"].as_array().expect("servers");
    assert_eq!(list.len(), 2, "{v}");
    let (mut bytes, mut segs) = (0, 0);
    for s in list {
        assert!(from.contains(&s["addr"].as_str().unwrap()), "{s}");
        assert_eq!((s["used"].as_bool(), s["failed"].is_null()), (Some(true), true), "{s}");
        for counter in ["duplicates", "timeouts"] {
            assert!(s[counter].is_u64(), "{counter} in {s}");
        }
        assert!(s["srtt_seconds"].as_f64().is_some_and(|t| (0.0..1.0).contains(&t)), "{s}");
        bytes += s["bytes"].as_u64().unwrap();
        segs += s["segments"].as_u64().unwrap();
    }
    assert_eq!((bytes, segs >= segments), (fetched, true), "the servers' bytes add up: {v}");
}

#[test]
fn rr_client_json_gives_counts_rate_and_latency_percentiles() {
    let mut cmd = manyfold();
    cmd.args(["rr-server", "--listen", "127.0.0.1:0"]);
    let mut server = Running::spawn(cmd);
    let addr = server.listening_addr().to_string();
    let out =
        run_args(&["rr-client", &addr, "--clients", "200", "--concurrency", "50", "--size", "300", "--json"], LIMIT);
    out.assert_success();
    let v = one_object(&out.stdout);
    assert_eq!(
        (v["sessions"].as_u64(), v["ok"].as_u64(), v["failures"].as_u64()),
        (Some(200), Some(200), Some(0)),
        "{v}"
    );
    assert!(v["first_failure"].is_null(), "{v}");
    let secs = v["seconds"].as_f64().unwrap();
    assert!((v["requests_per_second"].as_f64().unwrap() - 200.0 / secs).abs() < 1e-6 * 200.0 / secs + 1e-9, "{v}");
    let p = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k} in {v}"));
    let (p50, p90, p99, max) =
        (p("latency_p50_seconds"), p("latency_p90_seconds"), p("latency_p99_seconds"), p("latency_max_seconds"));
    assert!(0.0 < p50 && p50 <= p90 && p90 <= p99 && p99 <= max && max < secs + 1.0, "{v}");
    assert_eq!(v["encrypted"], false, "{v}");
    drop(server);
}

#[test]
fn serve_json_gives_its_address_then_an_object_per_session() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("served");
    std::fs::create_dir(&dir).unwrap();
    samplegen(&dir.join("f.bin"), "1MB", 6);
    let mut cmd = manyfold();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--json", "--dir", dir.to_str().unwrap()]);
    let mut server = Running::spawn(cmd);
    let first: Value = serde_json::from_str(&server.wait_for_line("listening", LIMIT)).unwrap();
    let addr = first["listening"].as_str().expect("listening address").to_string();
    assert_eq!(first["dir"].as_str(), dir.to_str(), "{first}");
    let out_path = tmp.path().join("got.bin");
    run_args(&["fetch", "f.bin", "--from", &addr, "--out", out_path.to_str().unwrap()], LIMIT).assert_success();
    let line = server.wait_for_line("\"peer\"", LIMIT);
    let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    assert!(v["peer"].as_str().is_some_and(|p| p.parse::<std::net::SocketAddr>().is_ok()), "{v}");
    assert_eq!((v["encrypted"].as_bool(), v["names"][0].as_str()), (Some(false), Some("f.bin")), "{v}");
    assert!(v["segments"].as_u64() > Some(0) && v["bytes"].as_u64() == Some(1_000_000), "{v}");
    assert!(v["seconds"].as_f64().is_some_and(|s| s > 0.0), "{v}");
    assert_eq!(v["answered"].as_array().map(Vec::len), Some(0), "{v}");
    assert!(v["ended"].is_null(), "a session closed by its client ends cleanly: {v}");
    let out = server.kill();
    for line in out.stdout.lines() {
        serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("only JSON on stdout ({e}): {line}"));
    }
}

#[test]
fn echo_json_gives_one_object_with_counts_and_round_trips_instead_of_the_lines() {
    let mut cmd = manyfold();
    cmd.args(["echo-server", "--listen", "127.0.0.1:0"]);
    let mut server = Running::spawn(cmd);
    let addr = server.listening_addr().to_string();
    let out = run_args(&["echo", &addr, "hello", "wide world", "--json"], LIMIT);
    out.assert_success();
    let v = one_object(&out.stdout);
    assert_eq!(v["peer"].as_str(), Some(addr.as_str()), "{v}");
    assert_eq!((v["lines"].as_u64(), v["bytes"].as_u64()), (Some(2), Some(17)), "two lines with their newlines: {v}");
    assert_eq!(v["encrypted"], false, "{v}");
    let t = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k} in {v}"));
    let (min, avg, max) = (t("rtt_min_seconds"), t("rtt_avg_seconds"), t("rtt_max_seconds"));
    assert!(0.0 < min && min <= avg && avg <= max && max < 5.0, "{v}");
    drop(server);
}

/// A server started with `--json`: its first line, `{"listening": ...}`,
/// parsed; and the address in it.
fn json_server(args: &[&str]) -> (Running, Value, String) {
    let mut cmd = manyfold();
    cmd.args(args).arg("--json");
    let mut server = Running::spawn(cmd);
    let line = server.wait_for_line("listening", LIMIT);
    let first: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    let addr = first["listening"].as_str().unwrap_or_else(|| panic!("no address in {first}")).to_string();
    assert!(addr.parse::<std::net::SocketAddr>().is_ok(), "{first}");
    (server, first, addr)
}

/// Every line of `stdout` parsed: nothing but JSON there.
fn all_objects(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("only JSON on stdout ({e}): {l}\n{stdout}")))
        .collect()
}

#[test]
fn echo_server_json_gives_its_address_then_an_object_per_session() {
    let (mut server, _, addr) = json_server(&["echo-server", "--listen", "127.0.0.1:0"]);
    run_args(&["echo", &addr, "hello", "wide world"], LIMIT).assert_success();
    let line = server.wait_for_line("\"peer\"", LIMIT);
    let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    assert!(v["peer"].as_str().is_some_and(|p| p.parse::<std::net::SocketAddr>().is_ok()), "{v}");
    assert_eq!((v["encrypted"].as_bool(), v["bytes"].as_u64()), (Some(false), Some(17)), "{v}");
    assert!(v["seconds"].as_f64().is_some_and(|s| s > 0.0 && s < 60.0), "{v}");
    assert!(v["ended"].is_null(), "the client closed: {v}");
    assert_eq!(all_objects(&server.kill().stdout).len(), 2, "the address and one session");
}

#[test]
fn rr_server_json_gives_its_address_then_one_object_for_its_run() {
    let (server, first, addr) = json_server(&["rr-server", "--listen", "127.0.0.1:0", "--sockets", "2"]);
    assert_eq!(first["sockets"].as_u64(), Some(2), "{first}");
    run_args(&["rr-client", &addr, "--clients", "120", "--concurrency", "20", "--size", "100"], LIMIT).assert_success();
    interrupt(&server);
    let out = server.wait(LIMIT);
    out.assert_success();
    let objects = all_objects(&out.stdout);
    assert_eq!(objects.len(), 2, "the address, then the run: {out}");
    let v = &objects[1];
    assert_eq!(v["sessions"].as_u64(), Some(120), "{v}");
    for counter in ["refused_backlog", "refused_encryption_mismatch", "cookies_rejected", "malformed_dropped"] {
        assert_eq!(v[counter].as_u64(), Some(0), "{counter} in {v}");
    }
    assert!(v["seconds"].as_f64().is_some_and(|s| s > 0.0 && s < 90.0), "{v}");
    assert_eq!(v["encrypted"], false, "{v}");
}

#[test]
fn ftp_server_json_gives_its_address_then_an_object_per_client() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, local) = (tmp.path().join("root"), tmp.path().join("local"));
    std::fs::create_dir(&root).unwrap();
    std::fs::create_dir(&local).unwrap();
    samplegen(&local.join("up.bin"), "300kB", 8);
    let root_arg = root.to_str().unwrap();
    let (mut server, first, addr) = json_server(&["ftp-server", "--listen", "127.0.0.1:0", "--root", root_arg]);
    assert_eq!((first["root"].as_str(), first["read_only"].as_bool()), (Some(root_arg), Some(false)), "{first}");
    let mut put = manyfold();
    put.current_dir(&local).args(["ftp", &addr, "put", "up.bin"]);
    run(put, LIMIT).assert_success();
    let line = server.wait_for_line("\"peer\"", LIMIT);
    let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    assert!(v["peer"].as_str().is_some_and(|p| p.parse::<std::net::SocketAddr>().is_ok()), "{v}");
    assert_eq!(v["encrypted"].as_bool(), Some(false), "{v}");
    assert!(v["requests"].as_u64().is_some_and(|n| n >= 1), "{v}");
    assert_eq!((v["bytes_in"].as_u64(), v["bytes_out"].as_u64()), (Some(300_000), Some(0)), "{v}");
    assert!(v["seconds"].as_f64().is_some_and(|s| s > 0.0 && s < 60.0), "{v}");
    assert!(v["ended"].is_null(), "the client closed: {v}");
    assert_eq!(all_objects(&server.kill().stdout).len(), 2, "the address and one client");
}

#[test]
fn ftp_json_gives_an_object_per_transfer_and_one_for_a_failed_one() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, local) = (tmp.path().join("root"), tmp.path().join("local"));
    std::fs::create_dir(&root).unwrap();
    std::fs::create_dir(&local).unwrap();
    samplegen(&root.join("a.bin"), "400kB", 9);
    samplegen(&root.join("b.bin"), "250kB", 10);
    samplegen(&local.join("up.bin"), "123456", 11);
    let mut cmd = manyfold();
    cmd.args(["ftp-server", "--listen", "127.0.0.1:0", "--root"]).arg(&root);
    let mut server = Running::spawn(cmd);
    let addr = server.listening_addr().to_string();
    let ftp = |words: &[&str]| {
        let mut cmd = manyfold();
        cmd.current_dir(&local).args(["ftp", "--json", &addr]).args(words);
        run(cmd, LIMIT)
    };
    let hash = |p: &std::path::Path| blake3::hash(&std::fs::read(p).unwrap()).to_hex().to_string();
    let got = ftp(&["mget", "*.bin"]);
    got.assert_success();
    let mut objects = all_objects(&got.stdout);
    objects.sort_by_key(|v| v["remote"].as_str().map(str::to_string));
    assert_eq!(objects.len(), 2, "one object per transfer, no summary: {got}");
    for (v, (name, size)) in objects.iter().zip([("a.bin", 400_000), ("b.bin", 250_000)]) {
        assert_eq!((v["direction"].as_str(), v["ok"].as_bool()), (Some("get"), Some(true)), "{v}");
        assert_eq!(v["remote"].as_str().map(|r| r.trim_start_matches('/')), Some(name), "{v}");
        assert!(v["local"].as_str().is_some_and(|l| l.ends_with(name)), "{v}");
        assert!(v["error"].is_null(), "{v}");
        assert_eq!((v["bytes"].as_u64(), v["resumed_bytes"].as_u64()), (Some(size), Some(0)), "{v}");
        let secs = v["seconds"].as_f64().unwrap();
        assert!(secs > 0.0 && secs < 60.0, "{v}");
        let goodput = v["goodput_bytes_per_second"].as_f64().unwrap();
        assert!((goodput - size as f64 / secs).abs() <= 1e-6 * goodput + 1e-9, "{v}");
        assert_eq!(v["blake3"].as_str(), Some(hash(&root.join(name)).as_str()), "{v}");
        assert_eq!(hash(&local.join(name)), hash(&root.join(name)));
    }
    let put = ftp(&["put", "up.bin", "/up.bin"]);
    put.assert_success();
    let v = one_object(&put.stdout);
    assert_eq!((v["direction"].as_str(), v["local"].as_str()), (Some("put"), Some("up.bin")), "{v}");
    assert_eq!(v["remote"].as_str().map(|r| r.trim_start_matches('/')), Some("up.bin"), "{v}");
    assert_eq!((v["bytes"].as_u64(), v["ok"].as_bool()), (Some(123_456), Some(true)), "{v}");
    assert_eq!(v["blake3"].as_str(), Some(hash(&local.join("up.bin")).as_str()), "{v}");
    // Already there: the object says why, the exit status says it failed.
    let refused = ftp(&["put", "up.bin", "/up.bin"]);
    refused.assert_failure();
    let v = one_object(&refused.stdout);
    assert_eq!((v["ok"].as_bool(), v["bytes"].is_null(), v["blake3"].is_null()), (Some(false), true, true), "{v}");
    assert!(v["error"].as_str().is_some_and(|e| e.contains("exists")), "{v}");
    drop(server);
}
