//! Issue 23 item 2: `send`/`recv` resume. A transfer killed (`kill -9`)
//! on either side leaves its partial file; the same send again moves only
//! the rest (the `resumed_bytes` of `--json`); a changed source starts
//! over; partial files nobody came back for go after `--partial-max-age`.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{entries, manyfold, recv_into as recv, run_args, samplegen, signal, Running};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(90);

/// Starts a paced send of `src` to `addr` (3 MB/s).
fn slow_send(src: &Path, addr: &str) -> Running {
    let mut cmd = manyfold();
    cmd.args(["send", src.to_str().unwrap(), "--to", addr, "--rate", "3MB", "--peer-timeout", "3"]);
    Running::spawn(cmd)
}

/// The size of the partial file in `dir`, once it holds at least `min` bytes.
fn partial_size(dir: &Path, min: u64) -> u64 {
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        let size = entries(dir)
            .iter()
            .find(|n| n.contains(".manyfold-partial-"))
            .and_then(|n| std::fs::metadata(dir.join(n)).ok())
            .map_or(0, |m| m.len());
        if size >= min {
            return size;
        }
        assert!(std::time::Instant::now() < deadline, "no partial file of {min} bytes in {:?}", entries(dir));
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `send --json` to `addr`: its object.
fn send_json(src: &Path, addr: &str) -> Value {
    let out = run_args(&["send", src.to_str().unwrap(), "--to", addr, "--json"], LIMIT);
    out.assert_success();
    serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

fn check_resumed(v: &Value, size: u64, at_least: u64) {
    let resumed = v["resumed_bytes"].as_u64().expect("resumed_bytes");
    assert_eq!(v["bytes"].as_u64(), Some(size), "{v}");
    assert!(resumed >= at_least && resumed < size, "resumed {resumed}, expected at least {at_least}: {v}");
    let (secs, goodput) = (v["seconds"].as_f64().unwrap(), v["goodput_bytes_per_second"].as_f64().unwrap());
    assert!((goodput - (size - resumed) as f64 / secs).abs() <= 1.0, "goodput counts only what moved now: {v}");
}

/// A 12 MB sample (`seed`) paced to a receiver until the receiver holds
/// 2 MB of it: the directory, the file, the inbox, the receiver, its
/// address, the sender and the partial file's size then.
struct Midway {
    _tmp: tempfile::TempDir,
    src: std::path::PathBuf,
    inbox: std::path::PathBuf,
    receiver: Running,
    addr: String,
    sender: Running,
    held: u64,
}

fn midway(seed: u64) -> Midway {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("sample.bin");
    samplegen(&src, "12MB", seed);
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    let (receiver, addr) = recv(&inbox, &[]);
    let sender = slow_send(&src, &addr);
    let held = partial_size(&inbox, 2_000_000);
    Midway { _tmp: tmp, src, inbox, receiver, addr, sender, held }
}

#[test]
fn a_killed_sender_is_resumed_and_the_second_run_sends_only_the_rest() {
    let Midway { _tmp, src, inbox, receiver, addr, sender, held } = midway(8);
    signal(&sender, "KILL");
    drop(sender);

    let v = send_json(&src, &addr);
    check_resumed(&v, 12_000_000, held);
    assert_eq!(std::fs::read(inbox.join("sample.bin")).unwrap(), std::fs::read(&src).unwrap());
    assert_eq!(entries(&inbox), ["sample.bin"], "the partial file became the file");
    let out = receiver.kill();
    assert!(out.stdout.contains("resumed "), "the receiver's report says so too\n{out}");
}

#[test]
fn a_killed_receiver_leaves_a_partial_file_that_a_new_receiver_resumes() {
    let Midway { _tmp, src, inbox, receiver: first, addr: _, sender, held } = midway(9);
    signal(&first, "KILL");
    drop(first);
    let failed = sender.wait(LIMIT);
    failed.assert_failure();

    let (second, addr) = recv(&inbox, &["--once"]);
    let v = send_json(&src, &addr);
    check_resumed(&v, 12_000_000, held);
    second.wait(LIMIT).assert_success();
    assert_eq!(std::fs::read(inbox.join("sample.bin")).unwrap(), std::fs::read(&src).unwrap());
    assert_eq!(entries(&inbox), ["sample.bin"]);
}

/// A source directory holding `a.bin` (300 kB) and `b.bin` (12 MB), an
/// inbox, and a receiver serving it that already stored `a.bin`.
fn a_stored_before() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf, Running, String) {
    let tmp = tempfile::tempdir().unwrap();
    let (src, inbox) = (tmp.path().join("src"), tmp.path().join("inbox"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&inbox).unwrap();
    samplegen(&src.join("a.bin"), "300k", 21);
    samplegen(&src.join("b.bin"), "12MB", 22);
    let (receiver, addr) = recv(&inbox, &[]);
    run_args(&["send", src.join("a.bin").to_str().unwrap(), "--to", &addr], LIMIT).assert_success();
    (tmp, src, inbox, receiver, addr)
}

#[test]
fn a_list_sent_again_skips_a_file_already_here_whole_and_resumes_a_partial_one() {
    // The list a.bin, b.bin was interrupted in b.bin: a.bin is here whole
    // (offered whole, entry 0), b.bin partial (offered its prefix, entry 1).
    let (_tmp, src, inbox, receiver, addr) = a_stored_before();
    let (a, b) = (src.join("a.bin"), src.join("b.bin"));
    let mut cmd = manyfold();
    cmd.args(["send", a.to_str().unwrap(), b.to_str().unwrap(), "--to", &addr, "--rate", "3MB"]);
    let sender = Running::spawn(cmd);
    let held = partial_size(&inbox, 2_000_000);
    signal(&sender, "KILL");
    drop(sender);
    let out = run_args(&["send", a.to_str().unwrap(), b.to_str().unwrap(), "--to", &addr, "--json"], LIMIT);
    out.assert_success();
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"));
    assert_eq!(v["bytes"].as_u64(), Some(12_300_000), "{v}");
    let resumed = v["resumed_bytes"].as_u64().expect("resumed_bytes");
    assert!(resumed >= 300_000 + held && resumed < 12_300_000, "a.bin skipped, b.bin resumed from {held}: {v}");
    for f in ["a.bin", "b.bin"] {
        assert_eq!(std::fs::read(inbox.join(f)).unwrap(), std::fs::read(src.join(f)).unwrap(), "{f}");
    }
    assert_eq!(entries(&inbox), ["a.bin", "b.bin"], "nothing left beside them");
    drop(receiver);
}

#[test]
fn a_file_here_with_the_same_size_and_time_but_other_bytes_is_refused_and_left_as_it_was() {
    let (_tmp, src, inbox, receiver, addr) = a_stored_before();
    let here = inbox.join("a.bin");
    let mtime = std::fs::metadata(&here).unwrap().modified().unwrap();
    let mut other = std::fs::read(&here).unwrap();
    other[150_000] ^= 1;
    std::fs::write(&here, &other).unwrap();
    std::fs::File::options().write(true).open(&here).unwrap().set_modified(mtime).unwrap();
    let out = run_args(&["send", src.join("a.bin").to_str().unwrap(), "--to", &addr], LIMIT);
    out.assert_failure();
    assert!(out.stderr.contains("file exists: a.bin (its content differs from the sender's"), "{out}");
    assert_eq!(std::fs::read(&here).unwrap(), other, "the file here was not touched");
    assert_eq!(entries(&inbox), ["a.bin"], "nothing left beside it");
    drop(receiver);
}

#[test]
fn a_group_sent_again_compares_a_file_one_receiver_holds_and_stores_the_rest_everywhere() {
    // A group sends every receiver all of each file (no resume offers), so
    // the receiver that holds a.bin compares it as it arrives.
    let (tmp, src, first, receiver, addr) = a_stored_before();
    let second = tmp.path().join("second");
    std::fs::create_dir(&second).unwrap();
    let (other, other_addr) = recv(&second, &[]);
    let to = format!("{addr},{other_addr}");
    let (a, b) = (src.join("a.bin"), src.join("b.bin"));
    run_args(&["send", a.to_str().unwrap(), b.to_str().unwrap(), "--to", &to], LIMIT).assert_success();
    for dir in [&first, &second] {
        for f in ["a.bin", "b.bin"] {
            assert_eq!(std::fs::read(dir.join(f)).unwrap(), std::fs::read(src.join(f)).unwrap(), "{f}");
        }
        assert_eq!(entries(dir), ["a.bin", "b.bin"], "nothing left beside them");
    }
    drop((receiver, other));
}

#[test]
fn a_source_changed_since_the_interruption_is_sent_whole() {
    let Midway { _tmp, src, inbox, receiver, addr, sender, .. } = midway(10);
    signal(&sender, "KILL");
    drop(sender);
    // Same size, other bytes and mtime: the old partial file is not reused.
    samplegen(&src, "12MB", 11);
    let v = send_json(&src, &addr);
    assert_eq!(v["resumed_bytes"].as_u64(), Some(0), "{v}");
    assert_eq!(std::fs::read(inbox.join("sample.bin")).unwrap(), std::fs::read(&src).unwrap());
    drop(receiver);
}

#[test]
fn partial_files_older_than_partial_max_age_are_removed_and_fresh_ones_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let inbox = tmp.path();
    std::fs::create_dir(inbox.join("sub")).unwrap();
    let old = std::time::SystemTime::now() - Duration::from_secs(7200);
    for name in [".a.bin.manyfold-partial-00112233", "sub/.b.bin.manyfold-part-0123456789abcdef"] {
        let f = std::fs::File::create(inbox.join(name)).unwrap();
        f.set_len(1000).unwrap();
        f.set_modified(old).unwrap();
    }
    std::fs::write(inbox.join(".c.bin.manyfold-partial-44556677"), b"fresh").unwrap();
    let mut cmd = manyfold();
    cmd.args(["recv", "--listen", "127.0.0.1:0", "--partial-max-age", "1h", "--dir"]).arg(inbox);
    let mut receiver = Running::spawn(cmd);
    let line = receiver.wait_for_line("removed", LIMIT);
    assert!(line.contains("removed 2 partial file(s) (2.00 kB) not written for 1h"), "{line}");
    assert_eq!(entries(inbox), [".c.bin.manyfold-partial-44556677", "sub"]);
    assert!(entries(&inbox.join("sub")).is_empty());
    let bad = run_args(&["recv", "--dir", ".", "--partial-max-age", "3 weeks"], LIMIT);
    bad.assert_failure();
    assert!(bad.stderr.contains("the unit must be s, m, h or d"), "{bad}");
}
