//! The lab's statistics, one rule each, for every scenario's tables
//! (shared/BENCH.md: medians of at least three repetitions with their
//! spread, ratios taken pair by pair within one run):
//!
//! - [`median`]: the middle of the values; with an even count, the mean of
//!   the two middle ones.
//! - [`min_max`] and [`med_range`]: the spread beside a median, as
//!   `median (min–max)`.
//! - [`percentile`]: nearest rank (the value of rank ⌈q/100 · n⌉, at
//!   least 1), never interpolated; [`rank`] alone for counts that include
//!   values that never came (a message that was not delivered).
//! - [`ratios`] and [`ratios_by_rep`]: one figure over another of the same repetition,
//!   pair by pair, before any median is taken.
//! - [`linear_fit`]: least squares, for paper 00's size sweep.
//!
//! NaN means "no figure" (a run that did not report one) and is left out
//! of medians and spreads; infinities are figures ("never") and count.
//! With no values left, a median is NaN and `med_range` prints "–".

/// The values sorted ascending (NaN, if any, last).
pub fn sorted(v: &[f64]) -> Vec<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

/// The figures among `v`, sorted: NaN left out.
fn figures(v: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    v.sort_by(f64::total_cmp);
    v
}

/// The median of `v`: the middle value, or the mean of the two middle
/// values of an even count; NaN when `v` holds no figure.
pub fn median(v: &[f64]) -> f64 {
    let v = figures(v);
    let m = v.len() / 2;
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[m],
        _ => (v[m - 1] + v[m]) / 2.0,
    }
}

/// The smallest and largest figure of `v`; `None` when it holds none.
pub fn min_max(v: &[f64]) -> Option<(f64, f64)> {
    let v = figures(v);
    Some((*v.first()?, *v.last()?))
}

/// `median (min–max)` with `digits` decimals; a single figure alone; "–"
/// when there is none.
pub fn med_range(v: &[f64], digits: usize) -> String {
    let v = figures(v);
    match v.as_slice() {
        [] => "–".into(),
        [x] => format!("{x:.digits$}"),
        [lo, .., hi] => format!("{:.digits$} ({lo:.digits$}–{hi:.digits$})", median(&v)),
    }
}

/// The nearest rank (1-based) of percentile `q` (0–100] among `n` values:
/// ⌈q/100 · n⌉, at least 1; `None` when `n` is 0.
pub fn rank(n: usize, q: f64) -> Option<usize> {
    (n > 0).then(|| ((q / 100.0 * n as f64).ceil() as usize).clamp(1, n))
}

/// Percentile `q` (0–100] of the ascending `sorted` by nearest rank; NaN
/// when it is empty.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    rank(sorted.len(), q).map_or(f64::NAN, |r| sorted[r - 1])
}

/// Ratios pair by pair where the i-th value of each is repetition i:
/// `a[i] / b[i]`, as far as both go.
pub fn ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x / y).collect()
}

/// Ratios pair by pair: each of `a`'s (repetition, value) over `b`'s value
/// of the same repetition; a repetition `b` lacks gives no ratio.
pub fn ratios_by_rep(a: impl IntoIterator<Item = (usize, f64)>, b: &[(usize, f64)]) -> Vec<f64> {
    a.into_iter().filter_map(|(rep, x)| Some(x / b.iter().find(|(r, _)| *r == rep)?.1)).collect()
}

/// Least squares `y = a + b x`; returns (a, b, R²).
pub fn linear_fit(xs: &[f64], ys: &[f64]) -> (f64, f64, f64) {
    let n = xs.len() as f64;
    let mx = xs.iter().sum::<f64>() / n;
    let my = ys.iter().sum::<f64>() / n;
    let sxy: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let sxx: f64 = xs.iter().map(|x| (x - mx).powi(2)).sum();
    let b = sxy / sxx;
    let a = my - b * mx;
    let ss_res: f64 = xs.iter().zip(ys).map(|(x, y)| (y - a - b * x).powi(2)).sum();
    let ss_tot: f64 = ys.iter().map(|y| (y - my).powi(2)).sum();
    (a, b, 1.0 - ss_res / ss_tot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_no_values() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[7.0]), 7.0);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn nan_is_no_figure_and_infinity_is_one() {
        assert_eq!(median(&[f64::NAN, 1.0, 5.0, 3.0]), 3.0);
        assert!(median(&[f64::NAN]).is_nan());
        assert_eq!(median(&[1.0, f64::INFINITY, f64::INFINITY]), f64::INFINITY);
        assert_eq!(min_max(&[2.0, f64::NAN, -1.0]), Some((-1.0, 2.0)));
        assert_eq!(min_max(&[f64::NAN]), None);
    }

    #[test]
    fn med_range_prints_median_and_spread() {
        assert_eq!(med_range(&[3.0, 1.0, 2.0], 1), "2.0 (1.0–3.0)");
        assert_eq!(med_range(&[10.0, 20.0], 0), "15 (10–20)");
        assert_eq!(med_range(&[1.234], 2), "1.23");
        assert_eq!(med_range(&[1.234, f64::NAN], 2), "1.23");
        assert_eq!(med_range(&[], 2), "–");
        assert_eq!(med_range(&[f64::NAN], 2), "–");
    }

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!((percentile(&v, 10.0), percentile(&v, 90.0), percentile(&v, 100.0)), (2.0, 18.0, 20.0));
        // Odd and even counts: rank ⌈q/100 · n⌉, no interpolation.
        assert_eq!(percentile(&[1.0, 2.0, 3.0], 50.0), 2.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 50.0), 2.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 90.0), 4.0);
        assert!(percentile(&[], 50.0).is_nan());
        assert_eq!((rank(20, 10.0), rank(20, 90.0), rank(0, 50.0)), (Some(2), Some(18), None));
        assert_eq!(sorted(&[3.0, f64::NAN, 1.0])[..2], [1.0, 3.0]);
    }

    #[test]
    fn ratios_pair_values_of_the_same_repetition() {
        let a = [(0, 10.0), (1, 9.0), (2, 8.0)];
        let b = [(2, 4.0), (0, 5.0)];
        assert_eq!(ratios_by_rep(a, &b), [2.0, 2.0]);
        assert!(ratios_by_rep(a, &[]).is_empty());
        assert_eq!(ratios(&[6.0, 4.0, 1.0], &[3.0, 8.0]), [2.0, 0.5]);
    }

    #[test]
    fn fit_of_a_line_is_exact() {
        let (a, b, r2) = linear_fit(&[1.0, 2.0, 4.0], &[3.0, 5.0, 9.0]);
        assert!((a - 1.0).abs() < 1e-9 && (b - 2.0).abs() < 1e-9 && (r2 - 1.0).abs() < 1e-9);
    }
}
