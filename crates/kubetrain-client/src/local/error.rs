//! Why a TrainJob could not be turned into local processes: raised by the plan ([`super::plan`]), the run
//! lock ([`super::run_lock`]) and [`super::prepare`].

use std::path::PathBuf;

/// Why a TrainJob could not be turned into local processes (the JobSet → process plan step).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The TrainJob could not be rendered against its runtime.
    #[error("rendering the TrainJob: {0}")]
    Render(#[from] kubetrain_jobset::RenderError),
    /// `runtimeRef` names a runtime that is neither given nor built in.
    #[error("spec.runtimeRef: {0}")]
    Runtime(String),
    /// The render produced no JobSet (it only does so for a running, already applied JobSet).
    #[error("the render produced no JobSet")]
    NoJobSet,
    /// A container has no command: locally there is no image whose entrypoint could run.
    #[error(
        "{path}: the container has no command; the image's entrypoint cannot run locally (set trainer.command)"
    )]
    NoCommand {
        /// Field path of the container in the JobSet.
        path: String,
    },
    /// An env var takes its value from a source the local runner cannot provide.
    #[error("{path}: {reason}")]
    Env {
        /// Field path of the env var in the JobSet.
        path: String,
        /// What is missing and how to fix it.
        reason: String,
    },
    /// `dependsOn` names a replicated job that does not exist or forms a cycle.
    #[error("{path}: {reason}")]
    DependsOn {
        /// Field path of the dependency.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The run directory could not be prepared.
    #[error("preparing the run directory {dir}: {source}")]
    RunDir {
        /// The directory.
        dir: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Another run of the same TrainJob (namespace and name) is in progress on this machine.
    #[error(
        "TrainJob {namespace}/{name} is already running on this machine ({holder}); a second run of the same \
         namespace/name is refused, not queued: wait for it to end or stop it, or give this one another \
         metadata.name"
    )]
    AlreadyRunning {
        /// The namespace.
        namespace: String,
        /// The name.
        name: String,
        /// The run in progress: its process id and run directory, as far as known.
        holder: String,
    },
    /// No free loopback port could be found for a pod port.
    #[error("finding a free loopback port for pod port {port}: {source}")]
    Port {
        /// The declared container port.
        port: i32,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}
