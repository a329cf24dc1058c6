//! The controller crate's integration tests, one test binary (one link instead of one per file): a module
//! per concern, sharing the helpers in `support`. Run one module with
//! `cargo test -p kubetrain-controller --test controller <module>::`, e.g. `webhook_server::`.

mod support;

mod controller_run;
mod election_lease;
mod http_endpoints;
mod manifests_deploy;
mod plugins;
mod runtime_finalizer;
mod scale_controller;
mod status_server;
mod training_policy;
mod webhook_limits;
mod webhook_server;
