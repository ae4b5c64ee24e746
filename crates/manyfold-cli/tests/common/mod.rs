//! Helpers for running the built `manyfold` binary in tests: every child
//! is killed when its guard drops (test failure included) and every wait
//! has a deadline, so no test can hang or leave processes behind.

#![allow(dead_code)]

pub mod netns;
pub mod tmux;

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// A `Command` for the binary under test.
pub fn manyfold() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_manyfold"));
    cmd.stdin(Stdio::null());
    cmd
}

/// What a finished process printed and how it ended.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn assert_success(&self) -> &Self {
        assert!(self.status.success(), "expected success, got {}\n{self}", self.status);
        self
    }

    pub fn assert_failure(&self) -> &Self {
        assert!(!self.status.success(), "expected failure, got success\n{self}");
        self
    }
}

impl std::fmt::Display for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "--- stdout ---\n{}--- stderr ---\n{}", self.stdout, self.stderr)
    }
}

/// A running child process, killed on drop. Its stdout and stderr are
/// collected by threads; stdout lines are also offered to [`Running::wait_for_line`].
pub struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    stdout: thread::JoinHandle<String>,
    stderr: thread::JoinHandle<String>,
}

impl Running {
    pub fn spawn(mut cmd: Command) -> Running {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn manyfold");
        let out = child.stdout.take().expect("piped stdout");
        let mut err = child.stderr.take().expect("piped stderr");
        let (tx, lines) = mpsc::channel();
        let stdout = thread::spawn(move || {
            let mut all = String::new();
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                all.push_str(&line);
                all.push('\n');
                let _ = tx.send(line);
            }
            all
        });
        let stderr = thread::spawn(move || {
            let mut all = String::new();
            let _ = err.read_to_string(&mut all);
            all
        });
        Running { child, lines, stdout, stderr }
    }

    /// The child's process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Waits for a stdout line containing `needle` and returns it.
    pub fn wait_for_line(&mut self, needle: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => continue,
                Err(_) => {
                    let _ = self.child.kill();
                    panic!("no line containing {needle:?} within {limit:?}");
                }
            }
        }
    }

    /// Waits for a stdout line containing `needle`; `None` after `limit`
    /// (the process keeps running: kill it to see what it printed).
    pub fn try_wait_for_line(&mut self, needle: &str, limit: Duration) -> Option<String> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return Some(line),
                Ok(_) => continue,
                Err(_) => return None,
            }
        }
    }

    /// Waits for the "listening on ADDR" line and returns ADDR.
    pub fn listening_addr(&mut self) -> SocketAddr {
        let line = self.wait_for_line("listening on ", Duration::from_secs(10));
        let rest = line.split("listening on ").nth(1).expect("address after 'listening on'");
        let addr = rest.split([',', ' ']).next().unwrap_or_default();
        addr.parse().unwrap_or_else(|_| panic!("bad address in {line:?}"))
    }

    /// Waits for the process to exit; kills it and panics after `limit`.
    pub fn wait(mut self, limit: Duration) -> Output {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                let (stdout, stderr) = self.collect_output();
                panic!("process did not finish within {limit:?}\n--- stdout ---\n{stdout}--- stderr ---\n{stderr}");
            }
            thread::sleep(Duration::from_millis(20));
        };
        let (stdout, stderr) = self.collect_output();
        Output { status, stdout, stderr }
    }

    /// Kills the process now and returns what it printed.
    pub fn kill(mut self) -> Output {
        let _ = self.child.kill();
        let status = self.child.wait().expect("wait after kill");
        let (stdout, stderr) = self.collect_output();
        Output { status, stdout, stderr }
    }

    fn collect_output(&mut self) -> (String, String) {
        // The pipes close when the process is gone.
        let stdout = std::mem::replace(&mut self.stdout, thread::spawn(String::new));
        let stderr = std::mem::replace(&mut self.stderr, thread::spawn(String::new));
        (stdout.join().unwrap_or_default(), stderr.join().unwrap_or_default())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `signal` (`INT`, `TERM`, `KILL`, `STOP`, `CONT`) to the process.
pub fn signal(p: &Running, signal: &str) {
    let status = Command::new("kill").args([&format!("-{signal}"), &p.id().to_string()]).status().expect("run kill");
    assert!(status.success(), "kill -{signal} failed");
}

/// Sends SIGINT, as Ctrl-C does.
pub fn interrupt(p: &Running) {
    signal(p, "INT");
}

/// Waits for `p` in a thread of its own: the output and when it ended, so
/// that several processes can be timed at once.
pub fn wait_in_thread(p: Running, limit: Duration) -> thread::JoinHandle<(Output, Instant)> {
    thread::spawn(move || {
        let out = p.wait(limit);
        (out, Instant::now())
    })
}

/// Runs `cmd` to completion within `limit`.
pub fn run(cmd: Command, limit: Duration) -> Output {
    Running::spawn(cmd).wait(limit)
}

/// `manyfold` with these arguments, run to completion within `limit`.
pub fn run_args(args: &[&str], limit: Duration) -> Output {
    let mut cmd = manyfold();
    cmd.args(args);
    run(cmd, limit)
}

/// Two receivers' directories, `a` and `b`, made under `parent`.
pub fn two_dirs(parent: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let (a, b) = (parent.join("a"), parent.join("b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    (a, b)
}

/// Names in `dir`, sorted.
pub fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("dir entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Writes a sample file with `manyfold samplegen`.
pub fn samplegen(path: &Path, size: &str, seed: u64) {
    run_args(
        &["samplegen", size, path.to_str().expect("utf-8 path"), "--seed", &seed.to_string()],
        Duration::from_secs(30),
    )
    .assert_success();
}

/// Waits for a child spawned with piped stdout and stderr (one whose
/// stdin the test writes itself); kills it and panics after `limit`.
pub fn wait_child(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let stdout = thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let stderr = thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("process did not finish within {limit:?}");
        }
        thread::sleep(Duration::from_millis(20));
    };
    Output { status, stdout: stdout.join().unwrap_or_default(), stderr: stderr.join().unwrap_or_default() }
}

/// Starts `manyfold recv` into `dir` on a free port, with `extra` flags;
/// returns it and its address once it listens.
pub fn recv_into(dir: &Path, extra: &[&str]) -> (Running, String) {
    let mut cmd = manyfold();
    cmd.args(["recv", "--listen", "127.0.0.1:0", "--dir"]).arg(dir).args(extra);
    let mut recv = Running::spawn(cmd);
    let addr = recv.listening_addr().to_string();
    (recv, addr)
}
