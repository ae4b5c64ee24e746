//! `manyfold`: the command-line tool of the manyfold transport — echo
//! (RFC 862), file upload with end-to-end verification, sample files, and a
//! self-contained demo (paper 04 §3's sample applications).

#![forbid(unsafe_code)]

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

mod demo;
mod echo;
mod fsutil;
mod net;
mod report;
mod samplegen;
mod size;
mod transfer;

/// manyfold: reliable transport over UDP, to one peer or many.
///
/// Every networking subcommand takes --loss P and --delay MS to emulate a
/// bad network on this process's datagrams, and --trace to print each
/// packet and state transition. Start with `manyfold demo`.
#[derive(Parser, Debug)]
#[command(name = "manyfold", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Send a generated file to a receiver in this same process through
    /// emulated loss, verify it and print the report.
    ///
    /// Everything runs on 127.0.0.1 with ephemeral ports and a temporary
    /// directory, removed at the end.
    Demo(demo::DemoArgs),

    /// Receive files sent with `manyfold send` into a directory.
    ///
    /// Serves transfers concurrently until interrupted (Ctrl-C), or exits
    /// after one with --once. Each file is written under a hidden temporary
    /// name, synced, checked against the sender's BLAKE3 hash and only then
    /// renamed to its final name. Names other than plain base names are
    /// refused, and so are existing files unless --overwrite.
    Recv(transfer::RecvArgs),

    /// Send one file to a `manyfold recv`.
    ///
    /// Prints a progress bar while sending (when stderr is a terminal) and a
    /// report at the end. Exits non-zero unless the receiver confirms that
    /// the file was stored and its hash matched.
    Send(transfer::SendArgs),

    /// Serve the Echo Protocol (RFC 862): send back whatever each client
    /// sends, until it closes. Clients are served concurrently.
    EchoServer(echo::EchoServerArgs),

    /// Send lines to an echo server and print what comes back, with
    /// round-trip times on stderr.
    Echo(echo::EchoArgs),

    /// Write a file of pseudo-random bytes (ChaCha8, reproducible by seed).
    Samplegen(samplegen::SamplegenArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    let trace = match &cli.command {
        Command::Demo(a) => a.trace,
        Command::Recv(a) => a.net.trace,
        Command::Send(a) => a.net.trace,
        Command::EchoServer(a) => a.net.trace,
        Command::Echo(a) => a.net.trace,
        Command::Samplegen(_) => false,
    };
    net::init_tracing(trace);
    if let Command::Samplegen(args) = &cli.command {
        return samplegen::run(args);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        match cli.command {
            Command::Demo(args) => demo::run(args).await,
            Command::Recv(args) => transfer::run_recv(args).await,
            Command::Send(args) => transfer::run_send(args).await,
            Command::EchoServer(args) => echo::run_server(args).await,
            Command::Echo(args) => echo::run_client(args).await,
            Command::Samplegen(_) => unreachable!("handled above"),
        }
    })
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
