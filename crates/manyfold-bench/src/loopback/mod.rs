//! `manyfold-bench loopback`: one connection moves N bytes over 127.0.0.1,
//! memory to memory (issue 3, lab item 1; BENCH.md's loopback anchors).
//! Each row is a sender process and a receiver process (hidden subcommands
//! of this binary) moving the seeded stream of [`data`]; the receiver
//! hashes it with BLAKE3 and fails the run on a mismatch. Rows alternate
//! A B C ... within each repetition.
//!
//! `--sweep` is paper 00's size sweep (§5.1, Tables 1–3: 1 to 32 MB, time
//! must grow linearly with size) and `--windows` its window comparison,
//! as manyfold's send/receive buffer sizes.
//!
//! Encryption's cost (issue 10): the bulk rows include manyfold with the
//! default controller encrypted (spec §19: a pre-shared key, then
//! ChaCha20-Poly1305 on every packet) beside the same controller plain,
//! and a second table sets them side by side, ratios taken within each
//! repetition. `--encryption` runs only that pair with kernel TCP and
//! quinn beside them, so that more repetitions fit in a run.
//!
//! Modules: [`data`] (the stream and its check), [`rows`] (running one row;
//! its [`rows::Transfer`] also runs `loopback-file`'s), [`report`] (tables),
//! [`file`](mod@file) (the `loopback-file` scenario), and one module per transport:
//! [`mf`], [`tcp`], [`quic`], [`blast`].

mod blast;
pub(crate) mod data;
pub(crate) mod file;
pub(crate) mod mf;
pub(crate) mod quic;
pub(crate) mod report;
pub(crate) mod rows;
pub(crate) mod tcp;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::{Args, Subcommand};

use crate::report::{header, load, Outputs};
use crate::stats;
use data::Pattern;
pub(crate) use rows::Sample;
use rows::{MfRow, Row};

#[derive(Args, Debug)]
#[command(mut_arg("json", |a| a.help("Also write every sample as JSON to this file")))]
#[command(mut_arg("plot", |a| a.help(
    "Also draw PNG charts into this directory (created if missing): loopback-bulk-goodput.png and loopback-bulk-cpu.png \
     (with --encryption loopback-encryption-*.png), or with --windows loopback-windows-goodput.png, or with --sweep loopback-sweep-time.png"
)))]
pub struct LoopbackArgs {
    /// Bytes per transfer, e.g. 1GiB, 100MB, 4096 (ignored by --sweep).
    #[arg(long, default_value = "1GiB")]
    size: String,
    /// Repetitions of each row (medians and min–max are reported).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Seed of the pseudo-random stream.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Per-transfer time limit in seconds.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Paper 00's size sweep (1 to 32 MB) for manyfold and TCP instead.
    #[arg(long, conflicts_with = "windows")]
    sweep: bool,
    /// Multiplies the sweep's sizes: paper 00's 1–32 MB take tens of
    /// milliseconds here, close to the cost of starting two processes.
    #[arg(long, default_value_t = 1)]
    scale: u64,
    /// manyfold with several send/receive buffer sizes instead.
    #[arg(long, conflicts_with = "encryption")]
    windows: bool,
    /// Only what encryption costs: manyfold plain and encrypted (the
    /// default controller), kernel TCP cubic and quinn.
    #[arg(long, conflicts_with = "sweep")]
    encryption: bool,
    #[command(flatten)]
    out: Outputs,
}

/// The stream a child moves.
#[derive(Args, Debug, Clone)]
pub struct DataArgs {
    #[arg(long)]
    bytes: u64,
    #[arg(long)]
    seed: u64,
}

impl DataArgs {
    fn pattern(&self) -> Pattern {
        Pattern::new(self.seed, self.bytes)
    }
}

/// The processes of each row (internal).
#[derive(Subcommand, Debug)]
pub enum Child {
    #[command(hide = true)]
    MfSend {
        #[arg(long)]
        to: SocketAddr,
        #[command(flatten)]
        opts: mf::MfOpts,
        #[command(flatten)]
        data: DataArgs,
    },
    #[command(hide = true)]
    MfRecv {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long)]
        hash: String,
        #[command(flatten)]
        opts: mf::MfOpts,
        #[command(flatten)]
        data: DataArgs,
    },
    #[command(hide = true)]
    TcpMemSend {
        #[arg(long)]
        to: SocketAddr,
        #[arg(long)]
        cc: String,
        #[command(flatten)]
        data: DataArgs,
    },
    #[command(hide = true)]
    TcpMemRecv {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long)]
        hash: String,
        #[arg(long)]
        cc: String,
        #[command(flatten)]
        data: DataArgs,
    },
    #[command(hide = true)]
    QuicSend {
        #[arg(long)]
        to: SocketAddr,
        #[arg(long)]
        cert: PathBuf,
        #[command(flatten)]
        data: DataArgs,
    },
    #[command(hide = true)]
    QuicRecv {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long)]
        hash: String,
        #[arg(long)]
        cert: PathBuf,
        #[command(flatten)]
        data: DataArgs,
    },
    #[command(hide = true)]
    BlastSend {
        #[arg(long)]
        to: SocketAddr,
        #[command(flatten)]
        data: DataArgs,
    },
    #[command(hide = true)]
    BlastRecv {
        #[arg(long)]
        listen: SocketAddr,
        #[command(flatten)]
        data: DataArgs,
    },
}

impl Child {
    pub fn run(self) -> Result<()> {
        match self {
            Child::MfSend { to, opts, data } => mf::send(to, &opts, &data.pattern()),
            Child::MfRecv { listen, hash, opts, data } => mf::recv(listen, &opts, data.bytes, &hash),
            Child::TcpMemSend { to, cc, data } => tcp::send(to, &cc, &data.pattern()),
            Child::TcpMemRecv { listen, hash, cc, data } => tcp::recv(listen, &cc, data.bytes, &hash),
            Child::QuicSend { to, cert, data } => quic::send(to, &cert, &data.pattern()),
            Child::QuicRecv { listen, hash, cert, data } => quic::recv(listen, &cert, data.bytes, &hash),
            Child::BlastSend { to, data } => blast::send(to, &data.pattern()),
            Child::BlastRecv { listen, data } => blast::recv(listen, data.bytes),
        }
    }
}

pub fn run(args: &LoopbackArgs) -> Result<()> {
    let limit = Duration::from_secs(args.timeout);
    let work = tempfile::Builder::new().prefix("manyfold-bench-loopback-").tempdir()?;
    let load_before = load();
    if args.sweep {
        return sweep(args, work.path(), limit, &load_before);
    }
    let bytes = parse_size(&args.size)?;
    let pattern = Pattern::new(args.seed, bytes);
    let (gen_cost, hash_cost, hash) = costs(&pattern);
    let rows = args.rows();
    let mut samples: Vec<(String, Vec<Sample>)> = rows.iter().map(|r| (r.label(), vec![])).collect();
    let mut log = Vec::new();
    for rep in 0..args.reps {
        for (row, (name, s)) in rows.iter().zip(samples.iter_mut()) {
            let x = rows::run(row, work.path(), bytes, args.seed, &hash, limit)?;
            eprintln!("rep {} {name}: {:.2} s, {:.0} MB/s", rep + 1, x.wall, x.goodput());
            s.push(x);
            log.push(report::json_sample(name, bytes, rep, &x));
        }
    }
    let anchor = rows.iter().position(|r| matches!(r, Row::Tcp("cubic")));
    let ceiling = rows.iter().position(|r| matches!(r, Row::Blast));
    let (title, mode) = args.title_and_mode();
    println!("### loopback: {title}, {} over 127.0.0.1, memory to memory", human(bytes));
    println!();
    println!(
        "{}",
        header(
            &format!("{} ({bytes} bytes) per transfer, {} reps", human(bytes), args.reps),
            args.seed,
            &load_before,
            &load()
        )
    );
    println!();
    print!("{}", report::bulk_table(bytes, &samples, anchor, ceiling));
    println!();
    let pairs = encryption_pairs(&rows);
    if !pairs.is_empty() {
        println!("Encryption's cost: each encrypted manyfold row against the same row plain, ratios within each repetition (encrypted ÷ plain), then their median (min–max):");
        println!();
        print!("{}", report::encryption_table(bytes, &samples, &pairs));
        println!();
    }
    let one_thread_row = rows.iter().any(|r| matches!(r, Row::Manyfold(m) if m.one_thread));
    print_notes(args, !pairs.is_empty(), one_thread_row, gen_cost, hash_cost);
    args.out.write_json(|| report::json_document(mode, args.seed, &log))?;
    args.out.draw(|dir| {
        let what = format!("loopback, {} over 127.0.0.1", human(bytes));
        if args.windows {
            Ok(vec![windows_chart(dir, &what, &rows, &samples)?])
        } else {
            let prefix = if args.encryption { "loopback-encryption" } else { "loopback-bulk" };
            report::bulk_charts(dir, prefix, &what, bytes, &samples)
        }
    })
}

impl LoopbackArgs {
    /// The rows of the table asked for, in the order each repetition runs them.
    fn rows(&self) -> Vec<Row> {
        if self.windows {
            let mut r: Vec<Row> =
                WINDOWS.iter().map(|&b| Row::Manyfold(MfRow { buffers: Some(b), ..MfRow::default() })).collect();
            r.push(Row::Manyfold(MfRow::default()));
            r.push(Row::Tcp("cubic"));
            r
        } else if self.encryption {
            let encrypted = MfRow { encrypted: true, ..MfRow::default() };
            vec![Row::Manyfold(MfRow::default()), Row::Manyfold(encrypted), Row::Tcp("cubic"), Row::Quic]
        } else {
            let mut r: Vec<Row> = mf::controllers().map(|cc| Row::Manyfold(MfRow { cc, ..MfRow::default() })).collect();
            // The default controller once more, encrypted, right after the
            // plain rows: what protection costs (issue 10).
            r.insert(mf::controllers().count(), Row::Manyfold(MfRow { encrypted: true, ..MfRow::default() }));
            // A 1,500-byte path's datagrams (spec §3.7 off): what discovery gains.
            let ethernet = MfRow { max_datagram: Some(1452), ..MfRow::default() };
            r.insert(mf::controllers().count() + 1, Row::Manyfold(ethernet));
            // The default controller on a current-thread runtime: what the
            // hand-off between the driver's and the application's threads
            // costs (issue 20 item 4).
            r.insert(mf::controllers().count() + 2, Row::Manyfold(MfRow { one_thread: true, ..MfRow::default() }));
            r.extend(tcp::CONTROLS.iter().map(|&cc| Row::Tcp(cc)));
            r.push(Row::Quic);
            r.push(Row::Blast);
            r
        }
    }

    /// The table's title and its name in the JSON.
    fn title_and_mode(&self) -> (&'static str, &'static str) {
        if self.windows {
            ("manyfold's buffer sizes (paper 00's window comparison)", "windows")
        } else if self.encryption {
            ("what encryption costs (issue 10)", "encryption")
        } else {
            ("bulk transfer", "bulk")
        }
    }
}

/// What the bulk tables' figures mean, under them.
fn print_notes(args: &LoopbackArgs, encrypted_rows: bool, one_thread_row: bool, gen_cost: f64, hash_cost: f64) {
    println!(
        "Medians of {} repetitions, (min–max) beside them; rows alternate A B C … in each repetition, and ratios are taken within a repetition, then their median. \
         Time runs from the sender's start to its exit, which follows the receiver's \"ok\" after its BLAKE3 matched (the ceiling: to the last datagram's arrival). \
         MB = 10^6 bytes. Every row's sender makes the stream as it goes ({gen_cost:.2} s/GB of its CPU) and every receiver but the ceiling's hashes it ({hash_cost:.2} s/GB). \
         manyfold and quinn rows run each process on a multi-thread tokio runtime ({} workers here; the application's work as a task on them, not in `block_on` on the main thread: RESULTS §41).",
        args.reps,
        crate::runtime_workers()
    );
    if one_thread_row {
        println!(
            "The \"one-thread runtime\" row: both processes on a current-thread runtime, the connection's I/O driver and the task writing or reading the stream on one thread."
        );
    }
    if args.windows {
        let d = manyfold_proto::ConnectionConfig::default();
        println!(
            "Buffers: ConnectionConfig::send_buffer and recv_buffer both set to the size on both sides; the unlabelled manyfold row runs the library defaults \
             (send_buffer {}, recv_buffer {}; both auto-tuned below those caps, spec §7.4).",
            human(d.send_buffer as u64),
            human(d.recv_buffer as u64)
        );
    }
    if encrypted_rows {
        println!(
            "Encrypted rows: both processes hold one pre-shared key; the connection runs Noise XXpsk3 (X25519, BLAKE2s) in its handshake, then every packet is \
             ChaCha20-Poly1305 (ring's assembly implementation) with its header and a 64-bit packet number as associated data, {} bytes more per packet (spec §19). \
             Each side fails the run unless its connection reports itself encrypted.",
            manyfold_proto::secure::PROTECTION_OVERHEAD
        );
    }
}

/// Each encrypted manyfold row with the plain row configured alike:
/// (encrypted, plain) indices into `rows`.
fn encryption_pairs(rows: &[Row]) -> Vec<(usize, usize)> {
    let mut pairs = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let Row::Manyfold(m) = row else { continue };
        if !m.encrypted {
            continue;
        }
        let plain = Row::Manyfold(MfRow { encrypted: false, ..m.clone() }).label();
        let twin = rows.iter().position(|r| matches!(r, Row::Manyfold(_)) && r.label() == plain);
        if let Some(j) = twin {
            pairs.push((i, j));
        }
    }
    pairs
}

/// `--windows --plot`: median goodput against the buffer size, with the
/// library default and kernel TCP as flat lines across the same range.
fn windows_chart(
    dir: &std::path::Path,
    what: &str,
    rows: &[Row],
    samples: &[(String, Vec<Sample>)],
) -> Result<PathBuf> {
    let goodput = |s: &[Sample]| stats::median(&s.iter().map(Sample::goodput).collect::<Vec<f64>>());
    let kib = |b: usize| b as f64 / 1024.0;
    let (lo, hi) = (kib(WINDOWS[0]), kib(WINDOWS[WINDOWS.len() - 1]));
    let mut fixed = Vec::new();
    let mut series = Vec::new();
    for (row, (name, s)) in rows.iter().zip(samples) {
        match row {
            Row::Manyfold(MfRow { buffers: Some(b), cc, .. }) => {
                if fixed.is_empty() {
                    series.push((format!("manyfold ({}), both buffers set", cc.name()), Vec::new()));
                }
                fixed.push((kib(*b), goodput(s)));
            }
            // Rows whose buffers the x axis does not set: flat lines.
            Row::Manyfold(_) => {
                series.push((format!("{name}, library defaults"), vec![(lo, goodput(s)), (hi, goodput(s))]))
            }
            _ => series.push((format!("{name}, kernel's buffers"), vec![(lo, goodput(s)), (hi, goodput(s))])),
        }
    }
    if let Some(first) = series.first_mut() {
        first.1 = fixed;
    }
    let path = dir.join("loopback-windows-goodput.png");
    manyfold_plot::lines_log2_x(
        &path,
        &format!("{what}: goodput against manyfold's send and receive buffers"),
        "ConnectionConfig::send_buffer = recv_buffer, KiB (log scale)",
        "goodput, MB/s (10^6 bytes), median",
        &series,
    )?;
    Ok(path)
}

/// Send and receive buffer sizes of `--windows`.
const WINDOWS: [usize; 5] = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20];

/// Paper 00 §5.1: sizes in MB and the transfer times of Tables 1, 2 and 3.
const PAPER: [(u64, f64, f64, f64); 6] = [
    (1, 1.743, 0.463, 1.187),
    (2, 3.375, 0.867, 2.658),
    (4, 6.784, 1.654, 4.795),
    (8, 13.735, 3.166, 9.323),
    (16, 27.694, 6.279, 18.333),
    (32, 55.394, 12.563, 38.152),
];

fn sweep(args: &LoopbackArgs, work: &std::path::Path, limit: Duration, load_before: &str) -> Result<()> {
    let rows = [Row::Manyfold(MfRow::default()), Row::Tcp("cubic")];
    let scale = args.scale.max(1);
    let mbs: Vec<u64> = PAPER.iter().map(|&(mb, ..)| mb * scale).collect();
    let hashes: Vec<String> = mbs.iter().map(|&mb| Pattern::new(args.seed, mb * 1_000_000).hash()).collect();
    // times[row][size] = one wall time per repetition
    let mut times = vec![vec![Vec::new(); PAPER.len()]; rows.len()];
    let mut log = Vec::new();
    for rep in 0..args.reps {
        for (si, &mb) in mbs.iter().enumerate() {
            for (ri, row) in rows.iter().enumerate() {
                let x = rows::run(row, work, mb * 1_000_000, args.seed, &hashes[si], limit)?;
                eprintln!("rep {} {mb} MB {}: {:.3} s", rep + 1, row.label(), x.wall);
                times[ri][si].push(x.wall);
                log.push(report::json_sample(&row.label(), mb * 1_000_000, rep, &x));
            }
        }
    }
    let names: Vec<String> = rows.iter().map(Row::label).collect();
    let list: Vec<String> = mbs.iter().map(u64::to_string).collect();
    println!(
        "### loopback: paper 00's size sweep (Tables 1–3), {} to {} MB over 127.0.0.1, memory to memory",
        mbs[0],
        mbs[mbs.len() - 1]
    );
    println!();
    let sizes = format!("{} MB (10^6 bytes), {} reps", list.join(", "), args.reps);
    println!("{}", header(&sizes, args.seed, load_before, &load()));
    println!();
    let at = if scale == 1 { String::new() } else { format!(" (at 1/{scale} the size)") };
    println!(
        "| size MB | {} s | {} s | {0} / TCP time | paper T1 s{at} | paper T2 s{at} | paper T3 s{at} |",
        names[0], names[1]
    );
    println!("|---|---|---|---|---|---|---|");
    for (si, &(_, t1, t2, t3)) in PAPER.iter().enumerate() {
        let ratio = stats::ratios(&times[0][si], &times[1][si]);
        println!(
            "| {} | {} | {} | {} | {t1} | {t2} | {t3} |",
            mbs[si],
            stats::med_range(&times[0][si], 3),
            stats::med_range(&times[1][si], 3),
            stats::med_range(&ratio, 2)
        );
    }
    println!();
    println!("Linear fit of the median time against size (time = a + b · size):");
    println!();
    println!("| row | b, ms per MB | MB/s (1/b) | a, ms (fixed cost: processes, handshake, close) | R² |");
    println!("|---|---|---|---|---|");
    let xs: Vec<f64> = mbs.iter().map(|&mb| mb as f64).collect();
    let paper_xs: Vec<f64> = PAPER.iter().map(|&(mb, ..)| mb as f64).collect();
    let mut fits: Vec<(String, &[f64], Vec<f64>)> = names
        .iter()
        .enumerate()
        .map(|(ri, n)| (n.clone(), &xs[..], times[ri].iter().map(|t| stats::median(t)).collect()))
        .collect();
    let tables = [
        "paper 00, Table 1 (1,024 B payload, window 32)",
        "paper 00, Table 2 (8,096 B payload, window 128)",
        "paper 00, Table 3 (8,096 B payload, window 1)",
    ];
    for (i, name) in tables.iter().enumerate() {
        let ys = PAPER.iter().map(|p| [p.1, p.2, p.3][i]).collect();
        fits.push((name.to_string(), &paper_xs, ys));
    }
    for (name, xs, ys) in fits {
        let (a, b, r2) = stats::linear_fit(xs, &ys);
        let rate = 1.0 / b;
        let digits = if rate < 10.0 { 2 } else { 0 };
        println!("| {name} | {:.3} | {rate:.digits$} | {:.1} | {r2:.5} |", b * 1e3, a * 1e3);
    }
    println!();
    println!(
        "Times are medians of {} repetitions (min–max beside them), from the sender's start to its exit after the receiver's BLAKE3-checked \"ok\"; sizes and rows alternate within each repetition. \
         The paper's times are its own (802.11g-era hardware, Go-Back-N, a client echoing every chunk), shown for the shape, not for comparison; \
         its \"4.6 MB/s\" and \"19 MB/s\" are megabits (32 MB in 55.4 s is 0.58 MB/s).",
        args.reps
    );
    args.out.write_json(|| report::json_document("sweep", args.seed, &log))?;
    args.out.draw(|dir| {
        let series: Vec<(String, Vec<(f64, f64)>)> = names
            .iter()
            .enumerate()
            .map(|(ri, n)| {
                (n.clone(), mbs.iter().zip(&times[ri]).map(|(&mb, t)| (mb as f64, stats::median(t))).collect())
            })
            .collect();
        let path = dir.join("loopback-sweep-time.png");
        manyfold_plot::lines(
            &path,
            "loopback: transfer time against size (paper 00's sweep), over 127.0.0.1",
            "size, MB (10^6 bytes)",
            &format!("time, s (median of {})", args.reps),
            &series,
        )?;
        Ok(vec![path])
    })
}

/// CPU seconds per GB that making the stream and hashing it cost in this
/// process, and the stream's hash.
fn costs(p: &Pattern) -> (f64, f64, String) {
    let gb = p.len() as f64 / 1e9;
    let t = Instant::now();
    let mut buf = vec![0u8; data::CHUNK];
    for i in 0..p.chunks() {
        p.fill(i, &mut buf);
        std::hint::black_box(&mut buf);
    }
    let gen = t.elapsed().as_secs_f64() / gb;
    let t = Instant::now();
    let hash = p.hash();
    let both = t.elapsed().as_secs_f64() / gb;
    (gen, (both - gen).max(0.0), hash)
}

/// `1GiB`, `100MB`, `64KiB`, `4096`: SI and binary suffixes.
pub fn parse_size(s: &str) -> Result<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().map_err(|_| anyhow::anyhow!("bad size {s:?}"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" | "k" => 1_000,
        "mb" | "m" => 1_000_000,
        "gb" | "g" => 1_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        _ => bail!("bad size unit in {s:?}"),
    };
    Ok((n * mult as f64) as u64)
}

/// Bytes in the largest unit that divides them (GiB, MiB, MB, KiB).
pub fn human(b: u64) -> String {
    for (unit, m) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("MB", 1_000_000), ("KiB", 1 << 10)] {
        if b >= m && b.is_multiple_of(m) {
            return format!("{} {unit}", b / m);
        }
    }
    format!("{b} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("2MB").unwrap(), 2_000_000);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("3 parsecs").is_err());
        assert_eq!(human(256 << 10), "256 KiB");
        assert_eq!(human(2_000_000), "2 MB");
    }
}
