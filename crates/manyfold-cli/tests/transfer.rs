//! `manyfold send` / `manyfold recv` end to end on 127.0.0.1: the file
//! arrives intact (with and without emulated loss), refusals are explained
//! to the sender and leave nothing behind, and errors name their cause.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{entries, manyfold, run_args, samplegen, Running};

const LIMIT: Duration = Duration::from_secs(90);

/// Starts `manyfold recv --once` into `dir` on a free port.
fn recv_once(dir: &Path, extra: &[&str]) -> (Running, String) {
    let mut cmd = manyfold();
    cmd.args(["recv", "--listen", "127.0.0.1:0", "--once", "--dir"]).arg(dir).args(extra);
    let mut recv = Running::spawn(cmd);
    let addr = recv.listening_addr().to_string();
    (recv, addr)
}

fn send(file: &Path, addr: &str, extra: &[&str]) -> common::Output {
    let mut args = vec!["send", file.to_str().unwrap(), "--to", addr];
    args.extend_from_slice(extra);
    run_args(&args, LIMIT)
}

fn round_trip(size: &str, sender_flags: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("sample.bin");
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    samplegen(&src, size, 42);

    let (recv, addr) = recv_once(&inbox, &[]);
    let sent = send(&src, &addr, sender_flags);
    sent.assert_success();
    let received = recv.wait(LIMIT);
    received.assert_success();

    assert_eq!(entries(&inbox), ["sample.bin"], "only the final file is left");
    assert!(
        std::fs::read(&src).unwrap() == std::fs::read(inbox.join("sample.bin")).unwrap(),
        "the received file differs from the original"
    );
    let hash = blake3::hash(&std::fs::read(&src).unwrap()).to_hex().to_string();
    for (side, out) in [("sender", &sent), ("receiver", &received)] {
        assert!(out.stdout.contains(&hash), "{side} report lacks the BLAKE3 hash\n{out}");
        assert!(out.stdout.contains("goodput"), "{side} report lacks goodput\n{out}");
        assert!(out.stdout.contains("retransmissions"), "{side} report lacks retransmissions\n{out}");
        assert!(out.stdout.contains("loss seen"), "{side} report lacks loss\n{out}");
        assert!(out.stdout.contains("srtt"), "{side} report lacks RTT\n{out}");
    }
}

#[test]
fn file_arrives_intact() {
    round_trip("3MB", &[]);
}

#[test]
fn file_arrives_intact_through_five_percent_loss() {
    round_trip("1MB", &["--loss", "5"]);
}

#[test]
fn empty_file_arrives() {
    round_trip("0", &[]);
}

#[test]
fn bad_names_are_refused_by_the_sender_and_nothing_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("sample.bin");
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    samplegen(&src, "10k", 1);

    // The sender refuses them itself; the receiver's own refusal of such
    // paths is shown in tests/tree.rs (a sender that lists them anyway).
    let (recv, addr) = recv_once(&inbox, &[]);
    for (name, why) in [("../escape.bin", "path separator"), ("..", "not a file name")] {
        let sent = send(&src, &addr, &["--name", name]);
        sent.assert_failure();
        assert!(sent.stderr.contains("name refused"), "{sent}");
        assert!(sent.stderr.contains(why), "{sent}");
    }
    drop(recv);
    assert!(entries(&inbox).is_empty(), "left behind: {:?}", entries(&inbox));
    assert!(!tmp.path().join("escape.bin").exists());
}

#[test]
fn existing_file_is_refused_unless_overwrite() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("report.bin");
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    samplegen(&src, "100k", 3);
    std::fs::write(inbox.join("report.bin"), b"precious").unwrap();

    let (recv, addr) = recv_once(&inbox, &[]);
    let sent = send(&src, &addr, &[]);
    sent.assert_failure();
    assert!(sent.stderr.contains("file exists: report.bin"), "{sent}");
    assert!(sent.stderr.contains("--overwrite"), "{sent}");
    recv.wait(LIMIT).assert_failure();
    assert_eq!(std::fs::read(inbox.join("report.bin")).unwrap(), b"precious");
    assert_eq!(entries(&inbox), ["report.bin"]);

    let (recv, addr) = recv_once(&inbox, &["--overwrite"]);
    send(&src, &addr, &[]).assert_success();
    recv.wait(LIMIT).assert_success();
    assert_eq!(std::fs::read(inbox.join("report.bin")).unwrap(), std::fs::read(&src).unwrap());
    assert_eq!(entries(&inbox), ["report.bin"]);
}

#[test]
fn receiver_serves_several_senders_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    let mut cmd = manyfold();
    cmd.args(["recv", "--listen", "127.0.0.1:0", "--dir"]).arg(&inbox);
    let mut recv = Running::spawn(cmd);
    let addr = recv.listening_addr().to_string();

    let senders: Vec<Running> = (0..3)
        .map(|i| {
            let src = tmp.path().join(format!("f{i}.bin"));
            samplegen(&src, "1MB", i);
            let mut cmd = manyfold();
            cmd.arg("send").arg(&src).args(["--to", &addr]);
            Running::spawn(cmd)
        })
        .collect();
    for sender in senders {
        sender.wait(LIMIT).assert_success();
    }
    let out = recv.kill();
    assert_eq!(entries(&inbox), ["f0.bin", "f1.bin", "f2.bin"], "{out}");
    for i in 0..3 {
        let name = format!("f{i}.bin");
        assert_eq!(std::fs::read(inbox.join(&name)).unwrap(), std::fs::read(tmp.path().join(&name)).unwrap());
    }
}

#[test]
fn sending_a_missing_file_fails_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-file.bin");
    let out = send(&missing, "127.0.0.1:9", &[]);
    out.assert_failure();
    assert!(out.stderr.contains("cannot open"), "{out}");
    assert!(out.stderr.contains("no-such-file.bin"), "{out}");
    assert!(out.stderr.contains("No such file"), "{out}");
}

#[test]
fn sending_to_nobody_fails_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("sample.bin");
    samplegen(&src, "1k", 1);
    // A port that was free a moment ago: nothing answers there.
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let out = send(&src, &format!("127.0.0.1:{port}"), &[]);
    out.assert_failure();
    assert!(out.stderr.contains(&format!("cannot connect to 127.0.0.1:{port}")), "{out}");
}

#[test]
fn receiver_reports_address_in_use_and_missing_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap().to_string();
    let out = run_args(&["recv", "--listen", &addr, "--dir", tmp.path().to_str().unwrap()], LIMIT);
    out.assert_failure();
    assert!(out.stderr.contains("cannot bind"), "{out}");
    assert!(out.stderr.contains(&addr), "{out}");
    assert!(out.stderr.contains("in use"), "{out}");

    let missing = tmp.path().join("nope");
    let out = run_args(&["recv", "--listen", "127.0.0.1:0", "--dir", missing.to_str().unwrap()], LIMIT);
    out.assert_failure();
    assert!(out.stderr.contains("cannot use"), "{out}");
    assert!(out.stderr.contains("No such file"), "{out}");
}

#[test]
fn loss_must_be_a_percentage_below_100() {
    for (flag, why) in [
        ("--loss=100", "below 100"),
        ("--loss=-3", "at least 0"),
        ("--loss=lots", "not a number"),
        ("--loss=150%", "below 100"),
    ] {
        let out = run_args(&["send", "x", "--to", "127.0.0.1:9", flag], LIMIT);
        out.assert_failure();
        assert!(out.stderr.contains("--loss") && out.stderr.contains(why), "{flag}: {out}");
    }
    let out = run_args(&["demo", "--loss", "-3"], LIMIT);
    out.assert_failure();
    assert!(out.stderr.contains("at least 0"), "{out}");
}
