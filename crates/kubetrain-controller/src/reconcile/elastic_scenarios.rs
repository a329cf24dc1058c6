//! The elastic loop's metrics as request sequences against the in-memory API server: a policy with a CPU
//! `Resource` metric reads the node pods' `PodMetrics` (`metrics.k8s.io/v1beta1`); when that API is not
//! served the job keeps its size though more nodes fit, and says why once; when it is, the HPA formula sizes
//! the job (growth at once, a shrink held by the stabilization window).

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use kubetrain_api::TrainJob;
use serde_json::{Value, json};

use crate::controller::{Context, reconcile};
use crate::fixtures::*;
use crate::leadership::Leadership;

const POD_METRICS: &str = "/apis/metrics.k8s.io/v1beta1/namespaces/team-a/pods";
const SELECTOR: &str =
    "jobset.sigs.k8s.io/jobset-name=elastic,jobset.sigs.k8s.io/replicatedjob-name=node";

fn node(name: &str) -> Value {
    json!({"metadata": {"name": name}, "status": {
        "allocatable": {"cpu": "64", "nvidia.com/gpu": "8"},
        "conditions": [{"type": "Ready", "status": "True"}]}})
}

/// The TrainJob, its node pods requesting 2 CPUs each.
fn job() -> TrainJob {
    let mut v = serde_json::to_value(trainjob("elastic")).unwrap();
    v["spec"]["trainer"]["resourcesPerNode"] = json!({"requests": {"cpu": "2"}});
    serde_json::from_value(v).unwrap()
}

/// The runtime snapshot: torch-distributed, elastic 2 to 6 nodes on CPU utilization 60 %.
fn snapshot(job: &TrainJob) -> Value {
    let mut runtime = cluster_runtime_json("torch-distributed");
    runtime["spec"]["mlPolicy"]["torch"]["elasticPolicy"] = json!({"minNodes": 2, "maxNodes": 6,
        "metrics": [{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 60}}}]});
    let fetched: kubetrain_api::ClusterTrainingRuntime = serde_json::from_value(runtime).unwrap();
    let cm = crate::reconcile::snapshot_config_map(
        job,
        &crate::reconcile::FetchedRuntime::Cluster(Box::new(fetched)),
    )
    .unwrap();
    serde_json::to_value(cm).unwrap()
}

/// The running JobSet at `nodes` nodes.
fn jobset(job: &TrainJob, nodes: i32) -> Value {
    let mut jobset = jobset_json(job, false, None, 1);
    jobset["metadata"]["annotations"] = json!({
        "kubetrain.dev/elastic-min-nodes": "2",
        "kubetrain.dev/elastic-max-nodes": "6",
        "kubetrain.dev/elastic-replicated-job": "node",
    });
    jobset["spec"]["replicatedJobs"] = json!([{"name": "node", "replicas": 1, "template": {"spec": {
        "parallelism": nodes, "completions": nodes,
        "template": {"spec": {"containers": [{"name": "node", "image": "i",
            "resources": {"requests": {"cpu": "2"}}}]}}}}}]);
    jobset
}

/// `count` node pods' metrics, each using `cpu`.
fn pod_metrics(count: usize, cpu: &str) -> Value {
    json!({"kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1", "metadata": {},
        "items": (0..count).map(|i| json!({"metadata": {"name": format!("elastic-node-0-{i}"), "namespace": NS},
            "timestamp": "2026-01-01T00:00:00Z", "window": "30s",
            "containers": [{"name": "node", "usage": {"cpu": cpu, "memory": "1Gi"}}]})).collect::<Vec<_>>()})
}

/// Serves 6 fitting nodes, `metrics` for the `PodMetrics` list (checking its label selector) and the stored
/// JobSet for a patch.
fn serve(server: &kubetrain_test_support::FakeApiServer, metrics: (u16, Value)) {
    let stored = server
        .get("jobset.x-k8s.io/v1alpha2", "jobsets", NS, "elastic")
        .unwrap();
    server.intercept(move |r| {
        let (path, query) = r.uri.split_once('?').unwrap_or((r.uri.as_str(), ""));
        match (r.method.as_str(), path) {
            ("GET", "/api/v1/nodes") => Some((
                200,
                json!({"kind": "NodeList", "apiVersion": "v1", "metadata": {},
                       "items": (0..6).map(|i| node(&format!("kwok-node-{i}"))).collect::<Vec<_>>()}),
            )),
            ("GET", POD_METRICS) => {
                let pairs = kubetrain_test_support::query_pairs(query);
                assert!(
                    pairs.contains(&("labelSelector".to_owned(), SELECTOR.to_owned())),
                    "{pairs:?}"
                );
                Some(metrics.clone())
            }
            ("PATCH", p) if p.ends_with("/jobsets/elastic") => Some((200, stored.clone())),
            _ => None,
        }
    });
}

/// Reconciles `job` once with `ctx` and checks the requests against `calls`.
async fn reconcile_once(
    job: &TrainJob,
    ctx: Arc<Context>,
    server: &kubetrain_test_support::FakeApiServer,
    calls: &[Call],
) -> Action {
    let action = tokio::time::timeout(
        Duration::from_secs(10),
        reconcile(Arc::new(job.clone()), ctx),
    )
    .await
    .expect("reconcile finished")
    .expect("reconciled");
    verify(server, calls);
    action
}

fn reads(job: &TrainJob, nodes: i32) -> Vec<Call> {
    vec![
        Call::get(jobset_path("elastic")).ok(jobset(job, nodes)),
        Call::get(configmap_path("elastic-runtime-snapshot")).ok(snapshot(job)),
        Call::get("/api/v1/nodes".to_owned()),
        Call::get(POD_METRICS.to_owned()),
    ]
}

#[tokio::test]
async fn without_the_metrics_api_the_job_keeps_its_size_and_says_why_once() {
    let job = job();
    let server = fake_server(&job);
    let mut calls = reads(&job, 4);
    calls.push(Call::post(events_path()).check(|event| {
        assert_eq!(event["reason"], "ElasticMetricsUnreadable");
        assert_eq!(event["type"], "Warning");
        let note = event["note"].as_str().unwrap();
        assert!(
            note.contains("metrics.k8s.io/v1beta1 is not served (HTTP 404)")
                && note.contains("keeps its size"),
            "{note}"
        );
    }));
    calls.push(Call::merge_status(status_path("elastic")));
    prepare(&server, &calls);
    serve(
        &server,
        kubetrain_test_support::api_status(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ),
    );
    let ctx = context(server.client(), Leadership::always());
    // Six nodes fit, but the metric cannot be read: no patch, the job stays at 4.
    let action = reconcile_once(&job, ctx.clone(), &server, &calls).await;
    assert_eq!(action, Action::requeue(Duration::from_secs(10)));

    // Again: the same cause is not announced twice (and the status, unchanged, is not written again).
    let stored: TrainJob = serde_json::from_value(
        server
            .get("trainer.kubeflow.org/v1alpha1", "trainjobs", NS, "elastic")
            .unwrap(),
    )
    .unwrap();
    let calls = reads(&job, 4);
    let again = reconcile_once(&stored, ctx, &server, &calls).await;
    assert_eq!(again, Action::requeue(Duration::from_secs(10)));
}

#[tokio::test]
async fn served_metrics_size_the_job_with_the_hpa_formula() {
    let job = job();
    let server = fake_server(&job);
    let mut calls = reads(&job, 4);
    calls.push(Call::json_patch(jobset_path("elastic")).check(|patch| {
        assert_eq!(
            patch[1],
            json!({"op": "replace", "path": "/spec/replicatedJobs/0/template/spec/parallelism", "value": 6})
        );
    }));
    calls.push(Call::post(events_path()).check(|event| {
        assert_eq!(event["reason"], "TrainJobScaled");
        let note = event["note"].as_str().unwrap();
        assert!(
            note.contains("from 4 to 6 nodes: more nodes fit")
                && note.contains("the metrics ask for 6"),
            "{note}"
        );
    }));
    calls.push(Call::merge_status(status_path("elastic")));
    prepare(&server, &calls);
    // 1.8 of 2 CPUs on 4 pods: 90 % against 60 %: 6 nodes.
    serve(&server, (200, pod_metrics(4, "1800m")));
    let ctx = context(server.client(), Leadership::always());
    reconcile_once(&job, ctx, &server, &calls).await;
}

#[tokio::test]
async fn a_metric_shrink_waits_for_the_stabilization_window() {
    let job = job();
    let server = fake_server(&job);
    let mut calls = reads(&job, 4);
    calls.push(Call::merge_status(status_path("elastic")));
    prepare(&server, &calls);
    // 30 % against 60 %: the metric asks for 2, but the window (seeded with 4 at first sight) holds 4.
    serve(&server, (200, pod_metrics(4, "600m")));
    let ctx = context(server.client(), Leadership::always());
    reconcile_once(&job, ctx, &server, &calls).await;
}
