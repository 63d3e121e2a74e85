//! Bringing the OPT region up.
//!
//! Format: map generation 0 in copy 0 and 1 in copy 1 (both empty), the
//! journal zeroed, a flush.
//!
//! Open (clean or not, the same): read both map copies and the journal;
//! take the newest valid map; add the dirty bits of every journal block
//! stamped with that map's generation; then write the result as the next
//! generation (FUA), which also empties the journal, and serve. A map that
//! is missing or corrupt in both copies, or that does not fit the config,
//! stops the open naming the offset and the fix; with `accept_loss` the
//! region is dropped instead and every block is read from home (the
//! writes to mapped blocks since the last map are then lost, and the
//! status says so).

use super::meta::{encode_map, pick_map, JournalBlock, MapImage};
use super::{LowerOp, Opt, Phase, Slot};
use bytes::Bytes;
use layoutd_core::metablock::{MetaError, GENERATION_MAX};
use layoutd_core::{Completion, Op, ReqId, Request};

/// Reads outstanding while recovering.
pub(super) struct Recovering {
    accept_loss: bool,
    /// Map copy 0, map copy 1, journal.
    parts: [Option<Bytes>; 3],
    reads_left: u32,
    /// The consolidated map write is in flight.
    finishing: bool,
}

impl Recovering {
    pub(super) fn new(accept_loss: bool) -> Recovering {
        Recovering { accept_loss, parts: [None, None, None], reads_left: 3, finishing: false }
    }
}

impl Opt {
    pub(super) fn start_bringup(&mut self) {
        let g = self.geo;
        let journal_bytes = g.meta_bytes() - 2 * g.map_bytes;
        match &mut self.phase {
            Phase::Format { writes_left, .. } => {
                *writes_left = 3;
                for generation in [0u64, 1] {
                    let b = encode_map(&g, generation, &MapImage::default());
                    let offset = g.map_offset_bytes(generation as usize);
                    self.emit(LowerOp::Bringup { part: 3 }, Request::write(ReqId(0), offset, b.into()));
                }
                let zeroes = Bytes::from(vec![0u8; journal_bytes as usize]);
                self.emit(
                    LowerOp::Bringup { part: 3 },
                    Request::write(ReqId(0), g.journal_offset_bytes(0), zeroes),
                );
                self.map_generation = 1;
            }
            Phase::Recover(_) => {
                let parts = [
                    (g.map_offset_bytes(0), g.map_bytes),
                    (g.map_offset_bytes(1), g.map_bytes),
                    (g.journal_offset_bytes(0), journal_bytes),
                ];
                for (part, (offset, len)) in parts.into_iter().enumerate() {
                    self.emit(
                        LowerOp::Bringup { part },
                        Request::new(ReqId(0), Op::Read, offset, len as u32),
                    );
                }
            }
            Phase::Serving | Phase::Failed(_) => panic!("bring-up runs once"),
        }
    }

    /// A bring-up request completed (`part`: which recovery read, 0..3).
    pub(super) fn bringup_done(&mut self, c: Completion, part: usize) {
        if let Err(e) = c.result {
            self.phase = Phase::Failed(format!(
                "opt region at lower offset {}: bring-up I/O failed: {e}",
                self.geo.opt_offset_bytes
            ));
            return;
        }
        match std::mem::replace(&mut self.phase, Phase::Serving) {
            Phase::Format { flushing: true, .. } => {}
            Phase::Format { writes_left, flushing: false } => {
                assert!(writes_left > 0);
                let flushing = writes_left == 1;
                if flushing {
                    // The flush goes after the writes it must cover.
                    self.emit(LowerOp::Bringup { part: 3 }, Request::new(ReqId(0), Op::Flush, 0, 0));
                }
                self.phase = Phase::Format { writes_left: writes_left - 1, flushing };
            }
            Phase::Recover(r) if r.finishing => {}
            Phase::Recover(mut r) => {
                let Some(data) = c.data else {
                    self.phase = Phase::Failed(
                        "opt recovery needs the region's bytes; the runtime runs in timing-only mode".into(),
                    );
                    return;
                };
                assert!(part < 3, "a recovery read");
                r.parts[part] = Some(data);
                r.reads_left -= 1;
                if r.reads_left > 0 {
                    self.phase = Phase::Recover(r);
                    return;
                }
                self.recover(r);
            }
            other => self.phase = other,
        }
    }

    fn recover(&mut self, mut r: Recovering) {
        let g = self.geo;
        let at = g.opt_offset_bytes;
        let [m0, m1, journal] = std::mem::take(&mut r.parts).map(|p| p.expect("read"));
        let picked = pick_map(&g, &m0, &m1).map(|(generation, m, _)| (generation, m));
        let journals: Vec<Result<JournalBlock, MetaError>> = journal
            .chunks(super::config::JOURNAL_BLOCK_BYTES as usize)
            .map(|b| JournalBlock::decode(b, g.slot_count))
            .collect();
        // A blank or torn block (bad crc) was never acknowledged and is
        // skipped; a whole block this build cannot read (a newer version,
        // a record it may not hold) may carry acknowledged writes.
        let unreadable = journals.iter().enumerate().find_map(|(i, j)| match j {
            Err(e) if !e.is_absent_or_torn() => Some((i, e)),
            _ => None,
        });
        if let Some((i, e)) = unreadable {
            let off = g.journal_offset_bytes(i as u32);
            let why = format!(
                "opt journal block at lower offset {off}: {e} (its crc holds: written by a newer layoutd?)"
            );
            if !r.accept_loss {
                self.phase = Phase::Failed(format!(
                    "{why}; refusing to open (nothing was written): use the layoutd that wrote it, or \
                     open with --accept-loss to skip the block (its absorbed writes are lost)"
                ));
                return;
            }
            self.loss = Some(format!("{why}: skipped, its absorbed writes are lost"));
        }
        // A generation past every one on disk, for a fallback map.
        let header_generation = |b: &[u8]| u64::from_le_bytes(b[16..24].try_into().expect("8 bytes"));
        let newest = [&m0, &m1].into_iter().map(|b| header_generation(b).min(GENERATION_MAX - 2));
        let newest = journals.iter().flatten().map(|j| j.map_generation).chain(newest).max().unwrap_or(0);
        let (generation, image) = match picked {
            Ok(p) => p,
            Err(e) if r.accept_loss => {
                self.loss = Some(format!(
                    "the OPT map was unreadable ({e}); every block is read from home and writes to mapped blocks since the last map are lost"
                ));
                (newest + 1, MapImage::default())
            }
            Err(e) => {
                self.phase = Phase::Failed(format!(
                    "opt map at lower offset {at}: {e}. The OPT copies cannot be trusted without it: \
                     open with --accept-loss to fall back to the home copies (losing writes to mapped \
                     blocks since the last map), or check `opt_offset`/`opt_length`/`block_bytes`"
                ));
                return;
            }
        };
        for (extra, runs) in [(false, &image.runs), (true, &image.extras)] {
            for &(home, count, slot) in runs {
                if extra {
                    super::exec::insert_extra(&mut self.extras, home, u64::from(count), u64::from(slot));
                } else {
                    self.map.insert(home, u64::from(count), u64::from(slot));
                }
                self.free.remove(slot, count);
                for i in 0..count {
                    let home = Some(home + u64::from(i));
                    self.slots[(slot + i) as usize] = Slot { home, extra, ..Slot::default() };
                }
            }
        }
        // The map's dirty bits, then each journal block of its generation in
        // order: its absorbed runs (mapped, dirty), then its dirty bits (a
        // slot an extra copy's drop freed may take a later block's run).
        let mut batches = vec![(Vec::new(), image.dirty.clone())];
        for j in journals {
            match j {
                Ok(j) if j.map_generation == generation => batches.push((j.maps, j.slots)),
                Ok(_) | Err(MetaError::Blank) => {}
                Err(_) => self.counters.journal_blocks_unreadable_count += 1,
            }
        }
        for (maps, dirty) in batches {
            for (home, count, slot) in maps {
                let n = u64::from(count);
                let free = (slot..slot + count).all(|s| self.slots[s as usize].home.is_none());
                if home.checked_add(n).is_none_or(|e| e > g.volume_blocks())
                    || !free
                    || !self.map.overlapping(home, n).is_empty()
                {
                    self.phase = Phase::Failed(format!(
                        "opt journal at lower offset {}: an absorbed run of {count} block(s) from home block \
                         {home} to slot {slot} overlaps the map (generation {generation}) or the volume's \
                         end; the metadata is inconsistent",
                        g.journal_offset_bytes(0)
                    ));
                    return;
                }
                self.map.insert(home, n, u64::from(slot));
                self.free.remove(slot, count);
                for i in 0..count {
                    let home = Some(home + u64::from(i));
                    self.slots[(slot + i) as usize] = Slot { home, dirty: true, ..Slot::default() };
                }
                self.counters.recovered_absorbed_blocks_count += n;
            }
            if !self.recover_dirty(generation, dirty) {
                return;
            }
        }
        self.map_generation = generation;
        r.finishing = true;
        self.phase = Phase::Recover(r);
        let image = self.image(&[], &[], &[]);
        self.write_map_bringup(image);
    }

    /// Marks `dirty` slots dirty (recovery), dropping their extra copies;
    /// `false` (the phase failed) on a bit the map cannot hold.
    fn recover_dirty(&mut self, generation: u64, dirty: Vec<u32>) -> bool {
        let g = self.geo;
        for s in dirty {
            let slot = &mut self.slots[s as usize];
            if slot.home.is_none() {
                self.phase = Phase::Failed(format!(
                    "opt journal at lower offset {}: a dirty bit names slot {s}, which the map (generation \
                     {generation}) leaves empty; the metadata is inconsistent",
                    g.journal_offset_bytes(0)
                ));
                return false;
            }
            if slot.extra {
                self.phase = Phase::Failed(format!(
                    "opt journal at lower offset {}: a dirty bit names slot {s}, an extra copy (always \
                     clean) in the map (generation {generation}); the metadata is inconsistent",
                    g.journal_offset_bytes(0)
                ));
                return false;
            }
            if !slot.dirty {
                slot.dirty = true;
                self.counters.recovered_dirty_slots_count += 1;
                // Its extra copies hold the data before the write.
                let home = slot.home.expect("mapped");
                self.drop_extras(home);
            }
        }
        true
    }

    /// The consolidated map written before serving (the journal restarts).
    fn write_map_bringup(&mut self, image: MapImage) {
        let generation = self.map_generation + 1;
        self.map_generation = generation;
        self.journal_next = 0;
        self.emit_map(LowerOp::Bringup { part: 3 }, generation, &image);
    }
}
