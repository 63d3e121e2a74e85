//! Pictures and numbers: `--report DIR`, `--compare` and `--compare --report DIR`.
//!
//! [`write_report`] writes four SVG plots and an `index.html` that shows
//! them beside every number of the JSON summary:
//! - `address_time.svg`: disk address against time, reads and writes (a
//!   decimated sample, at most one point per pixel and [`ADDRESS_POINTS_MAX`]
//!   in all, so the file stays small for any trace; legend above the plot);
//! - `seek_profile.svg`: share of media accesses by seek distance
//!   (powers-of-two bins of cylinders);
//! - `response_cdf.svg`: response-time CDFs of reads and of writes;
//! - `response_hist.svg`: response-time histogram of reads and writes side
//!   by side, in 1-2-5 bins of milliseconds with round labels, and
//!   responses of exactly 0 (acknowledged from RAM) as their own bar;
//! - `phases.svg`: mean read and write response by phase of the trace
//!   ([`crate::phases`]).
//!
//! Every plot's caption names the trace, the stack and the disk.
//!
//! [`compare_table`] reads several `--json` outputs and prints a
//! side-by-side table with ratio columns against the first run;
//! [`write_compare_report`] draws the runs over each other (read and write
//! CDFs, histograms, mean response by phase of the trace, disk busy time
//! before, during and after the trace) on one HTML page with the same
//! table.

use crate::engine::{summary_json, ResponseBuckets, SimOutcome, SimSummary};
use crate::hist::Histogram;
use crate::phases::PhaseInfo;
use anyhow::{bail, Context};
use plotters::prelude::*;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const SIZE: (u32, u32) = (900, 520);
const FONT: (&str, u32) = ("sans-serif", 16);
/// Most points drawn in `address_time.svg` (about 60 bytes of SVG each).
pub const ADDRESS_POINTS_MAX: usize = 12_000;
/// Series colours, one per run (or reads, writes).
const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

type PlotResult = Result<(), Box<dyn std::error::Error>>;

/// A plot to draw: file name, heading, and how to draw it to a path.
type Plot<'a> = (&'static str, &'static str, Box<dyn Fn(&Path) -> PlotResult + 'a>);

/// One series of response times: a label and its buckets `[low ns, width ns, count]`.
type Series<'a> = (String, &'a [[u64; 3]]);

/// "trace · stack · disk" of a run, for captions.
fn run_title(s: &SimSummary) -> String {
    let trace =
        Path::new(&s.trace.path).file_name().map_or(s.trace.path.clone(), |f| f.to_string_lossy().into());
    let stack =
        Path::new(&s.stack.config).file_name().map_or(s.stack.config.clone(), |f| f.to_string_lossy().into());
    format!("{trace} · {stack} · {}", s.disk.model)
}

fn caption(what: &str, title: &str) -> String {
    format!("{what} — {title}")
}

/// Writes the plots and `index.html` into `dir` (created if missing).
/// Returns the path of the HTML page.
pub fn write_report(dir: &Path, outcome: &SimOutcome) -> anyhow::Result<PathBuf> {
    create_dir(dir)?;
    let s = &outcome.summary;
    let title = run_title(s);
    let rb = &s.response_buckets;
    let rw: Vec<Series> = vec![("reads".into(), &rb.read), ("writes".into(), &rb.write)];
    let plots: Vec<Plot> = vec![
        (
            "address_time.svg",
            "Disk address against time",
            Box::new(|p| plot_address_time(p, outcome, &title)),
        ),
        (
            "seek_profile.svg",
            "Seek-distance profile",
            Box::new(|p| plot_seek_profile(p, &outcome.seek_cyl, &title)),
        ),
        (
            "response_cdf.svg",
            "Response-time CDF",
            Box::new(|p| plot_cdf(p, &caption("Response time CDF", &title), &rw)),
        ),
        (
            "response_hist.svg",
            "Response-time histogram",
            Box::new(|p| plot_hist(p, &caption("Response time histogram", &title), &rw)),
        ),
        (
            "phases.svg",
            "Mean response by phase of the trace",
            Box::new(|p| {
                let ph = &s.phases;
                let groups = ph
                    .list
                    .iter()
                    .map(|x| vec![x.read_response_ms_mean, x.write_response_ms_mean])
                    .collect::<Vec<_>>();
                plot_phase_bars(
                    p,
                    &caption("Mean response by phase", &title),
                    ph,
                    &["reads".into(), "writes".into()],
                    &groups,
                )
            }),
        ),
    ];
    draw_all(dir, &plots)?;
    let names: Vec<(&str, &str)> = plots.iter().map(|(f, t, _)| (*f, *t)).collect();
    let html = report_html(outcome, &names);
    write_page(dir, &html)
}

fn create_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("{}: cannot create report directory", dir.display()))
}

fn draw_all(dir: &Path, plots: &[Plot]) -> anyhow::Result<()> {
    for (file, _, plot) in plots {
        let path = dir.join(file);
        plot(&path).map_err(|e| anyhow::anyhow!("{}: cannot draw: {e}", path.display()))?;
    }
    Ok(())
}

fn write_page(dir: &Path, html: &str) -> anyhow::Result<PathBuf> {
    let page = dir.join("index.html");
    std::fs::write(&page, html).with_context(|| format!("{}: cannot write", page.display()))?;
    Ok(page)
}

/// The points drawn: at most one per pixel cell (of a `w` × `h` grid) and
/// kind, then every k-th so at most [`ADDRESS_POINTS_MAX`] remain. Keeps
/// the picture (a pixel drawn twice looks the same) at a bounded file size.
fn decimate(pts: &[crate::sample::Point], t_max: f64, a_max: f64, w: u32, h: u32) -> Vec<(f64, f64, bool)> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for p in pts {
        let (t, a) = (p.time_ns as f64 / 1e9, p.offset_bytes as f64 / GIB);
        let cell = ((t / t_max * f64::from(w)) as u32, (a / a_max * f64::from(h)) as u32, p.write);
        if seen.insert(cell) {
            out.push((t, a, p.write));
        }
    }
    let stride = out.len().div_ceil(ADDRESS_POINTS_MAX).max(1);
    out.into_iter().step_by(stride).collect()
}

const GIB: f64 = (1u64 << 30) as f64;

fn plot_address_time(path: &Path, o: &SimOutcome, title: &str) -> PlotResult {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let (legend, body) = root.split_vertically(56);
    legend.titled(&caption("Disk address against time (sampled)", title), FONT)?;
    let pts = &o.addresses;
    let t_max = pts.iter().map(|p| p.time_ns).max().unwrap_or(1).max(1) as f64 / 1e9;
    let a_max = (o.summary.disk.capacity_bytes as f64 / GIB).max(1e-3);
    let mut chart = ChartBuilder::on(&body)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..t_max * 1.01, 0f64..a_max)?;
    chart.configure_mesh().x_desc("simulated time (s)").y_desc("disk address (GiB)").draw()?;
    let drawn = decimate(pts, t_max * 1.01, a_max, 800, 440);
    for (i, (write, label)) in [(false, "reads"), (true, "writes")].into_iter().enumerate() {
        let color = COLORS[i];
        let series =
            drawn.iter().filter(|p| p.2 == write).map(|p| Circle::new((p.0, p.1), 1, color.filled()));
        chart.draw_series(series)?;
        // The legend sits above the plot, never over the data.
        let x = 80 + 120 * i as i32;
        legend.draw(&Circle::new((x, 42), 4, color.filled()))?;
        legend.draw(&Text::new(label, (x + 10, 34), ("sans-serif", 14)))?;
    }
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

/// Grouped bars on a categorical axis: `groups[i]` are the bars of
/// category `labels[i]`, one per series (colour and name in `names`).
fn plot_bars(
    path: &Path,
    caption: &str,
    x_desc: &str,
    y_desc: &str,
    labels: &[String],
    names: &[String],
    groups: &[Vec<f64>],
) -> PlotResult {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let y_max = groups.iter().flatten().copied().fold(1e-9, f64::max) * 1.15;
    let n = labels.len().max(1);
    let k = names.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, FONT)
        .margin(12)
        .x_label_area_size(50)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.6f64..n as f64 - 0.4, 0f64..y_max)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
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
    let width = 0.8 / k as f64;
    for (j, name) in names.iter().enumerate() {
        let color = COLORS[j % COLORS.len()];
        let bars = groups.iter().enumerate().map(move |(i, g)| {
            let x0 = i as f64 - 0.4 + width * j as f64;
            Rectangle::new(
                [(x0, 0.0), (x0 + width * 0.95, g.get(j).copied().unwrap_or(0.0))],
                color.mix(0.8).filled(),
            )
        });
        let drawn = chart.draw_series(bars)?;
        if k > 1 {
            drawn
                .label(name.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
        }
    }
    if k > 1 {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .border_style(BLACK)
            .background_style(WHITE.mix(0.9))
            .draw()?;
    }
    root.present()?;
    Ok(())
}

fn plot_seek_profile(path: &Path, h: &Histogram, title: &str) -> PlotResult {
    let bins = seek_bins(h);
    let labels: Vec<String> = bins.iter().map(|b| b.0.clone()).collect();
    let groups: Vec<Vec<f64>> = bins.iter().map(|b| vec![b.1]).collect();
    plot_bars(
        path,
        &caption("Seek-distance profile (media accesses)", title),
        "seek distance (cylinders; a bar counts from its label to just under twice it)",
        "share of accesses (%)",
        &labels,
        &["accesses".into()],
        &groups,
    )
}

/// Mean response per phase as grouped bars, labelled by each phase's start
/// on the trace's clock.
fn plot_phase_bars(
    path: &Path,
    caption: &str,
    phases: &PhaseInfo,
    names: &[String],
    groups: &[Vec<f64>],
) -> PlotResult {
    // Windows are 2^k ms wide: labels keep three significant figures or so.
    let decimals = match phases.width_s {
        w if w >= 10.0 => 0,
        w if w >= 1.0 => 1,
        _ => 3,
    };
    let labels: Vec<String> = phases.list.iter().map(|p| format!("{:.decimals$}", p.start_s)).collect();
    let x_desc = format!(
        "phase: start on the trace's clock (s after its first request), each {} s long",
        phases.width_s
    );
    plot_bars(path, caption, &x_desc, "mean response (ms)", &labels, names, groups)
}

/// Share (0..1) of responses of exactly 0 ns, and the CDF points above
/// 0 as (upper edge ms, cumulative fraction).
fn cdf_points(b: &[[u64; 3]]) -> (f64, Vec<(f64, f64)>) {
    let total = b.iter().map(|x| x[2]).sum::<u64>().max(1) as f64;
    let zero = b.iter().filter(|x| x[0] == 0).map(|x| x[2]).sum::<u64>() as f64 / total;
    let mut seen = 0u64;
    let pts = b
        .iter()
        .map(|x| {
            seen += x[2];
            ((x[0] + x[1]) as f64 / 1e6, seen as f64 / total)
        })
        .filter(|p| p.0 > 0.0)
        .collect();
    (zero, pts)
}

/// The CDFs of `series` on a log axis. A response of 0 cannot sit on a
/// log axis: each curve starts at its share of zero-time responses, and
/// the legend says how large that share is.
fn plot_cdf(path: &Path, caption: &str, series: &[Series]) -> PlotResult {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let nonzero = |b: &[[u64; 3]]| b.iter().filter(|x| x[0] > 0).map(|x| x.to_owned()).collect::<Vec<_>>();
    let lows = series.iter().filter_map(|(_, b)| nonzero(b).first().map(|x| x[0] as f64 / 1e6));
    let low = lows.fold(f64::INFINITY, f64::min);
    let low = if low.is_finite() { low.max(1e-3) } else { 1e-3 };
    let high = series
        .iter()
        .filter_map(|(_, b)| b.last().map(|x| (x[0] + x[1]) as f64 / 1e6))
        .fold(low * 10.0, f64::max);
    let x = low * 0.8..high * 1.25;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, FONT)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x.clone().log_scale(), 0f64..1.0)?;
    chart.configure_mesh().x_desc("response time (ms, log)").y_desc("fraction of requests").draw()?;
    for (j, (name, b)) in series.iter().enumerate() {
        if b.is_empty() {
            continue;
        }
        let color = COLORS[j % COLORS.len()];
        let (zero, pts) = cdf_points(b);
        let mut line = vec![(x.start, zero)];
        line.extend(pts);
        let label = match zero * 100.0 {
            0.0 => name.clone(),
            z if z < 0.1 => format!("{name} ({z:.3}% at 0 ms)"),
            z => format!("{name} ({z:.1}% at 0 ms)"),
        };
        chart
            .draw_series(LineSeries::new(line, color.stroke_width(2)))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.9))
        .draw()?;
    root.present()?;
    Ok(())
}

/// Histogram bins with round edges: a bar for exactly 0, one for (0, 1 µs),
/// then 1-2-5 steps of ms (0.001, 0.002, 0.005, 0.01, ...). Returns the
/// labels (each bar's lower edge in ms) and, per bin, each series' share
/// in percent; bins outside the data are left out.
fn hist_bins(series: &[Series]) -> (Vec<String>, Vec<Vec<f64>>) {
    // Lower edges in ns: 0 (exact zero), 1, then 1000 x {1, 2, 5} x 10^k.
    let mut edges = vec![0u64, 1];
    let mut decade = 1_000u64;
    while let Some(next) = decade.checked_mul(10) {
        edges.extend([decade, 2 * decade, 5 * decade]);
        decade = next;
    }
    let bin_of = |ns: u64| edges.iter().rposition(|e| *e <= ns).expect("edge 0");
    let mut shares = vec![vec![0.0; series.len()]; edges.len()];
    for (j, (_, b)) in series.iter().enumerate() {
        let total = b.iter().map(|x| x[2]).sum::<u64>().max(1) as f64;
        for x in b.iter() {
            let mid = if x[0] == 0 { 0 } else { x[0] + x[1] / 2 };
            shares[bin_of(mid)][j] += x[2] as f64 * 100.0 / total;
        }
    }
    let used = |v: &Vec<f64>| v.iter().any(|s| *s > 0.0);
    let first = shares.iter().position(used).unwrap_or(0);
    let last = shares.iter().rposition(used).unwrap_or(0);
    let label = |e: u64| match e {
        0 => "0".to_string(),
        1 => ">0".to_string(),
        e if e >= 1_000_000 => (e / 1_000_000).to_string(),
        e => format!("0.{e:06}").trim_end_matches('0').to_string(),
    };
    let labels = edges[first..=last].iter().map(|e| label(*e)).collect();
    (labels, shares[first..=last].to_vec())
}

fn plot_hist(path: &Path, caption: &str, series: &[Series]) -> PlotResult {
    let (labels, groups) = hist_bins(series);
    let names: Vec<String> = series.iter().map(|s| s.0.clone()).collect();
    plot_bars(
        path,
        caption,
        "response time (ms; a bar counts from its label to the next; \"0\": acknowledged at once)",
        "share of requests (%)",
        &labels,
        &names,
        &groups,
    )
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn page_head(title: &str) -> String {
    format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title>\n<style>body{{font-family:sans-serif;margin:2em}}\
         table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 8px;text-align:left}}\
         td.n{{text-align:right;font-variant-numeric:tabular-nums}}img{{max-width:100%}}</style></head><body>\n<h1>{t}</h1>\n",
        t = html_escape(title)
    )
}

fn report_html(o: &SimOutcome, plots: &[(&str, &str)]) -> String {
    let s = &o.summary;
    let mut h = page_head(&format!("layoutd sim: {}", s.trace.path));
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

/// Every leaf of `v` as (dotted key, printed value), arrays indexed; the
/// plot data (`response_buckets`, `phases`) is left out.
pub fn flatten(v: &serde_json::Value) -> Vec<(String, String)> {
    fn walk(prefix: &str, v: &serde_json::Value, out: &mut Vec<(String, String)>) {
        let key = |k: &str| if prefix.is_empty() { k.to_string() } else { format!("{prefix}.{k}") };
        match v {
            serde_json::Value::Object(m) => {
                let plot_data = |k: &str| k == "response_buckets" || (prefix.is_empty() && k == "phases");
                m.iter().filter(|(k, _)| !plot_data(k)).for_each(|(k, v)| walk(&key(k), v, out))
            }
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
    "read_response_ms.mean",
    "read_response_ms.p99",
    "write_response_ms.mean",
    "write_response_ms.p99",
];

/// One run read back from its `--json` file.
struct Run {
    path: PathBuf,
    /// Flattened numbers and strings.
    values: std::collections::BTreeMap<String, String>,
    title: String,
    buckets: ResponseBuckets,
    /// Disk busy seconds: bring-up, trace window, after the trace.
    busy: [f64; 3],
    /// Mean response by phase of the trace.
    phases: PhaseInfo,
}

fn load_runs(paths: &[PathBuf]) -> anyhow::Result<Vec<Run>> {
    if paths.len() < 2 {
        bail!("--compare needs at least two JSON files (written by `layoutd sim --json`)");
    }
    let mut runs = Vec::new();
    for p in paths {
        let text = std::fs::read_to_string(p).with_context(|| format!("{}: cannot read", p.display()))?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{}: not JSON written by `layoutd sim --json`", p.display()))?;
        let field = |k: &str| v.pointer(k).and_then(|x| x.as_str()).unwrap_or("?").to_string();
        let name = |k: &str| {
            let f = field(k);
            Path::new(&f).file_name().map_or(f.clone(), |n| n.to_string_lossy().into_owned())
        };
        let title = format!("{} · {} · {}", name("/trace/path"), name("/stack/config"), field("/disk/model"));
        let buckets: ResponseBuckets = v
            .get("response_buckets")
            .and_then(|b| serde_json::from_value(b.clone()).ok())
            .unwrap_or_default();
        for (kind, list) in [("read", &buckets.read), ("write", &buckets.write)] {
            check_buckets(list).map_err(|why| {
                anyhow::anyhow!(
                    "{}: response_buckets.{kind} {why}: not as `layoutd sim --json` writes it (rerun the simulation)",
                    p.display()
                )
            })?;
        }
        let num = |k: &str| v.get(k).and_then(|x| x.as_f64()).unwrap_or(0.0);
        let busy = [
            num("disk_busy_bringup_seconds"),
            num("disk_busy_seconds"),
            num("disk_busy_after_trace_seconds"),
        ];
        let phases: PhaseInfo =
            v.get("phases").and_then(|b| serde_json::from_value(b.clone()).ok()).unwrap_or_default();
        let plotted = busy
            .iter()
            .map(|b| ("disk busy seconds", *b))
            .chain(std::iter::once(("phases.width_s", phases.width_s)))
            .chain(phases.list.iter().flat_map(|ph| {
                [
                    ("phases.start_s", ph.start_s),
                    ("phases.response_ms_mean", ph.response_ms_mean),
                    ("phases.read_response_ms_mean", ph.read_response_ms_mean),
                    ("phases.write_response_ms_mean", ph.write_response_ms_mean),
                ]
            }));
        for (what, value) in plotted {
            if !(0.0..=PLOTTED_VALUE_MAX).contains(&value) {
                bail!(
                    "{}: {what} {value} is not within 0..={PLOTTED_VALUE_MAX:e}: not as `layoutd sim --json` writes it (rerun the simulation)",
                    p.display()
                );
            }
        }
        runs.push(Run {
            path: p.clone(),
            values: flatten(&v).into_iter().collect(),
            title,
            buckets,
            busy,
            phases,
        });
    }
    Ok(runs)
}

/// The largest time a run's plotted figures may hold (seconds or ms): a
/// thousand years in seconds. Past it (or negative) the file is not what
/// `--json` wrote, and the plots' axes cannot hold it.
const PLOTTED_VALUE_MAX: f64 = 3.2e10;

/// A run's response buckets as `--json` writes them: `[lower_ns, width_ns,
/// count]`, each bucket's end and the total count within `u64`, so the
/// plots' sums cannot overflow.
fn check_buckets(list: &[[u64; 3]]) -> Result<(), String> {
    let mut total = 0u64;
    for (i, [lower, width, count]) in list.iter().enumerate() {
        if lower.checked_add(*width).is_none() {
            return Err(format!("bucket {i} ends past 2^64 ns"));
        }
        total = total.checked_add(*count).ok_or_else(|| format!("counts past 2^64 at bucket {i}"))?;
    }
    Ok(())
}

/// The rows of the comparison: metric, then per run its value and (from
/// the second run on) the ratio to the first run's value.
fn compare_rows(runs: &[Run]) -> Vec<(String, Vec<String>, Vec<Option<f64>>)> {
    let mut keys: Vec<String> = HEADLINE.iter().map(|k| k.to_string()).collect();
    let rest: std::collections::BTreeSet<&String> = runs.iter().flat_map(|r| r.values.keys()).collect();
    keys.extend(rest.into_iter().filter(|k| !HEADLINE.contains(&k.as_str())).cloned());
    let mut rows = Vec::new();
    for k in keys {
        let cells: Vec<String> =
            runs.iter().map(|r| r.values.get(&k).cloned().unwrap_or_else(|| "-".into())).collect();
        if cells.iter().all(|c| c == "-") {
            continue;
        }
        let base = cells[0].parse::<f64>().ok();
        let ratios = cells[1..]
            .iter()
            .map(|c| match (base, c.parse::<f64>().ok()) {
                (Some(b), Some(v)) if b != 0.0 => Some(v / b),
                _ => None,
            })
            .collect();
        rows.push((k, cells, ratios));
    }
    rows
}

/// Text that fits `width` characters: the tail kept (paths and dotted keys
/// differ at the end), `~` marking the cut.
pub fn fit(s: &str, width: usize) -> String {
    let n = s.chars().count();
    if n <= width {
        return s.to_string();
    }
    let tail: String = s.chars().skip(n - (width - 1)).collect();
    format!("~{tail}")
}

/// A number in at most `width` characters (fewer decimals, then exponent).
fn fit_number(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    match s.parse::<f64>() {
        Ok(v) => {
            for decimals in (0..6).rev() {
                let t = format!("{v:.decimals$}");
                if t.chars().count() <= width {
                    return t;
                }
            }
            fit(&format!("{v:.2e}"), width)
        }
        Err(_) => fit(s, width),
    }
}

/// Width of the text table: at most this many characters per line.
pub const COMPARE_WIDTH: usize = 100;

/// A side-by-side table of several `--json` files: one row per metric
/// (headline metrics first, then every other in key order), one column per
/// run (named A, B, ... in a legend above), and a ratio column `X/A`
/// against the first run for every later one. Lines fit in
/// [`COMPARE_WIDTH`] characters for up to four runs; metric names and
/// values are shortened (tail kept) to fit.
pub fn compare_table(paths: &[PathBuf]) -> anyhow::Result<String> {
    let runs = load_runs(paths)?;
    Ok(render_compare(&runs))
}

fn run_letter(i: usize) -> String {
    let letters = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    match letters.get(i) {
        Some(c) => char::from(*c).to_string(),
        None => format!("R{i}"),
    }
}

fn ratio_text(r: Option<f64>) -> String {
    match r {
        Some(r) if r.is_finite() && r.abs() < 1e4 => format!("{r:.3}"),
        Some(r) => format!("{r:.1e}"),
        None => "-".into(),
    }
}

fn render_compare(runs: &[Run]) -> String {
    let n = runs.len();
    let ratio_w = 7;
    // metric + n values + (n-1) ratios, two spaces between columns.
    let (mut metric_w, mut value_w) = (32usize, 14usize);
    while metric_w + n * (value_w + 2) + (n - 1) * (ratio_w + 2) > COMPARE_WIDTH && value_w > 8 {
        value_w -= 1;
        metric_w = metric_w.saturating_sub(1).max(20);
    }
    let mut out = String::new();
    for (i, r) in runs.iter().enumerate() {
        let line = format!("{} = {} ({})", run_letter(i), r.path.display(), r.title);
        let _ = writeln!(out, "{}", fit(&line, COMPARE_WIDTH));
    }
    let mut header = format!("{:<metric_w$}", "metric");
    for i in 0..n {
        let _ = write!(header, "  {:>value_w$}", run_letter(i));
        if i > 0 {
            let _ = write!(header, "  {:>ratio_w$}", format!("{}/A", run_letter(i)));
        }
    }
    let _ = writeln!(out, "{header}");
    let _ = writeln!(out, "{}", "-".repeat(header.chars().count()));
    for (key, cells, ratios) in compare_rows(runs) {
        let mut line = format!("{:<metric_w$}", fit(&key, metric_w));
        for (i, c) in cells.iter().enumerate() {
            let _ = write!(line, "  {:>value_w$}", fit_number(c, value_w));
            if i > 0 {
                let _ = write!(line, "  {:>ratio_w$}", ratio_text(ratios[i - 1]));
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}

/// `--compare A.json B.json ... --report DIR`: one page drawing the runs
/// over each other (read and write response CDFs, read and write
/// histograms, disk busy time by phase) above the comparison table with
/// ratio columns. Returns the page's path.
pub fn write_compare_report(dir: &Path, paths: &[PathBuf]) -> anyhow::Result<PathBuf> {
    let runs = load_runs(paths)?;
    create_dir(dir)?;
    let label = |i: usize, r: &Run| format!("{} {}", run_letter(i), r.title);
    let reads: Vec<Series> =
        runs.iter().enumerate().map(|(i, r)| (label(i, r), r.buckets.read.as_slice())).collect();
    let writes: Vec<Series> =
        runs.iter().enumerate().map(|(i, r)| (label(i, r), r.buckets.write.as_slice())).collect();
    let names: Vec<String> = runs.iter().enumerate().map(|(i, r)| label(i, r)).collect();
    let busy_labels: Vec<String> = ["bring-up", "trace", "after trace"].map(String::from).to_vec();
    let busy_groups: Vec<Vec<f64>> = (0..3).map(|p| runs.iter().map(|r| r.busy[p]).collect()).collect();
    // Phases are comparable when every run has the same ones (the same
    // trace); otherwise each run's phases are drawn by index.
    let same_phases = runs.windows(2).all(|w| {
        w[0].phases.width_s == w[1].phases.width_s && w[0].phases.list.len() == w[1].phases.list.len()
    });
    let phase_count = runs.iter().map(|r| r.phases.list.len()).max().unwrap_or(0);
    let phase_groups: Vec<Vec<f64>> = (0..phase_count)
        .map(|i| runs.iter().map(|r| r.phases.list.get(i).map_or(0.0, |p| p.response_ms_mean)).collect())
        .collect();
    let plots: Vec<Plot> = vec![
        (
            "read_cdf.svg",
            "Read response-time CDF",
            Box::new(|p| plot_cdf(p, "Read response time CDF", &reads)),
        ),
        (
            "write_cdf.svg",
            "Write response-time CDF",
            Box::new(|p| plot_cdf(p, "Write response time CDF", &writes)),
        ),
        (
            "read_hist.svg",
            "Read response-time histogram",
            Box::new(|p| plot_hist(p, "Read response time histogram", &reads)),
        ),
        (
            "write_hist.svg",
            "Write response-time histogram",
            Box::new(|p| plot_hist(p, "Write response time histogram", &writes)),
        ),
        (
            "phases.svg",
            "Mean response by phase of the trace",
            Box::new(|p| {
                if same_phases {
                    plot_phase_bars(
                        p,
                        "Mean response by phase of the trace",
                        &runs[0].phases,
                        &names,
                        &phase_groups,
                    )
                } else {
                    let labels: Vec<String> = (1..=phase_count).map(|i| i.to_string()).collect();
                    let x_desc = "phase number (the runs' traces differ: each run's own phases)";
                    plot_bars(
                        p,
                        "Mean response by phase",
                        x_desc,
                        "mean response (ms)",
                        &labels,
                        &names,
                        &phase_groups,
                    )
                }
            }),
        ),
        (
            "busy.svg",
            "Disk busy time: bring-up, trace, after",
            Box::new(|p| {
                plot_bars(
                    p,
                    "Disk busy time: bring-up, trace window, after the trace",
                    "bring-up: formatting or recovery; after trace: background work still running",
                    "disk busy (s)",
                    &busy_labels,
                    &names,
                    &busy_groups,
                )
            }),
        ),
    ];
    draw_all(dir, &plots)?;
    let mut h = page_head("layoutd sim: comparison");
    h.push_str("<ul>\n");
    for (i, r) in runs.iter().enumerate() {
        let _ = writeln!(
            h,
            "<li><b>{}</b> = {} ({})</li>",
            run_letter(i),
            html_escape(&r.path.display().to_string()),
            html_escape(&r.title)
        );
    }
    h.push_str("</ul>\n");
    for (file, caption, _) in &plots {
        let _ = writeln!(h, "<h2>{caption}</h2>\n<img src=\"{file}\" alt=\"{caption}\">");
    }
    h.push_str("<h2>All numbers</h2>\n<table><tr><th>metric</th>");
    for i in 0..runs.len() {
        let _ = write!(h, "<th>{}</th>", run_letter(i));
        if i > 0 {
            let _ = write!(h, "<th>{}/A</th>", run_letter(i));
        }
    }
    h.push_str("</tr>\n");
    for (key, cells, ratios) in compare_rows(&runs) {
        let _ = write!(h, "<tr><td>{}</td>", html_escape(&key));
        for (i, c) in cells.iter().enumerate() {
            let class = if c.parse::<f64>().is_ok() { " class=\"n\"" } else { "" };
            let _ = write!(h, "<td{class}>{}</td>", html_escape(c));
            if i > 0 {
                let _ = write!(h, "<td class=\"n\">{}</td>", ratio_text(ratios[i - 1]));
            }
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n</body></html>\n");
    write_page(dir, &h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_labels_are_round_and_zero_has_its_own_bar() {
        let b: Vec<[u64; 3]> =
            vec![[0, 1, 5], [700, 1, 1], [3_100_000, 65_536, 10], [17_000_000_000, 1 << 28, 1]];
        let (labels, groups) = hist_bins(&[("x".into(), &b)]);
        assert_eq!(labels.first().map(String::as_str), Some("0"));
        assert_eq!(labels[1], ">0");
        assert!(
            labels.contains(&"2".to_string()) && labels.last() == Some(&"10000".to_string()),
            "{labels:?}"
        );
        for l in &labels[2..] {
            let digits: String = l.chars().filter(|c| c.is_ascii_digit()).collect();
            let lead = digits.trim_start_matches('0');
            assert!(matches!(&lead[..1], "1" | "2" | "5") && lead[1..].chars().all(|c| c == '0'), "{l}");
        }
        let total: f64 = groups.iter().map(|g| g[0]).sum();
        assert!((total - 100.0).abs() < 1e-9);
        assert!((groups[0][0] - 100.0 * 5.0 / 17.0).abs() < 1e-9, "zero bar share");
    }

    #[test]
    fn compare_cells_fit_their_width() {
        assert_eq!(fit_number("123.456789", 7), "123.457");
        assert_eq!(fit_number("12345678901234", 8), "1.23e13");
        assert_eq!(fit("/a/very/long/path.json", 10), "~path.json");
        assert_eq!(ratio_text(Some(1.5)), "1.500");
        assert_eq!(ratio_text(None), "-");
    }
}
