//! `manyfold rr-server` / `manyfold rr-client` end to end on 127.0.0.1
//! (spec §15): many sessions all answered and checked, with a summary;
//! a client whose server is absent fails, naming the first failure.

mod common;

use std::time::Duration;

use common::{manyfold, run_args, Running};

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn every_session_is_answered_and_summarized() {
    let mut cmd = manyfold();
    cmd.args(["rr-server", "--listen", "127.0.0.1:0", "--reply-size", "3000"]);
    let mut server = Running::spawn(cmd);
    let addr = server.listening_addr().to_string();
    let out = run_args(
        &["rr-client", &addr, "--clients", "600", "--concurrency", "150", "--size", "700", "--reply-size", "3000"],
        LIMIT,
    );
    out.assert_success();
    for needle in ["600 sessions in", "requests/s", "p50", "p99", "failures  0"] {
        assert!(out.stdout.contains(needle), "no {needle:?} in\n{out}");
    }
    let served = server.kill();
    assert!(served.stdout.contains("listening on"), "{served}");
}

#[test]
fn a_client_whose_server_is_absent_fails_and_names_the_first_failure() {
    // Nothing listens on 127.0.0.1:9: no session gets an answer.
    let out = run_args(&["rr-client", "127.0.0.1:9", "--clients", "3", "--timeout", "2"], LIMIT);
    out.assert_failure();
    assert!(out.stderr.contains("3 of 3 sessions failed") && out.stderr.contains("first: session"), "{out}");
    assert!(out.stdout.contains("failures  3"), "{out}");
}
