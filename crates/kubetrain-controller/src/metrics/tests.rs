use prometheus_client::encoding::text::encode;
use serde_json::json;

use super::*;

fn job(spec: serde_json::Value, status: serde_json::Value) -> TrainJob {
    serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": spec, "status": status,
    }))
    .unwrap()
}

fn c(t: &str, s: &str) -> serde_json::Value {
    json!({"type": t, "status": s, "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

#[test]
fn states_table() {
    let r = json!({"runtimeRef": {"name": "r"}});
    let cases = [
        (job(r.clone(), json!({})), TrainJobState::Created),
        (
            job(
                r.clone(),
                json!({"jobsStatus": [{"name": "node", "ready": 0, "succeeded": 0, "failed": 0, "active": 2, "suspended": 0}]}),
            ),
            TrainJobState::Running,
        ),
        (
            job(
                json!({"runtimeRef": {"name": "r"}, "suspend": true}),
                json!({}),
            ),
            TrainJobState::Suspended,
        ),
        (
            job(r.clone(), json!({"conditions": [c("Suspended", "True")]})),
            TrainJobState::Suspended,
        ),
        (
            job(r.clone(), json!({"conditions": [c("Suspended", "False")]})),
            TrainJobState::Created,
        ),
        (
            job(r.clone(), json!({"conditions": [c("Complete", "True")]})),
            TrainJobState::Complete,
        ),
        (
            job(
                r.clone(),
                json!({"conditions": [c("Complete", "True"), c("Failed", "True")]}),
            ),
            TrainJobState::Failed,
        ),
    ];
    for (i, (job, want)) in cases.iter().enumerate() {
        assert_eq!(TrainJobState::of(job), *want, "case {i}");
    }
}

fn scrape(registry: &Registry) -> String {
    let mut out = String::new();
    encode(&mut out, registry).unwrap();
    out
}

#[test]
fn exposition_names_and_values() {
    let mut registry = Registry::default();
    let metrics = ControllerMetrics::register(&mut registry);
    {
        let _one = metrics.reconcile_started();
        let _two = metrics.reconcile_started();
        assert_eq!(metrics.in_flight(), 2);
        let text = scrape(&registry);
        assert!(
            text.contains("kubetrain_trainjob_reconciles_in_flight 2"),
            "{text}"
        );
    }
    metrics.error("conflict");
    metrics.error("conflict");
    metrics.requeue(&("ns".into(), "a".into()), Some(Duration::from_secs(60)));
    metrics.requeue(&("ns".into(), "b".into()), Some(Duration::from_secs(60)));
    metrics.requeue(&("ns".into(), "b".into()), None);
    let text = scrape(&registry);
    for line in [
        "kubetrain_trainjob_reconcile_total 2",
        "kubetrain_trainjob_reconcile_errors_total{kind=\"conflict\"} 2",
        // Registered at 0 for every kind, before any error of that kind.
        "kubetrain_trainjob_reconcile_errors_total{kind=\"transport\"} 0",
        "kubetrain_trainjob_reconcile_duration_seconds_count 2",
        "kubetrain_trainjob_reconciles_in_flight 0",
        "kubetrain_trainjob_requeues_scheduled 1",
        "kubetrain_trainjob_queue_depth 1",
        "kubetrain_trainjobs{state=\"Created\"} 0",
        "kubetrain_trainjobs{state=\"Failed\"} 0",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    assert_eq!(metrics.reconciles(), 2);
    assert_eq!(metrics.errors("conflict"), 2);
}

#[test]
fn past_requeues_leave_the_queue() {
    let metrics = ControllerMetrics::default();
    metrics.requeue(&("ns".into(), "a".into()), Some(Duration::ZERO));
    metrics.requeue(&("ns".into(), "b".into()), Some(Duration::from_secs(3600)));
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(metrics.requeues_scheduled(), 1);
}
