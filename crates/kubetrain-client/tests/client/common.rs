//! Scenario helpers shared by the local runner's and the local queue's tests.
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use kubetrain_client::local::{self, JobPlan, LocalOptions};
use kubetrain_client::{JobStatus, LocalProcessBackend, TrainerClient};
use kubetrain_test_support::fixtures::{self, TrainJobFixture};
use serde_json::{Value, json};

/// A torch-distributed TrainJob of `nodes` pods running `script` in `sh -c`.
pub fn trainjob(name: &str, nodes: i32, script: &str) -> String {
    job(name, nodes, script).yaml()
}

/// [`trainjob`] with `spec` fields merged in (such as `{"activeDeadlineSeconds": 1}`).
pub fn trainjob_spec(name: &str, nodes: i32, script: &str, spec: Value) -> String {
    job(name, nodes, script).spec(spec).yaml()
}

/// [`trainjob`] with `resources` (such as `{"requests": {"cpu": "2"}}`) per node.
pub fn trainjob_with(name: &str, nodes: i32, script: &str, resources: Value) -> String {
    job(name, nodes, script)
        .trainer(json!({ "resourcesPerNode": resources }))
        .yaml()
}

fn job(name: &str, nodes: i32, script: &str) -> TrainJobFixture {
    fixtures::trainjob(name)
        .num_nodes(nodes.into())
        .command(&["sh", "-c", script])
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
    // The first `name`: the TrainJob's, as YAML (`name: x`) or JSON (`"name":"x"`) writes it.
    let name = yaml
        .split("name: ")
        .nth(1)
        .and_then(|s| s.split([',', '}']).next())
        .or_else(|| yaml.split("\"name\":\"").nth(1)?.split('"').next())
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
