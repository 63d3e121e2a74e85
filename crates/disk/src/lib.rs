//! Block devices for layoutd, and the one function that executes a
//! [`Request`] against one.
//!
//! - [`FileDevice`]: a regular file or a block device, optionally O_DIRECT.
//! - [`MemDevice`]: a sparse in-memory device (unwritten sectors read zero).
//! - [`Recorder`]: wraps a device and logs every write, trim, zero and flush
//!   in order (like dm-log-writes); [`WriteLog::replay_prefix`] rebuilds the
//!   device as it was after any prefix of that log, for crash tests.
//! - [`OverlayDevice`]: copy-on-write over a device; a recording one can be
//!   committed (its writes replayed onto the device in order, with their
//!   flushes) and then passes every request through.
//!
//! Devices are `Sync`: runtimes call them from several threads at once.
//! This crate never interprets what it stores.
#![warn(missing_docs)]

mod concat;
mod file;
mod mem;
mod null;
mod overlay;
mod recorder;
mod zeromap;

pub use concat::ConcatDevice;
pub use file::FileDevice;
pub use mem::MemDevice;
pub use null::NullDevice;
pub use overlay::{OverlayDevice, OverlayStats};
pub use recorder::{LogEntry, LogOp, Recorder, Tear, WriteLog};

use bytes::Bytes;
use layoutd_core::{Completion, IoError, Op, Request};
use std::io;

/// A device that reads and writes bytes at offsets. Trim must leave the range
/// reading back as zeroes.
pub trait BlockDevice: Send + Sync {
    /// The device's size.
    fn size_bytes(&self) -> u64;
    /// Fills `buf` from `offset_bytes`.
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> io::Result<()>;
    /// Writes `buf` at `offset_bytes`.
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> io::Result<()>;
    /// Makes every completed write durable.
    fn flush(&self) -> io::Result<()>;
    /// Discards a range; it reads back as zeroes.
    fn trim(&self, offset_bytes: u64, length_bytes: u64) -> io::Result<()>;
    /// Writes zeroes over a range.
    fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> io::Result<()>;
}

impl<T: BlockDevice + ?Sized> BlockDevice for std::sync::Arc<T> {
    fn size_bytes(&self) -> u64 {
        (**self).size_bytes()
    }
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> io::Result<()> {
        (**self).read_at(buf, offset_bytes)
    }
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> io::Result<()> {
        (**self).write_at(buf, offset_bytes)
    }
    fn flush(&self) -> io::Result<()> {
        (**self).flush()
    }
    fn trim(&self, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        (**self).trim(offset_bytes, length_bytes)
    }
    fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        (**self).write_zeroes(offset_bytes, length_bytes)
    }
}

/// A window onto part of a device: offsets are shifted by `start_bytes`.
/// The stack's bottom device is the formatted device past its superblock.
pub struct SliceDevice<D> {
    inner: D,
    start_bytes: u64,
    size_bytes: u64,
}

impl<D: BlockDevice> SliceDevice<D> {
    /// `[start_bytes, start_bytes + size_bytes)` of `inner`.
    pub fn new(inner: D, start_bytes: u64, size_bytes: u64) -> SliceDevice<D> {
        assert!(start_bytes + size_bytes <= inner.size_bytes(), "slice within the device");
        SliceDevice { inner, start_bytes, size_bytes }
    }

    /// The device underneath.
    pub fn inner(&self) -> &D {
        &self.inner
    }
}

impl<D: BlockDevice> BlockDevice for SliceDevice<D> {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> io::Result<()> {
        self.inner.read_at(buf, self.start_bytes + offset_bytes)
    }
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> io::Result<()> {
        self.inner.write_at(buf, self.start_bytes + offset_bytes)
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    fn trim(&self, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        self.inner.trim(self.start_bytes + offset_bytes, length_bytes)
    }
    fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        self.inner.write_zeroes(self.start_bytes + offset_bytes, length_bytes)
    }
}

/// Performs `req` on `dev` and builds its completion. `with_data` chooses
/// whether reads return their bytes (data mode) or only complete (timing
/// mode). Invalid requests complete with EINVAL; device errors with their
/// kind ([`io_error_kind`]).
pub fn execute(dev: &dyn BlockDevice, req: &Request, with_data: bool) -> Completion {
    execute_io(dev, req, with_data).0
}

/// [`execute`], also returning the device's own error (with its message)
/// when the request failed, for the runtime to report.
pub fn execute_io(dev: &dyn BlockDevice, req: &Request, with_data: bool) -> (Completion, Option<io::Error>) {
    if req.validate(dev.size_bytes()).is_err() {
        return (Completion::err(req.id, IoError::Invalid), None);
    }
    let len = u64::from(req.length_bytes);
    let result = match req.op {
        Op::Read if with_data => {
            let mut buf = vec![0u8; req.length_bytes as usize];
            return match dev.read_at(&mut buf, req.offset_bytes) {
                Ok(()) => (Completion { id: req.id, result: Ok(()), data: Some(Bytes::from(buf)) }, None),
                Err(e) => (Completion::err(req.id, io_error_kind(&e)), Some(e)),
            };
        }
        Op::Read => Ok(()),
        Op::Write => match &req.data {
            Some(d) => dev.write_at(d, req.offset_bytes),
            None => Ok(()),
        },
        Op::Flush => dev.flush(),
        Op::Trim => dev.trim(req.offset_bytes, len),
        Op::WriteZeroes => dev.write_zeroes(req.offset_bytes, len),
    };
    let result = result.and_then(|()| if req.fua && req.op.is_modify() { dev.flush() } else { Ok(()) });
    match result {
        Ok(()) => (Completion::ok(req.id), None),
        Err(e) => (Completion::err(req.id, io_error_kind(&e)), Some(e)),
    }
}

/// The block-layer error a device error stands for: ENOSPC (a full or thin
/// host file system) stays "no space" so targets can retry it and clients
/// see ENOSPC, EINVAL stays invalid, everything else is EIO.
pub fn io_error_kind(e: &io::Error) -> IoError {
    match e.raw_os_error() {
        Some(libc::ENOSPC) => IoError::NoSpace,
        Some(libc::EINVAL) => IoError::Invalid,
        _ if e.kind() == io::ErrorKind::StorageFull => IoError::NoSpace,
        _ => IoError::Io,
    }
}

/// An error that names the device path and what went wrong.
pub(crate) fn path_error(path: &std::path::Path, what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {what}: {e}", path.display()))
}
