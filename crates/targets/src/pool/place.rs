//! Where the pool puts a chunk: one trait, three policies chosen by the
//! `placement` key. Units are data chunks (`0..data_chunks`).
//!
//! - [`Contiguous`] (classic LVM2, the baseline): the origin's chunk `lc`
//!   lives at `lc`; copies go to the area after the origin's, in order
//!   (a [`NextFit`] cursor), wherever that leaves them.
//! - [`Sliced`] (the thesis's snap-aware allocation, §2.3): the origin is
//!   laid out in `slices` equal slices, each followed by a gap of
//!   `gap_share` of the slice; a copy goes to the free chunk nearest its
//!   origin chunk within the nearest gap that has room.
//! - [`NearestFree`]: the origin spread evenly over the whole pool (every
//!   `data/volume`-th chunk left free), a copy in the free chunk nearest its
//!   origin chunk at chunk granularity; the idle-time defragmenter (in the
//!   target) moves copies nearer when space frees up.

use crate::alloc::{FreeSpace, NextFit, Placement};

/// A placement policy (see the module docs).
pub trait ChunkPlacement: Send {
    /// The config name.
    fn name(&self) -> &'static str;
    /// Where the origin's logical chunk `lc` belongs.
    fn home(&self, lc: u64) -> u64;
    /// A free chunk for the origin's `lc` (its home if free).
    fn place_origin(&mut self, free: &FreeSpace, lc: u64) -> Option<u64> {
        let home = self.home(lc);
        if free.is_free(home, 1) {
            return Some(home);
        }
        free.nearest_unit(home, 0, free.total_units())
    }
    /// A free chunk for a copy (or a snapshot's own chunk) whose origin
    /// chunk is at `near`.
    fn place_copy(&mut self, free: &FreeSpace, near: u64) -> Option<u64>;
    /// Its parameters, for the status.
    fn config(&self) -> Vec<(String, String)>;
}

/// See the module docs.
pub struct Contiguous {
    origin_chunks: u64,
    cursor: NextFit,
}

impl Contiguous {
    /// The origin takes `0..origin_chunks`; copies start after it.
    pub fn new(origin_chunks: u64) -> Contiguous {
        Contiguous { origin_chunks, cursor: NextFit { cursor: origin_chunks } }
    }
}

impl ChunkPlacement for Contiguous {
    fn name(&self) -> &'static str {
        "contiguous"
    }
    fn home(&self, lc: u64) -> u64 {
        lc
    }
    fn place_origin(&mut self, free: &FreeSpace, lc: u64) -> Option<u64> {
        if free.is_free(lc, 1) {
            return Some(lc);
        }
        self.cursor.choose(free, 1, 0)
    }
    fn place_copy(&mut self, free: &FreeSpace, _near: u64) -> Option<u64> {
        self.cursor.choose(free, 1, 0)
    }
    fn config(&self) -> Vec<(String, String)> {
        vec![("copy_area_start_chunk".into(), self.origin_chunks.to_string())]
    }
}

/// See the module docs.
pub struct Sliced {
    slices: u64,
    /// Chunks of the shortest slice, origin part and gap together (slice
    /// `k` starts at `k * data_chunks / slices`: lengths differ by at most
    /// one chunk, so no slice's gap takes the remainder).
    slice_chunks: u64,
    /// Origin chunks per slice.
    origin_part: u64,
    data_chunks: u64,
}

impl Sliced {
    /// `slices` slices over `data_chunks`, the origin's `volume_chunks`
    /// spread over them; `Err` if the gaps would be empty.
    pub fn new(slices: u64, data_chunks: u64, volume_chunks: u64) -> Result<Sliced, String> {
        if slices == 0 || slices > data_chunks / 2 {
            return Err(format!("`slices` = {slices}: between 1 and {} for this pool", data_chunks / 2));
        }
        let slice_chunks = data_chunks / slices;
        let origin_part = volume_chunks.div_ceil(slices);
        if origin_part >= slice_chunks {
            return Err(format!(
                "`slices` = {slices} with a volume of {volume_chunks} chunks leaves no gap in slices of \
                 {slice_chunks} chunks: lower `volume_size` or raise `copy_share_percent`, or use fewer slices, or \
                 `placement = \"nearest\"` (any volume size)"
            ));
        }
        Ok(Sliced { slices, slice_chunks, origin_part, data_chunks })
    }

    /// The first chunk of slice `k` (`k == slices`: the end).
    fn start(&self, k: u64) -> u64 {
        (u128::from(k) * u128::from(self.data_chunks) / u128::from(self.slices)) as u64
    }

    /// The slice holding chunk `c`.
    fn slice_of(&self, c: u64) -> u64 {
        let c = c.min(self.data_chunks - 1);
        let mut k = (u128::from(c) * u128::from(self.slices) / u128::from(self.data_chunks)) as u64;
        while self.start(k + 1) <= c {
            k += 1;
        }
        assert!(self.start(k) <= c && c < self.start(k + 1) && k < self.slices);
        k
    }

    fn gap(&self, k: u64) -> (u64, u64) {
        (self.start(k) + self.origin_part, self.start(k + 1))
    }
}

impl ChunkPlacement for Sliced {
    fn name(&self) -> &'static str {
        "sliced"
    }
    fn home(&self, lc: u64) -> u64 {
        self.start(lc / self.origin_part) + lc % self.origin_part
    }
    fn place_copy(&mut self, free: &FreeSpace, near: u64) -> Option<u64> {
        let k = self.slice_of(near);
        // Gaps outward from the copy's own slice; the first distance that
        // finds room wins (the closer of the two sides).
        for d in 0..self.slices {
            let mut best: Option<u64> = None;
            let sides = [k.checked_sub(d), Some(k + d).filter(|&j| j < self.slices && d > 0)];
            for j in sides.into_iter().flatten() {
                let (lo, hi) = self.gap(j);
                if let Some(u) = free.nearest_unit(near, lo, hi) {
                    if best.is_none_or(|b| u.abs_diff(near) < b.abs_diff(near)) {
                        best = Some(u);
                    }
                }
            }
            if best.is_some() {
                return best;
            }
        }
        // Every gap is full: anywhere, nearest.
        free.nearest_unit(near, 0, free.total_units())
    }
    fn config(&self) -> Vec<(String, String)> {
        vec![
            ("slice_chunks".into(), self.slice_chunks.to_string()),
            ("slice_origin_chunks".into(), self.origin_part.to_string()),
        ]
    }
}

/// See the module docs.
pub struct NearestFree {
    data_chunks: u64,
    volume_chunks: u64,
}

impl NearestFree {
    /// The origin's `volume_chunks` spread over `data_chunks`.
    pub fn new(data_chunks: u64, volume_chunks: u64) -> NearestFree {
        NearestFree { data_chunks, volume_chunks }
    }
}

impl ChunkPlacement for NearestFree {
    fn name(&self) -> &'static str {
        "nearest"
    }
    fn home(&self, lc: u64) -> u64 {
        let h = u128::from(lc) * u128::from(self.data_chunks) / u128::from(self.volume_chunks.max(1));
        (h as u64).min(self.data_chunks - 1)
    }
    fn place_copy(&mut self, free: &FreeSpace, near: u64) -> Option<u64> {
        free.nearest_unit(near, 0, free.total_units())
    }
    fn config(&self) -> Vec<(String, String)> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_policy_places_where_it_says() {
        let mut free = FreeSpace::new(100);
        let mut c = Contiguous::new(80);
        assert_eq!(c.place_origin(&free, 5), Some(5));
        assert_eq!(c.place_copy(&free, 5), Some(80), "copies go after the origin's area");
        let mut s = Sliced::new(4, 100, 80).unwrap();
        assert_eq!((s.home(0), s.home(19), s.home(20)), (0, 19, 25));
        assert_eq!(s.place_copy(&free, 15), Some(20), "the gap after slice 0 is [20, 25)");
        free.take(20, 5);
        assert_eq!(s.place_copy(&free, 15), Some(45), "the next gap");
        assert!(Sliced::new(4, 100, 100).is_err(), "no gap");
        // 103 chunks in 4 slices: starts 0, 25, 51, 77; the remainder is
        // spread, not left in the last gap ([97, 103) holds 6, not 8).
        let s = Sliced::new(4, 103, 80).unwrap();
        assert_eq!((s.home(20), s.home(40), s.home(60)), (25, 51, 77));
        let gaps: Vec<u64> = (0..4).map(|k| s.gap(k).1 - s.gap(k).0).collect();
        assert_eq!(gaps, vec![5, 6, 6, 6]);
        assert_eq!((s.slice_of(24), s.slice_of(25), s.slice_of(102)), (0, 1, 3));
        let mut n = NearestFree::new(100, 80);
        assert_eq!((n.home(0), n.home(4), n.home(79)), (0, 5, 98));
        free.take(40, 3);
        assert_eq!(n.place_copy(&free, 41), Some(39));
    }
}
