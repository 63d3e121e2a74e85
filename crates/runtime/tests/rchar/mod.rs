//! Bytes the process has read (`rchar` in /proc/self/io): what an open
//! costs, counted by the tests that check a stack is brought up once
//! (each such file holds one test, so no other thread reads meanwhile).

/// The process's read bytes so far.
pub fn bytes_read() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").expect("/proc/self/io");
    let line = io.lines().find(|l| l.starts_with("rchar:")).expect("rchar");
    line["rchar:".len()..].trim().parse().expect("a number")
}

/// `f`'s result and the bytes the process read while it ran.
pub fn read_by<R>(f: impl FnOnce() -> R) -> (R, u64) {
    let before = bytes_read();
    let r = f();
    (r, bytes_read() - before)
}
