//! The `kubetrain` command line as a user runs it, one test binary (one link instead of seven): a module
//! per command family, the helpers they share in `common`. Run one family with its module path, e.g.
//! `cargo test -p kubetrain-cli --test cli acceptance::`.

mod common;

mod acceptance;
mod elastic_run;
mod guidance;
mod jobs;
mod local_identity;
mod migrate;
mod optimization_jobs;
mod optimize;
mod policy;
mod queue;
mod render;
mod run;
mod runtime_ref;
mod tenancy;
mod validate_and_crd;
