//! The Kueue model's integration tests, one test binary (one link instead of eleven): a module per
//! concern, each naming the kueue.md section or upstream Kueue test it mirrors.

#[path = "../../../../tests/support/shared_data.rs"]
mod shared_data;

mod admission;
mod explain;
mod invariants;
mod lifecycle;
mod livelock;
mod loading;
mod manifests;
mod node_affinity;
mod partial_admission;
mod rules;
mod simulation;
mod snapshot;
mod tas;
#[cfg(feature = "trainjob")]
mod trainjob;
mod upstream_differences;
