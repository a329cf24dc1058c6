//! `TrainerClient<KubernetesBackend>::optimize` against the in-memory API server: the OptimizationJob is
//! created (checked first), waited for through its conditions, and reported from its trial TrainJobs.

use std::collections::BTreeMap;
use std::time::Duration;

use kubetrain_api::TrainJobTemplateSpec;
use kubetrain_api::optimizationjob::trial_train_job;
use kubetrain_client::optimize::{Optimize, Search, TrialConfig};
use kubetrain_client::{ClientError, KubernetesBackend, TrainerClient};
use kubetrain_test_support::FakeApiServer;
use serde_json::json;

fn condition(kind: &str) -> serde_json::Value {
    json!({"type": kind, "status": "True", "reason": "R", "message": "m", "lastTransitionTime": "2026-12-05T00:00:00Z"})
}

#[tokio::test(flavor = "current_thread")]
async fn an_optimization_job_is_created_waited_for_and_reported() {
    let server = FakeApiServer::start();
    let client = TrainerClient::new(KubernetesBackend::new(server.client(), "team-a"));
    let mut template = TrainJobTemplateSpec::default();
    template.spec.runtime_ref.name = "torch-distributed".into();
    let job = Optimize::new("sweep", template)
        .search_space("lr", Search::loguniform(1e-4, 1e-1))
        .trial_config(TrialConfig {
            num_trials: 3,
            parallel_trials: 3,
            max_failed_trials: None,
        })
        .into_job();

    // A search the samplers refuse never reaches the API server.
    let mut bad = job.clone();
    bad.spec.parameters[0].search_space = Search::loguniform(0.0, 1.0);
    let err = client.optimize(&bad).await.unwrap_err();
    assert!(err.to_string().contains("spec.parameters[0]"), "{err}");
    assert_eq!(
        server.count("trainer.kubeflow.org/v1alpha1", "optimizationjobs"),
        0
    );

    assert_eq!(client.optimize(&job).await.unwrap(), "sweep");
    assert!(
        matches!(client.optimize(&job).await, Err(ClientError::AlreadyExists(n)) if n == "sweep")
    );
    let stored = client.get_optimization_job("sweep").await.unwrap();
    assert_eq!(stored.metadata.namespace.as_deref(), Some("team-a"));

    // The operator's part, by hand: three trials, two complete with a loss, one failed; then Complete.
    let stored_json = serde_json::to_value(&stored).unwrap();
    for (i, (lr, state, loss)) in [
        ("0.01", "Complete", "0.5"),
        ("0.001", "Complete", "0.25"),
        ("0.1", "Failed", "9"),
    ]
    .iter()
    .enumerate()
    {
        let params = BTreeMap::from([("lr".to_owned(), (*lr).to_owned())]);
        let mut trial =
            serde_json::to_value(trial_train_job(&stored, u32::try_from(i).unwrap(), &params))
                .unwrap();
        trial["apiVersion"] = json!("trainer.kubeflow.org/v1alpha1");
        trial["kind"] = json!("TrainJob");
        trial["status"] = json!({
            "conditions": [condition(state)],
            "trainerStatus": {"metrics": [{"name": "loss", "value": loss}], "lastUpdatedTime": "2026-12-05T00:00:00Z"},
        });
        server.insert(trial);
    }
    // A trial the operator stopped early: suspended and annotated, its reports kept in the history annotation.
    let params = BTreeMap::from([("lr".to_owned(), "0.05".to_owned())]);
    let mut trial = serde_json::to_value(trial_train_job(&stored, 3, &params)).unwrap();
    trial["apiVersion"] = json!("trainer.kubeflow.org/v1alpha1");
    trial["kind"] = json!("TrainJob");
    trial["metadata"]["annotations"]["kubetrain.dev/stopped-by"] = json!("median");
    trial["metadata"]["annotations"]["kubetrain.dev/objective-history"] = json!("[3.0,2.5]");
    server.insert(trial);
    let waiting = client
        .wait_for_optimization(
            "sweep",
            Duration::from_millis(50),
            Duration::from_millis(10),
        )
        .await;
    assert!(
        matches!(waiting, Err(ClientError::Timeout { .. })),
        "{waiting:?}"
    );
    let mut done = stored_json;
    done["status"] = json!({"conditions": [condition("Complete")]});
    server.insert(done);

    let report = client
        .wait_for_optimization("sweep", Duration::from_secs(10), Duration::from_millis(10))
        .await
        .unwrap();
    let states: Vec<(&str, &str, Option<f64>)> = report
        .trials
        .iter()
        .map(|t| (t.name.as_str(), t.state.as_str(), t.objective))
        .collect();
    assert_eq!(
        states,
        [
            ("sweep-0", "Succeeded", Some(0.5)),
            ("sweep-1", "Succeeded", Some(0.25)),
            ("sweep-2", "Failed", Some(9.0)),
            ("sweep-3", "Stopped", None)
        ]
    );
    assert_eq!(report.trials[3].intermediate, [3.0, 2.5]);
    assert_eq!(
        report.trials[3].message.as_deref(),
        Some("stopped early by the median rule")
    );
    let best = report.best.unwrap();
    assert_eq!((best.name.as_str(), best.objective), ("sweep-1", 0.25));
    assert_eq!(best.parameters["lr"], "0.001");
    assert_eq!(report.algorithm, "random");
}
