//! `manyfold`: the command-line tool of the manyfold transport — echo
//! (RFC 862), file upload with end-to-end verification, sample files, and a
//! self-contained demo (paper 04 §3's sample applications).

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, Result};
use clap::{Parser, Subcommand};
use net::{lifecycle, Role};

mod demo;
mod echo;
mod fetch;
mod fsutil;
mod ftp;
mod keys;
mod mcast;
mod net;
mod pace;
mod report;
mod rr;
mod samplegen;
mod size;
mod trace;
mod transfer;

/// manyfold: reliable transport over UDP, to one peer or many.
///
/// The networking commands (all but mcast, which has its own) share the
/// "Network options" of their help: --loss P and --delay MS to emulate a
/// bad network on this process's datagrams, --trace to print each packet
/// and state transition, --qlog DIR for a qlog trace of every connection
/// (read it with `manyfold trace`), --peer-timeout, --json. With
/// --key-file (see `manyfold keygen`) every connection is encrypted and
/// authenticated and plain peers are refused; without it the protocol
/// runs in the clear. Sizes and rates are shown in decimal units (1 MB =
/// 1,000,000 bytes); they are accepted in either (10MB, 1MiB).
/// Exit status: 0 success, 1 failure, 2 usage error, 130/143 interrupted
/// by SIGINT/SIGTERM.
/// Start with `manyfold demo`.
#[derive(Parser, Debug)]
#[command(name = "manyfold", version, propagate_version = true)]
struct Cli {
    /// Errors only: no progress bars, banners or reports (the exit status
    /// says how it went).
    #[arg(short, long, global = true)]
    quiet: bool,

    /// Log on stderr: -v each connection's state changes and the library's
    /// notices (ICMP errors, stalls, shutdowns); -vv every packet too (as
    /// --trace). RUST_LOG=manyfold=debug (and any tracing filter) works too.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Send a generated file to three receivers in this same process
    /// through emulated loss, verify every copy and print the report.
    ///
    /// Everything runs on 127.0.0.1 with ephemeral ports and a temporary
    /// directory, removed at the end.
    Demo(demo::DemoArgs),

    /// Receive files and directories sent with `manyfold send` into a
    /// directory.
    ///
    /// Serves transfers concurrently until interrupted (Ctrl-C), or exits
    /// after one with --once. Each file is written under a hidden partial
    /// name, synced, checked against the sender's BLAKE3 hash and only then
    /// renamed to its final name, with the sender's mode and mtime. Paths
    /// that would leave DIR (`..`, absolute, links pointing outside) are
    /// refused, and so are existing files unless --overwrite (a file of the
    /// sender's size, mtime and mode is taken as stored before, and checked
    /// by its content: kept if the same, refused if not). A transfer that
    /// breaks off keeps its partial file: the same send resumes it (a send
    /// to several receivers starts again).
    Recv(transfer::RecvArgs),

    /// Send files, directories (like `rsync -a`) or standard input to a
    /// `manyfold recv`.
    ///
    /// Prints a progress bar while sending (when stderr is a terminal) and
    /// one report at the end (-v: a line per file). Exits non-zero unless
    /// the receiver confirms that every entry was stored and every hash
    /// matched. Sent again after an interruption, a file moves only what the
    /// receiver does not already hold: the rest of a partial file, and
    /// nothing of a file it holds whole (the same size, mtime, mode and
    /// BLAKE3; up to 1 GiB of such files per list, and with one receiver:
    /// the rest, and what a group sends, it compares as it arrives).
    Send(transfer::SendArgs),

    /// Serve the Echo Protocol (RFC 862): send back whatever each client
    /// sends, until it closes. Clients are served concurrently.
    EchoServer(echo::EchoServerArgs),

    /// Send lines to an echo server and print what comes back, with
    /// round-trip times on stderr.
    Echo(echo::EchoArgs),

    /// Serve the files of a directory to `manyfold fetch`, segment by
    /// segment, until interrupted (Ctrl-C).
    ///
    /// For each file asked for, the server sends a manifest: the size, the
    /// segment size and the BLAKE3 hashes of the whole file and of every
    /// segment, computed once and cached until the file changes. Then it
    /// sends the segments the client asks for, each read at its offset and
    /// checked against the manifest first. Only plain base names are
    /// served, and symbolic links only if they stay inside DIR. Clients are
    /// served concurrently; one line per client says what it got.
    Serve(fetch::ServeArgs),

    /// Download a file from several `manyfold serve` at once (segmented
    /// download), verified segment by segment, resumable.
    ///
    /// One group connects to every server (one connection and stream each)
    /// and asks each for the file's manifest. The servers must agree: the
    /// manifest most of them give is used, and a server that differs or
    /// cannot serve the file is left out with a warning (no majority: the
    /// fetch fails). Each server is then asked for different segments,
    /// with a few requests outstanding that grow with its rate, so a fast
    /// server gets more work. A server that fails (connection lost, an
    /// error, a segment that does not match its hash, no packet for 8
    /// round trips and at least 1.5 s while it owes segments) gets no more
    /// work and its segments go to the others; a request unanswered for
    /// its server's timeout (4× its usual latency, at least 1 s) is asked
    /// of another server too, and near the end idle servers ask for what
    /// is still outstanding elsewhere: the first answer wins.
    ///
    /// Every segment is checked against the manifest's BLAKE3 before it is
    /// written at its offset into .FILE.manyfold-fetch-part beside FILE;
    /// the whole file's hash is checked before it is renamed to FILE. If
    /// the fetch stops early (Ctrl-C, every server failed, killed), the
    /// data and a journal .FILE.manyfold-fetch stay: the same command
    /// resumes, re-checking the segments kept. The report gives per server
    /// the segments and bytes it served, its failures and its RTT. Exits
    /// non-zero unless FILE was stored.
    Fetch(fetch::FetchArgs),

    /// Serve many short request/reply sessions (paper 02's RUDP workload):
    /// each reply echoes its request (or repeats it to --reply-size).
    ///
    /// Each session is one connection whose request rode on the handshake's
    /// last packet with the client's FIN; the server answers, closes and
    /// keeps nothing (no TIME-WAIT on this side). When the accept backlog
    /// is full, new sessions are refused explicitly. Prints a summary on
    /// Ctrl-C.
    RrServer(rr::RrServerArgs),

    /// Run many short request/reply sessions against an rr-server and
    /// report requests/s, latency percentiles and failures.
    ///
    /// Every reply is checked byte for byte. Exits non-zero if any session
    /// failed (refused, timed out, wrong reply), naming the first.
    RrClient(rr::RrClientArgs),

    /// Write a file of pseudo-random bytes (ChaCha8, reproducible by seed).
    Samplegen(samplegen::SamplegenArgs),

    /// Reliable IP-multicast file replication (paper 03's SOMA): one sender,
    /// any number of receivers, each file sent once and repaired per receiver.
    #[command(subcommand)]
    Mcast(mcast::McastCommand),

    /// Serve a directory tree to `manyfold ftp` clients until interrupted.
    ///
    /// Clients see DIR as `/`: they list, change directory, make and remove
    /// directories, copy and move (trees too) on the server, and download
    /// and upload files, several at once on one connection (each transfer
    /// on a stream of its own, so a large transfer never holds up a
    /// listing). Every path is resolved by the kernel beneath DIR: `..`,
    /// absolute paths and symbolic links leading outside are refused.
    /// Uploads go to a hidden partial file (.NAME.manyfold-partial, kept
    /// for a resume if the upload breaks off) and are renamed into place
    /// only after their BLAKE3 matched. --read-only refuses every change;
    /// --token-file requires a token. One line per client when it leaves.
    FtpServer(ftp::ServerArgs),

    /// Use a `manyfold ftp-server`: an interactive shell (line editing,
    /// history, tab completion of remote paths, `help`), commands from
    /// standard input, or one command given after ADDR.
    ///
    /// Downloads and uploads show progress bars, are verified end to end
    /// with BLAKE3, and resume after an interruption (Ctrl-C, a lost
    /// connection, a killed process): run the same command again. A
    /// download is written to .NAME.manyfold-partial and renamed to NAME
    /// only once whole and verified. Errors name what happened (not found,
    /// already exists, not empty, permission denied, outside the root,
    /// read-only); the exit status is non-zero if the command (or a line
    /// of the script) failed.
    Ftp(ftp::FtpArgs),

    /// Create a key file for --key-file: a new X25519 private key (and with
    /// --psk a random pre-shared key), mode 0600.
    ///
    /// The file is written under a temporary name and linked into place, so
    /// it never exists half-written; an existing FILE is kept unless
    /// --force. The keys come from the operating system's random source.
    /// Prints the public key: add it to the --peers-file of every peer that
    /// should accept this host (`manyfold pubkey FILE >> peers.txt` on a
    /// machine holding FILE does it).
    ///
    /// Key file format: one item per line, `#` starts a comment:
    /// `private-key HEX` (this host's identity) and/or `psk HEX` (a key
    /// every peer holds too), each 64 hex digits. A peers file lists one
    /// public key (64 hex digits) per line, optionally followed by a name.
    Keygen(keys::KeygenArgs),

    /// Print the public key of a key file (64 hex digits on one line), as
    /// peers list it in their --peers-file.
    ///
    /// `manyfold pubkey keys.txt >> peers.txt` appends it to a peers file.
    /// Fails, saying so, if the file holds only a PSK (then it has no
    /// public key: the PSK alone authenticates).
    Pubkey(keys::PubkeyArgs),

    /// Summarize a qlog trace written with --qlog DIR, and draw it.
    ///
    /// Prints the connection's packets sent and received, retransmissions
    /// and tail-loss probes, losses by cause, RTT samples (min, mean, max),
    /// congestion window and states. With --plot OUT.png, draws congestion
    /// window and bytes in flight, RTT, and retransmissions and losses over
    /// time.
    Trace(trace::TraceArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = run(cli);
    // Interrupted: the status a shell expects (130 for SIGINT, 143 for
    // SIGTERM) when the command failed; a server stopped as asked exits 0.
    let failure = net::lifecycle::signal().map_or(ExitCode::FAILURE, |s| ExitCode::from(s.exit_code()));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            failure
        }
    }
}

/// Who the peer of each networking command is, for its messages.
fn peer_role(command: &Command) -> Role {
    match command {
        Command::Recv(_) => Role::Sender,
        Command::Send(_) | Command::Demo(_) => Role::Receiver,
        Command::EchoServer(_) | Command::Serve(_) | Command::RrServer(_) | Command::FtpServer(_) => Role::Client,
        _ => Role::Server,
    }
}

fn run(cli: Cli) -> Result<()> {
    let net = match &cli.command {
        Command::Recv(a) => Some(&a.net),
        Command::Send(a) => Some(&a.net),
        Command::EchoServer(a) => Some(&a.net),
        Command::Echo(a) => Some(&a.net),
        Command::Serve(a) => Some(&a.net),
        Command::Fetch(a) => Some(&a.net),
        Command::RrServer(a) => Some(&a.net),
        Command::RrClient(a) => Some(&a.net),
        Command::FtpServer(a) => Some(&a.net),
        Command::Ftp(a) => Some(&a.net),
        _ => None,
    };
    let trace = matches!(&cli.command, Command::Demo(a) if a.trace) || net.is_some_and(|n| n.trace);
    let json =
        net.is_some_and(|n| n.json) || matches!(&cli.command, Command::Mcast(mcast::McastCommand::Recv(a)) if a.json);
    report::set_output(match (cli.quiet, json) {
        (true, _) => report::Output::Quiet,
        (false, true) => report::Output::Json,
        (false, false) => report::Output::Text,
    });
    net::init_tracing(trace, cli.verbose);
    if let Command::Samplegen(args) = &cli.command {
        return samplegen::run(args);
    }
    if let Command::Trace(args) = &cli.command {
        return trace::run(args);
    }
    if let Command::Keygen(args) = &cli.command {
        return keys::run_keygen(args);
    }
    if let Command::Pubkey(args) = &cli.command {
        return keys::run_pubkey(args);
    }
    if let Command::Mcast(cmd) = cli.command {
        return mcast::run(cmd);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let role = peer_role(&cli.command);
    if let Command::Ftp(args) = &cli.command {
        lifecycle::set_local_interrupt(ftp::is_interactive(args));
    }
    // The command runs on this thread, beside the runtime's workers, not
    // as a task on them: its own work per byte (reading and hashing files)
    // then overlaps the driver's. As a task, woken by the driver it ran
    // after it on the same worker, and `send` over the emulated 1 Gbit/s
    // link fell from 743–792 to 647–768 Mbit/s (RESULTS §41).
    let result = runtime.block_on(async move {
        lifecycle::install();
        let command = run_command(cli.command);
        tokio::pin!(command);
        let result = tokio::select! {
            result = &mut command => result,
            signal = lifecycle::interrupted() => {
                // The peers were told; the command cleans up and says what it kept.
                match tokio::time::timeout(lifecycle::CLEANUP_GRACE, &mut command).await {
                    Ok(result) => result,
                    Err(_) => Err(anyhow!("interrupted by {}; the cleanup did not finish in time", signal.name())),
                }
            }
        };
        let result = match (result, lifecycle::signal()) {
            // The command's errors after a signal are the echo of its own
            // reset connections, unless it gave an account of what it kept.
            (Err(e), Some(signal)) if !lifecycle::is_account(&e) => {
                Err(anyhow!("interrupted by {}; the {role} was told", signal.name()))
            }
            (Err(e), _) => Err(net::explain(e, role)),
            (ok, _) => ok,
        };
        if lifecycle::signal().is_none() {
            lifecycle::wait_idle_all().await;
        }
        result
    });
    // Not waiting for blocking work that nobody awaits any more (a read of
    // stdin, say): the process is about to exit.
    runtime.shutdown_timeout(Duration::from_millis(500));
    result
}

async fn run_command(command: Command) -> Result<()> {
    match command {
        Command::Demo(args) => demo::run(args).await,
        Command::Recv(args) => transfer::run_recv(args).await,
        Command::Send(args) => transfer::run_send(args).await,
        Command::EchoServer(args) => echo::run_server(args).await,
        Command::Echo(args) => echo::run_client(args).await,
        Command::Serve(args) => fetch::run_serve(args).await,
        Command::Fetch(args) => fetch::run_fetch(args).await,
        Command::RrServer(args) => rr::run_server(args).await,
        Command::RrClient(args) => rr::run_client(args).await,
        Command::FtpServer(args) => ftp::run_server(args).await,
        Command::Ftp(args) => ftp::run_client(args).await,
        Command::Samplegen(_) | Command::Mcast(_) | Command::Trace(_) | Command::Keygen(_) | Command::Pubkey(_) => {
            unreachable!("handled before the runtime starts")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
