//! Test support for the kubetrain workspace (`publish = false`, as linkerd's `policy-test` and kube-rs's
//! `e2e` crates): what the tests, benches and examples of several crates share, kept out of the library
//! crates.
//!
//! | item | what it is |
//! |---|---|
//! | [`FakeApiServer`] | an in-memory Kubernetes API server behind a real `kube::Client`, or on a loopback port |
//! | [`fixtures`] | builders for the TrainJobs tests put in an API server, a webhook review or a file |
//! | `builtin_runtime`, `insert_builtin_runtimes` (feature `runtimes`) | the built-in runtimes as the API server holds them |
//! | `HubTestServer` (feature `initializer`) | a Hugging Face hub on loopback, with injected faults |
//! | `MemoryS3Server` (feature `initializer`) | an S3 server holding its objects in memory (any keys and ETags) |
//! | `S3Server` (feature `initializer`) | the initializer's loopback S3 endpoint over a directory, re-exported |
//!
//! The crate depends on no kubetrain library crate that uses it in its own unit tests (the controller's
//! unit tests use [`FakeApiServer`]), so each of those is linked once.

mod api_server;
pub mod fixtures;
#[cfg(feature = "initializer")]
mod hub;
#[cfg(feature = "initializer")]
mod loopback;
#[cfg(feature = "initializer")]
mod memory_s3;
#[cfg(feature = "runtimes")]
mod runtimes;

pub use api_server::{
    FakeApiServer, FakeToken, Held, HeldRequest, Recorded, ServedApi, Stats, api_status,
    query_pairs,
};
#[cfg(feature = "initializer")]
pub use hub::{HubRepo, HubTestServer};
#[cfg(feature = "initializer")]
pub use kubetrain_initializer::s3_server::S3Server;
#[cfg(feature = "initializer")]
pub use memory_s3::MemoryS3Server;
#[cfg(feature = "runtimes")]
pub use runtimes::{builtin_runtime, insert_builtin_runtimes};
