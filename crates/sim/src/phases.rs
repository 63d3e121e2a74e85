//! Response time by phase of the trace, in constant memory.
//!
//! A phase is a window of the trace's own clock (recorded submission time
//! after its first request), so the same trace gives the same phases under
//! any stack, disk or replay mode, and runs can be compared phase by phase.
//! Windows start 1 ms wide; whenever a request falls past the last of
//! [`PHASES_MAX`] windows, neighbours are merged in pairs and the width
//! doubles. A trace longer than 8 ms ends with 8 to 16 phases of equal width.

use crate::hist::round6;
use layoutd_core::Op;
use serde::Serialize;

/// Most phases kept.
pub const PHASES_MAX: usize = 16;

#[derive(Clone, Copy, Default)]
struct Acc {
    count: u64,
    sum_ns: u128,
    reads: u64,
    read_sum_ns: u128,
    writes: u64,
    write_sum_ns: u128,
}

impl Acc {
    fn merge(&mut self, o: &Acc) {
        self.count += o.count;
        self.sum_ns += o.sum_ns;
        self.reads += o.reads;
        self.read_sum_ns += o.read_sum_ns;
        self.writes += o.writes;
        self.write_sum_ns += o.write_sum_ns;
    }
}

/// See the module docs.
pub struct Phases {
    width_ns: u64,
    accs: Vec<Acc>,
}

impl Default for Phases {
    fn default() -> Phases {
        Phases { width_ns: Phases::GRAIN_NS, accs: Vec::new() }
    }
}

/// One phase in the JSON.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct Phase {
    /// Start on the trace's clock, seconds after its first request.
    pub start_s: f64,
    /// Requests recorded in the phase (completed).
    pub requests: u64,
    /// Mean response of all of them, ms (0 when none).
    pub response_ms_mean: f64,
    /// Of reads.
    pub read_response_ms_mean: f64,
    /// Of writes.
    pub write_response_ms_mean: f64,
}

/// The phases of a run, for the JSON.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct PhaseInfo {
    /// Every phase's width, seconds.
    pub width_s: f64,
    /// The phases in time order, empty ones included.
    pub list: Vec<Phase>,
}

fn mean_ms(sum_ns: u128, n: u64) -> f64 {
    if n == 0 {
        0.0
    } else {
        round6(sum_ns as f64 / n as f64 / 1e6)
    }
}

impl Phases {
    /// The first windows' width. Every width is this times a power of two,
    /// so a request's window depends only on `trace_ns / GRAIN_NS`: a
    /// caller may keep its time at that grain.
    pub const GRAIN_NS: u64 = 1_000_000;

    /// Counts a request recorded `trace_ns` after the trace's first one.
    pub fn record(&mut self, trace_ns: u64, op: Op, response_ns: u64) {
        while trace_ns / self.width_ns >= PHASES_MAX as u64 {
            let merged = self
                .accs
                .chunks(2)
                .map(|pair| {
                    let mut a = pair[0];
                    if let Some(b) = pair.get(1) {
                        a.merge(b);
                    }
                    a
                })
                .collect();
            self.accs = merged;
            self.width_ns *= 2;
        }
        let i = (trace_ns / self.width_ns) as usize;
        if self.accs.len() <= i {
            self.accs.resize(i + 1, Acc::default());
        }
        let a = &mut self.accs[i];
        a.count += 1;
        a.sum_ns += u128::from(response_ns);
        match op {
            Op::Read => {
                a.reads += 1;
                a.read_sum_ns += u128::from(response_ns);
            }
            Op::Write | Op::WriteZeroes => {
                a.writes += 1;
                a.write_sum_ns += u128::from(response_ns);
            }
            Op::Flush | Op::Trim => {}
        }
    }

    /// The phases as reported.
    pub fn info(&self) -> PhaseInfo {
        let list = self
            .accs
            .iter()
            .enumerate()
            .map(|(i, a)| Phase {
                start_s: round6(i as f64 * self.width_ns as f64 / 1e9),
                requests: a.count,
                response_ms_mean: mean_ms(a.sum_ns, a.count),
                read_response_ms_mean: mean_ms(a.read_sum_ns, a.reads),
                write_response_ms_mean: mean_ms(a.write_sum_ns, a.writes),
            })
            .collect();
        PhaseInfo { width_s: round6(self.width_ns as f64 / 1e9), list }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_double_and_keep_every_request() {
        let mut p = Phases::default();
        for i in 0..1000u64 {
            p.record(i * 100_000_000, if i % 2 == 0 { Op::Read } else { Op::Write }, 1_000_000 * (i % 7));
        }
        let info = p.info();
        assert!((8..=PHASES_MAX).contains(&info.list.len()), "{} phases", info.list.len());
        assert_eq!(info.list.iter().map(|x| x.requests).sum::<u64>(), 1000);
        // 100 s of trace: 16 windows of 8.192 s cover 131 s.
        assert_eq!(info.width_s, 8.192);
        assert_eq!(info.list[1].start_s, 8.192);
        // Same records in another order: same phases (merging is exact).
        let mut q = Phases::default();
        for i in (0..1000u64).rev() {
            q.record(i * 100_000_000, if i % 2 == 0 { Op::Read } else { Op::Write }, 1_000_000 * (i % 7));
        }
        assert_eq!(q.info(), info);
    }
}
