//! The API crate's integration tests, one test binary (one link instead of five): a module per concern.

#[path = "../../../../tests/support/shared_data.rs"]
mod shared_data;

mod crd_coverage;
mod docs_in_sync;
mod optimization;
mod properties;
mod upstream_roundtrip;
mod validation_rules;
