//! The map snapshot (see [`super::meta`]): when it is taken (in idle time
//! at most every `snapshot_interval_ms` while the maps changed; and by a
//! flush that follows another flush with no modify in between, which is
//! what an unmount followed by the runtime's final flush looks like), how
//! the region record vouches for it, and how a clean open loads it.

use super::meta::{self, Snapshot};
use super::{LowerOp, Replica};
use bytes::Bytes;
use layoutd_core::{Instant, IoError, Op, ReqId, Request, REQUEST_BYTES_MAX};

/// Snapshot state.
#[derive(Default)]
pub(super) struct Snap {
    /// The newest generation used.
    pub generation: u64,
    /// The generation that is current (nothing changed since), 0 for none.
    pub vouched: u64,
    /// Map changes so far, and at the snapshot being taken or last taken.
    pub changes: u64,
    pub changes_at_snapshot: u64,
    /// A snapshot being written: (generation, writes left, failed).
    pub busy: Option<(u64, u32, bool)>,
    pub last_at: Option<Instant>,
    /// Flushes waiting for the snapshot being written.
    pub flush_waiters: Vec<u64>,
    /// An upper modify arrived since the last flush.
    pub modify_since_flush: bool,
    pub loaded_blocks: u64,
    pub load_error: Option<String>,
}

impl Replica {
    /// The maps changed: a vouched snapshot is no longer current.
    pub(super) fn map_changed(&mut self) {
        self.snap.changes += 1;
        if self.snap.vouched != 0 {
            self.snap.vouched = 0;
            self.region.version += 1;
        }
    }

    pub(super) fn snapshot_dirty(&self) -> bool {
        self.args.snapshot_bytes > 0
            && self.snap.busy.is_none()
            && self.snap.changes != self.snap.changes_at_snapshot
    }

    /// Whether an idle-time snapshot is due: the maps changed, the
    /// interval passed, and the maps are about to stay as they are — no
    /// replica write waits or is in flight (each changes the maps when it
    /// lands, and the snapshot would be stale at once) and the replica
    /// writes' own quiet (`replication_idle_ms` without a request) has come.
    /// A snapshot is only ever loaded if nothing changed after it, so one
    /// taken in the middle of a burst is a full-stroke write for nothing.
    pub(super) fn snapshot_due(&self, now: Instant) -> bool {
        let interval_passed =
            self.snap.last_at.is_none_or(|t| now >= t.add_ms(self.args.snapshot_interval_ms));
        let settled =
            self.deferred.is_empty() && self.pending.is_empty() && self.replication_idle.is_idle(now);
        self.snapshot_dirty() && interval_passed && self.idle_seen && settled
    }

    /// A flush: takes a snapshot (the flush waits for it) if it follows
    /// another flush with no modify in between and the maps changed.
    /// Returns whether the flush `key` waits.
    pub(super) fn snapshot_at_flush(&mut self, now: Instant, key: u64) -> bool {
        let quiet = !std::mem::replace(&mut self.snap.modify_since_flush, false);
        if quiet && self.snapshot_dirty() && self.start_snapshot(now) > 0 {
            self.snap.flush_waiters.push(key);
            return true;
        }
        false
    }

    /// Writes a snapshot of the maps now; returns the bytes written (0 if
    /// it does not fit or one is in progress).
    pub(super) fn start_snapshot(&mut self, now: Instant) -> u64 {
        if self.snap.busy.is_some() || self.args.snapshot_bytes == 0 {
            return 0;
        }
        let snap = Snapshot {
            replicas: self.space.forward.iter().map(|e| (e.start, e.length, e.value.orig)).collect(),
            declared: self.space.declared.extents().collect(),
        };
        let generation = self.snap.generation + 1;
        let rb = self.args.meta_record_bytes;
        let blocks_max = self.args.snapshot_bytes / 2 / u64::from(rb);
        self.snap.last_at = Some(now);
        let Some(bytes) = meta::encode_snapshot(rb, generation, blocks_max, &snap) else {
            self.counters.snapshots_too_large_count += 1;
            self.snap.changes_at_snapshot = self.snap.changes;
            return 0;
        };
        self.snap.generation = generation;
        self.snap.changes_at_snapshot = self.snap.changes;
        let base = self.args.snapshot_offset_bytes(generation % 2);
        let bytes = Bytes::from(bytes);
        let mut writes = 0;
        for at in (0..bytes.len()).step_by(REQUEST_BYTES_MAX as usize) {
            let end = (at + REQUEST_BYTES_MAX as usize).min(bytes.len());
            let mut w = Request::write(ReqId(0), base + at as u64, bytes.slice(at..end));
            w.fua = true;
            self.emit(LowerOp::SnapWrite, w);
            writes += 1;
        }
        self.snap.busy = Some((generation, writes, false));
        bytes.len() as u64
    }

    /// One snapshot write finished.
    pub(super) fn snapshot_written(&mut self, ok: bool) {
        let (generation, left, failed) = self.snap.busy.as_mut().expect("a snapshot in progress");
        *left -= 1;
        *failed |= !ok;
        if *left > 0 {
            return;
        }
        let (generation, failed) = (*generation, *failed);
        self.snap.busy = None;
        let waiters = std::mem::take(&mut self.snap.flush_waiters);
        if failed || self.snap.changes != self.snap.changes_at_snapshot {
            for key in waiters {
                self.piece_done(key, 0, None, Ok(()));
            }
            return;
        }
        self.counters.snapshots_written_count += 1;
        self.snap.vouched = generation;
        self.region.version += 1;
        let v = self.region.version;
        self.region.waiters.extend(waiters.into_iter().map(|k| (k, v)));
    }

    /// Clean open with a vouched snapshot: reads its copy.
    pub(super) fn load_snapshot(&mut self, generation: u64) {
        let base = self.args.snapshot_offset_bytes(generation % 2);
        let copy_bytes = self.args.snapshot_bytes / 2;
        let mut at = 0;
        while at < copy_bytes {
            let n = (copy_bytes - at).min(u64::from(REQUEST_BYTES_MAX));
            self.emit(LowerOp::SnapRead { at }, Request::new(ReqId(0), Op::Read, base + at, n as u32));
            at += n;
        }
    }

    /// The snapshot copy's bytes arrived (or could not): loads it when it
    /// decodes, else keeps the region only and says why in the status.
    pub(super) fn snapshot_loaded(&mut self, generation: u64, copy: Result<Vec<u8>, IoError>) {
        let decoded = copy.map_err(|e| e.to_string()).and_then(|b| {
            meta::decode_snapshot(&b, self.args.meta_record_bytes, generation, self.args.volume_blocks())
                .map_err(|e| e.to_string())
        });
        let snap = match decoded {
            Ok(s) => s,
            Err(e) => {
                let at = self.args.snapshot_offset_bytes(generation % 2);
                self.snap.load_error =
                    Some(format!("snapshot {generation} at lower bytes {at}: {e}; replicas dropped"));
                return;
            }
        };
        for &(s, n) in &snap.declared {
            self.space.declared.release_range(s, n);
            self.space.free.release_range(s, n);
        }
        for &(l, n, o) in &snap.replicas {
            let usable = self.space.region.is_free(l, n)
                && self.space.free.is_free(l, n)
                && self.space.declared.free_parts(o, n).is_empty();
            if usable {
                self.space.free.take(l, n);
                self.space.add_replica(o, n, l, 0);
                self.snap.loaded_blocks += n;
            }
        }
        self.snap.vouched = generation;
        self.snap.changes_at_snapshot = self.snap.changes;
    }
}
