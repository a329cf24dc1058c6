//! Collective communication for TrainJob ranks: NCCL and CPU backends, rendezvous from the trainer env,
//! benchmarks.
//!
//! Part of [kubetrain](https://github.com/kubetrain/kubetrain), Kubeflow Trainer V2 in Rust.
//!
//! The ranks that a TrainJob starts find each other through the environment the renderer injects
//! ([`rendezvous::RankEnv`]: `PET_*`, `JAX_*` or `WORLD_SIZE`/`RANK`/`MASTER_*`); rank 0 hosts a small TCP
//! store that hands out the membership ([`rendezvous::exchange`]); the nodes of an elastic job
//! (`PET_NNODES=min:max`) meet round after round at [`rendezvous::ElasticAgent`]'s store instead, which
//! re-forms the group when a node is lost or joins. Both backends implement
//! [`Communicator`]:
//!
//! * [`cpu::CpuCommunicator`]: ring reduce-scatter + all-gather with chunked pipelining; shared memory
//!   between ranks on one host, TCP across hosts; deterministic; a dead or stalled peer becomes an error
//!   within the configured timeout.
//! * `nccl::NcclCommunicator` (feature `nccl`): NCCL loaded at run time (`libnccl.so.2` of a Python wheel or the
//!   system), device memory and streams through cudarc, init from a unique id handed out by rank 0, and
//!   a watchdog that aborts the communicator when a peer dies instead of hanging.
//!
//! `bench` (feature `bench`) measures either backend the nccl-tests way; `demo` (feature `demo`) is a tiny
//! data-parallel training loop with [`checkpoint`]s.
//!
//! ```
//! use kubetrain_collective::{ElementType, ReduceOp};
//! use kubetrain_collective::rendezvous::RankEnv;
//!
//! // What a rank of a one-node, one-process torch TrainJob sees:
//! let env = RankEnv::from_lookup(|k| match k {
//!     "PET_NNODES" | "PET_NPROC_PER_NODE" => Some("1".into()),
//!     "PET_NODE_RANK" => Some("0".into()),
//!     "PET_MASTER_ADDR" => Some("job-node-0-0.job".into()),
//!     "PET_MASTER_PORT" => Some("29500".into()),
//!     _ => None,
//! })?;
//! assert_eq!((env.rank, env.world_size), (0, 1));
//! assert_eq!((ElementType::F32.name(), ReduceOp::Avg.name()), ("float", "avg"));
//! # Ok::<(), kubetrain_collective::rendezvous::RendezvousError>(())
//! ```
//!
//! ## Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `nccl` | yes | the NCCL backend (`nccl` module; cudarc with dynamic loading and kubetrain-nccl-sys, so it builds without CUDA) |
//! | `bench` | no | the nccl-tests style benchmark harness (`bench`; with `nccl`, `nccl::bench` too) |
//! | `demo` | no | the data-parallel training demo (`demo`) that `kubetrain collective train-demo` runs |
//!
//! Without `nccl` the crate is the CPU backend, rendezvous and checkpoints, and does not link cudarc.
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "bench")]
pub mod bench;
pub mod checkpoint;
pub mod communicator;
pub mod cpu;
#[cfg(feature = "demo")]
pub mod demo;
pub mod dtype;
pub mod error;
#[cfg(feature = "nccl")]
pub mod nccl;
pub mod rendezvous;

pub use communicator::Communicator;
pub use dtype::{Element, ElementType, ReduceOp};
pub use error::{CollectiveError, Result};

// The README's example is compiled and run with the doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
