//! The layoutd simulator: replays block traces through any layoutd stack on
//! the HDD model, deterministically.
//!
//! - [`trace`]: streaming readers of six trace formats (gzip/zstd
//!   transparently), with device, window and address-fitting options.
//! - [`source`]: open-loop and closed-loop issue of the trace's requests.
//! - streams come from [`layoutd_core::streams`] (the detector the live
//!   runtime uses too): the process or device, split into interleaved
//!   sequential runs.
//! - [`engine`]: the discrete-event loop on [`layoutd_runtime::det::Harness`]
//!   with [`timing::HddTiming`] as the bottom device; metrics and JSON.
//! - [`report`]: SVG plots, the HTML page, and `--compare` tables.
//! - [`matrix`]: `--matrix`: traces × stacks × disks on all cores, sharded.
//! - [`messages`]: `--message WHEN:TEXT`, runtime commands at a point of the trace.
//!
//! What this crate never does: read the wall clock or draw unseeded
//! randomness inside a simulation (the same inputs and seed give the same
//! JSON, byte for byte), or hold a whole trace in memory (the readers
//! stream; histograms and samples are bounded).
#![warn(missing_docs)]

pub mod command;
pub mod engine;
pub mod hist;
pub mod matrix;
pub mod messages;
pub mod phases;
pub mod report;
pub mod sample;
pub mod source;
pub mod timing;
pub mod trace;

pub use engine::{simulate, summary_json, ErrorInfo, SimOptions, SimOutcome, SimSummary, FIRST_ERRORS_MAX};
pub use trace::{BlkAction, Fit, ReadOptions, TraceError, TraceFormat, TraceReader, TraceReq};
