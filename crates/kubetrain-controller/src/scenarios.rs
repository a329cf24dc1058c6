//! Controller I/O as request sequences against the in-memory API server (`FakeApiServer`): each test stores
//! what the reconcile will find, reconciles one TrainJob and asserts every request from the server's log
//! (method, path, query, content type, body facts) and that nothing else was sent.

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use kubetrain_api::TrainJob;
use serde_json::{Value, json};

use crate::controller::{error_policy, reconcile};
use crate::fixtures::*;
use crate::leadership::Leadership;

/// Reconciles `job` against a fake API server set up for `calls`; returns the result after checking that
/// exactly `calls` were sent.
async fn scenario(
    job: &TrainJob,
    leadership: Leadership,
    calls: Vec<Call>,
) -> (crate::Result<Action>, Arc<crate::controller::Context>) {
    let server = fake_server(job);
    prepare(&server, &calls);
    let ctx = context(server.client(), leadership);
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        reconcile(Arc::new(job.clone()), ctx.clone()),
    )
    .await
    .expect("reconcile finished");
    verify(&server, &calls);
    (result, ctx)
}

fn owned_by(job: &TrainJob) -> impl Fn(&Value) + Send + Sync + 'static {
    let owner = owner_json(job);
    move |body: &Value| {
        assert_eq!(body["metadata"]["ownerReferences"], json!([owner.clone()]));
    }
}

fn condition_of<'a>(patch: &'a Value, type_: &str) -> &'a Value {
    patch["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no {type_} condition in {patch}"))
}

#[tokio::test]
async fn create_applies_snapshot_and_jobset_with_one_field_manager() {
    let job = trainjob("mnist");
    let (result, ctx) = scenario(
        &job,
        Leadership::always(),
        vec![
            Call::get(jobset_path("mnist")).not_found(),
            Call::get(configmap_path("mnist-runtime-snapshot")).not_found(),
            Call::get(cluster_runtime_path("torch-distributed"))
                .ok(cluster_runtime_json("torch-distributed")),
            Call::apply(configmap_path("mnist-runtime-snapshot"))
                .check(owned_by(&job))
                .check(|body| {
                    assert_eq!(body["kind"], "ConfigMap");
                    let yaml = body["data"]["runtime"].as_str().expect("runtime key");
                    assert!(yaml.contains("kind: ClusterTrainingRuntime"), "{yaml}");
                    assert!(yaml.contains("name: torch-distributed"), "{yaml}");
                }),
            Call::apply(jobset_path("mnist"))
                .check(owned_by(&job))
                .check(|body| {
                    assert_eq!(body["apiVersion"], "jobset.x-k8s.io/v1alpha2");
                    assert_eq!(body["kind"], "JobSet");
                    assert_eq!(body["spec"]["suspend"], false);
                    let node = &body["spec"]["replicatedJobs"][0]["template"]["spec"];
                    assert_eq!(node["parallelism"], 2);
                    let env = &node["template"]["spec"]["containers"][0]["env"];
                    assert!(
                        env.as_array()
                            .unwrap()
                            .iter()
                            .any(|e| e["name"] == "PET_NNODES" && e["value"] == "2"),
                        "{env}"
                    );
                }),
        ],
    )
    .await;
    // The applied JobSet has no status yet: nothing to write, nothing to wait for.
    assert_eq!(result.expect("reconciled"), Action::await_change());
    assert_eq!(ctx.metrics().reconciles(), 1);
}

#[tokio::test]
async fn status_follows_a_finished_jobset() {
    let job = trainjob("mnist");
    let completed = condition("Completed", "True", "AllJobsCompleted", ago(5));
    let (result, _) = scenario(
        &job,
        Leadership::always(),
        vec![
            Call::get(jobset_path("mnist")).ok(jobset_json(&job, false, Some(completed), 0)),
            Call::get(configmap_path("mnist-runtime-snapshot"))
                .ok(snapshot_json(&job, "torch-distributed")),
            // Running JobSet: never re-applied. Straight to the status.
            Call::merge_status(status_path("mnist")).check(|patch| {
                let c = condition_of(patch, "Complete");
                assert_eq!(
                    (&c["status"], &c["reason"]),
                    (&json!("True"), &json!("AllJobsCompleted"))
                );
                assert_eq!(patch["status"]["jobsStatus"][0]["name"], "node");
            }),
        ],
    )
    .await;
    assert_eq!(result.expect("reconciled"), Action::await_change());
}

#[tokio::test]
async fn suspended_jobsets_are_reapplied_with_kueue_patches_running_ones_never() {
    let kueue = "kueue.x-k8s.io/manager";
    // 1. Suspended TrainJob (queued by Kueue), suspended JobSet: re-applied, Suspended=True written.
    let queued = trainjob("llm").suspend(true);
    let (result, _) = scenario(
        &queued,
        Leadership::always(),
        vec![
            Call::get(jobset_path("llm")).ok(jobset_json(&queued, true, None, 0)),
            Call::get(configmap_path("llm-runtime-snapshot"))
                .ok(snapshot_json(&queued, "torch-distributed")),
            Call::apply(jobset_path("llm")).check(|body| assert_eq!(body["spec"]["suspend"], true)),
            Call::merge_status(status_path("llm")).check(|patch| {
                let c = condition_of(patch, "Suspended");
                assert_eq!(
                    (&c["status"], &c["reason"]),
                    (&json!("True"), &json!("Suspended"))
                );
            }),
        ],
    )
    .await;
    assert_eq!(result.expect("reconciled"), Action::await_change());

    // 2. Kueue admits: adds its runtime patch and flips suspend in one update. The JobSet is still suspended,
    //    so it is applied once more, unsuspended and with the flavor's nodeSelector.
    let admitted = trainjob("llm")
        .node_selector_patch(kueue, "cloud.example.com/flavor", "a100")
        .conditions(vec![condition("Suspended", "True", "Suspended", ago(30))]);
    let (result, _) = scenario(
        &admitted,
        Leadership::always(),
        vec![
            Call::get(jobset_path("llm")).ok(jobset_json(&admitted, true, None, 0)),
            Call::get(configmap_path("llm-runtime-snapshot"))
                .ok(snapshot_json(&admitted, "torch-distributed")),
            Call::apply(jobset_path("llm")).check(|body| {
                assert_eq!(body["spec"]["suspend"], false);
                let pod =
                    &body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"];
                assert_eq!(pod["nodeSelector"]["cloud.example.com/flavor"], "a100");
            }),
            Call::merge_status(status_path("llm")).check(|patch| {
                let c = condition_of(patch, "Suspended");
                assert_eq!(
                    (&c["status"], &c["reason"]),
                    (&json!("False"), &json!("Resumed"))
                );
            }),
        ],
    )
    .await;
    assert_eq!(result.expect("reconciled"), Action::await_change());

    // 3. Running: the JobSet is not touched again, and an unchanged status is not written.
    let running = trainjob("llm")
        .node_selector_patch(kueue, "cloud.example.com/flavor", "a100")
        .conditions(vec![condition("Suspended", "False", "Resumed", ago(20))]);
    let mut status = running.status.clone().unwrap();
    status.jobs_status = vec![kubetrain_api::JobStatus {
        name: "node".into(),
        active: 1,
        ..Default::default()
    }];
    let running = TrainJob {
        status: Some(status),
        ..running
    };
    let (result, _) = scenario(
        &running,
        Leadership::always(),
        vec![
            Call::get(jobset_path("llm")).ok(jobset_json(&running, false, None, 1)),
            Call::get(configmap_path("llm-runtime-snapshot"))
                .ok(snapshot_json(&running, "torch-distributed")),
        ],
    )
    .await;
    assert_eq!(result.expect("reconciled"), Action::await_change());
}

#[tokio::test]
async fn active_deadline_fails_the_job_and_deletes_the_jobset() {
    let job = trainjob("slow").deadline(60, 3600);
    let (result, _) = scenario(
        &job,
        Leadership::always(),
        vec![
            Call::get(jobset_path("slow")).ok(jobset_json(&job, false, None, 1)),
            Call::get(configmap_path("slow-runtime-snapshot"))
                .ok(snapshot_json(&job, "torch-distributed")),
            Call::delete(jobset_path("slow"))
                .check(|body| assert_eq!(body["propagationPolicy"], "Background")),
            Call::merge_status(status_path("slow")).check(|patch| {
                let c = condition_of(patch, "Failed");
                assert_eq!(
                    (&c["status"], &c["reason"]),
                    (&json!("True"), &json!("DeadlineExceeded"))
                );
                assert_eq!(c["message"], "TrainJob exceeded its active deadline");
            }),
        ],
    )
    .await;
    assert_eq!(result.expect("reconciled"), Action::await_change());

    // Before the deadline: requeue when it falls due.
    let job = trainjob("slow").deadline(600, 100);
    let (result, _) = scenario(
        &job,
        Leadership::always(),
        vec![
            Call::get(jobset_path("slow")).ok(jobset_json(&job, false, None, 1)),
            Call::get(configmap_path("slow-runtime-snapshot"))
                .ok(snapshot_json(&job, "torch-distributed")),
            Call::merge_status(status_path("slow"))
                .check(|patch| assert_eq!(patch["status"]["jobsStatus"][0]["active"], 1)),
        ],
    )
    .await;
    // Requeued when the deadline falls due (rounded up to a whole second, so the next look is past it).
    assert_eq!(
        result.expect("reconciled"),
        Action::requeue(Duration::from_secs(500))
    );
}

#[tokio::test]
async fn missing_runtime_is_an_event_and_a_retry_without_writes() {
    let job = trainjob("orphan");
    let (result, ctx) = scenario(
        &job,
        Leadership::always(),
        vec![
            Call::get(jobset_path("orphan")).not_found(),
            Call::get(configmap_path("orphan-runtime-snapshot")).not_found(),
            Call::get(cluster_runtime_path("torch-distributed")).not_found(),
            Call::post(events_path()).check(|event| {
                assert_eq!(event["type"], "Warning");
                assert_eq!(event["reason"], "TrainJobResourcesCreationFailed");
                assert_eq!(event["action"], "Reconciling");
                assert_eq!(event["regarding"]["kind"], "TrainJob");
                assert_eq!(event["regarding"]["name"], "orphan");
                assert_eq!(event["reportingController"], "trainer-trainjob-controller");
                let note = event["note"].as_str().unwrap();
                assert!(
                    note.starts_with(
                        "TrainJob resources reconciliation failed: not found ClusterTrainingRuntime specified in TrainJob"
                    ),
                    "{note}"
                );
            }),
        ],
    )
    .await;
    let error = result.expect_err("no runtime");
    assert_eq!(error.metric_label(), "runtime_not_found");
    assert_eq!(ctx.metrics().errors("runtime_not_found"), 1);
    let job = Arc::new(job);
    assert_eq!(
        error_policy(job.clone(), &error, ctx.clone()),
        Action::requeue(Duration::from_millis(500))
    );
    assert_eq!(
        error_policy(job, &error, ctx),
        Action::requeue(Duration::from_secs(1))
    );
}

#[tokio::test]
async fn unsupported_runtime_kind_fails_the_job_without_reading_runtimes() {
    let job = trainjob("odd").runtime("x", "FancyRuntime");
    let (result, _) = scenario(
        &job,
        Leadership::always(),
        vec![
            Call::get(jobset_path("odd")).not_found(),
            Call::merge_status(status_path("odd")).check(|patch| {
                let c = condition_of(patch, "Failed");
                assert_eq!(c["reason"], "TrainingRuntimeNotSupported");
                assert_eq!(
                    c["message"],
                    "unsupported runtime: FancyRuntime.trainer.kubeflow.org"
                );
            }),
        ],
    )
    .await;
    assert_eq!(result.expect("reconciled"), Action::await_change());
}

#[tokio::test]
async fn conflicts_are_errors_that_back_off_and_reset_on_success() {
    let job = trainjob("busy");
    let (result, ctx) = scenario(
        &job,
        Leadership::always(),
        vec![
            Call::get(jobset_path("busy")).not_found(),
            Call::get(configmap_path("busy-runtime-snapshot")).not_found(),
            Call::get(cluster_runtime_path("torch-distributed"))
                .ok(cluster_runtime_json("torch-distributed")),
            Call::apply(configmap_path("busy-runtime-snapshot")),
            Call::apply(jobset_path("busy")).fail(409, "Conflict"),
            Call::post(events_path()).check(|event| {
                assert!(
                    event["note"]
                        .as_str()
                        .unwrap()
                        .contains("applying JobSet team-a/busy")
                );
            }),
        ],
    )
    .await;
    let error = result.expect_err("conflict");
    assert!(error.is_conflict(), "{error}");
    assert_eq!(ctx.metrics().errors("conflict"), 1);
    let key = crate::controller::key_of(&job);
    let job = Arc::new(job);
    for expected in [500, 1000, 2000] {
        assert_eq!(
            error_policy(job.clone(), &error, ctx.clone()),
            Action::requeue(Duration::from_millis(expected))
        );
    }
    assert_eq!(ctx.backoff().failures(&key), 3);
    ctx.backoff().succeeded(&key);
    assert_eq!(
        error_policy(job, &error, ctx),
        Action::requeue(Duration::from_millis(500))
    );
}

#[tokio::test]
async fn other_managers_jobs_get_no_calls() {
    let job = trainjob("remote").managed_by("kueue.x-k8s.io/multikueue");
    let (result, _) = scenario(&job, Leadership::always(), vec![]).await;
    assert_eq!(result.expect("skipped"), Action::await_change());
}

#[tokio::test]
async fn followers_read_and_compute_but_never_write() {
    let (_tx, follower) = Leadership::channel();
    let job = trainjob("mnist").suspend(true);
    let (result, _) = scenario(
        &job,
        follower,
        vec![
            Call::get(jobset_path("mnist")).not_found(),
            Call::get(configmap_path("mnist-runtime-snapshot")).not_found(),
            Call::get(cluster_runtime_path("torch-distributed"))
                .ok(cluster_runtime_json("torch-distributed")),
        ],
    )
    .await;
    assert_eq!(
        result.expect("computed"),
        Action::requeue(Duration::from_secs(30))
    );
}

#[tokio::test]
async fn mpi_jobs_get_a_fresh_ssh_secret_once_and_a_hostfile_each_time() {
    let job = trainjob("ds").runtime("deepspeed-distributed", "ClusterTrainingRuntime");
    let (result, _) = scenario(
        &job,
        Leadership::always(),
        vec![
            Call::get(jobset_path("ds")).not_found(),
            Call::get(configmap_path("ds-runtime-snapshot")).not_found(),
            Call::get(cluster_runtime_path("deepspeed-distributed"))
                .ok(cluster_runtime_json("deepspeed-distributed")),
            Call::get(secret_path("ds-mpi-ssh-auth")).not_found(),
            Call::apply(configmap_path("ds-runtime-snapshot")),
            // Companions first, the JobSet last: its pods never start without their mounts.
            Call::apply(configmap_path("ds-mpi-hostfile")).check(|body| {
                let hostfile = body["data"]["hostfile"].as_str().unwrap();
                assert!(hostfile.contains("ds-node-0-0.ds slots=1"), "{hostfile}");
            }),
            Call::apply(secret_path("ds-mpi-ssh-auth"))
                .check(owned_by(&job))
                .check(|body| {
                    assert_eq!(body["type"], "kubernetes.io/ssh-auth");
                    assert_eq!(body["immutable"], true);
                    let key = body["data"]["ssh-privatekey"].as_str().unwrap();
                    assert!(!key.is_empty());
                }),
            Call::apply(jobset_path("ds")),
        ],
    )
    .await;
    assert_eq!(result.expect("reconciled"), Action::await_change());

    // The Secret exists: no new key, the hostfile is applied again.
    // The JobSet has no status yet (an apply's answer keeps the stored one), so none is written.
    let mut created = jobset_json(&job, true, None, 0);
    created["status"] = Value::Null;
    let (result, _) = scenario(
        &job,
        Leadership::always(),
        vec![
            Call::get(jobset_path("ds")).ok(created),
            Call::get(configmap_path("ds-runtime-snapshot"))
                .ok(snapshot_json(&job, "deepspeed-distributed")),
            // Read as metadata only; the fake answers with the whole Secret, which reads the same.
            Call::get(secret_path("ds-mpi-ssh-auth")).ok(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "ds-mpi-ssh-auth", "namespace": NS}})),
            Call::apply(configmap_path("ds-mpi-hostfile")),
            Call::apply(jobset_path("ds")),
        ],
    )
    .await;
    assert_eq!(result.expect("reconciled"), Action::await_change());
}

#[tokio::test]
async fn coscheduling_runtimes_get_their_pod_group() {
    let job = trainjob("gang");
    let mut runtime = cluster_runtime_json("torch-distributed");
    runtime["spec"]["podGroupPolicy"] = json!({"coscheduling": {"scheduleTimeoutSeconds": 100}});
    let pod_group =
        "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/team-a/podgroups/gang".to_owned();
    let (result, _) = scenario(
        &job,
        Leadership::always(),
        vec![
            Call::get(jobset_path("gang")).not_found(),
            Call::get(configmap_path("gang-runtime-snapshot")).not_found(),
            Call::get(cluster_runtime_path("torch-distributed")).ok(runtime),
            Call::get(pod_group.clone()).not_found(),
            Call::apply(configmap_path("gang-runtime-snapshot")),
            // The PodGroup exists before the JobSet's pods do (the gang scheduler needs it first).
            Call::apply(pod_group).check(owned_by(&job)).check(|body| {
                assert_eq!(body["kind"], "PodGroup");
                assert_eq!(body["spec"]["minMember"], 2);
                assert_eq!(body["spec"]["scheduleTimeoutSeconds"], 100);
            }),
            Call::apply(jobset_path("gang")).check(|body| {
                let pod = &body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"];
                assert_eq!(
                    pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"],
                    "gang"
                );
            }),
        ],
    )
    .await;
    assert_eq!(result.expect("reconciled"), Action::await_change());
}

/// `/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/<name>`.
fn trainjob_path(name: &str) -> String {
    format!("/apis/trainer.kubeflow.org/v1alpha1/namespaces/{NS}/trainjobs/{name}")
}

/// A TrainJob that opted in to restarts after disruptions, whose trainer reported step 437 and a checkpoint
/// at step 400.
fn spot_job() -> TrainJob {
    use kubetrain_api::{Metric, TrainerStatus};
    let mut job = trainjob("spot");
    job.metadata.annotations = Some(
        [(
            kubetrain_jobset::disruption::RESTART_ON_DISRUPTION_ANNOTATION.to_owned(),
            "true".to_owned(),
        )]
        .into_iter()
        .collect(),
    );
    let metric = |name: &str, value: &str| Metric {
        name: name.to_owned(),
        value: value.to_owned(),
    };
    job.status
        .get_or_insert_with(Default::default)
        .trainer_status = Some(TrainerStatus {
        metrics: vec![
            metric("kubetrain.dev/step", "437"),
            metric("kubetrain.dev/checkpoint-step", "400"),
        ],
        last_updated_time: Some(ago(30)),
        ..TrainerStatus::default()
    });
    job
}

#[tokio::test]
async fn a_disruption_restart_is_recorded_once_in_the_status_the_annotation_and_an_event() {
    let job = spot_job();
    let mut jobset = jobset_json(&job, false, None, 1);
    jobset["status"]["restarts"] = json!(1);
    jobset["status"]["restartsCountTowardsMax"] = json!(0);
    jobset["status"]["conditions"] = json!([condition(
        "RestartingJobSet",
        "True",
        "FailurePolicy_RestartOnDisruption",
        ago(2)
    )]);
    let calls = vec![
        Call::get(jobset_path("spot")).ok(jobset.clone()),
        Call::get(configmap_path("spot-runtime-snapshot"))
            .ok(snapshot_json(&job, "torch-distributed")),
        Call::merge_status(status_path("spot")).check(|patch| {
            let c = condition_of(patch, "Restarted");
            assert_eq!(
                (&c["status"], &c["reason"]),
                (&json!("True"), &json!("Disruption"))
            );
            let message = c["message"].as_str().unwrap();
            assert!(
                message.contains("last checkpoint at step 400; 37 steps lost"),
                "{message}"
            );
        }),
        Call::merge(trainjob_path("spot")).check(|patch| {
            let text = patch["metadata"]["annotations"]["kubetrain.dev/restarts"]
                .as_str()
                .unwrap();
            let history: Value = serde_json::from_str(text).unwrap();
            assert_eq!(history["restarts"], 1);
            assert_eq!(history["disruptions"], 1);
            assert_eq!(history["failures"], 0);
            assert_eq!(history["records"][0]["cause"], "Disruption");
            assert_eq!(history["records"][0]["stepsLost"], 37);
        }),
        Call::post(events_path()).check(|event| {
            assert_eq!(event["type"], "Normal");
            assert_eq!(event["reason"], "TrainJobRestarted");
            assert!(event["note"].as_str().unwrap().contains("a disruption"));
        }),
    ];
    let server = fake_server(&job);
    prepare(&server, &calls);
    let ctx = context(server.client(), Leadership::always());
    reconcile(Arc::new(job.clone()), ctx.clone())
        .await
        .expect("reconciled");
    verify(&server, &calls);

    // The same TrainJob again (the cache has not seen the annotation yet): no second announcement; only the
    // status (this TrainJob still lacks the condition) is written again.
    reconcile(Arc::new(job), ctx).await.expect("reconciled");
    verify(
        &server,
        &[
            Call::get(jobset_path("spot")),
            Call::get(configmap_path("spot-runtime-snapshot")),
            Call::merge_status(status_path("spot")),
        ],
    );
}

#[tokio::test]
async fn without_a_restart_nothing_more_is_read_or_written() {
    let job = spot_job();
    let (result, _) = scenario(
        &job,
        Leadership::always(),
        vec![
            Call::get(jobset_path("spot")).ok(jobset_json(&job, false, None, 1)),
            Call::get(configmap_path("spot-runtime-snapshot"))
                .ok(snapshot_json(&job, "torch-distributed")),
            Call::merge_status(status_path("spot")).check(|patch| {
                assert!(patch["status"].get("conditions").is_none(), "{patch}");
            }),
        ],
    )
    .await;
    result.expect("reconciled");
}

fn kwok_node(name: &str) -> Value {
    json!({"metadata": {"name": name}, "status": {
        "allocatable": {"cpu": "64", "nvidia.com/gpu": "8"},
        "conditions": [{"type": "Ready", "status": "True"}]}})
}

#[tokio::test]
async fn a_running_elastic_job_follows_the_nodes_within_its_bounds() {
    let job = trainjob("elastic");
    let mut jobset = jobset_json(&job, false, None, 1);
    jobset["metadata"]["annotations"] = json!({
        "kubetrain.dev/elastic-min-nodes": "2",
        "kubetrain.dev/elastic-max-nodes": "6",
        "kubetrain.dev/elastic-replicated-job": "node",
    });
    jobset["spec"]["replicatedJobs"] = json!([{"name": "node", "replicas": 1, "template": {"spec": {
        "parallelism": 4, "completions": 4,
        "template": {"spec": {"containers": [{"name": "node", "image": "i"}]}}}}}]);
    let calls = vec![
        Call::get(jobset_path("elastic")).ok(jobset),
        Call::get(configmap_path("elastic-runtime-snapshot"))
            .ok(snapshot_json(&job, "torch-distributed")),
        Call::get("/api/v1/nodes".to_owned()),
        Call::json_patch(jobset_path("elastic")).check(|patch| {
            assert_eq!(
                patch,
                &json!([
                    {"op": "test", "path": "/spec/replicatedJobs/0/name", "value": "node"},
                    {"op": "replace", "path": "/spec/replicatedJobs/0/template/spec/parallelism", "value": 5},
                    {"op": "replace", "path": "/spec/replicatedJobs/0/template/spec/completions", "value": 5},
                ])
            );
        }),
        Call::post(events_path()).check(|event| {
            assert_eq!(event["reason"], "TrainJobScaled");
            let note = event["note"].as_str().unwrap();
            assert!(note.contains("from 4 to 5 nodes: more nodes fit"), "{note}");
        }),
        Call::merge_status(status_path("elastic")),
    ];
    let server = fake_server(&job);
    prepare(&server, &calls);
    let stored = server
        .get("jobset.x-k8s.io/v1alpha2", "jobsets", NS, "elastic")
        .unwrap();
    server.intercept(move |r| {
        let path = r.uri.split_once('?').map_or(r.uri.as_str(), |(p, _)| p);
        match (r.method.as_str(), path) {
            ("GET", "/api/v1/nodes") => Some((
                200,
                json!({"kind": "NodeList", "apiVersion": "v1", "metadata": {},
                       "items": (0..5).map(|i| kwok_node(&format!("kwok-node-{i}"))).collect::<Vec<_>>()}),
            )),
            ("PATCH", p) if p.ends_with("/jobsets/elastic") => Some((200, stored.clone())),
            _ => None,
        }
    });
    let ctx = context(server.client(), Leadership::always());
    let action = reconcile(Arc::new(job), ctx).await.expect("reconciled");
    verify(&server, &calls);
    assert_eq!(
        action,
        Action::requeue(Duration::from_secs(10)),
        "counts again"
    );
}
