//! Runs every example in `examples/` on 127.0.0.1: each example's `main`
//! only parses its arguments and calls the functions below, so these tests
//! run exactly what `cargo run --example ...` runs, client and server in
//! one test, bounded in time. And the README's Rust snippets must be the
//! examples' code, verbatim (`readme_snippets_are_the_examples_code`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tokio::time::timeout;

#[path = "../examples/echo.rs"]
#[allow(dead_code)]
mod echo;
#[path = "../examples/file.rs"]
#[allow(dead_code)]
mod file;
#[path = "../examples/group.rs"]
#[allow(dead_code)]
mod group;
#[path = "../examples/mcast.rs"]
#[allow(dead_code)]
mod mcast;
#[path = "../examples/request_reply.rs"]
#[allow(dead_code)]
mod request_reply;
#[path = "../examples/streams.rs"]
#[allow(dead_code)]
mod streams;

/// Every test finishes within this, or fails.
const LIMIT: Duration = Duration::from_secs(60);

async fn bind() -> manyfold::Endpoint {
    manyfold::Endpoint::bind("127.0.0.1:0".parse().unwrap(), manyfold::Config::default()).await.expect("bind")
}

/// `len` bytes that differ from one offset to the next.
fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// A fresh directory under the system's temporary one.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("manyfold-example-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_example_sends_back_every_byte_and_both_ends_finish() {
    timeout(LIMIT, async {
        let endpoint = bind().await;
        let addr = endpoint.local_addr().unwrap();
        // Listening before the client's SYN can arrive: the spawned task
        // may start after it (the server listens again, harmlessly).
        endpoint.listen();
        let server = tokio::spawn(echo::server(endpoint, 2));
        assert_eq!(echo::client(addr, b"hello world").await.unwrap(), b"hello world");
        let big = data(3 << 20);
        assert!(echo::client(addr, &big).await.unwrap() == big, "3 MiB echoed intact");
        server.await.unwrap().expect("the server ends once both connections are done");
    })
    .await
    .expect("timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_example_stores_the_file_under_its_name() {
    timeout(LIMIT, async {
        let dir = scratch("file");
        let (src, inbox) = (dir.join("image.bin"), dir.join("inbox"));
        std::fs::create_dir(&inbox).unwrap();
        std::fs::write(&src, data(5 << 20)).unwrap();
        let endpoint = bind().await;
        let addr = endpoint.local_addr().unwrap();
        let receiver = tokio::spawn({
            let inbox = inbox.clone();
            async move { file::receive(&endpoint, &inbox).await }
        });
        assert_eq!(file::send(addr, &src).await.unwrap(), 5 << 20);
        let (stored, size) = receiver.await.unwrap().unwrap();
        assert_eq!((stored.clone(), size), (inbox.join("image.bin"), 5 << 20));
        assert!(std::fs::read(&stored).unwrap() == std::fs::read(&src).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    })
    .await
    .expect("timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_example_late_joiner_receives_from_its_join_point() {
    timeout(LIMIT, async {
        let mut addrs: Vec<SocketAddr> = Vec::new();
        let mut receivers = Vec::new();
        for _ in 0..3 {
            let endpoint = bind().await;
            addrs.push(endpoint.local_addr().unwrap());
            receivers.push(tokio::spawn(async move { group::receive(&endpoint).await }));
        }
        let joined_at = group::fan_out(&addrs[..2], addrs[2]).await.expect("fan-out");
        assert_eq!(joined_at, group::MESSAGES, "nothing was sent between the join and its event");
        let want = |from: u64| -> Vec<Vec<u8>> {
            (from..2 * group::MESSAGES).map(|i| format!("message {i}").into_bytes()).collect()
        };
        let mut got = Vec::new();
        for r in receivers {
            got.push(r.await.unwrap().expect("a receiver"));
        }
        assert_eq!(got[0], want(0));
        assert_eq!(got[1], want(0));
        assert_eq!(got[2], want(joined_at), "the late joiner gets every message from its join point");
    })
    .await
    .expect("timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_reply_example_answers_without_a_listen_call() {
    timeout(LIMIT, async {
        let endpoint = bind().await;
        let addr = endpoint.local_addr().unwrap();
        let server = tokio::spawn(async move { request_reply::server(&endpoint).await });
        assert_eq!(request_reply::client(addr, b"status?").await.unwrap(), b"STATUS?");
        assert_eq!(request_reply::client(addr, &[b'x'; 100_000]).await.unwrap(), vec![b'X'; 100_000]);
        server.abort();
    })
    .await
    .expect("timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_example_counts_every_reliable_message() {
    timeout(LIMIT, async {
        let endpoint = bind().await;
        let addr = endpoint.local_addr().unwrap();
        let server = tokio::spawn(async move { streams::server(&endpoint).await });
        let summary = streams::client(addr, 50).await.expect("client");
        // Positions may be given up when late; orders never are.
        let positions: usize = summary
            .strip_prefix("50 orders, ")
            .and_then(|s| s.strip_suffix(" positions"))
            .unwrap_or_else(|| panic!("summary {summary:?}"))
            .parse()
            .unwrap();
        assert!(positions <= 50);
        server.await.unwrap().expect("server");
    })
    .await
    .expect("timed out");
}

/// Whether this host can send and hear IPv4 multicast on `lo`.
fn loopback_multicast() -> Result<(), String> {
    let flags = std::fs::read_to_string("/sys/class/net/lo/flags").map_err(|e| format!("no lo: {e}"))?;
    let flags = u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16).map_err(|e| e.to_string())?;
    // IFF_MULTICAST
    if flags & 0x1000 == 0 {
        return Err("lo has no MULTICAST flag".into());
    }
    Ok(())
}

/// Set in the child that runs the multicast test in a network namespace
/// of its own, whose `lo` has multicast on (its sysfs still shows the
/// parent's flags, so the child does not look there).
const IN_NETNS: &str = "MANYFOLD_EXAMPLE_IN_NETNS";

#[test]
fn mcast_example_replicates_a_file_over_loopback_multicast() {
    if std::env::var_os(IN_NETNS).is_none() {
        if let Err(why) = loopback_multicast() {
            // Run this test again in a fresh network namespace (unshare -rn:
            // a user namespace too, so no root is needed where the kernel
            // allows them) with multicast on its loopback.
            let setup = "ip link set lo up && ip link set lo multicast on && ip route add 224.0.0.0/4 dev lo && exec \"$0\" \"$@\"";
            let exe = std::env::current_exe().unwrap();
            let name = "mcast_example_replicates_a_file_over_loopback_multicast";
            let out = std::process::Command::new("unshare")
                .args(["-rn", "sh", "-c", setup])
                .arg(exe)
                .args(["--exact", name, "--nocapture"])
                .env(IN_NETNS, "1")
                .output();
            match out {
                Ok(o) if o.status.success() => {
                    let text = String::from_utf8_lossy(&o.stdout);
                    assert!(text.contains("1 passed"), "the child ran the test:\n{text}");
                }
                Ok(o) if String::from_utf8_lossy(&o.stdout).contains(name) => {
                    panic!(
                        "failed in its namespace:\n{}\n{}",
                        String::from_utf8_lossy(&o.stdout),
                        String::from_utf8_lossy(&o.stderr)
                    )
                }
                // No unshare, no ip, or user namespaces refused.
                Ok(o) => eprintln!("skipped: {why}, and no namespace: {}", String::from_utf8_lossy(&o.stderr)),
                Err(e) => eprintln!("skipped: {why}, and no unshare: {e}"),
            }
            return;
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    // The timer needs the runtime: the timeout is made inside it.
    runtime
        .block_on(async {
            timeout(LIMIT, async {
                let dir = scratch("mcast");
                let (src, inbox) = (dir.join("disk.img"), dir.join("inbox"));
                std::fs::create_dir(&inbox).unwrap();
                std::fs::write(&src, data(3 << 20)).unwrap();
                let group: std::net::SocketAddrV4 =
                    format!("239.77.{}.{}:7020", std::process::id() % 200, 1).parse().unwrap();
                let lo = Some("lo".to_string());
                // `receive` is not Send (its sink is a `&mut dyn`): both run in this task.
                let (sent, received) =
                    tokio::join!(mcast::send(group, lo.clone(), &src, 1), mcast::receive(group, lo, &inbox));
                assert_eq!(sent.expect("send"), 1);
                let stored = received.expect("receive");
                assert_eq!(stored, inbox.join("disk.img"));
                assert!(std::fs::read(&stored).unwrap() == std::fs::read(&src).unwrap());
                std::fs::remove_dir_all(&dir).unwrap();
            })
            .await
        })
        .expect("timed out");
}

/// The code of `// ANCHOR: name` … `// ANCHOR_END: name` in `file`.
fn anchor(file: &str, name: &str) -> String {
    let start = format!("// ANCHOR: {name}\n");
    let end = format!("// ANCHOR_END: {name}\n");
    let from = file.find(&start).unwrap_or_else(|| panic!("no anchor {name}")) + start.len();
    let to = from + file[from..].find(&end).unwrap_or_else(|| panic!("no end of anchor {name}"));
    file[from..to].to_string()
}

#[test]
fn readme_snippets_are_the_examples_code() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("../../README.md")).unwrap();
    let mut checked = 0;
    let mut rest = readme.as_str();
    while let Some(at) = rest.find("```rust\n") {
        // Each Rust block follows a line `<!-- example: FILE ANCHOR -->`.
        let before = rest[..at].trim_end().lines().last().unwrap_or("");
        let source = before
            .strip_prefix("<!-- example: ")
            .and_then(|s| s.strip_suffix(" -->"))
            .unwrap_or_else(|| panic!("a README Rust block without an example marker, after {before:?}"));
        let (file, name) = source.split_once(' ').expect("FILE ANCHOR");
        let body = &rest[at + "```rust\n".len()..];
        let end = body.find("```\n").expect("closed block");
        let text = std::fs::read_to_string(root.join("examples").join(file)).unwrap();
        assert_eq!(body[..end], anchor(&text, name), "README block from {file} {name} differs from the example");
        checked += 1;
        rest = &body[end..];
    }
    assert!(checked >= 6, "the README shows the examples ({checked} blocks)");
}
