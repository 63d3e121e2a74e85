//! Physical DCD: the log on one member device, the data on another. The
//! same oracle and crash checks as the logical DCD, over a two-member volume.

use layoutd_core::config::StackConfig;
use layoutd_core::{OpenMode, Target};
use layoutd_runtime::testkit::{crash_check_with, oracle_check_with, random_ops};
use rand::SeedableRng;

const LOG_MEMBER_BYTES: u64 = 64 << 10;
const DATA_MEMBER_BYTES: u64 = 960 << 10;
const DEVICE_BYTES: u64 = LOG_MEMBER_BYTES + DATA_MEMBER_BYTES;

fn config(extra: &str) -> StackConfig {
    let text = format!(
        "version = 1\n[[layer]]\ntarget = \"dcd\"\nlog_device = 0\ndata_device = 1\nsegment_bytes = 4096\nslot_bytes = 512\n\
         buffer_count = 2\nbuffer_delay_ms = 5\nbypass_bytes = 4096\nidle_ms_max = 20\nidle_ms_min = 1\n{extra}"
    );
    StackConfig::parse(&text, "physical dcd").unwrap()
}

fn make(cfg: &StackConfig) -> impl Fn(OpenMode) -> Box<dyn Target> + '_ {
    move |mode| {
        Box::new(
            layoutd_targets::build_stack_members(cfg, &[LOG_MEMBER_BYTES, DATA_MEMBER_BYTES], mode)
                .expect("physical dcd builds"),
        )
    }
}

#[test]
fn the_log_takes_member_0_and_the_volume_is_member_1() {
    let cfg = config("");
    let stack = make(&cfg)(OpenMode::format(1));
    assert_eq!(stack.size_bytes(), DATA_MEMBER_BYTES);
    let echo = stack.status().config;
    let get = |k: &str| echo.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone()).unwrap();
    assert_eq!(get("log_offset"), "0");
    assert_eq!(get("log_length"), LOG_MEMBER_BYTES.to_string());
    assert_eq!(get("data_offset"), LOG_MEMBER_BYTES.to_string());
}

#[test]
fn physical_dcd_reads_back_what_a_byte_array_would() {
    let cfg = config("");
    for seed in 0..12u64 {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let ops = random_ops(&mut rng, 400, DATA_MEMBER_BYTES / 512, 16);
        let h = oracle_check_with(&make(&cfg), DEVICE_BYTES, seed, &ops, 1 + (seed as usize % 5));
        assert_eq!(h.upper_outstanding_count(), 0);
    }
}

#[test]
fn physical_dcd_crash_at_every_flush_and_random_points_keeps_flushed_data() {
    let cfg = config("");
    for seed in 0..3u64 {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let ops = random_ops(&mut rng, 250, DATA_MEMBER_BYTES / 512, 16);
        let cuts = crash_check_with(&make(&cfg), DEVICE_BYTES, seed, &ops, 3, 40);
        assert!(cuts > 20, "too few cut points: {cuts}");
    }
}

#[test]
fn member_keys_are_checked_against_the_volume() {
    let build = |extra: &str, members: &[u64]| {
        let text = format!("version = 1\n[[layer]]\ntarget = \"dcd\"\n{extra}");
        let cfg = StackConfig::parse(&text, "t").unwrap();
        layoutd_targets::build_stack_members(&cfg, members, OpenMode::format(1)).err().map(|e| e.0)
    };
    let e = build("log_device = 2\ndata_device = 1\n", &[1 << 20, 1 << 20]).unwrap();
    assert!(e.contains("device 2 does not exist") && e.contains("2 device(s)"), "{e}");
    let e = build("log_device = 0\ndata_device = 1\nlog_length = \"2MiB\"\n", &[1 << 20, 1 << 20]).unwrap();
    assert!(e.contains("log region") && e.contains("runs past the end of its device"), "{e}");
    let e = build("log_device = 1\n", &[1 << 20]).unwrap();
    assert!(e.contains("device 1 does not exist"), "{e}");
    assert!(build("log_device = 0\ndata_device = 1\n", &[1 << 20, 4 << 20]).is_none());
}
