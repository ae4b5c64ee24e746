//! manyfold's charts, drawn with plotters' bitmap backend into PNG files:
//! the lab's line and grouped bar charts (issue 3: "with `--plot` writes
//! PNG charts"), and the stacked time panels of `manyfold trace --plot`
//! (issue 9).
//!
//! Text needs a font. plotters' default `ttf` feature finds system fonts
//! through font-kit, which links fontconfig and freetype; instead the lab
//! uses plotters' pure-Rust `ab_glyph` renderer and hands it one TrueType
//! file found at run time ([`font`]): `$MANYFOLD_BENCH_FONT` if set, else
//! the first of [`FONT_PATHS`] that exists and parses. A machine without
//! any gets an error naming the package to install (`.ci/run` installs
//! `fonts-dejavu-core` when the font is missing).
//!
//! Both chart kinds start the y axis at 0 (a goodput or a time read from a
//! cut-off axis exaggerates differences) and place the legend in whichever
//! upper corner hides the least of the data.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{anyhow, bail, Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Environment variable naming a TrueType font to use instead of the search.
pub const FONT_ENV: &str = "MANYFOLD_BENCH_FONT";

/// Where common systems keep a sans-serif TrueType font, most likely first:
/// Debian/Ubuntu (`fonts-dejavu-core`), Fedora, Arch, openSUSE, then
/// Liberation and macOS's Arial.
pub const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
    "/Library/Fonts/Arial.ttf",
];

/// The family name the font is registered under and every style asks for.
const FAMILY: &str = "sans-serif";

/// Image size in pixels: wide enough for a legend beside six or more rows.
const SIZE: (u32, u32) = (1200, 720);

/// Tableau's ten colours: distinct from one another, also in greyscale print.
const COLOURS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn colour(i: usize) -> RGBColor {
    COLOURS[i % COLOURS.len()]
}

/// Loads and registers the font once per process; returns the file used.
pub fn font() -> Result<PathBuf> {
    static LOADED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    LOADED.get_or_init(|| load_font().map_err(|e| format!("{e:#}"))).clone().map_err(|e| anyhow!(e))
}

fn load_font() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os(FONT_ENV) {
        let path = PathBuf::from(path);
        register(&path).with_context(|| format!("{FONT_ENV}={}", path.display()))?;
        return Ok(path);
    }
    let mut tried = Vec::new();
    for candidate in FONT_PATHS {
        let path = Path::new(candidate);
        if !path.exists() {
            continue;
        }
        match register(path) {
            Ok(()) => return Ok(path.to_path_buf()),
            Err(e) => tried.push(format!("{e:#}")),
        }
    }
    let unusable = if tried.is_empty() { String::new() } else { format!(" (unusable: {})", tried.join("; ")) };
    bail!(
        "no TrueType font for chart text: none of {} exists{unusable}. Install one \
         (Debian/Ubuntu: `apt-get install fonts-dejavu-core`; Fedora: `dnf install dejavu-sans-fonts`) \
         or set {FONT_ENV} to a .ttf file",
        FONT_PATHS.join(", ")
    )
}

fn register(path: &Path) -> Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    // plotters keeps registered fonts for the life of the process and
    // wants them 'static; this runs once per process (see `font`).
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font(FAMILY, FontStyle::Normal, bytes)
        .map_err(|_| anyhow!("{} is not a TrueType/OpenType font", path.display()))
}

/// A plotters error as anyhow (its error types borrow the backend's).
fn draw_err<E: std::fmt::Debug>(what: &'static str) -> impl Fn(E) -> anyhow::Error {
    move |e| anyhow!("drawing the {what}: {e:?}")
}

fn style(size: u32) -> TextStyle<'static> {
    (FAMILY, size).into_font().color(&BLACK)
}

/// Makes sure `path`'s directory exists and the font is loaded.
fn prepare(path: &Path) -> Result<()> {
    font()?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    Ok(())
}

/// One line per series, with a marker at each point and a legend. The x
/// axis spans the data; the y axis runs from 0 to a little above the
/// largest value. Points with a non-finite coordinate (a timed-out cell,
/// say) are left out; a series may then be empty, but not all of them.
pub fn lines(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<()> {
    draw_lines(path, title, x_label, y_label, series, XScale::Linear)
}

/// [`lines`] with a base-2 logarithmic x axis (for sizes that double from
/// one point to the next, like buffer sizes); ticks sit at powers of two
/// and are labelled with the original values. Every x must be positive.
pub fn lines_log2_x(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<()> {
    draw_lines(path, title, x_label, y_label, series, XScale::Log2)
}

/// Consecutive drawable points of one series: a line is drawn through them.
type Run = Vec<(f64, f64)>;

#[derive(Debug, Clone, Copy, PartialEq)]
enum XScale {
    Linear,
    Log2,
}

fn draw_lines(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
    scale: XScale,
) -> Result<()> {
    // Each series as runs of drawable points: a missing point (a timed-out
    // cell, say) breaks the line rather than being bridged over.
    let series: Vec<(&str, Vec<Run>)> = series
        .iter()
        .map(|(name, pts)| {
            let mut runs = vec![Vec::new()];
            for &(x, y) in pts {
                let x = match scale {
                    XScale::Linear => x,
                    XScale::Log2 if x > 0.0 => x.log2(),
                    XScale::Log2 => f64::NAN,
                };
                if x.is_finite() && y.is_finite() {
                    runs.last_mut().expect("never empty").push((x, y));
                } else if runs.last().is_some_and(|r| !r.is_empty()) {
                    runs.push(Vec::new());
                }
            }
            runs.retain(|r| !r.is_empty());
            (name.as_str(), runs)
        })
        .collect();
    let all = || series.iter().flat_map(|(_, runs)| runs.iter().flatten().copied());
    if all().next().is_none() {
        bail!("chart {title:?} has no data point to draw");
    }
    prepare(path)?;
    let (mut x0, mut x1) = all().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), (x, _)| (a.min(x), b.max(x)));
    if x1 - x0 < 1e-9 {
        let pad = (x0.abs() * 0.1).max(0.5);
        (x0, x1) = (x0 - pad, x1 + pad);
    }
    let y1 = headroom(all().map(|(_, y)| y).fold(0.0, f64::max));
    if scale == XScale::Log2 {
        // Whole powers of two at both ends, so that the ticks land on them.
        (x0, x1) = (x0.floor(), x1.ceil().max(x0.floor() + 1.0));
    }

    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err("background"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, style(26))
        .margin(20)
        .margin_right(45)
        .x_label_area_size(60)
        .y_label_area_size(90)
        .build_cartesian_2d(x0..x1, 0.0..y1)
        .map_err(draw_err("axes"))?;
    let x_fmt = |x: &f64| match scale {
        XScale::Linear => number(*x),
        // Only whole powers of two get a label on a log axis.
        XScale::Log2 if (x - x.round()).abs() < 1e-6 => number(x.round().exp2()),
        XScale::Log2 => String::new(),
    };
    let y_fmt = |y: &f64| number(*y);
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(x_label)
        .y_desc(y_label)
        .label_style(style(16))
        .axis_desc_style(style(18))
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .light_line_style(RGBColor(235, 235, 235));
    mesh.x_labels(match scale {
        XScale::Linear => 10,
        XScale::Log2 => (x1 - x0) as usize + 1,
    });
    mesh.draw().map_err(draw_err("mesh"))?;

    let mut occupied = Vec::new();
    for (i, (name, runs)) in series.iter().enumerate() {
        let c = colour(i);
        for (k, pts) in runs.iter().enumerate() {
            let drawn = chart
                .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(3)))
                .map_err(draw_err("lines"))?;
            if k == 0 {
                drawn.label(*name).legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], c.stroke_width(3)));
            }
        }
        if runs.is_empty() {
            // Still named in the legend, which then says what is missing.
            chart
                .draw_series(LineSeries::new(std::iter::empty(), c.stroke_width(3)))
                .map_err(draw_err("lines"))?
                .label(format!("{name} (no data)"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], c.stroke_width(3)));
        }
        let pts: Vec<(f64, f64)> = runs.iter().flatten().copied().collect();
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled()))).map_err(draw_err("markers"))?;
        // What the legend should not cover: the points and the segments
        // between them, sampled every few pixels.
        for w in runs.iter().flat_map(|r| r.windows(2)) {
            let (a, b) = (chart.backend_coord(&w[0]), chart.backend_coord(&w[1]));
            let steps = ((b.0 - a.0).abs().max((b.1 - a.1).abs()) / 4).max(1);
            for s in 0..=steps {
                let t = s as f64 / steps as f64;
                let (x, y) = (a.0 as f64 + (b.0 - a.0) as f64 * t, a.1 as f64 + (b.1 - a.1) as f64 * t);
                occupied.push(((x - 3.0) as i32, (y - 3.0) as i32, (x + 3.0) as i32, (y + 3.0) as i32));
            }
        }
        for p in &pts {
            let (x, y) = chart.backend_coord(p);
            occupied.push((x - 5, y - 5, x + 5, y + 5));
        }
    }
    let names: Vec<&str> = series.iter().map(|(n, _)| *n).collect();
    legend(&root, &mut chart, &names, &occupied)?;
    root.present().with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Grouped bars: for each category one bar per series, in series order,
/// with a legend naming the series; the value is printed above a bar when
/// it fits. `series[i].1[j]` is series `i`'s value for `categories[j]`; a
/// non-finite value leaves its bar out. Long category names wrap under
/// their group.
pub fn bars(
    path: &Path,
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[(String, Vec<f64>)],
) -> Result<()> {
    if categories.is_empty() || series.is_empty() {
        bail!("chart {title:?} needs at least one category and one series");
    }
    if let Some((name, v)) = series.iter().find(|(_, v)| v.len() != categories.len()) {
        bail!("chart {title:?}: series {name:?} has {} values for {} categories", v.len(), categories.len());
    }
    let finite = || series.iter().flat_map(|(_, v)| v.iter().copied()).filter(|v| v.is_finite());
    if finite().next().is_none() {
        bail!("chart {title:?} has no finite value to draw");
    }
    prepare(path)?;
    let y1 = headroom(finite().fold(0.0, f64::max));
    let n = categories.len();

    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err("background"))?;
    // Category names are drawn by hand below the axis, wrapped to their
    // group's width: plotters' tick labels are single lines and would
    // overlap for names like "raw UDP blast, GSO/GRO, no reliability".
    let (left, margin) = (90, 20);
    let slot = (SIZE.0 as f64 - left as f64 - 2.0 * margin as f64) / n as f64;
    let label_style = style(15).pos(Pos::new(HPos::Center, VPos::Top));
    let wrapped: Vec<Vec<String>> =
        categories.iter().map(|c| wrap(&root, c, &label_style, (slot * 0.95) as u32)).collect::<Result<_>>()?;
    let line_h = root.estimate_text_size("Ag", &label_style).map_err(draw_err("labels"))?.1 as i32 + 3;
    let rows = wrapped.iter().map(Vec::len).max().unwrap_or(1) as i32;

    let mut chart = ChartBuilder::on(&root)
        .caption(title, style(26))
        .margin(margin)
        .x_label_area_size(rows * line_h + 16)
        .y_label_area_size(left)
        .build_cartesian_2d(0.0..n as f64, 0.0..y1)
        .map_err(draw_err("axes"))?;
    let y_fmt = |y: &f64| number(*y);
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc(y_label)
        .label_style(style(16))
        .axis_desc_style(style(18))
        .y_label_formatter(&y_fmt)
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(draw_err("mesh"))?;

    let group = 0.8;
    let width = group / series.len() as f64;
    let value_style = style(13).pos(Pos::new(HPos::Center, VPos::Bottom));
    let mut occupied = Vec::new();
    for (i, (name, values)) in series.iter().enumerate() {
        let c = colour(i);
        let rects: Vec<((f64, f64), (f64, f64))> = values
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite())
            .map(|(j, &v)| {
                let x = j as f64 + (1.0 - group) / 2.0 + i as f64 * width;
                ((x, v.max(0.0)), (x + width, 0.0))
            })
            .collect();
        chart
            .draw_series(rects.iter().map(|&(a, b)| Rectangle::new([a, b], c.filled())))
            .map_err(draw_err("bars"))?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 7), (x + 24, y + 7)], c.filled()));
        for (&(a, b), v) in rects.iter().zip(values.iter().filter(|v| v.is_finite())) {
            let (p, q) = (chart.backend_coord(&a), chart.backend_coord(&b));
            let text = number(*v);
            let (tw, th) = root.estimate_text_size(&text, &value_style).map_err(draw_err("values"))?;
            occupied.push((p.0, p.1 - th as i32 - 4, q.0, q.1));
            if tw as i32 <= q.0 - p.0 + 4 {
                root.draw(&Text::new(text, ((p.0 + q.0) / 2, p.1 - 3), value_style.clone()))
                    .map_err(draw_err("values"))?;
            }
        }
    }
    for (j, lines) in wrapped.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(j as f64 + 0.5, 0.0));
        for (k, line) in lines.iter().enumerate() {
            root.draw(&Text::new(line.as_str(), (x, y + 8 + k as i32 * line_h), label_style.clone()))
                .map_err(draw_err("category labels"))?;
        }
    }
    let names: Vec<&str> = series.iter().map(|(n, _)| n.as_str()).collect();
    legend(&root, &mut chart, &names, &occupied)?;
    root.present().with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// The top of a y axis that starts at 0: 15% above the largest value
/// (room for the legend and value labels), or 1 when everything is 0.
fn headroom(max: f64) -> f64 {
    if max > 0.0 {
        max * 1.15
    } else {
        1.0
    }
}

/// Draws the legend in the upper corner (right, then left) whose box
/// overlaps the fewest `occupied` pixel rectangles.
fn legend<'a, 'b: 'a, X, Y>(
    root: &DrawingArea<BitMapBackend<'_>, Shift>,
    chart: &mut ChartContext<'a, BitMapBackend<'b>, Cartesian2d<X, Y>>,
    names: &[&str],
    occupied: &[(i32, i32, i32, i32)],
) -> Result<()>
where
    X: Ranged,
    Y: Ranged,
{
    let font = style(16);
    // The box plotters draws: the widest name, the 30-pixel swatch area and
    // a 10-pixel margin each side; lines about 1.25 text heights apart.
    let mut w = 0;
    let mut h = 0;
    for n in names {
        let (tw, th) = root.estimate_text_size(n, &font).map_err(draw_err("legend"))?;
        w = w.max(tw as i32);
        h += (th as f64 * 1.25) as i32 + 2;
    }
    let (w, h) = (w + 30 + 20, h + 20);
    // plotters places a corner legend 5 pixels inside the plotting area.
    let (xs, ys) = chart.plotting_area().get_pixel_range();
    let candidates = [
        (SeriesLabelPosition::UpperRight, (xs.end - 5 - w, ys.start + 5)),
        (SeriesLabelPosition::UpperLeft, (xs.start + 5, ys.start + 5)),
    ];
    let overlap = |(x, y): (i32, i32)| -> i64 {
        occupied
            .iter()
            .map(|&(a, b, c, d)| {
                let dx = (c.min(x + w) - a.max(x)).max(0) as i64;
                let dy = (d.min(y + h) - b.max(y)).max(0) as i64;
                dx * dy
            })
            .sum()
    };
    let best = candidates.into_iter().min_by_key(|(_, at)| overlap(*at)).map(|(p, _)| p);
    chart
        .configure_series_labels()
        .position(best.unwrap_or(SeriesLabelPosition::UpperRight))
        .label_font(font)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(draw_err("legend"))
}

/// One panel of a [`panels`] chart: a y axis and its series.
#[derive(Debug, Clone)]
pub struct Panel {
    pub y_label: String,
    /// Named series of (x, y) points in x order, drawn as lines (a series
    /// of one point still shows as a dot).
    pub series: Vec<(String, Vec<(f64, f64)>)>,
}

/// Most points drawn per series and panel: more cannot be told apart on
/// 1200 pixels, and drawing 10^6 segments takes seconds.
const MAX_DRAWN: usize = 4000;

/// Stacked panels over one shared x axis (time, say), each with its own y
/// axis from 0 and its own legend. Panels without any point say so in
/// their legend; all of them empty is an error.
pub fn panels(path: &Path, title: &str, x_label: &str, panels: &[Panel]) -> Result<()> {
    let xs = || panels.iter().flat_map(|p| p.series.iter().flat_map(|(_, pts)| pts.iter().map(|&(x, _)| x)));
    if xs().next().is_none() {
        bail!("chart {title:?} has no data point to draw");
    }
    prepare(path)?;
    let (x0, mut x1) = xs().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| (a.min(x), b.max(x)));
    if x1 - x0 < 1e-9 {
        x1 = x0 + 1.0;
    }
    let height = 90 + 260 * panels.len() as u32;
    let root = BitMapBackend::new(path, (SIZE.0, height)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err("background"))?;
    let root = root.titled(title, style(26)).map_err(draw_err("title"))?;
    let areas = root.split_evenly((panels.len(), 1));
    for (i, (panel, area)) in panels.iter().zip(&areas).enumerate() {
        let last = i + 1 == panels.len();
        let y1 = headroom(panel.series.iter().flat_map(|(_, pts)| pts.iter().map(|&(_, y)| y)).fold(0.0, f64::max));
        let mut chart = ChartBuilder::on(area)
            .margin(10)
            .margin_right(45)
            .x_label_area_size(if last { 50 } else { 25 })
            .y_label_area_size(90)
            .build_cartesian_2d(x0..x1, 0.0..y1)
            .map_err(draw_err("axes"))?;
        let fmt = |v: &f64| number(*v);
        let mut mesh = chart.configure_mesh();
        mesh.y_desc(panel.y_label.as_str())
            .label_style(style(15))
            .axis_desc_style(style(16))
            .x_label_formatter(&fmt)
            .y_label_formatter(&fmt)
            .light_line_style(RGBColor(235, 235, 235));
        if last {
            mesh.x_desc(x_label);
        }
        mesh.draw().map_err(draw_err("mesh"))?;
        for (k, (name, pts)) in panel.series.iter().enumerate() {
            let c = colour(k);
            let pts = thin(pts, x0, x1);
            let label = if pts.is_empty() { format!("{name} (none)") } else { name.clone() };
            let drawn = if pts.len() == 1 {
                chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled()))).map_err(draw_err("points"))?
            } else {
                // Width 1: plotters draws wider lines as polygons that
                // overshoot on near-vertical segments, which dense traces are full of.
                chart.draw_series(LineSeries::new(pts, c.stroke_width(1))).map_err(draw_err("lines"))?
            };
            drawn.label(label).legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], c.stroke_width(3)));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font(style(15))
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()
            .map_err(draw_err("legend"))?;
    }
    root.present().with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// At most about [`MAX_DRAWN`] of `pts`: per slice of the x range its
/// first, lowest, highest and last point, so that peaks and steps survive.
fn thin(pts: &[(f64, f64)], x0: f64, x1: f64) -> Vec<(f64, f64)> {
    let pts: Vec<(f64, f64)> = pts.iter().copied().filter(|(x, y)| x.is_finite() && y.is_finite()).collect();
    if pts.len() <= MAX_DRAWN {
        return pts;
    }
    let slices = MAX_DRAWN / 4;
    let width = (x1 - x0) / slices as f64;
    let mut out = Vec::with_capacity(MAX_DRAWN);
    let mut start = 0;
    while start < pts.len() {
        let slice = ((pts[start].0 - x0) / width).floor();
        let end = start + pts[start..].iter().take_while(|p| ((p.0 - x0) / width).floor() == slice).count();
        let part = &pts[start..end];
        let lo = part.iter().enumerate().min_by(|a, b| a.1 .1.total_cmp(&b.1 .1)).map_or(0, |(i, _)| i);
        let hi = part.iter().enumerate().max_by(|a, b| a.1 .1.total_cmp(&b.1 .1)).map_or(0, |(i, _)| i);
        let mut keep = vec![0, lo, hi, part.len() - 1];
        keep.sort_unstable();
        keep.dedup();
        out.extend(keep.into_iter().map(|i| part[i]));
        start = end;
    }
    out
}

/// Splits `text` at spaces into lines no wider than `max` pixels (a
/// single word wider than that keeps its own line).
fn wrap(root: &DrawingArea<BitMapBackend<'_>, Shift>, text: &str, style: &TextStyle, max: u32) -> Result<Vec<String>> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        if let Some(last) = lines.last_mut() {
            let joined = format!("{last} {word}");
            if root.estimate_text_size(&joined, style).map_err(draw_err("labels"))?.0 <= max {
                *last = joined;
                continue;
            }
        }
        lines.push(word.to_string());
    }
    if lines.is_empty() {
        lines.push(String::new());
    }
    Ok(lines)
}

/// A tick or value label: three significant digits (all the integer
/// digits from 100 up), without trailing zeros.
fn number(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return if v == 0.0 { "0".into() } else { format!("{v}") };
    }
    let decimals = (2 - v.abs().log10().floor() as i32).clamp(0, 6) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The PNG signature (RFC 2083, 12.12) and the IHDR chunk's width and
    /// height, big-endian, at bytes 16..24.
    fn png_size(path: &Path) -> (u32, u32) {
        let bytes = std::fs::read(path).expect("chart written");
        assert!(bytes.len() > 1000, "{} is only {} bytes", path.display(), bytes.len());
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
        assert_eq!(&bytes[12..16], b"IHDR");
        let be = |r: std::ops::Range<usize>| u32::from_be_bytes(bytes[r].try_into().expect("4 bytes"));
        (be(16..20), be(20..24))
    }

    #[test]
    fn line_chart_is_written_as_a_png() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/lines.png");
        let series = vec![
            ("window 4".to_string(), vec![(0.0, 50.0), (10.0, 30.0), (30.0, f64::NAN)]),
            ("window 64".to_string(), vec![(0.0, 500.0), (10.0, 120.0), (30.0, 40.0)]),
        ];
        lines(&path, "goodput against loss", "loss %", "MB/s", &series).unwrap();
        assert_eq!(png_size(&path), SIZE);
    }

    #[test]
    fn log_x_chart_is_written_as_a_png() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.png");
        let series = vec![("manyfold".to_string(), vec![(64.0, 10.0), (256.0, 40.0), (16384.0, 400.0)])];
        lines_log2_x(&path, "goodput against buffer", "buffer KiB", "MB/s", &series).unwrap();
        assert_eq!(png_size(&path), SIZE);
    }

    #[test]
    fn grouped_bar_chart_with_long_names_is_written_as_a_png() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bars.png");
        let cats: Vec<String> =
            ["manyfold (newreno)", "kernel TCP (cubic)", "raw UDP blast, GSO/GRO, no reliability (ceiling)"]
                .map(String::from)
                .to_vec();
        let series =
            vec![("sender".to_string(), vec![1.5, 0.6, 0.2]), ("receiver".to_string(), vec![2.0, 0.8, f64::NAN])];
        bars(&path, "CPU per GB", "CPU s/GB", &cats, &series).unwrap();
        assert_eq!(png_size(&path), SIZE);
    }

    #[test]
    fn charts_without_data_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("none.png");
        let empty = vec![("a".to_string(), vec![(1.0, f64::NAN)])];
        assert!(lines(&path, "t", "x", "y", &empty).unwrap_err().to_string().contains("no data point"));
        let cats = vec!["one".to_string()];
        let short = vec![("a".to_string(), vec![])];
        assert!(bars(&path, "t", "y", &cats, &short).unwrap_err().to_string().contains("0 values for 1"));
        assert!(!path.exists());
    }

    #[test]
    fn a_single_point_still_gets_an_x_range() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("one.png");
        lines(&path, "one point", "x", "y", &[("only".to_string(), vec![(5.0, 0.0)])]).unwrap();
        assert_eq!(png_size(&path), SIZE);
    }

    #[test]
    fn time_panels_are_written_as_one_png_with_a_panel_each() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("panels.png");
        let many: Vec<(f64, f64)> = (0..50_000).map(|i| (i as f64 / 1000.0, (i % 977) as f64)).collect();
        let panels = [
            Panel { y_label: "bytes".into(), series: vec![("cwnd".into(), many.clone()), ("in flight".into(), many)] },
            Panel { y_label: "ms".into(), series: vec![("rtt".into(), vec![(1.0, 20.0), (2.0, 25.0)])] },
            Panel { y_label: "packets".into(), series: vec![("lost".into(), vec![])] },
        ];
        super::panels(&path, "trace", "time, s", &panels).unwrap();
        assert_eq!(png_size(&path), (SIZE.0, 90 + 260 * 3));
        let none = [Panel { y_label: "y".into(), series: vec![("a".into(), vec![])] }];
        assert!(super::panels(&path, "t", "x", &none).unwrap_err().to_string().contains("no data point"));
    }

    #[test]
    fn thinning_keeps_each_slices_extremes() {
        let pts: Vec<(f64, f64)> = (0..100_000).map(|i| (i as f64, if i == 54_321 { 1e9 } else { 1.0 })).collect();
        let kept = thin(&pts, 0.0, 99_999.0);
        assert!(kept.len() <= MAX_DRAWN + 4, "{}", kept.len());
        assert!(kept.contains(&(54_321.0, 1e9)), "the peak survives");
        assert_eq!(kept.first(), pts.first());
        assert_eq!(kept.last(), pts.last());
    }

    #[test]
    fn numbers_keep_the_digits_their_magnitude_needs() {
        assert_eq!(number(0.0), "0");
        assert_eq!(number(27567.0), "27567");
        assert_eq!(number(652.4), "652");
        assert_eq!(number(20.0), "20");
        assert_eq!(number(12.34), "12.3");
        assert_eq!(number(1.5), "1.5");
        assert_eq!(number(0.62), "0.62");
        assert_eq!(number(0.0123), "0.0123");
    }
}
