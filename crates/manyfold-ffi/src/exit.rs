//! The process's exit (`exit()`, or a return from `main`) with descriptors
//! still open. Their sockets die with the process, and a peer would learn
//! of it only from an ICMP error when it next sends, or from its idle
//! timeout (60 s) when it waits: a failure on one side must be known on the
//! other at once (issue 19). An `atexit` handler, registered when the
//! runtime starts, resets every connection still open (a RST with
//! `ErrorCode::APPLICATION`, spec §4.6) and waits, bounded, until the RSTs
//! are out. Closed descriptors need nothing: `mf_close` lingered already.
//!
//! A process killed by a signal runs no `atexit` handler; its peers learn
//! of it from ICMP or their timers.

use std::time::Duration;

use crate::table::{self, Handle};

/// The longest the exit waits for the resets to go out.
const EXIT_BOUND: Duration = Duration::from_secs(1);

/// Registers the handler (once, from `table::runtime`).
pub(crate) fn register() {
    // SAFETY: `at_exit` is an `extern "C" fn()` that never unwinds; atexit
    // only stores the pointer (a failure to register is harmless).
    unsafe {
        libc::atexit(at_exit);
    }
}

extern "C" fn at_exit() {
    // In a child after fork() nothing here belongs to this process: start
    // no thread there.
    if table::check_process("exit").is_err() {
        return;
    }
    // On a thread of its own: exit() has already destroyed the calling
    // thread's thread-locals (glibc runs their destructors before the
    // atexit handlers), tokio's runtime context among them. The join
    // never unwinds into C's exit() (a panic there is returned as Err).
    if let Ok(t) = std::thread::Builder::new().name("manyfold-exit".into()).spawn(reset_open) {
        let _ = t.join();
    }
}

fn reset_open() {
    let Ok(rt) = table::runtime() else { return };
    let open = table::take_all();
    if open.is_empty() {
        return;
    }
    let _guard = rt.enter();
    let code = mf::ErrorCode::APPLICATION;
    let mut endpoints = Vec::new();
    for handle in open {
        match handle {
            Handle::Stream(s) => {
                s.closing.close();
                if let Some(conn) = s.conn.lock().unwrap_or_else(|p| p.into_inner()).take() {
                    conn.abort(code);
                }
                endpoints.extend(s.endpoint.lock().unwrap_or_else(|p| p.into_inner()).take());
            }
            Handle::Listener(l) => {
                l.closing.close();
                endpoints.push(l.endpoint.clone());
            }
            Handle::Group(g) => {
                g.closing.close();
                g.group.abort(code);
                endpoints.push(g.endpoint.clone());
            }
        }
    }
    // Each sends its RSTs and stops its driver: quick, but bounded all the same.
    rt.block_on(async {
        let _ = tokio::time::timeout(EXIT_BOUND, async {
            for e in &endpoints {
                e.abort_all(code).await;
            }
        })
        .await;
    });
}
