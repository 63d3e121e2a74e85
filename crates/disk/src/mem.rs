//! A sparse in-memory device: chunks are allocated on first write and
//! unwritten sectors read as zeroes.

use crate::BlockDevice;
use std::collections::HashMap;
use std::io;
use std::sync::Mutex;

const CHUNK_BYTES: u64 = 64 * 1024;

/// A sparse memory device of fixed size.
pub struct MemDevice {
    size_bytes: u64,
    chunk_bytes: u64,
    chunks: Mutex<HashMap<u64, Box<[u8]>>>,
}

impl MemDevice {
    /// An all-zero device of `size_bytes`.
    pub fn new(size_bytes: u64) -> MemDevice {
        MemDevice::with_chunk_bytes(size_bytes, CHUNK_BYTES)
    }

    /// [`MemDevice::new`] allocating `chunk_bytes` at a time (64 KiB by
    /// default; smaller for a few scattered writes).
    pub fn with_chunk_bytes(size_bytes: u64, chunk_bytes: u64) -> MemDevice {
        assert!(chunk_bytes > 0, "a chunk holds bytes");
        MemDevice { size_bytes, chunk_bytes, chunks: Mutex::new(HashMap::new()) }
    }

    fn check(&self, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        match offset_bytes.checked_add(length_bytes) {
            Some(end) if end <= self.size_bytes => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("memory device: range {offset_bytes}+{length_bytes} past end {}", self.size_bytes),
            )),
        }
    }

    /// Applies `f(chunk, offset_in_chunk, range_in_request)` over the chunks
    /// covering the range; `alloc` says whether to create missing chunks.
    fn for_chunks(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        alloc: bool,
        mut f: impl FnMut(Option<&mut Box<[u8]>>, usize, std::ops::Range<usize>),
    ) {
        let mut chunks = self.chunks.lock().expect("mem device lock");
        let mut pos = offset_bytes;
        let end = offset_bytes + length_bytes;
        while pos < end {
            let index = pos / self.chunk_bytes;
            let within = (pos % self.chunk_bytes) as usize;
            let n = (self.chunk_bytes - within as u64).min(end - pos) as usize;
            let range = (pos - offset_bytes) as usize..(pos - offset_bytes) as usize + n;
            let chunk = if alloc {
                Some(
                    chunks
                        .entry(index)
                        .or_insert_with(|| vec![0u8; self.chunk_bytes as usize].into_boxed_slice()),
                )
            } else {
                chunks.get_mut(&index)
            };
            f(chunk, within, range);
            pos += n as u64;
        }
    }
}

impl BlockDevice for MemDevice {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> io::Result<()> {
        self.check(offset_bytes, buf.len() as u64)?;
        self.for_chunks(offset_bytes, buf.len() as u64, false, |chunk, within, range| match chunk {
            Some(c) => buf[range.clone()].copy_from_slice(&c[within..within + range.len()]),
            None => buf[range].fill(0),
        });
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> io::Result<()> {
        self.check(offset_bytes, buf.len() as u64)?;
        self.for_chunks(offset_bytes, buf.len() as u64, true, |chunk, within, range| {
            let c = chunk.expect("allocated");
            c[within..within + range.len()].copy_from_slice(&buf[range]);
        });
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn trim(&self, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        self.write_zeroes(offset_bytes, length_bytes)
    }

    fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        self.check(offset_bytes, length_bytes)?;
        self.for_chunks(offset_bytes, length_bytes, false, |chunk, within, range| {
            if let Some(c) = chunk {
                c[within..within + range.len()].fill(0);
            }
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_reads_zero_writes_stick_across_chunks_and_trim_zeroes() {
        let d = MemDevice::new(1 << 20);
        let mut buf = vec![1u8; 4096];
        d.read_at(&mut buf, 0).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        d.write_at(&data, 1000).unwrap();
        let mut back = vec![0u8; data.len()];
        d.read_at(&mut back, 1000).unwrap();
        assert_eq!(back, data);
        d.trim(65536, 512).unwrap();
        let mut z = vec![9u8; 512];
        d.read_at(&mut z, 65536).unwrap();
        assert!(z.iter().all(|&b| b == 0));
        assert!(d.write_at(&[0; 512], (1 << 20) - 511).is_err());
    }
}
