//! Self-describing sector contents for the dcd crash and damage tests:
//! which write put them there, checked, so a sector holding bytes no write
//! wrote is caught.

/// Sector contents written by write `w` (1-based) at `sector`.
pub fn tagged(w: u64, sector: u64) -> [u8; 512] {
    let mut b = [0u8; 512];
    b[0..8].copy_from_slice(&w.to_le_bytes());
    b[8..16].copy_from_slice(&sector.to_le_bytes());
    b[16..24].copy_from_slice(&(w ^ sector ^ 0x5EED).to_le_bytes());
    b
}

/// Which write's contents `b` holds at `sector` (0: never written), or
/// `None` for bytes no write wrote.
pub fn tag_of(b: &[u8], sector: u64) -> Option<u64> {
    if b.iter().all(|&x| x == 0) {
        return Some(0);
    }
    let w = u64::from_le_bytes(b[0..8].try_into().expect("8"));
    (tagged(w, sector)[..] == *b).then_some(w)
}
