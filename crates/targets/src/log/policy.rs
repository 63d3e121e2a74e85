//! Reclamation policies: the decisions, behind one trait, chosen by the
//! `policy` key; the mechanism (cleaning passes, checkpoints, the crash
//! rule) is the target's. A policy sees a [`Census`] of the segments and
//! answers three questions: where the next segment is written, which
//! segments to clean, and whether user writes may go into holes (SSR).
//! Policies never block and keep no per-request state.

use super::config::PolicyKind;

/// One segment as the policy sees it.
#[derive(Clone, Copy, Debug)]
pub struct SegInfo {
    /// Its location.
    pub loc: u32,
    /// Live blocks.
    pub valid: u32,
    /// When it was last written, in segments written (the log's clock:
    /// deterministic, and age in writes is what cleaning policies mean).
    pub written_at_seq: u64,
    /// Its holes may be written now (the crash rule holds for it).
    pub eligible: bool,
    /// Open, reserved as the next, or being written: not a victim.
    pub busy: bool,
}

/// A snapshot of the segments, made when a decision is due.
pub struct Census {
    /// Every segment.
    pub segs: Vec<SegInfo>,
    /// Slots per segment.
    pub slot_count: u32,
    /// The segment written last (the head), for distances.
    pub head: u32,
    /// Segments written so far (the clock of `written_at_seq`).
    pub now_seq: u64,
    /// Free segments the cleaner keeps.
    pub free_segments_min: u32,
    /// Sliding compaction runs (idle re-sequencing into home segments):
    /// every segment goes to `home` when it is free, else to the far end
    /// (the highest free segment), away from the homes still to fill.
    pub compacting: bool,
    /// The home segment sliding compaction fills next.
    pub home: Option<u32>,
    /// The shape of [`Census::best_holes`]'s target, for policies that
    /// weigh SSR against cleaning ([`Reclaim::weighs_ssr_against_cleaning`];
    /// `None` for the others, or without a target).
    pub ssr_shape: Option<HoleShape>,
    /// Map pages the checkpoint after a cleaning pass writes (for the same
    /// policies): those a cycle of `clean_batch` segments dirties (the
    /// pass's victims refilled), as this epoch's first segments did.
    pub checkpoint_pages: u32,
    /// Victims a cleaning pass takes (`clean_batch_segments`).
    pub clean_batch: u32,
}

/// A segment's holes as the disk sees an SSR pass over them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HoleShape {
    /// Free slots.
    pub holes: u32,
    /// Stretches of live slots between two holes shorter than
    /// [`ROTATION_MISS_BYTES`]: the write of the holes after one misses
    /// its first sector and waits a whole rotation.
    pub short_gaps: u32,
    /// Live slots in the longer stretches between two holes: the disk
    /// passes over them between two writes.
    pub long_gap_slots: u32,
}

/// A write that starts less than this after the end of the write before it
/// on the same track misses its first sector and waits a whole rotation:
/// the command overhead (and write settling, 0.1-0.4 ms on a 7200 rpm
/// disk) carries the platter past that much track at 40-80 MB/s. On the
/// `st3160815as` model (session 25, `--record-disk` of the btrfs fio and
/// ext4 IO TEST replays) writes 0-12 KiB after the one before took
/// 8.4-8.9 ms, 16 KiB and more 0.3-0.9 ms.
pub const ROTATION_MISS_BYTES: u64 = 16 << 10;

/// A disk positioning (a missed rotation, 8.3 ms at 7200 rpm; or a seek
/// and half a rotation) in slot transfers (a 4 KiB slot at 50-80 MB/s:
/// 0.05-0.08 ms).
pub const POSITIONING_SLOTS: f64 = 100.0;

impl Census {
    /// Eligible, not busy, empty segments.
    pub fn free_count(&self) -> u32 {
        self.segs.iter().filter(|s| s.eligible && !s.busy && s.valid == 0).count() as u32
    }

    /// Average slack (holes) of used segments, in percent of a segment.
    pub fn slack_pct(&self) -> u64 {
        let used: Vec<&SegInfo> = self.segs.iter().filter(|s| s.valid > 0).collect();
        if used.is_empty() {
            return 100;
        }
        let holes: u64 = used.iter().map(|s| u64::from(self.slot_count - s.valid)).sum();
        holes * 100 / (used.len() as u64 * u64::from(self.slot_count))
    }

    /// Whether segment `l` is free: eligible, empty, not busy.
    pub fn is_free(&self, l: u32) -> bool {
        let s = &self.segs[l as usize];
        s.eligible && s.valid == 0 && !s.busy
    }

    /// The free segment at the far end (the highest), if any.
    pub fn last_free(&self) -> Option<u32> {
        (0..self.segs.len() as u32).rev().find(|&l| self.is_free(l))
    }

    /// Where sliding compaction writes next: the home when free, else the
    /// far end (what is moved out of a home goes where no home is, as long
    /// as free segments are there), else holes.
    pub fn compaction_next(&self) -> Option<u32> {
        self.home.filter(|&h| self.is_free(h)).or_else(|| self.last_free()).or_else(|| self.best_holes())
    }

    /// The free segment nearest after the head (a log's next-fit), if any.
    pub fn next_free(&self) -> Option<u32> {
        let n = self.segs.len() as u32;
        (1..=n).map(|d| (self.head + d) % n).find(|&l| {
            self.segs[l as usize].eligible && self.segs[l as usize].valid == 0 && !self.segs[l as usize].busy
        })
    }

    /// Where re-sequenced blocks go next: the segment after the head if it
    /// is free (so consecutive groups lie in consecutive segments), else
    /// the first of the longest run of free segments.
    pub fn next_free_run(&self) -> Option<u32> {
        let free = |l: usize| self.segs[l].eligible && self.segs[l].valid == 0 && !self.segs[l].busy;
        let after = self.head as usize + 1;
        if after < self.segs.len() && free(after) {
            return Some(after as u32);
        }
        let (mut best, mut run_start, mut run) = (None, 0, 0);
        for l in 0..self.segs.len() {
            if !free(l) {
                run = 0;
                continue;
            }
            if run == 0 {
                run_start = l;
            }
            run += 1;
            if best.is_none_or(|(_, n)| run > n) {
                best = Some((run_start as u32, run));
            }
        }
        best.map(|(l, _)| l)
    }

    /// The best SSR target: most holes, fewest seeks from the head (a
    /// disk, not flash): score = hole share - distance share / 2.
    pub fn best_holes(&self) -> Option<u32> {
        let n = self.segs.len() as f64;
        let sc = f64::from(self.slot_count);
        self.segs
            .iter()
            .filter(|s| s.eligible && !s.busy && s.valid > 0 && s.valid < self.slot_count)
            .map(|s| {
                let density = (sc - f64::from(s.valid)) / sc;
                let distance = f64::from(s.loc.abs_diff(self.head)) / n;
                (s.loc, density - distance / 2.0)
            })
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
            .map(|(l, _)| l)
    }

    /// Whether a cleaning pass over `victims` gains free space whatever the
    /// destination: at least two victims whose live blocks fill at least
    /// one segment less than their count. (A single victim's blocks may
    /// fill a fresh segment that the pass's checkpoint seals as empty as
    /// the victim was.)
    pub fn pass_gains(&self, victims: &[u32]) -> bool {
        let live: u64 = victims.iter().map(|&v| u64::from(self.segs[v as usize].valid)).sum();
        victims.len() >= 2 && live <= (victims.len() as u64 - 1) * u64::from(self.slot_count)
    }

    /// The cost estimate (the paper's future work), in slot transfers per
    /// slot of user data, of writing it by SSR into [`Census::best_holes`]'s
    /// target against cleaning `victims` first and writing it into the
    /// space they free; `None` without a target or a victim that frees
    /// space. Only what differs between the two is counted (a flush's part
    /// costs a positioning either way):
    /// - SSR: each hole's transfer, the long stretches of live slots the
    ///   disk passes over, and a rotation per short stretch (the holes'
    ///   runs are separate writes, and one that starts right after the one
    ///   before misses its sector; ext4 IO TEST targets hold files, 16-slot
    ///   live runs; btrfs targets hold single live blocks between holes);
    /// - cleaning: a positioning and the whole segment per victim read,
    ///   its live blocks written at the head (one sequential run), and the
    ///   checkpoint that must follow before the victims may be written
    ///   again (crash rule): a positioning per dirty map page (a page's two
    ///   copies lie side by side, so consecutive pages' writes are a slot
    ///   or two apart and each waits a rotation), one for the flush and one
    ///   for the checkpoint block; then each freed slot's own transfer.
    ///   With random updates nearly every map page is dirty (ext4 IO TEST:
    ///   about 120 of 259) and that checkpoint is the cleaning's main cost;
    ///   btrfs's writes dirty a few (about 8).
    pub fn ssr_and_clean_costs(&self, victims: &[u32]) -> Option<(f64, f64)> {
        let shape = self.ssr_shape.filter(|s| s.holes > 0)?;
        let sc = f64::from(self.slot_count);
        let live: f64 = victims.iter().map(|&v| f64::from(self.segs[v as usize].valid)).sum();
        let freed = victims.len() as f64 * sc - live;
        if freed <= 0.0 {
            return None;
        }
        let holes = f64::from(shape.holes);
        let ssr = (holes + f64::from(shape.long_gap_slots) + f64::from(shape.short_gaps) * POSITIONING_SLOTS)
            / holes;
        let reads = victims.len() as f64 * (POSITIONING_SLOTS + sc);
        let checkpoint = (f64::from(self.checkpoint_pages) + 2.0) * POSITIONING_SLOTS;
        let clean = (reads + live + checkpoint) / freed + 1.0;
        Some((ssr, clean))
    }

    /// Cleaning candidates: not busy, some live blocks, some holes.
    fn candidates(&self) -> impl Iterator<Item = &SegInfo> {
        self.segs.iter().filter(|s| !s.busy && s.valid > 0 && s.valid < self.slot_count)
    }

    /// Greedy: fewest live blocks first.
    pub fn greedy(&self, max: usize) -> Vec<u32> {
        fewest_live(self.candidates(), max)
    }

    /// Sprite cost-benefit: highest (1 - u) * age / (1 + u) first.
    pub fn cost_benefit(&self, max: usize) -> Vec<u32> {
        let sc = f64::from(self.slot_count);
        let score = |s: &SegInfo| {
            let u = f64::from(s.valid) / sc;
            let age = (self.now_seq.saturating_sub(s.written_at_seq) + 1) as f64;
            (1.0 - u) * age / (1.0 + u)
        };
        let mut c: Vec<(&SegInfo, f64)> = self.candidates().map(|s| (s, score(s))).collect();
        c.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.loc.cmp(&b.0.loc)));
        c.into_iter().take(max).map(|(s, _)| s.loc).collect()
    }

    /// Age threshold (F2FS ATGC): greedy among segments older than the
    /// threshold; greedy over all when none is.
    pub fn age_threshold(&self, max: usize, threshold_seq: u64) -> Vec<u32> {
        let old =
            self.candidates().filter(|s| self.now_seq.saturating_sub(s.written_at_seq) >= threshold_seq);
        match fewest_live(old, max) {
            v if v.is_empty() => self.greedy(max),
            v => v,
        }
    }
}

/// The `max` segments of `segs` with the fewest live blocks, fewest first
/// (ties by location): a partial selection, so idle-cleaning offers
/// (`greedy(1)`) do not sort every candidate.
fn fewest_live<'a>(segs: impl Iterator<Item = &'a SegInfo>, max: usize) -> Vec<u32> {
    let mut keys: Vec<(u32, u32)> = segs.map(|s| (s.valid, s.loc)).collect();
    if max == 0 {
        return Vec::new();
    }
    if max < keys.len() {
        keys.select_nth_unstable(max - 1);
        keys.truncate(max);
    }
    keys.sort_unstable();
    keys.into_iter().map(|(_, l)| l).collect()
}

/// What caused a slot write.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Cause {
    /// A client's write.
    User,
    /// The cleaner moving live blocks.
    Cleaner,
    /// Idle re-sequencing: a fragmented group of blocks rewritten in
    /// logical order (into free segments first, so it reads in one run).
    Resequence,
}

/// The decisions a reclamation policy makes.
pub trait Reclaim: Send {
    /// Where the next segment goes, for writes of `cause`: a free segment,
    /// or one with holes (SSR for user writes, plugging for the cleaner).
    /// `None` only if nothing is eligible.
    fn choose_next(&self, c: &Census, cause: Cause) -> Option<u32>;
    /// Whether user writes may go into holes now.
    fn user_holes(&self, c: &Census) -> bool;
    /// Victims for one cleaning pass, at most `max`; `on_demand` when a
    /// write waits for it.
    fn victims(&self, c: &Census, max: usize, on_demand: bool) -> Vec<u32>;
    /// Whether idle (background) cleaning is worth a pass now.
    fn clean_when_idle(&self, c: &Census, free_segments_target: u32) -> bool;
    /// Whether [`Reclaim::user_holes`] weighs SSR against cleaning with
    /// [`Census::ssr_and_clean_costs`] (the census then carries what it
    /// needs, at the price of a look at the SSR target's slots).
    fn weighs_ssr_against_cleaning(&self) -> bool;
    /// Whether a re-sequencing pass is due while requests keep coming,
    /// `user_blocks_since_pass` blocks of user writes after the last one:
    /// a bounded share of the disk for the layout a sequential read after
    /// the writes needs, paid beside the writes instead of in idle time
    /// (`resequence_busy_user_blocks_per_pass`; 0: never).
    fn resequence_busy_due(&self, user_blocks_since_pass: u64) -> bool;
}

/// The policies of [`PolicyKind`], one struct with the kind's knobs.
pub struct Policy {
    kind: PolicyKind,
    age_threshold_seq: u64,
    slack_min_pct: u64,
    busy_user_blocks_per_pass: u64,
}

/// The policy for a config.
pub fn make(
    kind: PolicyKind,
    age_threshold_segments: u64,
    slack_min_pct: u64,
    busy_user_blocks_per_pass: u64,
) -> Box<dyn Reclaim> {
    Box::new(Policy {
        kind,
        age_threshold_seq: age_threshold_segments,
        slack_min_pct,
        busy_user_blocks_per_pass,
    })
}

impl Policy {
    /// Cost-based (the paper's future work): SSR when the estimate
    /// ([`Census::ssr_and_clean_costs`]) finds it no dearer than an
    /// on-demand pass over this policy's victims; SSR when nothing frees
    /// space.
    fn ssr_cheaper(&self, c: &Census) -> bool {
        let victims = self.victims(c, c.clean_batch as usize, true);
        c.ssr_and_clean_costs(&victims).is_none_or(|(ssr, clean)| ssr <= clean)
    }
}

impl Reclaim for Policy {
    fn choose_next(&self, c: &Census, cause: Cause) -> Option<u32> {
        let holes_first = match (self.kind, cause) {
            (PolicyKind::Plugging, Cause::Cleaner) => true,
            (PolicyKind::Ssr | PolicyKind::Adaptive | PolicyKind::Cost, Cause::User) => {
                c.free_count() <= c.free_segments_min && self.user_holes(c)
            }
            _ => false,
        };
        if c.compacting {
            c.compaction_next()
        } else if cause == Cause::Resequence {
            c.next_free_run().or_else(|| c.best_holes())
        } else if holes_first {
            c.best_holes().or_else(|| c.next_free())
        } else {
            c.next_free().or_else(|| c.best_holes())
        }
    }

    fn user_holes(&self, c: &Census) -> bool {
        match self.kind {
            PolicyKind::Ssr => true,
            // The paper's rule (SSR unless the average slack is too small),
            // and SSR only where the estimate agrees (session 25: with idle
            // cleaning only in idle time, the rule alone wrote btrfs's sync
            // random writes into holes between single live blocks, a
            // rotation per few slots).
            PolicyKind::Adaptive => c.slack_pct() >= self.slack_min_pct && self.ssr_cheaper(c),
            PolicyKind::Cost => self.ssr_cheaper(c),
            _ => false,
        }
    }

    fn victims(&self, c: &Census, max: usize, on_demand: bool) -> Vec<u32> {
        match self.kind {
            // A write waits for an on-demand pass: the victims that free
            // the most space for the least copying (session 25: with
            // cost-benefit's, fuller and older, the estimate found
            // cleaning dearer and took SSR into btrfs's scattered holes;
            // fio-4-rand-write 1880.5 s against 1260.2 with greedy's).
            PolicyKind::Adaptive if on_demand => c.greedy(max),
            PolicyKind::CostBenefit | PolicyKind::Adaptive => c.cost_benefit(max),
            PolicyKind::AgeThreshold => c.age_threshold(max, self.age_threshold_seq),
            _ => c.greedy(max),
        }
    }

    fn weighs_ssr_against_cleaning(&self) -> bool {
        matches!(self.kind, PolicyKind::Adaptive | PolicyKind::Cost)
    }

    fn resequence_busy_due(&self, user_blocks_since_pass: u64) -> bool {
        // Every policy alike: the pass is the idle mechanism's, its budget
        // the one knob (bench/results/log/busy-resequence.md).
        self.busy_user_blocks_per_pass > 0 && user_blocks_since_pass >= self.busy_user_blocks_per_pass
    }

    fn clean_when_idle(&self, c: &Census, free_segments_target: u32) -> bool {
        // Only while a pass gains at least half a segment per victim: idle
        // cleaning must converge even when the target is out of reach.
        let gains = c.greedy(1).first().is_some_and(|&v| c.segs[v as usize].valid * 2 <= c.slot_count);
        self.kind != PolicyKind::Ssr && c.free_count() < free_segments_target && gains
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn census(valid: &[u32]) -> Census {
        let segs = valid
            .iter()
            .enumerate()
            .map(|(i, &v)| SegInfo {
                loc: i as u32,
                valid: v,
                written_at_seq: i as u64 * 1000,
                eligible: true,
                busy: false,
            })
            .collect();
        Census {
            segs,
            slot_count: 8,
            head: 0,
            now_seq: 10_000,
            free_segments_min: 1,
            compacting: false,
            home: None,
            ssr_shape: None,
            checkpoint_pages: 0,
            clean_batch: 4,
        }
    }

    #[test]
    fn victims_and_targets_follow_each_rule() {
        let c = census(&[8, 6, 2, 0, 7, 3, 0]);
        assert_eq!(c.greedy(2), vec![2, 5]);
        // The partial selection gives a full sort's prefix for every count
        // (ties by location: 4 and 6 hold 7 live blocks each).
        let ties = census(&[8, 6, 2, 0, 7, 3, 7, 1, 6]);
        for max in 0..=9 {
            let mut all: Vec<&SegInfo> = ties.candidates().collect();
            all.sort_by_key(|s| (s.valid, s.loc));
            let sorted: Vec<u32> = all.iter().take(max).map(|s| s.loc).collect();
            assert_eq!(ties.greedy(max), sorted, "max {max}");
        }
        assert_eq!(ties.greedy(5), vec![7, 2, 5, 1, 8]);
        assert_eq!(c.next_free(), Some(3));
        assert_eq!(c.free_count(), 2);
        // Cost-benefit prefers the older of similar segments.
        let cb = c.cost_benefit(1);
        assert_eq!(cb, vec![2]);
        // ATGC: only segments older than 7 us (written before 3 us).
        assert_eq!(c.age_threshold(1, 7_000), vec![2]);
        assert_eq!(c.age_threshold(1, 9_000), vec![1], "only segments 0 and 1 are that old; 0 is full");
        // SSR: the most holes near the head.
        assert_eq!(c.best_holes(), Some(2));
        // Re-sequencing: the segment after the head when free, else the
        // longest run of free segments.
        let runs = census(&[8, 0, 7, 0, 0, 0, 5, 0, 0]);
        assert_eq!(runs.next_free_run(), Some(1), "the segment after the head (0) is free");
        let mut after = census(&[8, 8, 7, 0, 0, 0, 5, 0, 0]);
        after.head = 6;
        assert_eq!(after.next_free_run(), Some(7));
        after.head = 0;
        assert_eq!(after.next_free_run(), Some(3), "the longest run: 3..=5");
        assert_eq!(c.next_free_run(), Some(3), "runs of one (3 and 6): the first");
        assert!(c.slack_pct() > 0);
        // Sliding compaction: the home when free, else the far end.
        let greedy = make(PolicyKind::Greedy, 0, 10, 0);
        let mut slide = census(&[8, 0, 7, 0, 0, 5, 0, 8]);
        slide.compacting = true;
        slide.home = Some(3);
        assert_eq!(greedy.choose_next(&slide, Cause::Cleaner), Some(3));
        slide.home = Some(2);
        assert_eq!(greedy.choose_next(&slide, Cause::User), Some(6), "home 2 is not free: the far end");
        slide.compacting = false;
        assert_eq!(greedy.choose_next(&slide, Cause::User), Some(1), "not compacting: next-fit");
    }

    #[test]
    fn busy_resequencing_is_due_every_budget_of_user_blocks_and_never_when_off() {
        use PolicyKind::*;
        for kind in [Greedy, CostBenefit, AgeThreshold, Plugging, Ssr, Adaptive, Cost] {
            let name = kind.name();
            let off = make(kind, 0, 10, 0);
            assert!(!off.resequence_busy_due(0) && !off.resequence_busy_due(u64::MAX), "{name}: off");
            let every = make(kind, 0, 10, 64);
            assert!(!every.resequence_busy_due(0), "{name}");
            assert!(!every.resequence_busy_due(63), "{name}");
            assert!(every.resequence_busy_due(64), "{name}");
            assert!(every.resequence_busy_due(1000), "{name}");
        }
    }
}

#[cfg(test)]
mod cost_tests {
    use super::*;

    /// 128-slot segments: segment 0 (at the head, 104 holes) is the SSR
    /// target; segments 1-4 hold 30 live blocks each, and a pass's four
    /// victims are segment 0 and segments 1-3.
    fn census(short_gaps: u32, checkpoint_pages: u32) -> Census {
        let seg = |loc, valid| SegInfo { loc, valid, written_at_seq: 0, eligible: true, busy: false };
        let mut segs = vec![seg(0, 24)];
        segs.extend((1..=4).map(|l| seg(l, 30)));
        segs.extend((5..12).map(|l| seg(l, 128)));
        Census {
            segs,
            slot_count: 128,
            head: 0,
            now_seq: 100,
            free_segments_min: 2,
            compacting: false,
            home: None,
            ssr_shape: Some(HoleShape { holes: 104, short_gaps, long_gap_slots: 0 }),
            checkpoint_pages,
            clean_batch: 4,
        }
    }

    #[test]
    fn ssr_is_weighed_against_cleaning_by_what_the_disk_pays() {
        let (adaptive, cost) = (make(PolicyKind::Adaptive, 0, 10, 0), make(PolicyKind::Cost, 0, 10, 0));
        let (ssr, greedy) = (make(PolicyKind::Ssr, 0, 10, 0), make(PolicyKind::Greedy, 0, 10, 0));
        for p in [&adaptive, &cost] {
            assert!(p.weighs_ssr_against_cleaning());
        }
        assert!(!ssr.weighs_ssr_against_cleaning() && !greedy.weighs_ssr_against_cleaning());

        // The holes in one run (or split by long live stretches): SSR
        // sweeps them at the cost of the writes.
        let c = census(0, 8);
        assert_eq!(c.best_holes(), Some(0));
        assert!(c.slack_pct() >= 10);
        assert!(adaptive.user_holes(&c) && cost.user_holes(&c));

        // btrfs's sync random writes (session 25): the holes split by
        // single live blocks, 16 of them, each a rotation the disk misses;
        // the checkpoint after a pass writes 8 map pages. The paper's slack
        // rule alone says SSR (as `ssr` does); the estimate says clean.
        let c = census(16, 8);
        let (s, k) = c.ssr_and_clean_costs(&c.greedy(4)).expect("a target and victims");
        assert!(s > k, "SSR {s} against cleaning {k} slot transfers a slot");
        assert!(ssr.user_holes(&c));
        assert!(!adaptive.user_holes(&c) && !cost.user_holes(&c));

        // The same target when the checkpoint writes 200 map pages (ext4's
        // random updates, the IO TEST): cleaning's checkpoint is dearer.
        let c = census(16, 200);
        assert!(adaptive.user_holes(&c) && cost.user_holes(&c));

        // No estimate without victims that free space or without a target:
        // then `cost` does SSR, as every SSR policy did before.
        assert_eq!(c.ssr_and_clean_costs(&[]), None);
        let mut none = census(16, 8);
        none.ssr_shape = None;
        assert_eq!(none.ssr_and_clean_costs(&none.greedy(4)), None);
        assert!(cost.user_holes(&none));

        // Adaptive cleans on demand greedy's victims (the estimate weighs
        // those) and idle cost-benefit's: segment 1, the emptiest, was
        // written last.
        let mut young = census(16, 8);
        young.segs[1].valid = 20;
        young.segs[1].written_at_seq = 99;
        assert_eq!(young.greedy(1), vec![1]);
        assert_eq!(young.cost_benefit(1), vec![0]);
        assert_eq!(adaptive.victims(&young, 1, true), vec![1]);
        assert_eq!(adaptive.victims(&young, 1, false), vec![0]);
        assert_eq!(greedy.victims(&young, 1, false), vec![1]);

        // The slack rule still holds adaptive back where `cost` goes on.
        let mut tight = census(0, 200);
        tight.segs[0].valid = 120;
        tight.ssr_shape = Some(HoleShape { holes: 8, short_gaps: 0, long_gap_slots: 0 });
        for s in &mut tight.segs[1..=4] {
            s.valid = 126;
        }
        assert!(tight.slack_pct() < 10);
        assert!(cost.user_holes(&tight) && !adaptive.user_holes(&tight));
    }
}
