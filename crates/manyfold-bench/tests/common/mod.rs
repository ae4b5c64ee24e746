//! What the lab's root-only tests share.

use std::ffi::OsStr;
use std::process::{Command, Stdio};

/// Why a scenario that builds network namespaces and TUN devices cannot
/// run here (not root, or no /dev/net/tun), if it cannot.
#[allow(dead_code)] // the soak runs on 127.0.0.1, without namespaces
pub fn namespaces_unavailable(scenario: &str) -> Option<String> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    if !root {
        return Some(format!("not root (the {scenario} scenario creates network namespaces)"));
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Some("/dev/net/tun is missing".into());
    }
    None
}

/// Whether kcptun's two programs are on PATH (the KCP rows run only then).
#[allow(dead_code)] // not every test that includes this module has a KCP row
pub fn kcptun_installed() -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    ["kcptun-client", "kcptun-server"].iter().all(|b| std::env::split_paths(&path).any(|d| d.join(b).is_file()))
}

/// One finished run of the bench binary.
#[allow(dead_code)] // not every test that includes this module runs the lab
#[derive(Debug)]
pub struct Ran {
    /// The bench's pid: the lab's namespaces are named after it.
    pub pid: u32,
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `manyfold-bench ARGS` to its end, keeping both outputs.
#[allow(dead_code)]
pub fn run_bench<S: AsRef<OsStr>>(args: &[S]) -> Ran {
    let child = Command::new(env!("CARGO_BIN_EXE_manyfold-bench"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting manyfold-bench");
    let pid = child.id();
    let out = child.wait_with_output().expect("waiting for manyfold-bench");
    Ran {
        pid,
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A scenario's `--quick` run with `--json` and `--plot`: what it printed,
/// the JSON it wrote and the directory of its charts.
#[allow(dead_code)]
#[derive(Debug)]
pub struct Quick {
    pub ran: Ran,
    pub json: String,
    pub charts: tempfile::TempDir,
}

/// Runs `manyfold-bench SCENARIO --quick --json F --plot D` and checks
/// that it succeeded.
#[allow(dead_code)]
pub fn run_quick(scenario: &str) -> Quick {
    let json = tempfile::NamedTempFile::new().expect("a temporary file");
    let charts = tempfile::tempdir().expect("a temporary directory");
    let ran = run_bench(&[
        scenario.as_ref(),
        "--quick".as_ref(),
        "--json".as_ref(),
        json.path().as_os_str(),
        "--plot".as_ref(),
        charts.path().as_os_str(),
    ]);
    assert!(ran.ok, "bench failed:\n{}\n{}", ran.stdout, ran.stderr);
    let json = std::fs::read_to_string(json.path()).expect("reading the JSON");
    Quick { ran, json, charts }
}

/// Fails if the lab of the bench run `pid` left namespaces behind.
#[allow(dead_code)]
pub fn assert_namespaces_removed(pid: u32) {
    let list = Command::new("ip").args(["netns", "list"]).output().expect("running ip netns list");
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(!list.contains(&format!("mfb-{pid}-")), "namespaces left behind: {list}");
}
