//! Virtual time. The simulator starts at zero; the live runtime maps the wall
//! clock onto the same type. Targets only ever see values of this type.

use serde::{Deserialize, Serialize};

/// A point in time, in nanoseconds since the runtime's epoch.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Instant {
    ns: u64,
}

impl Instant {
    /// The runtime's epoch.
    pub const ZERO: Instant = Instant { ns: 0 };

    /// An instant `ns` nanoseconds after the epoch.
    pub const fn from_ns(ns: u64) -> Instant {
        Instant { ns }
    }

    /// Nanoseconds since the epoch.
    pub const fn as_ns(self) -> u64 {
        self.ns
    }

    /// This instant plus `ns` nanoseconds (saturating).
    pub const fn add_ns(self, ns: u64) -> Instant {
        Instant { ns: self.ns.saturating_add(ns) }
    }

    /// This instant plus `ms` milliseconds (saturating).
    pub const fn add_ms(self, ms: u64) -> Instant {
        self.add_ns(ms.saturating_mul(1_000_000))
    }

    /// Nanoseconds from `earlier` to `self`, zero if `earlier` is later.
    pub const fn ns_since(self, earlier: Instant) -> u64 {
        self.ns.saturating_sub(earlier.ns)
    }
}

impl std::fmt::Display for Instant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:09}s", self.ns / 1_000_000_000, self.ns % 1_000_000_000)
    }
}
