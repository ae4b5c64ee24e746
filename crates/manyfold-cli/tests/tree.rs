//! Issue 23 item 1: `send` of several files and directories (modes,
//! mtimes and links kept, like `rsync -a`) and of standard input; the
//! receiver refuses every path that would leave its directory; a file
//! that changes while it is sent is stored nowhere (item 2).

mod common;

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::{entries, manyfold, run_args, samplegen, Running};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(90);

fn recv_once(dir: &Path, extra: &[&str]) -> (Running, String) {
    common::recv_into(dir, &[&["--once"], extra].concat())
}

fn set_mtime(path: &Path, secs: u64) {
    let t = std::time::UNIX_EPOCH + Duration::from_secs(secs);
    std::fs::File::open(path).unwrap().set_modified(t).unwrap();
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

/// `t/` with `a/` (0755, an old mtime) holding `b/f` (0640) and `x.bin`
/// (0755), and `a/lnk -> b/f`, a link inside the tree.
fn make_tree(root: &Path) -> std::path::PathBuf {
    let t = root.join("t");
    std::fs::create_dir_all(t.join("a/b")).unwrap();
    std::fs::write(t.join("a/b/f"), b"nested file\n").unwrap();
    samplegen(&t.join("x.bin"), "2MB", 5);
    std::fs::set_permissions(t.join("a/b/f"), std::fs::Permissions::from_mode(0o640)).unwrap();
    std::fs::set_permissions(t.join("x.bin"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("b/f", t.join("a/lnk")).unwrap();
    set_mtime(&t.join("a/b/f"), 1_500_000_000);
    set_mtime(&t.join("x.bin"), 1_600_000_000);
    std::fs::set_permissions(t.join("a"), std::fs::Permissions::from_mode(0o750)).unwrap();
    set_mtime(&t.join("a"), 1_400_000_000);
    t
}

#[test]
fn a_directory_tree_arrives_with_its_modes_mtimes_and_links() {
    let tmp = tempfile::tempdir().unwrap();
    let t = make_tree(tmp.path());
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    let (recv, addr) = recv_once(&inbox, &[]);
    let sent = run_args(&["send", t.to_str().unwrap(), "--to", &addr, "-v"], LIMIT);
    sent.assert_success();
    recv.wait(LIMIT).assert_success();

    let got = inbox.join("t");
    for rel in ["a/b/f", "x.bin"] {
        assert_eq!(std::fs::read(got.join(rel)).unwrap(), std::fs::read(t.join(rel)).unwrap(), "{rel} differs");
        let (src, dst) = (std::fs::metadata(t.join(rel)).unwrap(), std::fs::metadata(got.join(rel)).unwrap());
        assert_eq!((dst.mtime(), dst.mtime_nsec()), (src.mtime(), src.mtime_nsec()), "{rel}'s mtime");
    }
    assert_eq!((mode(&got.join("a/b/f")), mode(&got.join("x.bin")), mode(&got.join("a"))), (0o640, 0o755, 0o750));
    assert_eq!(std::fs::metadata(got.join("a")).unwrap().mtime(), 1_400_000_000, "a directory's mtime");
    assert_eq!(std::fs::read_link(got.join("a/lnk")).unwrap(), Path::new("b/f"), "the link is a link");
    assert_eq!(std::fs::read(got.join("a/lnk")).unwrap(), b"nested file\n");
    assert_eq!(entries(&got.join("a")), ["b", "lnk"], "no temporary file is left");
    assert_eq!(entries(&got), ["a", "x.bin"]);
    // One report for the tree, a line per file with -v.
    assert!(sent.stdout.contains("sent t to 127.0.0.1:"), "{sent}");
    assert!(sent.stdout.contains("2 files, 3 directories, 1 link"), "{sent}");
    let hash = blake3::hash(&std::fs::read(t.join("x.bin")).unwrap()).to_hex().to_string();
    assert!(sent.stdout.contains(&format!("file t/x.bin  2.00 MB  blake3 {hash}")), "{sent}");
}

#[test]
fn several_paths_and_json_give_one_object_with_a_line_per_file() {
    let tmp = tempfile::tempdir().unwrap();
    let t = make_tree(tmp.path());
    let single = tmp.path().join("single.txt");
    std::fs::write(&single, b"alone").unwrap();
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    let mut cmd = manyfold();
    cmd.args(["recv", "--listen", "127.0.0.1:0", "--once", "--json", "--dir"]).arg(&inbox);
    let mut recv = Running::spawn(cmd);
    let listening: Value = serde_json::from_str(&recv.wait_for_line("listening", LIMIT)).unwrap();
    let addr = listening["listening"].as_str().unwrap().to_string();
    let sent = run_args(&["send", t.to_str().unwrap(), single.to_str().unwrap(), "--to", &addr, "--json"], LIMIT);
    sent.assert_success();
    let received = recv.wait(LIMIT);
    received.assert_success();
    assert_eq!(entries(&inbox), ["single.txt", "t"]);

    let lines: Vec<&str> = sent.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one object for the whole transfer:\n{sent}");
    let v: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(v["direction"], "sent", "{v}");
    assert_eq!(v["name"], "t, single.txt", "{v}");
    assert_eq!((v["directories"].as_u64(), v["links"].as_u64()), (Some(3), Some(1)), "{v}");
    assert!(v["blake3"].is_null(), "a tree has a hash per file: {v}");
    let files = v["files"].as_array().expect("files");
    let listed: Vec<(&str, u64)> =
        files.iter().map(|f| (f["path"].as_str().unwrap(), f["bytes"].as_u64().unwrap())).collect();
    assert_eq!(listed, [("t/a/b/f", 12), ("t/x.bin", 2_000_000), ("single.txt", 5)]);
    for f in files {
        let data = std::fs::read(inbox.join(f["path"].as_str().unwrap())).unwrap();
        assert_eq!(f["blake3"], blake3::hash(&data).to_hex().to_string(), "{f}");
    }
    assert_eq!(v["bytes"].as_u64(), Some(2_000_017), "{v}");
    // The receiver's object (after its "listening" line) says the same.
    let last = received.stdout.lines().last().unwrap();
    let r: Value = serde_json::from_str(last).unwrap();
    assert_eq!((r["direction"].as_str(), r["files"].as_array().map(Vec::len)), (Some("received"), Some(3)), "{r}");
}

#[test]
fn stdin_of_unknown_length_arrives_with_its_hash_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    let (recv, addr) = recv_once(&inbox, &[]);
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let mut cmd = manyfold();
    cmd.args(["send", "-", "--name", "piped.bin", "--to", &addr]).stdin(Stdio::piped());
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = {
        let data = data.clone();
        std::thread::spawn(move || {
            // In pieces with pauses: the length is not known up front.
            for piece in data.chunks(500_000) {
                stdin.write_all(piece).unwrap();
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    writer.join().unwrap();
    let out = common::wait_child(child, LIMIT);
    assert!(out.status.success(), "{out}");
    recv.wait(LIMIT).assert_success();
    assert_eq!(std::fs::read(inbox.join("piped.bin")).unwrap(), data);
    assert!(out.stdout.contains(blake3::hash(&data).to_hex().as_str()), "{out}");
    assert!(out.stdout.contains("(3000000 bytes)"), "{out}");
}

#[test]
fn paths_and_links_leaving_the_directory_are_refused_by_the_receiver() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("ok.txt");
    std::fs::write(&file, b"fine").unwrap();
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    for (entry, why) in [
        ("L:evil:../outside", "leads out of the receiving directory"),
        ("L:evil:/etc/passwd", "absolute target"),
        ("F:../x", "leaves the receiving directory"),
        ("F:/tmp/abs", "is absolute"),
        ("F:nodir/x", "not inside a directory listed before it"),
        ("F:..", "leaves the receiving directory"),
        ("D:a\x1b[2J", "control character"),
    ] {
        let (recv, addr) = recv_once(&inbox, &[]);
        let sent = run_args(&["send", file.to_str().unwrap(), "--to", &addr, "--unchecked-entry", entry], LIMIT);
        sent.assert_failure();
        assert!(sent.stderr.contains("receiver refused the transfer") && sent.stderr.contains(why), "{entry}: {sent}");
        let received = recv.wait(LIMIT);
        received.assert_failure();
        assert!(received.stderr.contains(why), "{entry}: {received}");
        assert!(entries(&inbox).is_empty(), "{entry}: nothing may be written: {:?}", entries(&inbox));
    }
}

#[test]
fn an_existing_file_in_the_tree_is_refused_before_any_data() {
    let tmp = tempfile::tempdir().unwrap();
    let t = make_tree(tmp.path());
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir_all(inbox.join("t")).unwrap();
    std::fs::write(inbox.join("t/x.bin"), b"mine").unwrap();
    let (recv, addr) = recv_once(&inbox, &[]);
    let sent = run_args(&["send", t.to_str().unwrap(), "--to", &addr], LIMIT);
    sent.assert_failure();
    assert!(sent.stderr.contains("file exists: t/x.bin"), "{sent}");
    recv.wait(LIMIT).assert_failure();
    assert_eq!(std::fs::read(inbox.join("t/x.bin")).unwrap(), b"mine");
    assert_eq!(entries(&inbox.join("t")), ["x.bin"], "nothing else was made");
}

#[test]
fn a_file_growing_while_it_is_sent_fails_on_both_sides_and_is_not_stored() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("growing.bin");
    samplegen(&src, "1MB", 3);
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    let (mut recv, addr) = recv_once(&inbox, &[]);
    let mut cmd = manyfold();
    // 1 MB at 250 kB/s: about 4 s, time to append in the middle.
    cmd.args(["send", src.to_str().unwrap(), "--to", &addr, "--rate", "250kB"]);
    let send = Running::spawn(cmd);
    recv.wait_for_line("receiving growing.bin", LIMIT);
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::OpenOptions::new().append(true).open(&src).unwrap().write_all(&[7u8; 1000]).unwrap();
    let sent = send.wait(LIMIT);
    sent.assert_failure();
    assert!(sent.stderr.contains("changed while it was being sent"), "{sent}");
    let received = recv.wait(LIMIT);
    received.assert_failure();
    assert!(received.stderr.contains("the sender gave up") && received.stderr.contains("changed"), "{received}");
    assert!(entries(&inbox).is_empty(), "nothing is stored: {:?}", entries(&inbox));
}

#[test]
fn a_tree_reaches_every_receiver_of_a_group_with_one_report() {
    let tmp = tempfile::tempdir().unwrap();
    let t = make_tree(tmp.path());
    let (a_dir, b_dir) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir(&a_dir).unwrap();
    std::fs::create_dir(&b_dir).unwrap();
    let (a, a_addr) = recv_once(&a_dir, &[]);
    let (b, b_addr) = recv_once(&b_dir, &[]);
    let sent = run_args(&["send", t.to_str().unwrap(), "--to", &format!("{a_addr},{b_addr}"), "--json"], LIMIT);
    sent.assert_success();
    a.wait(LIMIT).assert_success();
    b.wait(LIMIT).assert_success();
    for dir in [&a_dir, &b_dir] {
        let got = dir.join("t");
        assert_eq!(std::fs::read(got.join("x.bin")).unwrap(), std::fs::read(t.join("x.bin")).unwrap());
        assert_eq!((mode(&got.join("a/b/f")), mode(&got.join("a"))), (0o640, 0o750), "{}", dir.display());
        assert_eq!(std::fs::read_link(got.join("a/lnk")).unwrap(), Path::new("b/f"));
        assert_eq!(std::fs::metadata(got.join("x.bin")).unwrap().mtime(), 1_600_000_000);
    }
    let v: Value = serde_json::from_str(sent.stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {sent}"));
    assert_eq!((v["saved"].as_u64(), v["name"].as_str()), (Some(2), Some("t")), "{v}");
    assert_eq!(v["files"].as_array().map(Vec::len), Some(2), "{v}");
    assert_eq!((v["directories"].as_u64(), v["links"].as_u64()), (Some(3), Some(1)), "{v}");
    assert_eq!(v["bytes"].as_u64(), Some(2_000_012), "{v}");
    let refused =
        run_args(&["send", t.to_str().unwrap(), "--to", &format!("{a_addr},{b_addr}"), "--mode", "any"], LIMIT);
    refused.assert_failure();
    assert!(refused.stderr.contains("spreads one regular file"), "{refused}");
}

#[test]
fn recv_takes_dash_f_for_overwrite_as_the_ftp_shell_does() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("x.txt");
    std::fs::write(&src, b"new").unwrap();
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    std::fs::write(inbox.join("x.txt"), b"old").unwrap();
    let (recv, addr) = recv_once(&inbox, &["-f"]);
    run_args(&["send", src.to_str().unwrap(), "--to", &addr], LIMIT).assert_success();
    recv.wait(LIMIT).assert_success();
    assert_eq!(std::fs::read(inbox.join("x.txt")).unwrap(), b"new");
}

/// A file mapped shared and writable, every page already dirtied: later
/// writes through it reach the page cache (and so every `read`) without
/// moving the file's mtime or ctime, as a program writing through a map
/// does between two write-backs.
struct DirtyMap {
    ptr: *mut std::ffi::c_void,
    len: usize,
}

impl DirtyMap {
    fn new(path: &Path) -> DirtyMap {
        use rustix::mm::{mmap, MapFlags, ProtFlags};
        let file = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
        let len = file.metadata().unwrap().len() as usize;
        // SAFETY: a fresh shared mapping of a file this test owns, of its
        // whole length; only this struct touches it, and Drop unmaps it.
        #[allow(unsafe_code)]
        let ptr =
            unsafe { mmap(std::ptr::null_mut(), len, ProtFlags::READ | ProtFlags::WRITE, MapFlags::SHARED, &file, 0) }
                .unwrap();
        let mut map = DirtyMap { ptr, len };
        // Rewrite every page's first byte as it is (volatile: a store of
        // the value just loaded must not be optimized away): each page is
        // now dirty and writable.
        for byte in map.bytes().iter_mut().step_by(4096) {
            let b: *mut u8 = byte;
            // SAFETY: `b` points into the live mapping, from a `&mut`.
            #[allow(unsafe_code)]
            unsafe {
                b.write_volatile(b.read_volatile())
            };
        }
        map
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` maps `len` bytes for as long as `self` lives, and
        // the `&mut self` borrow makes this the only slice over them.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts_mut(self.ptr.cast::<u8>(), self.len)
        }
    }
}

impl Drop for DirtyMap {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `new` made; no slice outlives `self`.
        #[allow(unsafe_code)]
        let _ = unsafe { rustix::mm::munmap(self.ptr, self.len) };
    }
}

#[test]
fn a_file_changed_without_moving_its_times_fails_by_the_hash_reread_and_is_not_stored() {
    // tmpfs: no write-back that would clean the pages (the next write
    // would then move the ctime and the cheaper check would catch it).
    let shm = Path::new("/dev/shm");
    let tmp = if shm.is_dir() { tempfile::tempdir_in(shm) } else { tempfile::tempdir() }.unwrap();
    let src = tmp.path().join("mapped.bin");
    samplegen(&src, "1MB", 4);
    let mut map = DirtyMap::new(&src);
    std::thread::sleep(Duration::from_millis(50));
    let times = |p: &Path| {
        let m = std::fs::metadata(p).unwrap();
        (m.len(), m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec())
    };
    let before = times(&src);
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    let (mut recv, addr) = recv_once(&inbox, &[]);
    let mut cmd = manyfold();
    // 1 MB at 250 kB/s: about 4 s; the first bytes are read at once.
    cmd.args(["send", src.to_str().unwrap(), "--to", &addr, "--rate", "250kB"]);
    let send = Running::spawn(cmd);
    recv.wait_for_line("receiving mapped.bin", LIMIT);
    std::thread::sleep(Duration::from_millis(1500));
    // Bytes the sender has read already: only a second read sees them.
    map.bytes()[..4096].fill(0x55);
    assert_eq!(times(&src), before, "the change must not show in size, mtime or ctime");
    let sent = send.wait(LIMIT);
    sent.assert_failure();
    assert!(sent.stderr.contains("a second read of it hashes differently"), "{sent}");
    let received = recv.wait(LIMIT);
    received.assert_failure();
    assert!(received.stderr.contains("the sender gave up") && received.stderr.contains("changed"), "{received}");
    assert!(entries(&inbox).is_empty(), "nothing is stored: {:?}", entries(&inbox));
}
