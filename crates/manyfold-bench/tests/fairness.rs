//! CI's short run of the `fairness` scenario (`--quick`: 5 s runs, the
//! first controller, newreno): the lab, the three pairs (two kernel TCP
//! flows, manyfold against kernel TCP, two manyfold flows) through one
//! shared bottleneck, their verified per-interval counts, the JSON, one
//! chart per run, and the cleanup. Proves the harness, not a fairness
//! figure (BENCH.md). Needs root and /dev/net/tun; skips with the reason
//! otherwise.

mod common;

#[test]
fn fairness_quick_runs_every_pair_reports_series_and_cleans_up() {
    if let Some(why) = common::namespaces_unavailable("fairness") {
        eprintln!("skipped: {why}");
        return;
    }
    let quick = common::run_quick("fairness");
    let (stdout, stderr) = (&quick.ran.stdout, &quick.ran.stderr);
    for row in [
        "| kernel TCP cubic + kernel TCP cubic | 1 |",
        "| manyfold (newreno) + kernel TCP cubic | 1 |",
        "| manyfold (newreno) + manyfold (newreno) | 1 |",
    ] {
        let line = stdout.lines().find(|l| l.starts_with(row)).unwrap_or_else(|| panic!("no row {row:?}:\n{stdout}"));
        // Every figure is there: no failed run, no missing goodput.
        assert!(!line.contains("failed") && !line.contains('–'), "{line}\n{stderr}");
    }
    assert!(stdout.contains("Jain's index") && stdout.contains("nproc"), "{stdout}");
    let json = &quick.json;
    assert!(json.starts_with("{\"scenario\":\"fairness\""), "{json}");
    // Five 1 s intervals per flow, six flows.
    assert_eq!(json.matches("\"bytes_per_interval\":[").count(), 6, "{json}");
    assert!(!json.contains("\"error\""), "{json}");
    let pngs = std::fs::read_dir(quick.charts.path()).unwrap().filter(|e| {
        e.as_ref().is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".png") && e.metadata().unwrap().len() > 0)
    });
    assert_eq!(pngs.count(), 3, "one chart per run");
    common::assert_namespaces_removed(quick.ran.pid);
}
