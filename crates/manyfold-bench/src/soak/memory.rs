//! The soak's memory watch: the process's resident set (VmRSS from
//! /proc/self/status) and the echo server's connection count, sampled
//! every few seconds; the least-squares slope of RSS over the run's second
//! half is what "flat memory" is judged by (issue 10).

use std::time::Duration;

use tokio::time::Instant;

/// One sample.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// Seconds since the run started.
    pub at: f64,
    pub rss_mib: f64,
    /// Connections the echo server's engine holds, in any state.
    pub server_conns: usize,
}

/// This process's resident set in KiB, if /proc says.
pub fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Samples every `every` from `start` until `until`.
pub async fn watch(
    start: Instant,
    until: Instant,
    every: Duration,
    server: manyfold::Endpoint,
    progress: impl Fn(&Sample),
) -> Vec<Sample> {
    let mut out = Vec::new();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = Instant::now();
        let s = Sample {
            at: now.duration_since(start).as_secs_f64(),
            rss_mib: rss_kib().unwrap_or(0) as f64 / 1024.0,
            server_conns: server.connection_count(),
        };
        progress(&s);
        out.push(s);
        if now >= until {
            return out;
        }
    }
}

/// What the samples say.
#[derive(Debug, Clone, Copy, Default)]
pub struct Summary {
    pub start_mib: f64,
    pub peak_mib: f64,
    pub end_mib: f64,
    /// MiB per minute over samples from `half` on (least squares).
    pub slope_mib_per_min: f64,
    /// Samples the slope was fitted to.
    pub fitted: usize,
    pub peak_server_conns: usize,
}

/// Summarises `samples`; the slope is fitted to those at `half` seconds or later.
pub fn summarise(samples: &[Sample], half: f64) -> Summary {
    let Some(first) = samples.first() else { return Summary::default() };
    let tail: Vec<&Sample> = samples.iter().filter(|s| s.at >= half).collect();
    let (xs, ys): (Vec<f64>, Vec<f64>) = tail.iter().map(|s| (s.at / 60.0, s.rss_mib)).unzip();
    let slope = if xs.len() >= 3 { crate::stats::linear_fit(&xs, &ys).1 } else { f64::NAN };
    Summary {
        start_mib: first.rss_mib,
        peak_mib: samples.iter().map(|s| s.rss_mib).fold(0.0, f64::max),
        end_mib: samples.last().map_or(0.0, |s| s.rss_mib),
        slope_mib_per_min: slope,
        fitted: xs.len(),
        peak_server_conns: samples.iter().map(|s| s.server_conns).max().unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(at: f64, rss_mib: f64) -> Sample {
        Sample { at, rss_mib, server_conns: 0 }
    }

    #[test]
    fn slope_is_fitted_to_the_second_half() {
        // Growth in the first half (warm-up), flat after it.
        let s: Vec<Sample> =
            (0..=20).map(|i| at(i as f64 * 6.0, if i < 10 { 10.0 + i as f64 } else { 20.0 })).collect();
        let m = summarise(&s, 60.0);
        assert_eq!((m.start_mib, m.peak_mib, m.end_mib, m.fitted), (10.0, 20.0, 20.0, 11));
        assert!(m.slope_mib_per_min.abs() < 1e-9);
        // 1 MiB every 6 s is 10 MiB per minute.
        let s: Vec<Sample> = (0..=20).map(|i| at(i as f64 * 6.0, i as f64)).collect();
        assert!((summarise(&s, 60.0).slope_mib_per_min - 10.0).abs() < 1e-9);
    }

    #[test]
    fn this_process_has_a_resident_set() {
        assert!(rss_kib().is_some_and(|k| k > 0));
    }
}
