//! The render integration tests, one test binary (one link instead of five): a module per concern, with the
//! fixture helpers they share in `common`.

#[path = "../../../../tests/support/shared_data.rs"]
mod shared_data;

mod agreement;
mod common;
mod elastic;
mod facts;
mod flux;
mod golden;
mod laws;
mod plugins;
mod trainjob_status;
