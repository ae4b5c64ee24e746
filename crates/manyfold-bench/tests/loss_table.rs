//! CI's short run of the `loss-table` scenario (`--quick`: 2 MB, windows 4
//! and 64 packets plus the default, loss 0 and 10%): the table, the JSON
//! and the charts come out. Proves the harness, not a speed (BENCH.md).

use std::path::Path;
use std::process::Command;

/// A PNG file (RFC 2083 signature) of some substance.
fn assert_png(path: &Path) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{} is not a PNG", path.display());
    assert!(bytes.len() > 1000, "{} has only {} bytes", path.display(), bytes.len());
}

#[test]
fn loss_table_quick_prints_the_table_and_writes_json_and_charts() {
    let bench = env!("CARGO_BIN_EXE_manyfold-bench");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("loss.json");
    let plots = dir.path().join("plots");
    let out = Command::new(bench)
        .args(["loss-table", "--quick", "--timeout", "30", "--json"])
        .arg(&json)
        .arg("--plot")
        .arg(&plots)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stdout}\n{stderr}");

    // One row per window and one for the default, each with the paper's
    // figures beside manyfold's where the paper has them.
    assert!(stdout
        .contains("| window | receive buffer | 0%: manyfold MB/s | 0%: paper | 10%: manyfold MB/s | 10%: paper |"));
    let row = |start: &str| {
        stdout.lines().find(|l| l.starts_with(start)).unwrap_or_else(|| panic!("no {start:?} row:\n{stdout}"))
    };
    assert!(row("| 4 packets |").contains("| 7628 |") && row("| 4 packets |").contains("| 6744 |"), "{stdout}");
    assert!(row("| 64 packets |").contains("| 27567 |") && row("| 64 packets |").contains("| 12837 |"), "{stdout}");
    assert!(row("| default (auto-tuned) |").contains("| – |"), "{stdout}");
    assert!(stdout.contains("FaultConfig::send_loss") && stdout.contains("fault seeds 1 (sender) and 2 (receiver)"));

    // Every transfer is in the JSON: all those without loss finished, and
    // at least one through 10% loss did (a single one may time out or fail
    // on a bad draw; the table says so, and that is not the harness's fault).
    let json = std::fs::read_to_string(&json).unwrap();
    assert!(json.starts_with("{\"scenario\":\"loss-table\",\"bytes\":2000000,"), "{json}");
    let cells: Vec<&str> = json.lines().filter(|l| l.contains("\"window_packets\":")).collect();
    assert_eq!(cells.len(), 6, "{json}");
    for c in cells.iter().filter(|c| c.contains("\"loss_percent\":0,")) {
        assert!(c.contains("\"status\":\"ok\"") && c.contains("\"goodput_mb_s\":"), "{c}");
    }
    let lossy_ok =
        cells.iter().filter(|c| c.contains("\"loss_percent\":10,") && c.contains("\"status\":\"ok\"")).count();
    assert!(lossy_ok >= 1, "no transfer finished through 10% loss:\n{json}\n{stderr}");
    assert!(cells.iter().any(|c| c.contains("\"window_packets\":4,") && c.contains("\"loss_percent\":10,")), "{json}");

    assert_png(&plots.join("loss-table-goodput.png"));
    assert_png(&plots.join("loss-table-paper.png"));
}
