//! The request model shared by every target and runtime.
//!
//! Offsets and lengths are bytes, aligned to [`SECTOR_BYTES`]; a request moves
//! at most [`REQUEST_BYTES_MAX`]. Data travels as [`Bytes`] so that a target
//! that only remaps (linear) forwards buffers without copying. In
//! timing-only mode (trace replay in the simulator) `data` is `None` on
//! writes and on read completions; targets must handle both modes.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// The unit of alignment for offsets and lengths.
pub const SECTOR_BYTES: u64 = 512;
/// The largest request a target accepts (32 MiB).
pub const REQUEST_BYTES_MAX: u32 = 32 << 20;
const _: () = assert!((REQUEST_BYTES_MAX as u64).is_multiple_of(SECTOR_BYTES));

/// What a request does.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Op {
    /// Read `length_bytes` at `offset_bytes`.
    Read,
    /// Write `length_bytes` at `offset_bytes`.
    Write,
    /// Make every previously completed write durable.
    Flush,
    /// Discard a range; it reads back as zeroes afterwards.
    Trim,
    /// Write zeroes over a range without a data buffer.
    WriteZeroes,
}

impl Op {
    /// One-letter code used in trace files: R W F T Z.
    pub const fn code(self) -> char {
        match self {
            Op::Read => 'R',
            Op::Write => 'W',
            Op::Flush => 'F',
            Op::Trim => 'T',
            Op::WriteZeroes => 'Z',
        }
    }

    /// Inverse of [`Op::code`].
    pub fn from_code(c: char) -> Option<Op> {
        Some(match c {
            'R' => Op::Read,
            'W' => Op::Write,
            'F' => Op::Flush,
            'T' => Op::Trim,
            'Z' => Op::WriteZeroes,
            _ => return None,
        })
    }

    /// Whether the op changes the contents of its range.
    pub const fn is_modify(self) -> bool {
        matches!(self, Op::Write | Op::Trim | Op::WriteZeroes)
    }
}

/// Identifies a request among those in flight at one layer. The caller of a
/// layer assigns it and must not reuse it until the completion arrives.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ReqId(pub u64);

/// A request stream: an NBD connection, a traced process, or a detected
/// sequential run. Used by policies that keep per-stream history.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StreamId(pub u32);

/// Why a request failed. Maps onto an errno for NBD.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IoError {
    /// Misaligned, oversized or out-of-range request (EINVAL).
    #[error("invalid request (EINVAL)")]
    Invalid,
    /// The device failed (EIO).
    #[error("I/O error (EIO)")]
    Io,
    /// No space left where the target needed it (ENOSPC).
    #[error("no space (ENOSPC)")]
    NoSpace,
    /// A write to something read-only, such as a read-only snapshot (EROFS).
    #[error("read-only (EROFS)")]
    ReadOnly,
}

impl IoError {
    /// The errno value to hand to a client.
    pub const fn errno(self) -> i32 {
        match self {
            IoError::Invalid => 22,
            IoError::Io => 5,
            IoError::NoSpace => 28,
            IoError::ReadOnly => 30,
        }
    }
}

/// A request travelling down the stack. (Its `Debug` shows a payload's
/// length, not its bytes: an assertion message stays one line.)
#[derive(Clone)]
pub struct Request {
    /// Assigned by the caller of this layer.
    pub id: ReqId,
    /// What to do.
    pub op: Op,
    /// Byte offset in the receiving layer's address space (0 for flush).
    pub offset_bytes: u64,
    /// Byte length (0 for flush).
    pub length_bytes: u32,
    /// Forced unit access: durable when it completes.
    pub fua: bool,
    /// The stream the request belongs to.
    pub stream: StreamId,
    /// The payload of a write in data mode; `None` otherwise.
    pub data: Option<Bytes>,
    /// Work a target does for itself (log writes, destage, cleaning,
    /// checkpoints), not on behalf of the request being handled when it was
    /// emitted: the live runtime performs it off the client's thread, so no
    /// client waits for I/O that is not its own. Layers below pass it on.
    pub background: bool,
}

/// A payload in `Debug` output: its length, not its bytes.
struct PayloadLen<'a>(&'a Option<Bytes>);

impl std::fmt::Debug for PayloadLen<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(b) => write!(f, "Some(<{} bytes>)", b.len()),
            None => write!(f, "None"),
        }
    }
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("id", &self.id)
            .field("op", &self.op)
            .field("offset_bytes", &self.offset_bytes)
            .field("length_bytes", &self.length_bytes)
            .field("fua", &self.fua)
            .field("stream", &self.stream)
            .field("data", &PayloadLen(&self.data))
            .field("background", &self.background)
            .finish()
    }
}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completion")
            .field("id", &self.id)
            .field("result", &self.result)
            .field("data", &PayloadLen(&self.data))
            .finish()
    }
}

impl Request {
    /// A request without payload.
    pub fn new(id: ReqId, op: Op, offset_bytes: u64, length_bytes: u32) -> Request {
        Request {
            id,
            op,
            offset_bytes,
            length_bytes,
            fua: false,
            stream: StreamId(0),
            data: None,
            background: false,
        }
    }

    /// A write carrying `data`.
    pub fn write(id: ReqId, offset_bytes: u64, data: Bytes) -> Request {
        let length_bytes = u32::try_from(data.len()).expect("write payload fits u32");
        Request { data: Some(data), ..Request::new(id, Op::Write, offset_bytes, length_bytes) }
    }

    /// One past the last byte.
    pub fn end_bytes(&self) -> u64 {
        self.offset_bytes + u64::from(self.length_bytes)
    }

    /// The payload bytes `[within, within + length)` for a lower request:
    /// the whole payload, moved out, when that is all of it (slicing or
    /// cloning a fresh `Bytes` makes it shared: an allocation and
    /// reference counts per write), else a slice (the payload stays).
    pub fn take_data_piece(&mut self, within: usize, length: usize) -> Option<Bytes> {
        if within == 0 && self.data.as_ref().is_some_and(|d| d.len() == length) {
            return self.data.take();
        }
        self.data.as_ref().map(|d| d.slice(within..within + length))
    }

    /// Checks alignment, size and range against a device of `size_bytes`.
    /// A flush must have offset and length zero.
    pub fn validate(&self, size_bytes: u64) -> Result<(), IoError> {
        if self.op == Op::Flush {
            return if self.offset_bytes == 0 && self.length_bytes == 0 {
                Ok(())
            } else {
                Err(IoError::Invalid)
            };
        }
        let aligned = self.offset_bytes.is_multiple_of(SECTOR_BYTES)
            && u64::from(self.length_bytes) % SECTOR_BYTES == 0;
        let sized = self.length_bytes > 0 && self.length_bytes <= REQUEST_BYTES_MAX;
        let in_range =
            self.offset_bytes.checked_add(u64::from(self.length_bytes)).is_some_and(|end| end <= size_bytes);
        let payload_ok = match (&self.data, self.op) {
            (Some(d), Op::Write) => d.len() == self.length_bytes as usize,
            (Some(_), _) => false,
            (None, _) => true,
        };
        if aligned && sized && in_range && payload_ok {
            Ok(())
        } else {
            Err(IoError::Invalid)
        }
    }
}

/// The answer to a [`Request`]. (`Debug` shows a payload's length only.)
#[derive(Clone)]
pub struct Completion {
    /// The id of the request this completes.
    pub id: ReqId,
    /// Success, or why not.
    pub result: Result<(), IoError>,
    /// The bytes read, for a successful read in data mode.
    pub data: Option<Bytes>,
}

impl Completion {
    /// A successful completion without data.
    pub fn ok(id: ReqId) -> Completion {
        Completion { id, result: Ok(()), data: None }
    }

    /// A failed completion.
    pub fn err(id: ReqId, e: IoError) -> Completion {
        Completion { id, result: Err(e), data: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_shows_a_payloads_length_not_its_bytes() {
        let r = Request::write(ReqId(7), 4096, Bytes::from(vec![0xAB; 1 << 20]));
        let text = format!("{r:?}");
        assert!(text.contains("<1048576 bytes>") && text.contains("offset_bytes: 4096"), "{text}");
        assert!(text.len() < 300, "{text}");
        let c = Completion { id: ReqId(7), result: Ok(()), data: Some(Bytes::from(vec![1; 512])) };
        assert!(format!("{c:?}").contains("<512 bytes>"));
    }

    #[test]
    fn validate_rejects_misaligned_oversized_and_out_of_range() {
        let size = 1 << 20;
        let ok = Request::new(ReqId(1), Op::Read, 512, 4096);
        assert_eq!(ok.validate(size), Ok(()));
        assert_eq!(Request::new(ReqId(1), Op::Read, 100, 512).validate(size), Err(IoError::Invalid));
        assert_eq!(Request::new(ReqId(1), Op::Read, 0, 100).validate(size), Err(IoError::Invalid));
        assert_eq!(Request::new(ReqId(1), Op::Read, 0, 0).validate(size), Err(IoError::Invalid));
        assert_eq!(Request::new(ReqId(1), Op::Read, size, 512).validate(size), Err(IoError::Invalid));
        assert_eq!(
            Request::new(ReqId(1), Op::Read, u64::MAX - 511, 512).validate(u64::MAX),
            Err(IoError::Invalid)
        );
        let big = Request::new(ReqId(1), Op::Write, 0, REQUEST_BYTES_MAX + 512);
        assert_eq!(big.validate(u64::MAX), Err(IoError::Invalid));
        assert_eq!(Request::new(ReqId(1), Op::Flush, 0, 0).validate(size), Ok(()));
        assert_eq!(Request::new(ReqId(1), Op::Flush, 0, 512).validate(size), Err(IoError::Invalid));
        let short =
            Request { data: Some(Bytes::from(vec![0; 512])), ..Request::new(ReqId(1), Op::Write, 0, 1024) };
        assert_eq!(short.validate(size), Err(IoError::Invalid));
    }

    #[test]
    fn a_data_piece_is_a_slice_unless_it_is_the_whole_payload() {
        let payload: Vec<u8> = (0..=255u8).cycle().take(1024).collect();
        let mut r = Request {
            data: Some(Bytes::from(payload.clone())),
            ..Request::new(ReqId(1), Op::Write, 0, 1024)
        };
        assert_eq!(r.take_data_piece(512, 512).as_deref(), Some(&payload[512..]));
        assert!(r.data.is_some(), "a part leaves the payload in place");
        assert_eq!(r.take_data_piece(0, 1024).as_deref(), Some(&payload[..]));
        assert!(r.data.is_none(), "the whole payload is moved out");
        assert_eq!(r.take_data_piece(0, 1024), None);
    }

    #[test]
    fn op_codes_round_trip() {
        for op in [Op::Read, Op::Write, Op::Flush, Op::Trim, Op::WriteZeroes] {
            assert_eq!(Op::from_code(op.code()), Some(op));
        }
        assert_eq!(Op::from_code('x'), None);
    }
}
