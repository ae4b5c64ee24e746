//! `manyfold mcast send` / `mcast recv` over real IP multicast (spec §16):
//! one sender and three receivers in network namespaces joined by a bridge
//! (198.18.0.0/24, group 239.77.0.1), 2% random loss at one receiver from
//! an nftables rule; every receiver must store the exact file.
//!
//! Needs root (namespaces) and `ip`; without them the test says why and
//! passes without running. The namespaces are deleted on every exit path.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::netns::Lab;
use common::{samplegen, Running};

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

/// Empty directories `r1` … `rN` under `root`, one per receiver.
fn receiver_dirs(root: &Path, n: usize) -> Vec<PathBuf> {
    (1..=n)
        .map(|i| {
            let d = root.join(format!("r{i}"));
            std::fs::create_dir(&d).unwrap();
            d
        })
        .collect()
}

#[test]
fn three_receivers_in_namespaces_store_the_file_with_two_percent_loss_at_one() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let lab = Lab::new(4).expect("namespaces");
    lab.random_loss(2, 2).expect("nftables rule");
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("image.bin");
    samplegen(&file, "8MiB", 77);
    let group = "239.77.0.1:7020";
    let dirs = receiver_dirs(root.path(), 3);
    let receivers: Vec<Running> = (1..=3)
        .map(|i| {
            let mut c = lab.exec(i);
            c.args(["mcast", "recv", "--group", group, "--wait", "60", "--dir"]).arg(&dirs[i - 1]);
            Running::spawn(c)
        })
        .collect();
    let mut s = lab.exec(0);
    s.args(["mcast", "send", "--group", group, "--receivers", "3", "--wait", "20"]).arg(&file);
    let sent = Running::spawn(s).wait(LIMIT);
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
        let stored = dirs[i].join("image.bin");
        assert!(same(&stored, &file), "receiver {} stored a different file", i + 1);
        let leftovers: Vec<_> = std::fs::read_dir(&dirs[i]).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(leftovers.len(), 1, "only the file, no temporary: {leftovers:?}");
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
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let lab = Lab::new(5).expect("namespaces");
    lab.random_loss(2, 2).expect("nftables rule");
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("secret.bin");
    samplegen(&file, "4MiB", 78);
    let (key, other) = (root.path().join("group.key"), root.path().join("other.key"));
    psk_key(&key);
    psk_key(&other);
    let group = "239.77.0.2:7021";
    let dirs = receiver_dirs(root.path(), 4);
    // Receivers 1 and 2 hold the group's PSK, 3 another, 4 none.
    let keys = [Some(&key), Some(&key), Some(&other), None];
    let receivers: Vec<Running> = (1..=4)
        .map(|i| {
            let mut c = lab.exec(i);
            c.args(["mcast", "recv", "--group", group, "--wait", "15", "--dir"]).arg(&dirs[i - 1]);
            if let Some(k) = keys[i - 1] {
                c.arg("--key-file").arg(k);
            }
            Running::spawn(c)
        })
        .collect();
    let mut s = lab.exec(0);
    s.args(["mcast", "send", "--group", group, "--receivers", "2", "--wait", "20", "--key-file"]).arg(&key).arg(&file);
    let sent = Running::spawn(s).wait(LIMIT);
    let got: Vec<_> = receivers.into_iter().map(|r| r.wait(LIMIT)).collect();
    for (i, g) in got.iter().enumerate() {
        eprintln!("receiver {}:\n{g}", i + 1);
    }
    eprintln!("sender:\n{sent}");
    sent.assert_success();
    assert!(sent.stderr.contains("(encrypted: PSK)"), "the banner names the mode\n{sent}");
    assert!(sent.stdout.contains("announcing; encrypted: PSK"), "the report names the mode\n{sent}");
    assert_eq!(sent.stdout.matches("completed, hash verified").count(), 2, "{sent}");
    for i in 0..2 {
        got[i].assert_success();
        assert!(got[i].stderr.contains("verified (BLAKE3)") && got[i].stderr.contains("encrypted: PSK"), "{}", got[i]);
        assert!(same(&dirs[i].join("secret.bin"), &file), "receiver {} stored a different file", i + 1);
    }
    // Another PSK: refused by the sender, told why, nothing stored.
    got[2].assert_failure();
    assert!(got[2].stderr.contains("our key is not one the sender accepts"), "{}", got[2]);
    // No key: it hears an encrypted session and says so.
    got[3].assert_failure();
    assert!(got[3].stderr.contains("it is encrypted and this receiver has no key"), "{}", got[3]);
    for d in &dirs[2..] {
        assert!(std::fs::read_dir(d).unwrap().next().is_none(), "nothing kept in {}", d.display());
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
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let lab = Lab::new(3).expect("namespaces");
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("data.bin");
    samplegen(&file, "3MiB", 78);
    let group = "239.77.0.2:7021";
    let dir = root.path().join("r1");
    std::fs::create_dir(&dir).unwrap();
    let mut to_dir = lab.exec(1);
    to_dir.args(["mcast", "recv", "--group", group, "--wait", "60", "--dir"]).arg(&dir);
    let to_dir = Running::spawn(to_dir);
    let piped = root.path().join("stdout.bin");
    let mut to_stdout = Command::new("sh");
    to_stdout.arg("-c").arg(format!(
        "exec ip netns exec {} {} mcast recv --group {group} --wait 60 --stdout > {}",
        lab.host(2),
        env!("CARGO_BIN_EXE_manyfold"),
        piped.display()
    ));
    let to_stdout = Running::spawn(to_stdout);
    let mut s = lab.exec(0);
    s.args(["mcast", "send", "-", "--name", "piped.bin", "--group", group, "--receivers", "2", "--wait", "20"]);
    s.stdin(std::fs::File::open(&file).unwrap());
    let sent = Running::spawn(s).wait(LIMIT);
    let (a, b) = (to_dir.wait(LIMIT), to_stdout.wait(LIMIT));
    eprintln!("sender:\n{sent}\nto a directory:\n{a}\nto standard output:\n{b}");
    sent.assert_success();
    a.assert_success();
    b.assert_success();
    assert!(same(&dir.join("piped.bin"), &file), "the piped file as stored");
    assert!(same(&piped, &file), "standard output carries the stream");
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
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let (src_img, dst_img) = (root.path().join("src.img"), root.path().join("dst.img"));
    samplegen(&src_img, "4MiB", 79);
    std::fs::write(&dst_img, vec![0u8; 4 << 20]).unwrap();
    let (Some(src), Some(dst)) = (Loop::attach(&src_img), Loop::attach(&dst_img)) else {
        eprintln!("skipped: no loop devices here (losetup failed)");
        return;
    };
    let lab = Lab::new(2).expect("namespaces");
    let group = "239.77.0.3:7022";
    let mut r = lab.exec(1);
    r.args(["mcast", "recv", "--group", group, "--wait", "60", "--output", &dst.0]);
    let r = Running::spawn(r);
    let mut s = lab.exec(0);
    s.args(["mcast", "send", "--name", "disk.img", "--group", group, "--wait", "20", &src.0]);
    let sent = Running::spawn(s).wait(LIMIT);
    let got = r.wait(LIMIT);
    eprintln!("sender:\n{sent}\nreceiver:\n{got}");
    sent.assert_success();
    got.assert_success();
    drop(dst);
    assert!(same(&dst_img, &src_img), "the device's contents were replicated");
}

/// Issue 19 item 3, the receiver's half: SIGINT during `mcast recv` ends
/// it at once (status 130, saying so), tells the sender and deletes its
/// partial file.
#[test]
fn an_interrupted_mcast_receiver_deletes_its_partial_file() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let lab = Lab::new(2).expect("namespaces");
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("image.bin");
    samplegen(&file, "200MiB", 5);
    let group = "239.77.0.3:7024";
    let dir = receiver_dirs(root.path(), 1).remove(0);
    let mut r = lab.exec(1);
    r.args(["mcast", "recv", "--group", group, "--wait", "60", "--dir"]).arg(&dir);
    let receiver = Running::spawn(r);
    let mut s = lab.exec(0);
    s.args(["mcast", "send", "--group", group, "--receivers", "1", "--wait", "20"]).arg(&file);
    let _sender = Running::spawn(s);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let has_data = || std::fs::read_dir(&dir).unwrap().flatten().any(|e| e.metadata().is_ok_and(|m| m.len() > 0));
    while !has_data() {
        assert!(std::time::Instant::now() < deadline, "the receiver never wrote anything");
        std::thread::sleep(Duration::from_millis(20));
    }
    common::interrupt(&receiver);
    let out = receiver.wait(Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(130), "{out}");
    assert!(
        out.stderr.contains("interrupted by SIGINT; the sender was told, and the partial file was deleted"),
        "{out}"
    );
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Issue 19 item 3, the sender's half: SIGINT during `mcast send` ends the
/// session with an END carrying "interrupted", and the receiver says so
/// at once instead of waiting out its sender timeout.
#[test]
fn an_interrupted_mcast_sender_is_reported_by_its_receiver_at_once() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let lab = Lab::new(2).expect("namespaces");
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("image.bin");
    samplegen(&file, "200MiB", 6);
    let group = "239.77.0.4:7026";
    let dir = receiver_dirs(root.path(), 1).remove(0);
    let mut r = lab.exec(1);
    r.args(["mcast", "recv", "--group", group, "--wait", "60", "--dir"]).arg(&dir);
    let receiver = Running::spawn(r);
    let mut s = lab.exec(0);
    s.args(["mcast", "send", "--group", group, "--receivers", "1", "--wait", "20"]).arg(&file);
    let sender = Running::spawn(s);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let has_data = || std::fs::read_dir(&dir).unwrap().flatten().any(|e| e.metadata().is_ok_and(|m| m.len() > 0));
    while !has_data() {
        assert!(std::time::Instant::now() < deadline, "the receiver never wrote anything");
        std::thread::sleep(Duration::from_millis(20));
    }
    let t = std::time::Instant::now();
    common::interrupt(&sender);
    let out = receiver.wait(Duration::from_secs(10));
    let took = t.elapsed();
    eprintln!("the receiver reported it after {took:?}");
    out.assert_failure();
    assert!(out.stderr.contains("the sender was interrupted"), "{out}");
    assert!(took < Duration::from_secs(4), "{took:?}\n{out}");
    let sent = sender.wait(Duration::from_secs(10));
    assert_eq!(sent.status.code(), Some(130), "{sent}");
    assert!(sent.stderr.contains("interrupted by SIGINT; every receiver was told"), "{sent}");
}
