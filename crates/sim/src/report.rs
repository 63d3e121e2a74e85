//! Pictures and numbers: `--report DIR` and `--compare`.
//!
//! [`write_report`] writes four SVG plots and an `index.html` that shows
//! them beside every number of the JSON summary:
//! - `address_time.svg`: disk address against time, reads and writes (a
//!   decimated sample, as in the papers' figures);
//! - `seek_profile.svg`: share of media accesses by seek distance
//!   (powers-of-two bins of cylinders);
//! - `response_cdf.svg`: the response-time CDF;
//! - `response_hist.svg`: the response-time histogram (four bins per
//!   power of two of milliseconds).
//!
//! [`compare_table`] reads several `--json` outputs and prints a
//! side-by-side table of every number in them.

use crate::engine::{summary_json, SimOutcome};
use crate::hist::Histogram;
use anyhow::{bail, Context};
use plotters::prelude::*;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const SIZE: (u32, u32) = (900, 520);
const FONT: (&str, u32) = ("sans-serif", 16);

type PlotResult = Result<(), Box<dyn std::error::Error>>;
type PlotFn = fn(&Path, &SimOutcome) -> PlotResult;

/// Writes the plots and `index.html` into `dir` (created if missing).
/// Returns the path of the HTML page.
pub fn write_report(dir: &Path, outcome: &SimOutcome) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("{}: cannot create report directory", dir.display()))?;
    let plots: [(&str, &str, PlotFn); 4] = [
        ("address_time.svg", "Disk address against time", plot_address_time),
        ("seek_profile.svg", "Seek-distance profile", plot_seek_profile),
        ("response_cdf.svg", "Response-time CDF", plot_response_cdf),
        ("response_hist.svg", "Response-time histogram", plot_response_hist),
    ];
    for (file, _, plot) in &plots {
        let path = dir.join(file);
        plot(&path, outcome).map_err(|e| anyhow::anyhow!("{}: cannot draw: {e}", path.display()))?;
    }
    let html = report_html(outcome, &plots.map(|(f, t, _)| (f, t)));
    let page = dir.join("index.html");
    std::fs::write(&page, html).with_context(|| format!("{}: cannot write", page.display()))?;
    Ok(page)
}

fn plot_address_time(path: &Path, o: &SimOutcome) -> PlotResult {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    const GIB: f64 = (1u64 << 30) as f64;
    let pts = &o.addresses;
    let t_max = pts.iter().map(|p| p.time_ns).max().unwrap_or(1).max(1) as f64 / 1e9;
    let a_max = (o.summary.disk.capacity_bytes as f64 / GIB).max(1e-3);
    let mut chart = ChartBuilder::on(&root)
        .caption("Disk address against time (sampled)", FONT)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..t_max * 1.01, 0f64..a_max)?;
    chart.configure_mesh().x_desc("simulated time (s)").y_desc("disk address (GiB)").draw()?;
    for (write, color, label) in [(false, BLUE, "reads"), (true, RED, "writes")] {
        let series = pts
            .iter()
            .filter(|p| p.write == write)
            .map(|p| Circle::new((p.time_ns as f64 / 1e9, p.offset_bytes as f64 / GIB), 1, color.filled()));
        chart.draw_series(series)?.label(label).legend(move |(x, y)| Circle::new((x, y), 4, color.filled()));
    }
    chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw()?;
    root.present()?;
    Ok(())
}

/// Powers of two, short: 4096 -> "4k", 3 << 20 -> "3M".
fn compact(v: u64) -> String {
    match v {
        v if v >= 1 << 20 => format!("{}M", v >> 20),
        v if v >= 1 << 10 => format!("{}k", v >> 10),
        v => v.to_string(),
    }
}

/// Seek distances in bins `0`, `1`, `2-3`, `4-7`, ... labelled by their
/// lowest value: (label, share %).
fn seek_bins(h: &Histogram) -> Vec<(String, f64)> {
    let mut counts = [0u64; 65];
    for (low, _, n) in h.buckets() {
        let bin = if low == 0 { 0 } else { 64 - low.leading_zeros() as usize };
        counts[bin] += n;
    }
    let last = counts.iter().rposition(|n| *n > 0).unwrap_or(0);
    let total = h.count().max(1) as f64;
    (0..=last)
        .map(|bin| {
            let label = match bin {
                0 => "0".to_string(),
                b => compact(1u64 << (b - 1)),
            };
            (label, counts[bin] as f64 * 100.0 / total)
        })
        .collect()
}

fn plot_seek_profile(path: &Path, o: &SimOutcome) -> PlotResult {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let bins = seek_bins(&o.seek_cyl);
    let y_max = bins.iter().map(|b| b.1).fold(1.0, f64::max) * 1.1;
    let n = bins.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption("Seek-distance profile (media accesses)", FONT)
        .margin(12)
        .x_label_area_size(50)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.6f64..n as f64 - 0.4, 0f64..y_max)?;
    let labels: Vec<String> = bins.iter().map(|b| b.0.clone()).collect();
    chart
        .configure_mesh()
        .x_desc("seek distance (cylinders; a bar counts from its label to just under twice it)")
        .y_desc("share of accesses (%)")
        .x_labels(n + 1)
        .x_label_formatter(&|x| {
            let i = x.round();
            let on_bar = (x - i).abs() < 0.01 && i >= 0.0;
            if on_bar {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .draw()?;
    chart.draw_series(bins.iter().enumerate().map(|(i, (_, share))| {
        Rectangle::new([(i as f64 - 0.4, 0.0), (i as f64 + 0.4, *share)], BLUE.mix(0.7).filled())
    }))?;
    root.present()?;
    Ok(())
}

/// (upper edge in ms, cumulative fraction) for each non-empty bucket.
fn cdf_points(h: &Histogram) -> Vec<(f64, f64)> {
    let total = h.count().max(1) as f64;
    let mut seen = 0u64;
    h.buckets()
        .map(|(low, width, n)| {
            seen += n;
            (((low + width) as f64 / 1e6).max(1e-6), seen as f64 / total)
        })
        .collect()
}

fn ms_range(h: &Histogram) -> std::ops::Range<f64> {
    let low = h.buckets().next().map_or(1e-3, |(l, _, _)| (l as f64 / 1e6).max(1e-3));
    let high = (h.max() as f64 / 1e6).max(low * 10.0);
    low * 0.8..high * 1.25
}

fn plot_response_cdf(path: &Path, o: &SimOutcome) -> PlotResult {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("Response time CDF", FONT)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(ms_range(&o.response_ns).log_scale(), 0f64..1.0)?;
    chart.configure_mesh().x_desc("response time (ms, log)").y_desc("fraction of requests").draw()?;
    let mut pts = vec![(ms_range(&o.response_ns).start, 0.0)];
    pts.extend(cdf_points(&o.response_ns));
    chart.draw_series(LineSeries::new(pts, BLUE.stroke_width(2)))?;
    root.present()?;
    Ok(())
}

/// Response-time bins of four per power of two of ms: (low ms, high ms, share %).
fn response_bins(h: &Histogram) -> Vec<(f64, f64, f64)> {
    let mut bins: Vec<(f64, f64, f64)> = Vec::new();
    let total = h.count().max(1) as f64;
    for (low, width, n) in h.buckets() {
        let mid_ms = ((low + width / 2) as f64 / 1e6).max(1e-6);
        let k = (mid_ms.log2() * 4.0).floor();
        let (lo, hi) = (2f64.powf(k / 4.0), 2f64.powf((k + 1.0) / 4.0));
        match bins.last_mut() {
            Some(b) if b.0 == lo => b.2 += n as f64 * 100.0 / total,
            _ => bins.push((lo, hi, n as f64 * 100.0 / total)),
        }
    }
    bins
}

fn plot_response_hist(path: &Path, o: &SimOutcome) -> PlotResult {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let bins = response_bins(&o.response_ns);
    let y_max = bins.iter().map(|b| b.2).fold(1.0, f64::max) * 1.1;
    let x = bins.first().map_or(1e-3, |b| b.0) * 0.8..bins.last().map_or(1.0, |b| b.1) * 1.25;
    let mut chart = ChartBuilder::on(&root)
        .caption("Response time histogram", FONT)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x.log_scale(), 0f64..y_max)?;
    chart.configure_mesh().x_desc("response time (ms, log)").y_desc("share of requests (%)").draw()?;
    chart.draw_series(
        bins.iter()
            .map(|(lo, hi, share)| Rectangle::new([(*lo, 0.0), (*hi, *share)], BLUE.mix(0.7).filled())),
    )?;
    root.present()?;
    Ok(())
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn report_html(o: &SimOutcome, plots: &[(&str, &str)]) -> String {
    let s = &o.summary;
    let mut h = String::new();
    let title = format!("layoutd sim: {}", s.trace.path);
    let _ = write!(
        h,
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title>\n<style>body{{font-family:sans-serif;margin:2em}}\
         table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 8px;text-align:left}}\
         td.n{{text-align:right;font-variant-numeric:tabular-nums}}img{{max-width:100%}}</style></head><body>\n<h1>{t}</h1>\n",
        t = html_escape(&title)
    );
    let _ = writeln!(
        h,
        "<p>{} requests, {} mode, disk <b>{}</b>, stack <b>{}</b>, seed {}: {:.3} simulated seconds, disk busy {:.3} s, \
         mean response {:.3} ms (p99 {:.3} ms).</p>",
        s.requests,
        s.trace.mode,
        html_escape(&s.disk.model),
        html_escape(&s.stack.config),
        s.seed,
        s.simulated_seconds,
        s.disk_busy_seconds,
        s.response_ms.mean,
        s.response_ms.p99
    );
    for (file, caption) in plots {
        let _ = writeln!(h, "<h2>{caption}</h2>\n<img src=\"{file}\" alt=\"{caption}\">");
    }
    h.push_str("<h2>All numbers</h2>\n<table><tr><th>metric</th><th>value</th></tr>\n");
    let json: serde_json::Value = serde_json::from_str(&summary_json(s)).expect("own JSON parses");
    for (key, value) in flatten(&json) {
        let class = if value.parse::<f64>().is_ok() { " class=\"n\"" } else { "" };
        let _ = writeln!(h, "<tr><td>{}</td><td{class}>{}</td></tr>", html_escape(&key), html_escape(&value));
    }
    h.push_str("</table>\n</body></html>\n");
    h
}

/// Every leaf of `v` as (dotted key, printed value), arrays indexed.
pub fn flatten(v: &serde_json::Value) -> Vec<(String, String)> {
    fn walk(prefix: &str, v: &serde_json::Value, out: &mut Vec<(String, String)>) {
        let key = |k: &str| if prefix.is_empty() { k.to_string() } else { format!("{prefix}.{k}") };
        match v {
            serde_json::Value::Object(m) => m.iter().for_each(|(k, v)| walk(&key(k), v, out)),
            serde_json::Value::Array(a) => {
                a.iter().enumerate().for_each(|(i, v)| walk(&key(&i.to_string()), v, out))
            }
            serde_json::Value::String(s) => out.push((prefix.to_string(), s.clone())),
            other => out.push((prefix.to_string(), other.to_string())),
        }
    }
    let mut out = Vec::new();
    walk("", v, &mut out);
    out
}

/// The metrics printed first by [`compare_table`], in this order.
const HEADLINE: &[&str] = &[
    "trace.path",
    "trace.mode",
    "disk.model",
    "stack.config",
    "requests",
    "simulated_seconds",
    "disk_busy_seconds",
    "disk_utilization",
    "response_ms.mean",
    "response_ms.p50",
    "response_ms.p95",
    "response_ms.p99",
    "response_ms.max",
];

/// A side-by-side table of several `--json` files: one row per metric
/// (headline metrics first, then every other in key order), one column per file.
pub fn compare_table(paths: &[PathBuf]) -> anyhow::Result<String> {
    if paths.len() < 2 {
        bail!("--compare needs at least two JSON files (written by `layoutd sim --json`)");
    }
    let mut columns = Vec::new();
    for p in paths {
        let text = std::fs::read_to_string(p).with_context(|| format!("{}: cannot read", p.display()))?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{}: not JSON written by `layoutd sim --json`", p.display()))?;
        columns.push(flatten(&v).into_iter().collect::<std::collections::BTreeMap<_, _>>());
    }
    let mut keys: Vec<String> = HEADLINE.iter().map(|k| k.to_string()).collect();
    let rest: std::collections::BTreeSet<&String> = columns.iter().flat_map(|c| c.keys()).collect();
    keys.extend(rest.into_iter().filter(|k| !HEADLINE.contains(&k.as_str())).cloned());
    let header: Vec<String> =
        paths.iter().map(|p| p.file_name().unwrap_or_default().to_string_lossy().into_owned()).collect();
    let mut rows = vec![std::iter::once("metric".to_string()).chain(header).collect::<Vec<_>>()];
    for k in keys {
        let cells: Vec<String> =
            columns.iter().map(|c| c.get(&k).cloned().unwrap_or_else(|| "-".into())).collect();
        if cells.iter().all(|c| c == "-") {
            continue;
        }
        rows.push(std::iter::once(k).chain(cells).collect());
    }
    Ok(render_rows(&rows))
}

fn render_rows(rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> =
        (0..rows[0].len()).map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for (n, row) in rows.iter().enumerate() {
        for (i, cell) in row.iter().enumerate() {
            if i == 0 {
                let _ = write!(out, "{cell:<w$}", w = widths[i]);
            } else {
                let _ = write!(out, "  {cell:>w$}", w = widths[i]);
            }
        }
        out.push('\n');
        if n == 0 {
            out.push_str(&"-".repeat(widths.iter().sum::<usize>() + 2 * (widths.len() - 1)));
            out.push('\n');
        }
    }
    out
}
