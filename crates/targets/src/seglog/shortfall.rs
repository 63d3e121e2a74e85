//! Which map pages a shortfall of the map's digests ([`MapDigest`])
//! comes from, when more than one page may fall short.
//!
//! Recovery takes per page the newest usable copy not newer than the
//! checkpoint. Two kinds of page can then add less than the checkpoint
//! recorded: a page *lost* (no usable copy: it adds nothing, short by its
//! whole generation, somewhere in `1..=checkpoint`), of which recovery
//! knows how many (the checkpoint's count of pages written) but not
//! which (a zeroed copy looks unwritten), and a page that *could be
//! stale* (one usable copy, older than the checkpoint, beside an
//! unusable one: short by its current copy's generation over the one
//! taken, or not at all). Each page short by `m` leaves the plain sum
//! short by `m` and the weighted one by `weight(page) * m`, so a set of
//! pages with their shortfalls *explains* the digests when both add up.
//!
//! [`explain`] tries sets with the lost pages and no page stale, then one
//! stale, two, ...: the first set that explains both digests answers, if
//! every such set of its search names the same stale pages by the same
//! amounts (the lost pages may differ: they are unmapped whatever their
//! place). The lost pages are looked for first among the pages with a
//! torn copy (the map's magic, a bad crc: few, on a large volume mostly
//! written by none), then among all without a usable copy. A set that
//! explains them by chance needs the weighted digest (61 bits, the
//! weights a hash of the page) to land on one of the sets weighed, so the
//! search weighs at most [`CLASS_MAX`] sets in all: a chance of at most
//! 2^29 / 2^61 = 2^-32 of naming the wrong pages, no more than a crc32c
//! letting a damaged map page through. Past that bound (many pages that
//! could be lost or stale and a long shortfall), or past [`WORK_MAX`]
//! steps, it does not answer and recovery treats every page that could
//! be stale as stale.

use super::header::{mul_mod, quotient, sub_mod, MapDigest, MAP_DIGEST_PRIME};
use rustc_hash::FxHashMap;

/// Pages that could add to a shortfall: each page's index and the most it
/// can fall short by (a lost page: the checkpoint's generation; a page
/// that could be stale: the checkpoint's generation over the one taken).
pub type Suspects = [(u32, u64)];

/// The most sets of pages (with their shortfalls) [`explain`] weighs: the
/// chance a wrong set explains both digests is at most this over 2^61.
pub const CLASS_MAX: u128 = 1 << 29;

/// The most steps [`explain`] takes (a step: a page and its shortfall
/// tried, or a lookup by weight; each well under a microsecond).
pub const WORK_MAX: u64 = 1 << 22;

/// `recorded` (the checkpoint's digests) against `taken` (those of the
/// copies recovery took), `lost_count` pages having no usable copy, all
/// of them among the last of `lost` (each a list of the pages they could
/// be, the first the likeliest: a tier weighs few sets, so it is tried
/// first; the last, every page they could be): the pages of `stale` that
/// fell short and by how much, in `stale`'s order (empty: the lost pages
/// explain it all, no page that could be stale is), or `None` when no
/// answer is sound within the bounds (no set explains both, sets that do
/// disagree, or too many sets to weigh or steps to take). For each number
/// of stale pages, from none up, each tier is searched whose sets still
/// fit in [`CLASS_MAX`] with those already weighed (a tier that does not
/// is passed over, unweighed: a set found elsewhere is still wrong by
/// chance at most all sets weighed over 2^61).
pub fn explain(
    recorded: &MapDigest,
    taken: &MapDigest,
    lost: &[&Suspects],
    lost_count: usize,
    stale: &Suspects,
) -> Option<Vec<(u32, u64)>> {
    explain_within(recorded, taken, lost, lost_count, stale, &mut 0)
}

/// [`explain`], counting the sets it weighs into `weighed` (those
/// weighed by searches before it, of the same shortfall: [`CLASS_MAX`]
/// bounds them all together).
pub fn explain_within(
    recorded: &MapDigest,
    taken: &MapDigest,
    lost: &[&Suspects],
    lost_count: usize,
    stale: &Suspects,
    weighed: &mut u128,
) -> Option<Vec<(u32, u64)>> {
    let (d, dw) = taken.shortfall(recorded);
    let most = |s: &Suspects| s.iter().map(|x| x.1).max().unwrap_or(0);
    // With no page lost, one search (of no lost page) for each number.
    let tiers: &[&Suspects] = if lost_count == 0 { &[&[]] } else { lost };
    let mut work = 0u64;
    for s in 0..=stale.len() {
        let k = lost_count + s;
        if k == 0 {
            continue;
        }
        // Every page short adds at least 1: more pages only need more.
        if d < k as u64 {
            return None;
        }
        let mut searched = false;
        for &tier in tiers.iter().filter(|t| t.len() >= lost_count) {
            let reach = match (lost_count, s) {
                (0, _) => most(stale),
                (_, 0) => most(tier),
                _ => most(tier).max(most(stale)),
            };
            let amounts = u128::from(d.min(reach)).saturating_pow(k as u32 - 1);
            let sets = choose(tier.len(), lost_count).saturating_mul(choose(stale.len(), s));
            let class = sets.saturating_mul(amounts);
            if weighed.saturating_add(class) > CLASS_MAX {
                continue;
            }
            *weighed += class;
            searched = true;
            let mut search = Search::new([tier, stale], [lost_count, s], work);
            let r = search.visit(0, 0, d, dw);
            work = search.work;
            r.ok()?;
            if search.disagree {
                return None;
            }
            if let Some(fit) = search.fit {
                return Some(fit);
            }
        }
        if !searched {
            // More stale pages only weigh more sets.
            return None;
        }
    }
    None
}

/// `n` choose `k`, saturating.
fn choose(n: usize, k: usize) -> u128 {
    if k > n {
        return 0;
    }
    (0..k).fold(1u128, |c, i| c.saturating_mul((n - i) as u128) / (i as u128 + 1))
}

/// One search: `count[g]` pages of `groups[g]` (0: lost, 1: could be
/// stale), each short by at least 1 and at most its reach, in increasing
/// index within a group (each set once).
struct Search<'a> {
    groups: [&'a Suspects; 2],
    count: [usize; 2],
    /// The last page's group by weight (the last page is looked up, not
    /// tried): indices into it.
    last: FxHashMap<u64, Vec<usize>>,
    /// The stale pages of the set being tried, with their shortfalls.
    chosen: Vec<(u32, u64)>,
    fit: Option<Vec<(u32, u64)>>,
    disagree: bool,
    work: u64,
}

/// The search went past [`WORK_MAX`] steps, or found two answers.
struct Stop;

impl<'a> Search<'a> {
    fn new(groups: [&'a Suspects; 2], count: [usize; 2], work: u64) -> Search<'a> {
        let g = usize::from(count[1] > 0);
        let mut last: FxHashMap<u64, Vec<usize>> = FxHashMap::default();
        for (i, &(p, _)) in groups[g].iter().enumerate() {
            last.entry(MapDigest::weight(p)).or_default().push(i);
        }
        Search { groups, count, last, chosen: Vec::new(), fit: None, disagree: false, work }
    }

    fn step(&mut self) -> Result<(), Stop> {
        self.work += 1;
        if self.work > WORK_MAX {
            return Err(Stop);
        }
        Ok(())
    }

    /// Tries page `slot` of the set (from index `from` of its group) with
    /// `d` and `dw` left to explain.
    fn visit(&mut self, slot: usize, from: usize, d: u64, dw: u64) -> Result<(), Stop> {
        let k = self.count[0] + self.count[1];
        let g = usize::from(slot >= self.count[0]);
        let from = if slot == self.count[0] { 0 } else { from };
        let after = (k - slot - 1) as u64;
        let group = self.groups[g];
        if after == 0 {
            // The last page: its weight is the quotient.
            self.step()?;
            if d % MAP_DIGEST_PRIME == 0 {
                return Ok(());
            }
            let hits = self.last.get(&quotient(dw, d)).cloned().unwrap_or_default();
            for i in hits.into_iter().filter(|&i| i >= from && group[i].1 >= d) {
                self.chosen.extend((g == 1).then_some((group[i].0, d)));
                self.found();
                self.chosen.truncate(self.chosen.len() - usize::from(g == 1));
                if self.disagree {
                    return Err(Stop);
                }
            }
            return Ok(());
        }
        // The last page's group, and where its pages start.
        let g_last = usize::from(slot + 1 >= self.count[0]);
        for i in from..group.len() {
            let (p, reach) = group[i];
            let w = MapDigest::weight(p);
            let span = reach.min(d - after);
            let from_last = if g_last == g { i + 1 } else { 0 };
            if after == 1 && ((self.groups[g_last].len().saturating_sub(from_last)) as u64) < span {
                // Fewer pages left for the last place than shortfalls to
                // try for this one: both shortfalls solved per pair.
                self.solve_pairs(g, i, span, g_last, from_last, d, dw)?;
                continue;
            }
            for m in 1..=span {
                self.step()?;
                self.chosen.extend((g == 1).then_some((p, m)));
                let r = self.visit(slot + 1, i + 1, d - m, sub_mod(dw, mul_mod(w, m)));
                self.chosen.truncate(self.chosen.len() - usize::from(g == 1));
                r?;
            }
        }
        Ok(())
    }

    /// The last two pages: page `i` of group `g` (short by at most
    /// `span`) with each page of group `g_last` from `from_last`, the
    /// shortfalls of both solved from what is left (`d`, `dw`): `w_i * m
    /// + w_j * (d - m) = dw` gives `m`. A pair of equal weights (a chance
    /// of 2^-61) has no single answer and is passed over.
    #[allow(clippy::too_many_arguments)]
    fn solve_pairs(
        &mut self,
        g: usize,
        i: usize,
        span: u64,
        g_last: usize,
        from_last: usize,
        d: u64,
        dw: u64,
    ) -> Result<(), Stop> {
        let (p, _) = self.groups[g][i];
        let wp = MapDigest::weight(p);
        for j in from_last..self.groups[g_last].len() {
            self.step()?;
            let (q, reach_q) = self.groups[g_last][j];
            let wq = MapDigest::weight(q);
            if wp == wq {
                continue;
            }
            let m = quotient(sub_mod(dw, mul_mod(wq, d)), sub_mod(wp, wq));
            if m == 0 || m > span || d - m > reach_q {
                continue;
            }
            let pushed = [(g == 1).then_some((p, m)), (g_last == 1).then_some((q, d - m))];
            let n = pushed.iter().flatten().count();
            self.chosen.extend(pushed.into_iter().flatten());
            self.found();
            self.chosen.truncate(self.chosen.len() - n);
            if self.disagree {
                return Err(Stop);
            }
        }
        Ok(())
    }

    fn found(&mut self) {
        match &self.fit {
            None => self.fit = Some(self.chosen.clone()),
            Some(f) if *f != self.chosen => self.disagree = true,
            Some(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The digests of `gens` (page, generation).
    fn digest(gens: &[(u32, u64)]) -> MapDigest {
        let mut d = MapDigest::default();
        for &(p, g) in gens {
            d.replace(p, 0, g);
        }
        d
    }

    #[test]
    fn mul_mod_is_the_remainder() {
        let p = MAP_DIGEST_PRIME;
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut vals = vec![0, 1, 2, p - 1, p, p + 1, u64::MAX, u64::MAX - 1, 1 << 61, 1 << 63];
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            vals.push(x);
        }
        for &a in &vals {
            for &b in vals.iter().step_by(37) {
                let want = (u128::from(a) * u128::from(b) % u128::from(p)) as u64;
                assert_eq!(mul_mod(a, b), want, "{a} * {b}");
            }
        }
    }

    /// Twelve pages of generations 1..=9 (checkpoint 9), four unwritten:
    /// none to three pages lost beside none to three stale (by 1 to 3
    /// generations) are each explained exactly, naming the stale pages
    /// and their shortfalls and clearing the other pages that could be
    /// stale (the smaller sets, tried first, never fit by chance).
    #[test]
    fn lost_and_stale_pages_are_told_apart_by_the_two_digests() {
        let ck = 9u64;
        let gens: Vec<(u32, u64)> = (0..12u32).map(|p| (p * 7 + 3, 1 + u64::from(p) % ck)).collect();
        let recorded = digest(&gens);
        let mut cases = 0;
        // Lost: pages 0.. (by position in `gens`); stale: which and by how much.
        let lost_sets: [&[usize]; 4] = [&[], &[0], &[0, 5], &[2, 3, 11]];
        let stale_sets: [&[(usize, u64)]; 4] = [&[], &[(4, 1)], &[(4, 1), (7, 3)], &[(1, 1), (6, 2), (9, 1)]];
        for lost_at in lost_sets {
            for stale_at in stale_sets {
                if lost_at.is_empty() && stale_at.is_empty() {
                    continue;
                }
                // Stale pages: taken a generation below their own; the
                // rest that could be stale (written at most at ck - 1,
                // not lost) are innocent.
                let mut taken = gens.clone();
                for &(i, m) in stale_at {
                    if taken[i].1 <= m {
                        taken[i].1 = m + 1;
                    }
                }
                let truth = digest(&taken);
                for &(i, m) in stale_at {
                    taken[i].1 -= m;
                }
                let lost: Vec<(u32, u64)> = lost_at.iter().map(|&i| (taken[i].0, ck)).collect();
                // Unwritten pages look lost too.
                let lost: Vec<(u32, u64)> = lost.into_iter().chain((100..104).map(|p| (p, ck))).collect();
                let stale: Vec<(u32, u64)> = (0..gens.len())
                    .filter(|i| !lost_at.contains(i) && taken[*i].1 < ck)
                    .map(|i| (taken[i].0, ck - taken[i].1))
                    .collect();
                let kept: Vec<(u32, u64)> =
                    (0..gens.len()).filter(|i| !lost_at.contains(i)).map(|i| taken[i]).collect();
                let got = explain(&truth, &digest(&kept), &[&lost], lost_at.len(), &stale);
                let mut want: Vec<(u32, u64)> = stale_at.iter().map(|&(i, m)| (taken[i].0, m)).collect();
                want.sort_by_key(|x| stale.iter().position(|s| s.0 == x.0));
                assert_eq!(got, Some(want), "lost {lost_at:?}, stale {stale_at:?}");
                cases += 1;
            }
        }
        assert_eq!(cases, 15);
        // The smallest cases are always answered.
        let one = digest(&gens[1..]);
        let lost = [(gens[0].0, ck), (100, ck)];
        assert_eq!(explain(&recorded, &one, &[&lost], 1, &[(gens[1].0, 3)]), Some(vec![]));
    }

    /// Three pages lost out of three without a copy, each written late on
    /// a volume whose checkpoint is 3,000: the two last shortfalls are
    /// solved per pair, so the search takes thousands of steps and clears
    /// the candidates (trying every shortfall of the second, it passed
    /// [`WORK_MAX`] and gave no answer). Two lost beside one stale: the
    /// stale page named, with its shortfall.
    #[test]
    fn three_lost_pages_are_found_after_a_long_history() {
        let ck = 3000u64;
        // The lost pages written late: each could be short by up to 3,000.
        let gen = |p: u32| if p < 3 { ck - 7 * u64::from(p) } else { 1 + u64::from(p) * 71 % ck };
        let gens: Vec<(u32, u64)> = (0..40u32).map(|p| (p, gen(p))).collect();
        let recorded = digest(&gens);
        let lost: Vec<(u32, u64)> = gens[..3].iter().map(|g| (g.0, ck)).collect();
        let stale: Vec<(u32, u64)> = gens[3..].iter().map(|g| (g.0, ck - g.1)).collect();
        assert_eq!(explain(&recorded, &digest(&gens[3..]), &[&lost], 3, &stale), Some(vec![]));
        // One of them stale beside two lost: named, by its shortfall.
        let mut taken = gens.clone();
        taken[7].1 -= 5;
        let stale: Vec<(u32, u64)> = taken[2..].iter().map(|g| (g.0, ck - g.1)).collect();
        let got = explain(&recorded, &digest(&taken[2..]), &[&lost[..2]], 2, &stale);
        assert_eq!(got, Some(vec![(7, 5)]));
    }

    /// No set explains a shortfall the weights cannot make (a forged
    /// digest), and a search too wide to be trusted does not answer,
    /// unless a narrower tier (the pages with a torn copy) holds the set.
    #[test]
    fn no_answer_without_a_fit_or_past_the_bounds() {
        let gens: Vec<(u32, u64)> = (0..6u32).map(|p| (p, 4)).collect();
        let recorded = digest(&gens);
        let mut forged = digest(&gens[2..]);
        forged.weighted = (forged.weighted + 1) % MAP_DIGEST_PRIME;
        let lost = [(0, 9), (1, 9)];
        assert_eq!(explain(&recorded, &forged, &[&lost], 2, &[]), None, "forged");
        assert_eq!(explain(&recorded, &digest(&gens[2..]), &[&lost], 2, &[]), Some(vec![]));
        // The same two pages lost among a million that could be: too many
        // pairs to weigh.
        let many: Vec<(u32, u64)> = (0..1_000_000u32).map(|p| (p, 9)).collect();
        assert_eq!(explain(&recorded, &digest(&gens[2..]), &[&many], 2, &[]), None, "too wide");
        // Unless the two have a torn copy, which few pages have: that tier
        // is searched first, and a page stale beside them is named.
        let tiers: [&Suspects; 2] = [&lost, &many];
        assert_eq!(explain(&recorded, &digest(&gens[2..]), &tiers, 2, &[(3, 9)]), Some(vec![]), "torn");
        let mut taken = gens.clone();
        taken[3].1 -= 2;
        let stale = [(3, 7), (4, 5)];
        assert_eq!(
            explain(&recorded, &digest(&taken[2..]), &tiers, 2, &stale),
            Some(vec![(3, 2)]),
            "torn, stale"
        );
        assert_eq!(choose(5, 2), 10);
        assert_eq!(choose(2, 3), 0);
    }
}
