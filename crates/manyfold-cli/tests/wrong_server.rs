//! A command pointed at the wrong kind of manyfold server (the default
//! ports are neighbours: echo 7007, recv 7008, serve 7009, ftp 7021)
//! fails at once, naming the kind of server it needs, instead of waiting
//! without end for an answer that never comes.

mod common;

use std::time::{Duration, Instant};

use common::{manyfold, run_args, Running};

const LIMIT: Duration = Duration::from_secs(60);

/// Starts a server with `server_args`, then runs `client` against it; in
/// both, `{dir}` is a scratch directory holding `m.bin` and `{addr}` the
/// server's address. The client must fail within `within`, saying
/// `needle` (where `{addr}` is replaced too).
fn fails_against(server_args: &[&str], client: &[&str], needle: &str, within: Duration) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_str().unwrap();
    std::fs::write(tmp.path().join("m.bin"), b"hello").unwrap();
    let mut cmd = manyfold();
    cmd.args(server_args.iter().map(|a| a.replace("{dir}", dir)));
    let mut server = Running::spawn(cmd);
    let addr = server.listening_addr().to_string();
    let fill = |a: &str| a.replace("{dir}", dir).replace("{addr}", &addr);
    let args: Vec<String> = client.iter().map(|a| fill(a)).collect();
    let t = Instant::now();
    let out = run_args(&args.iter().map(String::as_str).collect::<Vec<_>>(), LIMIT);
    server.kill();
    out.assert_failure();
    assert!(out.stderr.contains(&fill(needle)), "{out}");
    assert!(t.elapsed() < within, "took {:?}\n{out}", t.elapsed());
}

const SEND: [&str; 4] = ["send", "{dir}/m.bin", "--to", "{addr}"];
const FETCH: [&str; 6] = ["fetch", "m.bin", "--from", "{addr}", "--out", "{dir}/out.bin"];

#[test]
fn send_to_an_echo_server_says_it_is_not_a_receiver() {
    let server = ["echo-server", "--listen", "127.0.0.1:0"];
    fails_against(&server, &SEND, "is {addr} a `manyfold recv`?", Duration::from_secs(10));
}

#[test]
fn send_to_a_file_server_fails_when_it_closes_for_want_of_a_request() {
    // `serve` gives a client 10 s for its first request; `send` writes a
    // list it never reads as one, and learns from the close.
    let server = ["serve", "--listen", "127.0.0.1:0", "--dir", "{dir}"];
    fails_against(&server, &SEND, "is {addr} a `manyfold recv`?", Duration::from_secs(30));
}

#[test]
fn fetch_from_a_receiver_says_it_is_not_a_file_server() {
    let server = ["recv", "--listen", "127.0.0.1:0", "--dir", "{dir}"];
    fails_against(&server, &FETCH, "(is it a `manyfold serve`?)", Duration::from_secs(10));
}

#[test]
fn fetch_from_a_server_that_closes_without_a_manifest_fails_when_it_closes() {
    // An ftp-server waits 10 s for its hello, then closes: the fetch sees
    // the close (the group's end of that server's stream), not its own
    // 2-minute manifest timeout.
    let server = ["ftp-server", "--listen", "127.0.0.1:0", "--root", "{dir}"];
    let needle = "closed the connection without a manifest (is it a `manyfold serve`?)";
    fails_against(&server, &FETCH, needle, Duration::from_secs(30));
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
