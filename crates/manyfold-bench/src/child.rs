//! Child processes measured the way BENCH.md asks: wall time, user+sys CPU
//! seconds and peak RSS of each process, read from `wait4(2)`'s rusage.
//!
//! This is the lab's only unsafe code: one libc call, wrapped here.
#![allow(unsafe_code)]

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

    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
