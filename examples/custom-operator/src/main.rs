//! `kubetrain-custom-operator`: the shipped `kubetrain-operator` — the same flags, environment variables, RBAC,
//! webhooks, leader election and endpoints (docs/operator.md) — with two plugins registered after the built-ins:
//!
//! - [`kubetrain_plugin_mpi_flavours::MpiFlavours`]: MPICH and Intel MPI for runtimes annotated
//!   `kubetrain.dev/mpi-implementation: MPICH` (or `IntelMPI`);
//! - [`kubetrain_plugin_kai::Kai`]: gang scheduling with the KAI scheduler for runtimes annotated
//!   `kubetrain.dev/pod-group-policy: kai`.
//!
//! Its ServiceAccount needs the rules of `examples/manifests/deploy/rbac.yaml` plus `create` and `patch` on
//! `podgroups` in `scheduling.run.ai` (the KAI PodGroups); the MPI flavours build only ConfigMaps and Secrets,
//! which the standard rules cover. Writing your own: docs/plugins.md.

use kubetrain_plugin_kai::Kai;
use kubetrain_plugin_mpi_flavours::MpiFlavours;

fn main() -> std::process::ExitCode {
    kubetrain_operator::main_with("kubetrain-custom-operator", |operator| {
        operator.plugin(MpiFlavours).plugin(Kai)
    })
}
