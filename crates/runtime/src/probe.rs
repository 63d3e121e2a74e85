//! Foreign data detection before `format`: asks libblkid (util-linux, the
//! library behind `blkid` and `wipefs`) for every file system, partition
//! table, RAID/LVM member, swap or crypto signature on the device, wherever
//! on the device it is (a btrfs superblock at 64 KiB, a GPT backup header at
//! the end). layoutd's own superblock is checked separately by `volume`.
//!
//! libblkid is loaded at run time (`dlopen("libblkid.so.1")`), so building
//! needs no development package; where it is missing, format refuses with a
//! message saying how to install it or to pass `--force`.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// One signature libblkid found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    /// What it is: `btrfs`, `ext4`, `swap`, `LVM2_member`, `gpt`, `dos`, ...
    pub kind: String,
    /// `filesystem`, `raid`, `crypto`, `other`, or `partition table`.
    pub usage: String,
    /// Byte offset of the signature's magic on the device, when known.
    pub offset: Option<u64>,
}

impl std::fmt::Display for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.kind, self.usage)?;
        if let Some(o) = self.offset {
            write!(f, " at byte {o}")?;
        }
        Ok(())
    }
}

extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}
const RTLD_NOW: c_int = 2;

// libblkid's constants (blkid.h, stable since util-linux 2.18).
const BLKID_SUBLKS_TYPE: c_int = 1 << 5;
const BLKID_SUBLKS_USAGE: c_int = 1 << 7;
const BLKID_SUBLKS_MAGIC: c_int = 1 << 9;
const BLKID_PARTS_MAGIC: c_int = 1 << 3;

type Probe = *mut c_void;

/// The libblkid functions this module calls.
struct Blkid {
    new_probe_from_filename: unsafe extern "C" fn(*const c_char) -> Probe,
    free_probe: unsafe extern "C" fn(Probe),
    enable_superblocks: unsafe extern "C" fn(Probe, c_int) -> c_int,
    set_superblocks_flags: unsafe extern "C" fn(Probe, c_int) -> c_int,
    enable_partitions: unsafe extern "C" fn(Probe, c_int) -> c_int,
    set_partitions_flags: unsafe extern "C" fn(Probe, c_int) -> c_int,
    do_probe: unsafe extern "C" fn(Probe) -> c_int,
    lookup_value: unsafe extern "C" fn(Probe, *const c_char, *mut *const c_char, *mut usize) -> c_int,
}

const LIBRARY: &str = "libblkid.so.1";

/// Loads libblkid (`library`: its file name, [`LIBRARY`] outside tests).
fn load(library: &str) -> Result<Blkid, String> {
    let lib = CString::new(library).expect("no NUL");
    // SAFETY: dlopen with a valid C string; the handle is never closed, so
    // the symbols below stay valid for the life of the process.
    let h = unsafe { dlopen(lib.as_ptr(), RTLD_NOW) };
    if h.is_null() {
        return Err(format!(
            "cannot load {library} to check the device for foreign data (install util-linux's libblkid: apt-get install libblkid1), or pass --force"
        ));
    }
    // SAFETY: each symbol is the libblkid function of that name, whose C
    // signature (blkid.h) matches the field's Rust type it is read as.
    unsafe {
        Ok(Blkid {
            new_probe_from_filename: sym(h, "blkid_new_probe_from_filename")?,
            free_probe: sym(h, "blkid_free_probe")?,
            enable_superblocks: sym(h, "blkid_probe_enable_superblocks")?,
            set_superblocks_flags: sym(h, "blkid_probe_set_superblocks_flags")?,
            enable_partitions: sym(h, "blkid_probe_enable_partitions")?,
            set_partitions_flags: sym(h, "blkid_probe_set_partitions_flags")?,
            do_probe: sym(h, "blkid_do_probe")?,
            lookup_value: sym(h, "blkid_probe_lookup_value")?,
        })
    }
}

/// The function `name` of the library `h`, as the function pointer type `F`.
///
/// # Safety
/// `h` is a live dlopen handle and `F` is the symbol's true C signature.
unsafe fn sym<F: Copy>(h: *mut c_void, name: &str) -> Result<F, String> {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>(), "a function pointer");
    let c = CString::new(name).expect("no NUL");
    let p = dlsym(h, c.as_ptr());
    if p.is_null() {
        return Err(format!(
            "{LIBRARY} has no {name}: too old a libblkid; upgrade util-linux or pass --force"
        ));
    }
    Ok(std::mem::transmute_copy::<*mut c_void, F>(&p))
}

/// A probe that is freed on drop.
struct Guard<'a>(&'a Blkid, Probe);

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        // SAFETY: `self.1` came from blkid_new_probe_from_filename and is freed once.
        unsafe { (self.0.free_probe)(self.1) }
    }
}

impl Guard<'_> {
    fn value(&self, name: &str) -> Option<String> {
        let c = CString::new(name).expect("no NUL");
        let mut data: *const c_char = std::ptr::null();
        // SAFETY: a live probe, a valid name, and out-pointers libblkid fills
        // with a NUL-terminated string owned by the probe.
        let rc = unsafe { (self.0.lookup_value)(self.1, c.as_ptr(), &mut data, std::ptr::null_mut()) };
        if rc != 0 || data.is_null() {
            return None;
        }
        // SAFETY: libblkid returned a NUL-terminated string that lives as long as the probe.
        Some(unsafe { CStr::from_ptr(data) }.to_string_lossy().into_owned())
    }
}

/// Every signature libblkid finds anywhere on the device (as `wipefs` lists
/// them), in the order found. An error names the device and the fix.
pub fn signatures(path: &Path) -> Result<Vec<Signature>, String> {
    let blkid = load(LIBRARY)?;
    let name = CString::new(path.as_os_str().as_bytes()).map_err(|_| "a NUL in the path".to_string())?;
    // SAFETY: a valid C string; a null result is handled.
    let probe = unsafe { (blkid.new_probe_from_filename)(name.as_ptr()) };
    if probe.is_null() {
        let e = std::io::Error::last_os_error();
        return Err(format!(
            "libblkid cannot open it to check for foreign data ({e}); pass --force to skip the check"
        ));
    }
    let g = Guard(&blkid, probe);
    // SAFETY: a live probe; these only set probing options.
    unsafe {
        (blkid.enable_superblocks)(probe, 1);
        (blkid.set_superblocks_flags)(probe, BLKID_SUBLKS_TYPE | BLKID_SUBLKS_USAGE | BLKID_SUBLKS_MAGIC);
        (blkid.enable_partitions)(probe, 1);
        (blkid.set_partitions_flags)(probe, BLKID_PARTS_MAGIC);
    }
    let mut found = Vec::new();
    // blkid_do_probe returns each signature in turn (0), then 1 when done; -1 on error.
    for _ in 0..64 {
        // SAFETY: a live probe.
        match unsafe { (blkid.do_probe)(probe) } {
            0 => {}
            1 => return Ok(found),
            _ => {
                let e = std::io::Error::last_os_error();
                return Err(format!(
                    "libblkid failed while checking for foreign data ({e}); pass --force to skip the check"
                ));
            }
        }
        let sig = if let Some(kind) = g.value("TYPE") {
            let usage = g.value("USAGE").unwrap_or_else(|| "other".into());
            Signature { kind, usage, offset: g.value("SBMAGIC_OFFSET").and_then(|o| o.parse().ok()) }
        } else if let Some(kind) = g.value("PTTYPE") {
            let offset = g.value("PTMAGIC_OFFSET").and_then(|o| o.parse().ok());
            Signature { kind, usage: "partition table".into(), offset }
        } else {
            continue;
        };
        found.push(sig);
    }
    Ok(found)
}

/// `Ok` when libblkid finds nothing on the device; otherwise the message
/// that refuses the format (what was found, where, and the fix).
pub fn refuse_foreign(path: &Path) -> Result<(), String> {
    let found = signatures(path)?;
    if found.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = found.iter().map(|s| s.to_string()).collect();
    Err(format!(
        "holds foreign data: {} (found by libblkid, as `wipefs {}` lists it); pass --force to overwrite it",
        list.join(", "),
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_libblkid_is_refused_with_the_fix() {
        let e = load("libblkid-not-here.so.9").err().expect("no such library");
        assert!(e.contains("apt-get install libblkid1") && e.contains("--force"), "{e}");
    }

    #[test]
    fn a_blank_file_has_no_signature_and_a_planted_swap_one_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d.img");
        std::fs::File::create(&p).unwrap().set_len(8 << 20).unwrap();
        assert_eq!(signatures(&p).unwrap(), vec![]);
        // A swap signature: "SWAPSPACE2" at the end of the first 4 KiB page,
        // the version-1 header's last page and version fields before it.
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[4096 - 10..4096].copy_from_slice(b"SWAPSPACE2");
        bytes[1024..1028].copy_from_slice(&1u32.to_le_bytes());
        bytes[1028..1032].copy_from_slice(&2047u32.to_le_bytes());
        std::fs::write(&p, &bytes).unwrap();
        let s = signatures(&p).unwrap();
        assert!(s.iter().any(|s| s.kind == "swap"), "{s:?}");
    }
}
