//! The live runtime under `--emulate`: the threads that sleep out an
//! emulated service time ask the kernel for the smallest timer slack (a
//! sleep may otherwise overrun by 50 µs, added to every lower request),
//! and `serve --record-disk` records what the emulated disk served in the
//! simulator's `--record-disk` format, one line per request.

use layoutd_core::{Op, ReqId, Request};
use layoutd_disk::MemDevice;
use layoutd_hdd::DiskParams;
use layoutd_runtime::emulate::{DiskRecord, MemberEmulators};
use layoutd_runtime::live::{Delay, LiveVolume, EMULATION_TIMER_SLACK_NS};
use layoutd_targets::linear::{Linear, Segment};
use std::io::Write;
use std::sync::{Arc, Mutex};

const MIB: u64 = 1 << 20;

/// A `Write` into a buffer the test keeps.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn volume(delay: Arc<dyn Delay>) -> Arc<LiveVolume> {
    let stack =
        Linear::new(vec![Segment { upper_start_bytes: 0, lower_start_bytes: 0, length_bytes: 64 * MIB }]);
    LiveVolume::start(Box::new(stack), Arc::new(MemDevice::new(64 * MIB)), None, Some(delay))
}

#[cfg(target_os = "linux")]
fn timer_slack_ns() -> u64 {
    // SAFETY: PR_GET_TIMERSLACK reads the calling thread's slack.
    (unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) }) as u64
}

#[cfg(target_os = "linux")]
#[test]
fn a_client_thread_that_sleeps_out_an_emulated_read_has_the_smallest_timer_slack() {
    let params = DiskParams::preset("wd800").unwrap();
    let vol = volume(Arc::new(MemberEmulators::new(&params, &[(0, 64 * MIB)], MIB)));
    let before = std::thread::spawn(timer_slack_ns).join().unwrap();
    assert_ne!(before, EMULATION_TIMER_SLACK_NS, "a new thread starts with the default slack");
    // Caller runs: this thread performs the lower read and sleeps until the
    // model's completion (a read of a cold disk takes milliseconds).
    let c = vol.submit(Request::new(ReqId(0), Op::Read, 32 * MIB, 4096));
    assert_eq!(c.result, Ok(()));
    assert_eq!(timer_slack_ns(), EMULATION_TIMER_SLACK_NS);
    vol.stop();
}

#[test]
fn the_emulated_disk_records_each_request_it_served_in_the_simulators_format() {
    let params = DiskParams::preset("wd800").unwrap();
    let out = Shared::default();
    let record = Arc::new(Mutex::new(DiskRecord::new(Box::new(out.clone()))));
    // Two members: the second's requests are recorded at their offset on
    // the volume's bottom device, with tags of their own.
    let extents = [(0, 32 * MIB), (32 * MIB, 32 * MIB)];
    let vol = volume(Arc::new(MemberEmulators::recording(&params, &extents, MIB, Some(record))));
    let mut w = Request::new(ReqId(0), Op::Write, 40 * MIB, 8192);
    w.data = Some(vec![7u8; 8192].into());
    let reqs = [
        Request::new(ReqId(0), Op::Read, 4 * MIB, 4096),
        w,
        Request::new(ReqId(0), Op::Trim, 0, 4096), // no arm work: not recorded
        Request::new(ReqId(0), Op::Read, 4 * MIB + 4096, 4096),
    ];
    for r in reqs {
        assert_eq!(vol.submit(r).result, Ok(()));
    }
    vol.stop();
    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(DiskRecord::HEADER));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(' ').collect()).collect();
    let got: Vec<(&str, &str, &str)> = rows.iter().map(|f| (f[3], f[4], f[5])).collect();
    let (four, forty, next) = ((4 * MIB).to_string(), (40 * MIB).to_string(), (4 * MIB + 4096).to_string());
    assert_eq!(
        got,
        vec![("R", four.as_str(), "4096"), ("W", forty.as_str(), "8192"), ("R", next.as_str(), "4096")]
    );
    for f in &rows {
        assert_eq!(f.len(), 10, "{f:?}");
        let n: Vec<u64> =
            f.iter().enumerate().filter(|(i, _)| *i != 3).map(|(_, x)| x.parse().unwrap()).collect();
        let (arrival, start, complete) = (n[0], n[1], n[2]);
        assert!(arrival <= start && start <= complete, "{f:?}");
    }
    // The read of the block after the first one's is in the drive's buffer.
    assert_eq!(rows[2][6], "1");
    assert_eq!(rows[0][6], "0");
}
