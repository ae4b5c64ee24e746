//! Issue 23 item 4: each defect found by trying the tool as a new user
//! would, reproduced on 127.0.0.1 and shown fixed — long legal names, a
//! receiving directory that cannot be written, a second sender to a
//! `--once` receiver, names with control characters on the ftp server,
//! and `manyfold trace` into a closed pipe.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{entries, manyfold, run_args, samplegen, Running};

const LIMIT: Duration = Duration::from_secs(60);

fn recv(dir: &Path, flags: &[&str]) -> (Running, String) {
    let mut cmd = manyfold();
    cmd.args(["recv", "--listen", "127.0.0.1:0", "--dir"]).arg(dir).args(flags);
    let mut p = Running::spawn(cmd);
    let addr = p.listening_addr().to_string();
    (p, addr)
}

#[test]
fn a_name_of_255_bytes_arrives_under_that_name() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("s.bin");
    samplegen(&src, "100k", 1);
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    // 255 bytes: the longest name the file system takes; its temporary
    // file's name must not be what overflows.
    let name = format!("{}.bin", "n".repeat(251));
    let (receiver, addr) = recv(&inbox, &["--once"]);
    let sent = run_args(&["send", src.to_str().unwrap(), "--to", &addr, "--name", &name], LIMIT);
    sent.assert_success();
    receiver.wait(LIMIT).assert_success();
    assert_eq!(entries(&inbox), vec![name.clone()]);
    assert!(std::fs::read(&src).unwrap() == std::fs::read(inbox.join(&name)).unwrap());
}

#[test]
fn recv_refuses_a_directory_it_cannot_write_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("locked");
    std::fs::create_dir(&dir).unwrap();
    // Root writes through permission bits; an immutable directory stops
    // even root (ext4, xfs, btrfs). Without chattr there is nothing to test.
    let locked = Command::new("chattr").arg("+i").arg(&dir).status().is_ok_and(|s| s.success());
    if !locked {
        eprintln!("skipped: chattr +i is not available here, so no directory is unwritable to root");
        return;
    }
    struct Unlock<'a>(&'a Path);
    impl Drop for Unlock<'_> {
        fn drop(&mut self) {
            let _ = Command::new("chattr").arg("-i").arg(self.0).status();
        }
    }
    let _unlock = Unlock(&dir);
    let out = run_args(&["recv", "--listen", "127.0.0.1:0", "--dir", dir.to_str().unwrap()], LIMIT);
    out.assert_failure();
    assert!(out.stderr.contains("cannot write into"), "{out}");
    assert!(!out.stdout.contains("listening on"), "it must fail before listening\n{out}");
}

#[test]
fn a_second_sender_to_a_once_receiver_is_refused_and_logged() {
    let tmp = tempfile::tempdir().unwrap();
    let (big, small) = (tmp.path().join("big.bin"), tmp.path().join("small.bin"));
    samplegen(&big, "40MB", 1);
    samplegen(&small, "10k", 2);
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    let (mut receiver, addr) = recv(&inbox, &["--once", "--delay", "200"]);
    let mut first = manyfold();
    first.args(["send"]).arg(&big).args(["--to", &addr]);
    let first = Running::spawn(first);
    receiver.wait_for_line("receiving big.bin", LIMIT);
    let second = run_args(&["send", small.to_str().unwrap(), "--to", &addr], Duration::from_secs(20));
    second.assert_failure();
    assert!(second.stderr.contains("busy") && second.stderr.contains("--once"), "{second}");
    first.wait(LIMIT).assert_success();
    let out = receiver.wait(LIMIT);
    out.assert_success();
    assert!(out.stderr.contains("refused a second sender"), "{out}");
    assert_eq!(entries(&inbox), ["big.bin"]);
}

struct FtpServer {
    _proc: Running,
    addr: String,
}

fn ftp_server(root: &Path) -> FtpServer {
    let mut cmd = manyfold();
    cmd.args(["ftp-server", "--listen", "127.0.0.1:0", "--root"]).arg(root);
    let mut proc = Running::spawn(cmd);
    let addr = proc.listening_addr().to_string();
    FtpServer { _proc: proc, addr }
}

#[test]
fn ftp_refuses_names_with_control_characters_and_lists_old_ones_escaped() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, local) = (tmp.path().join("root"), tmp.path().join("local"));
    std::fs::create_dir(&root).unwrap();
    std::fs::create_dir(&local).unwrap();
    std::fs::write(local.join("plain.txt"), b"hello").unwrap();
    // A name written before the rule, straight into the served tree.
    std::fs::write(root.join("red\x1b[31mtext\nline"), b"x").unwrap();
    let server = ftp_server(&root);
    let ftp = |words: &[&str]| {
        let mut cmd = manyfold();
        cmd.current_dir(&local).arg("ftp").arg(&server.addr).args(words);
        common::run(cmd, LIMIT)
    };
    let put = ftp(&["put", "plain.txt", "evil\x1b]0;owned\x07.txt"]);
    put.assert_failure();
    assert!(put.stderr.contains("control character"), "{put}");
    let mkdir = ftp(&["mkdir", "two\nlines"]);
    mkdir.assert_failure();
    assert!(mkdir.stderr.contains("control character"), "{mkdir}");
    let ls = ftp(&["ls"]);
    ls.assert_success();
    assert!(!ls.stdout.contains('\x1b') && !ls.stdout.contains("text\nline"), "raw control characters: {ls}");
    assert!(ls.stdout.contains("red\\u{1b}[31mtext\\nline"), "the old name is shown escaped\n{ls}");
    assert_eq!(entries(&root).len(), 1, "nothing was created");
}

#[test]
fn trace_into_a_closed_pipe_ends_quietly_and_still_draws() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, inbox, qlog) = (tmp.path().join("s.bin"), tmp.path().join("inbox"), tmp.path().join("qlog"));
    samplegen(&src, "200k", 1);
    std::fs::create_dir(&inbox).unwrap();
    let (receiver, addr) = recv(&inbox, &["--once"]);
    let qlog_dir = qlog.to_str().unwrap();
    run_args(&["send", src.to_str().unwrap(), "--to", &addr, "--qlog", qlog_dir], LIMIT).assert_success();
    receiver.wait(LIMIT).assert_success();
    let trace = std::fs::read_dir(&qlog).unwrap().next().unwrap().unwrap().path();
    let png = tmp.path().join("t.png");
    let script = format!(
        "set -o pipefail; {} trace {} --plot {} | head -c 1 >/dev/null",
        env!("CARGO_BIN_EXE_manyfold"),
        trace.display(),
        png.display()
    );
    let out = Command::new("bash").args(["-c", &script]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "status {:?}\n{stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(std::fs::metadata(&png).is_ok_and(|m| m.len() > 0), "the plot is drawn all the same");
}

#[test]
fn bad_flag_values_are_named_for_what_they_are() {
    let delay = run_args(&["send", "x", "--to", "127.0.0.1:9", "--delay", "-5"], LIMIT);
    delay.assert_failure();
    assert!(delay.stderr.contains("-5 ms is out of range"), "{delay}");

    let tmp = tempfile::tempdir().unwrap();
    let segment = run_args(&["serve", "--dir", tmp.path().to_str().unwrap(), "--segment", "1KiB"], LIMIT);
    segment.assert_failure();
    assert!(segment.stderr.contains("--segment 1.02 kB (1024 bytes) is out of range"), "{segment}");
    assert!(!segment.stderr.contains("MB bytes"), "{segment}");

    // A well-formed HOST:PORT whose name does not resolve (.invalid never does).
    let file = tmp.path().join("x");
    std::fs::write(&file, b"x").unwrap();
    let dns = run_args(&["send", file.to_str().unwrap(), "--to", "no-such-host.invalid:7008"], LIMIT);
    dns.assert_failure();
    assert!(dns.stderr.contains("cannot resolve the host name"), "{dns}");
    assert!(!dns.stderr.contains("expected HOST:PORT"), "{dns}");
    let garbage = run_args(&["send", file.to_str().unwrap(), "--to", "just-a-name"], LIMIT);
    garbage.assert_failure();
    assert!(garbage.stderr.contains("expected HOST:PORT"), "{garbage}");
}

#[test]
fn help_groups_the_network_options_once_under_their_heading() {
    let help = run_args(&["send", "--help"], LIMIT);
    help.assert_success();
    let (own, network) = help.stdout.split_once("Network options").expect("a Network options heading");
    assert!(own.contains("--rate") && own.contains("--to"), "{help}");
    for flag in ["--loss", "--delay", "--trace", "--qlog", "--key-file", "--peer-timeout", "--json"] {
        assert!(network.contains(flag) && !own.contains(&format!("  {flag}")), "{flag}\n{help}");
    }
}
