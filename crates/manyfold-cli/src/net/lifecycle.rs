//! How a command's process ends (issue 19 items 1 and 3): the endpoints
//! it bound, the signals that interrupt it, and the wait for its
//! connections' last packets before it exits.
//!
//! The first SIGINT or SIGTERM aborts every connection of every endpoint
//! the command bound with a RST carrying [`ErrorCode::INTERRUPTED`] (spec
//! §8.3), so that each peer reports "the sender was interrupted" (or
//! receiver, server, client) within one round trip; then the command's
//! own handler ([`interrupted`]) runs its cleanup (partial files removed
//! or kept for a resume, scratch data deleted, the summary printed). A
//! second signal exits at once, without any cleanup.
//!
//! A command that ends by itself waits, before the process exits, until
//! its endpoints are idle ([`Endpoint::wait_idle`]): a peer whose last ack
//! was lost is answered from TIME-WAIT instead of being left to
//! retransmit its FIN into a closed port.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use manyfold::{Endpoint, ErrorCode};
use tokio::sync::watch;

/// A command's own account of its interruption (what it kept, what it
/// removed), which the process prints as is; any other error of an
/// interrupted command is only the echo of its reset connections.
#[derive(Debug)]
pub struct Account(String);

impl std::fmt::Display for Account {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Account {}

/// The error that says how the command ended on a signal.
pub fn account(text: String) -> anyhow::Error {
    anyhow::Error::new(Account(text))
}

/// Whether `e` is (or wraps) a command's own account of its interruption.
pub fn is_account(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| cause.is::<Account>())
}

/// The signal that interrupted the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGINT: Ctrl-C at the terminal.
    Interrupt,
    /// SIGTERM: the system or a supervisor asked the process to stop.
    Terminate,
}

impl Signal {
    pub fn name(self) -> &'static str {
        match self {
            Signal::Interrupt => "SIGINT",
            Signal::Terminate => "SIGTERM",
        }
    }

    /// The exit status a shell expects of a process ended by this signal:
    /// 128 + its number.
    pub fn exit_code(self) -> u8 {
        match self {
            Signal::Interrupt => 130,
            Signal::Terminate => 143,
        }
    }
}

/// Endpoints to abort on a signal and to wait for at the end. Held until
/// the process exits: every command keeps its endpoints that long anyway.
static ENDPOINTS: Mutex<Vec<Endpoint>> = Mutex::new(Vec::new());

/// The first signal, set the moment it arrives (0: none yet; else the
/// signal's exit code), so that a command that sees its connections fail
/// knows why before [`interrupted`] resolves.
static RECEIVED: AtomicU8 = AtomicU8::new(0);

/// `None` until the first signal; set after the endpoints were aborted.
static SIGNAL: OnceLock<watch::Sender<Option<Signal>>> = OnceLock::new();

/// Whether SIGINT is the command's own (an interactive shell: Ctrl-C
/// cancels the transfer in the foreground and the prompt comes back).
static LOCAL_INTERRUPT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// How long a command gets to clean up after the first signal before the
/// process exits without it.
pub const CLEANUP_GRACE: Duration = Duration::from_secs(5);

fn signal_cell() -> &'static watch::Sender<Option<Signal>> {
    SIGNAL.get_or_init(|| watch::channel(None).0)
}

/// Registers an endpoint the command bound: aborted on a signal, waited
/// for at the end.
pub fn register(endpoint: &Endpoint) {
    ENDPOINTS.lock().unwrap_or_else(|e| e.into_inner()).push(endpoint.clone());
}

fn registered() -> Vec<Endpoint> {
    ENDPOINTS.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Makes SIGINT the command's own (the ftp shell's Ctrl-C cancels the
/// transfer in the foreground); SIGTERM still ends the process as above.
/// Call it before [`install`]: SIGINT is then not even listened to here,
/// which leaves the terminal's Ctrl-C to the line editor.
pub fn set_local_interrupt(local: bool) {
    LOCAL_INTERRUPT.store(local, Ordering::Relaxed);
}

/// The signal that interrupted the process, if one did (from the moment
/// it arrived, while the connections are being aborted).
pub fn signal() -> Option<Signal> {
    match RECEIVED.load(Ordering::SeqCst) {
        130 => Some(Signal::Interrupt),
        143 => Some(Signal::Terminate),
        _ => None,
    }
}

/// Resolves once the process was interrupted and its connections were
/// aborted: where a command starts its cleanup. Pending forever without
/// [`install`] (unit tests).
pub async fn interrupted() -> Signal {
    let mut rx = signal_cell().subscribe();
    loop {
        if let Some(signal) = *rx.borrow_and_update() {
            return signal;
        }
        if rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// What stops the work in the foreground: Ctrl-C itself where SIGINT is
/// the command's own (the ftp shell), else the process's interruption,
/// once the connections were aborted (a graceful close must not race the
/// abort and tell the peer that all went well).
pub async fn foreground_interrupt() {
    if LOCAL_INTERRUPT.load(Ordering::Relaxed) {
        let _ = tokio::signal::ctrl_c().await;
    } else {
        interrupted().await;
    }
}

/// Signals this close to the first count as the same interruption.
const SAME_INTERRUPTION: Duration = Duration::from_millis(500);

/// Starts listening for SIGINT and SIGTERM (call once, inside the runtime).
pub fn install() {
    tokio::spawn(async {
        let first = next_signal().await;
        let first_at = tokio::time::Instant::now();
        RECEIVED.store(first.exit_code(), Ordering::SeqCst);
        eprintln!("\nmanyfold: {}: telling the peers and cleaning up (again to exit at once)", first.name());
        let abort = abort_all();
        tokio::pin!(abort);
        let mut aborted = false;
        loop {
            tokio::select! {
                _ = &mut abort, if !aborted => {
                    aborted = true;
                    signal_cell().send_replace(Some(first));
                }
                second = next_signal() => {
                    // `timeout` (and other wrappers) pass the terminal's
                    // SIGINT on to a process that got it already: one
                    // Ctrl-C, not the second that means "exit at once".
                    if first_at.elapsed() < SAME_INTERRUPTION {
                        continue;
                    }
                    eprintln!("manyfold: {} again: exiting now", second.name());
                    std::process::exit(i32::from(second.exit_code()));
                }
            }
        }
    });
}

/// Every registered endpoint's connections reset with INTERRUPTED, the
/// RSTs sent, the drivers stopped.
async fn abort_all() {
    let endpoints = registered();
    let aborts = async {
        // Each abort returns as soon as its RSTs are out: one after another is quick.
        for endpoint in &endpoints {
            endpoint.abort_all(ErrorCode::INTERRUPTED).await;
        }
    };
    // Bounded: a driver that hangs must not keep the cleanup from running.
    let _ = tokio::time::timeout(Duration::from_secs(1), aborts).await;
}

/// The next SIGINT (unless it is the command's own) or SIGTERM.
async fn next_signal() -> Signal {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if LOCAL_INTERRUPT.load(Ordering::Relaxed) {
            if let Ok(mut term) = signal(SignalKind::terminate()) {
                term.recv().await;
                return Signal::Terminate;
            }
        } else if let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) {
            tokio::select! {
                _ = int.recv() => return Signal::Interrupt,
                _ = term.recv() => return Signal::Terminate,
            }
        }
    }
    if LOCAL_INTERRUPT.load(Ordering::Relaxed) {
        std::future::pending::<()>().await;
    }
    let _ = tokio::signal::ctrl_c().await;
    Signal::Interrupt
}

/// Before a command that ended by itself exits: waits until each endpoint
/// has finished with its peers (TIME-WAIT and LAST-ACK answered; bounded
/// by the library at twice the TIME-WAIT length), then stops it.
/// The CLI's own bound on it: at the defaults TIME-WAIT ends in a fraction
/// of a second, and a peer that never finishes must not hold a person's
/// shell for the library's 30 s.
pub async fn wait_idle_all() {
    let endpoints = registered();
    let wait = async {
        for endpoint in &endpoints {
            endpoint.wait_idle().await;
        }
    };
    let _ = tokio::time::timeout(WAIT_IDLE_LIMIT, wait).await;
    for endpoint in &endpoints {
        let _ =
            tokio::time::timeout(Duration::from_secs(1), endpoint.shutdown_within(Duration::from_millis(200))).await;
    }
}

/// At most this long in [`wait_idle_all`].
pub const WAIT_IDLE_LIMIT: Duration = Duration::from_secs(5);
