//! Config fuzzing: every example stack config (`examples/*.toml`, what a
//! user starts from) with hostile numbers written over its numbers (sizes
//! inside strings included), random bytes and truncation, formatted over a
//! device of a few sizes (a sparse in-memory device), alone or with
//! another example's layer below it (a stack of two). The property, the issues' "a config with impossible
//! constants: one clear line, nothing written": parsing or building either
//! refuses with a message, or the stack comes up and serves correctly (a
//! write, a flush, and the read that follows returns what was written); no
//! panic, no overflow, no hang (bring-up and the workload are bounded).
//!
//! A bounded pass in the default suite; `PROPTEST_CASES=20000 cargo test
//! -p layoutd-runtime --test fuzz_configs` for a long one.

use layoutd_core::config::StackConfig;
use layoutd_core::{OpenMode, Target};
use layoutd_disk::{BlockDevice, MemDevice};
use layoutd_runtime::det::{Harness, ZeroLatency};
use proptest::prelude::*;
use std::sync::Arc;

#[path = "../../core/tests/support/fuzz.rs"]
mod fuzz;
use fuzz::{config, hostile_text_number, mutate_text};

/// The example configs a user copies (multi-device `dcd-physical` is the
/// one left out: it needs two member devices).
const EXAMPLES: [(&str, &str); 8] = [
    ("dcd.toml", include_str!("../../../examples/dcd.toml")),
    ("linear.toml", include_str!("../../../examples/linear.toml")),
    ("log.toml", include_str!("../../../examples/log.toml")),
    ("opt.toml", include_str!("../../../examples/opt.toml")),
    ("pool.toml", include_str!("../../../examples/pool.toml")),
    ("replica.toml", include_str!("../../../examples/replica.toml")),
    ("replica-all-goals.toml", include_str!("../../../examples/replica-all-goals.toml")),
    ("trace.toml", include_str!("../../../examples/trace.toml")),
];

/// Device sizes: below most layouts' minimum, small, and the examples' scale
/// (terabyte devices: `format_memory`).
const DEVICE_BYTES: [u64; 3] = [64 << 10, 8 << 20, 2 << 30];

/// What happened to one config.
#[derive(Debug, PartialEq)]
enum Outcome {
    Refused,
    Served,
}

/// Parses, builds and (if both accept) brings the stack up over a device
/// of `device_bytes` and checks a write-flush-read round trip.
fn try_config(text: &str, device_bytes: u64) -> Result<Outcome, String> {
    let Ok(cfg) = StackConfig::parse(text, "fuzz.toml") else { return Ok(Outcome::Refused) };
    let stack = match layoutd_targets::build_stack(&cfg, device_bytes, OpenMode::format(1)) {
        Ok(stack) => stack,
        Err(e) => {
            return if e.to_string().trim().is_empty() {
                Err("a refusal without a message".into())
            } else {
                Ok(Outcome::Refused)
            };
        }
    };
    let size = stack.size_bytes();
    let dev = Arc::new(MemDevice::new(device_bytes));
    let mut h = Harness::new(Box::new(stack), dev as Arc<dyn BlockDevice>, ZeroLatency::default(), 5);
    if h.bring_up().is_err() {
        // A layout that does not fit the device is refused at bring-up.
        return Ok(Outcome::Refused);
    }
    if size < 4096 {
        return Ok(Outcome::Served);
    }
    // A block at the start, one in the middle and the last one.
    let blocks = size / 4096;
    for (i, block) in [0, blocks / 2, blocks - 1].into_iter().enumerate() {
        let data: Vec<u8> = (0..4096u32).map(|b| (b as u8) ^ (i as u8 + 1)).collect();
        if h.write(block * 4096, data.clone()).result.is_err() {
            continue; // a full pool or log may refuse a write (ENOSPC), not lose one
        }
        if h.flush().result.is_err() {
            continue;
        }
        let read = h.read(block * 4096, 4096);
        match (read.result, read.data) {
            (Ok(()), Some(got)) if got[..] == data[..] => {}
            (Ok(()), got) => {
                return Err(format!(
                    "block {block}: a flushed write read back wrong ({:?})",
                    got.map(|g| g[..8].to_vec())
                ))
            }
            (Err(_), _) => {}
        }
    }
    h.drive_bounded(100_000);
    Ok(Outcome::Served)
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn a_mutated_example_config_is_refused_or_serves_correctly(
        which in 0..EXAMPLES.len(),
        below in prop::option::weighted(0.3, 0..EXAMPLES.len()),
        device in 0..DEVICE_BYTES.len(),
        numbers in prop::collection::vec((any::<usize>(), hostile_text_number()), 1..4),
        raw in prop::collection::vec((any::<usize>(), any::<u8>()), 0..2),
        cut in prop::option::weighted(0.05, any::<usize>()),
    ) {
        let mut text = EXAMPLES[which].1.to_string();
        if let Some(below) = below {
            // A stack of two: the other example's layer under this one.
            text.extend(EXAMPLES[below].1.lines().filter(|l| !l.starts_with("version")).map(|l| format!("{l}\n")));
        }
        let mut bytes = text.into_bytes();
        mutate_text(&mut bytes, &numbers, &raw, cut);
        let text = String::from_utf8_lossy(&bytes);
        if let Err(defect) = try_config(&text, DEVICE_BYTES[device]) {
            prop_assert!(false, "{} on {} bytes: {defect}\n{text}", EXAMPLES[which].0, DEVICE_BYTES[device]);
        }
    }
}

/// Every example, unmutated, serves on the examples' scale of device (so
/// the fuzz starts from configs that work).
#[test]
fn every_example_serves_unmutated() {
    for (name, text) in EXAMPLES {
        assert_eq!(try_config(text, 2 << 30), Ok(Outcome::Served), "{name}");
    }
}

/// Found by the fuzz above: opt's `plan_interval_ms` (and every other
/// `_ms` key) took any u64, and the first plan check multiplied it into
/// nanoseconds and overflowed. Every millisecond key is now at most ten
/// years, refused with the key named.
#[test]
fn a_millisecond_key_past_ten_years_is_refused() {
    for (example, key) in [
        ("opt.toml", "plan_interval_ms"),
        ("opt.toml", "weight_half_life_ms"),
        ("dcd.toml", "idle_ms_max"),
        ("log.toml", "resequence_idle_ms"),
        ("replica.toml", "replication_wait_max_ms"),
    ] {
        let base = EXAMPLES.iter().find(|(name, _)| *name == example).expect("example").1;
        let line = format!("{key} = 9223372036854775807");
        let mut lines: Vec<String> = base.lines().map(String::from).collect();
        match lines.iter().position(|l| l.starts_with(&format!("{key} "))) {
            Some(at) => lines[at] = line,
            None => lines.push(line),
        }
        let text = lines.join("\n") + "\n";
        let cfg = StackConfig::parse(&text, "fuzz.toml");
        let message = match cfg {
            Err(e) => e.to_string(),
            Ok(cfg) => match layoutd_targets::build_stack(&cfg, 2 << 30, OpenMode::format(1)) {
                Err(e) => e.to_string(),
                Ok(_) => panic!("{example}: {key} = 2^63-1 accepted"),
            },
        };
        assert!(message.contains(key) && message.contains("ten years"), "{example}: {message}");
    }
}

/// Every stack of two examples, unmutated: refused with a message at build
/// (a layer above a pool), or formatted and serving correctly. Found by the
/// fuzz above: a replica over `opt` or `pool` panicked at format (its
/// region record write failed in the lower layer's bring-up, and the
/// second copy's completion reached a failed format), and a replica whose
/// format failed reported itself ready.
#[test]
fn every_stack_of_two_examples_is_refused_at_build_or_serves() {
    for (top, top_text) in EXAMPLES {
        for (below, below_text) in EXAMPLES {
            let text: String = top_text.to_string()
                + &below_text
                    .lines()
                    .filter(|l| !l.starts_with("version"))
                    .map(|l| format!("{l}\n"))
                    .collect::<String>();
            let cfg = StackConfig::parse(&text, "pair.toml").expect("two examples parse");
            match layoutd_targets::build_stack(&cfg, 2 << 30, OpenMode::format(1)) {
                Err(e) => {
                    let message = e.to_string();
                    assert!(
                        below == "pool.toml" && message.contains("above"),
                        "{top} over {below}: {message}"
                    );
                }
                Ok(_) => assert_eq!(try_config(&text, 2 << 30), Ok(Outcome::Served), "{top} over {below}"),
            }
        }
    }
}
