//! Errors of the NCCL backend.

use std::time::Duration;

use kubetrain_nccl_sys::LibraryError;

/// Why the NCCL backend failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NcclError {
    /// `libnccl.so.2` was not found; the message lists where it was looked for.
    #[error(transparent)]
    Library(#[from] LibraryError),
    /// No CUDA driver (`libcuda.so`) on this machine.
    #[error(
        "no CUDA driver (libcuda.so) found: the NCCL backend needs an NVIDIA GPU and driver; use --backend cpu"
    )]
    NoCudaDriver,
    /// A CUDA driver call failed (no device, out of memory, ...).
    #[error("CUDA: {context}: {message}")]
    Cuda {
        /// What was being done.
        context: String,
        /// The driver's error.
        message: String,
    },
    /// An NCCL call returned an error code.
    #[error("{call} failed: {name} ({description}){}{}", detail.as_ref().map(|d| format!(": {d}")).unwrap_or_default(), hint.map(|h| format!("; {h}")).unwrap_or_default())]
    Call {
        /// The NCCL function.
        call: &'static str,
        /// The raw `ncclResult_t`.
        code: u32,
        /// Its name (`ncclInvalidUsage`, ...).
        name: &'static str,
        /// `ncclGetErrorString`.
        description: String,
        /// `ncclGetLastError`, when NCCL said more.
        detail: Option<String>,
        /// What usually causes it.
        hint: Option<&'static str>,
    },
    /// The library lacks a function this backend needs (too old).
    #[error(
        "the NCCL library at {path} has no {symbol}: NCCL {version} is too old (need 2.12 or newer)"
    )]
    MissingSymbol {
        /// Library path.
        path: String,
        /// The missing function.
        symbol: &'static str,
        /// The library's version.
        version: String,
    },
    /// The operation did not complete in time; the communicator was aborted.
    #[error(
        "rank {rank}: {during} did not complete within {waited:?}; communicator aborted (a peer is dead or stalled)"
    )]
    Timeout {
        /// This rank.
        rank: usize,
        /// The operation.
        during: String,
        /// How long it waited.
        waited: Duration,
    },
    /// A peer failed (`ncclCommGetAsyncError` reported it); the communicator was aborted.
    #[error(
        "rank {rank}: {during}: asynchronous NCCL error {name}: {description}; communicator aborted"
    )]
    Async {
        /// This rank.
        rank: usize,
        /// The operation.
        during: String,
        /// The code's name.
        name: &'static str,
        /// `ncclGetErrorString`.
        description: String,
    },
}
