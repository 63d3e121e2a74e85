//! Idle detection: the one timer every target's idle-time work waits on
//! (dcd's destage, log's re-sequencing, opt's analysis and copies, pool's
//! line-ups), next to
//! the [`crate::background`] scheduler that grants that work once it is due.
//!
//! The scheduler stops non-forced work at the next foreground request and
//! lets it go at the runtime's next idle report; a target that wants a
//! longer quiet than "nothing outstanding right now" before it starts
//! (a destage started in the middle of a burst costs the burst a seek) waits
//! on an [`IdleTimer`] as well. The timer's rules:
//!
//! - **Arm**: [`IdleTimer::arm`] starts a wait of a threshold the caller
//!   supplies (dcd's falls as its log fills; log's and opt's are fixed),
//!   unless it is already waiting or idle. Where the wait counts from is the
//!   caller's choice: dcd arms at the runtime's idle report (quiet for the
//!   threshold), log and opt at every request (no request for the threshold).
//!   A zero threshold is idle at once, without a timeout.
//! - **Cancel**: a foreground request ([`IdleTimer::request`]) ends idle
//!   time and cancels the wait.
//! - **Fire**: the caller's `handle_timeout` passes the timeout on
//!   ([`IdleTimer::timeout`]); once the deadline has passed it is idle time.
//!   [`IdleTimer::is_idle`] already says so at the deadline, before the
//!   timeout is delivered (a target may leave its timeout unreported while
//!   it has nothing to do at idle, as log does).
//! - **In flight** ([`IdleOptions::restart_while_in_flight`]): work still in
//!   flight when the timeout comes restarts the wait from then, so a long
//!   request is not taken for idle time.
//! - **Force**: [`IdleTimer::force`] is idle at once (the `destage`
//!   message): the wait ends now, with a timeout now that makes the runtime
//!   drive the work; it still ends at the next request.
//! - **Finish**: [`IdleTimer::finish`] ends idle time without a request (the
//!   work it was for is done); the next [`IdleTimer::arm`] waits again.
//! - **Starvation** ([`IdleOptions::starvation`]): work waiting for idle time
//!   that has made no progress for `after_thresholds` thresholds (reported by
//!   [`IdleTimer::progressed`]) waits only `threshold / divisor`: a client
//!   that never leaves a threshold of quiet (a trickle) gives up its gaps to
//!   it, but a burst's gaps stay shorter than the shortened threshold.
//! - **Maximum wait** ([`IdleOptions::wait_ns_max`]): work that has waited
//!   that long for idle time is *due* anyway ([`IdleTimer::is_due`]), so a
//!   client that never pauses still gets it done, at the cost of the
//!   seeks it then causes. The caller says since when its oldest waiting
//!   work waits ([`IdleTimer::due_at`]): which items go out with it (all
//!   of a queue at once, in one sweep, or one by one) is its choice.
//!
//! Pure computation on the virtual clock ([`Instant`]): deterministic in the
//! simulator.

use crate::Instant;

/// Per-target rules of an [`IdleTimer`] (see the module docs).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct IdleOptions {
    /// Idle before the first wait: a target that counts from each request
    /// (no request yet: idle) sets it; one that counts from the runtime's
    /// idle report does not (idle only after a first quiet threshold).
    pub idle_at_start: bool,
    /// Work still in flight when the timeout comes restarts the wait.
    pub restart_while_in_flight: bool,
    /// Shorter waits for starved work; `None`: off.
    pub starvation: Option<Starvation>,
    /// Work waiting this long (ns) is due whether idle or not; `None`: off
    /// (it waits for idle time however long that takes).
    pub wait_ns_max: Option<u64>,
}

/// The starvation rule: waiting work that made no progress for
/// `after_thresholds` thresholds waits `threshold / divisor` (rounded up).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Starvation {
    /// Thresholds without progress after which waiting work is starved.
    pub after_thresholds: u64,
    /// A starved wait is the threshold divided by this.
    pub divisor: u64,
}

/// See the module docs. Holds no allocation; every method is O(1).
#[derive(Clone, Debug)]
pub struct IdleTimer {
    options: IdleOptions,
    /// The end of the wait in progress (`None`: not waiting).
    deadline: Option<Instant>,
    /// The wait ended (or was forced) and no request came since.
    idle: bool,
    /// The length of the wait last armed; the in-flight rule restarts with it.
    wait_ns: u64,
    /// When the work waiting for idle time last started or made progress
    /// (`None`: none waits). Read by the starvation rule only.
    progress_at: Option<Instant>,
}

impl IdleTimer {
    /// A timer with `options`, not waiting; idle if `options.idle_at_start`.
    pub fn new(options: IdleOptions) -> IdleTimer {
        if let Some(s) = options.starvation {
            assert!(s.after_thresholds >= 1, "starved after at least one threshold");
            assert!(s.divisor >= 1, "a starved wait is at most the threshold");
        }
        assert!(options.wait_ns_max != Some(0), "a maximum wait of zero is no wait: use None or arm with 0");
        let timer =
            IdleTimer { options, deadline: None, idle: options.idle_at_start, wait_ns: 0, progress_at: None };
        timer.check();
        timer
    }

    /// Idle and waiting exclude each other.
    fn check(&self) {
        assert!(!(self.idle && self.deadline.is_some()), "idle while still waiting: {self:?}");
    }

    /// A foreground request arrived: idle time ends (the caller's idle-time
    /// work stops after its current step) and the wait is cancelled.
    pub fn request(&mut self) {
        self.idle = false;
        self.deadline = None;
        self.check();
    }

    /// Starts a wait of `threshold_ns` from `now` (shortened for starved
    /// work), unless already waiting or idle. Zero: idle at once.
    pub fn arm(&mut self, now: Instant, threshold_ns: u64) {
        if !self.can_arm() {
            return;
        }
        let wait_ns = self.wait_ns_at(now, threshold_ns);
        assert!(wait_ns <= threshold_ns, "a wait is never longer than the threshold");
        if wait_ns == 0 {
            self.idle = true;
        } else {
            self.wait_ns = wait_ns;
            self.deadline = Some(now.add_ns(wait_ns));
            assert!(self.deadline > Some(now));
        }
        self.check();
    }

    /// Whether [`IdleTimer::arm`] would start a wait: neither waiting nor
    /// idle (a caller whose threshold costs something to compute asks first).
    pub fn can_arm(&self) -> bool {
        !self.idle && self.deadline.is_none()
    }

    /// The wait for `threshold_ns` at `now`: the threshold, or its starved
    /// share if the starvation rule is on and the waiting work is starved.
    fn wait_ns_at(&self, now: Instant, threshold_ns: u64) -> u64 {
        match (self.options.starvation, self.progress_at) {
            (Some(s), Some(at)) if now.ns_since(at) >= s.after_thresholds.saturating_mul(threshold_ns) => {
                threshold_ns.div_ceil(s.divisor)
            }
            _ => threshold_ns,
        }
    }

    /// The caller's `handle_timeout` at `now`; `in_flight`: whether the
    /// caller has work in flight (read by the in-flight rule only). Once
    /// the deadline has passed, idle time begins, or with the in-flight
    /// rule and work in flight, the wait restarts from `now`.
    pub fn timeout(&mut self, now: Instant, in_flight: bool) {
        let Some(deadline) = self.deadline else { return };
        if deadline > now {
            return;
        }
        if self.options.restart_while_in_flight && in_flight {
            self.deadline = Some(now.add_ns(self.wait_ns));
            assert!(self.deadline > Some(now), "a restarted wait lies ahead");
        } else {
            self.deadline = None;
            self.idle = true;
        }
        self.check();
    }

    /// Idle from `now` on, without waiting (a runtime command such as
    /// `destage`); the next request still ends it. Unless already idle,
    /// the wait ends at `now` rather than being skipped: the timeout at
    /// `now` is an event that makes the runtime drive the work even where
    /// the command itself came without one (a caller of
    /// [`crate::Target::message`] need not move what it emitted).
    pub fn force(&mut self, now: Instant) {
        if !self.idle {
            self.deadline = Some(now);
        }
        assert!(self.is_idle(now));
        self.check();
    }

    /// The idle-time work is done (or gave up): idle ends without a
    /// request, and the next [`IdleTimer::arm`] waits again.
    pub fn finish(&mut self) {
        self.idle = false;
        self.deadline = None;
        self.check();
    }

    /// Whether it is idle time at `now`: idle (the wait ended or was
    /// forced, no request since), or the deadline has passed (its timeout
    /// may not be delivered yet).
    pub fn is_idle(&self, now: Instant) -> bool {
        self.idle || self.deadline.is_some_and(|d| d <= now)
    }

    /// When the caller's `handle_timeout` must run (`None`: not waiting).
    /// With the maximum-wait rule the caller also wakes at
    /// [`IdleTimer::due_at`] of its oldest waiting work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    /// Maximum wait: when work waiting for idle time since `waiting_since`
    /// (the oldest item the caller holds back) becomes due whether idle or
    /// not; `None` without the rule or without waiting work.
    pub fn due_at(&self, waiting_since: Option<Instant>) -> Option<Instant> {
        let max = self.options.wait_ns_max?;
        let at = waiting_since?.add_ns(max);
        assert!(Some(at) > waiting_since, "a maximum wait lies ahead of the wait's start");
        Some(at)
    }

    /// Whether work waiting since `waiting_since` may go at `now`: it is
    /// idle time, or the work has waited [`IdleOptions::wait_ns_max`].
    pub fn is_due(&self, now: Instant, waiting_since: Option<Instant>) -> bool {
        self.is_idle(now) || self.due_at(waiting_since).is_some_and(|at| at <= now)
    }

    /// The work waiting for idle time started or made progress at `now`
    /// (the starvation rule's clock).
    pub fn progressed(&mut self, now: Instant) {
        self.progress_at = Some(now);
    }

    /// No work waits for idle time any more (the starvation rule's clock
    /// stops).
    pub fn work_done(&mut self) {
        self.progress_at = None;
    }

    /// Whether work waits for idle time (between [`IdleTimer::progressed`]
    /// and [`IdleTimer::work_done`]).
    pub fn work_waiting(&self) -> bool {
        self.progress_at.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn at_ms(ms: u64) -> Instant {
        Instant::ZERO.add_ms(ms)
    }

    fn plain() -> IdleTimer {
        IdleTimer::new(IdleOptions::default())
    }

    #[test]
    fn an_armed_wait_is_idle_at_its_deadline_and_after_its_timeout() {
        let mut t = plain();
        assert!(!t.is_idle(at_ms(0)), "not idle at start without idle_at_start");
        t.arm(at_ms(0), 100 * MS);
        assert_eq!(t.poll_timeout(), Some(at_ms(100)));
        assert!(!t.is_idle(at_ms(99)));
        assert!(t.is_idle(at_ms(100)), "idle at the deadline, before the timeout is delivered");
        t.timeout(at_ms(99), false);
        assert_eq!(t.poll_timeout(), Some(at_ms(100)), "an early timeout changes nothing");
        t.timeout(at_ms(100), false);
        assert_eq!(t.poll_timeout(), None, "no timeout once idle");
        assert!(t.is_idle(at_ms(100)));
        t.arm(at_ms(200), 100 * MS);
        assert_eq!(t.poll_timeout(), None, "arming while idle does nothing");
        assert!(IdleTimer::new(IdleOptions { idle_at_start: true, ..Default::default() }).is_idle(at_ms(0)));
    }

    #[test]
    fn arming_while_waiting_keeps_the_first_deadline() {
        let mut t = plain();
        t.arm(at_ms(0), 100 * MS);
        t.arm(at_ms(50), 10 * MS);
        assert_eq!(t.poll_timeout(), Some(at_ms(100)));
    }

    #[test]
    fn a_request_cancels_the_wait_and_ends_idle_time() {
        let mut t = plain();
        t.arm(at_ms(0), 100 * MS);
        t.request();
        assert_eq!(t.poll_timeout(), None);
        assert!(!t.is_idle(at_ms(500)), "a cancelled wait never makes idle time");
        t.arm(at_ms(500), 100 * MS);
        t.timeout(at_ms(600), false);
        assert!(t.is_idle(at_ms(600)));
        t.request();
        assert!(!t.is_idle(at_ms(600)), "a request ends idle time");
        // Counting from each request: the wait restarts at every arrival.
        t.arm(at_ms(600), 100 * MS);
        t.request();
        t.arm(at_ms(650), 100 * MS);
        assert_eq!(t.poll_timeout(), Some(at_ms(750)));
    }

    #[test]
    fn work_in_flight_at_the_timeout_restarts_the_wait_only_with_the_rule() {
        let rule = IdleOptions { restart_while_in_flight: true, ..Default::default() };
        let mut t = IdleTimer::new(rule);
        t.arm(at_ms(0), 100 * MS);
        t.timeout(at_ms(130), true);
        assert_eq!(t.poll_timeout(), Some(at_ms(230)), "the full wait again, from the timeout");
        assert!(!t.is_idle(at_ms(130)));
        t.timeout(at_ms(230), false);
        assert!(t.is_idle(at_ms(230)), "nothing in flight: idle");
        let mut t = plain();
        t.arm(at_ms(0), 100 * MS);
        t.timeout(at_ms(130), true);
        assert!(t.is_idle(at_ms(130)), "without the rule, work in flight does not matter");
    }

    #[test]
    fn force_is_idle_at_once_until_the_next_request() {
        let mut t = plain();
        t.arm(at_ms(0), 100 * MS);
        t.force(at_ms(5));
        assert!(t.is_idle(at_ms(5)));
        assert_eq!(t.poll_timeout(), Some(at_ms(5)), "the wait ends now: a timeout now wakes the runtime");
        t.timeout(at_ms(5), false);
        assert!(t.is_idle(at_ms(5)));
        t.force(at_ms(6));
        assert_eq!(t.poll_timeout(), None, "already idle: no timeout");
        t.request();
        assert!(!t.is_idle(at_ms(6)));
        t.force(at_ms(7));
        assert!(t.is_idle(at_ms(7)), "forced without a wait in progress");
    }

    #[test]
    fn finish_ends_idle_time_and_the_next_arm_waits_again() {
        let mut t = plain();
        t.force(at_ms(0));
        t.timeout(at_ms(0), false);
        t.finish();
        assert!(!t.is_idle(at_ms(10)));
        t.arm(at_ms(10), 5 * MS);
        assert_eq!(t.poll_timeout(), Some(at_ms(15)));
    }

    #[test]
    fn the_caller_supplies_the_threshold_at_each_arm() {
        // dcd's threshold falls as its log fills: each wait takes the one given.
        let mut t = plain();
        t.arm(at_ms(0), 1000 * MS);
        assert_eq!(t.poll_timeout(), Some(at_ms(1000)));
        t.request();
        t.arm(at_ms(10), MS);
        assert_eq!(t.poll_timeout(), Some(at_ms(11)));
        t.request();
        t.arm(at_ms(20), 0);
        assert!(t.is_idle(at_ms(20)), "a zero threshold is idle at once");
        assert_eq!(t.poll_timeout(), None, "without a timeout");
    }

    #[test]
    fn starved_work_waits_a_share_of_the_threshold_until_it_progresses() {
        let rule = IdleOptions {
            idle_at_start: true,
            starvation: Some(Starvation { after_thresholds: 10, divisor: 10 }),
            ..Default::default()
        };
        let mut t = IdleTimer::new(rule);
        let arm = |t: &mut IdleTimer, ms: u64| {
            t.request();
            t.arm(at_ms(ms), 100 * MS);
            t.poll_timeout().expect("waiting").ns_since(at_ms(ms)) / MS
        };
        assert_eq!(arm(&mut t, 5000), 100, "no work waits: never starved");
        t.progressed(at_ms(5000));
        assert_eq!(arm(&mut t, 5999), 100, "just under ten thresholds without progress");
        assert_eq!(arm(&mut t, 6000), 10, "ten thresholds without progress: a tenth");
        t.progressed(at_ms(6000));
        assert_eq!(arm(&mut t, 6000), 100, "progress ends starvation");
        t.work_done();
        assert_eq!(arm(&mut t, 60_000), 100, "no work waits any more");
        assert_eq!(arm(&mut t, 60_000), 100);
        let mut off = IdleTimer::new(IdleOptions { starvation: None, ..rule });
        off.progressed(at_ms(0));
        assert_eq!(arm(&mut off, 60_000), 100, "without the rule, never shortened");
    }

    #[test]
    fn work_that_waited_the_maximum_is_due_without_idle_time() {
        let rule = IdleOptions { wait_ns_max: Some(1000 * MS), ..Default::default() };
        let mut t = IdleTimer::new(rule);
        t.arm(at_ms(0), 100 * MS);
        let since = Some(at_ms(50));
        assert_eq!(t.due_at(since), Some(at_ms(1050)));
        assert_eq!(t.due_at(None), None, "nothing waits: never due");
        assert!(!t.is_due(at_ms(60), since), "neither idle nor waited long enough");
        assert!(t.is_due(at_ms(100), since), "idle time");
        t.request();
        assert!(!t.is_due(at_ms(1049), since), "a request ended idle time");
        assert!(t.is_due(at_ms(1050), since), "waited the maximum: due though a request came");
        assert!(!t.is_idle(at_ms(1050)), "due is not idle time");
        assert!(!t.is_due(at_ms(1050), Some(at_ms(51))), "younger work waits on");
        let off = IdleTimer::new(IdleOptions::default());
        assert_eq!(off.due_at(since), None);
        assert!(!off.is_due(at_ms(1_000_000), since), "without the rule, only idle time");
    }

    #[test]
    fn a_starved_wait_rounds_up() {
        let rule = IdleOptions {
            starvation: Some(Starvation { after_thresholds: 1, divisor: 3 }),
            ..Default::default()
        };
        let mut t = IdleTimer::new(rule);
        t.progressed(at_ms(0));
        t.arm(at_ms(10), 10);
        assert_eq!(t.poll_timeout(), Some(at_ms(10).add_ns(4)));
    }
}
