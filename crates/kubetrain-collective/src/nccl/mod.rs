//! The NCCL backend: NCCL loaded at run time ([`kubetrain_nccl_sys`]), device buffers and streams
//! through cudarc (dynamic loading, so it builds without a CUDA toolkit), communicator init from a unique
//! id handed out by rank 0's store, and a watchdog: every wait polls the stream and
//! `ncclCommGetAsyncError`, and aborts the communicator (`ncclCommAbort`) when a peer fails or the
//! timeout passes, so a dead peer becomes an error instead of a hang.
//!
//! NCCL refuses two ranks on one GPU (`ncclInvalidUsage`, "Duplicate GPU detected"); ranks pick device
//! `local_rank % device_count`.
#![allow(unsafe_code)]

#[cfg(feature = "bench")]
pub mod bench;
mod comm;
mod error;

pub use comm::{NcclCommunicator, NcclOptions, RawComm, UniqueId, comm_init_rank};
pub use error::NcclError;
pub use kubetrain_nccl_sys::{Library, LibraryError};

/// Whether a CUDA driver library (`libcuda.so`) can be loaded; checked before any cudarc call, since
/// cudarc panics when it is missing.
pub fn cuda_driver_present() -> bool {
    // SAFETY: only tries to dlopen the candidates and drops them.
    unsafe { cudarc::driver::sys::is_culib_present() }
}
