//! Raw NCCL FFI generated with bindgen, loaded at run time by path.
//!
//! Part of [kubetrain](https://github.com/kubetrain/kubetrain), Kubeflow Trainer V2 in Rust.
//!
//! * [`bindings`]: the output of bindgen for `nccl.h` of NCCL 2.32 (committed; `regenerate.sh` rebuilds
//!   it, so building needs no libclang and no CUDA). Result codes and enums are newtypes
//!   ([`ncclResult_t`]`(u32)`), so an unknown code from a newer library is a value, not undefined
//!   behaviour. Functions live on the [`Nccl`] struct, resolved from a library loaded by path.
//! * [`Library::load`]: finds `libnccl.so.2` — `NCCL_LIBRARY`, then the `nvidia/nccl/lib` of an installed
//!   Python NCCL wheel (how PyTorch users get NCCL), then the system's `libnccl.so.2` / `libnccl.so` —
//!   and returns an error that lists every place it looked when there is none.
//!
//! ```
//! use kubetrain_nccl_sys::Library;
//!
//! match Library::load() {
//!     Ok(lib) => println!("NCCL {} at {}", lib.version_string(), lib.path().display()),
//!     // No NCCL on this machine: the error says where it looked.
//!     Err(e) => assert!(e.to_string().contains("NCCL_LIBRARY")),
//! }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

#[allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    missing_docs,
    unsafe_op_in_unsafe_fn,
    clippy::all
)]
pub mod bindings;

mod library;

pub use bindings::*;
pub use library::{Library, LoadError, candidates, result_name};
