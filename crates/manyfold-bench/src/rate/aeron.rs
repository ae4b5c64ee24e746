//! The Aeron anchor (BENCH.md): `io.aeron:aeron-all:1.46.0` from Maven
//! Central, installed by the lab into its own cache directory, run as
//! Aeron's own samples and scripts run it.
//!
//! - Rate: `io.aeron.samples.EmbeddedThroughput` (publisher, subscriber
//!   and media driver in one JVM, UDP over 127.0.0.1), with the settings
//!   of Aeron's `aeron-samples/scripts/embedded-throughput` script
//!   ([`SCRIPT_PROPS`]: MTU 16k, socket buffers 2m, receiver window 2m,
//!   term buffers not sparse) and its `java-common` JVM options, plus
//!   `-Daeron.threading.mode=SHARED` (one driver thread on these 2 cores).
//!   The sample reports messages/s once a second; the rate is the mean of
//!   those reports after the first (the JIT's warm-up).
//! - Latency: `io.aeron.samples.Ping` and `Pong` through a media driver
//!   (`io.aeron.driver.MediaDriver`, SHARED threading), three JVMs, with
//!   the settings of Aeron's `ping` and `pong` scripts and the idle
//!   strategies set to yield ([`PING_IDLE`], why there).
//!   `EmbeddedPingPong` cannot run here: it fixes its driver to DEDICATED
//!   threading with spinning sender and receiver, five busy threads on two
//!   cores, and did not finish 2,000 round trips in a minute. Round trips
//!   of one message at a time; one-way latency is taken as half the round
//!   trip. Aeron's samples have no paced one-way mode, so this is Aeron's
//!   unloaded latency, not a figure at 10/50/90% load.
//!
//! Aeron's samples count messages but do not check their content; Aeron
//! does not encrypt. Without Java, or without Maven and no cached jar, the
//! row is skipped with the reason.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Result};

use crate::child::{self, Finished};

pub const VERSION: &str = "1.46.0";
const ARTIFACT: &str = "io.aeron:aeron-all:1.46.0";

/// JVM options of Aeron's `java-common` script (Java ≥ 15).
const JVM_OPTS: &[&str] = &[
    "-XX:+UnlockExperimentalVMOptions",
    "-XX:+TrustFinalNonStaticFields",
    "-XX:+UnlockDiagnosticVMOptions",
    "-XX:GuaranteedSafepointInterval=300000",
    "-XX:+UseParallelGC",
    "--add-opens",
    "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.util.zip=ALL-UNNAMED",
    "-Djava.net.preferIPv4Stack=true",
    "-Dagrona.disable.bounds.checks=true",
    "-Daeron.threading.mode=SHARED",
];

/// Aeron's `embedded-throughput` script's settings.
pub const SCRIPT_PROPS: &[&str] = &[
    "-Daeron.term.buffer.sparse.file=false",
    "-Daeron.mtu.length=16k",
    "-Daeron.socket.so_sndbuf=2m",
    "-Daeron.socket.so_rcvbuf=2m",
    "-Daeron.rcv.initial.window.length=2m",
];

/// Aeron's `ping` and `pong` scripts' settings.
const PING_PROPS: &[&str] = &["-Daeron.pre.touch.mapped.memory=true", "-Daeron.sample.exclusive.publications=true"];

/// What the ping-pong run changes from the scripts, and why: three
/// busy-spinning threads (ping, pong, the driver) cannot share two busy
/// cores; with them the round trip took 12–20 ms at the median here. The
/// samples' own idle-strategy option and the driver's shared idle strategy
/// set to yield were the fastest of the settings tried.
pub const PING_IDLE: &[&str] =
    &["-Daeron.sample.idleStrategy=org.agrona.concurrent.YieldingIdleStrategy", "-Daeron.shared.idle.strategy=yield"];

/// The file the samples' "Execute again?" prompt reads its "no" from.
fn write_answer(dir: &Path) -> Result<()> {
    std::fs::write(dir.join("answer-no"), "n\n").map_err(|e| anyhow::anyhow!("writing {}: {e}", dir.display()))
}

/// When a sample that runs until stopped is stopped.
struct Stop {
    /// Its stdout file.
    out: PathBuf,
    /// Stop once it has printed this many rate reports ...
    reports: usize,
    /// ... or after this many seconds.
    secs: f64,
}

/// A usable Aeron: a Java runtime and the jar.
#[derive(Debug, Clone)]
pub struct Aeron {
    pub java: PathBuf,
    pub jar: PathBuf,
    pub java_version: String,
}

/// The lab's cache directory for Aeron: `$MANYFOLD_BENCH_CACHE/aeron`, or
/// `$XDG_CACHE_HOME/manyfold-bench/aeron`, or `~/.cache/manyfold-bench/aeron`.
fn cache_dir() -> Result<PathBuf, String> {
    if let Some(d) = std::env::var_os("MANYFOLD_BENCH_CACHE") {
        return Ok(PathBuf::from(d).join("aeron"));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .ok_or("neither XDG_CACHE_HOME nor HOME is set (where would the jar go?)")?;
    Ok(base.join("manyfold-bench").join("aeron"))
}

/// A program on PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

/// Finds Java and the jar, fetching the jar with Maven into the cache the
/// first time; the reason for skipping the row otherwise.
pub fn find() -> Result<Aeron, String> {
    let java = on_path("java").ok_or("Java is not installed (no `java` on PATH)")?;
    let v = Command::new(&java).arg("-version").output().map_err(|e| format!("running java -version: {e}"))?;
    let java_version = String::from_utf8_lossy(&v.stderr).lines().next().unwrap_or("").trim().to_string();
    let dir = cache_dir()?;
    let jar = dir.join(format!("aeron-all-{VERSION}.jar"));
    if !jar.is_file() {
        let mvn = on_path("mvn")
            .ok_or(format!("Maven is not installed (no `mvn` on PATH) and {} is not cached", jar.display()))?;
        eprintln!("rate: fetching {ARTIFACT} from Maven Central into {}", dir.display());
        let out = Command::new(mvn)
            .args(["-q", "-B", "dependency:copy", &format!("-Dartifact={ARTIFACT}")])
            .arg(format!("-DoutputDirectory={}", dir.display()))
            .arg(format!("-Dmaven.repo.local={}", dir.join("m2").display()))
            .current_dir(std::env::temp_dir())
            .output()
            .map_err(|e| format!("running mvn: {e}"))?;
        if !out.status.success() || !jar.is_file() {
            let said = String::from_utf8_lossy(&out.stdout);
            let tail: Vec<&str> = said.lines().rev().take(3).collect();
            return Err(format!("mvn could not fetch {ARTIFACT}: {}", tail.join(" / ")));
        }
    }
    Ok(Aeron { java, jar, java_version })
}

impl Aeron {
    /// `java` with the scripts' options and `props`, running `class`
    /// (its "Execute again?" prompt answered no), its driver in a
    /// directory of its own under `dir`. With `stop`, (SIGTERM, which is
    /// then no failure) once its output file holds that many rate reports
    /// or after that many seconds, whichever comes first.
    fn command(&self, class: &str, props: &[String], dir: &Path, stop: Option<Stop>) -> Command {
        let mut args: Vec<String> = JVM_OPTS.iter().map(|s| s.to_string()).collect();
        args.extend(props.iter().cloned());
        args.push(format!("-Daeron.dir={}", dir.join("aeron-driver").display()));
        args.extend(["-cp".into(), self.jar.display().to_string(), class.into()]);
        let mut c = Command::new("sh");
        // The answer to the prompt: "n".
        c.env("MFB_NO", dir.join("answer-no"));
        match stop {
            // `exec`: the child is java itself, so that stopping the child
            // stops java (a forking shell would leave it spinning).
            None => c.arg("-c").arg("exec \"$0\" \"$@\" < \"$MFB_NO\""),
            Some(Stop { out, reports, secs }) => {
                // `wait` reaps java, so its rusage is in the shell's; the
                // loop is bounded, and java is stopped before the shell ends.
                let ticks = (secs * 5.0).ceil() as u64;
                c.env("MFB_OUT", out).arg("-c").arg(format!(
                    "\"$0\" \"$@\" < \"$MFB_NO\" & pid=$!; i=0; \
                     while [ \"$(grep -c ' msgs/sec,' \"$MFB_OUT\" 2>/dev/null)\" -lt {reports} ] && [ $i -lt {ticks} ] && kill -0 $pid 2>/dev/null; \
                     do sleep 0.2; i=$((i+1)); done; kill $pid 2>/dev/null; wait $pid; true"
                ))
            }
        };
        c.arg(&self.java).args(args);
        c
    }

    fn run(&self, class: &str, props: Vec<String>, dir: &Path, name: &str, reports: usize) -> Result<Finished> {
        write_answer(dir)?;
        let what = format!("Aeron's {class}");
        // The JVM and the driver take one to several seconds to start on a
        // busy machine; then one report a second.
        let secs = reports as f64 + 30.0;
        let stop = Stop { out: dir.join(format!("{name}.out")), reports, secs };
        let limit = Duration::from_secs_f64(secs + 30.0);
        let r = child::launch(self.command(class, &props, dir, Some(stop)), dir, name, what)?.finish(limit);
        let _ = std::fs::remove_dir_all(dir.join("aeron-driver"));
        r
    }

    /// EmbeddedThroughput with messages of `size` bytes, stopped after
    /// `secs` seconds of reports (plus its start-up): the rate and how
    /// many messages it reported.
    pub fn throughput(&self, size: usize, secs: f64, dir: &Path) -> Result<(f64, u64, Finished)> {
        let mut props: Vec<String> = SCRIPT_PROPS.iter().map(|s| s.to_string()).collect();
        props.push(format!("-Daeron.sample.messageLength={size}"));
        props.push(format!("-Daeron.sample.messages={}", u64::MAX / 2));
        // One report a second; the first is left out (warm-up).
        let reports = secs.ceil() as usize + 1;
        let f = self.run("io.aeron.samples.EmbeddedThroughput", props, dir, "aeron-throughput", reports)?;
        let (rate, total) = parse_throughput(&f.stdout)?;
        Ok((rate, total, f))
    }

    /// Ping and Pong (two JVMs) through one media driver (a third, SHARED
    /// threading): `messages` round trips of `size` bytes after one
    /// warm-up of `warmup`; the round trips' p50, p99, p99.9 and max, µs.
    pub fn ping_pong(
        &self,
        size: usize,
        messages: u64,
        warmup: u64,
        dir: &Path,
        limit: Duration,
    ) -> Result<([f64; 4], Finished)> {
        let limit = limit.as_secs_f64();
        let driver_dir = dir.join("aeron-driver");
        let _ = std::fs::remove_dir_all(&driver_dir);
        write_answer(dir)?;
        let (ping_port, pong_port) = (crate::free_addr()?.port(), crate::free_addr()?.port());
        let mut common: Vec<String> = PING_PROPS.iter().chain(PING_IDLE).map(|s| s.to_string()).collect();
        common.push(format!("-Daeron.sample.ping.channel=aeron:udp?endpoint=localhost:{ping_port}"));
        common.push(format!("-Daeron.sample.pong.channel=aeron:udp?endpoint=localhost:{pong_port}"));
        let driver_props = vec!["-Daeron.term.buffer.sparse.file=false".to_string(), PING_IDLE[1].to_string()];
        let driver = self.command("io.aeron.driver.MediaDriver", &driver_props, dir, None);
        let driver = child::launch(driver, dir, "aeron-driver", "Aeron's media driver".into())?;
        let cnc = driver_dir.join("cnc.dat");
        let up = (0..400).any(|_| {
            std::thread::sleep(Duration::from_millis(25));
            cnc.is_file()
        });
        if !up {
            driver.kill();
            bail!("Aeron's media driver did not start within 10 s");
        }
        let pong = self.command("io.aeron.samples.Pong", &common, dir, None);
        let pong = match child::launch(pong, dir, "aeron-pong", "Aeron's Pong".into()) {
            Ok(p) => p,
            Err(e) => {
                driver.kill();
                return Err(e);
            }
        };
        let mut props = common;
        props.push(format!("-Daeron.sample.messageLength={size}"));
        props.push(format!("-Daeron.sample.messages={messages}"));
        props.push("-Daeron.sample.warmup.iterations=1".into());
        props.push(format!("-Daeron.sample.warmup.messages={warmup}"));
        // Ping ends by itself: a timeout here is a failure.
        let ping = self.command("io.aeron.samples.Ping", &props, dir, None);
        let ping = child::launch(ping, dir, "aeron-ping", "Aeron's Ping".into())
            .and_then(|p| p.finish(Duration::from_secs_f64(limit)));
        pong.kill();
        driver.kill();
        let _ = std::fs::remove_dir_all(&driver_dir);
        let ping = ping?;
        Ok((parse_histogram(&ping.stdout)?, ping))
    }
}

/// The mean of EmbeddedThroughput's once-a-second reports (`R msgs/sec,
/// B bytes/sec, totals N messages …`) after the first, and the last total.
pub fn parse_throughput(out: &str) -> Result<(f64, u64)> {
    let reports: Vec<(f64, u64)> = out
        .lines()
        .filter_map(|l| {
            let (rate, rest) = l.split_once(" msgs/sec,")?;
            let total = rest.split_once("totals ")?.1.split_whitespace().next()?.parse().ok()?;
            Some((rate.trim().parse::<f64>().ok()?, total))
        })
        .collect();
    let Some((_, total)) = reports.last().copied() else {
        bail!("EmbeddedThroughput printed no rate (said: {})", out.lines().last().unwrap_or(""))
    };
    if reports.len() < 2 {
        bail!("EmbeddedThroughput printed one report only (the first is its warm-up)");
    }
    let after_first = &reports[1..];
    Ok((after_first.iter().map(|r| r.0).sum::<f64>() / after_first.len() as f64, total))
}

/// p50, p99, p99.9 and max (µs) of HdrHistogram's percentile distribution
/// as EmbeddedPingPong prints it (`Value Percentile TotalCount
/// 1/(1-Percentile)` rows; values in µs): the first row at or above each
/// percentile.
pub fn parse_histogram(out: &str) -> Result<[f64; 4]> {
    let rows: Vec<(f64, f64)> = out
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w.as_slice() {
                [v, p, n, _] | [v, p, n] if n.parse::<u64>().is_ok() => Some((v.parse().ok()?, p.parse().ok()?)),
                _ => None,
            }
        })
        .collect();
    if rows.is_empty() {
        bail!("EmbeddedPingPong printed no histogram");
    }
    let at = |q: f64| rows.iter().find(|(_, p)| *p >= q).or(rows.last()).map_or(f64::NAN, |(v, _)| *v);
    let max = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("#[Max").and_then(|r| r.trim_start_matches([' ', '=']).split(',').next()))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| rows.last().map_or(f64::NAN, |r| r.0));
    Ok([at(0.5), at(0.99), at(0.999), max])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throughput_is_the_mean_of_the_reports_after_the_first() {
        let out = "Streaming 1 messages\n\
            2.784e+06 msgs/sec, 8.909e+07 bytes/sec, totals 3646976 messages 111 MB payloads\n\
            3.000e+06 msgs/sec, 1.048e+08 bytes/sec, totals 6940255 messages 211 MB payloads\n\
            4.000e+06 msgs/sec, 1.165e+08 bytes/sec, totals 10618719 messages 324 MB payloads\n\
            Done streaming. backPressureRatio=2.2\n";
        assert_eq!(parse_throughput(out).unwrap(), (3.5e6, 10618719));
        let one = "3.0e+06 msgs/sec, 1 bytes/sec, totals 5 messages 0 MB payloads\n";
        assert!(parse_throughput(one).is_err(), "the warm-up's report only");
        assert!(parse_throughput("Done streaming.\n").is_err(), "no report");
    }

    #[test]
    fn histogram_percentiles_take_the_first_row_at_or_above() {
        let out = "Histogram of RTT latencies in microseconds.\n\
            \x20      Value     Percentile TotalCount 1/(1-Percentile)\n\n\
            \x20     10.000 0.000000000000          1           1.00\n\
            \x20     20.000 0.500000000000       5000           2.00\n\
            \x20     30.000 0.990625000000       9907         106.67\n\
            \x20     40.000 0.999023437500       9991        1024.00\n\
            \x20     90.000 1.000000000000      10000\n\
            #[Mean    =       21.000, StdDeviation   =        5.000]\n\
            #[Max     =       90.000, Total count    =        10000]\n";
        assert_eq!(parse_histogram(out).unwrap(), [20.0, 30.0, 40.0, 90.0]);
        assert!(parse_histogram("nothing\n").is_err());
    }
}
