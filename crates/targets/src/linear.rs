//! `linear`: maps the volume onto one or more slices of the lower device,
//! concatenated in order, like a dm-linear table with several lines.
//!
//! Glossary: a *segment* is one slice `[offset, offset + length)` of the
//! lower device; the volume is the segments laid end to end.
//!
//! Config (`[[layer]] target = "linear"`):
//! ```toml
//! [[layer.segment]]
//! offset = 0          # byte offset on the lower device (sizes: 4096, "64MiB")
//! length = "1GiB"     # optional: to the end of the lower device
//! ```
//! Without any `segment`, one segment covers the whole lower device.
//!
//! Status: `linear segments=<offset>+<length>,... reads_count=.. writes_count=..
//! read_bytes=.. written_bytes=.. flushes_count=..`.

use crate::split::Joiner;
use layoutd_core::config::{ArgReader, ConfigError};
use layoutd_core::{Completion, Instant, Op, ReqId, Request, Status, Target, SECTOR_BYTES};
use std::collections::VecDeque;

/// One slice of the lower device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Where the slice starts in the volume.
    pub upper_start_bytes: u64,
    /// Where it starts on the lower device.
    pub lower_start_bytes: u64,
    /// Its length.
    pub length_bytes: u64,
}

/// The linear target.
pub struct Linear {
    segments: Vec<Segment>,
    size_bytes: u64,
    joiner: Joiner,
    lower_q: VecDeque<Request>,
    upper_q: VecDeque<Completion>,
    /// Requests forwarded 1:1 (see `DIRECT_ID_BIT`).
    direct_in_flight_count: u64,
    counters: Counters,
}

/// Marks a lower id as an upper id passed straight through (a request
/// inside one segment). Ids the joiner hands out never carry it, and an
/// upper id that already carries it takes the joiner path.
const DIRECT_ID_BIT: u64 = 1 << 63;

#[derive(Default)]
struct Counters {
    reads_count: u64,
    writes_count: u64,
    read_bytes: u64,
    written_bytes: u64,
    flushes_count: u64,
    trims_count: u64,
    zeroes_count: u64,
}

impl Linear {
    /// Parses `segment` tables and checks them against a lower device of `lower_bytes`.
    pub fn ctr(mut args: ArgReader<'_>, lower_bytes: u64) -> Result<Linear, ConfigError> {
        let tables = args.tables_opt("segment")?;
        let mut slices = Vec::new();
        match tables {
            None => slices.push((0, lower_bytes)),
            Some(ts) if ts.is_empty() => return Err(args.error("`segment` is empty: give at least one")),
            Some(ts) => {
                for (i, t) in ts.into_iter().enumerate() {
                    let mut r = ArgReader::new(format!("segment {}", i + 1), t);
                    let offset = r.size_opt("offset")?.unwrap_or(0);
                    let length = r.size_opt("length")?;
                    r.finish().map_err(|e| args.error(e))?;
                    let length = length.unwrap_or_else(|| lower_bytes.saturating_sub(offset));
                    slices.push((offset, length));
                }
            }
        }
        args.finish()?;
        let segments = Self::check_slices(&slices, lower_bytes)
            .map_err(|e| ConfigError(format!("layer (linear): {e}")))?;
        Ok(Linear::new(segments))
    }

    /// Validates slices: aligned, non-empty, inside the device, not overlapping.
    fn check_slices(slices: &[(u64, u64)], lower_bytes: u64) -> Result<Vec<Segment>, String> {
        let mut segments = Vec::with_capacity(slices.len());
        let mut upper = 0u64;
        for (i, &(offset, length)) in slices.iter().enumerate() {
            let n = i + 1;
            if offset % SECTOR_BYTES != 0 || length % SECTOR_BYTES != 0 {
                return Err(format!(
                    "segment {n}: offset {offset} and length {length} must be multiples of 512"
                ));
            }
            if length == 0 {
                return Err(format!("segment {n}: length is zero (offset {offset} is at or past the device end {lower_bytes}?)"));
            }
            if offset.checked_add(length).is_none_or(|end| end > lower_bytes) {
                return Err(format!(
                    "segment {n}: region {offset}+{length} runs past the end of the lower device ({lower_bytes} bytes)"
                ));
            }
            for (j, s) in segments.iter().enumerate() {
                let s: &Segment = s;
                if offset < s.lower_start_bytes + s.length_bytes && s.lower_start_bytes < offset + length {
                    return Err(format!("segment {n}: region {offset}+{length} overlaps segment {}", j + 1));
                }
            }
            segments.push(Segment {
                upper_start_bytes: upper,
                lower_start_bytes: offset,
                length_bytes: length,
            });
            upper += length;
        }
        Ok(segments)
    }

    /// A linear target over already-validated segments.
    pub fn new(segments: Vec<Segment>) -> Linear {
        assert!(!segments.is_empty());
        let size_bytes = segments.iter().map(|s| s.length_bytes).sum();
        Linear {
            segments,
            size_bytes,
            joiner: Joiner::default(),
            lower_q: VecDeque::new(),
            upper_q: VecDeque::new(),
            direct_in_flight_count: 0,
            counters: Counters::default(),
        }
    }

    /// Index of the segment holding upper byte `offset`.
    fn segment_index(&self, offset_bytes: u64) -> usize {
        let i = self.segments.partition_point(|s| s.upper_start_bytes <= offset_bytes) - 1;
        assert!(offset_bytes < self.segments[i].upper_start_bytes + self.segments[i].length_bytes);
        i
    }

    fn count(&mut self, req: &Request) {
        let c = &mut self.counters;
        let len = u64::from(req.length_bytes);
        match req.op {
            Op::Read => (c.reads_count += 1, c.read_bytes += len).0,
            Op::Write => (c.writes_count += 1, c.written_bytes += len).0,
            Op::Flush => c.flushes_count += 1,
            Op::Trim => c.trims_count += 1,
            Op::WriteZeroes => c.zeroes_count += 1,
        }
    }

    /// The pieces `(lower_offset, within, length)` covering the request.
    fn pieces(&self, req: &Request) -> Vec<(u64, u32, u32)> {
        let pieces = self.lower_ranges(req.offset_bytes, u64::from(req.length_bytes));
        pieces.into_iter().map(|(lower, within, n)| (lower, within as u32, n as u32)).collect()
    }

    /// The pieces `(lower_offset, within, length)` covering upper bytes
    /// `[offset, offset + length)`, which must lie inside the volume.
    fn lower_ranges(&self, offset: u64, length: u64) -> Vec<(u64, u64, u64)> {
        let mut out = Vec::with_capacity(1);
        let mut pos = offset;
        let end = offset + length;
        while pos < end {
            let s = self.segments[self.segment_index(pos)];
            let within_seg = pos - s.upper_start_bytes;
            let n = (s.length_bytes - within_seg).min(end - pos);
            out.push((s.lower_start_bytes + within_seg, pos - offset, n));
            pos += n;
        }
        out
    }
}

impl Target for Linear {
    fn name(&self) -> &'static str {
        "linear"
    }

    /// The segments hold the volume's bytes unchanged.
    fn map_extent(&self, offset_bytes: u64, length_bytes: u64) -> Vec<(Option<u64>, u64)> {
        match offset_bytes.checked_add(length_bytes).filter(|&e| e <= self.size_bytes) {
            Some(end) => self
                .lower_ranges(offset_bytes, end - offset_bytes)
                .into_iter()
                .map(|(lower, _, n)| (Some(lower), n))
                .collect(),
            None => vec![(None, length_bytes)],
        }
    }

    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn handle_request(&mut self, _now: Instant, mut req: Request) {
        assert!(req.validate(self.size_bytes).is_ok(), "stack validated it");
        self.count(&req);
        // The common case, a flush or a request inside one segment, maps 1:1:
        // the upper id, tagged, goes down as the lower id, with no bookkeeping.
        let direct = req.id.0 & DIRECT_ID_BIT == 0;
        if direct && req.op == Op::Flush {
            self.direct_in_flight_count += 1;
            req.id = ReqId(req.id.0 | DIRECT_ID_BIT);
            self.lower_q.push_back(req);
            return;
        }
        let s = self.segments[self.segment_index(req.offset_bytes)];
        if direct && req.end_bytes() <= s.upper_start_bytes + s.length_bytes {
            self.direct_in_flight_count += 1;
            req.id = ReqId(req.id.0 | DIRECT_ID_BIT);
            req.offset_bytes = req.offset_bytes - s.upper_start_bytes + s.lower_start_bytes;
            self.lower_q.push_back(req);
            return;
        }
        if req.op == Op::Flush {
            let slot = self.joiner.begin(req.id, req.op, 0, 1);
            let id = self.joiner.piece(slot, 0);
            self.lower_q.push_back(Request { id, ..req });
            return;
        }
        let pieces = self.pieces(&req);
        let slot = self.joiner.begin(req.id, req.op, req.length_bytes, pieces.len() as u32);
        for (lower_offset, within, length) in pieces {
            let id = self.joiner.piece(slot, within);
            let data = req.take_data_piece(within as usize, length as usize);
            self.lower_q.push_back(Request {
                id,
                op: req.op,
                offset_bytes: lower_offset,
                length_bytes: length,
                fua: req.fua,
                stream: req.stream,
                data,
                background: req.background,
            });
        }
    }

    fn handle_completion(&mut self, _now: Instant, mut completion: Completion) {
        if completion.id.0 & DIRECT_ID_BIT != 0 {
            assert!(self.direct_in_flight_count > 0, "a direct completion has a direct request");
            self.direct_in_flight_count -= 1;
            completion.id = ReqId(completion.id.0 & !DIRECT_ID_BIT);
            self.upper_q.push_back(completion);
            return;
        }
        if let Some(up) = self.joiner.complete(completion) {
            self.upper_q.push_back(up);
        }
    }

    fn poll_lower(&mut self) -> Option<Request> {
        self.lower_q.pop_front()
    }

    fn poll_upper(&mut self) -> Option<Completion> {
        self.upper_q.pop_front()
    }

    fn status(&self) -> Status {
        let segs: Vec<String> =
            self.segments.iter().map(|s| format!("{}+{}", s.lower_start_bytes, s.length_bytes)).collect();
        let c = &self.counters;
        Status {
            target: "linear".into(),
            config: vec![("segments".into(), segs.join(","))],
            counters: vec![
                ("reads_count".into(), c.reads_count),
                ("writes_count".into(), c.writes_count),
                ("read_bytes".into(), c.read_bytes),
                ("written_bytes".into(), c.written_bytes),
                ("flushes_count".into(), c.flushes_count),
                ("trims_count".into(), c.trims_count),
                ("zeroes_count".into(), c.zeroes_count),
                (
                    "in_flight_count".into(),
                    self.joiner.in_flight_count() as u64 + self.direct_in_flight_count,
                ),
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_past_the_end_overlapping_or_misaligned_are_refused() {
        let dev = 1 << 20;
        assert!(Linear::check_slices(&[(0, dev)], dev).is_ok());
        assert!(Linear::check_slices(&[(4096, dev)], dev).unwrap_err().contains("past the end"));
        assert!(Linear::check_slices(&[(0, 8192), (4096, 4096)], dev)
            .unwrap_err()
            .contains("overlaps segment 1"));
        assert!(Linear::check_slices(&[(100, 512)], dev).unwrap_err().contains("multiples of 512"));
        assert!(Linear::check_slices(&[(dev, 0)], dev).unwrap_err().contains("zero"));
    }

    #[test]
    fn a_request_across_segments_is_split_at_the_boundary() {
        let l = Linear::new(Linear::check_slices(&[(8192, 4096), (0, 4096)], 1 << 20).expect("valid"));
        let req = Request::new(layoutd_core::ReqId(1), Op::Read, 2048, 4096);
        assert_eq!(l.pieces(&req), vec![(8192 + 2048, 0, 2048), (0, 2048, 2048)]);
    }

    #[test]
    fn extents_map_through_the_segments_and_not_past_the_end() {
        let l = Linear::new(Linear::check_slices(&[(8192, 4096), (0, 4096)], 1 << 20).expect("valid"));
        assert_eq!(l.map_extent(2048, 4096), vec![(Some(8192 + 2048), 2048), (Some(0), 2048)]);
        assert_eq!(l.map_extent(0, 8192), vec![(Some(8192), 4096), (Some(0), 4096)]);
        assert_eq!(l.map_extent(4096, 8192), vec![(None, 8192)]);
        assert_eq!(l.map_extent(u64::MAX, 2), vec![(None, 2)]);
    }
}
