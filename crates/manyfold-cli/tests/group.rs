//! `manyfold send FILE --to A,B,C` end to end on 127.0.0.1 (spec §14):
//! every receiver stores the file through 5% loss; a receiver that refuses
//! fails the run and is named while the others still get the file; a
//! spread (`--mode subset=2/1`, `at-least=2`) leaves verified shards whose
//! blocks cover the file as the mode promises.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{entries, manyfold, run_args, samplegen, Running};

const LIMIT: Duration = Duration::from_secs(90);

/// Three `manyfold recv --once` into their own directories.
fn receivers(root: &Path, n: usize) -> Vec<(Running, String, PathBuf)> {
    (0..n)
        .map(|i| {
            let dir = root.join(format!("inbox{i}"));
            std::fs::create_dir(&dir).unwrap();
            let mut cmd = manyfold();
            cmd.args(["recv", "--listen", "127.0.0.1:0", "--once", "--dir"]).arg(&dir);
            let mut r = Running::spawn(cmd);
            let addr = r.listening_addr().to_string();
            (r, addr, dir)
        })
        .collect()
}

fn send(file: &Path, to: &[&str], extra: &[&str]) -> common::Output {
    let to = to.join(",");
    let mut args = vec!["send", file.to_str().unwrap(), "--to", &to];
    args.extend_from_slice(extra);
    run_args(&args, LIMIT)
}

#[test]
fn three_receivers_each_store_the_file_through_five_percent_loss() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("sample.bin");
    samplegen(&src, "4MB", 5);
    let rx = receivers(tmp.path(), 3);
    let addrs: Vec<&str> = rx.iter().map(|r| r.1.as_str()).collect();
    let sent = send(&src, &addrs, &["--loss", "5"]);
    sent.assert_success();
    let original = std::fs::read(&src).unwrap();
    let hash = blake3::hash(&original).to_hex().to_string();
    assert!(sent.stdout.contains("3 saved it"), "{sent}");
    for (recv, addr, dir) in rx {
        recv.wait(LIMIT).assert_success();
        assert_eq!(entries(&dir), ["sample.bin"], "only the final file in {}", dir.display());
        assert!(std::fs::read(dir.join("sample.bin")).unwrap() == original, "{addr}'s copy differs");
        let line = sent.stdout.lines().find(|l| l.contains(&addr)).unwrap_or_default();
        assert!(line.contains("ok") && line.contains(&hash), "report line for {addr}: {line}\n{sent}");
    }
    assert!(sent.stdout.contains("retransmissions") && sent.stdout.contains("srtt"), "{sent}");
}

#[test]
fn a_refusing_receiver_is_named_and_fails_the_run_while_the_others_get_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("sample.bin");
    samplegen(&src, "1MB", 6);
    let rx = receivers(tmp.path(), 3);
    // The second receiver already has a file of that name.
    std::fs::write(rx[1].2.join("sample.bin"), b"older").unwrap();
    let addrs: Vec<&str> = rx.iter().map(|r| r.1.as_str()).collect();
    let sent = send(&src, &addrs, &[]);
    sent.assert_failure();
    assert!(sent.stderr.contains("reached 2 of 3 receivers"), "{sent}");
    let line = sent.stdout.lines().find(|l| l.contains(addrs[1])).unwrap_or_default();
    assert!(line.contains("FAIL") && line.contains("file exists"), "{line}\n{sent}");
    let original = std::fs::read(&src).unwrap();
    for (i, (recv, _, dir)) in rx.into_iter().enumerate() {
        let out = recv.wait(LIMIT);
        if i == 1 {
            out.assert_failure();
            assert_eq!(std::fs::read(dir.join("sample.bin")).unwrap(), b"older", "left untouched");
        } else {
            out.assert_success();
            assert!(std::fs::read(dir.join("sample.bin")).unwrap() == original);
        }
    }
}

/// Reads each receiver's shard index and checks every listed block against
/// the original; returns how many receivers hold each block offset.
fn shard_holders(dirs: &[PathBuf], original: &[u8]) -> BTreeMap<u64, usize> {
    let mut holders = BTreeMap::new();
    for dir in dirs {
        if entries(dir) == ["sample.bin"] {
            // This receiver got every block: it saved the whole file.
            assert!(std::fs::read(dir.join("sample.bin")).unwrap() == original, "{}", dir.display());
            for off in (0..original.len()).step_by(1 << 20) {
                *holders.entry(off as u64).or_default() += 1;
            }
            continue;
        }
        let index = std::fs::read_to_string(dir.join("sample.bin.shard.blocks")).unwrap();
        let shard = std::fs::read(dir.join("sample.bin.shard")).unwrap();
        assert_eq!(shard.len(), original.len());
        assert!(index.contains(&blake3::hash(original).to_hex().to_string()), "index names the whole file's hash");
        for line in index.lines().filter(|l| l.starts_with(|c: char| c.is_ascii_digit())) {
            let mut f = line.split(' ');
            let off: usize = f.next().unwrap().parse().unwrap();
            let len: usize = f.next().unwrap().parse().unwrap();
            assert_eq!(&shard[off..off + len], &original[off..off + len], "{} block at {off}", dir.display());
            *holders.entry(off as u64).or_default() += 1;
        }
    }
    holders
}

#[test]
fn a_spread_file_leaves_verified_shards_covering_it_as_the_mode_promises() {
    for (mode, copies) in [("subset=2/1", 1..=2), ("at-least=2", 2..=3), ("at-least=3", 3..=3)] {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("sample.bin");
        samplegen(&src, "6MB", 7);
        let rx = receivers(tmp.path(), 3);
        let addrs: Vec<&str> = rx.iter().map(|r| r.1.as_str()).collect();
        let sent = send(&src, &addrs, &["--mode", mode, "--loss", "3"]);
        sent.assert_success();
        assert!(sent.stdout.contains("0 lost with every copy"), "{sent}");
        let mut dirs = Vec::new();
        for (recv, _, dir) in rx {
            recv.wait(LIMIT).assert_success();
            dirs.push(dir);
        }
        let original = std::fs::read(&src).unwrap();
        if mode == "at-least=3" {
            // Every receiver has every block: each saved the file itself.
            assert!(dirs.iter().all(|d| entries(d) == ["sample.bin"]), "{mode}");
        }
        let holders = shard_holders(&dirs, &original);
        let blocks = original.len().div_ceil(1 << 20) as u64;
        assert_eq!(holders.len() as u64, blocks, "{mode}: every block is held somewhere");
        assert!(holders.values().all(|n| copies.contains(n)), "{mode}: {holders:?}");
    }
}
