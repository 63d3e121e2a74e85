//! Every open brings its stack up once, over a recording overlay, and
//! commits it by replaying the bring-up's writes with their flushes
//! (`volume::bring_up_staged`). For stacks of two layers opened after an
//! unclean shutdown: nothing reaches the device before the commit, the
//! commit makes exactly the requests a direct bring-up makes, in the
//! same order, and a crash at any point of it (the last write torn or
//! not) leaves a volume that reopens and reads what it held
//! (`testkit::crash_check_open_reads`).

use layoutd_core::OpenMode;
use layoutd_disk::{BlockDevice, MemDevice};
use layoutd_runtime::det::{Harness, ZeroLatency};
use layoutd_runtime::testkit::{bring_up, crash_check_open_reads, open_image, stack_from_toml};
use layoutd_runtime::testkit_volumes::list_volumes;
use std::sync::Arc;

const DEVICE_BYTES: u64 = 64 << 20;

fn stacks() -> [(&'static str, &'static str); 2] {
    [
        ("pool over log", "version = 1\n[[layer]]\ntarget = \"pool\"\n[[layer]]\ntarget = \"log\"\n"),
        (
            "opt over dcd",
            "version = 1\n[[layer]]\ntarget = \"opt\"\nopt_length = \"8MiB\"\n[[layer]]\ntarget = \"dcd\"\n\
             log_length = \"8MiB\"\n",
        ),
    ]
}

/// A volume of `toml` written at many places, partly flushed, left
/// without a clean shutdown.
fn unclean_image(toml: &str) -> MemDevice {
    let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
    let stack = stack_from_toml(toml, DEVICE_BYTES, OpenMode::format(7));
    let mut h = Harness::new(stack, dev.clone() as Arc<dyn BlockDevice>, ZeroLatency::default(), 0);
    bring_up(&mut h);
    let size = h.stack.size_bytes();
    for i in 0..64u64 {
        let at = (i * 7919 * 4096) % (size.min(8 << 20) - 65536);
        assert_eq!(h.write(at, vec![i as u8 + 1; 4096 * (1 + i as usize % 4)]).result, Ok(()));
        if i % 16 == 15 {
            assert_eq!(h.flush().result, Ok(()));
        }
    }
    drop(h);
    copy(&dev)
}

fn copy(dev: &MemDevice) -> MemDevice {
    let image = MemDevice::new(DEVICE_BYTES);
    dev.copy_to(&image).expect("copy");
    image
}

#[test]
fn a_crash_during_the_commit_of_a_two_layer_open_loses_nothing() {
    for (name, toml) in stacks() {
        let image = unclean_image(toml);
        let make = |mode| stack_from_toml(toml, DEVICE_BYTES, mode);
        // A pool's first volume (the rest of its address space is
        // unallocated and refuses reads).
        let mut h = open_image(&make, Arc::new(copy(&image)), 0).expect("the image opens");
        let now = h.now;
        let read_bytes = match name {
            "pool over log" => list_volumes(&mut *h.stack, now).1,
            _ => h.stack.size_bytes(),
        };
        let (checked, volume) = crash_check_open_reads(&make, &image, 0..3, read_bytes);
        eprintln!("{name}: {checked} crash images");
        assert!(checked > 3 * 4, "{name}: the open writes ({checked} crash images)");
        assert!(volume.iter().any(|&b| b != 0), "{name}: the volume holds data");
    }
}
