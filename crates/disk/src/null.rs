//! A device of a given size that stores nothing.

use crate::BlockDevice;

/// A device of a given size that stores nothing: every operation succeeds.
/// Reads give zeroes. The simulator's timing-only mode uses it (no request
/// carries data, so nothing is lost), and memory tests format huge volumes
/// on it.
pub struct NullDevice {
    size_bytes: u64,
}

impl NullDevice {
    /// A device of `size_bytes`.
    pub fn new(size_bytes: u64) -> NullDevice {
        NullDevice { size_bytes }
    }
}

impl BlockDevice for NullDevice {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }
    fn read_at(&self, buf: &mut [u8], _offset_bytes: u64) -> std::io::Result<()> {
        buf.fill(0);
        Ok(())
    }
    fn write_at(&self, _buf: &[u8], _offset_bytes: u64) -> std::io::Result<()> {
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn trim(&self, _offset_bytes: u64, _length_bytes: u64) -> std::io::Result<()> {
        Ok(())
    }
    fn write_zeroes(&self, _offset_bytes: u64, _length_bytes: u64) -> std::io::Result<()> {
        Ok(())
    }
}
