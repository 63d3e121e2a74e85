//! Simulator (issue 4; not yet written).
