//! The C examples (examples/c) compiled with gcc against libmanyfold, the
//! shared library (with an rpath) and the static one, and run against each
//! other on 127.0.0.1 as separate processes: the echo client and server of
//! paper 04 §3.1 through 5% loss each way, and a group sender with three
//! receivers. Every child is killed if it outlives its deadline or the test.
//!
//! `cargo test` does not build a crate's cdylib and staticlib for its
//! integration tests (they link only an rlib, which this crate does not
//! make), so the first test to need them runs `cargo build -p manyfold-ffi`
//! with this test's profile and target directory; cargo holds its build
//! lock only while building, not while tests run.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long any one example may run.
const DEADLINE: Duration = Duration::from_secs(60);

/// The C tests of the C API's behaviour (tests/c/NAME.c); each checks
/// itself, prints an "ok ..." line per behaviour and exits 0.
const C_TESTS: [&str; 8] = [
    "close_wakes",
    "fork_child",
    "socket_release",
    "listener_close",
    "refused",
    "rusp_api",
    "exit_resets",
    "live_drop",
];

/// Paper 04's echo and upload programs (examples/rusp), built unchanged
/// against include/rusp.h.
const RUSP_EXAMPLES: [&str; 4] = ["echos", "echoc", "ups", "upc"];

/// The examples, built once for every test of this file.
struct Examples {
    _dir: tempfile::TempDir,
    bin: PathBuf,
}

impl Examples {
    fn path(&self, name: &str) -> PathBuf {
        self.bin.join(name)
    }
}

fn have_gcc() -> bool {
    let ok = Command::new("gcc").arg("--version").stdout(Stdio::null()).status().is_ok_and(|s| s.success());
    if !ok {
        eprintln!("skipped: gcc is not installed (the C examples need it)");
    }
    ok
}

/// target/<profile>/, where cargo puts libmanyfold.so and .a, and the
/// cargo options that build into it with the profile this test was built with.
fn profile_dir() -> (PathBuf, Vec<String>) {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/c_examples-<hash>
    let dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps").to_path_buf();
    let target = dir.parent().expect("target dir").to_path_buf();
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("debug");
    let profile = match name {
        // `cargo test` builds with the test profile into debug/; building
        // the libraries with it reuses every dependency already compiled.
        "debug" => "test",
        other => other,
    };
    let args = vec!["--profile".into(), profile.into(), "--target-dir".into(), target.display().to_string()];
    (dir, args)
}

fn build_libraries() -> PathBuf {
    let (dir, args) = profile_dir();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "-p", "manyfold-ffi", "--manifest-path"]).arg(&manifest).args(&args);
    let out = Proc::spawn("cargo build -p manyfold-ffi", &mut cmd).finish(Duration::from_secs(900));
    assert!(out.status.success(), "cargo build -p manyfold-ffi failed:\n{}", out.stderr);
    for lib in ["libmanyfold.so", "libmanyfold.a"] {
        assert!(dir.join(lib).exists(), "{lib} is not in {}", dir.display());
    }
    dir
}

/// Compiles `source` (relative to the crate) into `out`.
fn gcc(out: &Path, source: &str, link: &[&str]) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"));
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let mut cmd = Command::new("gcc");
    cmd.args(["-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(&include)
        .arg("-o")
        .arg(out)
        .arg(src.join(source))
        .args(link);
    let r = Proc::spawn("gcc", &mut cmd).finish(Duration::from_secs(120));
    assert!(r.status.success(), "gcc {source} failed:\n{}", r.stderr);
}

fn examples() -> Option<&'static Examples> {
    static BUILT: OnceLock<Examples> = OnceLock::new();
    if !have_gcc() {
        return None;
    }
    Some(BUILT.get_or_init(|| {
        let lib = build_libraries();
        let dir = tempfile::tempdir().expect("temporary directory");
        let bin = dir.path().to_path_buf();
        let libdir = lib.display().to_string();
        let rpath = format!("-Wl,-rpath,{libdir}");
        let shared = ["-L", &libdir, "-lmanyfold", &rpath, "-lpthread"];
        for name in ["echo_server", "echo_client", "group_send", "group_recv"] {
            gcc(&bin.join(name), &format!("examples/c/{name}.c"), &shared);
        }
        for name in C_TESTS {
            gcc(&bin.join(name), &format!("tests/c/{name}.c"), &shared);
        }
        // Paper 04's programs, written against librusp's API alone (rusp.h).
        for name in RUSP_EXAMPLES {
            gcc(&bin.join(name), &format!("examples/rusp/{name}.c"), &shared);
        }
        // The static library needs the system libraries the Rust standard
        // library uses (`rustc --print native-static-libs`).
        let archive = lib.join("libmanyfold.a").display().to_string();
        gcc(&bin.join("echo_server_static"), "examples/c/echo_server.c", &[&archive, "-lpthread", "-ldl", "-lm"]);
        Examples { _dir: dir, bin }
    }))
}

/// A child process, its stdout line by line and its stderr collected;
/// killed when dropped.
struct Proc {
    name: String,
    child: Child,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
}

/// What a finished process left.
struct Output {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Proc {
    fn spawn(name: &str, cmd: &mut Command) -> Proc {
        Proc::spawn_with_stdin(name, cmd, Stdio::null())
    }

    fn spawn_with_stdin(name: &str, cmd: &mut Command, stdin: Stdio) -> Proc {
        let mut child = cmd
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().expect("piped stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err = child.stderr.take().expect("piped stderr");
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n @ 1..) = err.read(&mut buf) {
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Proc { name: name.into(), child, lines, stderr }
    }

    fn example(ex: &Examples, name: &str, args: &[&str]) -> Proc {
        Proc::spawn(name, Command::new(ex.path(name)).args(args))
    }

    /// `name` with its stdin read from the file `input`.
    fn example_with_input(ex: &Examples, name: &str, args: &[&str], input: &Path) -> Proc {
        let file = std::fs::File::open(input).unwrap_or_else(|e| panic!("open {}: {e}", input.display()));
        Proc::spawn_with_stdin(name, Command::new(ex.path(name)).args(args), Stdio::from(file))
    }

    /// The first line of stdout that starts with `prefix` (earlier ones
    /// are skipped), waiting at most `limit` in all.
    fn line_starting(&mut self, prefix: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let line = self.line(deadline.saturating_duration_since(Instant::now()));
            if let Some(rest) = line.strip_prefix(prefix) {
                return rest.to_string();
            }
        }
    }

    /// The next line of stdout, waiting at most `limit`.
    fn line(&mut self, limit: Duration) -> String {
        match self.lines.recv_timeout(limit) {
            Ok(l) => l,
            Err(RecvTimeoutError::Timeout) => {
                panic!("{}: no output within {limit:?}; stderr:\n{}", self.name, self.stderr.lock().unwrap())
            }
            Err(RecvTimeoutError::Disconnected) => {
                panic!("{}: exited without the line expected; stderr:\n{}", self.name, self.stderr.lock().unwrap())
            }
        }
    }

    /// The address in the first line, "listening on IP:PORT".
    fn listening_on(&mut self) -> String {
        let first = self.line(Duration::from_secs(20));
        first.strip_prefix("listening on ").unwrap_or_else(|| panic!("{}: said {first:?}", self.name)).to_string()
    }

    /// Waits for the process to exit (killing it after `limit`), then
    /// gathers the rest of its output.
    fn finish(mut self, limit: Duration) -> Output {
        let start = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait for child") {
                break s;
            }
            if start.elapsed() > limit {
                let _ = self.child.kill();
                panic!("{} still running after {limit:?}; stderr:\n{}", self.name, self.stderr.lock().unwrap());
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut stdout = String::new();
        // The reader thread ends at end of file, soon after the exit.
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
            stdout.push_str(&l);
            stdout.push('\n');
        }
        std::thread::sleep(Duration::from_millis(20));
        let stderr = self.stderr.lock().unwrap().clone();
        Output { status, stdout, stderr }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn port_of(addr: &str) -> &str {
    addr.rsplit_once(':').expect("ip:port").1
}

/// Runs `server` (an echo server binary) for one client that pushes
/// `bytes` through it in blocks of `block`; checks both sides.
fn echo(ex: &Examples, server: &str, bytes: usize, block: usize, client_flags: &[&str]) -> Output {
    let mut srv = Proc::example(ex, server, &["-n", "1", "-l", "0.05"]);
    let addr = srv.listening_on();
    let (size, block) = (bytes.to_string(), block.to_string());
    let mut args = vec!["-l", "0.05", "-s", &size, "-b", &block];
    args.extend_from_slice(client_flags);
    args.extend_from_slice(&["127.0.0.1", port_of(&addr)]);
    let client = Proc::example(ex, "echo_client", &args).finish(DEADLINE);
    assert!(client.status.success(), "echo_client failed ({}):\n{}{}", client.status, client.stdout, client.stderr);
    assert!(
        client.stdout.contains(&format!("echoed {bytes} bytes byte-exact")),
        "echo_client said:\n{}",
        client.stdout
    );
    let server_out = srv.finish(DEADLINE);
    assert!(server_out.status.success(), "{server} failed ({}):\n{}", server_out.status, server_out.stderr);
    assert!(
        server_out.stdout.contains(&format!("echoed {bytes} bytes to 127.0.0.1:")),
        "{server} said:\n{}",
        server_out.stdout
    );
    client
}

#[test]
fn echo_client_gets_a_mebibyte_back_byte_exact_through_5_percent_loss() {
    let Some(ex) = examples() else { return };
    echo(ex, "echo_server", 1 << 20, 65536, &[]);
}

#[test]
fn statically_linked_echo_server_serves_the_shared_library_client() {
    let Some(ex) = examples() else { return };
    // An odd block size: the echo comes back in pieces unrelated to it.
    echo(ex, "echo_server_static", 300_000, 1000, &[]);
}

#[test]
fn debug_attribute_logs_every_packet_on_stderr() {
    let Some(ex) = examples() else { return };
    let client = echo(ex, "echo_server", 5000, 5000, &["-d"]);
    let packets: Vec<&str> = client.stderr.lines().filter(|l| l.contains("manyfold::packet")).collect();
    assert!(packets.iter().any(|l| l.contains(" -> ")), "no packet sent in the log:\n{}", client.stderr);
    assert!(packets.iter().any(|l| l.contains(" <- ")), "no packet received in the log:\n{}", client.stderr);
    assert!(client.stderr.contains("ESTABLISHED"), "no state change in the log:\n{}", client.stderr);
}

#[test]
fn group_send_reaches_three_receivers_whole_through_5_percent_loss() {
    let Some(ex) = examples() else { return };
    let mut receivers: Vec<Proc> = (0..3).map(|_| Proc::example(ex, "group_recv", &["-l", "0.05"])).collect();
    let addrs: Vec<String> = receivers.iter_mut().map(Proc::listening_on).collect();
    let mut args = vec!["-l", "0.05", "-s", "1048576", "-b", "50000"];
    args.extend(addrs.iter().map(String::as_str));
    let sender = Proc::example(ex, "group_send", &args).finish(DEADLINE);
    assert!(sender.status.success(), "group_send failed ({}):\n{}", sender.status, sender.stderr);
    let sent =
        sender.stdout.trim().strip_prefix("sent ").unwrap_or_else(|| panic!("group_send said {:?}", sender.stdout));
    assert!(sent.starts_with("1048576 bytes in 21 messages, fnv1a "), "group_send said {sent:?}");
    for (i, r) in receivers.into_iter().enumerate() {
        let out = r.finish(DEADLINE);
        assert!(out.status.success(), "receiver {i} failed ({}):\n{}", out.status, out.stderr);
        assert_eq!(out.stdout.trim().strip_prefix("received "), Some(sent), "receiver {i}");
    }
}

/// Runs the C test `name` (each has its own watchdog too); passes if it
/// exits 0, and shows its "ok" lines.
fn c_test(name: &str, limit: Duration) {
    let Some(ex) = examples() else { return };
    let out = Proc::example(ex, name, &[]).finish(limit);
    print!("{}", out.stdout);
    assert!(out.status.success(), "{name} failed ({}):\n{}{}", out.status, out.stdout, out.stderr);
    assert!(out.stdout.contains("ok "), "{name} checked nothing:\n{}", out.stdout);
}

#[test]
fn mf_close_wakes_every_call_blocked_on_the_descriptor_with_eclosed() {
    c_test("close_wakes", Duration::from_secs(40));
}

#[test]
fn a_call_in_a_child_after_fork_fails_at_once_with_efork() {
    c_test("fork_child", Duration::from_secs(40));
}

#[test]
fn sockets_of_closed_connections_are_released_when_mf_close_returns() {
    c_test("socket_release", Duration::from_secs(130));
}

#[test]
fn a_listener_closed_mid_handshake_leaves_no_client_connected_to_nothing() {
    c_test("listener_close", Duration::from_secs(310));
}

#[test]
fn an_exit_without_mf_close_resets_the_peer_at_once() {
    c_test("exit_resets", Duration::from_secs(40));
}

#[test]
fn a_connect_to_a_closed_port_is_refused_within_50_ms() {
    c_test("refused", Duration::from_secs(40));
}

#[test]
fn rusp_h_returns_minus_one_with_errno_and_switches_debug_on_mid_connection() {
    let Some(ex) = examples() else { return };
    let out = Proc::example(ex, "rusp_api", &[]).finish(Duration::from_secs(40));
    print!("{}", out.stdout);
    assert!(out.status.success(), "rusp_api failed ({}):\n{}{}", out.status, out.stdout, out.stderr);
    let packets = |part: &str| part.lines().filter(|l| l.contains("manyfold::packet")).count();
    let (before, rest) = out.stderr.split_once("-- debug on --").expect("the debug-on marker");
    let (during, after) = rest.split_once("-- debug off --").expect("the debug-off marker");
    assert_eq!(packets(before), 0, "logged before debug was switched on:\n{before}");
    assert!(
        during.lines().any(|l| l.contains("manyfold::packet") && l.contains(" -> ")),
        "nothing sent logged:\n{during}"
    );
    assert!(during.lines().any(|l| l.contains("manyfold::packet") && l.contains(" <- ")), "nothing received logged");
    assert_eq!(packets(after), 0, "logged after debug was switched off:\n{after}");
}

#[test]
fn a_drop_rate_set_on_a_live_connection_drops_its_received_datagrams_until_switched_off() {
    let Some(ex) = examples() else { return };
    let out = Proc::example(ex, "live_drop", &[]).finish(Duration::from_secs(100));
    print!("{}", out.stdout);
    assert!(out.status.success(), "live_drop failed ({}):\n{}{}", out.status, out.stdout, out.stderr);
    let client = out.stdout.lines().find_map(|l| l.strip_prefix("client ")).expect("the client's address");
    // Datagrams the server's socket received from the client, and dropped.
    let count = |part: &str, arrow: &str| {
        let mark = format!(" {arrow} {client} ");
        part.lines().filter(|l| l.contains("manyfold::packet") && l.contains(&mark)).count()
    };
    let (before, rest) = out.stderr.split_once("-- drop on --").expect("the drop-on marker");
    let (during, after) = rest.split_once("-- drop off --").expect("the drop-off marker");
    assert!(count(before, "<-") > 0, "no packet log before the drops:\n{before}");
    assert_eq!(count(before, "x-"), 0, "dropped before the rate was set");
    let (received, dropped) = (count(during, "<-"), count(during, "x-"));
    let rate = dropped as f64 / (received + dropped) as f64;
    println!("{dropped} of {} datagrams from the client dropped: {rate:.3}", received + dropped);
    assert!((0.15..0.35).contains(&rate), "{dropped} dropped, {received} received at a rate of 0.25: {rate}");
    assert_eq!(count(after, "x-"), 0, "dropped after the rate was switched off");
    assert!(count(after, "<-") > 0, "nothing received after the rate was switched off");
    assert!(!out.stderr.lines().any(|l| l.contains(" -x ")), "dropped on send: librusp drops on receive only");
}

/// Lines of text for the echo programs: `n` of them, of varied lengths.
fn echo_lines(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("line {i}: {}", "abcdefghij".repeat(i % 90))).collect()
}

#[test]
fn paper_echo_programs_built_against_rusp_h_echo_every_line_through_10_percent_drop() {
    let Some(ex) = examples() else { return };
    let dir = tempfile::tempdir().expect("temporary directory");
    let lines = echo_lines(300);
    let input = dir.path().join("input");
    std::fs::write(&input, lines.join("\n") + "\n").expect("write the input");
    let mut server = Proc::example(ex, "echos", &["-p", "0", "-l", "0.1", "-n", "2"]);
    let addr = server.line_starting("Running on ", Duration::from_secs(20));
    let port = port_of(&addr).to_string();
    assert!(addr.starts_with("0.0.0.0:"), "ruspListen binds every address: {addr}");
    // Two clients at once: the server serves each on its own thread.
    let clients: Vec<Proc> = (0..2)
        .map(|_| Proc::example_with_input(ex, "echoc", &["127.0.0.1", "-p", &port, "-l", "0.1"], &input))
        .collect();
    for (i, c) in clients.into_iter().enumerate() {
        let out = c.finish(DEADLINE);
        assert!(out.status.success(), "echoc {i} failed ({}):\n{}", out.status, out.stderr);
        let echoed: Vec<&str> = out.stdout.lines().filter_map(|l| l.strip_prefix("[RCV] ")).collect();
        assert!(echoed == lines, "echoc {i}: {} lines echoed of {}:\n{}", echoed.len(), lines.len(), out.stdout);
        assert!(out.stdout.contains(&format!("Connected to 127.0.0.1:{port}")), "echoc {i} said:\n{}", out.stdout);
    }
    let out = server.finish(DEADLINE);
    assert!(out.status.success(), "echos failed ({}):\n{}", out.status, out.stderr);
    let bytes: usize = lines.iter().map(String::len).sum();
    let served = out.stdout.matches(&format!("Echoed {bytes} bytes to 127.0.0.1:")).count();
    assert_eq!(served, 2, "echos said:\n{}", out.stdout);
}

#[test]
fn paper_upload_programs_built_against_rusp_h_deliver_a_file_byte_exact_through_10_percent_drop() {
    let Some(ex) = examples() else { return };
    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("2MB");
    let data: Vec<u8> = (0..2_000_000u64).map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8).collect();
    std::fs::write(&file, &data).expect("write the file");
    let store = dir.path().join("store");
    std::fs::create_dir(&store).expect("create the store");
    let store_arg = store.display().to_string();
    let mut server = Proc::example(ex, "ups", &["-p", "0", "-l", "0.1", "-n", "1", "-o", &store_arg]);
    let port = port_of(&server.line_starting("Running on ", Duration::from_secs(20))).to_string();
    let file_arg = file.display().to_string();
    let client = Proc::example(ex, "upc", &["127.0.0.1", &file_arg, "-p", &port, "-l", "0.1"]).finish(DEADLINE);
    assert!(client.status.success(), "upc failed ({}):\n{}{}", client.status, client.stdout, client.stderr);
    assert!(client.stdout.contains("Sending File (size: 2000000)"), "upc said:\n{}", client.stdout);
    let report = client.stdout.lines().find(|l| l.starts_with("Sent: ")).expect("upc's report");
    assert!(report.starts_with("Sent: 2000.000000KB Droprate: 10.000000% Time: "), "upc reported {report:?}");
    println!("upc: {report}");
    let out = server.finish(DEADLINE);
    assert!(out.status.success(), "ups failed ({}):\n{}", out.status, out.stderr);
    assert!(out.stdout.contains("Received 2000000 bytes from 127.0.0.1:"), "ups said:\n{}", out.stdout);
    let got = std::fs::read(store.join("upload-1")).expect("the uploaded file");
    assert!(got == data, "the upload differs: {} bytes of {}", got.len(), data.len());
}

#[test]
fn examples_refuse_arguments_that_are_not_numbers_naming_them() {
    let Some(ex) = examples() else { return };
    let cases: [(&str, &[&str], &str); 4] = [
        ("echo_server", &["127.0.0.1"], "PORT must be a whole number from 0 to 65535, not \"127.0.0.1\""),
        ("echo_client", &["127.0.0.1", "http"], "PORT must be a whole number from 1 to 65535, not \"http\""),
        ("echo_client", &["-l", "2", "127.0.0.1", "9"], "-l DROP_RATE must be a number from 0 to 1, not \"2\""),
        ("group_recv", &["7000", "7001"], "usage:"),
    ];
    for (name, args, says) in cases {
        // Each fails before it opens anything, so it ends at once.
        let out = Command::new(ex.path(name)).args(args).stdin(Stdio::null()).output().expect("run the example");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name} {args:?} succeeded");
        assert!(stderr.contains(says), "{name} {args:?} said: {stderr}");
    }
}
