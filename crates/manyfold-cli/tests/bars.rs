//! The progress bars as a person sees them, in a terminal driven through
//! tmux (keys in, screen out): `send`'s bar says "eta ?" before anything
//! moved (not "eta 0s"), and "no answer from the receiver for N s" in
//! place of a frozen rate and ETA while the receiver is silent (issue 19
//! item 4, issue 23 item 4).

mod common;

use std::time::Duration;

use common::tmux::Tmux;
use common::{manyfold, samplegen, signal, Running};

#[test]
fn the_send_bar_counts_the_receivers_silence_instead_of_freezing() {
    if !common::tmux::available() {
        eprintln!("skipped: tmux is not installed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("s.bin");
    samplegen(&src, "100MB", 4);
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    let mut cmd = manyfold();
    cmd.args(["recv", "--listen", "127.0.0.1:0", "--once", "--dir"]).arg(&inbox);
    let mut receiver = Running::spawn(cmd);
    let addr = receiver.listening_addr().to_string();
    // A 600 ms round trip: the bar is seen before the first ack.
    let send =
        format!("{} send {} --to {addr} --delay 300 --peer-timeout 30", env!("CARGO_BIN_EXE_manyfold"), src.display());
    let t = Tmux::run(&format!("manyfold-bars-{}", std::process::id()), &send);
    let first = t.wait_for("sending", Duration::from_secs(20));
    assert!(!first.contains("eta 0s"), "no made-up ETA before anything moved:\n{first}");
    receiver.wait_for_line("receiving s.bin", Duration::from_secs(20));
    t.wait_for("eta ", Duration::from_secs(20));
    // Stopped, the receiver answers nothing (its socket stays open: no ICMP).
    signal(&receiver, "STOP");
    let screen = t.wait_for("no answer from the receiver for 2 s", Duration::from_secs(20));
    assert!(!screen.contains("B/s eta"), "the rate and ETA make way for the silence:\n{screen}");
    signal(&receiver, "CONT");
}

/// Issue 23 item 4: a receiver of a group send that fails mid-way has
/// its bar end there, saying so, instead of "in progress" with an ETA
/// that grows while the other receiver's bar moves on.
#[test]
fn a_failed_group_receivers_bar_ends_with_the_failure() {
    if !common::tmux::available() {
        eprintln!("skipped: tmux is not installed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("g.bin");
    samplegen(&src, "40MB", 5);
    let (a_dir, b_dir) = common::two_dirs(tmp.path());
    let (_a, a_addr) = common::recv_into(&a_dir, &["--once"]);
    let (mut b, b_addr) = common::recv_into(&b_dir, &["--once"]);
    // 40 MB at 4 MB/s: ten seconds to look at the bars.
    let send = format!("{} send {} --to {a_addr},{b_addr} --rate 4MB", env!("CARGO_BIN_EXE_manyfold"), src.display());
    let t = Tmux::run(&format!("manyfold-group-bars-{}", std::process::id()), &send);
    b.wait_for_line("receiving g.bin", Duration::from_secs(20));
    t.wait_for("eta ", Duration::from_secs(20));
    b.kill();
    let screen = t.wait_for("FAILED", Duration::from_secs(20));
    let failed = screen.lines().find(|l| l.contains("FAILED")).unwrap();
    assert!(failed.contains(&b_addr) && !failed.contains("eta"), "b's bar ends with its failure:\n{screen}");
    let a_line = screen.lines().find(|l| l.contains(&a_addr)).unwrap_or_else(|| panic!("a's bar:\n{screen}"));
    assert!(a_line.contains("eta") && !a_line.contains("FAILED"), "a's bar goes on:\n{screen}");
}

/// Issue 23's tmux check of `recv`: its bar names the file, counts the
/// bytes against the size, gives a rate and an ETA while the data moves,
/// and the report replaces it once the file is saved.
#[test]
fn the_recv_bar_counts_bytes_against_the_size_with_a_rate_then_the_report() {
    if !common::tmux::available() {
        eprintln!("skipped: tmux is not installed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("r.bin");
    samplegen(&src, "100MB", 5);
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let recv =
        format!("{} recv --listen 127.0.0.1:{port} --once --dir {}", env!("CARGO_BIN_EXE_manyfold"), inbox.display());
    let t = Tmux::run(&format!("manyfold-recv-bar-{}", std::process::id()), &recv);
    t.wait_for("listening on", Duration::from_secs(20));
    // 20 MB/s: five seconds of bar to look at.
    let mut cmd = manyfold();
    cmd.args(["send", src.to_str().unwrap(), "--to", &format!("127.0.0.1:{port}"), "--rate", "20MB", "-q"]);
    let sender = Running::spawn(cmd);
    let screen = t.wait_for("MB/100.00 MB", Duration::from_secs(20));
    assert!(screen.contains("r.bin [") && screen.contains("MB/s eta"), "a bar with a rate and an ETA:\n{screen}");
    assert!(!screen.contains("eta 0s") || screen.contains("100.00 MB/100.00 MB"), "no ETA of 0 s mid-way:\n{screen}");
    let done = t.wait_for("blake3", Duration::from_secs(60));
    assert!(done.contains("received r.bin from 127.0.0.1:"), "the report follows the bar:\n{done}");
    drop(sender);
}
