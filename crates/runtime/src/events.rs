//! A debug log of the runtime's events, the same in both runtimes, to
//! compare a live run with its replay event by event: every upper request
//! and completion, every lower request (when the stack emits it and when
//! it completes), every idle report and timeout delivered, and after each
//! input the stack's next timeout and its background-work counters when
//! they changed.
//!
//! Off unless the environment names a file: `LAYOUTD_EVENT_LOG=PATH`
//! (read once when a live volume starts or the simulator builds its
//! harness); the live runtime writes `PATH.live`, the simulator
//! `PATH.sim`, so one variable set for a capture and its replay keeps both. One line per event: `ms kind fields`, times in ms on the
//! runtime's clock (the live volume's start, the simulator's virtual
//! clock). Observation only: it changes no decision of either runtime.

use layoutd_core::{Instant, Request, Target};
use std::io::Write;

/// The environment variable that turns the log on.
pub const ENV: &str = "LAYOUTD_EVENT_LOG";

/// Counters of background work followed in the log (any layer's).
const COUNTERS: [&str; 4] = [
    "resequence_passes_count",
    "slots_resequence_count",
    "cleaning_passes_count",
    "background_cleanings_count",
];

/// See the module docs.
pub struct EventLog {
    out: Box<dyn Write + Send>,
    timeout: Option<Instant>,
    counters: Vec<u64>,
}

impl EventLog {
    /// The log `LAYOUTD_EVENT_LOG` names, with `.RUNTIME` appended
    /// (`live`, `sim`), if set (`None` if unset or the file cannot be
    /// created, with a line on stderr).
    pub fn from_env(runtime: &str) -> Option<EventLog> {
        let mut path = std::env::var_os(ENV)?;
        path.push(format!(".{runtime}"));
        match std::fs::File::create(&path) {
            Ok(f) => Some(EventLog {
                out: Box::new(std::io::BufWriter::new(f)),
                timeout: None,
                counters: Vec::new(),
            }),
            Err(e) => {
                eprintln!("layoutd: {ENV}={}: {e}; no event log", std::path::Path::new(&path).display());
                None
            }
        }
    }

    /// One event at `now`.
    pub fn event(&mut self, now: Instant, what: std::fmt::Arguments<'_>) {
        let _ = writeln!(self.out, "{:.3} {what}", now.as_ns() as f64 / 1e6);
    }

    /// A request from above.
    pub fn upper(&mut self, now: Instant, r: &Request) {
        self.event(
            now,
            format_args!("up {} {:?} {} {}", r.id.0, r.op, r.offset_bytes >> 12, r.length_bytes >> 12),
        );
    }

    /// A timeout due at `due` delivered.
    pub fn timeout(&mut self, now: Instant, due: Instant) {
        self.event(now, format_args!("timeout {:.3}", due.as_ns() as f64 / 1e6));
    }

    /// A lower request: `kind` is `lo+` (emitted), `lo-` (completed).
    pub fn lower(&mut self, now: Instant, kind: &str, r: &Request) {
        self.event(
            now,
            format_args!(
                "{kind} {:?} {} {} bg={}",
                r.op,
                r.offset_bytes >> 12,
                r.length_bytes >> 12,
                u8::from(r.background)
            ),
        );
    }

    /// After an input: the stack's next timeout and its background
    /// counters, each logged when it changed.
    pub fn after(&mut self, now: Instant, stack: &dyn Target) {
        let t = stack.poll_timeout();
        if t != self.timeout {
            self.timeout = t;
            match t {
                Some(t) => self.event(now, format_args!("tmo {:.3}", t.as_ns() as f64 / 1e6)),
                None => self.event(now, format_args!("tmo none")),
            }
        }
        let statuses = stack.layer_statuses();
        let values: Vec<u64> = COUNTERS
            .iter()
            .map(|name| {
                statuses.iter().flat_map(|s| &s.counters).filter(|(k, _)| k == name).map(|c| c.1).sum()
            })
            .collect();
        if values != self.counters {
            let text: Vec<String> = COUNTERS.iter().zip(&values).map(|(k, v)| format!("{k}={v}")).collect();
            self.event(now, format_args!("cnt {}", text.join(" ")));
            self.counters = values;
        }
    }

    /// Flushes the file.
    pub fn flush(&mut self) {
        let _ = self.out.flush();
    }
}

impl Drop for EventLog {
    fn drop(&mut self) {
        self.flush();
    }
}
