//! A write recorder in the spirit of dm-log-writes: every write, trim, zero
//! and flush that reaches the device is appended to a log, in completion
//! order, with its data. Any prefix of the log can be replayed onto a fresh
//! device to see exactly what a crash at that point would have left, or
//! what it would have left had the prefix's last write been torn
//! ([`Tear`]).

use crate::{BlockDevice, MemDevice};
use bytes::Bytes;
use std::io;
use std::sync::{Arc, Mutex};

/// What one log entry did.
#[derive(Clone, Debug, PartialEq)]
pub enum LogOp {
    /// Data written at an offset.
    Write {
        /// Byte offset.
        offset_bytes: u64,
        /// The bytes.
        data: Bytes,
    },
    /// A range trimmed (reads back zero).
    Trim {
        /// Byte offset.
        offset_bytes: u64,
        /// Byte length.
        length_bytes: u64,
    },
    /// A range zeroed.
    Zero {
        /// Byte offset.
        offset_bytes: u64,
        /// Byte length.
        length_bytes: u64,
    },
    /// A flush completed: everything before it is durable.
    Flush,
    /// A marker placed by a test (for example "upper write N acknowledged").
    Mark(u64),
}

/// How the last write of a log prefix is torn by a crash during it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tear {
    /// Only its first sector reached the device (the rest holds what was
    /// there before).
    FirstSector,
    /// Its whole range reads back as bytes no one wrote (each byte of the
    /// write inverted): a sector left unreadable, which a checksum refuses.
    Garbage,
}

/// One entry, numbered from zero.
#[derive(Clone, Debug, PartialEq)]
pub struct LogEntry {
    /// Position in the log.
    pub index: u64,
    /// What happened.
    pub op: LogOp,
}

/// The shared log.
#[derive(Clone, Default)]
pub struct WriteLog {
    entries: Arc<Mutex<Vec<LogEntry>>>,
}

impl WriteLog {
    /// A copy of every entry so far.
    pub fn entries(&self) -> Vec<LogEntry> {
        self.entries.lock().expect("log lock").clone()
    }

    /// Number of entries so far.
    pub fn len(&self) -> usize {
        self.entries.lock().expect("log lock").len()
    }

    /// Whether the log is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends a marker.
    pub fn mark(&self, tag: u64) {
        self.push(LogOp::Mark(tag));
    }

    pub(crate) fn push(&self, op: LogOp) {
        let mut e = self.entries.lock().expect("log lock");
        let index = e.len() as u64;
        e.push(LogEntry { index, op });
    }

    /// Indices just after each flush: the cut points where everything
    /// before is durable.
    pub fn flush_points(&self) -> Vec<usize> {
        let e = self.entries.lock().expect("log lock");
        e.iter().enumerate().filter(|(_, x)| x.op == LogOp::Flush).map(|(i, _)| i + 1).collect()
    }

    /// Applies the first `count` entries onto `dev` (a copy of the device
    /// as it was when recording started), flushing `dev` where the log
    /// flushed.
    pub fn replay_prefix(&self, count: usize, dev: &dyn BlockDevice) -> io::Result<()> {
        let e = self.entries.lock().expect("log lock");
        assert!(count <= e.len(), "prefix {count} longer than the log ({})", e.len());
        for entry in &e[..count] {
            match &entry.op {
                LogOp::Write { offset_bytes, data } => dev.write_at(data, *offset_bytes)?,
                LogOp::Trim { offset_bytes, length_bytes } => dev.trim(*offset_bytes, *length_bytes)?,
                LogOp::Zero { offset_bytes, length_bytes } => {
                    dev.write_zeroes(*offset_bytes, *length_bytes)?
                }
                LogOp::Flush => dev.flush()?,
                LogOp::Mark(_) => {}
            }
        }
        Ok(())
    }

    /// A fresh memory device of `size_bytes` holding `base` (if any) plus
    /// the first `count` entries.
    pub fn image_at(&self, count: usize, size_bytes: u64, base: Option<&MemDevice>) -> io::Result<MemDevice> {
        let dev = MemDevice::new(size_bytes);
        if let Some(b) = base {
            b.copy_to(&dev)?;
        }
        self.replay_prefix(count, &dev)?;
        Ok(dev)
    }

    /// [`WriteLog::image_at`] with the `count`-th entry (the prefix's last)
    /// torn as `tear` says; `None` if that entry is not a write, or if the
    /// tear would leave what the whole write does (a one-sector write's
    /// first sector).
    pub fn image_torn_at(
        &self,
        count: usize,
        size_bytes: u64,
        base: Option<&MemDevice>,
        tear: Tear,
    ) -> io::Result<Option<MemDevice>> {
        let Some(last) = count.checked_sub(1) else { return Ok(None) };
        let LogOp::Write { offset_bytes, data } = self.entries.lock().expect("log lock")[last].op.clone()
        else {
            return Ok(None);
        };
        let torn: Vec<u8> = match tear {
            Tear::FirstSector if data.len() <= 512 => return Ok(None),
            Tear::FirstSector => data[..512].to_vec(),
            Tear::Garbage => data.iter().map(|b| !b).collect(),
        };
        let dev = self.image_at(last, size_bytes, base)?;
        dev.write_at(&torn, offset_bytes)?;
        Ok(Some(dev))
    }
}

impl MemDevice {
    /// Copies every allocated chunk of `self` onto `other` (same size).
    pub fn copy_to(&self, other: &MemDevice) -> io::Result<()> {
        assert_eq!(self.size_bytes(), other.size_bytes());
        let mut buf = vec![0u8; 1 << 20];
        let mut pos = 0;
        while pos < self.size_bytes() {
            let n = (self.size_bytes() - pos).min(buf.len() as u64) as usize;
            self.read_at(&mut buf[..n], pos)?;
            if buf[..n].iter().any(|&b| b != 0) {
                other.write_at(&buf[..n], pos)?;
            }
            pos += n as u64;
        }
        Ok(())
    }
}

/// Wraps a device and records every change that completes on it.
pub struct Recorder<D> {
    inner: D,
    log: WriteLog,
}

impl<D: BlockDevice> Recorder<D> {
    /// Records onto a new log.
    pub fn new(inner: D) -> Recorder<D> {
        Recorder { inner, log: WriteLog::default() }
    }

    /// The log (shared; clones see later entries too).
    pub fn log(&self) -> WriteLog {
        self.log.clone()
    }

    /// The wrapped device.
    pub fn inner(&self) -> &D {
        &self.inner
    }
}

impl<D: BlockDevice> BlockDevice for Recorder<D> {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }

    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset_bytes)
    }

    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> io::Result<()> {
        self.inner.write_at(buf, offset_bytes)?;
        self.log.push(LogOp::Write { offset_bytes, data: Bytes::copy_from_slice(buf) });
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        self.inner.flush()?;
        self.log.push(LogOp::Flush);
        Ok(())
    }

    fn trim(&self, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        self.inner.trim(offset_bytes, length_bytes)?;
        self.log.push(LogOp::Trim { offset_bytes, length_bytes });
        Ok(())
    }

    fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        self.inner.write_zeroes(offset_bytes, length_bytes)?;
        self.log.push(LogOp::Zero { offset_bytes, length_bytes });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaying_a_prefix_reproduces_the_device_at_that_point() {
        let rec = Recorder::new(MemDevice::new(1 << 16));
        rec.write_at(&[1; 512], 0).unwrap();
        rec.flush().unwrap();
        rec.write_at(&[2; 512], 0).unwrap();
        rec.trim(512, 512).unwrap();
        let log = rec.log();
        assert_eq!(log.flush_points(), vec![2]);
        let at_flush = log.image_at(2, 1 << 16, None).unwrap();
        let mut b = [0u8; 512];
        at_flush.read_at(&mut b, 0).unwrap();
        assert_eq!(b, [1; 512]);
        let all = log.image_at(log.len(), 1 << 16, None).unwrap();
        all.read_at(&mut b, 0).unwrap();
        assert_eq!(b, [2; 512]);
        let none = log.image_at(0, 1 << 16, None).unwrap();
        none.read_at(&mut b, 0).unwrap();
        assert_eq!(b, [0; 512]);
    }

    #[test]
    fn a_torn_last_write_leaves_its_first_sector_or_garbage() {
        let rec = Recorder::new(MemDevice::new(1 << 16));
        rec.write_at(&[1; 1024], 0).unwrap();
        rec.flush().unwrap();
        rec.write_at(&[2; 1024], 0).unwrap();
        rec.write_at(&[3; 512], 4096).unwrap();
        let log = rec.log();
        let read = |d: &MemDevice, at: u64| {
            let mut b = [0u8; 512];
            d.read_at(&mut b, at).unwrap();
            b[0]
        };
        let first = log.image_torn_at(3, 1 << 16, None, Tear::FirstSector).unwrap().expect("a write");
        assert_eq!((read(&first, 0), read(&first, 512)), (2, 1));
        let garbage = log.image_torn_at(3, 1 << 16, None, Tear::Garbage).unwrap().expect("a write");
        assert_eq!((read(&garbage, 0), read(&garbage, 512)), (!2, !2));
        assert!(log.image_torn_at(4, 1 << 16, None, Tear::FirstSector).unwrap().is_none(), "one sector");
        let one = log.image_torn_at(4, 1 << 16, None, Tear::Garbage).unwrap().expect("a write");
        assert_eq!((read(&one, 0), read(&one, 4096)), (2, !3));
        assert!(log.image_torn_at(2, 1 << 16, None, Tear::Garbage).unwrap().is_none(), "a flush");
        assert!(log.image_torn_at(0, 1 << 16, None, Tear::Garbage).unwrap().is_none());
    }
}
