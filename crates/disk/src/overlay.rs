//! A copy-on-write overlay: reads come from the base device unless the
//! sector was written through the overlay; writes land in memory only. Lets
//! `inspect` run a target's recovery without modifying the device.
//!
//! A recording overlay ([`OverlayDevice::recording`]) also keeps every
//! write, trim, zero and flush in order (a [`WriteLog`]), so that a stack
//! brought up over it can be kept: [`OverlayDevice::commit`] replays them
//! onto the base, flushes where the bring-up flushed, and from then on the
//! overlay passes every request straight through. Dropping it uncommitted
//! leaves the base as it was (a refused open writes nothing).

use crate::recorder::{LogOp, WriteLog};
use crate::{BlockDevice, MemDevice};
use bytes::Bytes;
use std::collections::HashSet;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

const S: u64 = 512;

/// A read-only base with writes kept in memory, until committed.
pub struct OverlayDevice<D> {
    base: D,
    /// Set by [`OverlayDevice::commit`]: every request goes to `base`.
    through: AtomicBool,
    /// What was written through the overlay; `None` once committed.
    staged: Mutex<Option<Staged>>,
    base_reads: AtomicU64,
    base_read_bytes: AtomicU64,
}

struct Staged {
    upper: MemDevice,
    written: HashSet<u64>,
    /// Every change in order, for [`OverlayDevice::commit`] (recording only).
    log: Option<WriteLog>,
    log_bytes: u64,
}

/// What a recording overlay held and replayed, for reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OverlayStats {
    /// Reads that reached the base before the commit.
    pub base_reads: u64,
    /// Their bytes.
    pub base_read_bytes: u64,
    /// Entries of the log (writes, trims, zeroes, flushes).
    pub log_entries: u64,
    /// Bytes of data the log holds (what the commit writes).
    pub log_bytes: u64,
    /// Flushes among the entries.
    pub log_flushes: u64,
}

impl<D: BlockDevice> OverlayDevice<D> {
    /// An overlay over `base` that never writes it.
    pub fn new(base: D) -> OverlayDevice<D> {
        OverlayDevice::with_log(base, None)
    }

    /// An overlay over `base` that records what is written through it, so
    /// that [`OverlayDevice::commit`] can write it to `base`.
    pub fn recording(base: D) -> OverlayDevice<D> {
        OverlayDevice::with_log(base, Some(WriteLog::default()))
    }

    fn with_log(base: D, log: Option<WriteLog>) -> OverlayDevice<D> {
        // Recovery writes a few scattered blocks (map pages, checkpoints):
        // 64 KiB chunks would hold 16 times their bytes.
        let upper = MemDevice::with_chunk_bytes(base.size_bytes(), 4096);
        OverlayDevice {
            base,
            through: AtomicBool::new(false),
            staged: Mutex::new(Some(Staged { upper, written: HashSet::new(), log, log_bytes: 0 })),
            base_reads: AtomicU64::new(0),
            base_read_bytes: AtomicU64::new(0),
        }
    }

    /// Reads that reached the base and what the log holds so far.
    pub fn stats(&self) -> OverlayStats {
        let mut st = OverlayStats {
            base_reads: self.base_reads.load(Ordering::Relaxed),
            base_read_bytes: self.base_read_bytes.load(Ordering::Relaxed),
            ..OverlayStats::default()
        };
        let staged = self.staged.lock().expect("overlay lock");
        if let Some(log) = staged.as_ref().and_then(|s| s.log.as_ref()) {
            st.log_entries = log.len() as u64;
            st.log_flushes = log.flush_points().len() as u64;
            st.log_bytes = staged.as_ref().map_or(0, |s| s.log_bytes);
        }
        st
    }

    /// Writes everything recorded onto the base, in the order it was
    /// written through the overlay, flushing the base where a flush was
    /// recorded (so a crash during the commit leaves what a crash of the
    /// same requests made directly could have left); then frees the
    /// overlay's memory and passes every later request to the base.
    /// Returns what was replayed. Call with no request in flight. On an
    /// error the base holds a prefix of the log and the overlay stays as
    /// it was (reads still see every write).
    ///
    /// Panics on an overlay made with [`OverlayDevice::new`].
    pub fn commit(&self) -> io::Result<OverlayStats> {
        let st = self.stats();
        let mut staged = self.staged.lock().expect("overlay lock");
        let Some(s) = staged.as_ref() else { return Ok(st) };
        let log = s.log.as_ref().expect("only a recording overlay is committed");
        log.replay_prefix(log.len(), &self.base)?;
        *staged = None;
        self.through.store(true, Ordering::Release);
        Ok(st)
    }

    /// A change: `staged` on the overlay's memory until the commit, then
    /// `through` on the base.
    fn change(
        &self,
        staged: impl FnOnce(&mut Staged) -> io::Result<()>,
        through: impl FnOnce(&D) -> io::Result<()>,
    ) -> io::Result<()> {
        if !self.through.load(Ordering::Acquire) {
            if let Some(s) = self.staged.lock().expect("overlay lock").as_mut() {
                return staged(s);
            }
        }
        through(&self.base)
    }
}

impl Staged {
    fn mark(&mut self, offset_bytes: u64, length_bytes: u64, op: LogOp) {
        assert!(offset_bytes.is_multiple_of(S), "overlay works in sectors");
        assert!(length_bytes.is_multiple_of(S), "overlay works in sectors");
        self.written.extend(offset_bytes / S..(offset_bytes + length_bytes) / S);
        self.record(op);
    }

    /// A trim or zeroes (`op`) of a range: it reads zero.
    fn zero(&mut self, offset_bytes: u64, length_bytes: u64, op: LogOp) -> io::Result<()> {
        self.upper.write_zeroes(offset_bytes, length_bytes)?;
        self.mark(offset_bytes, length_bytes, op);
        Ok(())
    }

    fn record(&mut self, op: LogOp) {
        if let Some(log) = &self.log {
            if let LogOp::Write { data, .. } = &op {
                self.log_bytes += data.len() as u64;
            }
            log.push(op);
        }
    }
}

impl<D: BlockDevice> BlockDevice for OverlayDevice<D> {
    fn size_bytes(&self) -> u64 {
        self.base.size_bytes()
    }

    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> io::Result<()> {
        if self.through.load(Ordering::Acquire) {
            return self.base.read_at(buf, offset_bytes);
        }
        self.base.read_at(buf, offset_bytes)?;
        let staged = self.staged.lock().expect("overlay lock");
        let Some(s) = staged.as_ref() else { return Ok(()) };
        self.base_reads.fetch_add(1, Ordering::Relaxed);
        self.base_read_bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
        if s.written.is_empty() {
            return Ok(());
        }
        for (i, chunk) in buf.chunks_mut(S as usize).enumerate() {
            let at = offset_bytes + i as u64 * S;
            if s.written.contains(&(at / S)) {
                s.upper.read_at(chunk, at)?;
            }
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> io::Result<()> {
        self.change(
            |s| {
                s.upper.write_at(buf, offset_bytes)?;
                let op = LogOp::Write { offset_bytes, data: Bytes::copy_from_slice(buf) };
                s.mark(offset_bytes, buf.len() as u64, op);
                Ok(())
            },
            |base| base.write_at(buf, offset_bytes),
        )
    }

    fn flush(&self) -> io::Result<()> {
        self.change(
            |s| {
                s.record(LogOp::Flush);
                Ok(())
            },
            |base| base.flush(),
        )
    }

    fn trim(&self, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        let op = LogOp::Trim { offset_bytes, length_bytes };
        self.change(|s| s.zero(offset_bytes, length_bytes, op), |base| base.trim(offset_bytes, length_bytes))
    }

    fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        let op = LogOp::Zero { offset_bytes, length_bytes };
        self.change(
            |s| s.zero(offset_bytes, length_bytes, op),
            |base| base.write_zeroes(offset_bytes, length_bytes),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Recorder;
    use std::sync::Arc;

    #[test]
    fn writes_shadow_the_base_and_never_reach_it() {
        let base = std::sync::Arc::new(MemDevice::new(1 << 16));
        base.write_at(&[1; 1024], 0).unwrap();
        let o = OverlayDevice::new(base.clone());
        o.write_at(&[2; 512], 512).unwrap();
        let mut b = [0u8; 1024];
        o.read_at(&mut b, 0).unwrap();
        assert_eq!(&b[..512], &[1; 512]);
        assert_eq!(&b[512..], &[2; 512]);
        base.read_at(&mut b, 0).unwrap();
        assert_eq!(b, [1; 1024], "base untouched");
    }

    #[test]
    fn a_commit_replays_every_change_in_order_with_its_flushes_then_passes_through() {
        let direct = Recorder::new(MemDevice::new(1 << 16));
        let base = Arc::new(Recorder::new(MemDevice::new(1 << 16)));
        let o = OverlayDevice::recording(base.clone());
        let ops = |d: &dyn BlockDevice| {
            d.write_at(&[1; 1024], 0).unwrap();
            d.flush().unwrap();
            d.write_at(&[2; 512], 512).unwrap();
            d.trim(0, 512).unwrap();
            d.write_zeroes(4096, 512).unwrap();
            d.write_at(&[3; 512], 8192).unwrap();
            d.flush().unwrap();
        };
        ops(&direct);
        ops(&o);
        assert!(base.log().is_empty(), "nothing reaches the base before the commit");
        let mut b = [0u8; 1024];
        o.read_at(&mut b, 0).unwrap();
        assert_eq!((b[0], b[512]), (0, 2), "reads see the overlay's writes");
        let st = o.commit().unwrap();
        assert_eq!((st.log_entries, st.log_flushes, st.log_bytes), (7, 2, 2048));
        assert_eq!(base.log().entries(), direct.log().entries(), "the same changes and flushes, in order");
        o.write_at(&[4; 512], 0).unwrap();
        o.flush().unwrap();
        assert_eq!(base.log().len(), 9, "after the commit requests pass straight through");
        base.read_at(&mut b, 0).unwrap();
        assert_eq!((b[0], b[512]), (4, 2));
    }
}
