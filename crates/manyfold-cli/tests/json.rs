//! Issue 23 item 3, beyond send and recv: `fetch --json` and
//! `rr-client --json` print one object for the run and nothing else on
//! stdout, every field parsed and checked.

mod common;

use std::time::Duration;

use common::{manyfold, run_args, samplegen, Running};
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
