//! The stream detector lives in `layoutd_core::streams` (shared with the
//! live runtime, so both give targets the same stream ids).

pub use layoutd_core::streams::{Detector, RUN_GAP_BYTES, RUN_SLOTS};
