//! The page's charts, drawn as inline SVG from the run's numbers: no script, no fonts or
//! styles of their own beyond the page's (classes), every axis labelled.

use std::fmt::Write as _;

use super::esc;

/// Width of every chart's drawing, in SVG units (scaled to the column by CSS).
const WIDTH: f64 = 720.0;
/// Left column for the row labels.
const LABEL_W: f64 = 128.0;
/// Right margin, room for the value labels.
const RIGHT: f64 = 120.0;
const ROW_H: f64 = 24.0;
const TOP: f64 = 8.0;
/// Room under the plot for the ticks and the axis label.
const AXIS_H: f64 = 44.0;

/// One bar: its label, value, CSS class (the verdict's colour) and the text after it.
pub(crate) struct Bar {
    pub label: String,
    pub value: f64,
    pub class: String,
    pub note: String,
}

/// One row of the latency chart.
pub(crate) struct Spread {
    pub label: String,
    pub class: String,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

fn open(s: &mut String, id: &str, title: &str, height: f64) {
    let _ = write!(
        s,
        r#"<svg class="chart" id="{id}" viewBox="0 0 {WIDTH} {height}" role="img" aria-labelledby="{id}-title"><title id="{id}-title">{}</title>"#,
        esc(title)
    );
}

/// A step of 1, 2 or 5 times a power of ten that cuts `0..max` in about `n` parts.
pub(crate) fn nice_step(max: f64, n: usize) -> f64 {
    let raw = if max > 0.0 { max } else { 1.0 } / n.max(1) as f64;
    let magnitude = 10_f64.powf(raw.log10().floor());
    let f = raw / magnitude;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

/// A number for a chart or a table: thousands grouped with a thin space, decimals
/// only for small values.
pub(crate) fn num(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    if v.abs() < 10.0 && v.fract() != 0.0 {
        return format!("{v:.1}");
    }
    let whole = format!("{:.0}", v.abs());
    let mut grouped = String::new();
    for (i, c) in whole.chars().enumerate() {
        if i > 0 && (whole.len() - i) % 3 == 0 {
            grouped.push('\u{2009}');
        }
        grouped.push(c);
    }
    if v < 0.0 {
        format!("−{grouped}")
    } else {
        grouped
    }
}

/// Horizontal bars on a linear axis from 0, labelled `axis`.
pub(crate) fn bars(id: &str, title: &str, axis: &str, rows: &[Bar]) -> String {
    let plot_w = WIDTH - LABEL_W - RIGHT;
    let plot_h = rows.len().max(1) as f64 * ROW_H;
    let height = TOP + plot_h + AXIS_H;
    let max = rows.iter().map(|r| r.value).fold(0.0, f64::max);
    let step = nice_step(max, 5);
    let top_tick = (max / step).ceil().max(1.0) * step;
    let at = |v: f64| LABEL_W + v / top_tick * plot_w;
    let mut s = String::new();
    open(&mut s, id, title, height);
    // Grid and ticks.
    let mut tick = 0.0;
    while tick <= top_tick + step / 2.0 {
        let _ = write!(
            s,
            r#"<line class="grid" x1="{0:.1}" x2="{0:.1}" y1="{TOP}" y2="{1:.1}"/><text class="tick" x="{0:.1}" y="{2:.1}" text-anchor="middle">{3}</text>"#,
            at(tick),
            TOP + plot_h,
            TOP + plot_h + 16.0,
            num(tick)
        );
        tick += step;
    }
    let _ = write!(
        s,
        r#"<text class="axis-label" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        LABEL_W + plot_w / 2.0,
        height - 6.0,
        esc(axis)
    );
    for (i, r) in rows.iter().enumerate() {
        let y = TOP + i as f64 * ROW_H;
        let width = (at(r.value) - LABEL_W).max(if r.value > 0.0 { 1.5 } else { 0.0 });
        let _ = write!(
            s,
            r#"<text class="row-label" x="{:.1}" y="{:.1}" text-anchor="end">{}</text><rect class="bar {}" x="{LABEL_W}" y="{:.1}" width="{width:.1}" height="{:.1}"><title>{}: {}</title></rect><text class="value" x="{:.1}" y="{:.1}">{}</text>"#,
            LABEL_W - 8.0,
            y + ROW_H / 2.0 + 4.0,
            esc(&r.label),
            esc(&r.class),
            y + 5.0,
            ROW_H - 10.0,
            esc(&r.label),
            esc(&r.note),
            LABEL_W + width + 6.0,
            y + ROW_H / 2.0 + 4.0,
            esc(&r.note)
        );
    }
    let _ = write!(
        s,
        r#"<line class="axis" x1="{LABEL_W}" x2="{LABEL_W}" y1="{TOP}" y2="{:.1}"/></svg>"#,
        TOP + plot_h
    );
    s
}

/// Latency percentiles per row on a log axis (ms): a line from the median to the
/// slowest request, with marks at p50, p90, p99 and the maximum.
pub(crate) fn spreads(id: &str, title: &str, rows: &[Spread]) -> String {
    let plot_w = WIDTH - LABEL_W - RIGHT;
    let plot_h = rows.len().max(1) as f64 * ROW_H;
    let legend_h = 22.0;
    let height = TOP + legend_h + plot_h + AXIS_H;
    let top = TOP + legend_h;
    let positive = |v: f64| v.max(0.01);
    let lo = rows
        .iter()
        .map(|r| positive(r.p50))
        .fold(f64::INFINITY, f64::min);
    let hi = rows.iter().map(|r| positive(r.max)).fold(0.0, f64::max);
    let (lo, hi) = if lo.is_finite() && hi > 0.0 {
        (lo, hi)
    } else {
        (1.0, 10.0)
    };
    let first = lo.log10().floor() as i32;
    let last = (hi.log10().ceil() as i32).max(first + 1);
    let at = |v: f64| {
        LABEL_W + (positive(v).log10() - f64::from(first)) / f64::from(last - first) * plot_w
    };
    let mut s = String::new();
    open(&mut s, id, title, height);
    legend(&mut s);
    for decade in first..=last {
        let v = 10_f64.powi(decade);
        let _ = write!(
            s,
            r#"<line class="grid" x1="{0:.1}" x2="{0:.1}" y1="{top}" y2="{1:.1}"/><text class="tick" x="{0:.1}" y="{2:.1}" text-anchor="middle">{3}</text>"#,
            at(v),
            top + plot_h,
            top + plot_h + 16.0,
            if decade < 0 { format!("{v}") } else { num(v) }
        );
        if decade < last {
            for m in [2.0, 5.0] {
                let _ = write!(
                    s,
                    r#"<line class="grid minor" x1="{0:.1}" x2="{0:.1}" y1="{top}" y2="{1:.1}"/>"#,
                    at(v * m),
                    top + plot_h
                );
            }
        }
    }
    let _ = write!(
        s,
        r#"<text class="axis-label" x="{:.1}" y="{:.1}" text-anchor="middle">latency of one request, ms (log scale)</text>"#,
        LABEL_W + plot_w / 2.0,
        height - 6.0
    );
    for (i, r) in rows.iter().enumerate() {
        let y = top + i as f64 * ROW_H + ROW_H / 2.0;
        let _ = write!(
            s,
            r#"<g class="spread {}"><title>{}: median {} ms, p90 {} ms, p99 {} ms, slowest {} ms</title><text class="row-label" x="{:.1}" y="{:.1}" text-anchor="end">{}</text><line class="range" x1="{:.1}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}"/>"#,
            esc(&r.class),
            esc(&r.label),
            num(r.p50),
            num(r.p90),
            num(r.p99),
            num(r.max),
            LABEL_W - 8.0,
            y + 4.0,
            esc(&r.label),
            at(r.p50),
            at(r.max),
        );
        for (mark, v) in [
            ("p50", r.p50),
            ("p90", r.p90),
            ("p99", r.p99),
            ("max", r.max),
        ] {
            let _ = write!(
                s,
                r##"<use href="#mark-{mark}" x="{:.1}" y="{y:.1}"/>"##,
                at(v)
            );
        }
        let _ = write!(
            s,
            r#"<text class="value" x="{:.1}" y="{:.1}">p50 {} · p99 {} ms</text></g>"#,
            at(r.max) + 10.0,
            y + 4.0,
            num(r.p50),
            num(r.p99)
        );
    }
    let _ = write!(
        s,
        r#"<line class="axis" x1="{LABEL_W}" x2="{LABEL_W}" y1="{top}" y2="{:.1}"/></svg>"#,
        top + plot_h
    );
    s
}

/// The latency chart's legend and the marks it uses.
fn legend(s: &mut String) {
    let mut lx = LABEL_W;
    for (mark, name) in [
        ("p50", "median"),
        ("p90", "p90"),
        ("p99", "p99"),
        ("max", "slowest"),
    ] {
        let _ = write!(
            s,
            r##"<g class="legend"><use href="#mark-{mark}" x="{:.1}" y="{:.1}"/><text x="{:.1}" y="{:.1}">{name}</text></g>"##,
            lx + 5.0,
            TOP + 8.0,
            lx + 14.0,
            TOP + 12.0
        );
        lx += 90.0;
    }
    let _ = write!(
        s,
        r#"<defs><circle id="mark-p50" r="4.5" class="mark"/><rect id="mark-p90" x="-1.5" y="-6" width="3" height="12" class="mark"/><path id="mark-p99" d="M0,-6 L5,0 L0,6 L-5,0 Z" class="mark"/><path id="mark-max" d="M-4,-4 L4,4 M-4,4 L4,-4" class="mark-x"/></defs>"#
    );
}

/// The watchdog lock's TTL sampled during each stall: one line per stall, the time
/// into the stall across, the TTL up, with the lease as a dashed line.
pub(crate) fn ttl_trace(id: &str, stalls: &[Vec<i64>], stall_ms: f64, lease_ms: f64) -> String {
    let (left, right, top, plot_h) = (64.0, 24.0, 12.0, 200.0);
    let plot_w = WIDTH - left - right;
    let height = top + plot_h + AXIS_H;
    let max_ttl = stalls
        .iter()
        .flatten()
        .map(|&t| t as f64)
        .fold(lease_ms, f64::max);
    let y_step = nice_step(max_ttl, 4);
    let y_top = (max_ttl / y_step).ceil().max(1.0) * y_step;
    let x_step = nice_step(stall_ms.max(1.0), 6);
    let x_top = (stall_ms.max(1.0) / x_step).ceil() * x_step;
    let at = |ms: f64| left + ms / x_top * plot_w;
    let up = |ttl: f64| top + plot_h - ttl / y_top * plot_h;
    let mut s = String::new();
    open(
        &mut s,
        id,
        "The watchdog lock's TTL during each stall",
        height,
    );
    let mut tick = 0.0;
    while tick <= y_top + y_step / 2.0 {
        let _ = write!(
            s,
            r#"<line class="grid" x1="{left}" x2="{0:.1}" y1="{1:.1}" y2="{1:.1}"/><text class="tick" x="{2:.1}" y="{3:.1}" text-anchor="end">{4}</text>"#,
            left + plot_w,
            up(tick),
            left - 6.0,
            up(tick) + 4.0,
            num(tick)
        );
        tick += y_step;
    }
    let mut tick = 0.0;
    while tick <= x_top + x_step / 2.0 {
        let _ = write!(
            s,
            r#"<text class="tick" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            at(tick),
            top + plot_h + 16.0,
            num(tick)
        );
        tick += x_step;
    }
    let _ = write!(
        s,
        r#"<line class="lease" x1="{left}" x2="{0:.1}" y1="{1:.1}" y2="{1:.1}"/><text class="tick" x="{0:.1}" y="{2:.1}" text-anchor="end">lease {3} ms</text>"#,
        left + plot_w,
        up(lease_ms),
        up(lease_ms) - 5.0,
        num(lease_ms)
    );
    let _ = write!(
        s,
        r#"<text class="axis-label" x="{:.1}" y="{:.1}" text-anchor="middle">time into the stall, ms (samples spread evenly over it)</text><text class="axis-label" transform="translate(14 {:.1}) rotate(-90)" text-anchor="middle">TTL left, ms</text>"#,
        left + plot_w / 2.0,
        height - 6.0,
        top + plot_h / 2.0
    );
    for (i, samples) in stalls.iter().enumerate() {
        let n = samples.len();
        if n == 0 {
            continue;
        }
        let points: Vec<String> = samples
            .iter()
            .enumerate()
            .map(|(j, &ttl)| {
                let when = if n > 1 {
                    stall_ms * j as f64 / (n - 1) as f64
                } else {
                    0.0
                };
                format!("{:.1},{:.1}", at(when), up(ttl as f64))
            })
            .collect();
        let _ = write!(
            s,
            r#"<polyline class="trace trace-{}" points="{}"><title>stall {}: {}</title></polyline>"#,
            i % 4,
            points.join(" "),
            i + 1,
            samples
                .iter()
                .map(|t| format!("{t} ms"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let _ = write!(
        s,
        r#"<line class="axis" x1="{left}" x2="{left}" y1="{top}" y2="{0:.1}"/><line class="axis" x1="{left}" x2="{1:.1}" y1="{0:.1}" y2="{0:.1}"/></svg>"#,
        top + plot_h,
        left + plot_w
    );
    s
}

#[cfg(test)]
mod tests {
    use super::{nice_step, num};

    #[test]
    fn steps_are_one_two_or_five_times_a_power_of_ten() {
        assert!((nice_step(1000.0, 5) - 200.0).abs() < 1e-9);
        assert!((nice_step(7.0, 5) - 2.0).abs() < 1e-9);
        assert!((nice_step(0.0, 5) - 0.2).abs() < 1e-9);
        assert!((nice_step(2300.0, 6) - 500.0).abs() < 1e-9);
    }

    #[test]
    fn numbers_are_grouped() {
        assert_eq!(num(1234.4), "1\u{2009}234");
        assert_eq!(num(123.0), "123");
        assert_eq!(num(2.26), "2.3");
        assert_eq!(num(-1500.0), "−1\u{2009}500");
        assert_eq!(num(f64::NAN), "–");
    }
}
