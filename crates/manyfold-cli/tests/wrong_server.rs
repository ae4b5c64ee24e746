//! A command pointed at the wrong kind of manyfold server (the default
//! ports are neighbours: echo 7007, recv 7008, serve 7009, ftp 7021)
//! fails at once, naming the kind of server it needs, instead of waiting
//! without end for an answer that never comes.

mod common;

use std::time::{Duration, Instant};

use common::{manyfold, run_args, Running};

const LIMIT: Duration = Duration::from_secs(60);

fn server(args: &[&str]) -> (Running, String) {
    let mut cmd = manyfold();
    cmd.args(args);
    let mut p = Running::spawn(cmd);
    let addr = p.listening_addr().to_string();
    (p, addr)
}

#[test]
fn send_to_an_echo_server_says_it_is_not_a_receiver() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("m.bin");
    std::fs::write(&file, b"hello").unwrap();
    let (echo, addr) = server(&["echo-server", "--listen", "127.0.0.1:0"]);
    let t = Instant::now();
    let out = run_args(&["send", file.to_str().unwrap(), "--to", &addr], LIMIT);
    echo.kill();
    out.assert_failure();
    assert!(out.stderr.contains(&format!("is {addr} a `manyfold recv`?")), "{out}");
    assert!(t.elapsed() < Duration::from_secs(10), "took {:?}\n{out}", t.elapsed());
}

#[test]
fn send_to_a_file_server_fails_when_it_closes_for_want_of_a_request() {
    // `serve` gives a client 10 s for its first request; `send` writes a
    // list it never reads as one, and learns from the close.
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("m.bin");
    std::fs::write(&file, b"hello").unwrap();
    let (serve, addr) = server(&["serve", "--listen", "127.0.0.1:0", "--dir", tmp.path().to_str().unwrap()]);
    let t = Instant::now();
    let out = run_args(&["send", file.to_str().unwrap(), "--to", &addr], LIMIT);
    serve.kill();
    out.assert_failure();
    assert!(out.stderr.contains(&format!("is {addr} a `manyfold recv`?")), "{out}");
    assert!(t.elapsed() < Duration::from_secs(30), "took {:?}\n{out}", t.elapsed());
}

#[test]
fn fetch_from_a_receiver_says_it_is_not_a_file_server() {
    let tmp = tempfile::tempdir().unwrap();
    let (recv, addr) = server(&["recv", "--listen", "127.0.0.1:0", "--dir", tmp.path().to_str().unwrap()]);
    let t = Instant::now();
    let out_file = tmp.path().join("out.bin");
    let out = run_args(&["fetch", "m.bin", "--from", &addr, "--out", out_file.to_str().unwrap()], LIMIT);
    recv.kill();
    out.assert_failure();
    assert!(out.stderr.contains("(is it a `manyfold serve`?)"), "{out}");
    assert!(t.elapsed() < Duration::from_secs(10), "took {:?}\n{out}", t.elapsed());
}

#[test]
fn fetch_from_a_server_that_closes_without_a_manifest_fails_when_it_closes() {
    // An ftp-server waits 10 s for its hello, then closes: the fetch sees
    // the close (the group's end of that server's stream), not its own
    // 2-minute manifest timeout.
    let tmp = tempfile::tempdir().unwrap();
    let (ftp, addr) = server(&["ftp-server", "--listen", "127.0.0.1:0", "--root", tmp.path().to_str().unwrap()]);
    let t = Instant::now();
    let out_file = tmp.path().join("out.bin");
    let out = run_args(&["fetch", "m.bin", "--from", &addr, "--out", out_file.to_str().unwrap()], LIMIT);
    ftp.kill();
    out.assert_failure();
    assert!(out.stderr.contains("closed the connection without a manifest (is it a `manyfold serve`?)"), "{out}");
    assert!(t.elapsed() < Duration::from_secs(30), "took {:?}\n{out}", t.elapsed());
}

#[test]
fn an_address_nobody_can_connect_to_is_named_once() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("m.bin");
    std::fs::write(&file, b"hello").unwrap();
    let out = run_args(&["send", file.to_str().unwrap(), "--to", "127.0.0.1:0"], LIMIT);
    out.assert_failure();
    assert_eq!(out.stderr.matches("127.0.0.1:0").count(), 1, "{out}");
}
