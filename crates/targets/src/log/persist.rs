//! Persistent state: format, recovery, checkpoints and flush marks. Each
//! bring-up phase is its own state.
//!
//! Format: both checkpoint copies (boot 1, the chain starting at segment
//! 0, seq 0, the format's id, not `legacy_map`) and both flush marks (a
//! mark carries no id: one an earlier use left would claim durable seqs
//! this log never wrote), then a flush. Neither the segments nor the map
//! pages are touched: whatever an earlier use of the device left there
//! carries another format id and is never replayed (seglog) nor taken
//! (`map`: a page with no copy of this format is unmapped). Before format
//! identities each segment's header sector was zeroed (a write per
//! segment: 2 M for 1 TiB), and before map pages carried the id every map
//! page was written (1.8 GiB for 1 TiB). The writes are made as they are
//! issued, at most [`FORMAT_WRITES_IN_FLIGHT`] at once.
//!
//! Checkpoint (a work on the stack, so requests wait for it): write the
//! open segment naming the segment that goes next, wait for every segment
//! write, write the dirty map pages (generation = the epoch) to the copy
//! that does not hold their current version, flush, write the checkpoint
//! record with FUA. Then the epoch advances and the slots freed in it may
//! be reused (the crash rule).
//!
//! Recovery: the newest valid checkpoint copy; per map page the newest
//! valid copy of its format not newer than it (a newer one belongs to a
//! checkpoint that never completed: the page is rewritten before serving;
//! none: unmapped; but fewer pages with a usable copy than the
//! checkpoint's `map_pages_written`, which counts the pages written by
//! then, is damage: refused unless the opener accepts the loss; and so is
//! a sum of the copies' generations other than the checkpoint's
//! `map_digest`: a page's newer copy is damaged and its older one would
//! serve stale mappings); then the chain
//! walk, applying each summary in order; the reverse map and segment usage
//! are rebuilt from the map. A flush mark past the end of the walk means
//! flushed data is lost: refused unless the opener accepts the loss. Then
//! a new flush mark and a checkpoint with the next boot, before serving;
//! for a volume of an older version (before format identities, before map
//! pages carried the id, before the map's digest), after that
//! checkpoint's record, the copy recovered from again in this build's
//! version (`seglog::copy_version`; its digest the one recovery summed),
//! waited for before serving.
//!
//! **The map's digest.** A checkpoint writes a dirty page to the copy
//! that does not hold its current version, with the checkpoint's
//! generation: a page's current copy is the newest of its format at or
//! below the checkpoint's generation, and its other copy is older (or
//! newer than the checkpoint: a checkpoint that never completed). The
//! checkpoint records the wrapping sum of the current copies'
//! generations (kept per page in RAM, 8 bytes a page, and summed as pages
//! are written). Recovery sums the copies it takes: if a current copy is
//! damaged (bad crc, zeroed) and recovery falls back to the older copy,
//! that page adds less, so the sum falls short, and if no copy is left
//! the count falls short. A checkpoint torn while writing a page leaves
//! the sum whole: the torn copy was not the current one. Short of a
//! multiple of 2^64 (more than 8 pages each missing 2^61 generations), a
//! wrapped sum differs too. The checkpoint also records the generations
//! summed with a weight per page, modulo 2^61 - 1 (`seglog::MapDigest`):
//! one page short by `d` leaves that sum short by its weight times `d`,
//! so the quotient names it among the pages that could be stale, and
//! only it is refused (with the loss accepted, unmapped). Several pages
//! short, lost (no usable copy, the loss accepted; how many is known,
//! not which) or stale, are told apart by a bounded search for the sets
//! that explain both digests (`seglog::shortfall`): the stale pages it
//! names are unmapped, and no other; when it cannot answer soundly,
//! every page that could be stale is.
//!
//! **The map's sketch of written pages** (`seglog::MapSketch`, in every
//! checkpoint since version 7): which pages are lost, when the count
//! falls short, among the many never written (a zeroed copy looks
//! blank). The log adds each page to it at its first write, recovery each
//! page it finds usable; the checkpoint's less recovery's lists the lost
//! pages (up to about 20), and the digests' search then looks for them
//! among those alone.

use super::map::{DecodedPage, PageOwner, UNMAPPED};
use super::{Blocked, Log, LowerOp, Phase};
use crate::alloc::SegmentUsage;
use crate::seglog::{
    ChainCheckpoint, ChainWalk, Entry, FlushMark, MapDigest, MapSketch, SegLoc, SegmentHeader, Seq,
    StopReason, CHECKPOINT_AREA_BYTES,
};
use bytes::Bytes;
use layoutd_core::metablock::MetaError;
use layoutd_core::{Completion, Op, OpenMode, ReqId, Request};

/// `Log::page_copy` bit: the page has a copy of this format.
pub(super) const PAGE_WRITTEN: u8 = 2;

/// Map pages read per request in recovery.
const MAP_PAGES_PER_READ: u32 = 512;

/// Format writes in flight at once (all four: 2 KiB; 64 when every
/// segment header was zeroed, 4 of 2 MiB when the map was written).
pub(super) const FORMAT_WRITES_IN_FLIGHT: u32 = 4;

/// What recovery found before the walk.
pub(super) struct Found {
    ck: ChainCheckpoint,
    /// The checkpoint read is of an older version (before format
    /// identities, or before map pages carried the id).
    legacy: bool,
    copy_unreadable: bool,
    mark: Option<FlushMark>,
    accept_loss: bool,
    /// Map pages with no usable copy: how many, the first, and the first
    /// (and how many) with a copy of the map's magic whose crc fails, the
    /// suspects when fewer pages are usable than the checkpoint says were
    /// written (a torn first write looks the same, but is not counted).
    unusable: UnusablePages,
    /// Map pages that could serve stale mappings: one usable copy, older
    /// than the checkpoint, beside a copy that is blank, torn or does not
    /// decode (the current copy, damaged, if the digest falls short).
    stale: StalePages,
    /// Map pages with no usable copy and a torn one (the map's magic, a
    /// bad crc): where lost pages are looked for first.
    torn_pages: Vec<u32>,
    /// The lost pages (written, now without a usable copy), when the
    /// checkpoint's sketch of written pages lists them
    /// ([`Log::judge_map`]), each with the generation the sketch gives it
    /// (low 32 bits; a guess the digests confirm or not).
    lost_pages: Option<Vec<(u32, u32)>>,
}

/// [`Found::stale`]: each such page and why its other copy is unusable
/// (the page's copy taken and its generation are the log's:
/// [`Log::describe_stale`]).
type StalePages = Vec<(u32, MetaError)>;

/// Pages a refusal names at most.
const STALE_NAMED_MAX: usize = 3;

/// What [`Log::pick_page`] found wrong with a page.
enum PageTrouble {
    /// No usable copy (whether a copy has a bad crc, and both described).
    Unusable(bool, String),
    /// Could be stale ([`Found::stale`]): why the other copy is unusable.
    Stale(MetaError),
}

#[derive(Default)]
struct UnusablePages {
    count: u32,
    first: Option<String>,
    torn: u32,
    first_torn: Option<String>,
}

/// The bring-up phases.
pub(super) enum Bringup {
    /// Format writes: the next to issue (an index into [`Log::format_write`]'s
    /// list), how many are in flight, then the flush.
    Formatting { next: u64, in_flight: u32, flushing: bool },
    /// Reading the checkpoint area.
    ReadCheckpoint { accept_loss: bool },
    /// Reading map pages from `next_page` on.
    ReadMap { found: Found, next_page: u32 },
    /// Walking the chain; `at` is the segment being read.
    Walk { found: Found, walk: ChainWalk, at: SegLoc },
    /// Writing the new flush mark.
    Marking,
    /// The checkpoint work for the new boot runs (and then, for a volume
    /// of the version before format identities, rewrites the copy
    /// recovered from in this build's version: `Log::legacy_rewrite`).
    Finishing,
}

/// A map page copy as recovery judges it.
enum PageCopy {
    /// Of the checkpoint's format, not newer than it: generation, entries.
    Usable(u64, Vec<u32>),
    /// Of the checkpoint's format, written by a checkpoint that never
    /// completed (its generation).
    Newer(u64),
    /// Not a copy of this format's page: blank, torn (bad crc), another
    /// kind of block, another format's (or another page's), or of a
    /// version this build does not read (which a page of a volume whose
    /// checkpoint this build reads never is: a build that writes newer map
    /// pages writes newer checkpoints). Why.
    Absent(String),
    /// A whole copy of this format that does not decode (damage under a
    /// good crc). Why.
    Bad(String),
}

impl PageCopy {
    fn judge(c: DecodedPage, ck_generation: u64) -> PageCopy {
        match c {
            Ok(Some((g, entries))) if g <= ck_generation => PageCopy::Usable(g, entries),
            Ok(Some((g, _))) => PageCopy::Newer(g),
            Ok(None) => PageCopy::Absent("another format's".into()),
            Err(e) if e.is_absent_or_torn() || matches!(e, MetaError::Version(_)) => {
                PageCopy::Absent(e.to_string())
            }
            Err(e) => PageCopy::Bad(e.to_string()),
        }
    }

    fn why(&self, ck_generation: u64) -> String {
        match self {
            PageCopy::Usable(g, _) => format!("generation {g}"),
            PageCopy::Newer(g) => format!("generation {g}, newer than the checkpoint's {ck_generation}"),
            PageCopy::Absent(why) | PageCopy::Bad(why) => why.clone(),
        }
    }
}

/// A checkpoint in progress.
#[derive(Default)]
pub(super) struct CheckpointWork {
    stage: CkStage,
    pages: Vec<u32>,
}

#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum CkStage {
    #[default]
    Seal,
    Drain,
    Pages,
    Flush,
    Record,
    /// The bring-up checkpoint is durable; the copy recovered from is
    /// being rewritten in this build's version.
    Rewrite,
}

impl Log {
    pub(super) fn start_bringup(&mut self, mode: OpenMode) {
        match mode {
            OpenMode::Format { format_id } => self.format_start(format_id),
            OpenMode::Open { accept_loss, .. } => {
                self.phase = Phase::Bringup(Bringup::ReadCheckpoint { accept_loss });
                let req = Request::new(ReqId(0), Op::Read, 0, CHECKPOINT_AREA_BYTES as u32);
                self.emit(LowerOp::Bringup, req);
            }
        }
    }

    /// How many writes a format makes: the two checkpoint copies and the
    /// two flush marks.
    fn format_write_count(&self) -> u64 {
        4
    }

    /// The `index`-th format write: `(offset, bytes)`.
    fn format_write(&self, index: u64) -> (u64, Vec<u8>) {
        assert!(index < 4, "format write {index} past the list");
        let g = index / 2;
        if index % 2 == 0 {
            let ck = ChainCheckpoint {
                generation: g,
                boot: 1,
                next_seq: Seq(0),
                next_loc: Some(SegLoc(0)),
                format_id: self.format_id,
                legacy_map: false,
                map_pages_written: 0,
                map_digest: Some(MapDigest::default()),
                map_sketch: Some(MapSketch::default()),
            };
            (self.geo.checkpoint_offset_bytes(g), ck.encode(&self.geo))
        } else {
            let mark = FlushMark { generation: g, boot: 1, durable_upto: Seq(0) };
            (self.geo.mark_offset_bytes(g), mark.encode(&self.geo))
        }
    }

    /// Issues format writes from `next` until `in_flight` reaches the
    /// window; returns the new `next` and `in_flight`.
    fn format_issue(&mut self, mut next: u64, mut in_flight: u32) -> (u64, u32) {
        while next < self.format_write_count() && in_flight < FORMAT_WRITES_IN_FLIGHT {
            let (off, data) = self.format_write(next);
            self.emit(LowerOp::Bringup, Request::write(ReqId(0), off, Bytes::from(data)));
            next += 1;
            in_flight += 1;
        }
        (next, in_flight)
    }

    fn format_start(&mut self, format_id: u64) {
        assert_ne!(format_id, crate::seglog::LEGACY_FORMAT_ID, "a new format has an identity");
        self.format_id = format_id;
        self.legacy_map = false;
        self.epoch = 2;
        self.boot = 1;
        self.chain_next = Some(SegLoc(0));
        self.census_changed();
        self.mark_generation = 1;
        let (next, in_flight) = self.format_issue(0, 0);
        self.phase = Phase::Bringup(Bringup::Formatting { next, in_flight, flushing: false });
    }

    /// A bring-up request completed.
    pub(super) fn bringup_done(&mut self, c: Completion) {
        let Phase::Bringup(b) = std::mem::replace(&mut self.phase, Phase::Serving) else {
            panic!("a bring-up completion after bring-up");
        };
        let next = match b {
            Bringup::Formatting { next, in_flight, flushing } => self.format_step(next, in_flight, flushing),
            Bringup::ReadCheckpoint { accept_loss } => self.checkpoint_read(c.data, accept_loss),
            Bringup::ReadMap { found, next_page } => self.map_read(c.data, found, next_page),
            Bringup::Walk { found, walk, at } => self.walk_read(c.data, found, walk, at),
            Bringup::Marking => {
                self.works.push(super::Work::Checkpoint(CheckpointWork::default()));
                Ok(Some(Bringup::Finishing))
            }
            Bringup::Finishing => panic!("the finishing checkpoint's I/O is work I/O"),
        };
        match next {
            Ok(Some(b)) => self.phase = Phase::Bringup(b),
            Ok(None) => self.phase = Phase::Serving,
            Err(e) => self.phase = Phase::Failed(e),
        }
        self.pump();
    }

    fn format_step(&mut self, next: u64, in_flight: u32, flushing: bool) -> Result<Option<Bringup>, String> {
        if flushing {
            return Ok(None);
        }
        assert!(in_flight > 0, "a format completion with none in flight");
        let (next, in_flight) = self.format_issue(next, in_flight - 1);
        if in_flight == 0 {
            self.emit(LowerOp::Bringup, Request::new(ReqId(0), Op::Flush, 0, 0));
            return Ok(Some(Bringup::Formatting { next, in_flight: 0, flushing: true }));
        }
        Ok(Some(Bringup::Formatting { next, in_flight, flushing: false }))
    }

    fn checkpoint_read(&mut self, data: Option<Bytes>, accept_loss: bool) -> Result<Option<Bringup>, String> {
        let data =
            data.ok_or("log recovery needs the device's bytes; the runtime runs in timing-only mode")?;
        let (ck, copy_unreadable) = ChainCheckpoint::pick(&data, &self.geo)
            .map_err(|e| format!("log checkpoint at lower offsets 0 and 4096: {e}; format the device"))?;
        let mark = FlushMark::pick(&data, &self.geo);
        let legacy = crate::seglog::copy_version(&data, ck.generation) != crate::seglog::CHAIN_FORMAT_VERSION;
        self.legacy_map = ck.legacy_map;
        let found = Found {
            ck,
            legacy,
            copy_unreadable,
            mark,
            accept_loss,
            unusable: UnusablePages::default(),
            stale: StalePages::default(),
            torn_pages: Vec::new(),
            lost_pages: None,
        };
        self.read_map_pages(0);
        Ok(Some(Bringup::ReadMap { found, next_page: 0 }))
    }

    fn read_map_pages(&mut self, first: u32) {
        let n = MAP_PAGES_PER_READ.min(self.args.map.page_count - first);
        let off = self.args.map.copy_offset_bytes(first, 0);
        let len = u64::from(n) * 2 * super::map::PAGE_BYTES;
        self.emit(LowerOp::Bringup, Request::new(ReqId(0), Op::Read, off, len as u32));
    }

    fn map_read(
        &mut self,
        data: Option<Bytes>,
        mut found: Found,
        first: u32,
    ) -> Result<Option<Bringup>, String> {
        let data = data.ok_or("log recovery needs the device's bytes")?;
        let pb = super::map::PAGE_BYTES as usize;
        let n = (data.len() / (2 * pb)) as u32;
        let owner = PageOwner { format_id: found.ck.format_id, legacy: found.ck.legacy_map };
        for i in 0..n {
            let p = first + i;
            let copy = |c: usize| {
                let at = (2 * i as usize + c) * pb;
                self.args.map.decode(p, &data[at..at + pb], self.args.volume_blocks, owner)
            };
            let (c0, c1) = (copy(0), copy(1));
            match self.pick_page(p, c0, c1, found.ck.generation)? {
                Some(PageTrouble::Unusable(torn, why)) => {
                    let u = &mut found.unusable;
                    u.count += 1;
                    u.first.get_or_insert_with(|| why.clone());
                    if torn {
                        u.torn += 1;
                        u.first_torn.get_or_insert(why);
                        found.torn_pages.push(p);
                    }
                }
                Some(PageTrouble::Stale(why)) => found.stale.push((p, why)),
                None => {}
            }
        }
        let next_page = first + n;
        if next_page < self.args.map.page_count {
            self.read_map_pages(next_page);
            return Ok(Some(Bringup::ReadMap { found, next_page }));
        }
        self.judge_map(&mut found)?;
        self.judge_digest(&found)?;
        let walk = ChainWalk::new(&found.ck, &self.geo);
        match walk.next() {
            Some((at, _)) => {
                self.read_segment(at);
                Ok(Some(Bringup::Walk { found, walk, at }))
            }
            None => self.recover_finish(found, walk, None),
        }
    }

    /// Every map page read: as many pages must have a usable copy as the
    /// checkpoint says had one written by then (legacy volumes: every
    /// page, their format wrote them all). A page once written keeps a
    /// current copy (checkpoints write the other one), so fewer means
    /// damage: refused, or with `accept_loss` the pages stay unmapped and
    /// the loss is reported.
    fn judge_map(&mut self, found: &mut Found) -> Result<(), String> {
        let pages = self.args.map.page_count;
        let ck = &found.ck;
        if !ck.legacy_map && ck.map_pages_written > pages {
            return Err(format!(
                "log checkpoint {}: {} map pages written, the map has {pages}; the checkpoint is corrupt: \
                 restore the device from a copy or format it",
                ck.generation, ck.map_pages_written
            ));
        }
        let expected = if ck.legacy_map { pages } else { ck.map_pages_written };
        let Some(missing) = expected.checked_sub(self.map_pages_written).filter(|&m| m > 0) else {
            return Ok(());
        };
        found.lost_pages = self.lost_by_sketch(ck, missing);
        let (ck, u) = (&found.ck, &found.unusable);
        let which = match (&u.first_torn, &u.first, &found.lost_pages) {
            // One page lost, and the one it can be: its copies described.
            (Some(t), _, _) if missing == 1 && u.torn == 1 => t.clone(),
            (None, Some(f), _) if missing == 1 && u.count == 1 => f.clone(),
            (_, _, Some(lost)) => self.describe_lost(lost, &found.torn_pages),
            (Some(t), _, _) if u.torn == 1 || u.torn == missing => t.clone(),
            (Some(t), _, _) => {
                format!("{} pages with no usable copy have a torn or damaged one; the first is {t}", u.torn)
            }
            (None, Some(f), _) if u.count == missing => f.clone(),
            (None, Some(f), _) => format!(
                "which of the {} pages with no copy of this format cannot be told: a zeroed copy looks \
                 unwritten; the first is {f}",
                u.count
            ),
            (None, None, _) => unreachable!("fewer usable pages than expected, and none unusable"),
        };
        let why = format!(
            "log map: {missing} page(s) written before checkpoint {} have no readable copy ({which})",
            ck.generation
        );
        if !found.accept_loss {
            return Err(format!(
                "{why}; restore the device from a copy, or serve with --accept-loss to lose their mappings"
            ));
        }
        self.counters.lost_map_pages_count = u64::from(missing);
        self.loss = Some(why);
        Ok(())
    }

    /// The pages lost, `missing` of them, as the checkpoint's sketch of
    /// written pages lists them against the pages found usable
    /// (`seglog::sketch`), each checked: in the map, without a usable
    /// copy, as many as the count says; `None` when it cannot list them
    /// (a checkpoint without a sketch, too many lost) or the list fails a
    /// check. A `legacy_map` volume's format wrote every page: each page
    /// without a usable copy counts, and its sketch covers only the pages
    /// written since its upgrade.
    fn lost_by_sketch(&self, ck: &ChainCheckpoint, missing: u32) -> Option<Vec<(u32, u32)>> {
        if ck.legacy_map {
            return None;
        }
        let mut lost = ck.map_sketch?.missing(&self.map_sketch)?;
        lost.sort_unstable();
        let unusable =
            |p: u32| p < self.args.map.page_count && self.page_copy[p as usize] & PAGE_WRITTEN == 0;
        (lost.len() == missing as usize && lost.iter().all(|&(p, _)| unusable(p))).then_some(lost)
    }

    /// The lost pages the sketch listed: which, and the first few's
    /// offsets (those with a torn copy marked).
    fn describe_lost(&self, lost: &[(u32, u32)], torn: &[u32]) -> String {
        let named: Vec<String> = (lost.iter().take(STALE_NAMED_MAX))
            .map(|&(p, _)| {
                let how =
                    if torn.contains(&p) { "a copy torn or damaged" } else { "both copies blank or foreign" };
                format!(
                    "page {p} at lower offsets {} and {} ({how})",
                    self.args.map.copy_offset_bytes(p, 0),
                    self.args.map.copy_offset_bytes(p, 1)
                )
            })
            .collect();
        let pages: Vec<String> = lost.iter().map(|p| p.0.to_string()).collect();
        let more = match lost.len().saturating_sub(STALE_NAMED_MAX) {
            0 => String::new(),
            n => format!("; and {n} more"),
        };
        format!(
            "page{} {}, told from the pages never written by the checkpoint's sketch of written pages: {}{more}",
            if lost.len() == 1 { "" } else { "s" },
            and_list(&pages),
            named.join("; ")
        )
    }

    /// Every map page read and counted ([`Log::judge_map`]): the copies
    /// taken must give the checkpoint's digests. Short means a page's
    /// current copy is damaged and its older copy was taken (or a page was
    /// lost, which the count already judged): refused, naming the damaged
    /// pages when the two digests' shortfalls single out which of the
    /// pages that could be stale are, beside the lost ones
    /// (`seglog::shortfall`), else all of those; with `accept_loss` those
    /// pages (else each that could be stale) are unmapped (their blocks
    /// not written since the checkpoint read zeroes) and rewritten by
    /// the bring-up checkpoint, so stale mappings are
    /// never served. A volume of a version without a digest is not
    /// checked (its first open).
    fn judge_digest(&mut self, found: &Found) -> Result<(), String> {
        let (ck, stale) = (&found.ck, &found.stale);
        let Some(recorded) = ck.map_digest.filter(|&d| d != self.map_digest) else {
            return Ok(());
        };
        let lost_count = self.counters.lost_map_pages_count as usize;
        if lost_count > 0 && stale.is_empty() {
            // The lost pages (already judged) are all that is missing: no
            // page could be stale.
            return Ok(());
        }
        let explained = match stale.is_empty() {
            true => None,
            false => self.explain_shortfall(&recorded, found, lost_count),
        };
        if explained.as_ref().is_some_and(Vec::is_empty) {
            // The lost pages alone explain both digests: no page that
            // could be stale is.
            return Ok(());
        }
        let gap = match recorded.sum == self.map_digest.sum {
            false => format!(
                "the generations of the map pages' copies sum to {}, checkpoint {} recorded {}",
                self.map_digest.sum, ck.generation, recorded.sum
            ),
            true => format!(
                "the map pages' copies weigh {}, checkpoint {} recorded {} (their generations sum to its {})",
                self.map_digest.weighted, ck.generation, recorded.weighted, recorded.sum
            ),
        };
        if stale.is_empty() {
            return Err(format!(
                "log checkpoint {}: the map's digest is {}, {gap}, and no page has an older copy to have \
                 fallen back to; the checkpoint is corrupt: restore the device from a copy or format it",
                ck.generation, recorded.sum
            ));
        }
        let beside = match lost_count {
            0 => String::new(),
            n => format!(" beside the {n} page(s) lost"),
        };
        let (lost, which) = match explained {
            Some(named) => {
                let others = match stale.len() - named.len() {
                    0 => String::new(),
                    n => format!(
                        "; the digests clear the {n} other page(s) with one usable copy older than the \
                         checkpoint{beside}"
                    ),
                };
                let describe: Vec<String> = (named.iter())
                    .map(|(p, _)| {
                        let why = &stale.iter().find(|s| s.0 == *p).expect("a page that could be stale").1;
                        self.describe_stale(*p, why)
                    })
                    .collect();
                let gens: Vec<String> =
                    named.iter().map(|(p, d)| (self.page_generation[*p as usize] + d).to_string()).collect();
                let pages: Vec<String> = named.iter().map(|p| p.0.to_string()).collect();
                let which = match named.len() {
                    1 => format!(
                        "page {}'s current copy, of generation {} by the map's digests, is damaged and its \
                         older copy would serve stale mappings ({}){others}",
                        pages[0], gens[0], describe[0]
                    ),
                    _ => format!(
                        "pages {}'s current copies, of generations {} by the map's digests, are damaged and \
                         their older copies would serve stale mappings ({}){others}",
                        and_list(&pages),
                        and_list(&gens),
                        describe.join("; ")
                    ),
                };
                (named.iter().map(|p| p.0).collect(), which)
            }
            None => {
                let all: Vec<u32> = stale.iter().map(|s| s.0).collect();
                let which = format!(
                    "a page's current copy is damaged and its older copy would serve stale mappings ({}); which \
                     cannot be told (no set of pages few enough to be told apart explains both digests' \
                     shortfalls{beside})",
                    self.describe_stale_pages(stale)
                );
                (all, which)
            }
        };
        let why = format!("log map: {gap}: {which}");
        if !found.accept_loss {
            let (them, their) = if lost.len() == 1 { ("it", "its") } else { ("them", "their") };
            return Err(format!(
                "{why}; restore the device from a copy, or serve with --accept-loss to unmap {them} ({their} \
                 blocks not written since checkpoint {} read zeroes)",
                ck.generation
            ));
        }
        for &p in &lost {
            for b in self.args.map.blocks_of(p, self.args.volume_blocks) {
                self.map.set(b, UNMAPPED);
            }
            // Written again before serving: the stale copy is no
            // longer the page's newest.
            self.set_page_dirty(p as usize, true);
        }
        self.counters.lost_map_pages_count += lost.len() as u64;
        let why = format!("{why}; unmapped {} page(s)", lost.len());
        self.loss = Some(match self.loss.take() {
            Some(count) => format!("{count}; {why}"),
            None => why,
        });
        Ok(())
    }

    /// The pages that could be stale whose current copy the digests'
    /// shortfalls single out as damaged, each with its shortfall (empty:
    /// the `lost_count` pages without a usable copy explain it all), or
    /// `None` when no answer is sound (`seglog::shortfall::explain`). A
    /// lost page is one without a usable copy (looked for first among
    /// those with a torn copy), short by at most the checkpoint's
    /// generation; a page that could be stale, by at most the
    /// checkpoint's generation over its copy taken.
    fn explain_shortfall(
        &self,
        recorded: &MapDigest,
        found: &Found,
        lost_count: usize,
    ) -> Option<Vec<(u32, u64)>> {
        let ck_generation = found.ck.generation;
        let stale: Vec<(u32, u64)> = (found.stale.iter())
            .map(|(p, _)| (*p, ck_generation - self.page_generation[*p as usize]))
            .collect();
        // Sets weighed by both searches: one bound (`seglog::shortfall`).
        let mut weighed = 0;
        if let Some(listed) = found.lost_pages.as_ref().filter(|_| lost_count > 0) {
            if let Some(fit) = self.explain_listed(recorded, listed, ck_generation, &stale, &mut weighed) {
                return Some(fit);
            }
        }
        let lost: Vec<(u32, u64)> = match (lost_count, &found.lost_pages) {
            (0, _) => Vec::new(),
            // Listed by the sketch: the lost pages are these.
            (_, Some(listed)) => listed.iter().map(|&(p, _)| (p, ck_generation)).collect(),
            _ => (0..self.args.map.page_count)
                .filter(|&p| self.page_copy[p as usize] & PAGE_WRITTEN == 0)
                .map(|p| (p, ck_generation))
                .collect(),
        };
        let torn: Vec<(u32, u64)> = found.torn_pages.iter().map(|&p| (p, ck_generation)).collect();
        let tiers: Vec<&[(u32, u64)]> = match torn.len() < lost.len() && found.lost_pages.is_none() {
            true => vec![&torn, &lost],
            false => vec![&lost],
        };
        crate::seglog::shortfall::explain_within(
            recorded,
            &self.map_digest,
            &tiers,
            lost_count,
            &stale,
            &mut weighed,
        )
    }

    /// The lost pages the sketch listed, each short by the generation it
    /// gives (the low 32 bits: taken whole while the checkpoint's
    /// generation is below 2^32): the pages that could be stale which
    /// explain what that leaves of the digests' shortfalls (empty: the
    /// lost pages explain it all), or `None` (then the search over the
    /// lost pages' every generation, [`Log::explain_shortfall`]). A
    /// generation is off when a page of its cell fell back to an older
    /// copy; then the digests are left short by a set no search here
    /// explains (but by chance, as for any set weighed:
    /// `seglog::shortfall`).
    fn explain_listed(
        &self,
        recorded: &MapDigest,
        listed: &[(u32, u32)],
        ck_generation: u64,
        stale: &[(u32, u64)],
        weighed: &mut u128,
    ) -> Option<Vec<(u32, u64)>> {
        if ck_generation > u64::from(u32::MAX) {
            return None;
        }
        let mut taken = self.map_digest;
        for &(p, g) in listed {
            let g = u64::from(g);
            if g == 0 || g > ck_generation {
                return None;
            }
            taken.replace(p, 0, g);
        }
        *weighed += 1;
        if taken == *recorded {
            return Some(Vec::new());
        }
        crate::seglog::shortfall::explain_within(recorded, &taken, &[], 0, stale, weighed)
    }

    /// Page `p`, which could be stale: its offsets, the copy taken (its
    /// generation) and why the other is unusable.
    fn describe_stale(&self, p: u32, lost: &MetaError) -> String {
        let taken = (self.page_copy[p as usize] & 1) as usize;
        let mut whys = [lost.to_string(), lost.to_string()];
        whys[taken] = format!("generation {}", self.page_generation[p as usize]);
        self.describe_page(p, &whys[0], &whys[1])
    }

    /// The pages that could be stale, named: the page when there is one,
    /// else how many and the first few (those with a bad crc first).
    fn describe_stale_pages(&self, stale: &StalePages) -> String {
        let torn = |s: &&(u32, MetaError)| s.1 == MetaError::BadCrc;
        let named: Vec<String> = (stale.iter().filter(torn))
            .chain(stale.iter().filter(|s| !torn(s)))
            .take(STALE_NAMED_MAX)
            .map(|(p, why)| self.describe_stale(*p, why))
            .collect();
        let n = stale.len();
        if n == 1 {
            return named[0].clone();
        }
        let more = n - named.len();
        let torn = match stale.iter().filter(torn).count() {
            0 => String::new(),
            t => format!(" ({t} with a crc32c mismatch)"),
        };
        format!(
            "{n} pages have one usable copy, older than the checkpoint, beside an unusable one{torn}: {}{}",
            named.join("; "),
            if more > 0 { format!("; and {more} more") } else { String::new() }
        )
    }

    /// Page `p`'s offsets and why each copy was (not) taken.
    fn describe_page(&self, p: u32, why0: &str, why1: &str) -> String {
        format!(
            "page {p} at lower offsets {} and {}: copy 0: {why0}; copy 1: {why1}",
            self.args.map.copy_offset_bytes(p, 0),
            self.args.map.copy_offset_bytes(p, 1),
        )
    }

    /// Sets the generation of page `p`'s current copy (0: none), keeping
    /// the map's digests in step.
    fn set_page_generation(&mut self, p: usize, generation: u64) {
        let old = std::mem::replace(&mut self.page_generation[p], generation);
        self.map_digest.replace(p as u32, old, generation);
        self.map_sketch.replace(p as u32, old, generation);
    }

    /// Takes the newest copy of page `p` of the checkpoint's format not
    /// newer than the checkpoint; with none, the page is unmapped and
    /// this says so ([`PageTrouble::Unusable`]); with one older than the
    /// checkpoint beside a blank, torn or damaged copy, that it could be
    /// stale ([`PageTrouble::Stale`]): each with whether a copy has the
    /// map's magic and a bad crc (torn or damaged), and both copies
    /// described.
    fn pick_page(
        &mut self,
        p: u32,
        c0: DecodedPage,
        c1: DecodedPage,
        ck_generation: u64,
    ) -> Result<Option<PageTrouble>, String> {
        let torn = [&c0, &c1].iter().any(|c| matches!(c, Err(MetaError::BadCrc)));
        // Blank, torn, another kind of block, or a whole copy that does
        // not decode: what a damaged copy looks like (a whole copy of
        // another format or version is not damage).
        let lost = [&c0, &c1].map(|c| match c {
            Err(e) if !matches!(e, MetaError::Version(_)) => Some(e.clone()),
            _ => None,
        });
        let (c0, c1) = (PageCopy::judge(c0, ck_generation), PageCopy::judge(c1, ck_generation));
        let pick = match (&c0, &c1) {
            (PageCopy::Usable(g0, _), PageCopy::Usable(g1, _)) => usize::from(g1 > g0),
            (PageCopy::Usable(..), _) => 0,
            (_, PageCopy::Usable(..)) => 1,
            (PageCopy::Bad(_), _) | (_, PageCopy::Bad(_)) | (PageCopy::Newer(_), PageCopy::Newer(_)) => {
                return Err(format!(
                    "log map page {p} at lower offsets {} and {}: copy 0: {}; copy 1: {}; the map is lost: \
                     restore the device from a copy or format it",
                    self.args.map.copy_offset_bytes(p, 0),
                    self.args.map.copy_offset_bytes(p, 1),
                    c0.why(ck_generation),
                    c1.why(ck_generation)
                ));
            }
            // No copy of this format as of the checkpoint (as after a
            // format): unmapped. The next write of the page goes to the
            // copy a checkpoint that never completed wrote, if one did.
            (PageCopy::Newer(_), _) => 1,
            _ => 0,
        };
        let trouble = match ([&c0, &c1][pick], &lost[1 - pick]) {
            (PageCopy::Usable(g, _), Some(e)) if *g < ck_generation => Some(PageTrouble::Stale(e.clone())),
            (PageCopy::Usable(..), _) => None,
            _ => Some(PageTrouble::Unusable(
                torn,
                self.describe_page(p, &c0.why(ck_generation), &c1.why(ck_generation)),
            )),
        };
        let (chosen, other) = if pick == 0 { (c0, c1) } else { (c1, c0) };
        let usable = matches!(chosen, PageCopy::Usable(..));
        if let PageCopy::Usable(g, entries) = chosen {
            let r = self.args.map.blocks_of(p, self.args.volume_blocks);
            for (b, e) in r.zip(entries) {
                self.map.set(b, e);
            }
            self.map_pages_written += 1;
            self.map_sketch.insert(p);
            self.set_page_generation(p as usize, g);
        }
        self.page_copy[p as usize] = pick as u8 | if usable { PAGE_WRITTEN } else { 0 };
        // A copy of a checkpoint that never completed must not outlive this
        // recovery: a later checkpoint's generation would make it current.
        self.set_page_dirty(p as usize, matches!(other, PageCopy::Newer(_)));
        Ok(trouble)
    }

    fn read_segment(&mut self, at: SegLoc) {
        let off = self.geo.segment_offset_bytes(at);
        self.emit(LowerOp::Bringup, Request::new(ReqId(0), Op::Read, off, self.geo.stride_bytes() as u32));
    }

    fn walk_read(
        &mut self,
        data: Option<Bytes>,
        found: Found,
        mut walk: ChainWalk,
        at: SegLoc,
    ) -> Result<Option<Bringup>, String> {
        let data = data.ok_or("log recovery needs the device's bytes")?;
        let applied = walk.offer_segment(&data, &self.geo);
        for h in &applied {
            self.apply_summary(h, at).map_err(|e| {
                format!(
                    "log segment {} (seq {}) at lower offset {}: {e}",
                    at.0,
                    h.seq.0,
                    self.geo.segment_offset_bytes(at)
                )
            })?;
        }
        self.counters.recovered_segments_count += u64::from(!applied.is_empty());
        match walk.next() {
            Some((next, _)) => {
                self.read_segment(next);
                Ok(Some(Bringup::Walk { found, walk, at: next }))
            }
            None if walk.stopped() == Some(&StopReason::End) => self.recover_finish(found, walk, None),
            None => self.recover_finish(found, walk, Some(at)),
        }
    }

    /// Applies one summary's entries, in order, to the map.
    fn apply_summary(&mut self, h: &SegmentHeader, at: SegLoc) -> Result<(), String> {
        let bsec = self.block_sectors();
        let blocks = self.args.volume_blocks;
        let range = |start: u64, count: u32| -> Result<(u64, u64), String> {
            let (a, n) = (start / bsec, u64::from(count) / bsec);
            if !start.is_multiple_of(bsec) || !u64::from(count).is_multiple_of(bsec) || a + n > blocks {
                return Err(format!("entry for sectors {start}+{count} is not whole blocks of the volume"));
            }
            Ok((a, n))
        };
        for e in &h.entries {
            match *e {
                Entry::Slot { start_sector, sector_count, slot } => {
                    let (block, n) = range(start_sector, sector_count)?;
                    if n != 1 {
                        return Err(format!("slot {slot} holds {sector_count} sectors, not one block"));
                    }
                    self.map.set(block, self.slot_id(at, u32::from(slot)));
                    self.set_page_dirty(Self::page_of(block), true);
                }
                Entry::Invalidate { start_sector, sector_count } => {
                    let (a, n) = range(start_sector, sector_count)?;
                    for b in a..a + n {
                        self.map.set(b, UNMAPPED);
                        self.set_page_dirty(Self::page_of(b), true);
                    }
                }
                Entry::Next { .. } | Entry::Continue { .. } => {}
            }
        }
        Ok(())
    }

    /// The walk ended (at `stopped_at` if a segment there did not belong):
    /// judge it, rebuild, and write the new mark and checkpoint.
    fn recover_finish(
        &mut self,
        found: Found,
        walk: ChainWalk,
        stopped_at: Option<SegLoc>,
    ) -> Result<Option<Bringup>, String> {
        let ck = &found.ck;
        let end = Seq(ck.next_seq.0 + walk.applied_count());
        let flushed_upto = found.mark.as_ref().map_or(Seq(0), |m| m.durable_upto);
        if flushed_upto > end {
            let at = stopped_at.map_or("the chain's end".to_string(), |l| {
                let part = walk.stopped_in_slot().map_or(String::new(), |s| {
                    format!(
                        ", its part's summary in slot {s} at lower offset {}",
                        self.geo.slot_offset_bytes(l, u32::from(s))
                    )
                });
                format!("segment {} at lower offset {}{part}", l.0, self.geo.segment_offset_bytes(l))
            });
            let stop = walk.stopped().map_or("?".to_string(), |s| s.to_string());
            let lost = flushed_upto.0 - end.0;
            let why = format!(
                "log damaged: the segment with seq {} ({at}): {stop}; the flush mark says the log was durable \
                 up to seq {}, so {lost} flushed segment(s) cannot be recovered",
                end.0, flushed_upto.0
            );
            if !found.accept_loss {
                return Err(format!(
                    "{why}; refusing to open (nothing was written). To serve it anyway and lose them, copy \
                     the device first, then use `layoutd serve --accept-loss`"
                ));
            }
            self.counters.lost_segments_count = lost;
            self.loss = Some(match self.loss.take() {
                Some(map) => format!("{map}; {why}"),
                None => why,
            });
        }
        self.rebuild()?;
        self.boot = ck.boot + 1 + u64::from(found.copy_unreadable);
        self.format_id = ck.format_id;
        self.epoch = ck.generation + 1;
        self.next_seq = end;
        self.chain_next = None;
        self.census_changed();
        let mark_generation = found.mark.as_ref().map_or(0, |m| m.generation) + 1;
        let mark = FlushMark { generation: mark_generation, boot: self.boot, durable_upto: end };
        let mut req = Request::write(
            ReqId(0),
            self.geo.mark_offset_bytes(mark_generation),
            Bytes::from(mark.encode(&self.geo)),
        );
        req.fua = true;
        self.emit(LowerOp::Bringup, req);
        self.mark_generation = mark_generation;
        self.mark_upto = end;
        // Rewritten once the bring-up checkpoint, in the other copy, is
        // durable (`CkStage::Rewrite`); with the digest of the map as
        // recovered (an older version has none; no page's generation
        // has changed since).
        let (map_digest, map_sketch) = (Some(self.map_digest), Some(self.map_sketch));
        self.legacy_rewrite =
            found.legacy.then(|| ChainCheckpoint { map_digest, map_sketch, ..found.ck.clone() });
        Ok(Some(Bringup::Marking))
    }

    /// The live bits and segment usage from the map; two blocks in one
    /// slot is corruption.
    fn rebuild(&mut self) -> Result<(), String> {
        self.live.clear();
        self.usage = SegmentUsage::new(self.geo.segment_count as usize, self.geo.slot_count);
        let mut twice = None;
        let (live, usage, slot_count) = (&mut self.live, &mut self.usage, self.geo.slot_count);
        self.map.for_each_mapped(0..self.map.len(), |b, sid| {
            if live.get(u64::from(sid)) == 1 {
                twice = twice.or(Some((b, sid)));
                return;
            }
            live.set(u64::from(sid), 1);
            usage.add((sid / slot_count) as usize, 1, 0);
        });
        match twice {
            Some((b, sid)) => Err(format!(
                "log map: block {b} and an earlier block both live in slot {sid}; the map is corrupt: \
                 restore the device from a copy or format it"
            )),
            None => Ok(()),
        }
    }

    pub(super) fn step_checkpoint(&mut self, k: &mut CheckpointWork) -> Result<(), Blocked> {
        loop {
            match k.stage {
                CkStage::Seal => {
                    if self.compact_redirect_wanted() {
                        // The segment the chain names is sealed empty, naming
                        // the home next (sliding compaction).
                        self.ensure_open(super::policy::Cause::Resequence, false, true)?;
                        self.counters.compact_redirects_count += 1;
                    }
                    if self.open.is_some() {
                        self.seal(super::policy::Cause::User, true);
                    }
                    k.stage = CkStage::Drain;
                }
                CkStage::Drain => {
                    if !self.sealed.is_empty() {
                        return Err(Blocked::Io);
                    }
                    assert!(self.io.is_empty());
                    k.pages =
                        (0..self.args.map.page_count).filter(|&p| self.dirty_pages[p as usize]).collect();
                    for &p in &k.pages {
                        // Counted at its first write: the checkpoint of
                        // this epoch covers exactly the pages durable by it.
                        let state = &mut self.page_copy[p as usize];
                        if *state & PAGE_WRITTEN == 0 {
                            *state |= PAGE_WRITTEN;
                            self.map_pages_written += 1;
                            self.map_sketch.insert(p);
                        }
                        self.set_page_generation(p as usize, self.epoch);
                        let bytes = self.args.map.encode(p, &self.map, self.epoch, self.format_id);
                        let off = self.args.map.copy_offset_bytes(p, 1 - (self.page_copy[p as usize] & 1));
                        self.work_io(Request::write(ReqId(0), off, Bytes::from(bytes)));
                    }
                    self.counters.map_bytes_written += k.pages.len() as u64 * super::map::PAGE_BYTES;
                    k.stage = CkStage::Pages;
                }
                CkStage::Pages => {
                    self.take_io()?;
                    self.work_io(Request::new(ReqId(0), Op::Flush, 0, 0));
                    k.stage = CkStage::Flush;
                }
                CkStage::Flush => {
                    self.take_io()?;
                    if self.chain_next.is_none() {
                        let c = self.census(true);
                        self.chain_next = self.policy.choose_next(&c, super::policy::Cause::User).map(SegLoc);
                        self.census_changed();
                    }
                    let ck = ChainCheckpoint {
                        generation: self.epoch,
                        boot: self.boot,
                        next_seq: self.next_seq,
                        next_loc: self.chain_next,
                        format_id: self.format_id,
                        legacy_map: self.legacy_map,
                        map_pages_written: self.map_pages_written,
                        map_digest: Some(self.map_digest),
                        map_sketch: Some(self.map_sketch),
                    };
                    let off = self.geo.checkpoint_offset_bytes(self.epoch);
                    let mut req = Request::write(ReqId(0), off, Bytes::from(ck.encode(&self.geo)));
                    req.fua = true;
                    self.work_io(req);
                    k.stage = CkStage::Record;
                }
                CkStage::Record => {
                    self.take_io()?;
                    for &p in &k.pages {
                        self.page_copy[p as usize] ^= 1;
                        self.set_page_dirty(p as usize, false);
                    }
                    self.epoch += 1;
                    self.written_now.clear();
                    self.freed_now.clear();
                    self.census_changed();
                    self.segments_since_checkpoint = 0;
                    debug_assert_eq!(
                        self.dirty_count as usize,
                        self.dirty_pages.iter().filter(|&&d| d).count()
                    );
                    self.dirty_at_pow2.clear();
                    self.counters.checkpoints_count += 1;
                    if let Some(ck) = self.legacy_rewrite.take() {
                        // The copy recovered from, in this build's version
                        // (see `seglog::copy_version`), only now that the
                        // checkpoint in the other copy is durable: a crash
                        // that tears this write leaves that one, never the
                        // copy before, whose chain may have been reused.
                        // The work waits for it (the next checkpoint writes
                        // this copy) and serving waits for the work, so no
                        // copy of the old version is left once this build
                        // writes anything of its own.
                        let off = self.geo.checkpoint_offset_bytes(ck.generation);
                        let mut req = Request::write(ReqId(0), off, Bytes::from(ck.encode(&self.geo)));
                        req.fua = true;
                        self.work_io(req);
                        k.stage = CkStage::Rewrite;
                        continue;
                    }
                    self.end_bringup();
                    return Ok(());
                }
                CkStage::Rewrite => {
                    self.take_io()?;
                    self.end_bringup();
                    return Ok(());
                }
            }
        }
    }

    /// The bring-up checkpoint work ended: serve.
    fn end_bringup(&mut self) {
        if matches!(self.phase, Phase::Bringup(Bringup::Finishing)) {
            self.phase = Phase::Serving;
        }
    }

    /// After a flush: records that the log is durable up to the next seq,
    /// if that is news. Returns whether a mark write was issued.
    pub(super) fn write_mark(&mut self) -> bool {
        if self.next_seq <= self.mark_upto {
            return false;
        }
        let generation = self.mark_generation + 1;
        let mark = FlushMark { generation, boot: self.boot, durable_upto: self.next_seq };
        let mut req = Request::write(
            ReqId(0),
            self.geo.mark_offset_bytes(generation),
            Bytes::from(mark.encode(&self.geo)),
        );
        req.fua = true;
        self.work_io(req);
        self.mark_generation = generation;
        self.mark_upto = self.next_seq;
        self.counters.flush_marks_count += 1;
        true
    }
}

/// "a", "a and b", "a, b and c".
fn and_list(items: &[String]) -> String {
    match items.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => items.join(""),
    }
}
