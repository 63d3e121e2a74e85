//! dcd configs the lookup table cannot address are refused with the key
//! named, before anything is allocated or written.

use layoutd_core::config::StackConfig;
use layoutd_core::OpenMode;

#[test]
fn a_log_whose_locations_do_not_fit_32_bits_is_refused_naming_log_length() {
    let cfg = |log: &str| {
        StackConfig::parse(
            &format!("version = 1\n[[layer]]\ntarget = \"dcd\"\nlog_length = \"{log}\"\nslot_bytes = 512\n"),
            "test",
        )
        .unwrap()
    };
    let device_bytes = 8u64 << 40;
    let e =
        layoutd_targets::build_stack(&cfg("2TiB"), device_bytes, OpenMode::format(1)).err().expect("refused");
    assert!(e.0.contains("log_length") && e.0.contains("31 bits"), "{}", e.0);
    // A log of a few GiB packs.
    assert!(layoutd_targets::build_stack(&cfg("4GiB"), device_bytes, OpenMode::format(1)).is_ok());
}
