//! What every fuzz test of the workspace shares (byte-mutation fuzzing of
//! on-disk decoders, trace readers and parsers of client input). Included
//! by path (`#[path = ".../core/tests/support/fuzz.rs"] mod fuzz;`) from
//! the fuzz tests of each crate, so there is one copy.
//!
//! The case count: each test names a default small enough for the default
//! suite (a few seconds); the standard `PROPTEST_CASES` environment
//! variable overrides it for a long campaign, e.g.
//! `PROPTEST_CASES=1000000 cargo test -p layoutd-targets --test fuzz_decoders`
//! (a debug build: overflow checks on).
#![allow(dead_code)]

use proptest::prelude::*;

/// proptest's config with `default_cases` cases, unless `PROPTEST_CASES`
/// is set (then that many: proptest's own reading of the variable, which
/// an explicit `cases:` in the test would otherwise override).
pub fn config(default_cases: u32) -> ProptestConfig {
    let mut c = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = default_cases;
    }
    c
}

/// Writes `value`'s low `width` bytes at `at`, little endian (clipped to
/// the buffer).
pub fn put(b: &mut [u8], at: usize, value: u64, width: usize) {
    for i in 0..width {
        if at + i < b.len() {
            b[at + i] = (value >> (8 * i)) as u8;
        }
    }
}

/// Recomputes a metadata block's crc32c (`layoutd_core::metablock`: at
/// byte 28, over the first `len` bytes with the field taken as zero), so a
/// crafted field reaches the decoder's own range checks.
pub fn fix_crc(b: &mut [u8], at: usize, len: usize) {
    put(b, at, 0, 4);
    let crc = crc32c::crc32c(&b[..len]);
    put(b, at, u64::from(crc), 4);
}

/// Values that break naive arithmetic.
pub fn nasty() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        Just(1 << 62),
        Just((1 << 62) + 1),
        Just(1 << 50),
        Just(u64::from(u32::MAX)),
        Just(u64::from(u32::MAX) + 1),
        Just(u64::from(u16::MAX)),
        any::<u64>(),
    ]
}

/// `(offset, value, width in bytes)` field writes over `len` bytes.
pub fn crafted_writes(len: usize) -> impl Strategy<Value = Vec<(usize, u64, usize)>> {
    prop::collection::vec((0..len, nasty(), prop_oneof![Just(1usize), Just(2), Just(4), Just(8)]), 1..6)
}

/// `(offset, byte)` raw writes over `len` bytes.
pub fn raw_writes(len: usize) -> impl Strategy<Value = Vec<(usize, u8)>> {
    prop::collection::vec((0..len, any::<u8>()), 1..16)
}

/// Applies raw then crafted writes (offsets taken modulo the length).
pub fn mutate(b: &mut [u8], raw: &[(usize, u8)], crafted: &[(usize, u64, usize)]) {
    let n = b.len();
    if n == 0 {
        return;
    }
    for &(at, v) in raw {
        b[at % n] = v;
    }
    for &(at, v, w) in crafted {
        put(b, at % n, v, w);
    }
}

/// Byte ranges of the decimal numbers in `b` (with `dots`, a `.` inside a
/// number is part of it).
pub fn number_spans(b: &[u8], dots: bool) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let a = i;
            while i < b.len() && (b[i].is_ascii_digit() || (dots && b[i] == b'.')) {
                i += 1;
            }
            out.push((a, i));
        } else {
            i += 1;
        }
    }
    out
}

/// The test binary's allocator: the system's, noting per thread the
/// largest single allocation (or reallocation) asked for, so a test can
/// check that a crafted length field is refused before it is allocated.
pub struct NotingAllocator;

thread_local! {
    static LARGEST_BYTES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn note(bytes: usize) {
    let _ = LARGEST_BYTES.try_with(|c| c.set(c.get().max(bytes)));
}

// SAFETY: every call is passed on to the system allocator unchanged; the
// noting touches only a const-initialised thread-local `Cell` (no
// allocation, no destructor).
unsafe impl std::alloc::GlobalAlloc for NotingAllocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        note(layout.size());
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        note(layout.size());
        unsafe { std::alloc::System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, p: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        unsafe { std::alloc::System.realloc(p, layout, new_size) }
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: std::alloc::Layout) {
        unsafe { std::alloc::System.dealloc(p, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: NotingAllocator = NotingAllocator;

/// Runs `f` and returns its result with the largest single allocation it
/// asked for on this thread, in bytes.
pub fn largest_allocation<R>(f: impl FnOnce() -> R) -> (R, usize) {
    LARGEST_BYTES.with(|c| c.set(0));
    let r = f();
    (r, LARGEST_BYTES.with(|c| c.get()))
}

/// The most a decoder of `input_bytes` may allocate at once: what it
/// decodes is at most a few times what it read (never what a length field
/// claims).
pub fn allocation_bound(input_bytes: usize) -> usize {
    16 * input_bytes + (64 << 10)
}

/// Hostile numbers to write over a text input's numbers (`mutate_text`):
/// zero, one, negatives, the edges of u32/i64/u64 and past them, huge and
/// tiny floats, fractions, NaN, empty, and random u16/u32/u64 values.
pub fn hostile_text_number() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("0".to_string()),
        Just("1".to_string()),
        Just("-1".to_string()),
        Just("511".to_string()),
        Just("4294967295".to_string()),
        Just("4294967296".to_string()),
        Just("9223372036854775807".to_string()),
        Just("18446744073709551615".to_string()),
        Just("18446744073709551616".to_string()),
        Just("99999999999999999999999".to_string()),
        Just("18446744073709.551".to_string()),
        Just("1e308".to_string()),
        Just("-1e308".to_string()),
        Just("1e-300".to_string()),
        Just("0.5".to_string()),
        Just("nan".to_string()),
        Just("inf".to_string()),
        Just("".to_string()),
        any::<u16>().prop_map(|v| v.to_string()),
        any::<u32>().prop_map(|v| v.to_string()),
        any::<u64>().prop_map(|v| v.to_string()),
        (any::<u16>(), any::<u16>()).prop_map(|(a, b)| format!("{a}.{b}")),
    ]
}

/// Mutates a text input: each `(n, value)` written over the `n`-th number
/// (modulo their count; a `.` inside a number is part of it), then the raw
/// byte writes (offsets modulo the length), then the cut (the length kept,
/// modulo the length + 1).
pub fn mutate_text(
    bytes: &mut Vec<u8>,
    numbers: &[(usize, String)],
    raw: &[(usize, u8)],
    cut: Option<usize>,
) {
    for (n, v) in numbers {
        let spans = number_spans(bytes, true);
        if let Some(&(a, e)) = spans.get(n % spans.len().max(1)) {
            bytes.splice(a..e, v.bytes());
        }
    }
    if !bytes.is_empty() {
        let len = bytes.len();
        for &(at, v) in raw {
            bytes[at % len] = v;
        }
    }
    if let Some(c) = cut {
        bytes.truncate(c % (bytes.len() + 1));
    }
}
