//! Scenario helpers shared by the local runner's and the local queue's tests.
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use kubetrain_client::local::{self, JobPlan, LocalOptions};
use kubetrain_client::{JobStatus, LocalProcessBackend, TrainerClient};

/// A torch-distributed TrainJob of `nodes` pods running `script` in `sh -c`.
pub fn trainjob(name: &str, nodes: i32, script: &str) -> String {
    trainjob_with(name, nodes, script, "")
}

/// [`trainjob`] with `resources` (a flow mapping such as `{requests: {cpu: '2'}}`) per node.
pub fn trainjob_with(name: &str, nodes: i32, script: &str, resources: &str) -> String {
    let resources = if resources.is_empty() {
        String::new()
    } else {
        format!("\n    resourcesPerNode: {resources}")
    };
    format!(
        r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {{name: {name}, namespace: default}}
spec:
  runtimeRef: {{name: torch-distributed}}
  trainer:
    numNodes: {nodes}
    command: [sh, -c, {script:?}]{resources}
"#
    )
}

/// Options that put the run directory at `dir`.
pub fn options(dir: &Path) -> LocalOptions {
    LocalOptions {
        run_dir: Some(dir.to_path_buf()),
        ..LocalOptions::default()
    }
}

/// Plans `yaml` with the built-in runtimes, its run directory under `dir`.
pub fn plan(yaml: &str, dir: &Path) -> JobPlan {
    let name = yaml
        .split("name: ")
        .nth(1)
        .and_then(|s| s.split([',', '}']).next())
        .unwrap_or("job");
    local::prepare(
        yaml,
        &kubetrain_jobset::builtin::catalog(),
        &options(&dir.join(name)),
    )
    .expect("plan")
}

/// Waits up to 30 s (polling every 20 ms) for one of `wanted`.
pub async fn wait_for(
    client: &TrainerClient<LocalProcessBackend>,
    name: &str,
    wanted: &[JobStatus],
) -> kubetrain_client::TrainJobView {
    client
        .wait_for_job_status(
            name,
            wanted,
            Duration::from_secs(30),
            Duration::from_millis(20),
        )
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}
