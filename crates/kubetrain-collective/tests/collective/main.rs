//! The collective library's integration tests in one binary (one link instead of four): CPU collectives
//! against a reference, failures and aborts, checkpoint save/resume, and the NCCL backend (feature `nccl`).
//! `processes` (ranks as separate processes) is its own binary: it re-executes itself as each rank.

mod checkpoint_resume;
mod common;
mod cpu_collectives;
mod failures;
#[cfg(feature = "nccl")]
mod nccl;
