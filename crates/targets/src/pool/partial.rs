//! Partly written redirected chunks: with `origin_shared_write =
//! "redirect"`, the origin's first write to a shared chunk `p` writes only
//! its own sectors into the new chunk `q`; `q` remembers which sectors are
//! written ([`Sectors`]) and reads the rest from `p` (its *base*) until it
//! is *filled* (the rest copied from `p`, in idle time or when it must be
//! whole) or written whole. See `docs/pool.md`.

/// 64-bit words of a [`Sectors`] bitmap.
pub const SECTOR_WORDS: usize = 4;

/// The most sectors a partial chunk has: chunks up to this many 512-byte
/// sectors (128 KiB) may be partial; larger ones are copied whole.
pub const SECTORS_MAX: u64 = 64 * SECTOR_WORDS as u64;

/// Which sectors of a chunk are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sectors([u64; SECTOR_WORDS]);

impl Sectors {
    /// From the words of a record.
    pub fn from_words(w: [u64; SECTOR_WORDS]) -> Sectors {
        Sectors(w)
    }

    /// The words for a record.
    pub fn words(&self) -> [u64; SECTOR_WORDS] {
        self.0
    }

    fn get(&self, s: u64) -> bool {
        self.0[(s / 64) as usize] >> (s % 64) & 1 == 1
    }

    /// Marks sectors `[first, first + n)` written; whether any was not.
    pub fn set(&mut self, first: u64, n: u64) -> bool {
        assert!(first + n <= SECTORS_MAX, "sectors {first}+{n} past a partial chunk");
        let before = self.0;
        for s in first..first + n {
            self.0[(s / 64) as usize] |= 1 << (s % 64);
        }
        before != self.0
    }

    /// Whether all of the first `n` sectors are written.
    pub fn all(&self, n: u64) -> bool {
        (0..n).all(|s| self.get(s))
    }

    /// Whether any sector past the first `n` is marked (damage).
    pub fn any_past(&self, n: u64) -> bool {
        (n..SECTORS_MAX).any(|s| self.get(s))
    }

    /// `[first, first + n)` cut into runs `(first, count, written)`, in order.
    pub fn runs(&self, first: u64, n: u64) -> Vec<(u64, u64, bool)> {
        let mut out: Vec<(u64, u64, bool)> = Vec::new();
        for s in first..first + n {
            let w = self.get(s);
            match out.last_mut() {
                Some(r) if r.2 == w => r.1 += 1,
                _ => out.push((s, 1, w)),
            }
        }
        out
    }
}

/// The base of a fresh chunk kept partial (`zero_new_chunks_with =
/// "partial"`): its unwritten sectors read as zeroes, from no chunk.
pub const NO_BASE: u64 = u64::MAX - 1;

/// A partly written chunk's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partial {
    /// The data chunk the unwritten sectors read from (the shared chunk
    /// the write was redirected off; it holds one share for this chunk),
    /// or [`NO_BASE`] (a fresh chunk: the rest reads as zeroes).
    pub base: u64,
    /// The sectors written.
    pub written: Sectors,
}

impl Partial {
    /// Whether the unwritten sectors read from a base chunk (a redirect's),
    /// not as zeroes (a fresh chunk kept partial, [`NO_BASE`]).
    pub fn has_base(&self) -> bool {
        self.base != NO_BASE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Against a model (a bool per sector): `set` reports a change
        /// exactly when a sector was unset, `runs` tiles the range with
        /// maximal runs that agree with the model, `all` agrees.
        #[test]
        fn the_bitmap_agrees_with_a_model(
            sets in proptest::collection::vec((0..SECTORS_MAX, 1..40u64), 0..20),
            probe in (0..SECTORS_MAX, 1..SECTORS_MAX),
        ) {
            let mut s = Sectors::default();
            let mut model = [false; SECTORS_MAX as usize];
            for (first, n) in sets {
                let n = n.min(SECTORS_MAX - first);
                let changed = (first..first + n).any(|i| !model[i as usize]);
                prop_assert_eq!(s.set(first, n), changed);
                for i in first..first + n {
                    model[i as usize] = true;
                }
            }
            let (first, n) = (probe.0, probe.1.min(SECTORS_MAX - probe.0));
            let runs = s.runs(first, n);
            let mut at = first;
            for (k, &(f, c, w)) in runs.iter().enumerate() {
                prop_assert_eq!(f, at);
                prop_assert!(c > 0);
                prop_assert!((f..f + c).all(|i| model[i as usize] == w));
                if k > 0 {
                    prop_assert_ne!(runs[k - 1].2, w, "runs are maximal");
                }
                at += c;
            }
            prop_assert_eq!(at, first + n);
            for m in [1, 16, 128, SECTORS_MAX] {
                prop_assert_eq!(s.all(m), model[..m as usize].iter().all(|&b| b));
            }
            prop_assert_eq!(Sectors::from_words(s.words()), s);
        }
    }
}
