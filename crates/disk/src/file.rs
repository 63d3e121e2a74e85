//! A regular file or block device, read and written with pread/pwrite.

use crate::zeromap::ZeroMap;
use crate::{path_error, BlockDevice};
use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// O_DIRECT needs buffers and offsets aligned to this.
const DIRECT_ALIGN_BYTES: usize = 4096;

/// A file-backed device.
pub struct FileDevice {
    file: File,
    path: PathBuf,
    size_bytes: u64,
    direct: bool,
    is_block_device: bool,
    /// O_DIRECT read-modify-write of a partial block must not interleave
    /// with any other write to that block (it writes back bytes it was not
    /// asked to): RMW takes this exclusively, aligned writes share it.
    rmw_lock: std::sync::RwLock<()>,
    /// Set once `FALLOC_FL_ZERO_RANGE` failed (tmpfs has none): later
    /// write-zeroes go straight to the fallback.
    no_zero_range: std::sync::atomic::AtomicBool,
    /// Pages known to read zeroes (regular files opened with the exclusive
    /// lock): zeroing them again makes no system call.
    zeros: Option<ZeroMap>,
    /// Write-zeroes answered from `zeros` alone.
    zeroings_skipped_count: std::sync::atomic::AtomicU64,
}

impl FileDevice {
    /// Opens `path` read-write. `direct` asks for O_DIRECT (bypassing the
    /// page cache); `exclusive` takes an advisory lock (`flock`) so a second
    /// `serve` of the same device is refused instead of corrupting it.
    pub fn open(path: &Path, direct: bool, exclusive: bool) -> io::Result<FileDevice> {
        let mut opts = OpenOptions::new();
        opts.read(true).write(true);
        if direct {
            opts.custom_flags(libc::O_DIRECT);
        }
        let file = opts.open(path).map_err(|e| path_error(path, "cannot open", e))?;
        if exclusive {
            // SAFETY: flock on a valid, owned descriptor.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc != 0 {
                let e = io::Error::last_os_error();
                return Err(if e.kind() == io::ErrorKind::WouldBlock {
                    io::Error::new(
                        io::ErrorKind::WouldBlock,
                        format!("{}: device is in use by another layoutd process (it holds the lock); stop it first", path.display()),
                    )
                } else {
                    path_error(path, "cannot lock", e)
                });
            }
        }
        let mut dev = Self::from_file(file, path, direct)?;
        if exclusive && !dev.is_block_device {
            // Nobody else may write it while we hold the lock: the map of
            // its zero pages stays true.
            dev.zeros = ZeroMap::scan(&dev.file, dev.size_bytes);
        }
        Ok(dev)
    }

    /// Opens `path` read-only, without a lock, for inspection.
    pub fn open_read_only(path: &Path) -> io::Result<FileDevice> {
        let file = File::open(path).map_err(|e| path_error(path, "cannot open", e))?;
        Self::from_file(file, path, false)
    }

    fn from_file(mut file: File, path: &Path, direct: bool) -> io::Result<FileDevice> {
        let is_block_device =
            file.metadata().map_err(|e| path_error(path, "cannot stat", e))?.file_type().is_block_device();
        let size_bytes = file.seek(SeekFrom::End(0)).map_err(|e| path_error(path, "cannot find size", e))?;
        Ok(FileDevice {
            file,
            path: path.to_path_buf(),
            size_bytes,
            direct,
            is_block_device,
            rmw_lock: Default::default(),
            no_zero_range: std::sync::atomic::AtomicBool::new(false),
            zeros: None,
            zeroings_skipped_count: Default::default(),
        })
    }

    /// The path it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn aligned(buf_ptr: *const u8, len: usize, offset: u64) -> bool {
        (buf_ptr as usize).is_multiple_of(DIRECT_ALIGN_BYTES)
            && len.is_multiple_of(DIRECT_ALIGN_BYTES)
            && offset.is_multiple_of(DIRECT_ALIGN_BYTES as u64)
    }

    fn zero_by_writing(&self, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        let chunk = AlignedBuf::zeroed(1 << 20);
        let mut pos = offset_bytes;
        let end = offset_bytes + length_bytes;
        while pos < end {
            let n = (end - pos).min(chunk.len() as u64) as usize;
            self.write_at(&chunk.as_slice()[..n], pos)?;
            pos += n as u64;
        }
        Ok(())
    }

    /// Zeroes a range with `fallocate(mode)` on a regular file, falling back
    /// to writing zeroes (block devices, or file systems without that mode).
    fn fallocate_or_write_zeroes(
        &self,
        mode: libc::c_int,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> io::Result<()> {
        let keep_size = mode | libc::FALLOC_FL_KEEP_SIZE;
        if !self.is_block_device && self.fallocate(keep_size, offset_bytes, length_bytes).is_ok() {
            return Ok(());
        }
        self.zero_by_writing(offset_bytes, length_bytes)
    }

    /// Runs `zero` (a trim or write-zeroes of the range), keeping the zero
    /// map true; with `skip_known`, not if the range is known to read
    /// zeroes already (a trim always goes down: it also frees space).
    fn zeroing(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        skip_known: bool,
        zero: impl FnOnce() -> io::Result<()>,
    ) -> io::Result<()> {
        let Some(z) = &self.zeros else { return zero() };
        if skip_known && z.is_zero(offset_bytes, length_bytes) {
            self.zeroings_skipped_count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Ok(());
        }
        z.clear(offset_bytes, length_bytes);
        let r = zero();
        if r.is_err() {
            z.set(offset_bytes, length_bytes);
        }
        r
    }

    fn fallocate(&self, mode: libc::c_int, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        // SAFETY: fallocate on a valid descriptor with in-range arguments.
        let rc = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                mode,
                offset_bytes as libc::off_t,
                length_bytes as libc::off_t,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

impl BlockDevice for FileDevice {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> io::Result<()> {
        if self.direct && !Self::aligned(buf.as_ptr(), buf.len(), offset_bytes) {
            let (start, len) = widen(offset_bytes, buf.len());
            let mut tmp = AlignedBuf::zeroed(len);
            self.file.read_exact_at(tmp.as_mut_slice(), start)?;
            let skip = (offset_bytes - start) as usize;
            buf.copy_from_slice(&tmp.as_slice()[skip..skip + buf.len()]);
            return Ok(());
        }
        self.file.read_exact_at(buf, offset_bytes)
    }

    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> io::Result<()> {
        let r = self.write_data(buf, offset_bytes);
        // After the data is in (even if the write failed part way).
        if let Some(z) = &self.zeros {
            z.set(offset_bytes, buf.len() as u64);
        }
        r
    }

    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn trim(&self, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        self.zeroing(offset_bytes, length_bytes, false, || {
            self.fallocate_or_write_zeroes(libc::FALLOC_FL_PUNCH_HOLE, offset_bytes, length_bytes)
        })
    }

    /// `FALLOC_FL_ZERO_RANGE`; where the file system lacks it (tmpfs), a
    /// punched hole, which reads back as zeroes too; else written zeroes.
    /// Nothing for pages known to read zeroes already.
    fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        self.zeroing(offset_bytes, length_bytes, true, || {
            use std::sync::atomic::Ordering::Relaxed;
            let zero_range = libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE;
            if !self.is_block_device && !self.no_zero_range.load(Relaxed) {
                if self.fallocate(zero_range, offset_bytes, length_bytes).is_ok() {
                    return Ok(());
                }
                self.no_zero_range.store(true, Relaxed);
            }
            self.fallocate_or_write_zeroes(libc::FALLOC_FL_PUNCH_HOLE, offset_bytes, length_bytes)
        })
    }
}

impl FileDevice {
    /// Writes `buf` at `offset_bytes` (read-modify-write of partial
    /// blocks under O_DIRECT).
    fn write_data(&self, buf: &[u8], offset_bytes: u64) -> io::Result<()> {
        if self.direct && !Self::aligned(buf.as_ptr(), buf.len(), offset_bytes) {
            let (start, len) = widen(offset_bytes, buf.len());
            let partial = start != offset_bytes || len != buf.len();
            let _exclusive = partial.then(|| self.rmw_lock.write().unwrap_or_else(|p| p.into_inner()));
            let _shared = (!partial).then(|| self.rmw_lock.read().unwrap_or_else(|p| p.into_inner()));
            let mut tmp = AlignedBuf::zeroed(len);
            if partial {
                // Read-modify-write of the partial blocks at either end.
                self.file.read_exact_at(tmp.as_mut_slice(), start)?;
            }
            let skip = (offset_bytes - start) as usize;
            tmp.as_mut_slice()[skip..skip + buf.len()].copy_from_slice(buf);
            return self.file.write_all_at(tmp.as_slice(), start);
        }
        let _shared = self.direct.then(|| self.rmw_lock.read().unwrap_or_else(|p| p.into_inner()));
        self.file.write_all_at(buf, offset_bytes)
    }
}

/// The aligned range covering `[offset, offset + len)`.
fn widen(offset_bytes: u64, len: usize) -> (u64, usize) {
    let a = DIRECT_ALIGN_BYTES as u64;
    let start = offset_bytes / a * a;
    let end = (offset_bytes + len as u64).div_ceil(a) * a;
    (start, (end - start) as usize)
}

/// A heap buffer aligned for O_DIRECT.
struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
}

impl AlignedBuf {
    fn layout(len: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(len.max(DIRECT_ALIGN_BYTES), DIRECT_ALIGN_BYTES)
            .expect("valid layout")
    }

    fn zeroed(len: usize) -> AlignedBuf {
        // SAFETY: the layout has non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(Self::layout(len)) };
        assert!(!ptr.is_null(), "allocation of {len} bytes failed");
        AlignedBuf { ptr, len }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialised bytes for the buffer's life.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and we hold the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with the same layout.
        unsafe { std::alloc::dealloc(self.ptr, Self::layout(self.len)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(direct: bool) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("dev.img");
        File::create(&p).unwrap().set_len(1 << 20).unwrap();
        let d = match FileDevice::open(&p, direct, false) {
            Ok(d) => d,
            Err(e) if direct => {
                eprintln!("O_DIRECT not supported on this file system ({e}); testing buffered only");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        assert_eq!(d.size_bytes(), 1 << 20);
        let data: Vec<u8> = (0..3 * 512).map(|i| (i % 253) as u8).collect();
        d.write_at(&data, 512 * 7).unwrap();
        let mut back = vec![0u8; data.len()];
        d.read_at(&mut back, 512 * 7).unwrap();
        assert_eq!(back, data);
        d.trim(512 * 8, 512).unwrap();
        d.read_at(&mut back, 512 * 7).unwrap();
        assert_eq!(&back[..512], &data[..512]);
        assert!(back[512..1024].iter().all(|&b| b == 0));
        assert_eq!(&back[1024..], &data[1024..]);
        d.write_zeroes(512 * 7, 512).unwrap();
        d.read_at(&mut back, 512 * 7).unwrap();
        assert!(back[..1024].iter().all(|&b| b == 0));
        d.flush().unwrap();
    }

    #[test]
    fn file_device_reads_writes_trims_buffered() {
        roundtrip(false);
    }

    #[test]
    fn file_device_reads_writes_trims_direct() {
        roundtrip(true);
    }

    #[test]
    fn concurrent_sub_block_direct_writes_to_one_block_lose_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("rmw.img");
        File::create(&p).unwrap().set_len(1 << 20).unwrap();
        let Ok(d) = FileDevice::open(&p, true, false) else {
            eprintln!("O_DIRECT not supported here; nothing to race");
            return;
        };
        for round in 0..50u8 {
            std::thread::scope(|s| {
                for sector in 0..8u64 {
                    let d = &d;
                    s.spawn(move || d.write_at(&[round ^ sector as u8; 512], sector * 512).unwrap());
                }
            });
            let mut back = vec![0u8; 4096];
            d.read_at(&mut back, 0).unwrap();
            for sector in 0..8usize {
                assert!(
                    back[sector * 512..(sector + 1) * 512].iter().all(|&b| b == round ^ sector as u8),
                    "round {round}: sector {sector} lost its write"
                );
            }
        }
    }

    /// Write-zeroes of pages known to read zeroes make no system call;
    /// pages written since (or holding data at open) are zeroed; trims
    /// always go down.
    #[test]
    fn zeroing_skips_only_pages_known_to_read_zeroes() {
        use std::sync::atomic::Ordering::Relaxed;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("zeros.img");
        let f = File::create(&p).unwrap();
        f.set_len(1 << 20).unwrap();
        f.write_all_at(&[5; 4096], 512 << 10).unwrap(); // data before the open
        drop(f);
        let d = FileDevice::open(&p, false, true).unwrap();
        if d.zeros.is_none() {
            eprintln!("this file system does not report holes; nothing is skipped");
            return;
        }
        let skipped = || d.zeroings_skipped_count.load(Relaxed);
        let zeroes = |at: u64, len: usize| {
            let mut b = vec![1u8; len];
            d.read_at(&mut b, at).unwrap();
            b.iter().all(|&x| x == 0)
        };
        d.write_zeroes(64 << 10, 60 << 10).unwrap();
        assert_eq!(skipped(), 1, "a hole needs no zeroing");
        d.write_at(&[9; 4096], 68 << 10).unwrap();
        d.write_zeroes(64 << 10, 60 << 10).unwrap();
        assert_eq!(skipped(), 1, "a written page is zeroed");
        assert!(zeroes(64 << 10, 60 << 10));
        d.write_zeroes(64 << 10, 60 << 10).unwrap();
        assert_eq!(skipped(), 2, "zeroed pages are known zero");
        d.trim(512 << 10, 4096).unwrap();
        assert_eq!(skipped(), 2, "data found at open is trimmed");
        assert!(zeroes(512 << 10, 4096));
        d.trim(64 << 10, 60 << 10).unwrap();
        assert_eq!(skipped(), 2, "a trim is never skipped (it frees space)");
        // Part of a page: the rest of the page keeps its bytes.
        d.write_at(&[3; 1024], 200 << 10).unwrap();
        d.write_zeroes(200 << 10, 512).unwrap();
        assert_eq!(skipped(), 2);
        let mut b = vec![0u8; 1024];
        d.read_at(&mut b, 200 << 10).unwrap();
        assert!(b[..512].iter().all(|&x| x == 0) && b[512..].iter().all(|&x| x == 3));
        d.write_zeroes(200 << 10, 512).unwrap();
        assert_eq!(skipped(), 2, "a page partly zeroed may still hold data");
        let plain = FileDevice::open(&p, false, false).unwrap();
        assert!(plain.zeros.is_none(), "only an exclusive open may trust its map");
    }

    #[test]
    fn second_exclusive_open_is_refused_with_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("dev.img");
        File::create(&p).unwrap().set_len(1 << 20).unwrap();
        let _first = FileDevice::open(&p, false, true).unwrap();
        let err = FileDevice::open(&p, false, true).err().expect("second open refused");
        assert!(err.to_string().contains("in use"), "{err}");
        assert!(err.to_string().contains("dev.img"), "{err}");
    }

    #[test]
    fn missing_file_error_names_the_path() {
        let err = FileDevice::open(Path::new("/nonexistent/x.img"), false, false).err().unwrap();
        assert!(err.to_string().contains("/nonexistent/x.img"), "{err}");
    }
}
