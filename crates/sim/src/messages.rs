//! `--message WHEN:TEXT`: runtime commands ([`layoutd_core::Target::message`],
//! device-mapper's `message`) delivered to the stack at a point of the
//! trace, so a replay can take a snapshot, force a plan or start a destage
//! exactly where the captured run did.
//!
//! `WHEN` is a point of the replay's issue sequence, never a simulated
//! instant (which depends on the stack under test):
//! - `@N`: just before the request issued `N`th (0-based). In open loop
//!   that is the trace's own order (after `--device`/`--from-s`
//!   selection); in closed loop, requests issue as their stream's previous
//!   one completes, so the order can differ between stacks;
//! - a duration with its unit (`90s`, `1500ms`, `250us`, `10ns`): just
//!   before the first issued request whose trace time is at least that
//!   long after the first kept request's. In closed loop, other streams'
//!   earlier requests may still be issued after it.
//!
//! A message still due when the trace ends is delivered after the last
//! request is issued. A message the stack refuses stops the replay with
//! its error: the rest of the run would not be the experiment asked for.

use serde::Serialize;

/// Where in the trace a message is delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// Before the request issued with this index.
    Request(u64),
    /// Before the first request issued with a trace time this many ns
    /// after the first request's.
    TraceNs(u64),
}

/// One `--message`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduledMessage {
    /// The spec as given (echoed in the JSON).
    pub spec: String,
    /// Where.
    pub when: When,
    /// The message text.
    pub text: String,
}

impl ScheduledMessage {
    /// Parses `WHEN:TEXT`; the error says what a good one looks like.
    pub fn parse(spec: &str) -> Result<ScheduledMessage, String> {
        let bad = |why: &str| {
            format!("--message {spec:?}: {why} (expected WHEN:TEXT, WHEN being @N or a duration like 90s, 1500ms, 250us, 10ns)")
        };
        let (when, text) = spec.split_once(':').ok_or_else(|| bad("no `:`"))?;
        let text = text.trim();
        if text.is_empty() {
            return Err(bad("the message text is empty"));
        }
        let when = when.trim();
        let when = if let Some(n) = when.strip_prefix('@') {
            When::Request(n.parse().map_err(|_| bad("after @ comes a request index"))?)
        } else {
            let split =
                when.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(|| bad("no unit"))?;
            let (number, unit) = when.split_at(split);
            let scale = match unit {
                "ns" => 1.0,
                "us" => 1e3,
                "ms" => 1e6,
                "s" => 1e9,
                _ => return Err(bad(&format!("unknown unit {unit:?}"))),
            };
            let v: f64 = number.parse().map_err(|_| bad("not a number before the unit"))?;
            let ns = v * scale;
            if !ns.is_finite() || ns >= u64::MAX as f64 {
                return Err(bad("the time is too large"));
            }
            When::TraceNs(ns.round() as u64)
        };
        Ok(ScheduledMessage { spec: spec.to_string(), when, text: text.to_string() })
    }

    /// Whether it is due before issuing request `index` at trace time `trace_ns`.
    pub fn due(&self, index: u64, trace_ns: u64) -> bool {
        match self.when {
            When::Request(n) => index >= n,
            When::TraceNs(t) => trace_ns >= t,
        }
    }
}

/// A delivered message, in the JSON summary.
#[derive(Clone, Debug, Serialize)]
pub struct MessageInfo {
    /// The `--message` spec.
    pub spec: String,
    /// Requests issued before it.
    pub before_request: u64,
    /// Simulated time of delivery, ns after the first request was issued.
    pub sim_ns: u64,
    /// The stack's reply.
    pub reply: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_indices_and_durations_and_names_what_is_wrong() {
        let m = ScheduledMessage::parse("@120:snapshot create s1").unwrap();
        assert_eq!(m.when, When::Request(120));
        assert_eq!(m.text, "snapshot create s1");
        assert_eq!(ScheduledMessage::parse("1.5s:plan").unwrap().when, When::TraceNs(1_500_000_000));
        assert_eq!(ScheduledMessage::parse("250us: destage ").unwrap().text, "destage");
        assert_eq!(ScheduledMessage::parse("7ns:x").unwrap().when, When::TraceNs(7));
        for bad in ["plan", "@x:plan", "10:plan", "10h:plan", "@3:", "1e400s:plan"] {
            let e = ScheduledMessage::parse(bad).unwrap_err();
            assert!(e.contains("expected WHEN:TEXT"), "{bad}: {e}");
        }
        let m = ScheduledMessage::parse("2ms:plan").unwrap();
        assert!(!m.due(0, 1_999_999) && m.due(0, 2_000_000));
        let m = ScheduledMessage::parse("@3:plan").unwrap();
        assert!(!m.due(2, u64::MAX) && m.due(3, 0));
    }
}
