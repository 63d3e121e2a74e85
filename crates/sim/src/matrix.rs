//! Batch mode: `layoutd sim --matrix FILE` runs every trace × stack × disk
//! cell of a matrix file, on all cores, and writes one summary.
//!
//! A matrix file (TOML) names each axis's entries by the `layoutd sim`
//! flags they add; a cell's command line is `common + trace + stack + disk`,
//! parsed exactly as a single run's (so a cell's JSON is byte-identical to
//! `layoutd sim <those flags> --json F`, and the summary prints the line):
//!
//! ```toml
//! common = ["--closed-loop", "--seed", "1"]      # optional
//! [[trace]]
//! name = "hm0"
//! args = ["--trace", "hm_0.csv.gz", "--format", "msr", "--device", "0", "--fit", "compact"]
//! [[stack]]
//! name = "plain"
//! args = []
//! [[stack]]
//! name = "dcd"
//! args = ["--config", "examples/dcd.toml"]
//! [[disk]]
//! name = "wd800"
//! args = ["--disk", "wd800"]
//! ```
//!
//! Cells are numbered trace-major (trace, then stack, then disk). Each cell
//! is one deterministic simulation; cells run in parallel on `jobs`
//! threads, and results are gathered by cell number, so the output does not
//! depend on the thread count or on which cell finished first.
//!
//! `--shard I/N` runs only the cells whose number is I modulo N (I from 0),
//! writing their JSON files; `--summarize` then builds the summary from the
//! cell files found in the output directory, identical to an unsharded run's.

use anyhow::{bail, Context};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// One entry of an axis: a name (for file names and the summary) and the
/// flags it adds to the command line.
#[derive(Clone, Debug, serde::Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Short name: letters, digits, `-`, `_`, `.`.
    pub name: String,
    /// `layoutd sim` flags.
    #[serde(default)]
    pub args: Vec<String>,
}

/// A parsed matrix file.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Matrix {
    /// Flags every cell gets first.
    #[serde(default)]
    pub common: Vec<String>,
    /// The traces.
    pub trace: Vec<Entry>,
    /// The stacks.
    pub stack: Vec<Entry>,
    /// The disks.
    pub disk: Vec<Entry>,
}

/// One cell: its number, the three entries' names, and its flags.
#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    /// Trace-major number from 0.
    pub index: usize,
    /// Trace entry name.
    pub trace: String,
    /// Stack entry name.
    pub stack: String,
    /// Disk entry name.
    pub disk: String,
    /// The `layoutd sim` flags of this cell.
    pub args: Vec<String>,
}

impl Cell {
    /// The cell's JSON file, relative to the output directory.
    pub fn file(&self) -> PathBuf {
        Path::new("cells").join(format!("{}__{}__{}.json", self.trace, self.stack, self.disk))
    }
}

impl Matrix {
    /// Reads and checks a matrix file.
    pub fn load(path: &Path) -> anyhow::Result<Matrix> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("{}: cannot read", path.display()))?;
        let m: Matrix =
            toml::from_str(&text).with_context(|| format!("{}: not a matrix file", path.display()))?;
        for (axis, entries) in [("trace", &m.trace), ("stack", &m.stack), ("disk", &m.disk)] {
            if entries.is_empty() {
                bail!("{}: the matrix needs at least one [[{axis}]]", path.display());
            }
            let mut seen = std::collections::BTreeSet::new();
            for e in entries {
                let ok = !e.name.is_empty()
                    && e.name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
                if !ok || e.name.contains("__") {
                    bail!(
                        "{}: [[{axis}]] name {:?} must be letters, digits, '-', '_' or '.' (no \"__\")",
                        path.display(),
                        e.name
                    );
                }
                if !seen.insert(&e.name) {
                    bail!("{}: two [[{axis}]] entries are named {:?}", path.display(), e.name);
                }
            }
        }
        Ok(m)
    }

    /// Every cell, trace-major.
    pub fn cells(&self) -> Vec<Cell> {
        let mut cells = Vec::new();
        for t in &self.trace {
            for s in &self.stack {
                for d in &self.disk {
                    let args =
                        [&self.common, &t.args, &s.args, &d.args].into_iter().flatten().cloned().collect();
                    cells.push(Cell {
                        index: cells.len(),
                        trace: t.name.clone(),
                        stack: s.name.clone(),
                        disk: d.name.clone(),
                        args,
                    });
                }
            }
        }
        cells
    }
}

/// `--shard I/N`: part I (from 0) of N.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    /// This part, 0..count.
    pub index: usize,
    /// Parts in all.
    pub count: usize,
}

impl Shard {
    /// Parses `I/N`.
    pub fn parse(s: &str) -> Result<Shard, String> {
        let bad = || format!("--shard must be I/N with 0 <= I < N (e.g. 0/4), got {s:?}");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count): (usize, usize) =
            (i.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    /// Whether cell number `index` belongs to this shard.
    pub fn has(&self, index: usize) -> bool {
        index % self.count == self.index
    }
}

/// Runs `run(cell)` for each of `cells` on `jobs` threads (at least 1),
/// returning the results in the cells' order, whatever the threads'.
/// The first error (by cell order) is returned.
pub fn run_parallel<T: Send>(
    cells: &[Cell],
    jobs: usize,
    run: impl Fn(&Cell) -> anyhow::Result<T> + Sync,
) -> anyhow::Result<Vec<T>> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<anyhow::Result<T>>>> = Mutex::new((0..cells.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, cells.len().max(1)) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(cell) = cells.get(i) else { break };
                let r = run(cell);
                results.lock().expect("no thread panicked holding it")[i] = Some(r);
            });
        }
    });
    let results = results.into_inner().expect("threads joined");
    results
        .into_iter()
        .zip(cells)
        .map(|(r, c)| {
            r.expect("every cell ran")
                .with_context(|| format!("cell {} ({} × {} × {})", c.index, c.trace, c.stack, c.disk))
        })
        .collect()
}

/// One row of the summary.
#[derive(Serialize)]
struct Row<'a> {
    #[serde(flatten)]
    cell: &'a Cell,
    file: String,
    requests: u64,
    simulated_seconds: f64,
    disk_utilization: f64,
    response_ms_mean: f64,
    response_ms_p99: f64,
    read_response_ms_mean: f64,
    write_response_ms_mean: f64,
    /// `response_ms_mean` over that of the first stack's cell with the same trace and disk.
    response_mean_vs_first_stack: Option<f64>,
}

/// Builds the summary from the cell files under `out` (all must exist):
/// `(summary.json text, text table)`. Deterministic: the same cell files
/// give the same bytes, however they were produced (one run, or shards).
pub fn summarize(matrix: &Matrix, out: &Path) -> anyhow::Result<(String, String)> {
    let cells = matrix.cells();
    let mut values = Vec::new();
    let mut missing = Vec::new();
    for c in &cells {
        let path = out.join(c.file());
        match std::fs::read_to_string(&path) {
            Ok(text) => values.push(
                serde_json::from_str::<serde_json::Value>(&text)
                    .with_context(|| format!("{}: not a `layoutd sim --json` file", path.display()))?,
            ),
            Err(_) => missing.push(c.file().display().to_string()),
        }
    }
    if !missing.is_empty() {
        bail!(
            "{}: {} of {} cells have no JSON yet (run the missing shards): {}",
            out.display(),
            missing.len(),
            cells.len(),
            missing.join(" ")
        );
    }
    let f = |v: &serde_json::Value, p: &str| v.pointer(p).and_then(|x| x.as_f64()).unwrap_or(0.0);
    let per_stack = matrix.disk.len();
    let per_trace = matrix.stack.len() * per_stack;
    let rows: Vec<Row> = cells
        .iter()
        .zip(&values)
        .map(|(c, v)| {
            let first_stack = &values[c.index / per_trace * per_trace + c.index % per_stack];
            let base = f(first_stack, "/response_ms/mean");
            let mean = f(v, "/response_ms/mean");
            Row {
                cell: c,
                file: c.file().display().to_string(),
                requests: v.get("requests").and_then(|x| x.as_u64()).unwrap_or(0),
                simulated_seconds: f(v, "/simulated_seconds"),
                disk_utilization: f(v, "/disk_utilization"),
                response_ms_mean: mean,
                response_ms_p99: f(v, "/response_ms/p99"),
                read_response_ms_mean: f(v, "/read_response_ms/mean"),
                write_response_ms_mean: f(v, "/write_response_ms/mean"),
                response_mean_vs_first_stack: (base > 0.0).then(|| crate::hist::round6(mean / base)),
            }
        })
        .collect();
    let mut json = serde_json::to_string_pretty(&serde_json::json!({ "cells": rows })).expect("serializes");
    json.push('\n');
    let mut table = format!(
        "{:<40} {:>10} {:>9} {:>6} {:>10} {:>10} {:>7}\n",
        "trace × stack × disk", "requests", "sim s", "util", "mean ms", "p99 ms", "vs 1st"
    );
    for r in &rows {
        let name = format!("{} × {} × {}", r.cell.trace, r.cell.stack, r.cell.disk);
        let ratio = r.response_mean_vs_first_stack.map_or("-".to_string(), |x| format!("{x:.3}"));
        table.push_str(&format!(
            "{:<40} {:>10} {:>9.1} {:>6.3} {:>10.3} {:>10.3} {:>7}\n",
            crate::report::fit(&name, 40),
            r.requests,
            r.simulated_seconds,
            r.disk_utilization,
            r.response_ms_mean,
            r.response_ms_p99,
            ratio
        ));
    }
    Ok((json, table))
}
