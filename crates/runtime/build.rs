//! `SOURCE_ID`: a hash of the sources that decide what goes on the disk and
//! how it is read back (core, disk, targets, runtime). The `layoutd` binary
//! and the nbdkit plugin each carry the one they were built with; `serve`
//! refuses a plugin built from other sources, since a mismatched pair can
//! misread the other's metadata (a stale plugin once dropped a newer
//! build's journal records).

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn main() {
    let crates = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo")).join("..");
    // FNV-1a, 64 bits, over each file's path (relative) and bytes.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    };
    for name in ["core", "disk", "targets", "runtime"] {
        let src = crates.join(name).join("src");
        println!("cargo:rerun-if-changed={}", src.display());
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for f in files {
            let rel = f.strip_prefix(&crates).unwrap_or(&f);
            eat(rel.to_string_lossy().as_bytes());
            eat(&[0]);
            eat(&std::fs::read(&f).unwrap_or_default());
            eat(&[0]);
        }
    }
    println!("cargo:rustc-env=LAYOUTD_SOURCE_ID={h:016x}");
}
