//! The controller crate's integration tests, one test binary (one link instead of one per file): a module
//! per concern. Run one with `cargo test -p kubetrain-controller --test controller <module>::`.

mod election_lease;
