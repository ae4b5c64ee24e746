//! Encrypted connections from the command line (spec §19, issue 10):
//! `manyfold keygen` / `pubkey`, `--key-file` / `--peers-file` on send and
//! recv (one receiver and a group of three), refusals that say why
//! (strangers, plain against encrypted both ways), and key files that are
//! refused before any packet is sent (readable by others, malformed).

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{entries, manyfold, run_args, samplegen, Output, Running};

const LIMIT: Duration = Duration::from_secs(90);

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// `manyfold keygen` into `dir/name` (with a PSK if `psk`); the path.
fn keygen(dir: &Path, name: &str, psk: bool) -> PathBuf {
    let path = dir.join(name);
    let mut args = vec!["keygen", s(&path)];
    if psk {
        args.push("--psk");
    }
    run_args(&args, LIMIT).assert_success();
    path
}

/// The public key `manyfold pubkey` prints for `key`.
fn pubkey(key: &Path) -> String {
    let out = run_args(&["pubkey", s(key)], LIMIT);
    out.assert_success();
    out.stdout.trim().to_string()
}

/// A peers file listing the public keys of `keys`, one per line with a name.
fn peers_file(dir: &Path, name: &str, keys: &[&Path]) -> PathBuf {
    let path = dir.join(name);
    let lines: String = keys.iter().map(|k| format!("{}  {}\n", pubkey(k), k.display())).collect();
    std::fs::write(&path, format!("# who may connect\n{lines}")).unwrap();
    path
}

/// `manyfold recv --once` into `dir` with `flags`; its address.
fn recv_once(dir: &Path, flags: &[&str]) -> (Running, String) {
    let mut cmd = manyfold();
    cmd.args(["recv", "--listen", "127.0.0.1:0", "--once", "--dir"]).arg(dir).args(flags);
    let mut recv = Running::spawn(cmd);
    let addr = recv.listening_addr().to_string();
    (recv, addr)
}

fn send(file: &Path, to: &str, flags: &[&str]) -> Output {
    let mut args = vec!["send", s(file), "--to", to];
    args.extend_from_slice(flags);
    run_args(&args, LIMIT)
}

/// A sample file and an empty inbox in a new temporary directory.
fn setup(size: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("sample.bin");
    samplegen(&src, size, 7);
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    (tmp, src, inbox)
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn keygen_writes_a_private_file_refuses_to_overwrite_and_pubkey_prints_its_key() {
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("host.key");
    let out = run_args(&["keygen", s(&key), "--psk"], LIMIT);
    out.assert_success();
    #[cfg(unix)]
    assert_eq!(mode(&key), 0o600, "a key file is created private");
    let text = std::fs::read_to_string(&key).unwrap();
    assert!(text.lines().any(|l| l.starts_with("private-key ")) && text.lines().any(|l| l.starts_with("psk ")));
    let public = pubkey(&key);
    assert!(public.len() == 64 && public.bytes().all(|b| b.is_ascii_hexdigit()), "{public:?}");
    assert!(out.stdout.contains(&format!("public key: {public}")), "keygen and pubkey agree\n{out}");

    let again = run_args(&["keygen", s(&key)], LIMIT);
    again.assert_failure();
    assert!(again.stderr.contains("exists") && again.stderr.contains("--force"), "{again}");
    assert_eq!(std::fs::read_to_string(&key).unwrap(), text, "the existing key is kept");
    assert_eq!(entries(tmp.path()), ["host.key"], "no temporary file is left behind");

    run_args(&["keygen", s(&key), "--force"], LIMIT).assert_success();
    assert_ne!(pubkey(&key), public, "--force writes a new key");
    #[cfg(unix)]
    assert_eq!(mode(&key), 0o600);

    // A file holding only a PSK has no public key, and pubkey says so.
    let psk_only = tmp.path().join("psk.key");
    let psk_line = text.lines().find(|l| l.starts_with("psk ")).unwrap();
    write_private(&psk_only, &format!("{psk_line}\n"));
    let out = run_args(&["pubkey", s(&psk_only)], LIMIT);
    out.assert_failure();
    assert!(out.stderr.contains("holds only a PSK"), "{out}");
}

/// Writes `text` to `path` with mode 0600.
fn write_private(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}

#[test]
fn a_shared_psk_carries_a_file_intact_through_loss_and_both_reports_say_encrypted() {
    let (tmp, src, inbox) = setup("1MB");
    let key = keygen(tmp.path(), "shared.key", true);
    let flags = ["--key-file", s(&key), "--loss", "5"];
    let (recv, addr) = recv_once(&inbox, &flags);
    let sent = send(&src, &addr, &flags);
    sent.assert_success();
    let received = recv.wait(LIMIT);
    received.assert_success();
    assert_eq!(std::fs::read(&src).unwrap(), std::fs::read(inbox.join("sample.bin")).unwrap());
    assert!(received.stdout.contains("(encrypted: PSK)"), "the banner names the mode\n{received}");
    for (side, out) in [("sender", &sent), ("receiver", &received)] {
        assert!(
            out.stdout.contains("security         encrypted (Noise XX + ChaCha20-Poly1305)"),
            "{side} report\n{out}"
        );
    }
}

#[test]
fn known_static_keys_both_ways_work_and_each_report_names_the_peers_key() {
    let (tmp, src, inbox) = setup("300kB");
    let server = keygen(tmp.path(), "server.key", false);
    let client = keygen(tmp.path(), "client.key", false);
    let server_peers = peers_file(tmp.path(), "server-peers", &[&client]);
    let client_peers = peers_file(tmp.path(), "client-peers", &[&server]);
    let (recv, addr) = recv_once(&inbox, &["--key-file", s(&server), "--peers-file", s(&server_peers)]);
    let sent = send(&src, &addr, &["--key-file", s(&client), "--peers-file", s(&client_peers)]);
    sent.assert_success();
    let received = recv.wait(LIMIT);
    received.assert_success();
    assert!(received.stdout.contains("(encrypted: 1 known peer)"), "{received}");
    assert!(sent.stdout.contains(&format!("peer key {}", pubkey(&server))), "the sender names the receiver\n{sent}");
    assert!(received.stdout.contains(&format!("peer key {}", pubkey(&client))), "and back\n{received}");
}

#[test]
fn a_group_send_with_static_keys_names_each_receivers_proven_key() {
    let (tmp, src, _) = setup("200kB");
    let sender = keygen(tmp.path(), "sender.key", false);
    let keys: Vec<PathBuf> = (0..2).map(|i| keygen(tmp.path(), &format!("r{i}.key"), false)).collect();
    let trusted = peers_file(tmp.path(), "receivers-trust", &[&sender]);
    let key_refs: Vec<&Path> = keys.iter().map(|k| k.as_path()).collect();
    let sender_peers = peers_file(tmp.path(), "sender-trusts", &key_refs);
    let mut rx = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let dir = tmp.path().join(format!("inbox{i}"));
        std::fs::create_dir(&dir).unwrap();
        rx.push(recv_once(&dir, &["--key-file", s(k), "--peers-file", s(&trusted)]));
    }
    let to: Vec<&str> = rx.iter().map(|r| r.1.as_str()).collect();
    let sent = send(&src, &to.join(","), &["--key-file", s(&sender), "--peers-file", s(&sender_peers)]);
    sent.assert_success();
    for k in &keys {
        assert!(sent.stdout.contains(&format!("peer key {}", pubkey(k))), "each receiver's key\n{sent}");
    }
    for (r, _) in rx {
        r.wait(LIMIT).assert_success();
    }
}

#[test]
fn a_client_missing_from_the_servers_peers_fails_with_authentication_failed() {
    let (tmp, src, inbox) = setup("10kB");
    let server = keygen(tmp.path(), "server.key", false);
    let friend = keygen(tmp.path(), "friend.key", false);
    let stranger = keygen(tmp.path(), "stranger.key", false);
    let server_peers = peers_file(tmp.path(), "server-peers", &[&friend]);
    let client_peers = peers_file(tmp.path(), "client-peers", &[&server]);
    let (recv, addr) = recv_once(&inbox, &["--key-file", s(&server), "--peers-file", s(&server_peers)]);
    let sent = send(&src, &addr, &["--key-file", s(&stranger), "--peers-file", s(&client_peers)]);
    sent.assert_failure();
    assert!(sent.stderr.contains("authentication failed"), "{sent}");
    // The stranger never reached the receiver's accept: it still waits.
    let waiting = recv.kill();
    assert!(!waiting.stdout.contains("receiving"), "{waiting}");
    assert!(entries(&inbox).is_empty());
}

#[test]
fn plain_and_encrypted_ends_refuse_each_other_both_ways_with_encryption_mismatch() {
    let (tmp, src, inbox) = setup("10kB");
    let key = keygen(tmp.path(), "shared.key", true);
    for (server_flags, client_flags) in [(vec!["--key-file", s(&key)], vec![]), (vec![], vec!["--key-file", s(&key)])] {
        let (recv, addr) = recv_once(&inbox, &server_flags);
        let sent = send(&src, &addr, &client_flags);
        sent.assert_failure();
        assert!(
            sent.stderr.contains("encryption mismatch"),
            "server {server_flags:?}, client {client_flags:?}\n{sent}"
        );
        assert!(sent.stderr.contains(&format!("cannot connect to {addr}")), "{sent}");
        recv.kill();
    }
    assert!(entries(&inbox).is_empty());
}

#[test]
fn key_files_others_can_read_or_that_are_malformed_are_refused_before_any_packet() {
    let (tmp, src, _inbox) = setup("1kB");
    // Nothing listens on port 9: a key error must come first.
    let key = keygen(tmp.path(), "open.key", true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let out = send(&src, "127.0.0.1:9", &["--key-file", s(&key)]);
        out.assert_failure();
        let want = format!("permissions 0644 for {} are too open: run chmod 600 {}", key.display(), key.display());
        assert!(out.stderr.contains(&want), "{out}");
    }

    let bad = tmp.path().join("bad.key");
    write_private(&bad, "# my key\nprivate-key 00112233\n");
    let out = send(&src, "127.0.0.1:9", &["--key-file", s(&bad)]);
    out.assert_failure();
    assert!(
        out.stderr.contains(&format!("{} line 2: expected 64 hex digits after private-key", bad.display())),
        "{out}"
    );

    let unknown = tmp.path().join("unknown.key");
    write_private(&unknown, &format!("psk {}\nsecret yes\n", "ab".repeat(32)));
    let out = run_args(&["echo", "127.0.0.1:9", "hi", "--key-file", s(&unknown)], LIMIT);
    out.assert_failure();
    assert!(out.stderr.contains("line 2: unknown line"), "{out}");

    let missing = tmp.path().join("missing.key");
    let out = run_args(&["recv", "--dir", s(tmp.path()), "--key-file", s(&missing)], LIMIT);
    out.assert_failure();
    assert!(out.stderr.contains(&format!("cannot read key file {}", missing.display())), "{out}");

    // A private key alone authenticates nobody; peers need our key.
    let lonely = keygen(tmp.path(), "lonely.key", false);
    let out = send(&src, "127.0.0.1:9", &["--key-file", s(&lonely)]);
    out.assert_failure();
    assert!(out.stderr.contains("pre-shared key or a list of known peers"), "{out}");
    let peers = peers_file(tmp.path(), "peers", &[&lonely]);
    let out = send(&src, "127.0.0.1:9", &["--peers-file", s(&peers)]);
    out.assert_failure();
    assert!(out.stderr.contains("needs --key-file"), "{out}");

    // The same checks hold for multicast.
    let out = run_args(
        &["mcast", "recv", "--group", "239.1.2.3:7020", "--dir", s(tmp.path()), "--key-file", s(&lonely)],
        LIMIT,
    );
    out.assert_failure();
    assert!(out.stderr.contains("pre-shared key or a list of known peers"), "{out}");
}

#[test]
fn a_group_send_to_three_encrypted_receivers_arrives_and_says_encrypted() {
    let (tmp, src, _) = setup("600kB");
    let key = keygen(tmp.path(), "shared.key", true);
    let mut rx = Vec::new();
    for i in 0..3 {
        let dir = tmp.path().join(format!("inbox{i}"));
        std::fs::create_dir(&dir).unwrap();
        let (r, addr) = recv_once(&dir, &["--key-file", s(&key)]);
        rx.push((r, addr, dir));
    }
    let to: Vec<&str> = rx.iter().map(|r| r.1.as_str()).collect();
    let sent = send(&src, &to.join(","), &["--key-file", s(&key), "--loss", "3"]);
    sent.assert_success();
    assert!(sent.stdout.contains("3 saved it"), "{sent}");
    assert!(sent.stdout.contains("security encrypted (Noise XX + ChaCha20-Poly1305)"), "{sent}");
    let original = std::fs::read(&src).unwrap();
    for (r, _, dir) in rx {
        let out = r.wait(LIMIT);
        out.assert_success();
        assert!(out.stdout.contains("security         encrypted"), "{out}");
        assert!(std::fs::read(dir.join("sample.bin")).unwrap() == original);
    }
}

#[test]
fn the_demo_runs_encrypted_with_a_key_file() {
    let tmp = tempfile::tempdir().unwrap();
    let key = keygen(tmp.path(), "demo.key", true);
    let out = run_args(&["demo", "--size", "300kB", "--key-file", s(&key)], LIMIT);
    out.assert_success();
    assert!(out.stdout.contains("verified: all 3"), "{out}");
    assert!(out.stdout.contains("security encrypted (Noise XX + ChaCha20-Poly1305)"), "{out}");
}
