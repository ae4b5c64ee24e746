//! Issue 19 items 1, 3 and 4 on real sockets (127.0.0.1): SIGINT or
//! SIGTERM on one side of send/recv, group send, fetch/serve, ftp and demo
//! is reported by the other side at once ("the sender was interrupted"),
//! which cleans up as for any failure and exits non-zero; a silent
//! receiver is given up after --peer-timeout; a receiver killed with
//! SIGKILL is named gone at once; a sender is never left waiting after a
//! `--once` receiver exits, even at 30% loss each way.
//!
//! The transfers are kept slow with `--delay 200` on the side that is not
//! interrupted (its datagrams wait 200 ms; the interrupted side's RST does
//! not), so the signal always lands mid-transfer. The target is
//! ≤ 1 s; the tests allow more for a loaded machine, always far below the
//! 15 s stall and 16 s idle timeouts the report would otherwise wait for,
//! and print the time measured.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{entries, interrupt, manyfold, samplegen, signal, two_dirs, wait_in_thread, Output, Running};

const LIMIT: Duration = Duration::from_secs(60);

/// Well under every timeout that could explain the report instead.
const REPORTED_WITHIN: Duration = Duration::from_secs(4);

const SLOW: [&str; 2] = ["--delay", "200"];

fn setup(size: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("sample.bin");
    samplegen(&src, size, 3);
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    (tmp, src, inbox)
}

fn recv(dir: &Path, flags: &[&str]) -> (Running, String) {
    let mut cmd = manyfold();
    cmd.args(["recv", "--listen", "127.0.0.1:0", "--once", "--dir"]).arg(dir).args(flags);
    let mut p = Running::spawn(cmd);
    let addr = p.listening_addr().to_string();
    (p, addr)
}

fn send(file: &Path, to: &str, flags: &[&str]) -> Running {
    let mut cmd = manyfold();
    cmd.args(["send"]).arg(file).args(["--to", to]).args(flags);
    Running::spawn(cmd)
}

/// Waits for `p`, timing it from `since`; checks it failed saying `needle`.
fn reported(p: Running, since: Instant, needle: &str, who: &str) -> Output {
    let out = p.wait(LIMIT);
    let took = since.elapsed();
    eprintln!("{who} reported it after {took:?}");
    out.assert_failure();
    assert!(out.stderr.contains(needle) || out.stdout.contains(needle), "{who} must say {needle:?}\n{out}");
    assert!(took < REPORTED_WITHIN, "{who} took {took:?} to report it\n{out}");
    out
}

/// The interrupted side's own account: exit status 130 (SIGINT) or 143
/// (SIGTERM) and a message naming the signal.
fn interrupted_itself(p: Running, name: &str, code: i32) -> Output {
    let out = p.wait(LIMIT);
    assert_eq!(out.status.code(), Some(code), "{out}");
    assert!(out.stderr.contains(&format!("interrupted by {name}")), "{out}");
    out
}

#[test]
fn an_interrupted_sender_is_reported_by_the_receiver_which_keeps_its_partial_file_for_a_resume() {
    let (_tmp, src, inbox) = setup("40MB");
    let (mut receiver, addr) = recv(&inbox, &SLOW);
    let sender = send(&src, &addr, &[]);
    receiver.wait_for_line("receiving sample.bin", LIMIT);
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    interrupt(&sender);
    let out = reported(receiver, t, "the sender was interrupted", "the receiver");
    assert_eq!(out.stderr.matches("interrupted").count(), 1, "the cause is said once\n{out}");
    interrupted_itself(sender, "SIGINT", 130);
    only_a_partial_file(&inbox);
}

/// What an interrupted transfer leaves: its hidden partial file, for a
/// resume (tests/resume.rs), and no file under the final name.
fn only_a_partial_file(inbox: &Path) {
    let left = entries(inbox);
    assert!(
        left.len() == 1 && left[0].starts_with(".sample.bin.manyfold-partial-"),
        "only the partial file is kept: {left:?}"
    );
}

/// A receiver (`recv_flags`) interrupted half a second into a slow
/// transfer into `inbox`: the sender must say so; returns the receiver's
/// own account.
fn receiver_interrupted_mid_transfer(src: &Path, inbox: &Path, recv_flags: &[&str]) -> Output {
    let (mut receiver, addr) = recv(inbox, recv_flags);
    let sender = send(src, &addr, &SLOW);
    receiver.wait_for_line("receiving sample.bin", LIMIT);
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    interrupt(&receiver);
    reported(sender, t, "the receiver was interrupted", "the sender");
    interrupted_itself(receiver, "SIGINT", 130)
}

#[test]
fn an_interrupted_receiver_is_reported_by_the_sender() {
    let (_tmp, src, inbox) = setup("40MB");
    let out = receiver_interrupted_mid_transfer(&src, &inbox, &[]);
    assert!(out.stderr.contains("1 transfer(s) in progress"), "{out}");
    assert!(out.stderr.contains("the same send resumes it"), "{out}");
    only_a_partial_file(&inbox);
}

/// A receiver whose own datagrams an emulated delay holds (`--delay`)
/// still tells the sender why it left: at its exit the RST goes out
/// early instead of being lost with the socket (the sender then learnt
/// of it only from ICMP: "port unreachable").
#[test]
fn an_interrupted_receiver_behind_an_emulated_delay_is_reported_by_the_sender() {
    let (_tmp, src, inbox) = setup("40MB");
    receiver_interrupted_mid_transfer(&src, &inbox, &["--delay", "200"]);
}

#[test]
fn a_terminated_receiver_is_reported_by_the_sender() {
    let (_tmp, src, inbox) = setup("40MB");
    let (mut receiver, addr) = recv(&inbox, &[]);
    let sender = send(&src, &addr, &SLOW);
    receiver.wait_for_line("receiving sample.bin", LIMIT);
    let t = Instant::now();
    signal(&receiver, "TERM");
    reported(sender, t, "the receiver was interrupted", "the sender");
    interrupted_itself(receiver, "SIGTERM", 143);
}

#[test]
fn an_interrupted_group_sender_is_reported_by_every_receiver() {
    let (_tmp, src, inbox) = setup("40MB");
    let (a_dir, b_dir) = two_dirs(&inbox);
    let (mut a, a_addr) = recv(&a_dir, &SLOW);
    let (mut b, b_addr) = recv(&b_dir, &SLOW);
    let sender = send(&src, &format!("{a_addr},{b_addr}"), &[]);
    a.wait_for_line("receiving sample.bin", LIMIT);
    b.wait_for_line("receiving sample.bin", LIMIT);
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    interrupt(&sender);
    let (a, b) = (wait_in_thread(a, LIMIT), wait_in_thread(b, LIMIT));
    for (who, waited) in [("receiver a", a), ("receiver b", b)] {
        let (out, ended) = waited.join().unwrap();
        eprintln!("{who} reported it after {:?}", ended - t);
        out.assert_failure();
        assert!(out.stderr.contains("the sender was interrupted"), "{who}\n{out}");
        assert!(ended - t < REPORTED_WITHIN, "{who} took {:?}\n{out}", ended - t);
    }
    interrupted_itself(sender, "SIGINT", 130);
    assert!(entries(&a_dir).is_empty() && entries(&b_dir).is_empty(), "no partial file is left");
}

#[test]
fn an_interrupted_group_receiver_is_named_in_the_senders_report() {
    let (_tmp, src, inbox) = setup("40MB");
    let (a_dir, b_dir) = two_dirs(&inbox);
    let (mut a, a_addr) = recv(&a_dir, &[]);
    let (mut b, b_addr) = recv(&b_dir, &[]);
    let sender = send(&src, &format!("{a_addr},{b_addr}"), &SLOW);
    a.wait_for_line("receiving sample.bin", LIMIT);
    b.wait_for_line("receiving sample.bin", LIMIT);
    interrupt(&a);
    interrupted_itself(a, "SIGINT", 130);
    let out = sender.wait(LIMIT);
    out.assert_failure();
    let line = out.stdout.lines().find(|l| l.contains(&a_addr)).unwrap_or_else(|| panic!("no line for a\n{out}"));
    assert!(line.contains("the receiver was interrupted"), "{line}\n{out}");
    b.wait(LIMIT).assert_success();
}

/// The last receiver of a group interrupted in the data phase (the other
/// refused the file: it has one): the sender's error names it and says
/// why, not only the library's "no peer can take the message".
#[test]
fn the_last_group_receiver_interrupted_mid_data_is_named_in_the_senders_error() {
    let (_tmp, src, inbox) = setup("40MB");
    let (a_dir, b_dir) = two_dirs(&inbox);
    std::fs::write(b_dir.join("sample.bin"), b"already here").unwrap();
    let (mut a, a_addr) = recv(&a_dir, &[]);
    let (b, b_addr) = recv(&b_dir, &[]);
    let sender = send(&src, &format!("{a_addr},{b_addr}"), &SLOW);
    a.wait_for_line("receiving sample.bin", LIMIT);
    // The answers are in: the sender is sending data to a alone.
    std::thread::sleep(Duration::from_millis(1000));
    let t = Instant::now();
    interrupt(&a);
    let out = reported(sender, t, "the receiver was interrupted", "the sender");
    let line = out.stderr.lines().find(|l| l.contains("error:")).unwrap_or_else(|| panic!("no error\n{out}"));
    assert!(line.contains("while sending data"), "{line}\n{out}");
    assert!(line.contains(&format!("{a_addr}: left the group: the receiver was interrupted")), "{line}\n{out}");
    assert!(line.contains(&format!("{b_addr}: refused: file exists")), "{line}\n{out}");
    // A group's partial file is not kept (no resume: every receiver gets
    // the same bytes), and the receiver's words do not promise one.
    let out = interrupted_itself(a, "SIGINT", 130);
    assert!(out.stderr.contains("a group's transfer starts again"), "{out}");
    let left: Vec<_> = std::fs::read_dir(&a_dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "left in the interrupted receiver's directory: {left:?}");
    b.wait(LIMIT).assert_failure();
}

/// The line a server prints when a client's session ends, timed from
/// `since`; on a timeout, everything the server printed.
fn server_line(mut server: Running, since: Instant, needle: &str) -> String {
    match server.try_wait_for_line(needle, REPORTED_WITHIN) {
        Some(line) => {
            eprintln!("the server reported it after {:?}", since.elapsed());
            line
        }
        None => panic!("no {needle:?} line from the server within {REPORTED_WITHIN:?}\n{}", server.kill()),
    }
}

fn serve(dir: &Path, flags: &[&str]) -> (Running, String) {
    let mut cmd = manyfold();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--dir"]).arg(dir).args(flags);
    let mut p = Running::spawn(cmd);
    let addr = p.listening_addr().to_string();
    (p, addr)
}

fn fetch(name: &str, from: &str, out: &Path, flags: &[&str]) -> Running {
    let mut cmd = manyfold();
    cmd.args(["fetch", name, "--from", from, "--out"]).arg(out).args(flags);
    Running::spawn(cmd)
}

#[test]
fn an_interrupted_server_is_reported_by_fetch_which_keeps_what_it_got() {
    let (tmp, src, inbox) = setup("40MB");
    let served = tmp.path().join("served");
    std::fs::create_dir(&served).unwrap();
    std::fs::hard_link(&src, served.join("f.bin")).unwrap();
    let (server, addr) = serve(&served, &[]);
    let mut client = fetch("f.bin", &addr, &inbox.join("f.bin"), &SLOW);
    client.wait_for_line("fetching f.bin", LIMIT);
    wait_for_data(&inbox.join(".f.bin.manyfold-fetch"));
    let t = Instant::now();
    interrupt(&server);
    let out = reported(client, t, "the server was interrupted", "fetch");
    assert!(out.stderr.contains("run the same command again"), "{out}");
    assert!(entries(&inbox).contains(&".f.bin.manyfold-fetch-part".to_string()), "kept for a resume");
    // A server stopped by Ctrl-C has done what it was asked: status 0.
    server.wait(LIMIT).assert_success();
}

#[test]
fn an_interrupted_fetch_is_reported_by_the_server() {
    let (tmp, src, inbox) = setup("40MB");
    let served = tmp.path().join("served");
    std::fs::create_dir(&served).unwrap();
    std::fs::hard_link(&src, served.join("f.bin")).unwrap();
    let (server, addr) = serve(&served, &SLOW);
    let mut client = fetch("f.bin", &addr, &inbox.join("f.bin"), &[]);
    client.wait_for_line("fetching f.bin", LIMIT);
    wait_for_data(&inbox.join(".f.bin.manyfold-fetch"));
    let t = Instant::now();
    interrupt(&client);
    let line = server_line(server, t, "ended:");
    assert!(line.contains("the client was interrupted"), "{line}");
    let out = interrupted_itself(client, "SIGINT", 130);
    assert!(out.stderr.contains("run the same command again"), "{out}");
    assert!(entries(&inbox).contains(&".f.bin.manyfold-fetch".to_string()), "the journal is kept");
}

fn ftp_server(root: &Path, flags: &[&str]) -> (Running, String) {
    let mut cmd = manyfold();
    cmd.args(["ftp-server", "--listen", "127.0.0.1:0", "--root"]).arg(root).args(flags);
    let mut p = Running::spawn(cmd);
    let addr = p.listening_addr().to_string();
    (p, addr)
}

fn ftp_get(addr: &str, cwd: &Path, flags: &[&str]) -> Running {
    let mut cmd = manyfold();
    cmd.current_dir(cwd).arg("ftp").args(flags).args([addr, "get", "sample.bin"]);
    Running::spawn(cmd)
}

/// Waits until `path` exists with some data in it.
fn wait_for_data(path: &Path) {
    let deadline = Instant::now() + LIMIT;
    while std::fs::metadata(path).map(|m| m.len()).unwrap_or(0) == 0 {
        assert!(Instant::now() < deadline, "{} never got data", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_interrupted_ftp_get_is_reported_by_the_server() {
    let (tmp, _src, local) = setup("40MB");
    let (server, addr) = ftp_server(tmp.path(), &SLOW);
    let client = ftp_get(&addr, &local, &[]);
    wait_for_data(&local.join(".sample.bin.manyfold-partial"));
    let t = Instant::now();
    interrupt(&client);
    let line = server_line(server, t, "ended:");
    assert!(line.contains("the client was interrupted"), "{line}");
    let out = client.wait(LIMIT);
    out.assert_failure();
    assert!(out.stderr.contains("what arrived is kept"), "{out}");
}

#[test]
fn an_interrupted_ftp_server_is_reported_by_the_client() {
    let (tmp, _src, local) = setup("40MB");
    let (server, addr) = ftp_server(tmp.path(), &[]);
    let client = ftp_get(&addr, &local, &SLOW);
    wait_for_data(&local.join(".sample.bin.manyfold-partial"));
    let t = Instant::now();
    interrupt(&server);
    reported(client, t, "the server was interrupted", "the ftp client");
    server.wait(LIMIT).assert_success();
    assert!(local.join(".sample.bin.manyfold-partial").exists(), "the partial download is kept for a resume");
}

#[test]
fn an_interrupted_demo_removes_its_scratch_data() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = manyfold();
    cmd.env("TMPDIR", tmp.path()).args(["demo", "--size", "200MB", "--loss", "20"]);
    let mut demo = Running::spawn(cmd);
    demo.wait_for_line("sender ", LIMIT);
    interrupt(&demo);
    let out = interrupted_itself(demo, "SIGINT", 130);
    assert!(out.stderr.contains("was removed"), "{out}");
    assert!(entries(tmp.path()).is_empty(), "scratch data left: {:?}", entries(tmp.path()));
}

#[test]
fn a_silent_receiver_is_given_up_after_the_peer_timeout() {
    // Large enough to be still sending when the receiver stops.
    let (_tmp, src, inbox) = setup("200MB");
    let (mut receiver, addr) = recv(&inbox, &[]);
    let sender = send(&src, &addr, &["--peer-timeout", "2", "--delay", "50"]);
    receiver.wait_for_line("receiving sample.bin", LIMIT);
    // Stopped, the receiver's socket stays open: no ICMP, just silence.
    signal(&receiver, "STOP");
    let t = Instant::now();
    let out = sender.wait(LIMIT);
    let took = t.elapsed();
    signal(&receiver, "CONT");
    out.assert_failure();
    assert!(out.stderr.contains("the receiver stopped answering after 2 s"), "{out}");
    assert!(took >= Duration::from_millis(1500) && took < Duration::from_secs(8), "gave up after {took:?}\n{out}");
}

/// Kills the sender (or the receiver) with SIGKILL once data flows; the
/// other side must name it gone (port unreachable) at once.
fn killed_mid_transfer(kill_sender: bool) {
    let (_tmp, src, inbox) = setup("40MB");
    let (mut receiver, addr) = recv(&inbox, &[]);
    let sender = send(&src, &addr, &["--delay", "100"]);
    receiver.wait_for_line("receiving sample.bin", LIMIT);
    // Killed once data flows: a receiver killed between printing that line
    // and answering the list would leave a sender with nothing in flight,
    // which only a keep-alive finds out (spec §4.7), not this test's case.
    wait_for_partial_data(&inbox);
    let t = Instant::now();
    let (victim, witness, role) =
        if kill_sender { (sender, receiver, "sender") } else { (receiver, sender, "receiver") };
    signal(&victim, "KILL");
    let witness_role = if kill_sender { "the receiver" } else { "the sender" };
    reported(witness, t, &format!("the {role} is gone (port unreachable)"), witness_role);
    victim.kill();
}

#[test]
fn a_killed_receiver_is_named_gone_at_once() {
    killed_mid_transfer(false);
}

#[test]
fn a_signal_forwarded_right_after_the_first_is_the_same_interruption() {
    // `timeout 10 manyfold ...` and Ctrl-C: the terminal's SIGINT and the
    // copy `timeout` forwards arrive together; that is one interruption,
    // cleaned up as such, not the second that exits at once.
    let (_tmp, _src, inbox) = setup("1k");
    let (receiver, _addr) = recv(&inbox, &[]);
    interrupt(&receiver);
    interrupt(&receiver);
    let out = interrupted_itself(receiver, "SIGINT", 130);
    assert!(!out.stderr.contains("again: exiting now"), "{out}");
}

#[test]
fn a_killed_sender_is_named_gone_by_the_receiver_at_once() {
    // A process killed outright sends nothing; the receiver, which only
    // answers data, learns it from the ICMP error its next keep-alive
    // draws (spec §6.7), so the command line keeps that interval short.
    killed_mid_transfer(true);
}

#[test]
fn a_receiver_whose_sender_host_went_silent_gives_up_after_the_peer_timeout() {
    // Stopped, the sender's socket stays open: no ICMP, just silence; the
    // receiver's --peer-timeout applies as the sender's does.
    let (_tmp, src, inbox) = setup("200MB");
    let (mut receiver, addr) = recv(&inbox, &["--peer-timeout", "2"]);
    let sender = send(&src, &addr, &["--delay", "50"]);
    receiver.wait_for_line("receiving sample.bin", LIMIT);
    wait_for_partial_data(&inbox);
    signal(&sender, "STOP");
    let t = Instant::now();
    let out = receiver.wait(LIMIT);
    let took = t.elapsed();
    signal(&sender, "CONT");
    sender.kill();
    out.assert_failure();
    assert!(out.stderr.contains("the sender went silent (nothing heard for over 2 s)"), "{out}");
    assert!(took >= Duration::from_millis(1500) && took < Duration::from_secs(8), "gave up after {took:?}\n{out}");
}

/// Waits until `recv`'s hidden partial file in `inbox` holds data.
fn wait_for_partial_data(inbox: &Path) {
    let deadline = Instant::now() + LIMIT;
    loop {
        let has_data = std::fs::read_dir(inbox).unwrap().flatten().any(|e| {
            e.file_name().to_string_lossy().starts_with(".sample.bin.manyfold-partial-")
                && e.metadata().map(|m| m.len()).unwrap_or(0) > 0
        });
        if has_data {
            return;
        }
        assert!(Instant::now() < deadline, "no data reached {}", inbox.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Issue 19 item 1: a `--once` receiver waits for its last acks before it
/// exits, so at 30% loss each way a sender whose final ack was lost is
/// answered, not left retransmitting into a closed port. (The issue's
/// figure is over 200 runs; this bounded test runs a few.)
#[test]
fn no_sender_waits_long_after_a_once_receiver_exits_at_30_percent_loss() {
    const RUNS: usize = 6;
    let (_tmp, src, inbox) = setup("20k");
    let mut worst = Duration::ZERO;
    let (mut done, mut attempts) = (0, 0);
    while done < RUNS {
        attempts += 1;
        assert!(attempts <= 3 * RUNS, "only {done} of {attempts} transfers got through their handshake");
        let dir = inbox.join(attempts.to_string());
        std::fs::create_dir(&dir).unwrap();
        // --loss drops on send and again on receive at each end: 16% there
        // is 1 - 0.84² ≈ 29.4% of the datagrams lost each way, the target's
        // 30% (--loss 30 would be 51% each way).
        let (receiver, addr) = recv(&dir, &["--loss", "16"]);
        let pid = receiver.id().to_string();
        let receiving = wait_in_thread(receiver, LIMIT);
        let s_out = send(&src, &addr, &["--loss", "16"]).wait(LIMIT);
        let s_end = Instant::now();
        if !s_out.status.success() {
            // At this loss the handshake or the request can be lost for
            // longer than the connect and request timeouts (the --once
            // receiver then waits for another sender): not the exchange
            // this test is about.
            eprintln!("attempt {attempts}: the sender failed: {}", s_out.stderr.trim());
            let _ = std::process::Command::new("kill").args(["-KILL", &pid]).status();
            let _ = receiving.join();
            continue;
        }
        let (r_out, r_end) = receiving.join().unwrap();
        r_out.assert_success();
        s_out.assert_success();
        let after = s_end.saturating_duration_since(r_end);
        eprintln!("run {done}: the sender ended {after:?} after the receiver");
        worst = worst.max(after);
        assert!(after <= Duration::from_secs(2), "run {done}: the sender waited {after:?}\n{s_out}");
        done += 1;
    }
    eprintln!("worst of {RUNS} runs: {worst:?}");
}

#[test]
fn peer_timeout_rejects_nonsense() {
    let out = common::run_args(&["send", "x", "--to", "127.0.0.1:1", "--peer-timeout", "-3"], LIMIT);
    out.assert_failure();
    assert!(out.stderr.contains("-3 s is out of range"), "{out}");
}
