//! Report (todo).
