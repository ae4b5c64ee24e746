//! Byte sizes as people write them (`10MB`, `1GiB`, `512k`, `4096`) and
//! byte counts, durations and rates as people read them.
//!
//! Decimal units are powers of 1000 (`k`, `KB`, `M`, `MB`, ...), binary
//! units powers of 1024 (`Ki`, `KiB`, `Mi`, `MiB`, ...), as in IEC 80000-13.
//! Units are case-insensitive; a bare number is bytes.

use std::time::Duration;

use anyhow::{bail, Context, Result};

/// Units accepted after the number, with their multiplier.
const UNITS: &[(&str, u64)] = &[
    ("", 1),
    ("b", 1),
    ("k", 1_000),
    ("kb", 1_000),
    ("ki", 1 << 10),
    ("kib", 1 << 10),
    ("m", 1_000_000),
    ("mb", 1_000_000),
    ("mi", 1 << 20),
    ("mib", 1 << 20),
    ("g", 1_000_000_000),
    ("gb", 1_000_000_000),
    ("gi", 1 << 30),
    ("gib", 1 << 30),
    ("t", 1_000_000_000_000),
    ("tb", 1_000_000_000_000),
    ("ti", 1 << 40),
    ("tib", 1 << 40),
];

/// Parses a size such as `10MB`, `1GiB`, `512k`, `1.5G` or `4096` into bytes.
pub fn parse_size(text: &str) -> Result<u64> {
    let s = text.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let unit = unit.trim();
    if number.is_empty() {
        bail!("invalid size {text:?}: expected a number with an optional unit, e.g. 4096, 512k, 10MB, 1GiB");
    }
    let Some(&(_, multiplier)) = UNITS.iter().find(|(u, _)| u.eq_ignore_ascii_case(unit)) else {
        bail!(
            "invalid size {text:?}: unknown unit {unit:?} \
             (use B, k/KB, M/MB, G/GB, T/TB for powers of 1000 or KiB, MiB, GiB, TiB for powers of 1024)"
        );
    };
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if (int.is_empty() && frac.is_empty()) || frac.contains('.') {
        bail!("invalid size {text:?}: {number:?} is not a number");
    }
    let too_big = || anyhow::anyhow!("invalid size {text:?}: too large");
    let int_value: u64 = if int.is_empty() { 0 } else { int.parse().map_err(|_| too_big())? };
    let mut bytes = int_value.checked_mul(multiplier).ok_or_else(too_big)?;
    if !frac.is_empty() {
        // Exact decimal fraction of the unit, rounded down to whole bytes.
        let digits = frac.len().min(18) as u32;
        let frac_value: u128 = frac[..digits as usize].parse().context("bad fraction")?;
        let part = frac_value * u128::from(multiplier) / 10u128.pow(digits);
        bytes = bytes.checked_add(part as u64).ok_or_else(too_big)?;
    }
    Ok(bytes)
}

/// `clap` value parser for sizes.
pub fn size_arg(text: &str) -> Result<u64, String> {
    parse_size(text).map_err(|e| e.to_string())
}

/// Parses a rate for `--rate` into bytes per second: a size per second
/// (`10MB`, `1.5MiB/s`, `500k`) or, with a bit unit, bits per second
/// (`80Mbit`, `1Gbit/s`, `500kbps`: divided by 8).
pub fn parse_rate(text: &str) -> Result<u64> {
    let s = text.trim();
    let s = s.strip_suffix("/s").or_else(|| s.strip_suffix("/S")).unwrap_or(s);
    // A negative rate (`--rate -5MB`), not a flag given as the value (`--rate --to`).
    if s.strip_prefix('-').is_some_and(|r| parse_rate(r).is_ok()) {
        bail!("invalid rate {text:?}: the rate must be above 0");
    }
    let lower = s.to_ascii_lowercase();
    let bits = ["bit", "bits", "bps"].iter().find_map(|u| lower.strip_suffix(u).map(|p| p.len()));
    let rate = match bits {
        Some(len) => parse_size(&s[..len]).map(|b| b / 8),
        None => parse_size(s),
    }
    .map_err(|_| {
        anyhow::anyhow!(
            "invalid rate {text:?}: give bytes per second (10MB, 1.5MiB/s, 500k) or bits per second (80Mbit, 1Gbit/s)"
        )
    })?;
    if rate == 0 {
        bail!("invalid rate {text:?}: the rate must be above 0");
    }
    Ok(rate)
}

/// `clap` value parser for rates.
pub fn rate_arg(text: &str) -> Result<u64, String> {
    parse_rate(text).map_err(|e| e.to_string())
}

/// `20.00 MB`, `512 B`, `1.07 GB`: decimal units, three significant digits or so.
pub fn human_bytes(bytes: u64) -> String {
    const STEPS: &[&str] = &["B", "kB", "MB", "GB", "TB", "PB"];
    let mut value = bytes as f64;
    let mut step = 0;
    while value >= 1000.0 && step + 1 < STEPS.len() {
        value /= 1000.0;
        step += 1;
    }
    if step == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.2} {}", STEPS[step])
    }
}

/// `1.27 s`, `85.3 ms`, `412 µs`.
pub fn human_duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs >= 1.0 {
        format!("{secs:.2} s")
    } else if secs >= 1e-3 {
        format!("{:.2} ms", secs * 1e3)
    } else {
        format!("{:.0} µs", secs * 1e6)
    }
}

/// Goodput as `15.73 MB/s (125.8 Mbit/s)`.
pub fn human_rate(bytes: u64, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64().max(1e-9);
    let per_sec = bytes as f64 / secs;
    format!("{:.2} MB/s ({:.1} Mbit/s)", per_sec / 1e6, per_sec * 8.0 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_take_byte_and_bit_units() {
        assert_eq!(parse_rate("10MB").unwrap(), 10_000_000);
        assert_eq!(parse_rate("1.5MiB/s").unwrap(), 1_572_864);
        assert_eq!(parse_rate("80Mbit").unwrap(), 10_000_000);
        assert_eq!(parse_rate("1Gbit/s").unwrap(), 125_000_000);
        assert_eq!(parse_rate("500kbps").unwrap(), 62_500);
        assert_eq!(parse_rate("4096").unwrap(), 4096);
        assert!(parse_rate("0").unwrap_err().to_string().contains("above 0"));
        assert!(parse_rate("-5MB").unwrap_err().to_string().contains("above 0"));
        assert!(parse_rate("--to").unwrap_err().to_string().contains("bits per second"));
        assert!(parse_rate("fast").unwrap_err().to_string().contains("bits per second"));
    }

    #[test]
    fn parses_plain_bytes_and_units() {
        assert_eq!(parse_size("0").unwrap(), 0);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("17B").unwrap(), 17);
        assert_eq!(parse_size("512k").unwrap(), 512_000);
        assert_eq!(parse_size("512K").unwrap(), 512_000);
        assert_eq!(parse_size("512KiB").unwrap(), 512 * 1024);
        assert_eq!(parse_size("10MB").unwrap(), 10_000_000);
        assert_eq!(parse_size("10mb").unwrap(), 10_000_000);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("1 GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("2Ti").unwrap(), 2 << 40);
        assert_eq!(parse_size("1.5GB").unwrap(), 1_500_000_000);
        assert_eq!(parse_size("0.5KiB").unwrap(), 512);
        assert_eq!(parse_size(".25k").unwrap(), 250);
    }

    #[test]
    fn rejects_bad_sizes_with_a_reason() {
        for (bad, why) in [
            ("", "expected a number"),
            ("MB", "expected a number"),
            ("-5", "expected a number"),
            ("10XB", "unknown unit"),
            ("10 MBs", "unknown unit"),
            ("1.2.3k", "not a number"),
            (".", "not a number"),
            ("99999999999999999999", "too large"),
            ("20000000TiB", "too large"),
        ] {
            let err = parse_size(bad).unwrap_err().to_string();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
    }

    #[test]
    fn formats_for_people() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(20_000_000), "20.00 MB");
        assert_eq!(human_bytes(1 << 30), "1.07 GB");
        assert_eq!(human_duration(Duration::from_millis(1270)), "1.27 s");
        assert_eq!(human_duration(Duration::from_micros(85_300)), "85.30 ms");
        assert_eq!(human_duration(Duration::from_micros(412)), "412 µs");
        assert_eq!(human_rate(20_000_000, Duration::from_secs(2)), "10.00 MB/s (80.0 Mbit/s)");
    }
}
