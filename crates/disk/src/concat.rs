//! Member devices laid end to end: the bottom device of a volume that spans
//! several disks (for example a physical DCD: log on one, data on another).
//! A request that crosses a boundary is split; flush flushes every member.

use crate::BlockDevice;
use std::io;
use std::sync::Arc;

/// Several devices as one address space.
pub struct ConcatDevice {
    members: Vec<Arc<dyn BlockDevice>>,
    /// Start of each member in the combined address space.
    starts: Vec<u64>,
    size_bytes: u64,
}

impl ConcatDevice {
    /// `members` in order.
    pub fn new(members: Vec<Arc<dyn BlockDevice>>) -> ConcatDevice {
        assert!(!members.is_empty(), "at least one member");
        let mut starts = Vec::with_capacity(members.len());
        let mut size_bytes = 0;
        for m in &members {
            starts.push(size_bytes);
            size_bytes += m.size_bytes();
        }
        ConcatDevice { members, starts, size_bytes }
    }

    /// Calls `f(member, offset within member, range within the request)` for
    /// each member piece of `[offset, offset + length)`.
    fn pieces(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        mut f: impl FnMut(&dyn BlockDevice, u64, std::ops::Range<usize>) -> io::Result<()>,
    ) -> io::Result<()> {
        let end =
            offset_bytes.checked_add(length_bytes).filter(|&e| e <= self.size_bytes).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("range {offset_bytes}+{length_bytes} past the end {}", self.size_bytes),
                )
            })?;
        let mut pos = offset_bytes;
        while pos < end {
            let i = self.starts.partition_point(|&s| s <= pos) - 1;
            let within = pos - self.starts[i];
            let n = (self.members[i].size_bytes() - within).min(end - pos);
            assert!(n > 0, "a member piece is never empty");
            let at = (pos - offset_bytes) as usize;
            f(&*self.members[i], within, at..at + n as usize)?;
            pos += n;
        }
        Ok(())
    }
}

impl BlockDevice for ConcatDevice {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> io::Result<()> {
        self.pieces(offset_bytes, buf.len() as u64, |m, at, r| m.read_at(&mut buf[r], at))
    }

    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> io::Result<()> {
        self.pieces(offset_bytes, buf.len() as u64, |m, at, r| m.write_at(&buf[r], at))
    }

    fn flush(&self) -> io::Result<()> {
        self.members.iter().try_for_each(|m| m.flush())
    }

    fn trim(&self, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        self.pieces(offset_bytes, length_bytes, |m, at, r| m.trim(at, r.len() as u64))
    }

    fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        self.pieces(offset_bytes, length_bytes, |m, at, r| m.write_zeroes(at, r.len() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemDevice;

    #[test]
    fn a_request_across_members_is_split_at_the_boundary() {
        let a = Arc::new(MemDevice::new(4096));
        let b = Arc::new(MemDevice::new(8192));
        let c = ConcatDevice::new(vec![a.clone(), b.clone()]);
        assert_eq!(c.size_bytes(), 12288);
        let data: Vec<u8> = (0..2048u32).map(|i| (i % 251) as u8).collect();
        c.write_at(&data, 3072).unwrap();
        let mut back = vec![0u8; 2048];
        c.read_at(&mut back, 3072).unwrap();
        assert_eq!(back, data);
        let mut tail_of_a = vec![0u8; 1024];
        a.read_at(&mut tail_of_a, 3072).unwrap();
        assert_eq!(tail_of_a, data[..1024]);
        let mut head_of_b = vec![0u8; 1024];
        b.read_at(&mut head_of_b, 0).unwrap();
        assert_eq!(head_of_b, data[1024..]);
        c.trim(3584, 1024).unwrap();
        c.read_at(&mut back, 3072).unwrap();
        assert!(back[512..1536].iter().all(|&x| x == 0));
        assert!(c.write_at(&[0; 512], 12288).is_err());
    }
}
