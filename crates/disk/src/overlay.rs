//! A copy-on-write overlay: reads come from the base device unless the
//! sector was written through the overlay; writes land in memory only. Lets
//! `inspect` run a target's recovery without modifying the device.

use crate::{BlockDevice, MemDevice};
use std::collections::HashSet;
use std::io;
use std::sync::Mutex;

const S: u64 = 512;

/// A read-only base with writes kept in memory.
pub struct OverlayDevice<D> {
    base: D,
    upper: MemDevice,
    written: Mutex<HashSet<u64>>,
}

impl<D: BlockDevice> OverlayDevice<D> {
    /// An overlay over `base`.
    pub fn new(base: D) -> OverlayDevice<D> {
        let size = base.size_bytes();
        OverlayDevice { base, upper: MemDevice::new(size), written: Mutex::new(HashSet::new()) }
    }

    fn mark(&self, offset_bytes: u64, length_bytes: u64) {
        assert!(offset_bytes.is_multiple_of(S), "overlay works in sectors");
        assert!(length_bytes.is_multiple_of(S), "overlay works in sectors");
        let mut w = self.written.lock().expect("overlay lock");
        w.extend(offset_bytes / S..(offset_bytes + length_bytes) / S);
    }
}

impl<D: BlockDevice> BlockDevice for OverlayDevice<D> {
    fn size_bytes(&self) -> u64 {
        self.base.size_bytes()
    }

    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> io::Result<()> {
        self.base.read_at(buf, offset_bytes)?;
        let w = self.written.lock().expect("overlay lock");
        if w.is_empty() {
            return Ok(());
        }
        for (i, chunk) in buf.chunks_mut(S as usize).enumerate() {
            let at = offset_bytes + i as u64 * S;
            if w.contains(&(at / S)) {
                self.upper.read_at(chunk, at)?;
            }
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> io::Result<()> {
        self.upper.write_at(buf, offset_bytes)?;
        self.mark(offset_bytes, buf.len() as u64);
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn trim(&self, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        self.write_zeroes(offset_bytes, length_bytes)
    }

    fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        self.upper.write_zeroes(offset_bytes, length_bytes)?;
        self.mark(offset_bytes, length_bytes);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
