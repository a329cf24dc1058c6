use k8s_openapi::api::core::v1::PodSpec;
use serde_json::json;

use super::*;

fn spec(value: serde_json::Value) -> MetricSpec {
    serde_json::from_value(value).unwrap()
}

fn cpu_utilization(percent: i32) -> MetricSpec {
    spec(json!({"type": "Resource", "resource": {"name": "cpu",
        "target": {"type": "Utilization", "averageUtilization": percent}}}))
}

/// A node pod template: container `node` requesting 2 CPUs, and a `sidecar` without requests.
fn template(sidecar: bool) -> PodSpec {
    let mut containers = vec![json!({"name": "node", "image": "i",
        "resources": {"requests": {"cpu": "2"}, "limits": {"memory": "4Gi", "nvidia.com/gpu": "8"}}})];
    if sidecar {
        containers.push(json!({"name": "sidecar", "image": "s"}));
    }
    serde_json::from_value(json!({"containers": containers})).unwrap()
}

/// `count` pods whose container `node` uses `cpu` (and `sidecar`, when given, 100m).
fn usage(count: usize, cpu: &str, sidecar: bool) -> ResourceUsage {
    let pod: PodMetrics = serde_json::from_value(json!({"containers":
    if sidecar {
        json!([{"name": "node", "usage": {"cpu": cpu, "memory": "3Gi"}},
               {"name": "sidecar", "usage": {"cpu": "100m", "memory": "10Mi"}}])
    } else {
        json!([{"name": "node", "usage": {"cpu": cpu, "memory": "3Gi"}}])
    }}))
    .unwrap();
    let pods = (0..count)
        .map(|_| {
            pod.containers
                .iter()
                .map(|c| (c.name.clone(), amounts(&c.usage)))
                .collect()
        })
        .collect();
    ResourceUsage {
        pods,
        requests: template_requests(&template(sidecar)),
        unreadable: None,
    }
}

#[test]
fn quantities_and_requests_are_read_in_base_units() {
    assert_eq!(base_units("250m"), Some(0.25));
    assert_eq!(base_units("1800000000n"), Some(1.8));
    assert_eq!(base_units("1Ki"), Some(1024.0));
    assert_eq!(base_units("x"), None);
    let requests = template_requests(&template(true));
    let node = &requests["node"];
    assert_eq!(node["cpu"], 2.0);
    assert_eq!(
        node["memory"],
        4.0 * 1024.0 * 1024.0 * 1024.0,
        "a limit stands for a missing request"
    );
    assert!(requests["sidecar"].is_empty());
}

#[test]
fn utilization_follows_the_hpa_formula_with_its_tolerance() {
    let cpu = cpu_utilization(60);
    // 1.8 of 2 CPUs on 4 pods: 90 % against 60 %: ceil(4 × 1.5) = 6.
    assert_eq!(
        resource_replicas(&cpu, &usage(4, "1800m", false), 4),
        Some(6)
    );
    // 65 % is within 10 % of 60 %: no change.
    assert_eq!(
        resource_replicas(&cpu, &usage(4, "1300m", false), 4),
        Some(4)
    );
    // 30 %: ceil(4 × 0.5) = 2.
    assert_eq!(
        resource_replicas(&cpu, &usage(4, "600m", false), 4),
        Some(2)
    );
    // The utilization is a whole percent (HPA truncates): 1.35 of 2 is 67 %, within 10 % of 61 % (67.5 % is not).
    assert_eq!(
        resource_replicas(&cpu_utilization(61), &usage(4, "1350m", false), 4),
        Some(4)
    );
    assert_eq!(
        resource_replicas(&cpu_utilization(61), &usage(4, "1380m", false), 4),
        Some(5)
    );
}

#[test]
fn pods_without_metrics_count_against_the_change() {
    let cpu = cpu_utilization(60);
    // 4 nodes, 2 reported at 30 %: shrinking assumes the other 2 use their request: 65 %, within 10 %: stays.
    assert_eq!(
        resource_replicas(&cpu, &usage(2, "600m", false), 4),
        Some(4)
    );
    // 4 nodes, 2 reported at 95 %: growing assumes the other 2 use nothing: 47 %, the other way: stays.
    assert_eq!(
        resource_replicas(&cpu, &usage(2, "1900m", false), 4),
        Some(4)
    );
    // 3 nodes, 2 reported at 100 % against 50 %: with the third at 0, 66 %: ceil(3 × 1.32) = 4.
    assert_eq!(
        resource_replicas(&cpu_utilization(50), &usage(2, "2", false), 3),
        Some(4)
    );
}

#[test]
fn average_values_and_container_resources_follow_the_hpa_too() {
    let memory = spec(json!({"type": "Resource", "resource": {"name": "memory",
        "target": {"type": "AverageValue", "averageValue": "1Gi"}}}));
    // 3Gi per pod against 1Gi on 2 pods: 6.
    assert_eq!(
        resource_replicas(&memory, &usage(2, "1", false), 2),
        Some(6)
    );
    // A sidecar without a CPU request: the pod's utilization cannot be computed (HPA: missing request)...
    let cpu = cpu_utilization(60);
    assert_eq!(resource_replicas(&cpu, &usage(4, "1800m", true), 4), None);
    // ...the node container's can.
    let container = spec(
        json!({"type": "ContainerResource", "containerResource": {"name": "cpu",
        "container": "node", "target": {"type": "Utilization", "averageUtilization": 60}}}),
    );
    assert_eq!(
        resource_replicas(&container, &usage(4, "1800m", true), 4),
        Some(6)
    );
    let absent = spec(
        json!({"type": "ContainerResource", "containerResource": {"name": "cpu",
        "container": "trainer", "target": {"type": "Utilization", "averageUtilization": 60}}}),
    );
    assert_eq!(
        resource_replicas(&absent, &usage(4, "1800m", true), 4),
        None
    );
}

#[test]
fn nothing_is_read_without_usage() {
    let cpu = cpu_utilization(60);
    assert_eq!(
        resource_replicas(&cpu, &usage(0, "1", false), 4),
        None,
        "no pod reported"
    );
    let mut failed = usage(4, "1800m", false);
    failed.unreadable = Some("not served".to_owned());
    assert_eq!(resource_replicas(&cpu, &failed, 4), None);
    let pods = spec(json!({"type": "Pods", "pods": {"metric": {"name": "x"},
        "target": {"type": "AverageValue", "averageValue": "1"}}}));
    assert!(!reads_resources(std::slice::from_ref(&pods)));
    assert!(reads_resources(&[pods, cpu]));
}

fn api_error(code: u16) -> kube::Error {
    let mut status = kube::core::Status::failure("mock", "mock");
    status.code = code;
    kube::Error::Api(Box::new(status))
}

#[test]
fn a_failed_read_says_why() {
    for code in [404, 503] {
        let why = why_unreadable("team-a", &api_error(code));
        assert!(
            why.contains("metrics.k8s.io/v1beta1 is not served"),
            "{why}"
        );
        assert!(why.contains(&format!("HTTP {code}")), "{why}");
    }
    let why = why_unreadable("team-a", &api_error(403));
    assert!(
        why.contains("list on pods.metrics.k8s.io") && why.contains("team-a"),
        "{why}"
    );
    let why = why_unreadable("team-a", &api_error(500));
    assert!(why.contains("listing the node pods' PodMetrics"), "{why}");
}

#[test]
fn the_node_pods_are_selected_by_jobset_labels() {
    let bounds = Bounds {
        min: 1,
        max: 2,
        replicated_job: "node".to_owned(),
    };
    assert_eq!(
        node_pod_selector("j", &bounds),
        "jobset.sigs.k8s.io/jobset-name=j,jobset.sigs.k8s.io/replicatedjob-name=node"
    );
}
