//! A chain of targets, top first, that is itself a [`Target`].
//!
//! The stack validates every request that enters at the top (alignment,
//! size, range: a bad request completes with `IoError::Invalid`, never a
//! panic) and moves requests down and completions up between its layers
//! after every input, so a runtime sees only the top's upper side and the
//! bottom's lower side. A request for a layer that is not ready yet (its
//! own format or recovery still running) waits in the stack, in order,
//! until that layer is ready: an upper layer's bring-up I/O never reaches
//! a lower one mid-bring-up (opt and pool failed it; a replica over them
//! could not format).

use crate::background::{Scheduler, SchedulerConfig};
use crate::{Completion, Instant, Request, Status, Target, TraceRecord};
use std::collections::VecDeque;

/// Targets chained top to bottom.
pub struct Stack {
    layers: Vec<Box<dyn Target>>,
    rejected: VecDeque<Completion>,
    requests_rejected_count: u64,
    scheduler: Scheduler,
    /// Per boundary (`held[i]`: from layer `i` to layer `i + 1`), requests
    /// waiting for the lower layer to be ready, oldest first.
    held: Vec<VecDeque<Request>>,
}

/// Most background steps granted after one input (each is small: a segment).
const BACKGROUND_STEPS_PER_INPUT_MAX: usize = 64;

impl Stack {
    /// Chains `layers`, top first. Each layer's lower address space is the
    /// next layer's upper one.
    pub fn new(layers: Vec<Box<dyn Target>>) -> Stack {
        Stack::with_scheduler(layers, SchedulerConfig::default())
    }

    /// [`Stack::new`] with a background scheduler configuration.
    pub fn with_scheduler(layers: Vec<Box<dyn Target>>, config: SchedulerConfig) -> Stack {
        assert!(!layers.is_empty(), "a stack has at least one target");
        assert!(
            layers.len() <= 64,
            "a stack has at most 64 layers (the background scheduler marks them in a u64)"
        );
        let boundaries = layers.len() - 1;
        Stack {
            layers,
            held: (0..boundaries).map(|_| VecDeque::new()).collect(),
            rejected: VecDeque::new(),
            requests_rejected_count: 0,
            scheduler: Scheduler::new(config),
        }
    }

    /// Grants background steps, one offer at a time, while the scheduler
    /// allows (see [`crate::background`]).
    /// Runs after every input, so it allocates nothing.
    fn run_background(&mut self, now: Instant) {
        // Layers whose step found nothing to do this time, one bit each.
        let mut declined = 0u64;
        for _ in 0..BACKGROUND_STEPS_PER_INPUT_MAX {
            let offers = self
                .layers
                .iter()
                .enumerate()
                .filter(|(i, _)| declined & (1 << i) == 0)
                .filter_map(|(i, l)| l.background_offer(now).map(|o| (i, o)));
            let Some((i, class)) = self.scheduler.pick(now, offers) else { return };
            match self.layers[i].background_step(now) {
                Some(bytes) => self.scheduler.charge(class, bytes),
                None => declined |= 1 << i,
            }
            self.pump(now);
        }
    }

    /// The layers, top first.
    pub fn layers(&self) -> &[Box<dyn Target>] {
        &self.layers
    }

    /// How many requests were refused at the top as invalid.
    pub fn requests_rejected_count(&self) -> u64 {
        self.requests_rejected_count
    }

    /// Moves requests down and completions up until nothing moves.
    fn pump(&mut self, now: Instant) {
        let n = self.layers.len();
        loop {
            let mut moved = false;
            for i in 0..n - 1 {
                let (upper, lower) = self.layers.split_at_mut(i + 1);
                let (up, down) = (&mut upper[i], &mut lower[0]);
                let held = &mut self.held[i];
                while !held.is_empty() && down.is_ready() {
                    let r = held.pop_front().expect("not empty");
                    down.handle_request(now, r);
                    moved = true;
                }
                while let Some(r) = up.poll_lower() {
                    assert!(
                        r.validate(down.size_bytes()).is_ok(),
                        "{} sent an invalid request below: {r:?}",
                        up.name()
                    );
                    if held.is_empty() && down.is_ready() {
                        down.handle_request(now, r);
                        moved = true;
                    } else {
                        held.push_back(r);
                    }
                }
                while let Some(c) = down.poll_upper() {
                    up.handle_completion(now, c);
                    moved = true;
                }
            }
            if !moved {
                return;
            }
        }
    }
}

impl Target for Stack {
    fn name(&self) -> &'static str {
        "stack"
    }

    fn size_bytes(&self) -> u64 {
        self.layers[0].size_bytes()
    }

    fn handle_request(&mut self, now: Instant, req: Request) {
        self.scheduler.foreground_arrived();
        match req.validate(self.size_bytes()) {
            Ok(()) => self.layers[0].handle_request(now, req),
            Err(e) => {
                self.requests_rejected_count += 1;
                self.rejected.push_back(Completion::err(req.id, e));
            }
        }
        self.pump(now);
        self.run_background(now);
    }

    fn handle_completion(&mut self, now: Instant, completion: Completion) {
        self.layers.last_mut().expect("non-empty").handle_completion(now, completion);
        self.pump(now);
        self.run_background(now);
    }

    fn handle_timeout(&mut self, now: Instant) {
        for layer in &mut self.layers {
            if layer.poll_timeout().is_some_and(|t| t <= now) {
                layer.handle_timeout(now);
            }
        }
        self.pump(now);
        self.run_background(now);
    }

    fn handle_idle(&mut self, now: Instant) {
        self.scheduler.idle();
        for layer in self.layers.iter_mut().rev() {
            layer.handle_idle(now);
        }
        self.pump(now);
        self.run_background(now);
    }

    fn poll_lower(&mut self) -> Option<Request> {
        self.layers.last_mut().expect("non-empty").poll_lower()
    }

    fn poll_upper(&mut self) -> Option<Completion> {
        if let Some(c) = self.rejected.pop_front() {
            return Some(c);
        }
        self.layers[0].poll_upper()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.layers.iter().filter_map(|t| t.poll_timeout()).chain(self.scheduler.wake_at()).min()
    }

    fn poll_record(&mut self) -> Option<TraceRecord> {
        self.layers.iter_mut().find_map(|t| t.poll_record())
    }

    fn is_ready(&self) -> bool {
        self.layers.iter().all(|t| t.is_ready())
    }

    /// Every layer's status, top first; a layer that is itself a stack (a
    /// recording's trace layer put on top of one) gives its own layers'.
    fn layer_statuses(&self) -> Vec<Status> {
        self.layers.iter().flat_map(|t| t.layer_statuses()).collect()
    }

    /// Offered to each layer, top first; the first that takes it answers.
    /// `N:MSG` sends `MSG` to layer `N` (1 = top) only. `status`, when no
    /// layer takes it, answers every layer's status and counters.
    fn message(&mut self, now: Instant, msg: &str) -> Result<String, String> {
        if let Some((n, rest)) = msg.split_once(':').filter(|(n, _)| n.parse::<usize>().is_ok()) {
            let i: usize = n.parse().expect("checked");
            let count = self.layers.len();
            let layer = i
                .checked_sub(1)
                .and_then(|i| self.layers.get_mut(i))
                .ok_or_else(|| format!("no layer {i}: the stack has {count}"))?;
            let r = layer.message(now, rest.trim());
            self.pump(now);
            self.run_background(now);
            return r;
        }
        let mut errors = Vec::new();
        for i in 0..self.layers.len() {
            match self.layers[i].message(now, msg) {
                Ok(reply) => {
                    self.pump(now);
                    self.run_background(now);
                    return Ok(reply);
                }
                Err(e) => errors.push(e),
            }
        }
        if msg.trim() == "status" {
            // No layer has its own `status`: every layer's status and
            // counters, one line each, top first (`layoutd message --socket
            // S status` on a running volume).
            let lines: Vec<String> =
                self.layer_statuses().iter().enumerate().map(|(i, st)| format!("{}: {st}", i + 1)).collect();
            return Ok(lines.join("\n"));
        }
        Err(errors.join("; "))
    }

    fn is_drained(&self) -> bool {
        self.layers.iter().all(|t| t.is_drained())
    }

    /// Each layer maps the known pieces the layer above produced; an
    /// unknown piece stays unknown all the way down.
    fn map_extent(&self, offset_bytes: u64, length_bytes: u64) -> Vec<(Option<u64>, u64)> {
        let mut pieces = vec![(Some(offset_bytes), length_bytes)];
        for layer in &self.layers {
            let mut below = Vec::with_capacity(pieces.len());
            for (o, n) in pieces {
                match o {
                    Some(o) => {
                        let mapped = layer.map_extent(o, n);
                        debug_assert_eq!(
                            mapped.iter().map(|p| p.1).sum::<u64>(),
                            n,
                            "{} covers the range",
                            layer.name()
                        );
                        below.extend(mapped);
                    }
                    None => below.push((None, n)),
                }
            }
            pieces = below;
        }
        pieces
    }

    fn status(&self) -> Status {
        let mut s = self.layers[0].status();
        s.counters.push(("requests_rejected_count".into(), self.requests_rejected_count));
        s.counters.extend(self.scheduler.counters());
        s
    }
}
