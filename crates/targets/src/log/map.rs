//! The block map: in memory a flat `u32` per volume block (the slot that
//! holds it, [`UNMAPPED`] for none: reads as zeroes); on disk, map pages
//! written only at checkpoints (the paper's lazy indirect-block update at
//! block level: a write costs one slot, and its map entry reaches the disk
//! with the next checkpoint; until then the segment summary is what
//! recovery rolls forward from).
//!
//! Map page (a [`MetaBlockCodec`] block of 4 KiB; its generation is the
//! checkpoint generation that wrote it), payload, version 2:
//! ```text
//! 0 owner u64 (the format id XOR the page index)   8 entries u32 * (the page's blocks)
//! ```
//! Version 1 (before map pages carried the format id, read by this build):
//! ```text
//! 0 page_index u32   4 entry_count u32   8 entries u32 * entry_count
//! ```
//! Each page has two copies, adjacent: copy `c` of page `p` at
//! `offset + (2p + c) * 4096`. A page is written to the copy that does
//! not hold its current version, so a torn write leaves the current one;
//! recovery takes, per page, the newest valid copy of the checkpoint's
//! format whose generation is at most the checkpoint's (a copy newer than
//! the checkpoint belongs to a checkpoint that never completed, and is
//! rewritten before serving).
//!
//! **Format identity.** Format writes no map page: whatever an earlier use
//! of the device left in the map area (valid crcs, maybe higher
//! generations) stays there, and only copies carrying the checkpoint's
//! format id are this volume's ([`PageOwner`]); a page with no such copy
//! is unmapped, as every page of a fresh format is. The owner field folds
//! the page index in, so a copy of another page (a misplaced write) is not
//! taken either (version 1 names the index itself). A page of version 1
//! carries no id: it is the volume's own only on a volume formatted
//! before map pages carried the id (its format wrote every page: the
//! checkpoint's `legacy_map`), never on one formatted by this build.

use layoutd_core::metablock::{MetaBlockCodec, MetaError, Reader, GENERATION_READ_MAX, HEADER_BYTES};

/// A block with no slot: it reads as zeroes.
pub const UNMAPPED: u32 = u32::MAX;
/// Bytes of one map page copy.
pub const PAGE_BYTES: u64 = 4096;
/// Entries one page holds.
pub const ENTRIES_PER_PAGE: u64 = (PAGE_BYTES - HEADER_BYTES as u64 - 8) / 4;
/// Format version of map pages written by this build: 2 since map pages
/// carry the format id; 1 is still read ([`PageOwner::legacy`]).
pub const PAGE_VERSION: u32 = 2;
/// The version before map pages carried the format id.
pub const PAGE_LEGACY_VERSION: u32 = 1;
const CODEC: MetaBlockCodec =
    MetaBlockCodec { magic: *b"LDLOGMP1", version: PAGE_VERSION, block_bytes: PAGE_BYTES as usize };
// Both versions hold the page in 8 bytes and 1014 entries: the map area,
// and so the whole layout, is the same in both.
const _: () =
    assert!(ENTRIES_PER_PAGE == 1014 && HEADER_BYTES as u64 + 8 + 4 * ENTRIES_PER_PAGE == PAGE_BYTES);

/// A map page copy decoded ([`MapGeometry::decode`]): its generation and
/// entries, `None` if it is not the owner's, or why it does not decode.
pub type DecodedPage = Result<Option<(u64, Vec<u32>)>, MetaError>;

/// Whose map page copies recovery takes: the checkpoint's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageOwner {
    /// The checkpoint's format id: a copy of version 2 is taken only if
    /// it carries it.
    pub format_id: u64,
    /// Copies of version 1 (no id) are the volume's own: it was formatted
    /// before map pages carried the id (that format wrote every page).
    pub legacy: bool,
}

/// Integer `i` of `width` bits packed into `words` (see [`Packed`]).
fn packed_get(words: &[u64], width: u32, i: u64) -> u64 {
    let bit = i * u64::from(width);
    let (w, off) = ((bit / 64) as usize, (bit % 64) as u32);
    let mut v = words[w] >> off;
    if off + width > 64 {
        v |= words[w + 1] << (64 - off);
    }
    v & ((1u64 << width) - 1)
}

/// Sets integer `i` of `width` bits packed into `words` to `v`.
fn packed_set(words: &mut [u64], width: u32, i: u64, v: u64) {
    let bit = i * u64::from(width);
    let (w, off) = ((bit / 64) as usize, (bit % 64) as u32);
    let m = (1u64 << width) - 1;
    words[w] = (words[w] & !(m << off)) | (v << off);
    if off + width > 64 {
        let hi = 64 - off;
        words[w + 1] = (words[w + 1] & !(m >> hi)) | (v >> hi);
    }
}

/// Unsigned integers of a fixed width (1 to 32 bits), packed into `u64`
/// words: `len * width / 8` bytes, rounded up to a word. The map's flat
/// groups (an entry just wide enough for every slot id and [`UNMAPPED`])
/// and the per-slot and per-segment bits are made of it.
#[derive(Clone, Debug)]
pub struct Packed {
    words: Vec<u64>,
    width: u32,
    len: u64,
}

impl Packed {
    /// `len` integers of `width` bits, each all ones (`ones`) or zero.
    pub fn new(len: u64, width: u32, ones: bool) -> Packed {
        assert!((1..=32).contains(&width));
        let words = (len * u64::from(width)).div_ceil(64) as usize;
        Packed { words: vec![if ones { u64::MAX } else { 0 }; words], width, len }
    }

    /// The width in bits.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// How many integers.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Integer `i`.
    pub fn get(&self, i: u64) -> u64 {
        assert!(i < self.len);
        packed_get(&self.words, self.width, i)
    }

    /// Sets integer `i` to `v` (which must fit).
    pub fn set(&mut self, i: u64, v: u64) {
        assert!(i < self.len && v >> self.width == 0);
        packed_set(&mut self.words, self.width, i, v);
    }

    /// The words of a one-bit `Packed`: integer `i` is bit `i % 64` of
    /// word `i / 64` (a census reads every segment's bits in one pass).
    pub fn bit_words(&self) -> &[u64] {
        assert_eq!(self.width, 1, "the words of a one-bit Packed");
        &self.words
    }

    /// Sets every integer to zero.
    pub fn clear(&mut self) {
        self.words.fill(0);
    }

    /// Bytes of RAM it holds (its allocation, not its length).
    pub fn ram_bytes(&self) -> u64 {
        8 * self.words.capacity() as u64
    }
}

/// Blocks per map group (4 MiB of 4 KiB blocks).
pub const GROUP_BLOCKS: u64 = 1024;
/// Runs a group holds as runs at most (`8 *` this bytes), if fewer than
/// half its flat words; one more and it turns flat, and a flat group turns
/// back into runs at half of it. Bounds the words an update moves.
pub const GROUP_RUNS_MAX: usize = 256;
const _: () = assert!(GROUP_BLOCKS <= 32768 && GROUP_BLOCKS.is_power_of_two());

/// One run in a `u64`: first block's offset in the group (bits 0-15),
/// length - 1 (16-31), first slot id (32-63); the run's block `i` is in
/// slot `sid + i`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Run {
    off: u64,
    len: u64,
    sid: u64,
}

impl Run {
    fn pack(self) -> u64 {
        debug_assert!(self.len >= 1 && self.off + self.len <= 1 << 16 && self.sid + self.len <= 1 << 32);
        self.off | (self.len - 1) << 16 | self.sid << 32
    }

    fn unpack(w: u64) -> Run {
        Run { off: w & 0xFFFF, len: ((w >> 16) & 0xFFFF) + 1, sid: w >> 32 }
    }

    fn end(self) -> u64 {
        self.off + self.len
    }
}

/// The map in RAM: per block, the slot id holding it or [`UNMAPPED`].
///
/// The volume is cut into groups of `group_blocks` blocks; each group is
/// held in one of two forms, whichever its contents make smaller:
/// - **runs**: the maximal runs of blocks in consecutive slots, sorted, one
///   `u64` each, at most `runs_max` (sequentially written data, and empty
///   groups: no allocation at all);
/// - **flat**: one entry a block, of the fewest bits that hold every slot
///   id and one more value (all ones) for [`UNMAPPED`] (random updates).
///
/// A runs group turns flat when a write makes it hold more than
/// `runs_max` runs (half its flat words: 152 with 19-bit entries, 232 with
/// 29-bit; at most [`GROUP_RUNS_MAX`]); a flat group turns back when its run count (kept per
/// group, updated per write from the block's neighbours) falls to half
/// of that. A runs group is smaller than a flat one (`runs_max` is at most
/// half the flat words), so the map never holds more than the flat entries
/// plus 18 bytes a group (the group's box and run count). Lookup: O(1)
/// flat, a binary search of at most `runs_max` runs; an update changes one
/// entry or one group's run list (at most `runs_max` words moved), and a
/// change of form, O(`group_blocks`), comes at least `runs_max / 4`
/// updates of the group after the last one (an update changes the run
/// count by at most two).
///
/// With `extents` off every group is flat from the start and stays so
/// (the flat map: RAM fixed by the volume size).
#[derive(Clone, Debug)]
pub struct SlotMap {
    /// Per group: its flat words (`flat_words`, fewer for a last group
    /// shorter than the others), or its runs (fewer words).
    groups: Vec<Box<[u64]>>,
    /// Per group: its run count (in either form).
    runs: Vec<u16>,
    blocks: u64,
    width: u32,
    group_blocks: u64,
    /// log2 of `group_blocks`: a block's group is a shift away.
    group_shift: u32,
    flat_words: usize,
    last_flat_words: usize,
    extents: bool,
    /// Words held by the groups' boxes.
    words_held: u64,
    flat_group_count: u64,
}

impl SlotMap {
    /// `blocks` unmapped blocks over a log of `slot_total` slots, in groups
    /// of [`GROUP_BLOCKS`] blocks, with extents or flat.
    pub fn new(blocks: u64, slot_total: u32, extents: bool) -> SlotMap {
        SlotMap::with_groups(blocks, slot_total, GROUP_BLOCKS, extents)
    }

    /// [`SlotMap::new`] with groups of `group_blocks` blocks (a power of
    /// two, at most [`GROUP_BLOCKS`] times 32; tests use small groups).
    pub fn with_groups(blocks: u64, slot_total: u32, group_blocks: u64, extents: bool) -> SlotMap {
        assert!(group_blocks.is_power_of_two() && group_blocks <= 32768);
        let width = 64 - u64::from(slot_total).leading_zeros();
        let flat_words = (group_blocks * u64::from(width)).div_ceil(64) as usize;
        let group_count = blocks.div_ceil(group_blocks) as usize;
        let last_blocks = blocks - (group_count as u64).saturating_sub(1) * group_blocks;
        let last_flat_words = (last_blocks * u64::from(width)).div_ceil(64) as usize;
        let mut m = SlotMap {
            groups: vec![Box::default(); group_count],
            runs: vec![0; group_count],
            blocks,
            width,
            group_blocks,
            group_shift: group_blocks.trailing_zeros(),
            flat_words,
            last_flat_words,
            extents,
            words_held: 0,
            flat_group_count: 0,
        };
        if !extents {
            for g in 0..group_count {
                m.put_flat(g, vec![u64::MAX; m.flat_words_of(g)]);
            }
        }
        m
    }

    /// Words of group `g` flat.
    fn flat_words_of(&self, g: usize) -> usize {
        if g + 1 == self.groups.len() {
            self.last_flat_words
        } else {
            self.flat_words
        }
    }

    /// Runs group `g` holds as runs at most: fewer words than flat (a
    /// runs group is told from a flat one by its length), at most half.
    fn runs_max_of(&self, g: usize) -> usize {
        let m = GROUP_RUNS_MAX.min(self.flat_words_of(g) / 2);
        assert!(m < self.flat_words_of(g));
        m
    }

    /// Blocks of group `g`.
    fn group_len(&self, g: usize) -> u64 {
        self.group_blocks.min(self.blocks - g as u64 * self.group_blocks)
    }

    fn is_flat(&self, g: usize) -> bool {
        self.groups[g].len() == self.flat_words_of(g)
    }

    fn slot_of_entry(&self, v: u64) -> u32 {
        if v == (1u64 << self.width) - 1 {
            UNMAPPED
        } else {
            v as u32
        }
    }

    /// The slot holding `block`, or [`UNMAPPED`].
    /// `block`'s group and its offset in it.
    fn locate(&self, block: u64) -> (usize, u64) {
        assert!(block < self.blocks, "block {block} of a map of {}", self.blocks);
        ((block >> self.group_shift) as usize, block & (self.group_blocks - 1))
    }

    /// The slot holding `block`, or [`UNMAPPED`].
    pub fn get(&self, block: u64) -> u32 {
        let (g, off) = self.locate(block);
        let w = &self.groups[g];
        if w.len() == self.flat_words_of(g) {
            return self.slot_of_entry(packed_get(w, self.width, off));
        }
        Self::runs_get(w, off)
    }

    /// The slot of the block at `off` of a group held as `runs`.
    fn runs_get(runs: &[u64], off: u64) -> u32 {
        let i = runs.partition_point(|&r| Run::unpack(r).off <= off);
        match i.checked_sub(1).map(|i| Run::unpack(runs[i])) {
            Some(r) if off < r.end() => (r.sid + off - r.off) as u32,
            _ => UNMAPPED,
        }
    }

    /// Points `block` at `sid` (or [`UNMAPPED`]).
    pub fn set(&mut self, block: u64, sid: u32) {
        assert!(sid == UNMAPPED || u64::from(sid) < (1u64 << self.width) - 1, "slot {sid} fits an entry");
        let (g, off) = self.locate(block);
        if self.is_flat(g) {
            self.set_flat(g, off, sid);
        } else if Self::runs_get(&self.groups[g], off) != sid {
            self.set_runs(g, off, sid);
        }
    }

    /// Whether the block at `off` of flat group `g` starts a run.
    fn starts_run(&self, g: usize, off: u64) -> bool {
        let w = &self.groups[g];
        let v = self.slot_of_entry(packed_get(w, self.width, off));
        if v == UNMAPPED {
            return false;
        }
        off == 0 || {
            let p = self.slot_of_entry(packed_get(w, self.width, off - 1));
            p == UNMAPPED || u64::from(p) + 1 != u64::from(v)
        }
    }

    /// Runs that start at `cur` or `next` (entries, all ones unmapped),
    /// given the entry `prev` before `cur`.
    fn starts_of(unmapped: u64, prev: Option<u64>, cur: u64, next: Option<u64>) -> u16 {
        let starts = |p: Option<u64>, v: u64| v != unmapped && p.is_none_or(|p| p == unmapped || p + 1 != v);
        u16::from(starts(prev, cur)) + u16::from(next.is_some_and(|n| starts(Some(cur), n)))
    }

    fn set_flat(&mut self, g: usize, off: u64, sid: u32) {
        let unmapped = (1u64 << self.width) - 1;
        let v = if sid == UNMAPPED { unmapped } else { u64::from(sid) };
        let w = &mut self.groups[g];
        let old = packed_get(w, self.width, off);
        if old == v {
            return;
        }
        let prev = off.checked_sub(1).map(|o| packed_get(w, self.width, o));
        let next = (off + 1 < self.group_blocks.min(self.blocks - ((g as u64) << self.group_shift)))
            .then(|| packed_get(w, self.width, off + 1));
        packed_set(w, self.width, off, v);
        let (before, after) =
            (Self::starts_of(unmapped, prev, old, next), Self::starts_of(unmapped, prev, v, next));
        self.runs[g] = self.runs[g] + after - before;
        if self.extents && usize::from(self.runs[g]) <= self.runs_max_of(g) / 2 {
            self.flat_to_runs(g);
        }
    }

    fn set_runs(&mut self, g: usize, off: u64, sid: u32) {
        let mut v = std::mem::take(&mut self.groups[g]).into_vec();
        self.words_held -= v.len() as u64;
        // Cut `off` out of the run holding it, if any.
        let i = v.partition_point(|&r| Run::unpack(r).off <= off);
        if let Some(r) = i.checked_sub(1).map(|i| Run::unpack(v[i])).filter(|r| off < r.end()) {
            let left = Run { len: off - r.off, ..r };
            let right = Run { off: off + 1, len: r.end() - off - 1, sid: r.sid + off + 1 - r.off };
            match (left.len > 0, right.len > 0) {
                (true, true) => {
                    v[i - 1] = left.pack();
                    v.reserve_exact(1);
                    v.insert(i, right.pack());
                }
                (true, false) => v[i - 1] = left.pack(),
                (false, true) => v[i - 1] = right.pack(),
                (false, false) => {
                    v.remove(i - 1);
                }
            }
        }
        if sid != UNMAPPED {
            let sid = u64::from(sid);
            let i = v.partition_point(|&r| Run::unpack(r).off <= off);
            let prev = i.checked_sub(1).map(|i| Run::unpack(v[i]));
            let next = v.get(i).map(|&r| Run::unpack(r));
            let joins_prev = prev.filter(|p| p.end() == off && p.sid + p.len == sid);
            let joins_next = next.filter(|n| n.off == off + 1 && n.sid == sid + 1);
            match (joins_prev, joins_next) {
                (Some(p), Some(n)) => {
                    v[i - 1] = Run { len: p.len + 1 + n.len, ..p }.pack();
                    v.remove(i);
                }
                (Some(p), None) => v[i - 1] = Run { len: p.len + 1, ..p }.pack(),
                (None, Some(n)) => v[i] = Run { off, len: n.len + 1, sid }.pack(),
                (None, None) => {
                    v.reserve_exact(1);
                    v.insert(i, Run { off, len: 1, sid }.pack());
                }
            }
        }
        self.runs[g] = v.len() as u16;
        if v.len() > self.runs_max_of(g) || !self.extents {
            let mut flat = vec![u64::MAX; self.flat_words_of(g)];
            for r in v.iter().map(|&r| Run::unpack(r)) {
                for k in 0..r.len {
                    packed_set(&mut flat, self.width, r.off + k, r.sid + k);
                }
            }
            self.put_flat(g, flat);
        } else {
            self.words_held += v.len() as u64;
            self.groups[g] = v.into_boxed_slice();
        }
    }

    fn put_flat(&mut self, g: usize, flat: Vec<u64>) {
        assert_eq!(flat.len(), self.flat_words_of(g));
        self.words_held += flat.len() as u64;
        self.flat_group_count += 1;
        self.groups[g] = flat.into_boxed_slice();
    }

    /// Flat group `g` back into runs.
    fn flat_to_runs(&mut self, g: usize) {
        let mut v: Vec<u64> = Vec::with_capacity(usize::from(self.runs[g]));
        for (b, sid) in self.flat_entries(g) {
            let off = b - g as u64 * self.group_blocks;
            let sid = u64::from(sid);
            let last = v.last().map(|&r| Run::unpack(r));
            match last.filter(|r| r.end() == off && r.sid + r.len == sid) {
                Some(r) => *v.last_mut().expect("a last run") = Run { len: r.len + 1, ..r }.pack(),
                None => v.push(Run { off, len: 1, sid }.pack()),
            }
        }
        assert_eq!(v.len(), usize::from(self.runs[g]), "group {g}'s run count");
        self.words_held -= self.flat_words_of(g) as u64;
        self.flat_group_count -= 1;
        self.words_held += v.len() as u64;
        self.groups[g] = v.into_boxed_slice();
    }

    /// Flat group `g`'s mapped blocks, in order.
    fn flat_entries(&self, g: usize) -> impl Iterator<Item = (u64, u32)> + '_ {
        let base = g as u64 * self.group_blocks;
        let end = (base + self.group_blocks).min(self.blocks);
        (base..end).filter_map(move |b| {
            let sid = self.slot_of_entry(packed_get(&self.groups[g], self.width, b - base));
            (sid != UNMAPPED).then_some((b, sid))
        })
    }

    /// Calls `f(block, slot)` for every mapped block of `range`, in block
    /// order (a run at a time where the group holds runs).
    pub fn for_each_mapped(&self, range: std::ops::Range<u64>, mut f: impl FnMut(u64, u32)) {
        let (start, end) = (range.start, range.end.min(self.blocks));
        if start >= end {
            return;
        }
        for g in (start / self.group_blocks) as usize..=((end - 1) / self.group_blocks) as usize {
            let base = g as u64 * self.group_blocks;
            if self.is_flat(g) {
                for (b, sid) in self.flat_entries(g).filter(|&(b, _)| b >= start && b < end) {
                    f(b, sid);
                }
                continue;
            }
            for r in self.groups[g].iter().map(|&r| Run::unpack(r)) {
                for k in 0..r.len {
                    let b = base + r.off + k;
                    if b >= start && b < end {
                        f(b, (r.sid + k) as u32);
                    }
                }
            }
        }
    }

    /// Blocks.
    pub fn len(&self) -> u64 {
        self.blocks
    }

    /// Whether the volume has no blocks.
    pub fn is_empty(&self) -> bool {
        self.blocks == 0
    }

    /// Bits per entry of a flat group.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Groups held flat.
    pub fn flat_group_count(&self) -> u64 {
        self.flat_group_count
    }

    /// Groups.
    pub fn group_count(&self) -> u64 {
        self.groups.len() as u64
    }

    /// Runs held by the groups held as runs.
    pub fn run_count(&self) -> u64 {
        (0..self.groups.len()).filter(|&g| !self.is_flat(g)).map(|g| u64::from(self.runs[g])).sum()
    }

    /// Bytes of RAM it holds: the groups' words, a box (16 bytes) and a
    /// run count (2) a group. Not counted: the allocator's header of each
    /// non-empty box (glibc: 8 bytes, sizes rounded to 16).
    pub fn ram_bytes(&self) -> u64 {
        8 * self.words_held
            + (self.groups.capacity() * std::mem::size_of::<Box<[u64]>>()) as u64
            + 2 * self.runs.capacity() as u64
    }

    /// What [`SlotMap::ram_bytes`] comes to with every group flat: the most
    /// it can hold.
    pub fn ram_bytes_max(blocks: u64, slot_total: u32) -> u64 {
        let width = u64::from(64 - u64::from(slot_total).leading_zeros());
        let (full, last) = (blocks / GROUP_BLOCKS, blocks % GROUP_BLOCKS);
        let words = full * (GROUP_BLOCKS * width).div_ceil(64) + (last * width).div_ceil(64);
        8 * words + 18 * blocks.div_ceil(GROUP_BLOCKS)
    }

    /// Checks the representation: each group's form and run count, runs
    /// sorted, disjoint, maximal and within the group. For tests.
    pub fn check_invariants(&self) {
        let mut words = 0u64;
        let mut flat = 0u64;
        for g in 0..self.groups.len() {
            words += self.groups[g].len() as u64;
            if self.is_flat(g) {
                flat += 1;
                let starts = (0..self.group_len(g)).filter(|&o| self.starts_run(g, o)).count();
                assert_eq!(starts, usize::from(self.runs[g]), "flat group {g}'s run count");
                assert!(
                    !self.extents || starts > self.runs_max_of(g) / 2,
                    "flat group {g} with {starts} runs"
                );
                continue;
            }
            let runs: Vec<Run> = self.groups[g].iter().map(|&r| Run::unpack(r)).collect();
            assert!(self.extents && runs.len() <= self.runs_max_of(g), "group {g} holds {} runs", runs.len());
            assert_eq!(runs.len(), usize::from(self.runs[g]), "group {g}'s run count");
            for w in runs.windows(2) {
                assert!(w[0].end() <= w[1].off, "group {g}: runs overlap");
                assert!(!(w[0].end() == w[1].off && w[0].sid + w[0].len == w[1].sid), "group {g}: runs join");
            }
            let base = g as u64 * self.group_blocks;
            assert!(
                runs.last().is_none_or(|r| base + r.end() <= self.blocks),
                "group {g}: a run past the end"
            );
        }
        assert_eq!(words, self.words_held, "words held");
        assert_eq!(flat, self.flat_group_count, "flat groups");
    }
}

/// Where the map pages live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapGeometry {
    /// Start of the map area on the lower device.
    pub offset_bytes: u64,
    /// Pages (each in two copies).
    pub page_count: u32,
    /// Slots in the log (an entry must be below this or [`UNMAPPED`]).
    pub slot_total: u32,
}

impl MapGeometry {
    /// Where copy `copy` of page `page` lives.
    pub fn copy_offset_bytes(&self, page: u32, copy: u8) -> u64 {
        assert!(page < self.page_count && copy < 2);
        self.offset_bytes + (2 * u64::from(page) + u64::from(copy)) * PAGE_BYTES
    }

    /// One past the map area.
    pub fn end_bytes(&self) -> u64 {
        self.offset_bytes + 2 * u64::from(self.page_count) * PAGE_BYTES
    }

    /// The blocks page `page` covers.
    pub fn blocks_of(&self, page: u32, volume_blocks: u64) -> std::ops::Range<u64> {
        let start = u64::from(page) * ENTRIES_PER_PAGE;
        start..(start + ENTRIES_PER_PAGE).min(volume_blocks)
    }

    /// Encodes page `page` of `map` for checkpoint `generation` of format
    /// `format_id`.
    pub fn encode(&self, page: u32, map: &SlotMap, generation: u64, format_id: u64) -> Vec<u8> {
        let r = self.blocks_of(page, map.len());
        let mut p = Vec::with_capacity(8 + 4 * r.clone().count());
        p.extend((format_id ^ u64::from(page)).to_le_bytes());
        let mut entries = vec![UNMAPPED; (r.end - r.start) as usize];
        map.for_each_mapped(r.clone(), |b, sid| entries[(b - r.start) as usize] = sid);
        for e in entries {
            p.extend(e.to_le_bytes());
        }
        CODEC.encode(generation, &p).expect("a map page fits its block")
    }

    /// Decodes a copy of page `page`: its generation and entries, or
    /// `None` if it is not `owner`'s (another format's, or another page's;
    /// of version 1 on a volume formatted by this build). Every entry of
    /// an owner's copy is range-checked.
    pub fn decode(&self, page: u32, b: &[u8], volume_blocks: u64, owner: PageOwner) -> DecodedPage {
        let (block, version) =
            CODEC.decode_versioned(b, GENERATION_READ_MAX, |v| v == PAGE_LEGACY_VERSION)?;
        let mut r = Reader::new(&block.payload);
        let want = self.blocks_of(page, volume_blocks);
        let count = want.end - want.start;
        if version == PAGE_LEGACY_VERSION {
            if !owner.legacy {
                return Ok(None);
            }
            let (index, n) = (r.u32()?, r.u32()?);
            if index != page || u64::from(n) != count {
                return Err(MetaError::Malformed(format!(
                    "page {index} with {n} entries where page {page} with {count} belongs"
                )));
            }
        } else if r.u64()? ^ u64::from(page) != owner.format_id {
            return Ok(None);
        }
        if r.remaining() as u64 != 4 * count {
            return Err(MetaError::Malformed(format!(
                "{} bytes of entries where page {page} holds {count}",
                r.remaining()
            )));
        }
        let mut out = Vec::with_capacity(count as usize);
        for i in 0..count {
            let e = r.u32()?;
            if e != UNMAPPED && e >= self.slot_total {
                return Err(MetaError::Malformed(format!(
                    "entry {i} names slot {e}; the log has {}",
                    self.slot_total
                )));
            }
            out.push(e);
        }
        Ok(Some((block.generation, out)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_round_trip_for_their_format_and_page_only_and_refuse_out_of_range_entries() {
        let g = MapGeometry { offset_bytes: 8192, page_count: 2, slot_total: 100 };
        let ours = PageOwner { format_id: 9, legacy: false };
        let mut map = SlotMap::new(1500, 100, true);
        map.set(3, 7);
        map.set(1200, 99);
        let b = g.encode(1, &map, 5, 9);
        let (gen, entries) = g.decode(1, &b, 1500, ours).expect("valid").expect("ours");
        assert_eq!(gen, 5);
        assert_eq!(entries.len(), 1500 - 1014);
        assert_eq!(entries[1200 - 1014], 99);
        // Another format's copy, or this format's copy of another page
        // (a misplaced write): not taken, whatever its crc and generation.
        assert_eq!(g.decode(1, &b, 1500, PageOwner { format_id: 8, ..ours }), Ok(None));
        assert_eq!(g.decode(0, &b, 1500, ours), Ok(None));
        let g2 = MapGeometry { slot_total: 99, ..g };
        let b = g2.encode(1, &map, 5, 9);
        assert!(g2.decode(1, &b, 1500, ours).unwrap_err().to_string().contains("slot 99"));
        assert_eq!(g.copy_offset_bytes(1, 1), 8192 + 3 * 4096);
    }

    #[test]
    fn packed_integers_of_every_width_read_back_across_word_edges() {
        for width in 1..=32u32 {
            let n = 200u64;
            let mut p = Packed::new(n, width, false);
            let val = |i: u64| (i * 2654435761) & ((1u64 << width) - 1);
            for i in 0..n {
                p.set(i, val(i));
            }
            for i in 0..n {
                assert_eq!(p.get(i), val(i), "width {width} index {i}");
            }
            p.set(77, 0);
            assert_eq!((p.get(76), p.get(77), p.get(78)), (val(76), 0, val(78)));
            assert_eq!(p.ram_bytes(), 8 * (n * u64::from(width)).div_ceil(64));
            if width == 1 {
                // `bit_words` holds the same values, bit i of word i / 64.
                let w = p.bit_words();
                assert!((0..n).all(|i| (w[i as usize / 64] >> (i % 64)) & 1 == p.get(i)));
            }
        }
        let mut m = SlotMap::new(10, 8, true);
        assert_eq!((m.width(), m.get(3)), (4, UNMAPPED));
        m.set(3, 7);
        m.set(4, 0);
        assert_eq!((m.get(2), m.get(3), m.get(4)), (UNMAPPED, 7, 0));
        m.set(3, UNMAPPED);
        assert_eq!(m.get(3), UNMAPPED);
    }
}
