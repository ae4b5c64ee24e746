//! `manyfold rr-server` / `manyfold rr-client` end to end on 127.0.0.1
//! (spec §15): many sessions all answered and checked, with a summary;
//! a client whose server is absent fails, naming the first failure; a
//! repeat client with --reuse-token sends its requests on the SYN (0-RTT,
//! spec §6.9), and bad --early-data or --reuse-token use is refused; a
//! server with --inline (handlers run by the driver, spec §15.4) gives
//! every client its correct reply.

mod common;

use std::time::Duration;

use common::{manyfold, run_args, Running};

const LIMIT: Duration = Duration::from_secs(60);

/// Runs an rr-server with `extra` arguments and 600 rr-client sessions of
/// 700-byte requests and 3,000-byte replies against it (rr-client checks
/// every byte of each reply against its own request); the client must
/// succeed and print `needles`. Returns the server's stdout.
fn serve_600_sessions(extra: &[&str], needles: &[&str]) -> String {
    let mut cmd = manyfold();
    cmd.args(["rr-server", "--listen", "127.0.0.1:0", "--reply-size", "3000"]).args(extra);
    let mut server = Running::spawn(cmd);
    let addr = server.listening_addr().to_string();
    let out = run_args(
        &["rr-client", &addr, "--clients", "600", "--concurrency", "150", "--size", "700", "--reply-size", "3000"],
        LIMIT,
    );
    out.assert_success();
    for needle in needles {
        assert!(out.stdout.contains(needle), "no {needle:?} in\n{out}");
    }
    let served = server.kill();
    assert!(served.stdout.contains("listening on"), "{served}");
    served.stdout
}

#[test]
fn every_session_is_answered_and_summarized() {
    serve_600_sessions(&[], &["600 sessions in", "requests/s", "p50", "p99", "failures  0"]);
}

#[test]
fn an_inline_server_gives_every_client_its_correct_reply() {
    let server = serve_600_sessions(&["--inline"], &["600 sessions in", "failures  0"]);
    assert!(server.contains("replies computed in the driver (--inline)"), "{server}");
}

#[test]
fn a_client_whose_server_is_absent_fails_and_names_the_first_failure() {
    // Nothing listens on 127.0.0.1:9: no session gets an answer.
    let out = run_args(&["rr-client", "127.0.0.1:9", "--clients", "3", "--timeout", "2"], LIMIT);
    out.assert_failure();
    assert!(out.stderr.contains("3 of 3 sessions failed") && out.stderr.contains("first: session"), "{out}");
    assert!(out.stdout.contains("failures  3"), "{out}");
}

#[test]
fn a_client_with_reuse_token_sends_every_later_request_on_the_syn() {
    let mut cmd = manyfold();
    cmd.args(["rr-server", "--listen", "127.0.0.1:0", "--sockets", "1"]);
    let mut server = Running::spawn(cmd);
    let addr = server.listening_addr().to_string();
    // One session at a time on one socket: the first brings the token,
    // the other 99 use it.
    let out = run_args(
        &["rr-client", &addr, "--clients", "100", "--concurrency", "1", "--size", "500", "--reuse-token"],
        LIMIT,
    );
    out.assert_success();
    for needle in ["100 sessions in", "failures  0", "tokens    99 of 100 sessions"] {
        assert!(out.stdout.contains(needle), "no {needle:?} in\n{out}");
    }
    let served = server.kill();
    assert!(served.stdout.contains("listening on"), "{served}");
}

#[test]
fn an_unknown_early_data_policy_is_refused_naming_the_choices() {
    let out = run_args(&["rr-server", "--listen", "127.0.0.1:0", "--early-data", "sometimes"], LIMIT);
    out.assert_failure();
    assert!(out.stderr.contains("unknown policy \"sometimes\"") && out.stderr.contains("idempotent"), "{out}");
    let out = run_args(&["rr-server", "--listen", "127.0.0.1:0", "--early-data", "replay-window:0"], LIMIT);
    out.assert_failure();
    assert!(out.stderr.contains("replay-window needs a positive number"), "{out}");
}

#[test]
fn reuse_token_with_encryption_is_refused_with_a_reason() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let key = dir.path().join("client.key");
    let out = run_args(&["keygen", key.to_str().expect("utf-8"), "--psk"], LIMIT);
    out.assert_success();
    let out = run_args(
        &["rr-client", "127.0.0.1:9", "--clients", "1", "--reuse-token", "--key-file", key.to_str().expect("utf-8")],
        LIMIT,
    );
    out.assert_failure();
    assert!(out.stderr.contains("--reuse-token") && out.stderr.contains("encryption"), "{out}");
}
