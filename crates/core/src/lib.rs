//! layoutd core: the request model, the sans-I/O [`Target`] trait, the
//! [`Stack`] that chains targets, the on-disk [`superblock`] and the stack
//! [`config`].
//!
//! This crate never performs I/O, never reads a clock, never sleeps and never
//! draws from a global random number generator. Time arrives as an
//! [`Instant`] argument; everything a target wants done leaves through its
//! `poll_*` methods as plain data. The runtimes (live and deterministic, in
//! `layoutd-runtime`) are the only places where bytes meet a device.
#![warn(missing_docs)]

pub mod background;
pub mod config;
pub mod idle;
pub mod metablock;
pub mod request;
pub mod stack;
pub mod streams;
pub mod superblock;
pub mod target;
pub mod time;

pub use request::{Completion, IoError, Op, ReqId, Request, StreamId, REQUEST_BYTES_MAX, SECTOR_BYTES};
pub use stack::Stack;
pub use target::{OpenMode, Status, Target, TraceRecord};
pub use time::Instant;
