//! The map's sketch of written pages (chain checkpoint version 7): which
//! of the log's map pages have been written, and their current copies'
//! generations, in 384 bytes, so that recovery can tell which pages are
//! *lost* (written, now without a usable copy) from the many never
//! written, which look the same (a zeroed copy is blank), and by how much
//! each falls short of the map's digests.
//!
//! An invertible Bloom lookup table (Goodrich and Mitzenmacher, 2011;
//! its set difference as in Eppstein et al., "What's the difference?",
//! 2011): [`SKETCH_PARTS`] parts of [`SKETCH_PART_CELLS`] cells; each
//! written page is counted in one cell of each part (its place a hash of
//! the page), a cell holding how many pages it counts, the XOR of their
//! indices, the XOR of a 32-bit check of each and the wrapping sum of
//! their current copies' generations (low 32 bits). The log adds a page
//! at its first write (as it counts `map_pages_written`) and its
//! generation at each write; recovery adds each page it finds a usable
//! copy of, with the generation taken, and the checkpoint's sketch less
//! that one counts exactly the lost pages. A cell counting one page holds
//! its index (its check tells it from several pages' XOR) and its
//! generation, plus what the pages in the cell that fell back to an older
//! copy fell short by (their indices cancel out, their generations do
//! not): the generations listed are a guess the map's digests confirm or
//! not (`log::persist`). Taking a listed page out of its other cells
//! frees more ([`MapSketch::missing`]). With the table this size, two
//! lost pages are told apart unless they share a cell in all three parts
//! (1 in 512); of random pages, 5 lost are listed 98% of the time, 10
//! 90%, 15 67%, 20 11% (docs/log.md). Pages whose cells form a closed set
//! leave cells that count more than one: then it does not answer (recovery falls back to every page
//! without a usable copy, as before the sketch).
//!
//! A wrong answer needs a cell whose XOR of several indices passes the
//! check of the index it looks like (2^-32, as a crc32c letting a damaged
//! page through), and then that page must also be one without a usable
//! copy and the pages taken out must come to the lost count with every
//! cell left empty (recovery checks all of it, `log::persist`).
//!
//! The places and the check are part of the format: a change needs a new
//! checkpoint version.

use super::header::splitmix64;

/// The sketch's parts: each page is counted in one cell of each.
pub const SKETCH_PARTS: usize = 3;

/// Cells per part.
pub const SKETCH_PART_CELLS: usize = 8;

/// Cells in all.
pub const SKETCH_CELLS: usize = SKETCH_PARTS * SKETCH_PART_CELLS;

/// Bytes of a sketch in the checkpoint: four u32 per cell.
pub const SKETCH_BYTES: usize = SKETCH_CELLS * 16;

/// One cell: how many pages it counts, the XOR of their indices and of
/// their checks ([`MapSketch::check`]), the sum of their generations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SketchCell {
    /// How many pages it counts (wrapping).
    pub count: u32,
    /// The XOR of their indices.
    pub pages: u32,
    /// The XOR of their checks.
    pub check: u32,
    /// The wrapping sum of their current copies' generations (low 32
    /// bits).
    pub generations: u32,
}

/// See the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapSketch {
    /// Part 0's cells, then part 1's, then part 2's.
    pub cells: [SketchCell; SKETCH_CELLS],
}

impl Default for MapSketch {
    fn default() -> MapSketch {
        MapSketch { cells: [SketchCell::default(); SKETCH_CELLS] }
    }
}

impl MapSketch {
    /// The cell of part `part` that counts page `page`.
    pub fn cell_of(page: u32, part: usize) -> usize {
        let h = splitmix64(u64::from(page) ^ ((part as u64 + 1) << 40));
        part * SKETCH_PART_CELLS + (h % SKETCH_PART_CELLS as u64) as usize
    }

    /// Page `page`'s check (another hash of the index).
    pub fn check(page: u32) -> u32 {
        (splitmix64(u64::from(page) ^ (0x5ce7 << 48)) >> 32) as u32
    }

    /// Counts page `page` (at its first write).
    pub fn insert(&mut self, page: u32) {
        self.toggle(page, 1, 0);
    }

    /// Page `page`'s current copy was of generation `old` (0: none) and
    /// is now of `new`.
    pub fn replace(&mut self, page: u32, old: u64, new: u64) {
        let d = (new as u32).wrapping_sub(old as u32);
        for part in 0..SKETCH_PARTS {
            let c = &mut self.cells[MapSketch::cell_of(page, part)];
            c.generations = c.generations.wrapping_add(d);
        }
    }

    /// Adds `count` (1, or -1 wrapping) to the cells of `page`, and
    /// `generation` to their sums.
    fn toggle(&mut self, page: u32, count: u32, generation: u32) {
        let check = MapSketch::check(page);
        for part in 0..SKETCH_PARTS {
            let c = &mut self.cells[MapSketch::cell_of(page, part)];
            c.count = c.count.wrapping_add(count);
            c.pages ^= page;
            c.check ^= check;
            c.generations = c.generations.wrapping_add(generation);
        }
    }

    /// The pages `self` (the checkpoint's) counts and `found` (those
    /// recovery found a usable copy of) does not, in the order they were
    /// freed, each with the generation its cell gives (low 32 bits: its
    /// own, if no page of the cell fell back to an older copy), or `None`
    /// when the difference cannot be listed: a cell left counting several
    /// pages (too many lost, or a closed set), one counting fewer than
    /// none (a page found that the checkpoint never counted), or a page
    /// freed twice (neither happens unless the checkpoint is forged; its
    /// crc held). The caller checks the pages (below the map's pages, none
    /// with a usable copy, as many as lost) and the generations (the
    /// digests).
    pub fn missing(&self, found: &MapSketch) -> Option<Vec<(u32, u32)>> {
        let mut d = *self;
        for (c, f) in d.cells.iter_mut().zip(&found.cells) {
            c.count = c.count.wrapping_sub(f.count);
            c.pages ^= f.pages;
            c.check ^= f.check;
            c.generations = c.generations.wrapping_sub(f.generations);
        }
        let pure = |c: &SketchCell| c.count == 1 && MapSketch::check(c.pages) == c.check;
        let mut out = Vec::new();
        // Each page taken out empties its pure cell and no cell fills up
        // again (that would count below none: refused), so at most one
        // page per cell.
        while let Some(i) = d.cells.iter().position(pure) {
            let (page, generation) = (d.cells[i].pages, d.cells[i].generations);
            if out.iter().any(|o: &(u32, u32)| o.0 == page) || out.len() == SKETCH_CELLS {
                return None;
            }
            d.toggle(page, u32::MAX, generation.wrapping_neg());
            if d.cells.iter().any(|c| c.count > u32::MAX / 2) {
                return None;
            }
            out.push((page, generation));
        }
        // Generations may be left: pages that fell back to older copies.
        d.cells.iter().all(|c| (c.count, c.pages, c.check) == (0, 0, 0)).then_some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`MapSketch::cell_of`] of pages 0, 1, 1013, 235,714 and 2^32 - 1
    /// in parts 0, 1 and 2, as version 7 was released with.
    const PINNED_PLACES: [[usize; SKETCH_PARTS]; 5] =
        [[1, 13, 22], [5, 12, 21], [0, 14, 18], [6, 13, 23], [1, 12, 20]];
    /// [`MapSketch::check`] of the same pages.
    const PINNED_CHECKS: [u32; 5] = [0x0387_71e8, 0xfd2f_8279, 0x5416_f255, 0x5d5e_b906, 0x0aaa_ad17];

    /// Pages at generation 2 + index % 5.
    fn sketch(pages: impl IntoIterator<Item = u32>) -> MapSketch {
        let mut s = MapSketch::default();
        for p in pages {
            s.insert(p);
            s.replace(p, 0, gen(p));
        }
        s
    }

    fn gen(p: u32) -> u64 {
        2 + u64::from(p % 5)
    }

    fn pages_of(m: Option<Vec<(u32, u32)>>) -> Option<Vec<u32>> {
        m.map(|m| {
            let mut p: Vec<u32> = m.iter().map(|x| x.0).collect();
            p.sort_unstable();
            p
        })
    }

    #[test]
    fn the_lost_pages_are_listed_from_the_two_sketches() {
        // 40 pages written among 235,715 (a sparse 1 TiB log); every pair
        // and triple of a fixed spread, and runs of up to 12 lost.
        let written: Vec<u32> = (0..40u32).map(|i| i * 5_891 + 7).collect();
        let recorded = sketch(written.iter().copied());
        let (mut told, mut untold) = (0, 0);
        for a in 0..written.len() {
            for b in a + 1..written.len() {
                let lost = [written[a], written[b]];
                let found = sketch(written.iter().copied().filter(|p| !lost.contains(p)));
                match recorded.missing(&found) {
                    Some(mut m) => {
                        // Nothing fell back: each page's own generation.
                        m.sort_unstable();
                        let want: Vec<(u32, u32)> = lost.iter().map(|&p| (p, gen(p) as u32)).collect();
                        assert_eq!(m, want);
                        told += 1;
                    }
                    None => untold += 1,
                }
            }
        }
        // Two pages fail only when they share a cell in every part.
        let shared =
            |a: u32, b: u32| (0..SKETCH_PARTS).all(|t| MapSketch::cell_of(a, t) == MapSketch::cell_of(b, t));
        let expected = (0..written.len())
            .flat_map(|a| (a + 1..written.len()).map(move |b| (a, b)))
            .filter(|&(a, b)| shared(written[a], written[b]))
            .count();
        assert_eq!(untold, expected);
        assert!(told > 700, "{told} of 780 pairs told");
        let mut listed = 0;
        for n in [1usize, 3, 5, 8, 12] {
            let lost: Vec<u32> = written.iter().copied().skip(3).step_by(3).take(n).collect();
            let found = sketch(written.iter().copied().filter(|p| !lost.contains(p)));
            if let Some(m) = pages_of(recorded.missing(&found)) {
                assert_eq!(m, lost, "{n} lost");
                listed += 1;
            }
        }
        assert!(listed >= 3, "{listed} of 5 runs listed");
        // Nothing lost: nothing listed.
        assert_eq!(recorded.missing(&recorded), Some(Vec::new()));
        // A page that fell back to an older copy (generation 1 below its
        // own) beside two lost: the pages are listed all the same, and a
        // lost page sharing a cell with it may be given that much more.
        let (lost, older) = ([written[4], written[9]], written[20]);
        let mut found = sketch(written.iter().copied().filter(|p| !lost.contains(p)));
        found.replace(older, gen(older), gen(older) - 1);
        let m = recorded.missing(&found).expect("listed");
        let mut pages: Vec<u32> = m.iter().map(|x| x.0).collect();
        pages.sort_unstable();
        assert_eq!(pages, lost.to_vec());
        for (p, g) in m {
            let own = gen(p) as u32;
            assert!(g == own || g == own + 1, "page {p}: {g}, its own {own}");
        }
    }

    #[test]
    fn a_page_found_that_was_never_counted_or_a_forged_cell_gets_no_answer() {
        let recorded = sketch([1, 2, 3]);
        assert_eq!(recorded.missing(&sketch([1, 2, 3, 4])), None);
        assert_eq!(recorded.missing(&sketch([1, 4])), None);
        assert_eq!(pages_of(recorded.missing(&sketch([1]))), Some(vec![2, 3]));
        let mut forged = recorded;
        forged.cells[0].check ^= 1;
        assert_eq!(forged.missing(&sketch([1, 2])), None);
        let mut forged = recorded;
        forged.cells[5].count = forged.cells[5].count.wrapping_add(1);
        assert_eq!(forged.missing(&sketch([1, 2])), None);
    }

    /// The places and checks are part of the format (a volume's sketch
    /// was summed with them): pinned here, so a change to the hash, the
    /// cell count or the seeds fails rather than silently listing other
    /// pages on the volumes written before it.
    #[test]
    fn the_places_and_checks_are_those_the_volumes_were_written_with() {
        let places: Vec<[usize; SKETCH_PARTS]> = [0u32, 1, 1013, 235_714, u32::MAX]
            .iter()
            .map(|&p| [0, 1, 2].map(|t| MapSketch::cell_of(p, t)))
            .collect();
        let checks: Vec<u32> =
            [0u32, 1, 1013, 235_714, u32::MAX].iter().map(|&p| MapSketch::check(p)).collect();
        assert_eq!(places, PINNED_PLACES, "{places:?}");
        assert_eq!(checks, PINNED_CHECKS, "{checks:x?}");
        // Pages spread over every cell of each part.
        for part in 0..SKETCH_PARTS {
            let mut hit = [0u32; SKETCH_PART_CELLS];
            for p in 0..800u32 {
                hit[MapSketch::cell_of(p, part) - part * SKETCH_PART_CELLS] += 1;
            }
            assert!(hit.iter().all(|&n| (60..140).contains(&n)), "part {part}: {hit:?}");
        }
    }

    /// Random volumes (up to 2,000 written pages, each at its own
    /// generation; up to 12 lost, up to 3 fallen back to an older copy):
    /// the sketch either lists exactly the lost pages or gives no answer,
    /// never another page; each listed page's generation is its own when
    /// no page fell back.
    #[test]
    fn a_listed_page_is_always_one_lost() {
        let mut x = 0x5eed_u64;
        let mut next = |n: u64| {
            x = splitmix64(x);
            x % n
        };
        let (mut told, mut runs) = (0, 0);
        for _ in 0..3000 {
            let written: Vec<u32> = {
                let n = 1 + next(2000);
                let mut w: Vec<u32> = (0..n).map(|_| next(300_000) as u32).collect();
                w.sort_unstable();
                w.dedup();
                w
            };
            let gen_of = |p: u32| 1 + u64::from(p.wrapping_mul(2_654_435_761) % 100_000);
            let mut recorded = MapSketch::default();
            for &p in &written {
                recorded.insert(p);
                recorded.replace(p, 0, gen_of(p));
            }
            let lost: Vec<u32> = {
                let k = next(13).min(written.len() as u64);
                let mut l: Vec<u32> = (0..k).map(|_| written[next(written.len() as u64) as usize]).collect();
                l.sort_unstable();
                l.dedup();
                l
            };
            let fell: Vec<u32> = (0..next(4))
                .map(|_| written[next(written.len() as u64) as usize])
                .filter(|p| !lost.contains(p))
                .collect();
            let mut found = MapSketch::default();
            for &p in written.iter().filter(|p| !lost.contains(p)) {
                found.insert(p);
                let back = if fell.contains(&p) { 1 + (u64::from(p) % 7) } else { 0 };
                found.replace(p, 0, gen_of(p) - back.min(gen_of(p) - 1));
            }
            runs += 1;
            let Some(m) = recorded.missing(&found) else { continue };
            let mut pages: Vec<u32> = m.iter().map(|x| x.0).collect();
            pages.sort_unstable();
            assert_eq!(pages, lost, "written {}, fell back {fell:?}", written.len());
            // A page that fell back leaves its shortfall in its cells,
            // which the pages taken out carry on to others.
            for (p, g) in m.into_iter().filter(|_| fell.is_empty()) {
                assert_eq!(g, gen_of(p) as u32, "page {p}");
            }
            told += 1;
        }
        // Up to 12 lost of 24 cells: most are listed.
        assert!(told * 10 > runs * 7, "{told} of {runs} listed");
    }

    /// Any two sketches (as a forged checkpoint's, with a good crc, could
    /// be): an answer or none, never a panic, at most one page a cell.
    #[test]
    fn any_two_sketches_give_an_answer_or_none() {
        let mut x = 7u64;
        let mut next = || {
            x = splitmix64(x);
            x
        };
        for round in 0..20_000 {
            let mut a = MapSketch::default();
            let mut b = MapSketch::default();
            for (ca, cb) in a.cells.iter_mut().zip(b.cells.iter_mut()) {
                let small = round % 2 == 0;
                let v = |r: u64| if small { (r % 3) as u32 } else { r as u32 };
                *ca = SketchCell {
                    count: v(next()),
                    pages: v(next()),
                    check: v(next()),
                    generations: next() as u32,
                };
                *cb = SketchCell {
                    count: v(next()),
                    pages: v(next()),
                    check: v(next()),
                    generations: next() as u32,
                };
            }
            if let Some(m) = a.missing(&b) {
                assert!(m.len() <= SKETCH_CELLS);
            }
        }
    }

    #[test]
    fn each_page_lands_in_one_cell_of_each_part() {
        for p in [0u32, 1, 1013, 235_714, u32::MAX] {
            for part in 0..SKETCH_PARTS {
                let c = MapSketch::cell_of(p, part);
                assert!((part * SKETCH_PART_CELLS..(part + 1) * SKETCH_PART_CELLS).contains(&c));
            }
        }
    }
}
