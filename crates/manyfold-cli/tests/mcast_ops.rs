//! The operator's features of `manyfold mcast` (issue 22 item 4), over real
//! IP multicast between network namespaces on one bridge (198.18.0.0/24
//! and 2001:db8::/64, groups 239.77.1.0/24 and ff15::/16): the host list,
//! `--receivers` naming who joined, directory bundles (spec §16.10), the
//! receiver daemon, and IPv6 groups.
//!
//! Needs root (namespaces) and `ip`; without them each test says why and
//! passes without running. The namespaces are deleted on every exit path
//! (the lab's Drop). Every wait is bounded.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::netns::Lab;
use common::{samplegen, Running};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(120);

fn skip_reason() -> Option<String> {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !root {
        return Some("not root: network namespaces need it".into());
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Some("the ip command is missing".into());
    }
    None
}

/// `hosts` namespaces (0 sends) and a directory per receiver, `r1` …
struct Ops {
    lab: Lab,
    root: tempfile::TempDir,
}

fn ops(hosts: usize) -> Option<Ops> {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return None;
    }
    let lab = Lab::new(hosts).expect("namespaces");
    let root = tempfile::tempdir().unwrap();
    for i in 1..hosts {
        std::fs::create_dir(root.path().join(format!("r{i}"))).unwrap();
    }
    Some(Ops { lab, root })
}

impl Ops {
    fn dir(&self, i: usize) -> PathBuf {
        self.root.path().join(format!("r{i}"))
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }

    /// `mcast recv` on host `i` into its directory.
    fn recv(&self, i: usize, group: &str, extra: &[&str]) -> Command {
        let mut c = self.lab.exec(i);
        c.args(["mcast", "recv", "--group", group, "--iface", &self.lab.iface(i), "--wait", "60", "--dir"]);
        c.arg(self.dir(i)).args(extra);
        c
    }

    /// `mcast send` on host 0 of `files`.
    fn send(&self, group: &str, extra: &[&str], files: &[&Path]) -> Command {
        let mut c = self.lab.exec(0);
        c.args(["mcast", "send", "--group", group, "--iface", &self.lab.iface(0)]).args(extra).args(files);
        c
    }
}

fn same(a: &Path, b: &Path) -> bool {
    std::fs::read(a).ok() == std::fs::read(b).ok()
}

/// Names in `dir`, recursively, as `/`-separated relative paths, sorted.
fn tree(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            out.push(p.strip_prefix(base).unwrap().to_string_lossy().into_owned());
            if e.file_type().unwrap().is_dir() {
                walk(base, &p, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// `--receivers 3` with one of three joined: non-zero, saying how many
/// joined, who, and how many are missing.
#[test]
fn mcast_send_receivers_n_fails_naming_who_joined_and_how_many_are_missing() {
    let Some(o) = ops(2) else { return };
    let file = o.path("image.bin");
    samplegen(&file, "1MB", 21);
    let receiver = Running::spawn(o.recv(1, "239.77.1.1:7100", &[]));
    let sent = Running::spawn(o.send("239.77.1.1:7100", &["--receivers", "3", "--wait", "2"], &[&file])).wait(LIMIT);
    let got = receiver.wait(LIMIT);
    eprintln!("sender:\n{sent}\nreceiver:\n{got}");
    sent.assert_failure();
    assert!(sent.stderr.contains("only 1 of the 3 receivers asked for (--receivers 3) joined"), "{sent}");
    assert!(sent.stderr.contains("joined: 198.18.0.2 (id "), "{sent}");
    assert!(sent.stderr.contains("2 missing"), "{sent}");
    got.assert_success();
    assert!(same(&o.dir(1).join("image.bin"), &file));
}

/// A host list with a bad line fails before anything is sent, naming the
/// line; no namespace needed (it is read before any socket opens).
#[test]
fn a_host_list_with_a_bad_line_is_refused_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("lab.hosts");
    std::fs::write(&list, "# the lab\n198.18.0.2\n\nnot-a-host\n").unwrap();
    let file = dir.path().join("f");
    std::fs::write(&file, b"x").unwrap();
    let out = common::run_args(
        &["mcast", "send", "--group", "239.77.1.9:7101", "--hosts", list.to_str().unwrap(), file.to_str().unwrap()],
        LIMIT,
    );
    out.assert_failure();
    assert!(out.stderr.contains("line 4: \"not-a-host\" is neither an IP address"), "{out}");
    assert!(out.stderr.contains("lab.hosts"), "the file is named: {out}");
}

/// `--hosts`: a listed address and a listed client id (`recv --id`) get
/// the file; an unlisted receiver is refused at once and says so; a
/// listed host that never came is named, and the exit is non-zero.
#[test]
fn only_the_hosts_listed_are_admitted_and_the_missing_ones_are_named() {
    let Some(o) = ops(4) else { return };
    let file = o.path("image.bin");
    samplegen(&file, "2MB", 22);
    let list = o.path("lab.hosts");
    std::fs::write(&list, "# receivers of the lab\n198.18.0.2\n0a1b2c3d   # host 3 by id\n198.18.0.9\n").unwrap();
    let group = "239.77.1.2:7102";
    let listed = Running::spawn(o.recv(1, group, &[]));
    let unlisted = Running::spawn(o.recv(2, group, &[]));
    let by_id = Running::spawn(o.recv(3, group, &["--id", "0a1b2c3d"]));
    let hosts = ["--hosts", list.to_str().unwrap(), "--wait", "3"];
    let sent = Running::spawn(o.send(group, &hosts, &[&file])).wait(LIMIT);
    let (listed, unlisted, by_id) = (listed.wait(LIMIT), unlisted.wait(LIMIT), by_id.wait(LIMIT));
    eprintln!("sender:\n{sent}\nlisted:\n{listed}\nunlisted:\n{unlisted}\nby id:\n{by_id}");
    listed.assert_success();
    by_id.assert_success();
    assert!(same(&o.dir(1).join("image.bin"), &file) && same(&o.dir(3).join("image.bin"), &file));
    unlisted.assert_failure();
    assert!(unlisted.stderr.contains("refused this receiver: its --hosts list does not name it"), "{unlisted}");
    assert!(std::fs::read_dir(o.dir(2)).unwrap().next().is_none(), "nothing stored by the unlisted receiver");
    sent.assert_failure();
    assert!(sent.stderr.contains("refused 198.18.0.3"), "{sent}");
    assert!(
        sent.stderr.contains("1 of the 3 receivers in --hosts did not get the file: 198.18.0.9 (never joined)"),
        "{sent}"
    );
    assert!(sent.stdout.contains("id 0a1b2c3d: completed"), "{sent}");
}

/// A directory and a file in one session: paths kept relative to each
/// argument, modes and times kept, a link kept as a link; the receiver's
/// report and JSON list the files; no temporary file is left.
#[test]
fn a_directory_and_a_file_go_in_one_session_with_paths_modes_and_times() {
    let Some(o) = ops(2) else { return };
    let top = o.path("src/photos");
    std::fs::create_dir_all(top.join("2024/june")).unwrap();
    samplegen(&top.join("2024/june/a.jpg"), "700KB", 23);
    samplegen(&top.join("b.raw"), "1500KB", 24);
    std::fs::write(top.join("empty"), b"").unwrap();
    std::os::unix::fs::symlink("b.raw", top.join("latest")).unwrap();
    std::fs::set_permissions(top.join("b.raw"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(top.join("2024"), std::fs::Permissions::from_mode(0o750)).unwrap();
    let when = UNIX_EPOCH + Duration::from_secs(1_500_000_000);
    let f = std::fs::File::options().write(true).open(top.join("2024/june/a.jpg")).unwrap();
    f.set_modified(when).unwrap();
    let notes = o.path("src/notes.txt");
    std::fs::write(&notes, b"read me\n").unwrap();
    let group = "239.77.1.3:7103";
    let receiver = Running::spawn(o.recv(1, group, &["--json"]));
    let sent = Running::spawn(o.send(group, &["--wait", "20"], &[&top, &notes])).wait(LIMIT);
    let got = receiver.wait(LIMIT);
    eprintln!("sender:\n{sent}\nreceiver:\n{got}");
    sent.assert_success();
    got.assert_success();
    assert!(sent.stderr.contains("a bundle (spec §16.10) of 8 entries: 4 file(s)"), "{sent}");
    let d = o.dir(1);
    assert_eq!(
        tree(&d),
        [
            "notes.txt",
            "photos",
            "photos/2024",
            "photos/2024/june",
            "photos/2024/june/a.jpg",
            "photos/b.raw",
            "photos/empty",
            "photos/latest"
        ],
        "exactly the bundle, no temporary files"
    );
    for rel in ["2024/june/a.jpg", "b.raw", "empty"] {
        assert!(same(&d.join("photos").join(rel), &top.join(rel)), "{rel} differs");
    }
    assert!(same(&d.join("notes.txt"), &notes));
    assert_eq!(std::fs::read_link(d.join("photos/latest")).unwrap(), Path::new("b.raw"));
    assert_eq!(std::fs::metadata(d.join("photos/b.raw")).unwrap().mode() & 0o777, 0o600);
    assert_eq!(std::fs::metadata(d.join("photos/2024")).unwrap().mode() & 0o777, 0o750);
    let mtime = std::fs::metadata(d.join("photos/2024/june/a.jpg")).unwrap().modified().unwrap();
    assert_eq!(mtime, when);
    let v: Value = serde_json::from_str(got.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {got}"));
    assert_eq!(v["ok"], true, "{v}");
    let files = v["files"].as_array().expect("files listed");
    let a = files.iter().find(|f| f["path"] == "photos/2024/june/a.jpg").expect("a.jpg listed");
    assert_eq!((a["type"].as_str(), a["bytes"].as_u64()), (Some("file"), Some(700_000)), "{v}");
    assert_eq!(files.len(), 8, "{v}");
    assert_eq!(v["name"].as_str(), Some("photos and 1 more"), "{v}");
    assert!(SystemTime::now() > when);
}

/// A bundle that would write through a link leading out of the receiver's
/// directory is refused before anything is written, with a clear error;
/// the sender learns at once that this receiver left, and fails.
#[test]
fn a_bundle_writing_through_an_escaping_link_is_refused_and_the_sender_told() {
    let Some(o) = ops(2) else { return };
    let top = o.path("src/photos");
    std::fs::create_dir_all(&top).unwrap();
    samplegen(&top.join("a.jpg"), "300KB", 25);
    let outside = o.path("outside");
    std::fs::create_dir(&outside).unwrap();
    // The receiver's "photos" leads out of its directory.
    std::os::unix::fs::symlink(&outside, o.dir(1).join("photos")).unwrap();
    let group = "239.77.1.4:7104";
    let receiver = Running::spawn(o.recv(1, group, &[]));
    let sent = Running::spawn(o.send(group, &["--wait", "20"], &[&top])).wait(LIMIT);
    let got = receiver.wait(LIMIT);
    eprintln!("sender:\n{sent}\nreceiver:\n{got}");
    got.assert_failure();
    assert!(got.stderr.contains("refused the bundle:") && got.stderr.contains("is a symbolic link"), "{got}");
    assert!(std::fs::read_dir(&outside).unwrap().next().is_none(), "nothing written outside");
    assert_eq!(tree(&o.dir(1)), ["photos"], "no temporary file left");
    sent.assert_failure();
    assert!(sent.stdout.contains("LEFT: it could not store what it received"), "{sent}");
}

/// `mcast recv --daemon --json`: session after session into its directory
/// (a file, then a directory), one JSON line each; SIGINT in the middle
/// of a third session stops it cleanly: exit 0, the sender told at once,
/// no partial file.
#[test]
fn the_receiver_daemon_takes_session_after_session_and_stops_cleanly_on_sigint() {
    let Some(o) = ops(2) else { return };
    let group = "239.77.1.5:7105";
    let first = o.path("first.bin");
    samplegen(&first, "1MB", 26);
    let top = o.path("src/docs");
    std::fs::create_dir_all(&top).unwrap();
    samplegen(&top.join("d.bin"), "500KB", 27);
    let big = o.path("big.bin");
    samplegen(&big, "100MB", 28);
    let mut daemon = Running::spawn(o.recv(1, group, &["--daemon", "--json"]));
    let s1 = Running::spawn(o.send(group, &["--wait", "20"], &[&first])).wait(LIMIT);
    s1.assert_success();
    let line1 = daemon.wait_for_line("first.bin", Duration::from_secs(60));
    let s2 = Running::spawn(o.send(group, &["--wait", "20"], &[&top])).wait(LIMIT);
    s2.assert_success();
    let line2 = daemon.wait_for_line("docs/d.bin", Duration::from_secs(60));
    // The third, slowed to 4 MB/s so that it is under way when stopped.
    let s3 = Running::spawn(o.send(group, &["--wait", "20", "--rate", "4MB"], &[&big]));
    let d = o.dir(1);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !tree(&d).iter().any(|n| n.contains("big.bin")) {
        assert!(std::time::Instant::now() < deadline, "the third session never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    common::interrupt(&daemon);
    let out = daemon.wait(Duration::from_secs(15));
    let sent3 = s3.wait(Duration::from_secs(30));
    eprintln!("daemon:\n{out}\nthird sender:\n{sent3}");
    out.assert_success();
    assert!(
        out.stderr
            .contains("stopped by SIGINT after 2 session(s): 2 received, 0 failed; the session under way was left"),
        "{out}"
    );
    for (line, name) in [(&line1, "first.bin"), (&line2, "docs")] {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!((v["ok"].as_bool(), v["name"].as_str()), (Some(true), Some(name)), "{v}");
        assert!(v["session"].as_str().is_some_and(|s| s.len() == 8), "{v}");
    }
    assert!(same(&d.join("first.bin"), &first) && same(&d.join("docs/d.bin"), &top.join("d.bin")));
    assert_eq!(tree(&d), ["docs", "docs/d.bin", "first.bin"], "no partial file of the third");
    sent3.assert_failure();
    assert!(sent3.stdout.contains("LEFT: interrupted"), "the sender was told: {sent3}");
}

/// IPv6 multicast: a file over an ff15::/16 group between 2001:db8::
/// hosts, verified byte for byte, with the sender's IPv6 address seen.
#[test]
fn a_file_crosses_an_ipv6_multicast_group_and_is_verified() {
    let Some(o) = ops(2) else { return };
    let file = o.path("v6.bin");
    samplegen(&file, "3MB", 29);
    let group = "[ff15::77:6]:7106";
    let receiver = Running::spawn(o.recv(1, group, &["--json"]));
    let sent = Running::spawn(o.send(group, &["--wait", "20"], &[&file])).wait(LIMIT);
    let got = receiver.wait(LIMIT);
    eprintln!("sender:\n{sent}\nreceiver:\n{got}");
    sent.assert_success();
    got.assert_success();
    assert!(same(&o.dir(1).join("v6.bin"), &file));
    let v: Value = serde_json::from_str(got.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {got}"));
    assert!(v["sender"].as_str().is_some_and(|s| s.starts_with("[2001:db8::1]:")), "{v}");
    assert!(sent.stdout.contains("2001:db8::2"), "the receiver by its IPv6 address: {sent}");
}

/// `--rate` is a cap on everything the session puts on a shared LAN,
/// repairs and parity included, not a target of the first sending only:
/// with 5% loss at one receiver of two, 6 MB at 16 Mbit/s (2 MB/s of
/// datagrams) averages at most 2 MB/s (+5%) over the whole transfer, and
/// so takes at least 3 s; both receivers store the file.
#[test]
fn mcast_send_rate_caps_repairs_too_when_a_receiver_is_lossy() {
    if Command::new("nft").arg("-v").output().is_err() {
        eprintln!("skipped: nft (nftables) is missing");
        return;
    }
    let Some(o) = ops(3) else { return };
    o.lab.random_loss(2, 5).expect("nftables rule");
    let file = o.path("image.bin");
    samplegen(&file, "6MB", 30);
    let group = "239.77.1.7:7107";
    let receivers: Vec<Running> = (1..=2).map(|i| Running::spawn(o.recv(i, group, &[]))).collect();
    let figures = o.path("figures.json");
    let args = ["--receivers", "2", "--wait", "20", "--rate", "16Mbit", "--json", figures.to_str().unwrap()];
    let sent = Running::spawn(o.send(group, &args, &[&file])).wait(LIMIT);
    let got: Vec<_> = receivers.into_iter().map(|r| r.wait(LIMIT)).collect();
    eprintln!("sender:\n{sent}\nlossy receiver:\n{}", got[1]);
    sent.assert_success();
    for (i, g) in got.iter().enumerate() {
        g.assert_success();
        assert!(same(&o.dir(i + 1).join("image.bin"), &file), "receiver {}", i + 1);
    }
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&figures).unwrap()).unwrap();
    let n = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k} in {v}"));
    let packets = n("data_packets") + n("parity_packets") + n("repair_multicast") + n("repair_unicast");
    assert!(packets > n("data_packets"), "the lossy receiver needed repairs or parity: {v}");
    let secs = n("transfer_s");
    let rate = packets * (n("block") + 24.0) / secs;
    eprintln!("--rate 16Mbit with repairs: {rate:.0} B/s of datagrams over {secs:.2} s ({packets} packets)");
    assert!(rate <= 2e6 * 1.05, "{rate:.0} B/s is over the 2 MB/s cap\n{v}");
    assert!(secs >= 3.0 * 0.95, "6 MB cannot go in {secs} s at 2 MB/s");
}

/// The daemon in text: a status line and a report per session; a session
/// that fails (its file exists, no --overwrite) is reported, its sender
/// told, and the daemon goes on to the next; SIGTERM while idle stops it
/// with exit 0 and a count of the sessions.
#[test]
fn the_receiver_daemon_reports_a_failed_session_goes_on_and_stops_on_sigterm() {
    let Some(o) = ops(2) else { return };
    let group = "239.77.1.8:7108";
    let (f, g) = (o.path("f.bin"), o.path("g.bin"));
    samplegen(&f, "500KB", 31);
    samplegen(&g, "700KB", 32);
    let daemon = Running::spawn(o.recv(1, group, &["--daemon"]));
    Running::spawn(o.send(group, &["--wait", "20"], &[&f])).wait(LIMIT).assert_success();
    let again = Running::spawn(o.send(group, &["--wait", "20"], &[&f])).wait(LIMIT);
    again.assert_failure();
    assert!(again.stdout.contains("LEFT: it could not store what it received"), "{again}");
    Running::spawn(o.send(group, &["--wait", "20"], &[&g])).wait(LIMIT).assert_success();
    common::signal(&daemon, "TERM");
    let out = daemon.wait(Duration::from_secs(15));
    eprintln!("daemon:\n{out}");
    out.assert_success();
    let e = &out.stderr;
    assert_eq!(e.matches(": received\n").count(), 2, "a status line per stored session\n{out}");
    assert!(e.contains("f.bin: 500.00 kB received and verified") && e.contains("g.bin: 700.00 kB received"), "{out}");
    assert!(e.contains("(f.bin): FAILED: file exists:") && e.contains("(use --overwrite)"), "{out}");
    assert!(e.contains("stopped by SIGTERM after 3 session(s): 2 received, 1 failed\n"), "{out}");
    assert!(same(&o.dir(1).join("f.bin"), &f) && same(&o.dir(1).join("g.bin"), &g));
    assert_eq!(tree(&o.dir(1)), ["f.bin", "g.bin"], "no temporary file left");
}

/// A bundle cannot be stored as one file: `recv --output` refuses it with
/// a clear error (receive it with --dir), keeps nothing, and the sender
/// learns that this receiver left.
#[test]
fn a_bundle_received_with_output_is_refused_saying_to_use_dir() {
    let Some(o) = ops(2) else { return };
    let top = o.path("src/docs");
    std::fs::create_dir_all(&top).unwrap();
    samplegen(&top.join("d.bin"), "200KB", 33);
    let group = "239.77.1.9:7109";
    let target = o.dir(1).join("one-file");
    let mut c = o.lab.exec(1);
    c.args(["mcast", "recv", "--group", group, "--iface", &o.lab.iface(1), "--wait", "60", "--output"]).arg(&target);
    let receiver = Running::spawn(c);
    let sent = Running::spawn(o.send(group, &["--wait", "20"], &[&top])).wait(LIMIT);
    let got = receiver.wait(LIMIT);
    eprintln!("sender:\n{sent}\nreceiver:\n{got}");
    got.assert_failure();
    assert!(got.stderr.contains("the session is a bundle of 1 file(s), 200000 bytes: receive it with --dir"), "{got}");
    assert!(tree(&o.dir(1)).is_empty(), "nothing kept: {:?}", tree(&o.dir(1)));
    sent.assert_failure();
    assert!(sent.stdout.contains("LEFT: it could not store"), "{sent}");
}
