//! The ext2/3/4 free-block reader against real file systems: `mkfs.ext4`
//! (populated with `-d`) in every layout the reader claims, compared
//! block for block with `dumpe2fs`. Skipped (with a note) where e2fsprogs
//! is not installed.

use layoutd_targets::replica::ext;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

fn have(tool: &str) -> bool {
    Command::new(tool).arg("-V").output().is_ok()
}

/// Free blocks per `dumpe2fs`.
fn dumpe2fs_free(img: &Path) -> BTreeSet<u64> {
    let out = Command::new("dumpe2fs").arg(img).output().expect("dumpe2fs runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut free = BTreeSet::new();
    for line in text.lines().filter_map(|l| l.strip_prefix("  Free blocks: ")) {
        for part in line.split(", ").filter(|p| !p.trim().is_empty()) {
            let (a, b) = part.trim().split_once('-').unwrap_or((part.trim(), part.trim()));
            let (a, b): (u64, u64) = (a.parse().expect("block"), b.parse().expect("block"));
            free.extend(a..=b);
        }
    }
    free
}

/// Free blocks per the reader, from the image's bytes.
fn reader_free(bytes: &[u8]) -> Result<BTreeSet<u64>, String> {
    let at = ext::SUPERBLOCK_OFFSET_BYTES as usize;
    let geo = ext::parse_superblock(&bytes[at..at + ext::SUPERBLOCK_BYTES])?;
    let bs = geo.block_bytes as usize;
    let gdt_at = geo.gdt_offset_bytes() as usize;
    let groups = ext::parse_descriptors(&geo, &bytes[gdt_at..gdt_at + geo.gdt_blocks() as usize * bs])?;
    let mut free = BTreeSet::new();
    for g in 0..geo.group_count {
        let b = groups[g as usize].block_bitmap as usize * bs;
        for (s, n) in ext::group_free_extents(&geo, &groups, g, Some(&bytes[b..b + bs]))? {
            free.extend(s..s + n);
        }
    }
    Ok(free)
}

fn populated_source(dir: &Path) {
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    for i in 0..40u32 {
        let len = (i as usize * 7919) % 200_000 + 1;
        let data: Vec<u8> = (0..len).map(|j| (j as u32 ^ i) as u8).collect();
        let name = if i % 3 == 0 { dir.join("sub").join(format!("f{i}")) } else { dir.join(format!("f{i}")) };
        std::fs::write(name, data).unwrap();
    }
}

#[test]
fn the_reader_agrees_with_dumpe2fs_in_every_layout() {
    if !have("mkfs.ext4") || !have("dumpe2fs") {
        eprintln!("e2fsprogs not installed: skipped");
        return;
    }
    let tmp = std::env::temp_dir().join(format!("layoutd-ext-reader-{}", std::process::id()));
    let src = tmp.join("src");
    populated_source(&src);
    let layouts: [(&str, &[&str]); 6] = [
        ("4k-64bit-flex", &["-b", "4096", "-O", "64bit,flex_bg"]),
        ("1k-32bit-noflex", &["-b", "1024", "-O", "^64bit,^flex_bg"]),
        ("4k-32bit-gdt-csum", &["-b", "4096", "-O", "^64bit,^metadata_csum,uninit_bg"]),
        ("1k-64bit-flex", &["-b", "1024", "-O", "64bit,flex_bg"]),
        ("ext2", &["-t", "ext2", "-b", "4096"]),
        ("4k-sparse-super2", &["-b", "4096", "-O", "sparse_super2"]),
    ];
    let mut uninit_groups = 0;
    for (name, opts) in layouts {
        let img = tmp.join(format!("{name}.img"));
        let f = std::fs::File::create(&img).unwrap();
        f.set_len(96 << 20).unwrap();
        drop(f);
        let st = Command::new("mkfs.ext4")
            .args(["-q", "-F", "-E", "lazy_itable_init=1"])
            .args(opts)
            .arg("-d")
            .arg(&src)
            .arg(&img)
            .status()
            .unwrap();
        assert!(st.success(), "mkfs {name}");
        let bytes = std::fs::read(&img).unwrap();
        let want = dumpe2fs_free(&img);
        let got = reader_free(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(want.len() > 1000, "{name}: a mostly empty file system");
        assert_eq!(got.len(), want.len(), "{name}: free block count");
        assert!(got == want, "{name}: the free sets differ");
        // A flipped bit in a bitmap: refused (checksums) or at least never
        // more free than the file system says outside that bitmap's group.
        let mut bad = bytes.clone();
        let at = ext::SUPERBLOCK_OFFSET_BYTES as usize;
        let geo = ext::parse_superblock(&bytes[at..at + ext::SUPERBLOCK_BYTES]).unwrap();
        let bs = geo.block_bytes as usize;
        let gdt_at = geo.gdt_offset_bytes() as usize;
        let groups =
            ext::parse_descriptors(&geo, &bytes[gdt_at..gdt_at + geo.gdt_blocks() as usize * bs]).unwrap();
        uninit_groups += groups.iter().filter(|g| g.block_uninit).count();
        if let Some(g) = groups.iter().position(|g| !g.block_uninit) {
            bad[groups[g].block_bitmap as usize * bs + 3] ^= 0x10;
            if name != "ext2" && name != "4k-32bit-gdt-csum" {
                let e = reader_free(&bad).expect_err("a damaged bitmap is refused");
                assert!(e.contains("checksum") || e.contains("corrupt"), "{name}: {e}");
            }
        }
        std::fs::remove_file(&img).ok();
    }
    std::fs::remove_dir_all(&tmp).ok();
    assert!(uninit_groups > 10, "BLOCK_UNINIT groups were compared too ({uninit_groups})");
}
