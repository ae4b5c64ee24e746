//! Issue 23 item 7: a server logs the peers its endpoint refused (here a
//! plain client at an encrypted `recv`, and a stranger whose key the
//! server does not know): each refused peer by address and cause, and
//! what has no address summed up by cause, at most once per period.

mod common;

use std::time::Duration;

use common::{manyfold, run_args, Running};

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn an_encrypted_receiver_logs_plain_and_unknown_peers_it_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let key = |name: &str| {
        let path = tmp.path().join(name);
        run_args(&["keygen", path.to_str().unwrap()], LIMIT).assert_success();
        path
    };
    let (server_key, friend_key, stranger_key) = (key("server.key"), key("friend.key"), key("stranger.key"));
    let friend = run_args(&["pubkey", friend_key.to_str().unwrap()], LIMIT);
    let peers = tmp.path().join("peers.txt");
    std::fs::write(&peers, &friend.stdout).unwrap();
    let file = tmp.path().join("f.txt");
    std::fs::write(&file, b"x").unwrap();
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();

    let mut cmd = manyfold();
    cmd.args(["recv", "--listen", "127.0.0.1:0", "--dir", inbox.to_str().unwrap()]);
    cmd.args(["--key-file", server_key.to_str().unwrap(), "--peers-file", peers.to_str().unwrap()]);
    let mut recv = Running::spawn(cmd);
    let addr = recv.listening_addr().to_string();
    let send = |flags: &[&str]| {
        let mut args = vec!["send", file.to_str().unwrap(), "--to", &addr, "--peer-timeout", "3"];
        args.extend_from_slice(flags);
        run_args(&args, LIMIT)
    };
    for _ in 0..3 {
        send(&[]).assert_failure();
    }
    let stranger_peers = tmp.path().join("server.pub");
    let server_pub = run_args(&["pubkey", server_key.to_str().unwrap()], LIMIT);
    std::fs::write(&stranger_peers, &server_pub.stdout).unwrap();
    send(&["--key-file", stranger_key.to_str().unwrap(), "--peers-file", stranger_peers.to_str().unwrap()])
        .assert_failure();
    // The log comes within its period (5 s); give it time on a loaded machine.
    std::thread::sleep(Duration::from_secs(12));
    let out = recv.kill();
    // Each refused peer is named with its address and cause, one line per
    // address and period at most (the three plain tries come from one IP).
    let named: Vec<&str> = out.stderr.lines().filter(|l| l.starts_with("refused 127.0.0.1:")).collect();
    assert!(!named.is_empty() && named.len() <= 3, "{out}");
    assert!(named[0].ends_with(": encryption mismatch (one side plain)"), "{out}");
    // What has no address (the stranger's failed handshake) is counted.
    let counted: Vec<&str> = out.stderr.lines().filter(|l| l.starts_with("refused in the last")).collect();
    assert!(counted.iter().any(|l| l.contains("failed authentication")), "{out}");
    assert!(counted.len() <= 3, "at most a line per period: {out}");
}

#[test]
fn an_ftp_server_logs_wrong_tokens_once_per_address_and_period_with_a_count() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, token, wrong) = (tmp.path().join("root"), tmp.path().join("token"), tmp.path().join("wrong"));
    std::fs::create_dir(&root).unwrap();
    std::fs::write(&token, "s3cret\n").unwrap();
    std::fs::write(&wrong, "guess\n").unwrap();
    let mut cmd = manyfold();
    cmd.args(["ftp-server", "--listen", "127.0.0.1:0", "--root", root.to_str().unwrap()]);
    cmd.args(["--token-file", token.to_str().unwrap()]);
    let mut server = Running::spawn(cmd);
    let addr = server.listening_addr().to_string();
    // Three guesses in a row (each answered after the server's 1 s delay).
    for _ in 0..3 {
        let out = run_args(&["ftp", "--token-file", wrong.to_str().unwrap(), &addr, "ls"], LIMIT);
        out.assert_failure();
    }
    let right = run_args(&["ftp", "--token-file", token.to_str().unwrap(), &addr, "ls"], LIMIT);
    right.assert_success();
    std::thread::sleep(Duration::from_millis(500));
    let out = server.kill();
    let logged: Vec<&str> = out.stderr.lines().filter(|l| l.contains("wrong token")).collect();
    // The three guesses take about 3 s, within one 10 s period: one line
    // (on a very slow machine two, the second counting the one left out).
    assert!(logged.len() == 1 || (logged.len() == 2 && logged[1].contains("1 more from 127.0.0.1")), "{out}");
    assert!(logged[0].starts_with("127.0.0.1:"), "the line names the peer: {out}");
    assert!(!out.stdout.contains("wrong token"), "failed logins go to the log (stderr), once: {out}");
    assert_eq!(out.stdout.lines().filter(|l| l.starts_with("127.0.0.1:")).count(), 1, "the good client's line: {out}");
}
