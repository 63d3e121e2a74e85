//! The one surface every target offers.
//!
//! A target is a state machine with no I/O of its own. It exposes an address
//! space of [`Target::size_bytes`] upward and maps requests onto the address
//! space of the layer below (a slice of the one physical device, possibly
//! several regions of it).
//!
//! # Inputs
//! - [`Target::handle_request`]: a request from above (already validated by
//!   the [`crate::Stack`] at the top; a target validates what it forwards).
//! - [`Target::handle_completion`]: the answer to a request it sent below.
//! - [`Target::handle_timeout`]: the time it asked for in `poll_timeout` came.
//! - [`Target::handle_idle`]: the device below has had no foreground work.
//!
//! # Outputs, drained in this order after every input
//! 1. [`Target::poll_lower`] until `None`: requests for the layer below.
//! 2. [`Target::poll_upper`] until `None`: completions for the layer above.
//! 3. [`Target::poll_timeout`]: the earliest instant it wants a timeout.
//! 4. [`Target::poll_record`] until `None`: trace records (the `trace` target).
//!
//! Ids: the caller assigns request ids for this layer; a target assigns its
//! own ids for the requests it sends below. A completion is delivered exactly
//! once per request.
//!
//! Persistent state: a target that keeps metadata reads it (on
//! [`OpenMode::Open`]) or writes it (on [`OpenMode::Format`]) through the same
//! `poll_lower` channel, holding upper requests until it is ready.

use crate::{Completion, Instant, Op, Request, StreamId};
use serde::Serialize;

/// How a stack is brought up.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub enum OpenMode {
    /// A freshly formatted device: targets initialise their metadata.
    Format {
        /// This format's identity: a nonce the caller draws per format
        /// (the CLI from the volume's random uuid), never 0. Targets that
        /// stamp it on their metadata (seglog's segment headers and
        /// checkpoints) accept only metadata carrying it, so what an
        /// earlier use of the device left is never mistaken for theirs and
        /// need not be overwritten at format. Target code must not draw it
        /// (determinism); make it with [`OpenMode::format`].
        format_id: u64,
    },
    /// An existing device; `clean` is true if the last shutdown was clean.
    Open {
        /// Whether the superblock recorded a clean shutdown.
        clean: bool,
        /// Open even if recovery finds damaged metadata that costs flushed
        /// data: the loss is counted and shown in the status instead of
        /// the open being refused. Off unless the user asks for it.
        accept_loss: bool,
    },
}

impl OpenMode {
    /// A format with identity `format_id` (0, which seglog reserves for
    /// volumes formatted before identities existed, is taken as 1).
    pub const fn format(format_id: u64) -> OpenMode {
        OpenMode::Format { format_id: if format_id == 0 { 1 } else { format_id } }
    }

    /// A format identity from a volume's uuid (its two halves folded).
    pub fn format_from_uuid(uuid: &[u8; 16]) -> OpenMode {
        let half = |i: usize| u64::from_le_bytes(uuid[i..i + 8].try_into().expect("8 bytes"));
        OpenMode::format(half(0) ^ half(8).rotate_left(32))
    }
}

/// Counters and configuration of one target, in `key=value` form.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Status {
    /// The target's type name, as in the config.
    pub target: String,
    /// The configuration echoed back, in config key names.
    pub config: Vec<(String, String)>,
    /// Named counters; names carry their unit.
    pub counters: Vec<(String, u64)>,
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.target)?;
        for (k, v) in &self.config {
            write!(f, " {k}={v}")?;
        }
        for (k, v) in &self.counters {
            write!(f, " {k}={v}")?;
        }
        Ok(())
    }
}

/// One request seen by the `trace` target; the format is documented in
/// `docs/trace-format.md` and written by [`TraceRecord::to_line`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TraceRecord {
    /// When the request arrived.
    pub submit: Instant,
    /// When it completed.
    pub complete: Instant,
    /// Its stream.
    pub stream: StreamId,
    /// Its op.
    pub op: Op,
    /// Byte offset.
    pub offset_bytes: u64,
    /// Byte length.
    pub length_bytes: u32,
    /// Forced unit access.
    pub fua: bool,
}

impl TraceRecord {
    /// The header line of a layoutd trace file.
    pub const HEADER: &'static str =
        "# layoutd-trace v1: submit_ns complete_ns stream op offset_bytes length_bytes flags";

    /// One line of the text format: `submit_ns complete_ns stream op offset length flags`,
    /// where op is one of R W F T Z and flags is `-` or `F` (FUA).
    pub fn to_line(&self) -> String {
        format!(
            "{} {} {} {} {} {} {}",
            self.submit.as_ns(),
            self.complete.as_ns(),
            self.stream.0,
            self.op.code(),
            self.offset_bytes,
            self.length_bytes,
            if self.fua { "F" } else { "-" }
        )
    }

    /// Parses one line written by [`TraceRecord::to_line`].
    pub fn parse_line(line: &str) -> Result<TraceRecord, String> {
        // One pass over the bytes for well-formed lines (the simulator reads
        // millions of them); the field-by-field pass only to say what is wrong.
        Self::parse_fast(line).map_or_else(|| Self::parse_careful(line), Ok)
    }

    fn parse_fast(line: &str) -> Option<TraceRecord> {
        let b = line.as_bytes();
        let mut pos = 0usize;
        let blank = |pos: &mut usize| {
            while b.get(*pos).is_some_and(|c| *c == b' ' || *c == b'\t') {
                *pos += 1;
            }
        };
        let end_of_field = |pos: usize| b.get(pos).is_none_or(|c| *c == b' ' || *c == b'\t');
        let number = |pos: &mut usize| -> Option<u64> {
            blank(pos);
            let start = *pos;
            let mut v: u64 = 0;
            while let Some(d) = b.get(*pos).map(|c| c.wrapping_sub(b'0')).filter(|d| *d <= 9) {
                v = v.checked_mul(10)?.checked_add(u64::from(d))?;
                *pos += 1;
            }
            (*pos > start && end_of_field(*pos)).then_some(v)
        };
        let byte = |pos: &mut usize| -> Option<u8> {
            blank(pos);
            let c = *b.get(*pos)?;
            *pos += 1;
            end_of_field(*pos).then_some(c)
        };
        let (submit, complete, stream) = (number(&mut pos)?, number(&mut pos)?, number(&mut pos)?);
        let op = Op::from_code(char::from(byte(&mut pos)?))?;
        let (offset_bytes, length) = (number(&mut pos)?, number(&mut pos)?);
        let fua = match byte(&mut pos)? {
            b'-' => false,
            b'F' => true,
            _ => return None,
        };
        blank(&mut pos);
        (pos == b.len()).then_some(())?;
        Some(TraceRecord {
            submit: Instant::from_ns(submit),
            complete: Instant::from_ns(complete),
            stream: StreamId(u32::try_from(stream).ok()?),
            op,
            offset_bytes,
            length_bytes: u32::try_from(length).ok()?,
            fua,
        })
    }

    fn parse_careful(line: &str) -> Result<TraceRecord, String> {
        const NAMES: [&str; 7] =
            ["submit_ns", "complete_ns", "stream", "op", "offset_bytes", "length_bytes", "flags"];
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        if f.len() != 7 {
            return Err(format!("expected 7 fields ({}), found {}", NAMES.join(" "), f.len()));
        }
        let num = |i: usize| -> Result<u64, String> {
            f[i].parse::<u64>().map_err(|_| {
                if f[i].bytes().all(|c| c.is_ascii_digit()) {
                    format!("{} {} overflows 64 bits (at most {})", NAMES[i], f[i], u64::MAX)
                } else {
                    format!("{} is not a whole number: {:?}", NAMES[i], f[i])
                }
            })
        };
        let op_char = f[3].chars().next().filter(|_| f[3].len() == 1);
        let op =
            op_char.and_then(Op::from_code).ok_or_else(|| format!("unknown op {:?} (R W F T Z)", f[3]))?;
        let fua = match f[6] {
            "-" => false,
            "F" => true,
            other => return Err(format!("unknown flags {other:?} (- or F)")),
        };
        Ok(TraceRecord {
            submit: Instant::from_ns(num(0)?),
            complete: Instant::from_ns(num(1)?),
            stream: StreamId(
                u32::try_from(num(2)?).map_err(|_| format!("stream {} is past {}", f[2], u32::MAX))?,
            ),
            op,
            offset_bytes: num(4)?,
            length_bytes: u32::try_from(num(5)?)
                .map_err(|_| format!("length_bytes {} is past {}", f[5], u32::MAX))?,
            fua,
        })
    }
}

/// A sans-I/O block-remapping state machine. See the module docs for the
/// call order.
pub trait Target: Send {
    /// The target's type name, as in the config (`linear`, `trace`, ...).
    fn name(&self) -> &'static str;

    /// The size of the address space this target exposes upward.
    fn size_bytes(&self) -> u64;

    /// A request from above. The stack has validated it against `size_bytes`.
    fn handle_request(&mut self, now: Instant, req: Request);

    /// A completion from below, for a request this target emitted.
    fn handle_completion(&mut self, now: Instant, completion: Completion);

    /// The instant returned by `poll_timeout` has been reached.
    fn handle_timeout(&mut self, now: Instant) {
        let _ = now;
    }

    /// The device below has no foreground work; background work may start.
    fn handle_idle(&mut self, now: Instant) {
        let _ = now;
    }

    /// Next request for the layer below.
    fn poll_lower(&mut self) -> Option<Request>;

    /// Next completion for the layer above.
    fn poll_upper(&mut self) -> Option<Completion>;

    /// The earliest instant at which `handle_timeout` should be called.
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    /// Next trace record, for targets that record.
    fn poll_record(&mut self) -> Option<TraceRecord> {
        None
    }

    /// True once the target has finished recovery/formatting and serves.
    fn is_ready(&self) -> bool {
        true
    }

    /// Counters and config.
    fn status(&self) -> Status;

    /// The status of every layer, top first (one entry unless this is a stack).
    fn layer_statuses(&self) -> Vec<Status> {
        vec![self.status()]
    }

    /// A runtime command, as device-mapper's `message` ("destage", "snapshot
    /// create NAME", "plan"): `Ok` with a reply, or `Err` saying why not (an
    /// unknown message included). The default knows none.
    fn message(&mut self, now: Instant, msg: &str) -> Result<String, String> {
        let _ = now;
        Err(format!("{}: unknown message `{msg}` (this target takes none)", self.name()))
    }

    /// Background work this target has now, if any (see
    /// [`crate::background`]): the stack's scheduler grants one offer at a
    /// time, by class, and calls [`Target::background_step`]. The default:
    /// none.
    fn background_offer(&self, now: Instant) -> Option<crate::background::Offer> {
        let _ = now;
        None
    }

    /// Performs one granted step (emits its lower requests, marked
    /// `background`); returns the bytes of I/O it started, or `None` if
    /// there turned out to be nothing to do.
    fn background_step(&mut self, now: Instant) -> Option<u64> {
        let _ = now;
        None
    }

    /// Whether the target holds no background work: nothing left to
    /// destage, clean or copy, so the device below alone is the volume's
    /// contents (`layoutd destage` checks it). The default: always.
    fn is_drained(&self) -> bool {
        true
    }

    /// For allocation queries (NBD block status): where the bytes
    /// `[offset_bytes, offset_bytes + length_bytes)` of this target live on
    /// the layer below, as `(lower offset, length)` pieces in order covering
    /// the range. `Some(lower)`: this target keeps those bytes there
    /// unchanged, so a hole below reads as zeroes here too. `None`: unknown,
    /// reported as data, which is always safe; the default answers that for
    /// the whole range, and a target that may hold newer bytes elsewhere (a
    /// log, a cache) answers it for those bytes.
    fn map_extent(&self, offset_bytes: u64, length_bytes: u64) -> Vec<(Option<u64>, u64)> {
        let _ = offset_bytes;
        vec![(None, length_bytes)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_line_round_trips_and_rejects_garbage() {
        let r = TraceRecord {
            submit: Instant::from_ns(5),
            complete: Instant::from_ns(9),
            stream: StreamId(3),
            op: Op::WriteZeroes,
            offset_bytes: 4096,
            length_bytes: 512,
            fua: true,
        };
        assert_eq!(TraceRecord::parse_line(&r.to_line()), Ok(r));
        assert!(TraceRecord::parse_line("1 2 3 X 0 512 -").unwrap_err().contains("unknown op"));
        assert!(TraceRecord::parse_line("1 2 3 R 0 512").unwrap_err().contains("7 fields"));
        assert!(TraceRecord::parse_line("1 2 3 R zz 512 -").unwrap_err().contains("offset_bytes"));
        assert!(TraceRecord::parse_line("99999999999999999999 2 3 R 0 512 -")
            .unwrap_err()
            .contains("overflows"));
        assert!(TraceRecord::parse_line("1 2 3 R 0 8589934592 -").unwrap_err().contains("length_bytes"));
        assert_eq!(TraceRecord::parse_line(" 1\t2 3 R 0 512 F "), TraceRecord::parse_line("1 2 3 R 0 512 F"));
        // The fast and careful passes agree wherever the fast one answers,
        // and the careful one refuses whatever the fast one does not take.
        for line in ["1 2 3 R 0 512 -", "5\t9 0 W 4096 8192 F ", "7 7 1 F 0 0 -", "1 2 3 Z 1 2 -"] {
            assert_eq!(
                TraceRecord::parse_fast(line),
                Some(TraceRecord::parse_careful(line).unwrap()),
                "{line}"
            );
        }
        for line in
            ["1 2 3 RR 0 512 -", "1 2 3 R 0 512 - x", "1 2 3 R 0x 512 -", "1 2", "1 2 4294967296 R 0 512 -"]
        {
            assert_eq!(TraceRecord::parse_fast(line), None, "{line}");
            assert!(TraceRecord::parse_careful(line).is_err(), "{line}");
        }
    }
}
