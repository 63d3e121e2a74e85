//! Which bytes of the bottom device are holes, for NBD block status
//! (`nbdinfo --map`, `nbdcopy`, `qemu-img convert` skip them).
//!
//! The bottom device is the members' data areas end to end; each member is
//! a file (or block device) whose data area starts at `data_start_bytes`.
//! A hole (SEEK_HOLE) in a member file reads as zeroes: never written, or
//! trimmed (trim punches holes). Anything this cannot tell (a block device,
//! an lseek error) is reported as data, which is always safe.

use std::fs::File;
use std::os::fd::AsRawFd;

/// One read-only descriptor per member, for lseek only.
pub struct Allocation {
    files: Vec<File>,
    /// Each member's `(start, length)` on the bottom device.
    extents: Vec<(u64, u64)>,
    data_start_bytes: u64,
}

impl Allocation {
    pub fn new(files: Vec<File>, extents: Vec<(u64, u64)>, data_start_bytes: u64) -> Allocation {
        assert_eq!(files.len(), extents.len());
        Allocation { files, extents, data_start_bytes }
    }

    /// Runs `(length, is_hole)`, in order, covering the bottom-device
    /// `(offset, length)` pieces in their order.
    pub fn runs_of(&self, pieces: &[(u64, u64)]) -> Vec<(u64, bool)> {
        let mut out = Vec::new();
        for &(offset, length) in pieces {
            self.append_runs(offset, length, &mut out);
        }
        out
    }

    fn append_runs(&self, offset: u64, length: u64, out: &mut Vec<(u64, bool)>) {
        let end = offset.saturating_add(length);
        let mut pos = offset;
        for ((start, len), file) in self.extents.iter().zip(&self.files) {
            let (a, b) = (pos.max(*start), end.min(start + len));
            if a >= b {
                continue;
            }
            let base = self.data_start_bytes + a - start;
            file_runs(file, base, base + (b - a), out);
            pos = b;
        }
        if pos < end {
            push(out, end - pos, false);
        }
    }
}

/// Appends a run, merging it into the last one of the same kind.
fn push(out: &mut Vec<(u64, bool)>, n: u64, hole: bool) {
    match out.last_mut() {
        Some((m, h)) if *h == hole => *m += n,
        _ => out.push((n, hole)),
    }
}

/// lseek(SEEK_DATA or SEEK_HOLE) from `pos`; `None` when there is no such
/// offset (ENXIO: no data past `pos`) or on any error.
fn seek(file: &File, pos: u64, whence: libc::c_int) -> Result<u64, i32> {
    // SAFETY: lseek on a descriptor this File owns; it only moves the
    // file position, which nothing else of this descriptor uses.
    let r = unsafe { libc::lseek(file.as_raw_fd(), pos as libc::off_t, whence) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(r as u64)
    }
}

/// The runs of file bytes `[a, b)`.
fn file_runs(file: &File, a: u64, b: u64, out: &mut Vec<(u64, bool)>) {
    let mut pos = a;
    while pos < b {
        let data = match seek(file, pos, libc::SEEK_DATA) {
            Ok(d) => d.min(b),
            Err(libc::ENXIO) => b, // a hole up to the end of the file
            Err(_) => break,       // unknown: data
        };
        if data > pos {
            push(out, data - pos, true);
            pos = data;
            continue;
        }
        let hole = match seek(file, pos, libc::SEEK_HOLE) {
            Ok(h) if h > pos => h.min(b),
            _ => b,
        };
        push(out, hole - pos, false);
        pos = hole;
    }
    if pos < b {
        push(out, b - pos, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn holes_and_data_across_two_members() {
        let dir = tempfile::tempdir().unwrap();
        let mk = |name: &str, data_at: &[u64]| {
            let p = dir.path().join(name);
            let f = File::create(&p).unwrap();
            f.set_len(4 << 20).unwrap();
            for &o in data_at {
                f.write_all_at(&[7u8; 65536], o).unwrap();
            }
            File::open(&p).unwrap()
        };
        // Data areas start at 1 MiB; each member holds 3 MiB of data area.
        let a = mk("a", &[1 << 20]); // data at bottom 0..64K
        let b = mk("b", &[(2 << 20) + 65536]); // data at bottom 3M+1M+64K
        let al = Allocation::new(vec![a, b], vec![(0, 3 << 20), (3 << 20, 3 << 20)], 1 << 20);
        let runs = al.runs_of(&[(0, 6 << 20)]);
        assert_eq!(runs.iter().map(|r| r.0).sum::<u64>(), 6 << 20);
        assert_eq!(runs[0], (65536, false), "{runs:?}");
        // Bottom 3M+1M+64K .. +64K is data in member b; everything else is a hole
        // (a file system may allocate in larger blocks, so compare loosely).
        let mut pos = 0;
        for &(n, hole) in &runs {
            let data_b = (pos..pos + n).contains(&((4 << 20) + 65536));
            if data_b {
                assert!(!hole, "{runs:?}");
            }
            pos += n;
        }
        assert!(runs.iter().any(|r| r.1), "some hole reported: {runs:?}");
        // Past the end: data (unknown), never a hole.
        assert_eq!(al.runs_of(&[(6 << 20, 512)]), vec![(512, false)]);
    }
}
