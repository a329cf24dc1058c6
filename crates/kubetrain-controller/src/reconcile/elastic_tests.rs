use k8s_openapi::api::core::v1::Node;
use kubetrain_api::jobset::JobSet;
use serde_json::json;

use std::time::{Duration, Instant};

use super::*;

fn node(name: &str, gpus: &str, ready: bool, extra: serde_json::Value) -> Node {
    let mut n = json!({
        "metadata": {"name": name, "labels": {"type": "kwok"}},
        "spec": {},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": gpus},
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
        },
    });
    if let Some(spec) = extra.get("spec") {
        n["spec"] = spec.clone();
    }
    if let Some(labels) = extra.get("labels") {
        n["metadata"]["labels"] = labels.clone();
    }
    serde_json::from_value(n).unwrap()
}

fn jobset(annotations: serde_json::Value, parallelism: i32) -> JobSet {
    serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "e", "namespace": "ns", "annotations": annotations},
        "spec": {"replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": {
            "parallelism": parallelism, "completions": parallelism,
            "template": {"spec": {
                "nodeSelector": {"type": "kwok"},
                "containers": [{"name": "node", "image": "i",
                    "resources": {"limits": {"nvidia.com/gpu": "8"}, "requests": {"cpu": "2"}}}]}}}}}]},
    }))
    .unwrap()
}

fn elastic(min: &str, max: &str) -> JobSet {
    jobset(
        json!({
            "kubetrain.dev/elastic-min-nodes": min,
            "kubetrain.dev/elastic-max-nodes": max,
            "kubetrain.dev/elastic-replicated-job": "node",
        }),
        4,
    )
}

#[test]
fn bounds_come_from_the_torch_plugins_annotations() {
    assert_eq!(
        bounds(&elastic("2", "6")),
        Some(Bounds {
            min: 2,
            max: 6,
            replicated_job: "node".to_owned()
        })
    );
    assert_eq!(bounds(&jobset(json!({}), 4)), None, "not elastic");
    assert_eq!(bounds(&elastic("3", "2")), None, "min > max");
    assert_eq!(bounds(&elastic("0", "2")), None, "min < 1");
    assert_eq!(bounds(&elastic("x", "2")), None, "not a number");
}

#[test]
fn the_node_count_is_the_fitting_nodes_within_the_bounds() {
    let b = bounds(&elastic("2", "6")).unwrap();
    assert_eq!(desired(&b, 0, 4, Wanted::NoMetrics), 2);
    assert_eq!(desired(&b, 4, 2, Wanted::NoMetrics), 4);
    assert_eq!(desired(&b, 9, 4, Wanted::NoMetrics), 6);
    assert_eq!(
        desired(&b, 5, 4, Wanted::Nodes(3)),
        3,
        "the metrics ask for fewer"
    );
    assert_eq!(
        desired(&b, 5, 4, Wanted::Nodes(9)),
        5,
        "capacity caps the metrics"
    );
    assert_eq!(
        desired(&b, 5, 4, Wanted::Nodes(1)),
        2,
        "never below minNodes"
    );
    let mut js = elastic("2", "6");
    assert_eq!(current(&js, &b), Some(4));
    scale(&mut js, &b, 5);
    let spec = js.spec.replicated_jobs[0].template.spec.as_ref().unwrap();
    assert_eq!((spec.parallelism, spec.completions), (Some(5), Some(5)));
}

#[test]
fn a_node_counts_when_ready_schedulable_selected_untainted_and_large_enough() {
    let js = elastic("1", "8");
    let pod = node_pod(&js, &bounds(&js).unwrap()).unwrap();
    let none = json!({});
    let nodes = vec![
        node("fits", "8", true, none.clone()),
        node("fits-too", "16", true, none.clone()),
        node("small", "4", true, none.clone()),
        node("not-ready", "8", false, none.clone()),
        node(
            "cordoned",
            "8",
            true,
            json!({"spec": {"unschedulable": true}}),
        ),
        node("other-pool", "8", true, json!({"labels": {"type": "real"}})),
        node(
            "tainted",
            "8",
            true,
            json!({"spec": {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]}}),
        ),
        node(
            "prefer-not",
            "8",
            true,
            json!({"spec": {"taints": [{"key": "x", "effect": "PreferNoSchedule"}]}}),
        ),
    ];
    assert_eq!(fitting_nodes(&nodes, pod), 3, "fits, fits-too, prefer-not");

    let mut tolerant = pod.clone();
    tolerant.tolerations = Some(vec![Toleration {
        key: Some("node.kubernetes.io/not-ready".to_owned()),
        operator: Some("Exists".to_owned()),
        ..Toleration::default()
    }]);
    assert_eq!(fitting_nodes(&nodes, &tolerant), 4);
}

#[test]
fn tolerations_follow_kubernetes_rules() {
    let taint = Taint {
        key: "gpu".to_owned(),
        value: Some("a100".to_owned()),
        effect: "NoSchedule".to_owned(),
        time_added: None,
    };
    let tol = |key: Option<&str>, op: Option<&str>, value: Option<&str>, effect: Option<&str>| {
        Toleration {
            key: key.map(str::to_owned),
            operator: op.map(str::to_owned),
            value: value.map(str::to_owned),
            effect: effect.map(str::to_owned),
            toleration_seconds: None,
        }
    };
    assert!(tolerates(&tol(None, Some("Exists"), None, None), &taint));
    assert!(tolerates(
        &tol(Some("gpu"), Some("Exists"), None, None),
        &taint
    ));
    assert!(tolerates(
        &tol(Some("gpu"), None, Some("a100"), Some("NoSchedule")),
        &taint
    ));
    assert!(!tolerates(
        &tol(Some("gpu"), None, Some("h100"), None),
        &taint
    ));
    assert!(!tolerates(
        &tol(Some("gpu"), Some("Exists"), None, Some("NoExecute")),
        &taint
    ));
}

#[test]
fn the_event_says_which_way_and_why() {
    let b = bounds(&elastic("2", "6")).unwrap();
    let up = scaled_event(&b, 4, 6, 6, Wanted::NoMetrics);
    assert_eq!(up.reason, TRAINJOB_SCALED);
    assert_eq!(up.action, "Scale4To6");
    assert!(
        up.note
            .as_deref()
            .unwrap()
            .contains("from 4 to 6 nodes: more nodes fit")
    );
    let down = scaled_event(&b, 6, 5, 5, Wanted::NoMetrics);
    assert!(down.note.as_deref().unwrap().contains("fewer nodes fit"));
    let lost = scaled_event(&b, 4, 3, 3, Wanted::Unreadable);
    let note = lost.note.as_deref().unwrap();
    assert!(
        note.contains("from 4 to 3 nodes: fewer nodes fit")
            && note.contains("the metrics cannot be read"),
        "{note}"
    );
    let metric = scaled_event(&b, 5, 3, 6, Wanted::Nodes(3));
    let note = metric.note.as_deref().unwrap();
    assert!(
        note.contains("the metrics ask for fewer nodes (for the whole stabilization window)")
            && note.contains("the metrics ask for 3"),
        "{note}"
    );
}

fn metric(name: &str, value: &str) -> kubetrain_api::Metric {
    kubetrain_api::Metric {
        name: name.to_owned(),
        value: value.to_owned(),
    }
}

fn spec(value: serde_json::Value) -> MetricSpec {
    serde_json::from_value(value).unwrap()
}

/// [`wanted`] without resource usage.
fn read(metrics: &[MetricSpec], reported: &[kubetrain_api::Metric], current: i32) -> Wanted {
    wanted(
        metrics,
        reported,
        &metrics::ResourceUsage::default(),
        current,
    )
}

#[test]
fn metrics_follow_the_hpa_formulas_on_what_the_trainer_reports() {
    let pods = spec(
        json!({"type": "Pods", "pods": {"metric": {"name": "tokens_per_node"},
        "target": {"type": "AverageValue", "averageValue": "1000"}}}),
    );
    let external = spec(
        json!({"type": "External", "external": {"metric": {"name": "queue"},
        "target": {"type": "AverageValue", "averageValue": "500m"}}}),
    );
    let value = spec(
        json!({"type": "External", "external": {"metric": {"name": "lag"},
        "target": {"type": "Value", "value": "10"}}}),
    );
    let cpu = spec(json!({"type": "Resource", "resource": {"name": "cpu",
        "target": {"type": "Utilization", "averageUtilization": 80}}}));
    // 1500 per node on 4 nodes against 1000: 6.
    assert_eq!(
        read(
            std::slice::from_ref(&pods),
            &[metric("tokens_per_node", "1500")],
            4
        ),
        Wanted::Nodes(6)
    );
    // Within 10 %: no change.
    assert_eq!(
        read(
            std::slice::from_ref(&pods),
            &[metric("tokens_per_node", "1050")],
            4
        ),
        Wanted::Nodes(4)
    );
    assert_eq!(
        read(
            std::slice::from_ref(&pods),
            &[metric("tokens_per_node", "400")],
            4
        ),
        Wanted::Nodes(2)
    );
    // A total over a per-node target: 1.2 / 0.5 = 3 (rounded up).
    assert_eq!(
        read(
            std::slice::from_ref(&external),
            &[metric("queue", "1.2")],
            4
        ),
        Wanted::Nodes(3)
    );
    assert_eq!(
        read(std::slice::from_ref(&value), &[metric("lag", "25")], 2),
        Wanted::Nodes(5)
    );
    // The highest of those that can be read, when the unread ones would not stop a shrink.
    let all = [pods, external, value, cpu.clone()];
    assert_eq!(
        read(
            &all,
            &[metric("tokens_per_node", "1500"), metric("lag", "x")],
            4
        ),
        Wanted::Nodes(6)
    );
    assert_eq!(read(&all, &[], 4), Wanted::Unreadable);
    assert_eq!(read(&[cpu], &[metric("cpu", "90")], 4), Wanted::Unreadable);
    // Some unread and the others ask for fewer: an HPA does not shrink on partial metrics.
    assert_eq!(
        read(&all, &[metric("tokens_per_node", "400")], 4),
        Wanted::Unreadable
    );
    assert_eq!(read(&[], &[metric("cpu", "90")], 4), Wanted::NoMetrics);
}

#[test]
fn metrics_that_cannot_be_read_keep_the_size_and_capacity_still_caps_it() {
    let b = bounds(&elastic("2", "6")).unwrap();
    // A new JobSet: its initial size (numNodes 3) stays though 6 nodes fit.
    assert_eq!(desired(&b, 6, 3, Wanted::Unreadable), 3);
    // A running one keeps its 4 when more fit...
    assert_eq!(desired(&b, 8, 4, Wanted::Unreadable), 4);
    // ...and shrinks at once when a node is lost.
    assert_eq!(desired(&b, 3, 4, Wanted::Unreadable), 3);
    // Within the bounds still.
    assert_eq!(desired(&b, 1, 4, Wanted::Unreadable), 2);
    assert_eq!(desired(&b, 8, 9, Wanted::Unreadable), 6);
    // Without metrics the nodes decide, as before.
    assert_eq!(desired(&b, 6, 3, Wanted::NoMetrics), 6);
}

fn at(t0: Instant, seconds: u64) -> Instant {
    t0 + Duration::from_secs(seconds)
}

#[test]
fn a_shrink_waits_for_the_whole_stabilization_window_and_growth_does_not() {
    let memory = Memory::default();
    let t0 = Instant::now();
    let window = SCALE_DOWN_STABILIZATION;
    // First sight at 4 nodes: the history starts with 4, so asking for 2 keeps 4.
    assert_eq!(
        memory.stabilize("u", Wanted::Nodes(2), 4, t0, window),
        Wanted::Nodes(4)
    );
    assert_eq!(
        memory.stabilize("u", Wanted::Nodes(3), 4, at(t0, 100), window),
        Wanted::Nodes(4)
    );
    assert_eq!(
        memory.stabilize("u", Wanted::Nodes(2), 4, at(t0, 299), window),
        Wanted::Nodes(4),
        "the first sight is still within the window"
    );
    // 300 s after the first sight: the highest within the window is 3 (asked at 100 s).
    assert_eq!(
        memory.stabilize("u", Wanted::Nodes(2), 4, at(t0, 300), window),
        Wanted::Nodes(3)
    );
    assert_eq!(
        memory.stabilize("u", Wanted::Nodes(2), 3, at(t0, 400), window),
        Wanted::Nodes(2),
        "fewer for the whole window"
    );
    // Growth follows at once.
    assert_eq!(
        memory.stabilize("u", Wanted::Nodes(5), 2, at(t0, 410), window),
        Wanted::Nodes(5)
    );
    // A dip after growth waits again.
    assert_eq!(
        memory.stabilize("u", Wanted::Nodes(2), 5, at(t0, 420), window),
        Wanted::Nodes(5)
    );
    assert_eq!(
        memory.stabilize("u", Wanted::Nodes(2), 5, at(t0, 710), window),
        Wanted::Nodes(2)
    );
    // Unreadable and no metrics pass through; another job has its own history.
    assert_eq!(
        memory.stabilize("u", Wanted::Unreadable, 5, at(t0, 720), window),
        Wanted::Unreadable
    );
    assert_eq!(
        memory.stabilize("v", Wanted::NoMetrics, 5, at(t0, 720), window),
        Wanted::NoMetrics
    );
    assert_eq!(
        memory.stabilize("v", Wanted::Nodes(1), 2, at(t0, 720), window),
        Wanted::Nodes(2)
    );
}

#[test]
fn a_lost_node_shrinks_at_once_while_a_metric_shrink_is_held() {
    let b = bounds(&elastic("2", "6")).unwrap();
    let memory = Memory::default();
    let t0 = Instant::now();
    let window = SCALE_DOWN_STABILIZATION;
    // 5 nodes run and fit; the metrics ask for 3: held at 5.
    let held = memory.stabilize("u", Wanted::Nodes(3), 5, t0, window);
    assert_eq!(desired(&b, 5, 5, held), 5);
    // A node goes 30 s later: 4 fit, the job shrinks to 4 at once (not to 3: the window holds).
    let held = memory.stabilize("u", Wanted::Nodes(3), 5, at(t0, 30), window);
    assert_eq!(desired(&b, 4, 5, held), 4);
}

#[test]
fn the_memory_announces_a_cause_once_and_forgets_idle_jobs() {
    let memory = Memory::default();
    let t0 = Instant::now();
    let window = SCALE_DOWN_STABILIZATION;
    assert!(memory.announce("u", "not served", t0, window));
    assert!(!memory.announce("u", "not served", at(t0, 10), window));
    assert!(memory.announce("u", "forbidden", at(t0, 20), window));
    assert!(memory.announce("v", "not served", at(t0, 20), window));
    memory.stabilize("w", Wanted::Nodes(2), 2, at(t0, 20), window);
    assert_eq!(memory.jobs(), 3);
    // Two windows unseen: deleted or finished jobs are dropped; one still seen stays.
    memory.stabilize("w", Wanted::Nodes(2), 2, at(t0, 500), window);
    memory.stabilize("w", Wanted::Nodes(2), 2, at(t0, 620), window);
    assert_eq!(memory.jobs(), 1);
    assert!(
        memory.announce("u", "not served", at(t0, 620), window),
        "a job seen again after it was forgotten is told again"
    );
}

#[test]
fn the_unreadable_event_fits_an_events_note() {
    let event = unreadable_event(&"é".repeat(2000));
    assert_eq!(event.reason, ELASTIC_METRICS_UNREADABLE);
    assert_eq!(event.type_, EventType::Warning);
    let note = event.note.unwrap();
    assert!(
        note.len() <= 1024 && note.ends_with("..."),
        "{}",
        note.len()
    );
    let short = unreadable_event("not served").note.unwrap();
    assert!(
        short.contains("not served; the job keeps its size"),
        "{short}"
    );
}

#[test]
fn a_trainer_report_from_before_the_last_resize_is_not_read_again() {
    let memory = Memory::default();
    let now = Instant::now();
    let at = |s: i64| Time(Timestamp::from_second(s).unwrap());
    // No resize yet: any report counts, stamped or not.
    assert!(memory.report_is_current("u1", Some(&at(100))));
    assert!(memory.report_is_current("u1", None));
    // Resized at 200 on the strength of the report of 100: that report describes the old size.
    memory.resized("u1", at(200).0, now);
    let table = [
        (Some(at(100)), false, "the report that caused the resize"),
        (Some(at(200)), false, "stamped at the resize itself"),
        (Some(at(201)), true, "reported after the resize"),
        (None, false, "no stamp: cannot tell"),
    ];
    for (updated, expected, what) in table {
        assert_eq!(
            memory.report_is_current("u1", updated.as_ref()),
            expected,
            "{what}"
        );
    }
    assert!(
        memory.report_is_current("u2", Some(&at(100))),
        "another job"
    );
}
