//! A custom render plugin in the local runner: `LocalOptions::plugins` is the registry the run renders
//! with, so what the plugin writes into the pod templates reaches the processes.

use k8s_openapi::api::core::v1::EnvVar;
use kubetrain_api::TrainJob;
use kubetrain_api::constants::ANCESTOR_TRAINER;
use kubetrain_client::JobStatus;
use kubetrain_client::local::{self, LocalOptions, RunEvent};
use kubetrain_jobset::plugins::RenderPlugin;
use kubetrain_merge::plugins::{EnforcePodSpec, Plugin};
use kubetrain_merge::{Info, MergeError};
use tokio::sync::mpsc;

use crate::common::{options, trainjob};

/// Tells every trainer container which site it runs at.
struct SiteEnv;

impl Plugin for SiteEnv {
    fn name(&self) -> &str {
        "SiteEnv"
    }

    fn pod_spec(&self) -> Option<&dyn EnforcePodSpec> {
        Some(self)
    }
}

impl RenderPlugin for SiteEnv {}

impl EnforcePodSpec for SiteEnv {
    fn enforce_pod_spec(&self, info: &mut Info, job: &TrainJob) -> Result<(), MergeError> {
        let Some(index) = info.pod_set_by_ancestor(ANCESTOR_TRAINER) else {
            return Ok(());
        };
        for container in &mut info.pod_spec_mut(index).containers {
            container.env.get_or_insert_default().push(EnvVar {
                name: "SITE".into(),
                value: Some(format!("lab-{}", job.name())),
                ..EnvVar::default()
            });
        }
        Ok(())
    }
}

/// The first log line of every pod of `yaml` run with `options`, after checking the run completed.
async fn first_lines(yaml: &str, options: &LocalOptions) -> Vec<String> {
    let plan = local::prepare(yaml, &kubetrain_jobset::builtin::catalog(), options).expect("plan");
    let (tx, mut rx) = mpsc::channel(local::EVENT_BUFFER);
    let collect = tokio::spawn(async move {
        let mut lines = std::collections::BTreeMap::new();
        while let Some(event) = rx.recv().await {
            if let RunEvent::Log(l) = event {
                lines.entry(l.pod).or_insert(l.line);
            }
        }
        lines.into_values().collect()
    });
    let summary = local::execute(&plan, &tx, std::future::pending()).await;
    drop(tx);
    assert_eq!(summary.status, JobStatus::Complete, "{summary:?}");
    collect.await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_plugins_env_reaches_every_process() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = trainjob("sited", 2, "echo site=$SITE");
    let mut with_plugin = options(&dir.path().join("with"));
    with_plugin.plugins.register(SiteEnv).unwrap();
    assert_eq!(
        first_lines(&yaml, &with_plugin).await,
        ["site=lab-sited", "site=lab-sited"]
    );
    // The default registry is the built-ins alone.
    assert_eq!(
        first_lines(&yaml, &options(&dir.path().join("without"))).await,
        ["site=", "site="]
    );
}
