//! `manyfold trace --plot`: one connection's qlog trace (spec §18) drawn
//! so that a person reads it at a glance (issue 23 item 6). Four panels
//! over one time axis, each with its legend beside the data, never on it:
//!
//! 1. congestion window (a line) and bytes in flight (a line: the most in
//!    flight per pixel column, as a sawtooth drawn point by point fills
//!    the panel), with a red × on the window at every packet declared
//!    lost and a line through the panel at every RTO expiry;
//! 2. throughput: the bytes sent per time slice, and of them the
//!    retransmitted ones;
//! 3. RTT: the samples as dots, the smoothed RTT as a line;
//! 4. events, one row each: packets declared lost, retransmissions,
//!    tail-loss probes and RTO expiries, a tick per event.

use std::path::Path;

use anyhow::{anyhow, Context, Result};
use manyfold::qlog::{Record, Trace};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use serde_json::Value;

/// The font family `manyfold_plot::font` registers.
const FAMILY: &str = "sans-serif";
const WIDTH: u32 = 1400;
/// Room on the right of every panel for its legend.
const LEGEND: u32 = 270;
/// Pixel columns of the data (the width of a thinned series).
const COLUMNS: usize = (WIDTH - LEGEND - 110) as usize;

const WINDOW: RGBColor = RGBColor(31, 119, 180);
const FLIGHT: RGBColor = RGBColor(255, 127, 14);
const LOST: RGBColor = RGBColor(214, 39, 40);
const RESENT: RGBColor = RGBColor(255, 127, 14);
const PROBE: RGBColor = RGBColor(148, 103, 189);
const RTO: RGBColor = RGBColor(0, 0, 0);
const SAMPLE: RGBColor = RGBColor(150, 150, 150);
const SENT: RGBColor = RGBColor(31, 119, 180);

/// A line's points, (seconds, value).
type Points = Vec<(f64, f64)>;

/// What the panels show, taken from the trace once; times in seconds.
struct Series {
    cwnd: Vec<(f64, f64)>,
    flight: Vec<(f64, f64)>,
    rtt_samples: Vec<(f64, f64)>,
    srtt: Vec<(f64, f64)>,
    /// (time, bytes, retransmission or probe)
    sent: Vec<(f64, f64, bool)>,
    lost: Vec<f64>,
    resent: Vec<f64>,
    probes: Vec<f64>,
    rtos: Vec<f64>,
    end: f64,
}

impl Series {
    fn of(trace: &Trace) -> Series {
        let secs = |e: &Record| e.time / 1e3;
        let mut s = Series {
            cwnd: Vec::new(),
            flight: Vec::new(),
            rtt_samples: Vec::new(),
            srtt: Vec::new(),
            sent: Vec::new(),
            lost: Vec::new(),
            resent: Vec::new(),
            probes: Vec::new(),
            rtos: Vec::new(),
            end: 0.0,
        };
        let mut samples_seen = 0;
        for e in &trace.events {
            let (t, d) = (secs(e), &e.data);
            s.end = s.end.max(t);
            let num = |k: &str| d.get(k).and_then(Value::as_f64);
            match e.name.as_str() {
                "recovery:metrics_updated" => {
                    if let Some(c) = num("congestion_window") {
                        s.cwnd.push((t, c / 1024.0));
                    }
                    if let Some(f) = num("bytes_in_flight") {
                        s.flight.push((t, f / 1024.0));
                    }
                    // Before the first sample the smoothed RTT is a guess
                    // (a third of the initial RTO), not a measurement.
                    let n = d.get("rtt_samples").and_then(Value::as_u64).unwrap_or(0);
                    if n > 0 {
                        if let Some(r) = num("smoothed_rtt") {
                            s.srtt.push((t, r));
                        }
                    }
                    if n > samples_seen {
                        samples_seen = n;
                        s.rtt_samples.push((t, num("latest_rtt").unwrap_or(0.0)));
                    }
                }
                "transport:packet_sent" => {
                    let bytes = d["raw"]["length"].as_f64().unwrap_or(0.0);
                    let trigger = d.get("trigger").and_then(Value::as_str);
                    s.sent.push((t, bytes, trigger.is_some()));
                    match trigger {
                        Some("probe") => s.probes.push(t),
                        Some(_) => s.resent.push(t),
                        None => {}
                    }
                }
                "recovery:packet_lost" => s.lost.push(t),
                "recovery:loss_timer_updated" if d["event_type"] == "expired" => s.rtos.push(t),
                _ => {}
            }
        }
        s
    }

    /// The congestion window in force at `t` (the last value before it).
    fn cwnd_at(&self, t: f64) -> f64 {
        let i = self.cwnd.partition_point(|&(x, _)| x <= t);
        self.cwnd.get(i.saturating_sub(1)).map_or(0.0, |&(_, c)| c)
    }

    /// Sent and retransmitted throughput in Mbit/s per slice of `slice` s.
    fn throughput(&self, slice: f64) -> (Points, Points) {
        let n = (self.end / slice).ceil().max(1.0) as usize;
        let (mut all, mut again) = (vec![0.0; n], vec![0.0; n]);
        for &(t, bytes, resent) in &self.sent {
            let i = ((t / slice) as usize).min(n - 1);
            all[i] += bytes;
            if resent {
                again[i] += bytes;
            }
        }
        let mbit = |v: Vec<f64>| -> Vec<(f64, f64)> {
            v.into_iter().enumerate().map(|(i, b)| ((i as f64 + 0.5) * slice, b * 8.0 / slice / 1e6)).collect()
        };
        (mbit(all), mbit(again))
    }
}

/// Per pixel column of `[0, end]`, the largest y: a line a person can
/// read where the points are far denser than the pixels.
fn column_max(pts: &[(f64, f64)], end: f64) -> Vec<(f64, f64)> {
    if pts.len() <= COLUMNS * 2 {
        return pts.to_vec();
    }
    let width = end.max(1e-9) / COLUMNS as f64;
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(COLUMNS);
    for &(x, y) in pts {
        let col = ((x / width) as usize).min(COLUMNS - 1);
        let mid = (col as f64 + 0.5) * width;
        match out.last_mut() {
            Some(last) if (last.0 - mid).abs() < width / 4.0 => last.1 = last.1.max(y),
            _ => out.push((mid, y)),
        }
    }
    out
}

/// A steps line through `pts` (each value held until the next), thinned
/// to the first, lowest, highest and last value per pixel column.
fn steps(pts: &[(f64, f64)], end: f64) -> Vec<(f64, f64)> {
    let width = end.max(1e-9) / COLUMNS as f64;
    let mut out: Vec<(f64, f64)> = Vec::new();
    let mut i = 0;
    while i < pts.len() {
        let col = (pts[i].0 / width) as usize;
        let j = i + pts[i..].iter().take_while(|p| (p.0 / width) as usize == col).count();
        let part = &pts[i..j];
        let lo = part.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
        let hi = part.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
        let (first, last) = (part[0], part[part.len() - 1]);
        if let Some(&(_, prev)) = out.last() {
            out.push((first.0, prev));
        }
        out.push(first);
        if part.len() > 2 {
            out.push((first.0, lo));
            out.push((first.0, hi));
        }
        out.push((last.0, last.1));
        i = j;
    }
    if let Some(&(x, y)) = out.last() {
        if x < end {
            out.push((end, y));
        }
    }
    out
}

/// The y range of a panel: from 0 to a little above what most of the
/// data reaches. A peak far above the rest (slow start's overshoot) is
/// left off the scale and named in the legend instead of squashing
/// everything else to the floor; `Some(peak)` then.
fn y_range(values: impl Iterator<Item = f64>, clip: bool) -> (f64, Option<f64>) {
    let mut v: Vec<f64> = values.filter(|y| y.is_finite()).collect();
    if v.is_empty() {
        return (1.0, None);
    }
    v.sort_by(f64::total_cmp);
    let max = v[v.len() - 1];
    // What most of the time shows: slow start's climb and overshoot may
    // take a few percent of the samples.
    let p95 = v[(v.len() - 1) * 95 / 100];
    let top = if clip && max > 3.0 * p95 && p95 > 0.0 { p95 * 1.5 } else { max * 1.08 };
    (top.max(1e-9), (max > top).then_some(max))
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

fn font(size: u32) -> TextStyle<'static> {
    (FAMILY, size).into_font().color(&BLACK)
}

fn err<E: std::fmt::Debug>(what: &'static str) -> impl Fn(E) -> anyhow::Error {
    move |e| anyhow!("drawing the {what}: {e:?}")
}

/// One legend entry: how it is drawn, and what it says.
enum Key {
    Line(RGBColor, u32),
    Cross(RGBColor),
    Dot(RGBColor),
    Tick(RGBColor),
    Note,
}

/// The legend of a panel, in the area beside it.
fn legend(area: &Area<'_>, title: &str, keys: &[(Key, String)]) -> Result<()> {
    area.draw(&Text::new(title.to_string(), (14, 14), font(17))).map_err(err("legend"))?;
    for (i, (key, text)) in keys.iter().enumerate() {
        let y = 44 + 26 * i as i32;
        let shape: Result<()> = match key {
            Key::Line(c, w) => {
                area.draw(&PathElement::new(vec![(14, y), (44, y)], c.stroke_width(*w))).map_err(err("legend"))
            }
            Key::Cross(c) => area.draw(&Cross::new((29, y), 5, c.stroke_width(2))).map_err(err("legend")),
            Key::Dot(c) => area.draw(&Circle::new((29, y), 2, c.filled())).map_err(err("legend")),
            Key::Tick(c) => {
                area.draw(&PathElement::new(vec![(29, y - 7), (29, y + 7)], c.stroke_width(2))).map_err(err("legend"))
            }
            Key::Note => Ok(()),
        };
        shape?;
        let x = if matches!(key, Key::Note) { 14 } else { 54 };
        area.draw(&Text::new(text.clone(), (x, y - 8), font(15))).map_err(err("legend"))?;
    }
    Ok(())
}

/// Draws the four panels of `trace` into the PNG `path`.
pub fn draw(trace: &Trace, path: &Path, title: &str) -> Result<()> {
    manyfold_plot::font()?;
    let s = Series::of(trace);
    let end = s.end.max(1e-3);
    let height = 60 + 300 + 230 + 230 + 190;
    {
        let root = BitMapBackend::new(path, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err("background"))?;
        let root = root.titled(title, font(22)).map_err(err("title"))?;
        let rows = root.split_by_breakpoints([] as [i32; 0], [300, 530, 760]);
        let last = rows.len() - 1;
        for (i, row) in rows.iter().enumerate() {
            let (plot, side) = row.split_horizontally(WIDTH - LEGEND);
            match i {
                0 => window_panel(&plot, &side, &s, end)?,
                1 => throughput_panel(&plot, &side, &s, end)?,
                2 => rtt_panel(&plot, &side, &s, end)?,
                _ => events_panel(&plot, &side, &s, end, i == last)?,
            }
        }
        root.present().with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// A panel's chart over `[0, end]` × `[0, top]`.
type Chart<'a, 'b> = ChartContext<'a, BitMapBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

fn chart<'a, 'b>(
    area: &'a Area<'b>,
    end: f64,
    top: f64,
    y_label: &str,
    x_label: Option<&str>,
) -> Result<Chart<'a, 'b>> {
    let mut c = ChartBuilder::on(area)
        .margin(8)
        .margin_left(10)
        .x_label_area_size(if x_label.is_some() { 45 } else { 25 })
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..end, 0.0..top)
        .map_err(err("axes"))?;
    let tick = |v: &f64| tick_label(*v, top);
    let mut mesh = c.configure_mesh();
    mesh.y_desc(y_label)
        .label_style(font(14))
        .axis_desc_style(font(15))
        .light_line_style(RGBColor(238, 238, 238))
        .y_labels(6)
        .x_label_formatter(&|v| format!("{v:.1}"))
        .y_label_formatter(&tick);
    if let Some(x) = x_label {
        mesh.x_desc(x);
    }
    mesh.draw().map_err(err("mesh"))?;
    Ok(c)
}

/// A y-axis label of a panel reaching `top`, with as many decimals as its
/// ticks (about six over the axis) need to differ: a panel of 0.6 Mbit/s
/// reads 0.2, 0.4, not 0, 0, 0.
fn tick_label(v: f64, top: f64) -> String {
    let step = top / 6.0;
    let decimals = if step > 0.0 { (-step.log10().floor()).clamp(0.0, 6.0) as usize } else { 0 };
    format!("{v:.decimals$}")
}

fn window_panel(plot: &Area<'_>, side: &Area<'_>, s: &Series, end: f64) -> Result<()> {
    let (top, peak) = y_range(s.cwnd.iter().chain(&s.flight).map(|p| p.1), true);
    let mut c = chart(plot, end, top, "KiB", None)?;
    let clip = |pts: Vec<(f64, f64)>| pts.into_iter().map(|(x, y)| (x, y.min(top))).collect::<Vec<_>>();
    // The window as a shaded area under its line, the flight a line over
    // it: a window-limited sender's flight runs along the window's edge.
    // (Lines one pixel wide: plotters draws wider ones as polygons that
    // overshoot on the near-vertical segments a sawtooth is full of.)
    let cwnd = clip(steps(&s.cwnd, end));
    c.draw_series(AreaSeries::new(cwnd.iter().copied(), 0.0, WINDOW.mix(0.18))).map_err(err("window"))?;
    c.draw_series(LineSeries::new(cwnd, WINDOW.stroke_width(1))).map_err(err("window"))?;
    c.draw_series(LineSeries::new(clip(column_max(&s.flight, end)), FLIGHT.stroke_width(1)))
        .map_err(err("bytes in flight"))?;
    for &t in &s.rtos {
        c.draw_series(LineSeries::new([(t, 0.0), (t, top)], RTO.stroke_width(1))).map_err(err("RTO"))?;
    }
    c.draw_series(s.lost.iter().map(|&t| Cross::new((t, s.cwnd_at(t).min(top)), 4, LOST.stroke_width(2))))
        .map_err(err("losses"))?;
    let mut keys = vec![
        (Key::Line(WINDOW, 3), "congestion window".to_string()),
        (Key::Line(FLIGHT, 1), "bytes in flight (peak".to_string()),
        (Key::Note, "    per pixel column)".to_string()),
        (Key::Cross(LOST), format!("packet declared lost ({})", s.lost.len())),
        (Key::Line(RTO, 1), format!("RTO expiry ({})", s.rtos.len())),
    ];
    if let Some(p) = peak {
        keys.push((Key::Note, format!("off the scale: peak {p:.0} KiB")));
    }
    legend(side, "Window", &keys)
}

fn throughput_panel(plot: &Area<'_>, side: &Area<'_>, s: &Series, end: f64) -> Result<()> {
    // About 200 slices, none shorter than 10 ms.
    let slice = (end / 200.0).max(0.01);
    let (all, again) = s.throughput(slice);
    // Never clipped: the slices of a short transfer in a longer trace are
    // a few percent of them, so "most of the data" is the idle time (acks,
    // keep-alives) and clipping would leave the transfer off the scale.
    let (top, _) = y_range(all.iter().map(|p| p.1), false);
    let mut c = chart(plot, end, top, "Mbit/s", None)?;
    c.draw_series(LineSeries::new(all, SENT.stroke_width(1))).map_err(err("throughput"))?;
    c.draw_series(LineSeries::new(again, LOST.stroke_width(1))).map_err(err("retransmitted"))?;
    let keys = [
        (Key::Line(SENT, 3), "sent, all packets".to_string()),
        (Key::Line(LOST, 3), "of which retransmitted".to_string()),
        (Key::Note, format!("per {:.0} ms slice", slice * 1e3)),
    ];
    legend(side, "Throughput", &keys)
}

fn rtt_panel(plot: &Area<'_>, side: &Area<'_>, s: &Series, end: f64) -> Result<()> {
    // Every RTT shown: its peaks (queues building) are what one looks for.
    let (top, peak) = y_range(s.rtt_samples.iter().chain(&s.srtt).map(|p| p.1), false);
    let mut c = chart(plot, end, top, "RTT, ms", None)?;
    let dots: Vec<(f64, f64)> = s.rtt_samples.iter().map(|&(x, y)| (x, y.min(top))).collect();
    c.draw_series(dots.iter().map(|&p| Circle::new(p, 1, SAMPLE.filled()))).map_err(err("RTT samples"))?;
    let srtt: Vec<(f64, f64)> = steps(&s.srtt, end).into_iter().map(|(x, y)| (x, y.min(top))).collect();
    c.draw_series(LineSeries::new(srtt, WINDOW.stroke_width(1))).map_err(err("smoothed RTT"))?;
    let mut keys = vec![
        (Key::Dot(SAMPLE), format!("RTT sample ({})", s.rtt_samples.len())),
        (Key::Line(WINDOW, 3), "smoothed RTT".to_string()),
    ];
    if let Some(p) = peak {
        keys.push((Key::Note, format!("off the scale: peak {p:.1} ms")));
    }
    legend(side, "Round trip", &keys)
}

/// Rows of the events panel, top to bottom.
const ROWS: [&str; 4] = ["lost", "retransmitted", "tail-loss probe", "RTO expiry"];

fn events_panel(plot: &Area<'_>, side: &Area<'_>, s: &Series, end: f64, last: bool) -> Result<()> {
    let mut c = ChartBuilder::on(plot)
        .margin(8)
        .margin_left(10)
        .x_label_area_size(if last { 45 } else { 25 })
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..end, 0.0..ROWS.len() as f64)
        .map_err(err("axes"))?;
    let row_name = |v: &f64| {
        let r = ROWS.len() as f64 - v - 0.5;
        if (r - r.round()).abs() < 1e-6 {
            ROWS.get(r.round() as usize).map_or(String::new(), |n| n.to_string())
        } else {
            String::new()
        }
    };
    c.configure_mesh()
        .label_style(font(13))
        .axis_desc_style(font(15))
        .x_desc("time since the connection began, s")
        .x_label_formatter(&|v| format!("{v:.1}"))
        .y_labels(ROWS.len() * 2 + 1)
        .y_label_formatter(&row_name)
        .disable_y_mesh()
        .light_line_style(RGBColor(238, 238, 238))
        .draw()
        .map_err(err("mesh"))?;
    for (row, (times, colour)) in
        [(&s.lost, LOST), (&s.resent, RESENT), (&s.probes, PROBE), (&s.rtos, RTO)].into_iter().enumerate()
    {
        let y = ROWS.len() as f64 - row as f64 - 0.5;
        c.draw_series(
            times.iter().map(|&t| PathElement::new(vec![(t, y - 0.35), (t, y + 0.35)], colour.stroke_width(1))),
        )
        .map_err(err("events"))?;
    }
    legend(
        side,
        "Events",
        &[
            (Key::Tick(LOST), format!("declared lost ({})", s.lost.len())),
            (Key::Tick(RESENT), format!("retransmitted ({})", s.resent.len())),
            (Key::Tick(PROBE), format!("tail-loss probe ({})", s.probes.len())),
            (Key::Tick(RTO), format!("RTO expiry ({})", s.rtos.len())),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peak_far_above_the_rest_is_left_off_the_scale_and_named() {
        let mut v: Vec<f64> = (0..1000).map(|i| 20.0 + (i % 10) as f64).collect();
        v.push(450.0);
        let (top, peak) = y_range(v.clone().into_iter(), true);
        assert!(top > 29.0 && top < 45.0, "{top}");
        assert_eq!(peak, Some(450.0));
        assert_eq!(y_range(v.into_iter(), false), (450.0 * 1.08, None));
        let (top, peak) = y_range([1.0, 2.0, 3.0].into_iter(), true);
        assert!((top - 3.24).abs() < 1e-9 && peak.is_none(), "{top}");
    }

    #[test]
    fn tick_labels_of_a_small_scale_differ() {
        // A receiver's throughput (acks only), a loopback RTT: below 1.
        let labels: Vec<String> = [0.0, 0.2, 0.4, 0.6].iter().map(|&v| tick_label(v, 0.75)).collect();
        assert_eq!(labels, ["0.0", "0.2", "0.4", "0.6"]);
        assert_eq!(tick_label(0.05, 0.3), "0.05");
        assert_eq!(tick_label(1500.0, 2800.0), "1500");
        assert_eq!(tick_label(2.0, 3.5), "2.0");
    }

    #[test]
    fn dense_points_become_one_per_pixel_column_keeping_the_peak() {
        let pts: Vec<(f64, f64)> = (0..100_000).map(|i| (i as f64 * 1e-4, (i % 7) as f64)).collect();
        let line = column_max(&pts, 10.0);
        assert!(line.len() <= COLUMNS + 1, "{}", line.len());
        assert!(line.iter().all(|p| p.1 == 6.0), "the peak of every column survives");
    }
}
