//! The background scheduler: one place that decides which layer's
//! background job gets the disk arm, so that every target's destage,
//! cleaning, replication and reorganisation share one policy.
//!
//! Targets *offer* work ([`crate::Target::background_offer`]) and perform
//! one step when granted ([`crate::Target::background_step`]); the
//! [`crate::Stack`] asks this scheduler whom to grant after every input.
//! The rules:
//!
//! - **Priority**: [`JobClass::Forced`] (foreground requests are waiting for
//!   it: a full log) > `Destage` > `Cleaning` > `Replication` >
//!   `Reorganisation`; ties go to the upper layer.
//! - **Preemption**: a foreground request stops the granting of anything
//!   but forced work until the runtime reports idle again (a step already
//!   started finishes; steps are small).
//! - **Rate limit** (optional): non-forced steps spend tokens of a bucket
//!   refilled at `rate_bytes_per_s` (burst: one second's worth); when it is
//!   empty nothing non-forced is granted until it refills, and
//!   [`Scheduler::wake_at`] says when to ask again. Forced work is never
//!   throttled: it is what foreground requests wait for.
//!
//! Pure computation on the virtual clock: deterministic in the simulator.

use crate::Instant;

/// What kind of background work, in increasing urgency.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum JobClass {
    /// Moving data for a better layout later (OPT execution, defragmenting).
    Reorganisation,
    /// Copying data to a second place that speeds up reads (replicas).
    Replication,
    /// Reclaiming space (log cleaning).
    Cleaning,
    /// Moving logged data home (dcd destage).
    Destage,
    /// Work foreground requests are waiting for (a full log).
    Forced,
}

/// A layer's offer: which class of work it has now.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Offer {
    /// The class.
    pub class: JobClass,
}

/// The scheduler's configuration.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Bytes per second of non-forced background I/O; `None`: unlimited.
    pub rate_bytes_per_s: Option<u64>,
}

/// See the module docs.
#[derive(Clone, Debug)]
pub struct Scheduler {
    config: SchedulerConfig,
    /// A foreground request arrived since the last idle report.
    foreground_busy: bool,
    /// Rate-limit tokens in bytes (may go negative: a step is not split).
    tokens: i64,
    refilled_at: Instant,
    /// Steps granted, by class (for the status).
    granted_count: [u64; 5],
    throttled_count: u64,
}

impl Scheduler {
    /// A scheduler; the bucket starts full.
    pub fn new(config: SchedulerConfig) -> Scheduler {
        let tokens = config.rate_bytes_per_s.map_or(0, |r| i64::try_from(r).unwrap_or(i64::MAX));
        Scheduler {
            config,
            foreground_busy: false,
            tokens,
            refilled_at: Instant::ZERO,
            granted_count: [0; 5],
            throttled_count: 0,
        }
    }

    /// A foreground request arrived: only forced work until the next idle.
    pub fn foreground_arrived(&mut self) {
        self.foreground_busy = true;
    }

    /// The runtime saw nothing outstanding.
    pub fn idle(&mut self) {
        self.foreground_busy = false;
    }

    /// Whether non-forced work may be granted (no foreground since idle).
    pub fn is_idle(&self) -> bool {
        !self.foreground_busy
    }

    fn refill(&mut self, now: Instant) {
        let Some(rate) = self.config.rate_bytes_per_s else { return };
        if now <= self.refilled_at {
            return;
        }
        let elapsed_ns = now.ns_since(self.refilled_at);
        let add = u128::from(rate) * u128::from(elapsed_ns) / 1_000_000_000;
        let cap = i64::try_from(rate).unwrap_or(i64::MAX);
        self.tokens = (i128::from(self.tokens) + add as i128).min(i128::from(cap)) as i64;
        self.refilled_at = now;
    }

    /// Of `offers` (`(layer index, offer)`), the one to grant now, if any,
    /// with its class.
    pub fn pick(
        &mut self,
        now: Instant,
        offers: impl IntoIterator<Item = (usize, Offer)>,
    ) -> Option<(usize, JobClass)> {
        self.refill(now);
        let best = offers.into_iter().max_by_key(|(i, o)| (o.class, std::cmp::Reverse(*i)))?;
        let granted = match best.1.class {
            JobClass::Forced => true,
            _ if self.foreground_busy => false,
            _ if self.config.rate_bytes_per_s.is_some() && self.tokens <= 0 => {
                self.throttled_count += 1;
                false
            }
            _ => true,
        };
        if !granted {
            return None;
        }
        self.granted_count[best.1.class as usize] += 1;
        Some((best.0, best.1.class))
    }

    /// A granted step of `class` issued `bytes` of I/O.
    pub fn charge(&mut self, class: JobClass, bytes: u64) {
        if class != JobClass::Forced && self.config.rate_bytes_per_s.is_some() {
            self.tokens = self.tokens.saturating_sub(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
    }

    /// When throttled work may be granted again (`None`: not throttled).
    pub fn wake_at(&self) -> Option<Instant> {
        let rate = self.config.rate_bytes_per_s?;
        if self.tokens > 0 || self.foreground_busy || rate == 0 {
            return None;
        }
        let deficit = (-self.tokens) as u128 + 1;
        let ns = (deficit * 1_000_000_000).div_ceil(u128::from(rate));
        Some(self.refilled_at.add_ns(u64::try_from(ns).unwrap_or(u64::MAX / 2)))
    }

    /// Counters for the status: steps granted per class, throttled asks.
    pub fn counters(&self) -> Vec<(String, u64)> {
        let names = ["reorganisation", "replication", "cleaning", "destage", "forced"];
        let mut out: Vec<(String, u64)> = names
            .iter()
            .zip(self.granted_count)
            .map(|(n, c)| (format!("background_{n}_steps_count"), c))
            .collect();
        out.push(("background_throttled_count".into(), self.throttled_count));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(class: JobClass) -> Offer {
        Offer { class }
    }

    #[test]
    fn priority_then_upper_layer() {
        let mut s = Scheduler::new(SchedulerConfig::default());
        let t = Instant::ZERO;
        let offers = [
            (0, offer(JobClass::Replication)),
            (1, offer(JobClass::Destage)),
            (2, offer(JobClass::Cleaning)),
        ];
        assert_eq!(s.pick(t, offers).map(|p| p.0), Some(1));
        let offers = [(0, offer(JobClass::Cleaning)), (1, offer(JobClass::Forced))];
        assert_eq!(s.pick(t, offers).map(|p| p.0), Some(1));
        let offers = [(3, offer(JobClass::Cleaning)), (1, offer(JobClass::Cleaning))];
        assert_eq!(s.pick(t, offers).map(|p| p.0), Some(1), "ties: the upper layer");
        assert_eq!(s.pick(t, std::iter::empty()).map(|p| p.0), None);
    }

    #[test]
    fn a_foreground_request_preempts_all_but_forced_work_until_idle() {
        let mut s = Scheduler::new(SchedulerConfig::default());
        let t = Instant::ZERO;
        s.foreground_arrived();
        assert_eq!(s.pick(t, [(0, offer(JobClass::Destage))]).map(|p| p.0), None);
        assert_eq!(
            s.pick(t, [(0, offer(JobClass::Destage)), (1, offer(JobClass::Forced))]).map(|p| p.0),
            Some(1)
        );
        s.idle();
        assert_eq!(s.pick(t, [(0, offer(JobClass::Destage))]).map(|p| p.0), Some(0));
    }

    #[test]
    fn the_rate_limit_spends_and_refills_tokens_and_never_throttles_forced_work() {
        // 1 MB/s: the bucket holds 1 MB.
        let mut s = Scheduler::new(SchedulerConfig { rate_bytes_per_s: Some(1_000_000) });
        let mut t = Instant::ZERO;
        let d = [(0, offer(JobClass::Destage))];
        assert_eq!(s.pick(t, d).map(|p| p.0), Some(0));
        s.charge(JobClass::Destage, 1_500_000); // half a second in debt
        assert_eq!(s.pick(t, d).map(|p| p.0), None, "throttled");
        assert_eq!(s.wake_at(), Some(Instant::ZERO.add_ns(500_001_000)));
        assert_eq!(
            s.pick(t, [(0, offer(JobClass::Forced))]).map(|p| p.0),
            Some(0),
            "forced work is never throttled"
        );
        s.charge(JobClass::Forced, 10_000_000);
        t = t.add_ms(400);
        assert_eq!(s.pick(t, d).map(|p| p.0), None, "still in debt after 0.4 s");
        t = t.add_ms(200);
        assert_eq!(s.pick(t, d).map(|p| p.0), Some(0), "refilled after 0.6 s");
        assert_eq!(s.counters().iter().find(|c| c.0 == "background_throttled_count").map(|c| c.1), Some(2));
    }
}
