//! HDD model (placeholder; being written).
