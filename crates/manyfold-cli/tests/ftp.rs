//! `manyfold ftp-server` / `manyfold ftp` end to end on 127.0.0.1
//! (issue 8): every command, one-shot and from a script; every refusal
//! (not found, exists, not empty, permission denied, outside the root,
//! symbolic links leading out, read-only, a bad token); a killed get and a
//! killed put resumed; a get interrupted by SIGINT (one-shot, and Ctrl-C in
//! the shell) resumed; get and put through 5% loss both ways; transfers
//! running at once while a listing answers; and the interactive shell
//! driven through tmux (keys in, screen out).

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::tmux::{self, Tmux};
use common::{manyfold, run, samplegen, Output, Running};

const LIMIT: Duration = Duration::from_secs(60);

struct Server {
    _proc: Running,
    addr: String,
    root: PathBuf,
}

fn server(root: &Path, extra: &[&str]) -> Server {
    let mut cmd = manyfold();
    cmd.args(["ftp-server", "--listen", "127.0.0.1:0", "--root"]).arg(root).args(extra);
    let mut proc = Running::spawn(cmd);
    let addr = proc.listening_addr().to_string();
    Server { _proc: proc, addr, root: root.to_path_buf() }
}

/// A tree to serve and a local working directory, side by side.
fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let local = tmp.path().join("local");
    std::fs::create_dir(&root).unwrap();
    std::fs::create_dir(&local).unwrap();
    (tmp, root, local)
}

/// `manyfold ftp ADDR WORDS...` run in `cwd`.
fn ftp(s: &Server, cwd: &Path, words: &[&str]) -> Output {
    ftp_with(s, cwd, &[], words)
}

fn ftp_with(s: &Server, cwd: &Path, flags: &[&str], words: &[&str]) -> Output {
    let mut cmd = manyfold();
    cmd.current_dir(cwd).arg("ftp").args(flags).arg(&s.addr).args(words);
    run(cmd, LIMIT)
}

/// The commands of `script` fed on standard input.
fn ftp_script(s: &Server, cwd: &Path, flags: &[&str], script: &str) -> Output {
    let mut cmd = manyfold();
    cmd.current_dir(cwd).arg("ftp").args(flags).arg(&s.addr).stdin(Stdio::piped());
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
    let deadline = Instant::now() + LIMIT;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("script did not finish within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    Output {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn assert_same(a: &Path, b: &Path) {
    assert!(std::fs::read(a).unwrap() == std::fs::read(b).unwrap(), "{} differs from {}", a.display(), b.display());
}

fn failure_says(out: &Output, phrase: &str) {
    out.assert_failure();
    assert!(out.stderr.contains(phrase), "expected {phrase:?} in stderr\n{out}");
}

#[test]
fn every_command_works_one_shot_and_files_arrive_verified() {
    let (_tmp, root, local) = setup();
    samplegen(&local.join("data.bin"), "3MiB", 1);
    let s = server(&root, &[]);
    ftp(&s, &local, &["mkdir", "-p", "docs/old"]).assert_success();
    ftp(&s, &local, &["put", "data.bin", "docs/"]).assert_success();
    assert_same(&local.join("data.bin"), &root.join("docs/data.bin"));
    let ls = ftp(&s, &local, &["ls", "docs"]);
    ls.assert_success();
    assert!(ls.stdout.contains("data.bin") && ls.stdout.contains("3.15 MB"), "{ls}");
    assert!(ls.stdout.lines().any(|l| l.starts_with('d') && l.ends_with("old/")), "{ls}");

    ftp(&s, &local, &["cp", "docs/data.bin", "docs/copy.bin"]).assert_success();
    ftp(&s, &local, &["cp", "-r", "docs", "backup"]).assert_success();
    assert_same(&local.join("data.bin"), &root.join("backup/copy.bin"));
    assert!(root.join("backup/old").is_dir());
    ftp(&s, &local, &["mv", "backup", "docs/old"]).assert_success();
    assert!(root.join("docs/old/backup/data.bin").is_file());
    ftp(&s, &local, &["mv", "docs/copy.bin", "renamed.bin"]).assert_success();

    ftp(&s, &local, &["get", "renamed.bin", "back.bin"]).assert_success();
    assert_same(&local.join("data.bin"), &local.join("back.bin"));
    failure_says(&ftp(&s, &local, &["get", "/docs/old/backup/data.bin"]), "data.bin exists (use -f to overwrite it)");
    ftp(&s, &local, &["get", "-f", "/docs/old/backup/data.bin"]).assert_success();
    assert_same(&local.join("data.bin"), &root.join("docs/data.bin"));

    ftp(&s, &local, &["rm", "renamed.bin"]).assert_success();
    ftp(&s, &local, &["rm", "-r", "docs/old/backup"]).assert_success();
    ftp(&s, &local, &["rmdir", "docs/old"]).assert_success();
    let ls = ftp(&s, &local, &["ls", "/"]);
    assert!(!ls.stdout.contains("renamed.bin"), "{ls}");
    assert_eq!(common::entries(&root.join("docs")), ["data.bin"]);
    // No partial file is left anywhere.
    assert_eq!(common::entries(&local), ["back.bin", "data.bin"]);
}

#[test]
fn a_script_on_stdin_keeps_its_directories_and_stops_at_the_first_failure() {
    let (_tmp, root, local) = setup();
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    std::fs::write(root.join("a/b/f.txt"), b"hello").unwrap();
    let s = server(&root, &[]);
    let out = ftp_script(&s, &local, &[], "# comment\ncd a\npwd\ncd b\npwd\nget f.txt\ncd ..\nlpwd\n");
    out.assert_success();
    assert!(out.stdout.contains("/a\n") && out.stdout.contains("/a/b"), "{out}");
    assert_eq!(std::fs::read(local.join("f.txt")).unwrap(), b"hello");

    let out = ftp_script(&s, &local, &[], "cd a\ncd nowhere\nmkdir never\n");
    failure_says(&out, "line 2");
    assert!(out.stderr.contains("/a/nowhere: not found"), "{out}");
    assert!(!root.join("a/never").exists(), "the script went on after the failure");
}

#[test]
fn every_refusal_names_the_problem_and_fails_the_command() {
    let (tmp, root, local) = setup();
    let outside = tmp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("secret"), b"no").unwrap();
    std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
    std::os::unix::fs::symlink("../outside/secret", root.join("relative-escape")).unwrap();
    std::fs::create_dir_all(root.join("full/sub")).unwrap();
    std::fs::write(root.join("file"), b"x").unwrap();
    std::fs::write(local.join("file"), b"y").unwrap();
    let s = server(&root, &["--max-file-size", "10"]);

    failure_says(&ftp(&s, &local, &["get", "missing"]), "/missing: not found");
    failure_says(&ftp(&s, &local, &["put", "file"]), "/file already exists (use -f to replace it)");
    failure_says(&ftp(&s, &local, &["mkdir", "full"]), "/full: already exists");
    failure_says(&ftp(&s, &local, &["get", "file"]), "exists (use -f to overwrite it)");
    failure_says(&ftp(&s, &local, &["rmdir", "full"]), "/full: directory not empty");
    failure_says(&ftp(&s, &local, &["rm", "full"]), "use rm -r or rmdir");
    failure_says(&ftp(&s, &local, &["get", "../etc/passwd"]), "outside the served root");
    failure_says(&ftp(&s, &local, &["get", "escape/secret"]), "outside the served root");
    failure_says(&ftp(&s, &local, &["get", "relative-escape"]), "outside the served root");
    failure_says(&ftp(&s, &local, &["put", "file", "escape/planted"]), "outside the served root");
    failure_says(&ftp(&s, &local, &["ls", "escape"]), "outside the served root");
    failure_says(&ftp(&s, &local, &["cp", "-r", "full", "full/sub"]), "inside itself");
    assert!(!outside.join("planted").exists());
    // The host's absolute paths mean nothing here: / is the root.
    failure_says(&ftp(&s, &local, &["get", "/etc/passwd"]), "/etc/passwd: not found");
    std::fs::write(local.join("big"), [0u8; 11]).unwrap();
    failure_says(&ftp(&s, &local, &["put", "big"]), "takes files up to 10 bytes");
    failure_says(&ftp(&s, &local, &["frobnicate"]), "unknown command");
    failure_says(&ftp(&s, &local, &["rm", "-x", "file"]), "unknown option -x");
    // Deleting the link removes the link, never what it points to.
    ftp(&s, &local, &["rm", "escape"]).assert_success();
    assert!(outside.join("secret").exists());
}

#[test]
fn a_read_only_server_refuses_changes_and_still_serves_files() {
    let (_tmp, root, local) = setup();
    std::fs::write(root.join("f"), b"x").unwrap();
    std::fs::write(local.join("up"), b"y").unwrap();
    let s = server(&root, &["--read-only"]);
    for words in
        [&["put", "up"][..], &["mkdir", "d"], &["rm", "f"], &["mv", "f", "g"], &["cp", "f", "g"], &["rmdir", "f"]]
    {
        failure_says(&ftp(&s, &local, words), "the server is read-only");
    }
    ftp(&s, &local, &["get", "f"]).assert_success();
    assert_eq!(common::entries(&root), ["f"]);
}

#[test]
fn a_wrong_or_missing_token_is_refused_after_a_delay_and_the_right_one_works() {
    let (tmp, root, local) = setup();
    let token = tmp.path().join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let wrong = tmp.path().join("wrong");
    std::fs::write(&wrong, "guess\n").unwrap();
    let s = server(&root, &["--token-file", token.to_str().unwrap()]);
    let start = Instant::now();
    failure_says(&ftp_with(&s, &local, &["--token-file", wrong.to_str().unwrap()], &["ls"]), "wrong or missing token");
    assert!(start.elapsed() >= Duration::from_millis(900), "refused without the delay");
    failure_says(&ftp(&s, &local, &["ls"]), "not authorized");
    ftp_with(&s, &local, &["--token-file", token.to_str().unwrap()], &["ls"]).assert_success();
}

#[test]
fn permission_denied_is_reported_as_such() {
    let (tmp, root, local) = setup();
    std::fs::create_dir(root.join("locked")).unwrap();
    std::fs::write(root.join("locked/f"), b"x").unwrap();
    let mut cmd = manyfold();
    if rustix_is_root() {
        // root reads anything: serve as nobody, from a tree nobody owns.
        for p in [tmp.path(), &root, &root.join("locked"), &root.join("locked/f")] {
            Command::new("chown").args(["65534:65534"]).arg(p).status().unwrap();
        }
        cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", env!("CARGO_BIN_EXE_manyfold")]);
        cmd.stdin(Stdio::null());
    }
    std::fs::set_permissions(root.join("locked"), std::os::unix::fs::PermissionsExt::from_mode(0o000)).unwrap();
    cmd.args(["ftp-server", "--listen", "127.0.0.1:0", "--root"]).arg(&root);
    let mut proc = Running::spawn(cmd);
    let addr = proc.listening_addr().to_string();
    let s = Server { _proc: proc, addr, root: root.clone() };
    failure_says(&ftp(&s, &local, &["ls", "locked"]), "/locked: permission denied");
    failure_says(&ftp(&s, &local, &["get", "locked/f"]), "permission denied");
    std::fs::set_permissions(root.join("locked"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    assert!(s.root.exists());
}

fn rustix_is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0").unwrap_or(false)
}

/// Waits until `path` holds at least `bytes`.
fn wait_for_size(path: &Path, bytes: u64) {
    let deadline = Instant::now() + LIMIT;
    while std::fs::metadata(path).map(|m| m.len()).unwrap_or(0) < bytes {
        assert!(Instant::now() < deadline, "{} never reached {bytes} bytes", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_killed_get_and_a_killed_put_resume_where_they_stopped() {
    let (_tmp, root, local) = setup();
    samplegen(&root.join("big.bin"), "24MiB", 7);
    samplegen(&local.join("up.bin"), "24MiB", 8);
    let s = server(&root, &[]);
    // A 200 ms round trip keeps the transfer slow enough to kill mid-way.
    let slow = ["--delay", "100"];

    let mut cmd = manyfold();
    cmd.current_dir(&local).arg("ftp").args(slow).arg(&s.addr).args(["get", "big.bin"]);
    let get = Running::spawn(cmd);
    wait_for_size(&local.join(".big.bin.manyfold-partial"), 2 << 20);
    get.kill();
    assert!(!local.join("big.bin").exists(), "a killed get must not leave the final name");
    let out = ftp(&s, &local, &["get", "big.bin"]);
    out.assert_success();
    assert!(out.stdout.contains("resumed from before"), "{out}");
    assert_same(&root.join("big.bin"), &local.join("big.bin"));
    assert!(!local.join(".big.bin.manyfold-partial").exists());

    let mut cmd = manyfold();
    cmd.current_dir(&local).arg("ftp").args(slow).arg(&s.addr).args(["put", "up.bin"]);
    let put = Running::spawn(cmd);
    wait_for_size(&root.join(".up.bin.manyfold-partial"), 2 << 20);
    put.kill();
    assert!(!root.join("up.bin").exists());
    // The server may not have noticed the killed client yet: the new
    // upload of the same file takes its partial file over.
    let out = ftp(&s, &local, &["put", "up.bin"]);
    out.assert_success();
    assert!(out.stdout.contains("resumed from before"), "{out}");
    assert_same(&local.join("up.bin"), &root.join("up.bin"));
    assert_eq!(common::entries(&root), ["big.bin", "up.bin"]);
}

#[test]
fn background_transfers_run_at_once_and_a_listing_answers_meanwhile() {
    let (_tmp, root, local) = setup();
    for i in 0..3 {
        samplegen(&root.join(format!("part{i}.bin")), "16MiB", 20 + i);
    }
    std::fs::create_dir(root.join("small")).unwrap();
    std::fs::write(root.join("small/note"), b"x").unwrap();
    let s = server(&root, &[]);
    // A 200 ms round trip: the three downloads take seconds, a listing one
    // round trip.
    let out = ftp_script(&s, &local, &["--delay", "100"], "mget part*.bin &\nls small\njobs\nwait\n");
    out.assert_success();
    let lines: Vec<&str> = out.stdout.lines().collect();
    let listed = lines.iter().position(|l| l.ends_with(" note")).unwrap_or_else(|| panic!("no listing\n{out}"));
    // `jobs`, after the listing, finds the transfers still running.
    let job = lines[listed..].iter().find(|l| l.starts_with("[1]")).unwrap_or_else(|| panic!("no jobs line\n{out}"));
    assert!(!job.contains("100%"), "the listing waited for the transfers: {job}\n{out}");
    assert!(out.stderr.contains("[1] done: 3 transfers (3 of 3 file(s)"), "{out}");
    for i in 0..3 {
        let name = format!("part{i}.bin");
        assert_same(&root.join(&name), &local.join(&name));
    }
}

/// `manyfold ftp` in a tmux terminal (tests/common/tmux.rs), for the
/// tests of the interactive shell.
struct Shell(Tmux);

/// How long the shell gets to show what a test waits for.
const SHELL_WAIT: Duration = Duration::from_secs(20);

impl Shell {
    /// `manyfold ftp [FLAGS] ADDR` in a new tmux session named `name`, run
    /// in `local` with its history under `home`; once the shell has
    /// connected. The session prints `shell-exited-STATUS` when it ends.
    fn start(name: &str, home: &Path, local: &Path, flags: &str, addr: &str) -> Shell {
        assert!(tmux::available(), "this test needs tmux (.ci/run installs it)");
        let shell = format!(
            "cd {} && HOME={} XDG_STATE_HOME={}/.local/state {} ftp {flags} {addr}; echo shell-exited-$?",
            local.display(),
            home.display(),
            home.display(),
            env!("CARGO_BIN_EXE_manyfold"),
        );
        let t = Shell(Tmux::run_sized(name, &shell, 160, 40));
        t.wait_for("`help` lists the commands");
        t
    }

    fn keys(&self, keys: &[&str]) {
        self.0.keys(keys);
    }

    /// Types `keys` once the prompt is up (keys typed before the line
    /// editor owns the terminal would be lost).
    fn at_prompt(&self, keys: &[&str]) {
        self.0.wait_until("the prompt", SHELL_WAIT, |screen| screen.trim_end().ends_with('>'));
        std::thread::sleep(Duration::from_millis(100));
        self.keys(keys);
    }

    /// Waits until the screen shows `text`.
    fn wait_for(&self, text: &str) -> String {
        self.0.wait_for(text, SHELL_WAIT)
    }
}

#[test]
fn the_interactive_shell_edits_completes_remote_paths_and_transfers() {
    let (tmp, root, local) = setup();
    std::fs::create_dir(root.join("reports-2026")).unwrap();
    std::fs::write(root.join("reports-2026/summary.txt"), b"all good\n").unwrap();
    let s = server(&root, &[]);
    let t = Shell::start(&format!("manyfold-ftp-test-{}", std::process::id()), tmp.path(), &local, "", &s.addr);
    t.at_prompt(&["help", "Enter"]);
    t.wait_for("download a file, verified");
    // Tab completes the remote directory name, then the file in it.
    t.at_prompt(&["cd rep", "Tab"]);
    t.wait_for("cd reports-2026/");
    t.keys(&["Enter"]);
    t.wait_for(":/reports-2026>");
    t.at_prompt(&["get summ", "Tab"]);
    t.wait_for("get summary.txt");
    t.keys(&["Enter"]);
    t.wait_for("1 of 1 file(s)");
    assert_eq!(std::fs::read(local.join("summary.txt")).unwrap(), b"all good\n");
    // Line editing: move left, insert, then run.
    t.at_prompt(&["pw", "Left", "Left", "l", "End", "d", "Enter"]);
    t.wait_for(&format!("\n{}", local.display()));
    t.at_prompt(&["rmdir /nope", "Enter"]);
    t.wait_for("/nope: not found");
    // History: Up brings the last line back.
    t.at_prompt(&["Up"]);
    t.wait_for("> rmdir /nope");
    t.keys(&["C-u", "quit", "Enter"]);
    t.wait_for("shell-exited-0");
    assert!(tmp.path().join(".local/state/manyfold/ftp_history").exists(), "history was not saved");
}

#[test]
fn get_and_put_through_five_percent_loss_both_ways_arrive_verified() {
    let (_tmp, root, local) = setup();
    samplegen(&root.join("down.bin"), "4MiB", 31);
    samplegen(&local.join("up.bin"), "4MiB", 32);
    // Each side drops 5% of what it sends and of what it receives.
    let lossy = ["--loss", "5"];
    let s = server(&root, &lossy);
    let start = Instant::now();
    ftp_with(&s, &local, &lossy, &["get", "down.bin"]).assert_success();
    assert_same(&root.join("down.bin"), &local.join("down.bin"));
    ftp_with(&s, &local, &lossy, &["put", "up.bin"]).assert_success();
    assert_same(&local.join("up.bin"), &root.join("up.bin"));
    assert_eq!(common::entries(&root), ["down.bin", "up.bin"]);
    assert_eq!(common::entries(&local), ["down.bin", "up.bin"]);
    assert!(start.elapsed() < LIMIT, "took {:?}", start.elapsed());
}

#[test]
fn sigint_interrupts_a_one_shot_get_which_keeps_its_part_and_the_same_get_resumes() {
    let (_tmp, root, local) = setup();
    samplegen(&root.join("big.bin"), "16MiB", 41);
    let s = server(&root, &[]);
    let mut cmd = manyfold();
    cmd.current_dir(&local).arg("ftp").args(["--delay", "100"]).arg(&s.addr).args(["get", "big.bin"]);
    let get = Running::spawn(cmd);
    let part = local.join(".big.bin.manyfold-partial");
    wait_for_size(&part, 1 << 20);
    let ok = Command::new("kill").args(["-INT", &get.id().to_string()]).status().unwrap();
    assert!(ok.success());
    let out = get.wait(Duration::from_secs(10));
    failure_says(&out, "interrupted; what arrived is kept");
    assert!(!local.join("big.bin").exists(), "an interrupted get must not leave the final name");
    assert!(std::fs::metadata(&part).unwrap().len() >= 1 << 20, "the partial file was not kept");
    let out = ftp(&s, &local, &["get", "big.bin"]);
    out.assert_success();
    assert!(out.stdout.contains("resumed from before"), "{out}");
    assert_same(&root.join("big.bin"), &local.join("big.bin"));
    assert_eq!(common::entries(&local), ["big.bin"]);
}

#[test]
fn ctrl_c_in_the_shell_interrupts_a_get_and_the_same_get_then_resumes_in_that_shell() {
    let (tmp, root, local) = setup();
    samplegen(&root.join("big.bin"), "8MiB", 42);
    let s = server(&root, &[]);
    // A 200 ms round trip keeps the download running while Ctrl-C comes.
    let name = format!("manyfold-ftp-sigint-{}", std::process::id());
    let t = Shell::start(&name, tmp.path(), &local, "--delay 100", &s.addr);
    t.at_prompt(&["get big.bin", "Enter"]);
    let part = local.join(".big.bin.manyfold-partial");
    wait_for_size(&part, 1 << 20);
    t.keys(&["C-c"]);
    t.wait_for("interrupted; what arrived is kept");
    assert!(!local.join("big.bin").exists(), "an interrupted get must not leave the final name");
    assert!(std::fs::metadata(&part).unwrap().len() >= 1 << 20, "the partial file was not kept");
    // The shell goes on, on the same connection, and the same get resumes.
    t.at_prompt(&["get big.bin", "Enter"]);
    t.wait_for("resumed from before");
    assert_same(&root.join("big.bin"), &local.join("big.bin"));
    assert_eq!(common::entries(&local), ["big.bin"]);
    t.at_prompt(&["quit", "Enter"]);
    t.wait_for("shell-exited-0");
}
