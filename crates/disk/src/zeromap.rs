//! Which pages of a file are known to read zeroes, so that a write-zeroes
//! of them needs no system call.
//!
//! A fresh thin pool on a sparse file zeroes the rest of every chunk it
//! writes first (`zero_new_chunks`); on tmpfs, which has no
//! `FALLOC_FL_ZERO_RANGE`, each of those is a hole punch, and punching a
//! hole that is already a hole still takes the inode's lock and walks the
//! page cache (about 1 us of system time each, two per first write: as
//! much as the 4 KiB data write itself). Here one bit per 4 KiB page says
//! "may hold non-zero bytes"; a clear bit is a page known to read zeroes.
//!
//! The map is conservative under concurrency without a lock: a write sets
//! its pages' bits *after* its data is in the file, a zeroing clears them
//! *before* it zeroes (and sets them again if it failed), so whatever the
//! interleaving with a write to the same pages, a page whose bit is clear
//! reads zeroes. It is built at open from the file's holes
//! (`SEEK_DATA`/`SEEK_HOLE`) and trusts that nobody else writes the file
//! while it is open (it is only used on opens that hold the device's
//! exclusive lock).

use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};

/// One bit per this many bytes.
pub(crate) const PAGE_BYTES: u64 = 4096;
/// Files up to this size are mapped (a 2 MiB map); larger ones are not.
pub(crate) const MAPPED_BYTES_MAX: u64 = 64 << 30;

/// See the module docs.
pub(crate) struct ZeroMap {
    /// Bit `p % 64` of word `p / 64`: page `p` may hold non-zero bytes.
    words: Vec<AtomicU64>,
    size_bytes: u64,
}

impl ZeroMap {
    /// The map of `file` (`size_bytes` long): pages in its holes are known
    /// zero, every other page may hold data. `None` if the file is too
    /// large or the file system cannot say where its holes are.
    pub(crate) fn scan(file: &std::fs::File, size_bytes: u64) -> Option<ZeroMap> {
        if size_bytes > MAPPED_BYTES_MAX {
            return None;
        }
        let pages = size_bytes.div_ceil(PAGE_BYTES);
        let map = ZeroMap { words: (0..pages.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(), size_bytes };
        let fd = file.as_raw_fd();
        let mut pos = 0u64;
        while pos < size_bytes {
            // SAFETY: lseek on a valid descriptor; it only moves the file
            // offset, which this crate never uses (pread/pwrite).
            let data = unsafe { libc::lseek(fd, pos as libc::off_t, libc::SEEK_DATA) };
            if data < 0 {
                // ENXIO: no data past `pos`; anything else: no hole support.
                let e = std::io::Error::last_os_error();
                return (e.raw_os_error() == Some(libc::ENXIO)).then_some(map);
            }
            // SAFETY: as above.
            let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
            if hole <= data {
                return None;
            }
            let (data, hole) = (data as u64, (hole as u64).min(size_bytes));
            map.set(data, hole - data);
            pos = hole;
        }
        Some(map)
    }

    /// Pages `[first, end)` touched by `length_bytes` at `offset_bytes`.
    fn touched(&self, offset_bytes: u64, length_bytes: u64) -> (u64, u64) {
        let end_bytes = offset_bytes.saturating_add(length_bytes).min(self.size_bytes);
        (offset_bytes / PAGE_BYTES, end_bytes.div_ceil(PAGE_BYTES))
    }

    /// Pages wholly inside the range.
    fn covered(&self, offset_bytes: u64, length_bytes: u64) -> (u64, u64) {
        let end_bytes = offset_bytes.saturating_add(length_bytes).min(self.size_bytes);
        // The file's last page ends at the file's end, even if short.
        let end = if end_bytes == self.size_bytes {
            end_bytes.div_ceil(PAGE_BYTES)
        } else {
            end_bytes / PAGE_BYTES
        };
        (offset_bytes.div_ceil(PAGE_BYTES), end)
    }

    /// Runs `f(word index, mask)` over the words of pages `[first, end)`.
    fn for_words(first: u64, end: u64, mut f: impl FnMut(usize, u64)) {
        let mut p = first;
        while p < end {
            let (w, bit) = (p / 64, p % 64);
            let n = (end - p).min(64 - bit);
            let mask = if n == 64 { u64::MAX } else { ((1u64 << n) - 1) << bit };
            f(w as usize, mask);
            p += n;
        }
    }

    /// Data was written over the range: its pages may hold non-zero bytes.
    /// Call after the write.
    pub(crate) fn set(&self, offset_bytes: u64, length_bytes: u64) {
        let (first, end) = self.touched(offset_bytes, length_bytes);
        Self::for_words(first, end, |w, m| {
            self.words[w].fetch_or(m, Ordering::Release);
        });
    }

    /// The range is about to be zeroed: its whole pages will read zeroes.
    /// Call before the zeroing; [`ZeroMap::set`] the range again if it fails.
    pub(crate) fn clear(&self, offset_bytes: u64, length_bytes: u64) {
        let (first, end) = self.covered(offset_bytes, length_bytes);
        Self::for_words(first, end, |w, m| {
            self.words[w].fetch_and(!m, Ordering::Release);
        });
    }

    /// Whether every page the range touches is known to read zeroes.
    pub(crate) fn is_zero(&self, offset_bytes: u64, length_bytes: u64) -> bool {
        let (first, end) = self.touched(offset_bytes, length_bytes);
        let mut zero = true;
        Self::for_words(first, end, |w, m| zero &= self.words[w].load(Ordering::Acquire) & m == 0);
        zero
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pages: u64) -> ZeroMap {
        ZeroMap {
            words: (0..pages.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            size_bytes: pages * PAGE_BYTES,
        }
    }

    #[test]
    fn a_write_marks_every_page_it_touches_and_a_zeroing_clears_only_whole_pages() {
        let m = map(200);
        assert!(m.is_zero(0, 200 * PAGE_BYTES));
        m.set(PAGE_BYTES * 63 + 100, PAGE_BYTES); // pages 63 and 64, across a word
        assert!(!m.is_zero(PAGE_BYTES * 63, 1));
        assert!(!m.is_zero(PAGE_BYTES * 64 + 4000, 1));
        assert!(m.is_zero(PAGE_BYTES * 65, PAGE_BYTES * 100));
        m.clear(PAGE_BYTES * 63 + 1, PAGE_BYTES * 2); // page 64 whole, 63 not
        assert!(!m.is_zero(PAGE_BYTES * 63, PAGE_BYTES));
        assert!(m.is_zero(PAGE_BYTES * 64, PAGE_BYTES));
        m.clear(0, 200 * PAGE_BYTES);
        assert!(m.is_zero(0, 200 * PAGE_BYTES));
    }

    #[test]
    fn the_scan_finds_the_data_of_a_sparse_file() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sparse.img");
        let f =
            std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&p).unwrap();
        f.set_len(8 << 20).unwrap();
        f.write_all_at(&[7; 4096], 3 << 20).unwrap();
        let Some(m) = ZeroMap::scan(&f, 8 << 20) else {
            eprintln!("this file system does not report holes; nothing to test");
            return;
        };
        assert!(!m.is_zero(3 << 20, 4096), "the written page");
        assert!(m.is_zero(6 << 20, 1 << 20), "far from the written page: a hole");
    }
}
