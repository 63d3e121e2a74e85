//! When to try a target's own failed lower write again: one exponential
//! backoff in virtual time, shared by every target that writes metadata or
//! logged data of its own (`dcd`'s segments and checkpoints, `log`'s
//! segment writes, flushes and checkpoints).
//!
//! A failed write below is often transient (ENOSPC on a thin or full host
//! file system that a user then frees, a hiccup of a network disk). Sending
//! it again at once usually fails the same way; waiting a little, and longer
//! after each consecutive failure, gives the condition time to clear without
//! flooding the device. What a target does while it waits, and when it gives
//! up, is its own policy: `dcd` keeps the data in RAM and tries forever
//! (its waiters get the error), `log` gives up after
//! [`Backoff::failures`] reaches its attempt limit and stops the volume.
//!
//! The backoff is driven by the target's `poll_timeout` / `handle_timeout`:
//! it never reads a clock.

use layoutd_core::Instant;

/// Consecutive failures, the instant the next try is due, and the last error
/// (for the status page).
#[derive(Debug, Default, Clone)]
pub struct Backoff {
    failures: u32,
    at: Option<Instant>,
    last_error: Option<String>,
}

impl Backoff {
    /// The first retry waits 10 ms ...
    pub const FIRST_NS: u64 = 10_000_000;
    /// ... doubling per consecutive failure, up to 2 s.
    pub const MAX_NS: u64 = 2_000_000_000;

    /// The wait after `failures` consecutive failures (`failures >= 1`).
    pub fn delay_ns(failures: u32) -> u64 {
        assert!(failures >= 1, "a delay is for a failure");
        let shift = (failures - 1).min(16);
        (Self::FIRST_NS << shift).min(Self::MAX_NS)
    }

    /// A write failed at `now` (`what`: which write, and the error). The next
    /// try is due after the backoff; an earlier deadline already set stands
    /// (several writes failing together are retried together). Returns the
    /// consecutive failure count, this one included.
    pub fn failed(&mut self, now: Instant, what: String) -> u32 {
        self.failures = self.failures.saturating_add(1);
        let at = now.add_ns(Self::delay_ns(self.failures));
        self.at = Some(self.at.map_or(at, |t| t.min(at)));
        self.last_error = Some(what);
        self.failures
    }

    /// A write went through: the next failure starts the backoff afresh.
    /// The last error stays visible in the status.
    pub fn succeeded(&mut self) {
        self.failures = 0;
    }

    /// When the next try is due, for `poll_timeout`.
    pub fn at(&self) -> Option<Instant> {
        self.at
    }

    /// Whether the try is due at `now`; if it is, the deadline is consumed
    /// (the caller sends its parked writes again).
    pub fn take_due(&mut self, now: Instant) -> bool {
        let due = self.at.is_some_and(|t| t <= now);
        if due {
            self.at = None;
        }
        due
    }

    /// Consecutive failures since the last success.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// The last failure, with what was being written.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_doubles_per_consecutive_failure_up_to_the_cap() {
        assert_eq!(Backoff::delay_ns(1), 10_000_000);
        assert_eq!(Backoff::delay_ns(2), 20_000_000);
        assert_eq!(Backoff::delay_ns(8), 1_280_000_000);
        assert_eq!(Backoff::delay_ns(9), Backoff::MAX_NS);
        assert_eq!(Backoff::delay_ns(u32::MAX), Backoff::MAX_NS);
    }

    #[test]
    fn a_retry_is_due_only_after_the_backoff_and_only_once() {
        let mut b = Backoff::default();
        assert_eq!(b.at(), None);
        let t0 = Instant::from_ns(1_000);
        assert_eq!(b.failed(t0, "segment 3".into()), 1);
        assert_eq!(b.at(), Some(t0.add_ns(10_000_000)));
        assert!(!b.take_due(t0.add_ns(9_999_999)));
        assert!(b.take_due(t0.add_ns(10_000_000)));
        assert!(!b.take_due(t0.add_ns(10_000_000)), "consumed");
        // A second failure in a row waits twice as long.
        let t1 = t0.add_ns(10_000_000);
        assert_eq!(b.failed(t1, "segment 3 again".into()), 2);
        assert_eq!(b.at(), Some(t1.add_ns(20_000_000)));
        assert_eq!(b.last_error(), Some("segment 3 again"));
        // A later failure does not push an earlier deadline back.
        b.failed(t1.add_ns(1), "checkpoint".into());
        assert_eq!(b.at(), Some(t1.add_ns(20_000_000)));
        // A success resets the count, not the last error.
        b.succeeded();
        assert_eq!(b.failures(), 0);
        assert_eq!(b.last_error(), Some("checkpoint"));
        assert!(b.take_due(t1.add_ns(20_000_000)));
        assert_eq!(b.failed(t1.add_ns(30_000_000), "x".into()), 1);
    }
}
