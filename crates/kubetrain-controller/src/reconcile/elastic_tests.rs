use k8s_openapi::api::core::v1::Node;
use kubetrain_api::jobset::JobSet;
use serde_json::json;

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
    assert_eq!(desired(&b, 0, None), 2);
    assert_eq!(desired(&b, 4, None), 4);
    assert_eq!(desired(&b, 9, None), 6);
    assert_eq!(desired(&b, 5, Some(3)), 3, "the metrics ask for fewer");
    assert_eq!(desired(&b, 5, Some(9)), 5, "capacity caps the metrics");
    assert_eq!(desired(&b, 5, Some(1)), 2, "never below minNodes");
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
    let up = scaled_event(&b, 4, 6, 6, None);
    assert_eq!(up.reason, TRAINJOB_SCALED);
    assert_eq!(up.action, "Scale4To6");
    assert!(
        up.note
            .as_deref()
            .unwrap()
            .contains("from 4 to 6 nodes: more nodes fit")
    );
    let down = scaled_event(&b, 6, 5, 5, None);
    assert!(down.note.as_deref().unwrap().contains("fewer nodes fit"));
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
        wanted_by_metrics(
            std::slice::from_ref(&pods),
            &[metric("tokens_per_node", "1500")],
            4
        ),
        Some(6)
    );
    // Within 10 %: no change.
    assert_eq!(
        wanted_by_metrics(
            std::slice::from_ref(&pods),
            &[metric("tokens_per_node", "1050")],
            4
        ),
        Some(4)
    );
    assert_eq!(
        wanted_by_metrics(
            std::slice::from_ref(&pods),
            &[metric("tokens_per_node", "400")],
            4
        ),
        Some(2)
    );
    // A total over a per-node target: 1.2 / 0.5 = 3 (rounded up).
    assert_eq!(
        wanted_by_metrics(
            std::slice::from_ref(&external),
            &[metric("queue", "1.2")],
            4
        ),
        Some(3)
    );
    assert_eq!(
        wanted_by_metrics(std::slice::from_ref(&value), &[metric("lag", "25")], 2),
        Some(5)
    );
    // The highest of those that can be read; unread and unsupported ones ask nothing.
    let all = [pods, external, value, cpu.clone()];
    assert_eq!(
        wanted_by_metrics(
            &all,
            &[metric("tokens_per_node", "1500"), metric("lag", "x")],
            4
        ),
        Some(6)
    );
    assert_eq!(wanted_by_metrics(&all, &[], 4), None);
    assert_eq!(wanted_by_metrics(&[cpu], &[metric("cpu", "90")], 4), None);
}
