//! Destage policies: which dirty segment idle destage moves home next.
//! Mechanism stays in the target; a policy only ranks candidates. Policies
//! never block, keep no per-request state (bounded memory), and learn the
//! outcome of the work they chose through [`DestagePolicy::complete`].
//!
//! Whatever the policy, the log is a ring: space is reclaimed only from the
//! tail, so a forced destage (log full) always takes the oldest segment.

use super::config::PolicyKind;
use crate::seglog::{SegLoc, Seq};

/// A segment idle destage may pick.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Its seq (higher = written later).
    pub seq: Seq,
    /// Its location.
    pub loc: SegLoc,
    /// Valid (not yet overwritten) sectors it holds.
    pub valid_sectors: u32,
}

/// Which candidates a policy ranks.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every candidate.
    All,
    /// Only the newest (it picks the newest): the target looks from the
    /// head and stops at the first candidate.
    Newest,
    /// Only the oldest (it picks the oldest): the target looks from the
    /// tail and stops at the first candidate.
    Oldest,
}

/// Ranks destage candidates.
pub trait DestagePolicy: Send {
    /// The policy's config name.
    fn name(&self) -> &'static str;
    /// The candidates [`Self::pick`] needs to see.
    fn scope(&self) -> Scope {
        Scope::All
    }
    /// The candidate to destage next (`candidates` is non-empty).
    fn pick(&mut self, candidates: &[Candidate]) -> Candidate;
    /// The destage of `seq` finished (`success` false on a lower error).
    fn complete(&mut self, seq: Seq, success: bool) {
        let _ = (seq, success);
    }
}

/// The paper's last-written-first.
pub struct LastWrittenFirst;
/// Fewest valid sectors first (least destage work per freed segment).
pub struct FewestValidFirst;
/// Oldest first (frees ring space soonest).
pub struct OldestFirst;

impl DestagePolicy for LastWrittenFirst {
    fn name(&self) -> &'static str {
        "last-written-first"
    }
    fn scope(&self) -> Scope {
        Scope::Newest
    }
    fn pick(&mut self, candidates: &[Candidate]) -> Candidate {
        assert!(!candidates.is_empty());
        *candidates.iter().max_by_key(|c| c.seq).expect("non-empty")
    }
}

impl DestagePolicy for FewestValidFirst {
    fn name(&self) -> &'static str {
        "fewest-valid-first"
    }
    fn pick(&mut self, candidates: &[Candidate]) -> Candidate {
        assert!(!candidates.is_empty());
        *candidates.iter().min_by_key(|c| (c.valid_sectors, c.seq)).expect("non-empty")
    }
}

impl DestagePolicy for OldestFirst {
    fn name(&self) -> &'static str {
        "oldest-first"
    }
    fn scope(&self) -> Scope {
        Scope::Oldest
    }
    fn pick(&mut self, candidates: &[Candidate]) -> Candidate {
        assert!(!candidates.is_empty());
        *candidates.iter().min_by_key(|c| c.seq).expect("non-empty")
    }
}

/// The policy a config names.
pub fn make(kind: PolicyKind) -> Box<dyn DestagePolicy> {
    match kind {
        PolicyKind::LastWrittenFirst => Box::new(LastWrittenFirst),
        PolicyKind::FewestValidFirst => Box::new(FewestValidFirst),
        PolicyKind::OldestFirst => Box::new(OldestFirst),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_pick_by_their_rule() {
        let c = |seq, valid_sectors| Candidate { seq: Seq(seq), loc: SegLoc(seq as u32), valid_sectors };
        let cs = [c(3, 10), c(5, 2), c(4, 7)];
        assert_eq!(make(PolicyKind::LastWrittenFirst).pick(&cs).seq, Seq(5));
        assert_eq!(make(PolicyKind::OldestFirst).pick(&cs).seq, Seq(3));
        assert_eq!(make(PolicyKind::FewestValidFirst).pick(&cs).seq, Seq(5));
        assert_eq!(make(PolicyKind::FewestValidFirst).pick(&[c(3, 1), c(5, 1)]).seq, Seq(3));
        // A policy that looks at one end only picks that end's candidate.
        for kind in [PolicyKind::LastWrittenFirst, PolicyKind::OldestFirst, PolicyKind::FewestValidFirst] {
            let mut p = make(kind);
            let end = match p.scope() {
                Scope::All => continue,
                Scope::Newest => cs.iter().max_by_key(|c| c.seq),
                Scope::Oldest => cs.iter().min_by_key(|c| c.seq),
            };
            assert_eq!(Some(&p.pick(&cs)), end, "{}", p.name());
        }
    }
}
