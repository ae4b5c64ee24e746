//! Child processes measured the way BENCH.md asks: wall time, user+sys CPU
//! seconds and peak RSS of each process, read from `wait4(2)`'s rusage;
//! and [`launch`], a child whose output goes to files and whose error, if
//! it fails, quotes what it said.
//!
//! This is the lab's only unsafe code: one libc call, wrapped here.
#![allow(unsafe_code)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// What one finished child cost.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    pub wall: Duration,
    pub cpu: Duration,
    pub max_rss_kib: u64,
}

/// A running child with its start time.
#[derive(Debug)]
pub struct Running {
    child: Child,
    started: Instant,
    what: String,
}

pub fn spawn(mut cmd: Command, what: &str) -> Result<Running> {
    cmd.stdin(Stdio::null());
    let started = Instant::now();
    let child = cmd.spawn().with_context(|| format!("starting {what}: {cmd:?}"))?;
    Ok(Running { child, started, what: what.to_string() })
}

impl Running {
    /// Waits (at most `limit`) and returns the child's usage; a non-zero
    /// exit or a timeout is an error naming the child.
    pub fn wait(mut self, limit: Duration) -> Result<Usage> {
        let pid = self.child.id() as libc::pid_t;
        let deadline = self.started + limit;
        loop {
            let mut status: libc::c_int = 0;
            // SAFETY: `rusage` is a plain C struct for which all-zero bytes
            // are a valid value; wait4 only writes into the two out-pointers,
            // which point to live locals for the duration of the call.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: see above; `pid` is our own unreaped child.
            let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
            if r == pid {
                let wall = self.started.elapsed();
                let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
                let cpu = tv(usage.ru_utime) + tv(usage.ru_stime);
                let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
                if !ok {
                    bail!("{} failed (wait status {status:#x})", self.what);
                }
                return Ok(Usage { wall, cpu, max_rss_kib: usage.ru_maxrss as u64 });
            }
            if r < 0 {
                bail!("waiting for {}: {}", self.what, std::io::Error::last_os_error());
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                bail!("{} did not finish within {limit:?}", self.what);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// [`Running::wait`] with `grace` counted from now, not from the
    /// child's start: for a child that outlives another by a bounded time
    /// (a receiver that closes last, after a sender of any length).
    pub fn wait_more(self, grace: Duration) -> Result<Usage> {
        let limit = self.started.elapsed() + grace;
        self.wait(limit)
    }

    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child whose stdout and stderr go to files in a run's directory.
#[derive(Debug)]
pub struct Launched {
    proc: Running,
    out: PathBuf,
    err: PathBuf,
    what: String,
}

/// Starts `cmd` with its stdout in `dir/NAME.out` and stderr in `dir/NAME.err`.
pub fn launch(mut cmd: Command, dir: &Path, name: &str, what: String) -> Result<Launched> {
    let (out, err) = (dir.join(format!("{name}.out")), dir.join(format!("{name}.err")));
    cmd.stdout(Stdio::from(File::create(&out)?)).stderr(Stdio::from(File::create(&err)?));
    let proc = spawn(cmd, &what)?;
    Ok(Launched { proc, out, err, what })
}

/// A finished child: its usage and what it printed.
#[derive(Debug)]
pub struct Finished {
    pub usage: Usage,
    pub stdout: String,
}

impl Launched {
    /// Waits (at most `limit`); a failure quotes the last lines of the
    /// child's stderr.
    pub fn finish(self, limit: Duration) -> Result<Finished> {
        let waited = self.proc.wait(limit);
        let stderr = std::fs::read_to_string(&self.err).unwrap_or_default();
        let usage = waited.map_err(|e| {
            let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            if tail.is_empty() {
                e
            } else {
                e.context(format!("{} said: {}", self.what, tail.join(" / ")))
            }
        })?;
        let stdout = std::fs::read_to_string(&self.out).with_context(|| format!("reading {}", self.out.display()))?;
        Ok(Finished { usage, stdout })
    }

    pub fn kill(self) {
        self.proc.kill();
    }
}
