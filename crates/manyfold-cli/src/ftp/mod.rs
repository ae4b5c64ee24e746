//! The file service (issue 8, paper 04's LFTP done better; spec §17):
//! `manyfold ftp-server` serves a directory tree, `manyfold ftp` is its
//! client, as an interactive shell, a script runner or one command.
//!
//! - [`wire`]: the control messages.
//! - [`root`]: the served tree, every path confined beneath it by the kernel.
//! - [`server`]: connections, requests as tasks, transfers on their streams.
//! - [`client`]: requests matched to replies; verified, resumable get and put.
//! - [`shell`]: the command language; this file: line editing and completion.

pub mod client;
pub mod root;
pub mod server;
pub mod shell;
pub mod wire;

#[cfg(test)]
mod tests;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use clap::Args;
use rustyline::completion::{Completer, FilenameCompleter, Pair};
use rustyline::error::ReadlineError;
use rustyline::history::DefaultHistory;
use rustyline::{Editor, Helper};

use self::client::Client;
use self::shell::{resolve, split_line, Flow, Mode, Notify, Session, COMMANDS};
use self::wire::Kind;
use crate::net::{self, NetArgs};
use crate::report::outln;

pub use server::{run as run_server, ServerArgs};

/// How long a transfer stream's end may take to arrive once we gave up on
/// it (the peer's RESET answering our STOP: a round trip, more under loss).
const END_WAIT: Duration = Duration::from_secs(30);

/// Takes what is left of the receiving side of a transfer `stream`, up to
/// and including its end or reset, in a task of its own. A stream is
/// forgotten only once its end was taken (spec §13.9), and a connection
/// holds a bounded number of streams (§13.8): without this, every
/// transfer broken off on the receiving side would hold one for the rest
/// of the connection, and a long session would run out.
pub(crate) fn take_end_later(streams: &manyfold::Streams, stream: u16) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
    let streams = streams.clone();
    rt.spawn(async move {
        let _ = tokio::time::timeout(END_WAIT, async {
            while let Ok(Some(item)) = streams.recv_message_on(stream).await {
                if matches!(item, manyfold::StreamItem::Finished | manyfold::StreamItem::Reset(_)) {
                    break;
                }
            }
        })
        .await;
    });
}

#[derive(Args, Debug)]
#[command(after_help = "Without a COMMAND and with a terminal, an interactive shell opens \
(`help` lists its commands). Without a terminal, commands are read from standard input, \
one per line, and the first failure ends the run. With a COMMAND, that command runs and the \
exit status says whether it worked, e.g.:\n  manyfold ftp 127.0.0.1:7021 get dir/big.iso\n  \
manyfold ftp 127.0.0.1:7021 put notes.txt /docs/\n  manyfold ftp 127.0.0.1:7021 ls /docs")]
pub struct FtpArgs {
    /// The server, HOST:PORT.
    #[arg(value_name = "ADDR")]
    pub addr: String,

    /// One command to run instead of a shell (same commands as the shell).
    #[arg(value_name = "COMMAND", trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,

    /// File holding the server's token (its first line); the
    /// MANYFOLD_FTP_TOKEN environment variable works too.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,

    #[command(flatten)]
    pub net: NetArgs,

    /// The cap is on downloads and uploads together.
    #[command(flatten)]
    pub rate: crate::pace::RateArgs,
}

pub async fn run_client(args: FtpArgs) -> Result<()> {
    let token = match (&args.token_file, std::env::var_os("MANYFOLD_FTP_TOKEN")) {
        (Some(f), _) => Some(server::read_token(f)?),
        (None, Some(t)) if !t.is_empty() => Some(t.into_encoded_bytes()),
        _ => None,
    };
    let addr = net::resolve(&args.addr).await?;
    let mut client = Client::connect(addr, token, args.net.config()?).await?;
    client.pacer = crate::pace::shared(args.rate.rate);
    let client = Arc::new(client);
    let mode = if !args.command.is_empty() {
        Mode::OneShot
    } else if is_interactive(&args) {
        Mode::Interactive
    } else {
        Mode::Script
    };
    let result = match mode {
        Mode::OneShot => one_shot(&client, args.command).await,
        Mode::Script => script(&client).await,
        Mode::Interactive => interactive(&client).await,
    };
    client.close().await;
    result
}

/// Whether `ftp` runs its interactive shell, where Ctrl-C cancels the
/// transfer in the foreground and the prompt comes back (SIGTERM still
/// ends the session, telling the server).
pub fn is_interactive(args: &FtpArgs) -> bool {
    args.command.is_empty() && std::io::stdin().is_terminal()
}

fn print_notice() -> Notify {
    Arc::new(|m: String| eprintln!("{m}"))
}

async fn one_shot(client: &Arc<Client>, words: Vec<String>) -> Result<()> {
    if words.last().is_some_and(|w| w == "&") {
        bail!("a single command cannot run in the background");
    }
    let mut s = Session::new(Arc::clone(client), print_notice());
    s.exec(words).await.map(|_| ())
}

/// Commands from standard input, one per line (`#` starts a comment); the
/// first failure stops the run with its line number.
async fn script(client: &Arc<Client>) -> Result<()> {
    use tokio::io::AsyncBufReadExt;
    let mut s = Session::new(Arc::clone(client), print_notice());
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut n = 0;
    while let Some(line) = lines.next_line().await.context("cannot read commands from standard input")? {
        n += 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let words = split_line(line).with_context(|| format!("line {n}"))?;
        match s.exec(words).await.with_context(|| format!("line {n}: {line}"))? {
            Flow::Quit => break,
            Flow::Continue => {}
        }
    }
    s.wait_jobs().await;
    Ok(())
}

/// What the line-editing thread hands the shell.
enum Input {
    Line(String),
    /// Ctrl-C at the prompt: a fresh prompt.
    Cancel,
    /// Ctrl-D: leave.
    End,
}

fn history_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))?;
    Some(base.join("manyfold").join("ftp_history"))
}

/// The interactive shell: line editing and history (rustyline) on a thread
/// of its own, commands run here, notices of background jobs printed above
/// the prompt.
async fn interactive(client: &Arc<Client>) -> Result<()> {
    let cwd: Arc<Mutex<String>> = Arc::default();
    let helper = ShellHelper {
        client: Arc::clone(client),
        cwd: Arc::clone(&cwd),
        handle: tokio::runtime::Handle::current(),
        files: FilenameCompleter::new(),
    };
    let config = rustyline::Config::builder()
        .max_history_size(1000)
        .context("cannot set up line editing")?
        .completion_type(rustyline::CompletionType::List)
        .build();
    let mut editor: Editor<ShellHelper, DefaultHistory> =
        Editor::with_config(config).context("cannot set up line editing")?;
    editor.set_helper(Some(helper));
    let history = history_path();
    if let Some(h) = &history {
        let _ = editor.load_history(h);
    }
    // Notices of finished background jobs wait for the next prompt, as a
    // shell's do. (rustyline's external printer would print them at once,
    // but with it keys typed quickly are drawn late.)
    let notices: Arc<Mutex<Vec<String>>> = Arc::default();
    let queue = Arc::clone(&notices);
    let notify: Notify = Arc::new(move |m: String| queue.lock().expect("not poisoned").push(m));
    let (prompt_tx, prompt_rx) = std::sync::mpsc::channel::<String>();
    let (line_tx, mut line_rx) = tokio::sync::mpsc::channel::<Input>(1);
    let editor_thread = std::thread::spawn(move || {
        while let Ok(prompt) = prompt_rx.recv() {
            let input = match editor.readline(&prompt) {
                Ok(line) => {
                    if !line.trim().is_empty() {
                        let _ = editor.add_history_entry(line.as_str());
                    }
                    Input::Line(line)
                }
                Err(ReadlineError::Interrupted) => Input::Cancel,
                Err(_) => Input::End,
            };
            if line_tx.blocking_send(input).is_err() {
                break;
            }
        }
        if let Some(h) = history {
            if let Some(dir) = h.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            let _ = editor.save_history(&h);
        }
    });

    let mut s = Session::new(Arc::clone(client), notify);
    s.cwd = cwd;
    outln!(
        "connected to {} ({}{}); `help` lists the commands",
        client.peer,
        crate::keys::short(client.security),
        if client.read_only { ", read-only" } else { "" }
    );
    let mut warned = false;
    loop {
        for m in notices.lock().expect("not poisoned").drain(..) {
            eprintln!("{m}");
        }
        if prompt_tx.send(s.prompt()).is_err() {
            break;
        }
        let Some(input) = line_rx.recv().await else { break };
        let line = match input {
            Input::Line(l) => l,
            Input::Cancel => continue,
            Input::End => String::from("quit"),
        };
        let words = match split_line(&line) {
            Ok(w) => w,
            Err(e) => {
                eprintln!("error: {e}");
                continue;
            }
        };
        match s.exec(words).await {
            Ok(Flow::Continue) => warned = false,
            Ok(Flow::Quit) => {
                let n = s.running();
                if n > 0 && !warned {
                    eprintln!("{n} background transfer(s) still running: `wait` for them, or quit again to stop them (what arrived is kept for a resume)");
                    warned = true;
                    continue;
                }
                break;
            }
            Err(e) => {
                eprintln!("error: {e:#}");
                warned = false;
            }
        }
    }
    drop(prompt_tx);
    let _ = tokio::task::spawn_blocking(move || editor_thread.join()).await;
    Ok(())
}

/// Tab completion: command names, then remote paths (listed from the
/// server, cached briefly) or local ones, by the command and argument.
struct ShellHelper {
    client: Arc<Client>,
    cwd: Arc<Mutex<String>>,
    handle: tokio::runtime::Handle,
    files: FilenameCompleter,
}

impl ShellHelper {
    fn remote(&self, word: &str) -> Vec<Pair> {
        let (dir_part, prefix) = match word.rfind('/') {
            Some(i) => (&word[..=i], &word[i + 1..]),
            None => ("", word),
        };
        let cwd = self.cwd.lock().expect("not poisoned").clone();
        let Ok(dir) = resolve(&cwd, if dir_part.is_empty() { "." } else { dir_part }) else { return Vec::new() };
        let listing =
            self.handle.block_on(async { tokio::time::timeout(Duration::from_secs(3), self.client.list(&dir)).await });
        let Ok(Ok(entries)) = listing else { return Vec::new() };
        entries
            .into_iter()
            .filter(|e| e.name.starts_with(prefix) && (prefix.starts_with('.') || !e.name.starts_with('.')))
            .map(|e| {
                let slash = if e.kind == Kind::Dir { "/" } else { "" };
                Pair {
                    display: format!("{}{slash}", e.name),
                    replacement: format!("{}{}{slash}", escape(dir_part), escape(&e.name)),
                }
            })
            .collect()
    }
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_whitespace() || matches!(c, '\\' | '\'' | '"' | '&') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl Completer for ShellHelper {
    type Candidate = Pair;

    fn complete(&self, line: &str, pos: usize, ctx: &rustyline::Context<'_>) -> rustyline::Result<(usize, Vec<Pair>)> {
        let before = &line[..pos];
        // The word being typed starts after the last unescaped blank.
        let mut start = 0;
        let mut escaped = false;
        for (i, c) in before.char_indices() {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c.is_whitespace() {
                start = i + c.len_utf8();
            }
        }
        let words = split_line(&before[..start]).unwrap_or_default();
        let word = split_line(&before[start..]).ok().and_then(|w| w.into_iter().next()).unwrap_or_default();
        let Some(cmd) = words.first() else {
            let names = COMMANDS
                .iter()
                .filter(|c| c.0.starts_with(&word))
                .map(|c| Pair { display: c.0.into(), replacement: format!("{} ", c.0) });
            return Ok((start, names.collect()));
        };
        // Which argument this is, flags not counted.
        let index = words[1..].iter().filter(|w| !w.starts_with('-')).count();
        let local = match cmd.as_str() {
            "lcd" | "lls" | "mput" => true,
            "put" => index == 0,
            "get" => index == 1,
            _ => false,
        };
        if local {
            return self.files.complete(line, pos, ctx);
        }
        if matches!(cmd.as_str(), "help" | "pwd" | "lpwd" | "jobs" | "wait" | "quit" | "exit" | "bye") {
            return Ok((pos, Vec::new()));
        }
        Ok((start, self.remote(&word)))
    }
}

impl rustyline::hint::Hinter for ShellHelper {
    type Hint = String;
}
impl rustyline::highlight::Highlighter for ShellHelper {}
impl rustyline::validate::Validator for ShellHelper {}
impl Helper for ShellHelper {}
