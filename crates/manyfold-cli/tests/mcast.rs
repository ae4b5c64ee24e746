//! `manyfold mcast send` / `mcast recv` over real IP multicast (spec §16):
//! one sender and receivers in network namespaces joined by a bridge
//! (198.18.0.0/24, groups 239.77.0.0/24), some with random loss from an
//! nftables rule; every receiver must store the exact file.
//!
//! Needs root (namespaces), `ip` and `nft`; without them each test says
//! why and passes without running. The namespaces are deleted on every
//! exit path (the lab's Drop).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::netns::Lab;
use common::{samplegen, Running};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(120);

fn skip_reason() -> Option<String> {
    if is_root() {
        if Command::new("ip").arg("-V").output().is_err() {
            return Some("the ip command is missing".into());
        }
        if Command::new("nft").arg("-v").output().is_err() {
            return Some("nft (nftables) is missing".into());
        }
        None
    } else {
        Some("not root: network namespaces need it".into())
    }
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn same(a: &Path, b: &Path) -> bool {
    std::fs::read(a).ok() == std::fs::read(b).ok()
}

/// One test's multicast set-up: `hosts` namespaces (host 0 sends, the
/// others receive), a temporary directory holding the file to send and an
/// empty directory per receiver, and the test's group.
struct McastLab {
    lab: Lab,
    root: tempfile::TempDir,
    file: PathBuf,
    group: &'static str,
}

/// The set-up, or `None` after saying why the test cannot run here.
fn mcast_lab(hosts: usize, group: &'static str, name: &str, size: &str, seed: u64) -> Option<McastLab> {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return None;
    }
    let lab = Lab::new(hosts).expect("namespaces");
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join(name);
    samplegen(&file, size, seed);
    for i in 1..hosts {
        std::fs::create_dir(root.path().join(format!("r{i}"))).unwrap();
    }
    Some(McastLab { lab, root, file, group })
}

impl McastLab {
    /// Receiver `i`'s directory (`r1` … in the temporary directory).
    fn dir(&self, i: usize) -> PathBuf {
        self.root.path().join(format!("r{i}"))
    }

    /// `mcast recv` on host `i` into its directory, waiting up to `wait`
    /// seconds for a session, with `extra` flags.
    fn recv(&self, i: usize, wait: u32, extra: &[&str]) -> Command {
        let mut c = self.lab.exec(i);
        c.args(["mcast", "recv", "--group", self.group, "--wait", &wait.to_string(), "--dir"]).arg(self.dir(i));
        c.args(extra);
        c
    }

    /// `mcast send` of the file on host 0, with `extra` flags.
    fn send(&self, extra: &[&str]) -> Command {
        let mut c = self.lab.exec(0);
        c.args(["mcast", "send", "--group", self.group]).args(extra).arg(&self.file);
        c
    }

    /// Waits (at most a minute) until receiver `i` has written something.
    fn wait_for_data(&self, i: usize) {
        let dir = self.dir(i);
        let deadline = Instant::now() + Duration::from_secs(60);
        let has_data = || std::fs::read_dir(&dir).unwrap().flatten().any(|e| e.metadata().is_ok_and(|m| m.len() > 0));
        while !has_data() {
            assert!(Instant::now() < deadline, "receiver {i} never wrote anything");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What receiver `i`'s directory holds.
    fn left_in(&self, i: usize) -> Vec<std::ffi::OsString> {
        std::fs::read_dir(self.dir(i)).unwrap().flatten().map(|e| e.file_name()).collect()
    }
}

#[test]
fn three_receivers_in_namespaces_store_the_file_with_two_percent_loss_at_one() {
    let Some(m) = mcast_lab(4, "239.77.0.1:7020", "image.bin", "8MiB", 77) else { return };
    m.lab.random_loss(2, 2).expect("nftables rule");
    let receivers: Vec<Running> = (1..=3).map(|i| Running::spawn(m.recv(i, 60, &[]))).collect();
    let sent = Running::spawn(m.send(&["--receivers", "3", "--wait", "20"])).wait(LIMIT);
    let got: Vec<_> = receivers.into_iter().map(|r| r.wait(LIMIT)).collect();
    if !sent.status.success() || got.iter().any(|g| !g.status.success()) {
        for (i, g) in got.iter().enumerate() {
            eprintln!("receiver {}:\n{g}", i + 1);
        }
    }
    eprintln!("sender:\n{sent}");
    sent.assert_success();
    assert!(sent.stdout.matches("completed, hash verified").count() == 3, "{sent}");
    for (i, g) in got.iter().enumerate() {
        g.assert_success();
        assert!(same(&m.dir(i + 1).join("image.bin"), &m.file), "receiver {} stored a different file", i + 1);
        assert_eq!(m.left_in(i + 1).len(), 1, "only the file, no temporary: {:?}", m.left_in(i + 1));
    }
    // The lossy receiver needed repairs; the report says how many.
    assert!(got[1].stderr.contains("repaired"), "{}", got[1]);
}

/// `manyfold keygen --psk` into `path`.
fn psk_key(path: &Path) {
    common::run_args(&["keygen", path.to_str().unwrap(), "--psk"], LIMIT).assert_success();
}

#[test]
fn encrypted_multicast_reaches_every_receiver_and_refuses_the_others() {
    let Some(m) = mcast_lab(5, "239.77.0.2:7021", "secret.bin", "4MiB", 78) else { return };
    m.lab.random_loss(2, 2).expect("nftables rule");
    let (key, other) = (m.root.path().join("group.key"), m.root.path().join("other.key"));
    psk_key(&key);
    psk_key(&other);
    // Receivers 1 and 2 hold the group's PSK, 3 another, 4 none.
    let keys = [Some(&key), Some(&key), Some(&other), None];
    let receivers: Vec<Running> = (1..=4)
        .map(|i| {
            let mut c = m.recv(i, 15, &[]);
            if let Some(k) = keys[i - 1] {
                c.arg("--key-file").arg(k);
            }
            Running::spawn(c)
        })
        .collect();
    let sent =
        Running::spawn(m.send(&["--receivers", "2", "--wait", "20", "--key-file", key.to_str().unwrap()])).wait(LIMIT);
    let got: Vec<_> = receivers.into_iter().map(|r| r.wait(LIMIT)).collect();
    for (i, g) in got.iter().enumerate() {
        eprintln!("receiver {}:\n{g}", i + 1);
    }
    eprintln!("sender:\n{sent}");
    sent.assert_success();
    assert!(sent.stderr.contains("(encrypted: PSK)"), "the banner names the mode\n{sent}");
    assert!(sent.stdout.contains("announcing; encrypted: PSK"), "the report names the mode\n{sent}");
    assert_eq!(sent.stdout.matches("completed, hash verified").count(), 2, "{sent}");
    for (i, g) in got.iter().enumerate().take(2) {
        g.assert_success();
        assert!(g.stderr.contains("verified (BLAKE3)") && g.stderr.contains("encrypted: PSK"), "{g}");
        assert!(same(&m.dir(i + 1).join("secret.bin"), &m.file), "receiver {} stored a different file", i + 1);
    }
    // Another PSK: refused by the sender, told why, nothing stored.
    got[2].assert_failure();
    assert!(got[2].stderr.contains("our key is not one it accepts"), "{}", got[2]);
    // No key: it hears an encrypted session and says so.
    got[3].assert_failure();
    assert!(got[3].stderr.contains("it is encrypted and this receiver has no key"), "{}", got[3]);
    for i in 3..=4 {
        assert!(m.left_in(i).is_empty(), "nothing kept by receiver {i}");
    }
}

#[test]
fn a_group_address_that_is_not_multicast_is_refused_by_name() {
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("f.bin");
    samplegen(&file, "1KiB", 1);
    let out = common::run_args(&["mcast", "send", "--group", "198.18.0.1:7020", file.to_str().unwrap()], LIMIT);
    out.assert_failure();
    assert!(out.stderr.contains("not an IPv4 multicast address"), "{out}");
    let out = common::run_args(&["mcast", "recv", "--group", "239.1.1.1:7020"], LIMIT);
    out.assert_failure();
    assert!(out.stderr.contains("--dir DIR, --output PATH or --stdout"), "{out}");
}

#[test]
fn standard_input_of_unknown_length_streams_to_a_file_and_to_standard_output() {
    let Some(m) = mcast_lab(3, "239.77.0.2:7021", "data.bin", "3MiB", 78) else { return };
    let to_dir = Running::spawn(m.recv(1, 60, &[]));
    let piped = m.root.path().join("stdout.bin");
    let mut to_stdout = Command::new("sh");
    to_stdout.arg("-c").arg(format!(
        "exec ip netns exec {} {} mcast recv --group {} --wait 60 --stdout > {}",
        m.lab.host(2),
        env!("CARGO_BIN_EXE_manyfold"),
        m.group,
        piped.display()
    ));
    let to_stdout = Running::spawn(to_stdout);
    let mut s = m.lab.exec(0);
    s.args(["mcast", "send", "-", "--name", "piped.bin", "--group", m.group, "--receivers", "2", "--wait", "20"]);
    s.stdin(std::fs::File::open(&m.file).unwrap());
    let sent = Running::spawn(s).wait(LIMIT);
    let (a, b) = (to_dir.wait(LIMIT), to_stdout.wait(LIMIT));
    eprintln!("sender:\n{sent}\nto a directory:\n{a}\nto standard output:\n{b}");
    sent.assert_success();
    a.assert_success();
    b.assert_success();
    assert!(same(&m.dir(1).join("piped.bin"), &m.file), "the piped file as stored");
    assert!(same(&piped, &m.file), "standard output carries the stream");
}

/// A loop device over `image`, detached on drop.
struct Loop(String);

impl Loop {
    fn attach(image: &Path) -> Option<Loop> {
        let out = Command::new("losetup").args(["-f", "--show"]).arg(image).output().ok()?;
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (out.status.success() && dev.starts_with("/dev/loop")).then_some(Loop(dev))
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).output();
    }
}

#[test]
fn a_block_device_is_replicated_onto_another_block_device() {
    let Some(m) = mcast_lab(2, "239.77.0.3:7022", "src.img", "4MiB", 79) else { return };
    let dst_img = m.root.path().join("dst.img");
    std::fs::write(&dst_img, vec![0u8; 4 << 20]).unwrap();
    let (Some(src), Some(dst)) = (Loop::attach(&m.file), Loop::attach(&dst_img)) else {
        eprintln!("skipped: no loop devices here (losetup failed)");
        return;
    };
    let mut r = m.lab.exec(1);
    r.args(["mcast", "recv", "--group", m.group, "--wait", "60", "--output", &dst.0]);
    let r = Running::spawn(r);
    let mut s = m.lab.exec(0);
    s.args(["mcast", "send", "--name", "disk.img", "--group", m.group, "--wait", "20", &src.0]);
    let sent = Running::spawn(s).wait(LIMIT);
    let got = r.wait(LIMIT);
    eprintln!("sender:\n{sent}\nreceiver:\n{got}");
    sent.assert_success();
    got.assert_success();
    drop(dst);
    assert!(same(&dst_img, &m.file), "the device's contents were replicated");
}

/// Issue 19 item 3, the receiver's half: SIGINT during `mcast recv` ends
/// it at once (status 130, saying so), tells the sender and deletes its
/// partial file.
#[test]
fn an_interrupted_mcast_receiver_deletes_its_partial_file() {
    let Some(m) = mcast_lab(2, "239.77.0.3:7024", "image.bin", "200MiB", 5) else { return };
    let receiver = Running::spawn(m.recv(1, 60, &[]));
    let _sender = Running::spawn(m.send(&["--receivers", "1", "--wait", "20"]));
    m.wait_for_data(1);
    common::interrupt(&receiver);
    let out = receiver.wait(Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(130), "{out}");
    assert!(
        out.stderr.contains("interrupted by SIGINT; the sender was told, and the partial file was deleted"),
        "{out}"
    );
    assert!(m.left_in(1).is_empty(), "left behind: {:?}", m.left_in(1));
}

/// Issue 19 item 3, the sender's half: SIGINT during `mcast send` ends the
/// session with an END carrying "interrupted", and the receiver says so
/// at once, once, instead of waiting out its sender timeout.
#[test]
fn an_interrupted_mcast_sender_is_reported_by_its_receiver_at_once() {
    let Some(m) = mcast_lab(2, "239.77.0.4:7026", "image.bin", "200MiB", 6) else { return };
    let receiver = Running::spawn(m.recv(1, 60, &[]));
    let sender = Running::spawn(m.send(&["--receivers", "1", "--wait", "20"]));
    m.wait_for_data(1);
    let t = Instant::now();
    common::interrupt(&sender);
    let out = receiver.wait(Duration::from_secs(10));
    let took = t.elapsed();
    eprintln!("the receiver reported it after {took:?}");
    out.assert_failure();
    assert_eq!(out.stderr.matches("interrupted").count(), 1, "the cause is said once\n{out}");
    assert!(out.stderr.contains("the sender was interrupted"), "{out}");
    assert!(took < Duration::from_secs(4), "{took:?}\n{out}");
    let sent = sender.wait(Duration::from_secs(10));
    assert_eq!(sent.status.code(), Some(130), "{sent}");
    assert!(sent.stderr.contains("interrupted by SIGINT; every receiver was told"), "{sent}");
}

/// Issue 23 item 3: `mcast recv --json` prints one object for its session
/// on stdout, every field checked.
#[test]
fn mcast_recv_json_gives_one_object_for_its_session() {
    let Some(m) = mcast_lab(2, "239.77.0.5:7028", "image.bin", "2MiB", 7) else { return };
    let receiver = Running::spawn(m.recv(1, 60, &["--json"]));
    let sent = Running::spawn(m.send(&["--receivers", "1", "--wait", "20"])).wait(LIMIT);
    let got = receiver.wait(LIMIT);
    eprintln!("sender:\n{sent}\nreceiver:\n{got}");
    sent.assert_success();
    got.assert_success();
    let lines: Vec<&str> = got.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one object, nothing else on stdout\n{got}");
    let v: Value = serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("not JSON ({e}): {}", lines[0]));
    let stored = m.dir(1).join("image.bin");
    assert!(same(&stored, &m.file));
    assert_eq!((v["ok"].as_bool(), v["error"].is_null()), (Some(true), true), "{v}");
    assert_eq!((v["name"].as_str(), v["stored"].as_str()), (Some("image.bin"), stored.to_str()), "{v}");
    assert_eq!(v["sender"].as_str().map(|s| s.starts_with("198.18.0.1:")), Some(true), "{v}");
    assert_eq!(v["bytes"].as_u64(), Some(2 << 20), "{v}");
    let hash = blake3::hash(&std::fs::read(&m.file).unwrap()).to_hex().to_string();
    assert_eq!(v["blake3"].as_str(), Some(hash.as_str()), "{v}");
    assert_eq!(v["encrypted"].as_bool(), Some(false), "{v}");
    let secs = v["seconds"].as_f64().unwrap();
    assert!(secs > 0.0 && secs < 120.0, "{v}");
    let goodput = v["goodput_bytes_per_second"].as_f64().unwrap();
    assert!((goodput - (2 << 20) as f64 / secs).abs() <= 1e-6 * goodput, "{v}");
    let count = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    let block_packets = count("data_packets") + count("repairs_received") + count("fec_recovered");
    assert!(block_packets >= (2 << 20) / 1452, "every packet of the file came one way or another: {v}");
    for k in ["parity_received", "duplicates", "acks_sent", "acks_suppressed", "nacks_sent", "nacks_suppressed"] {
        count(k);
    }
    assert_eq!(count("repair_requests"), 0, "no loss here: {v}");
}

/// Issue 23 item 3: `mcast send --rate` holds the sender to the cap
/// whatever its flow control allows (spec §16.3): 10 MB at 16 Mbit/s
/// (2 MB/s of datagrams, headers included) takes 5 s ± 10%.
#[test]
fn mcast_send_rate_caps_the_session_within_ten_percent_over_five_seconds() {
    let Some(m) = mcast_lab(2, "239.77.0.6:7030", "image.bin", "10MB", 8) else { return };
    let receiver = Running::spawn(m.recv(1, 60, &[]));
    let figures = m.root.path().join("figures.json");
    let sent = Running::spawn(m.send(&["--rate", "16Mbit", "--json", figures.to_str().unwrap()])).wait(LIMIT);
    let got = receiver.wait(LIMIT);
    eprintln!("sender:\n{sent}\nreceiver:\n{got}");
    sent.assert_success();
    got.assert_success();
    assert!(same(&m.dir(1).join("image.bin"), &m.file));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&figures).unwrap()).unwrap();
    // The data phase (every packet sent once), and what went on the wire
    // in it: DATA datagrams of 1452 bytes (1428 of the file).
    let secs = v["data_s"].as_f64().unwrap();
    let rate = v["data_packets"].as_f64().unwrap() * 1452.0 / secs;
    eprintln!("mcast send --rate 16Mbit (2 MB/s): {rate:.0} B/s of datagrams over {secs:.2} s");
    assert!(secs > 4.0, "10 MB cannot go in {secs} s at 2 MB/s");
    assert!((rate / 2e6 - 1.0).abs() <= 0.10, "{rate:.0} B/s is not within 10% of 2 MB/s\n{v}");
}

/// Issue 23 item 4: `--receivers 2` with one joined by the end of --wait:
/// the one that joined gets the file, and the command fails saying how
/// many joined.
#[test]
fn mcast_send_with_fewer_receivers_than_asked_for_fails_saying_so() {
    let Some(m) = mcast_lab(2, "239.77.0.7:7032", "image.bin", "1MB", 9) else { return };
    let receiver = Running::spawn(m.recv(1, 60, &[]));
    let sent = Running::spawn(m.send(&["--receivers", "2", "--wait", "2"])).wait(LIMIT);
    let got = receiver.wait(LIMIT);
    eprintln!("sender:\n{sent}\nreceiver:\n{got}");
    sent.assert_failure();
    assert!(
        sent.stderr.contains("only 1 of the 2 receivers asked for (--receivers 2) joined")
            && sent.stderr.contains("those that joined have the file"),
        "{sent}"
    );
    got.assert_success();
    assert!(same(&m.dir(1).join("image.bin"), &m.file));
}

/// Issue 23's tmux check of `mcast recv`: idle, it says what it waits for
/// (no full "0 B/0 B" bar); during a session its bar counts bytes against
/// the file's size with a rate; the verified report follows.
#[test]
fn the_mcast_recv_bar_waits_then_counts_bytes_against_the_size_then_reports() {
    if !common::tmux::available() {
        eprintln!("skipped: tmux is not installed");
        return;
    }
    let Some(m) = mcast_lab(2, "239.77.0.6:7029", "bar.bin", "20MB", 9) else { return };
    let recv = m.recv(1, 60, &[]);
    let line = std::iter::once(recv.get_program())
        .chain(recv.get_args())
        .map(|a| a.to_str().expect("UTF-8 arguments"))
        .collect::<Vec<_>>()
        .join(" ");
    let t = common::tmux::Tmux::run(&format!("manyfold-mcast-bar-{}", std::process::id()), &line);
    let idle = t.wait_for("waiting for a sender's session", Duration::from_secs(20));
    assert!(!idle.contains("0 B/0 B"), "no full bar before any session:\n{idle}");
    // 4 MB/s: five seconds of bar to look at.
    let sender = Running::spawn(m.send(&["--receivers", "1", "--wait", "20", "--rate", "4MB"]));
    let screen = t.wait_for("MB/20.00 MB", Duration::from_secs(30));
    assert!(screen.contains("MB/s"), "a rate beside the bytes:\n{screen}");
    let done = t.wait_for("received and verified (BLAKE3)", Duration::from_secs(60));
    assert!(done.contains("bar.bin: 20.00 MB received"), "{done}");
    sender.wait(LIMIT).assert_success();
}
