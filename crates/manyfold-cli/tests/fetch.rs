//! `manyfold serve` / `manyfold fetch` end to end on 127.0.0.1 (paper 00
//! §5.2): a file fetched from three servers arrives intact with every
//! server serving part of it; a server killed mid-way is named while the
//! others finish its segments; a server with another file of the same name
//! is left out; an interrupted (or killed) fetch resumes with what it
//! kept; unknown names and existing outputs are refused.
//!
//! The slow runs use `--delay 200` on the fetch: a 200 ms round trip makes
//! the connections' slow start, not the machine's speed, set the pace, so
//! a 40 MB fetch takes a few seconds anywhere.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{entries, interrupt, manyfold, run_args, samplegen, Output, Running};

const LIMIT: Duration = Duration::from_secs(90);

/// `n` servers on free ports, each serving a directory of its own under
/// `root` that holds `file` (hard-linked) as `name`.
fn servers(root: &Path, n: usize, file: &Path, name: &str) -> Vec<(Running, String, PathBuf)> {
    (0..n)
        .map(|i| {
            let dir = root.join(format!("server{i}"));
            std::fs::create_dir(&dir).unwrap();
            std::fs::hard_link(file, dir.join(name)).unwrap();
            let mut cmd = manyfold();
            cmd.args(["serve", "--listen", "127.0.0.1:0", "--dir"]).arg(&dir);
            let mut server = Running::spawn(cmd);
            let addr = server.listening_addr().to_string();
            (server, addr, dir)
        })
        .collect()
}

fn fetch_cmd(name: &str, from: &[&str], out: &Path, extra: &[&str]) -> Command {
    let mut cmd = manyfold();
    cmd.args(["fetch", name, "--from", &from.join(","), "--out"]).arg(out).args(extra);
    cmd
}

fn addrs(servers: &[(Running, String, PathBuf)]) -> Vec<&str> {
    servers.iter().map(|s| s.1.as_str()).collect()
}

/// The report line naming `addr`.
fn line_for<'a>(out: &'a Output, addr: &str) -> &'a str {
    out.stdout.lines().find(|l| l.contains(addr)).unwrap_or_else(|| panic!("no report line for {addr}\n{out}"))
}

/// The segment count in a report line (`... 12 segments, ...`).
fn segments_in(line: &str) -> u64 {
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| w.starts_with("segments")).unwrap_or_else(|| panic!("no count in {line:?}"));
    words[at - 1].parse().unwrap_or_else(|_| panic!("no count in {line:?}"))
}

/// A sample file and a directory to fetch into.
fn setup(size: &str, seed: u64) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("sample.bin");
    samplegen(&src, size, seed);
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    (tmp, src, inbox)
}

fn assert_same(a: &Path, b: &Path) {
    assert!(std::fs::read(a).unwrap() == std::fs::read(b).unwrap(), "{} differs from {}", a.display(), b.display());
}

#[test]
fn three_servers_each_serve_part_of_a_file_that_arrives_intact() {
    let (tmp, src, inbox) = setup("24MB", 1);
    let servers = servers(tmp.path(), 3, &src, "f.bin");
    let out = inbox.join("f.bin");
    let fetched = common::run(fetch_cmd("f.bin", &addrs(&servers), &out, &[]), LIMIT);
    fetched.assert_success();
    assert_same(&src, &out);
    assert_eq!(entries(&inbox), ["f.bin"], "no temporary file or journal is left");
    let hash = blake3::hash(&std::fs::read(&src).unwrap()).to_hex().to_string();
    assert!(fetched.stdout.contains(&hash) && fetched.stdout.contains("goodput"), "{fetched}");
    let mut total = 0;
    for (_, addr, _) in &servers {
        let line = line_for(&fetched, addr);
        assert!(line.contains("ok") && line.contains("srtt"), "{line}\n{fetched}");
        let n = segments_in(line);
        assert!(n > 0, "{addr} served nothing\n{fetched}");
        total += n;
    }
    assert_eq!(total, 23, "24 MB in segments of 1 MiB, each counted once\n{fetched}");
}

#[test]
fn a_server_killed_mid_way_is_named_and_the_file_still_arrives() {
    let (tmp, src, inbox) = setup("40MB", 2);
    let mut servers = servers(tmp.path(), 3, &src, "f.bin");
    let out = inbox.join("f.bin");
    let from = addrs(&servers).iter().map(|a| a.to_string()).collect::<Vec<_>>();
    let from: Vec<&str> = from.iter().map(String::as_str).collect();
    let mut fetch = Running::spawn(fetch_cmd("f.bin", &from, &out, &["--delay", "200"]));
    fetch.wait_for_line("fetching f.bin", Duration::from_secs(30));
    // Every server has been asked for segments; the first answers need a
    // few 200 ms round trips of slow start. Kill the last server now.
    std::thread::sleep(Duration::from_millis(300));
    let (victim, victim_addr, _) = servers.pop().unwrap();
    victim.kill();
    let fetched = fetch.wait(LIMIT);
    fetched.assert_success();
    assert_same(&src, &out);
    assert_eq!(entries(&inbox), ["f.bin"]);
    let line = line_for(&fetched, &victim_addr);
    let named = line.contains("failed: no packet for") || line.contains("failed: connection lost");
    assert!(line.contains("FAIL") && named, "{line}\n{fetched}");
    assert!(fetched.stderr.contains(&format!("server {victim_addr} failed")), "{fetched}");
    // The summary does not count the failed server among those it came from.
    assert!(fetched.stdout.contains("from 2 of 3 servers (1 more failed part-way)"), "{fetched}");
    for (_, addr, _) in &servers {
        let line = line_for(&fetched, addr);
        assert!(line.contains("ok") && segments_in(line) > 0, "{line}\n{fetched}");
    }
}

#[test]
fn a_server_with_another_file_of_that_name_is_left_out() {
    let (tmp, src, inbox) = setup("6MB", 3);
    let other = tmp.path().join("other.bin");
    samplegen(&other, "6MB", 4);
    let mut servers = servers(tmp.path(), 2, &src, "f.bin");
    let odd_dir = tmp.path().join("odd");
    std::fs::create_dir(&odd_dir).unwrap();
    std::fs::hard_link(&other, odd_dir.join("f.bin")).unwrap();
    let mut cmd = manyfold();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--dir"]).arg(&odd_dir);
    let mut odd = Running::spawn(cmd);
    let odd_addr = odd.listening_addr().to_string();
    servers.insert(1, (odd, odd_addr.clone(), odd_dir));

    let out = inbox.join("f.bin");
    let fetched = common::run(fetch_cmd("f.bin", &addrs(&servers), &out, &[]), LIMIT);
    fetched.assert_success();
    assert_same(&src, &out);
    let warning = format!("warning: server {odd_addr} is not used: its manifest of f.bin");
    assert!(fetched.stderr.contains(&warning) && fetched.stderr.contains("differs from the majority"), "{fetched}");
    let line = line_for(&fetched, &odd_addr);
    assert!(line.contains("FAIL") && line.contains("not used"), "{line}");
    assert!(fetched.stdout.contains("from 2 of 3 servers"), "{fetched}");

    // One against one: no majority, nothing written.
    let alone = inbox.join("g.bin");
    let pair = [servers[0].1.as_str(), odd_addr.as_str()];
    let refused = common::run(fetch_cmd("f.bin", &pair, &alone, &[]), LIMIT);
    refused.assert_failure();
    assert!(refused.stderr.contains("no majority decides"), "{refused}");
    assert_eq!(entries(&inbox), ["f.bin"]);
}

/// Starts a slow fetch of 48 MB from three servers, stops it with `stop`
/// once its journal shows verified segments, then fetches again and
/// checks that it resumed from them.
fn resume_after(stop: impl FnOnce(Running) -> Output, how: &str) {
    const COUNT: u32 = 46; // 48 MB in segments of 1 MiB
    let (tmp, src, inbox) = setup("48MB", 5);
    let servers = servers(tmp.path(), 3, &src, "f.bin");
    let out = inbox.join("f.bin");
    let mut fetch = Running::spawn(fetch_cmd("f.bin", &addrs(&servers), &out, &["--delay", "200"]));
    fetch.wait_for_line("fetching f.bin", Duration::from_secs(30));
    // The journal is first written with the first verified segment.
    let journal = inbox.join(".f.bin.manyfold-fetch");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !journal.exists() {
        assert!(Instant::now() < deadline, "{how}: no journal within 30 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    let stopped = stop(fetch);
    assert!(!stopped.status.success(), "{how}: the first fetch must not finish\n{stopped}");
    assert_eq!(
        entries(&inbox),
        [".f.bin.manyfold-fetch", ".f.bin.manyfold-fetch-part"],
        "{how}: the data and its journal are kept\n{stopped}"
    );

    let again = common::run(fetch_cmd("f.bin", &addrs(&servers), &out, &[]), LIMIT);
    again.assert_success();
    let resumed = again.stdout.lines().find(|l| l.starts_with("resuming")).unwrap_or_else(|| panic!("{how}: {again}"));
    let kept: u32 = resumed.split(": ").nth(1).and_then(|r| r.split(' ').next()).unwrap().parse().unwrap();
    assert!(kept > 0 && kept < COUNT, "{how}: {resumed}");
    assert!(resumed.ends_with(&format!("{kept} of {COUNT} segments already verified")), "{how}: {resumed}");
    let fetched: u64 = addrs(&servers).iter().map(|a| segments_in(line_for(&again, a))).sum();
    assert_eq!(fetched, u64::from(COUNT - kept), "{how}: only the missing segments are fetched\n{again}");
    assert_same(&src, &out);
    assert_eq!(entries(&inbox), ["f.bin"], "{how}: the journal and the data file are gone");
}

#[test]
fn an_interrupted_fetch_resumes_with_the_segments_it_kept() {
    resume_after(
        |fetch| {
            interrupt(&fetch);
            let out = fetch.wait(Duration::from_secs(20));
            assert!(out.stderr.contains("interrupted") && out.stderr.contains("run the same command again"), "{out}");
            out
        },
        "Ctrl-C",
    );
}

#[test]
fn a_killed_fetch_resumes_from_its_last_journal() {
    resume_after(Running::kill, "SIGKILL");
}

#[test]
fn unknown_names_and_existing_outputs_are_refused() {
    let (tmp, src, inbox) = setup("10k", 6);
    let servers = servers(tmp.path(), 1, &src, "f.bin");
    let from = addrs(&servers);

    let missing = common::run(fetch_cmd("nope.bin", &from, &inbox.join("nope.bin"), &[]), LIMIT);
    missing.assert_failure();
    assert!(missing.stderr.contains("no server can serve nope.bin") && missing.stderr.contains("not found: nope.bin"));
    assert!(entries(&inbox).is_empty(), "nothing written: {:?}", entries(&inbox));

    // Refused before any network work: nothing listens on port 9, and a
    // handshake would wait 10 s for it.
    std::fs::write(inbox.join("f.bin"), b"mine").unwrap();
    let started = Instant::now();
    let exists =
        run_args(&["fetch", "f.bin", "--from", "127.0.0.1:9", "--out", inbox.join("f.bin").to_str().unwrap()], LIMIT);
    exists.assert_failure();
    assert!(exists.stderr.contains("exists (use --overwrite to replace it)"), "{exists}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());

    let bad = run_args(&["fetch", "../f.bin", "--from", "127.0.0.1:9"], LIMIT);
    bad.assert_failure();
    assert!(bad.stderr.contains("path separator"), "{bad}");

    // With --overwrite the existing file is replaced by the fetched one.
    let replaced = common::run(fetch_cmd("f.bin", &from, &inbox.join("f.bin"), &["--overwrite"]), LIMIT);
    replaced.assert_success();
    assert_same(&src, &inbox.join("f.bin"));
    assert_eq!(entries(&inbox), ["f.bin"]);
}
