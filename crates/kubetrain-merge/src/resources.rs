//! Resource arithmetic of the render pipeline: the `resourcesPerNode` merge, pod requests, CPU and GPU counts.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::smp::{self, Schema};
use kubetrain_api::quantity::Amount;

/// Requests of one pod, by resource name.
pub type ResourceList = BTreeMap<String, Amount>;

/// Overlays `over` onto `base` as upstream's `MergeResourceRequirements` does (v2.3): limits and requests merge
/// key by key (TrainJob wins), claims merge by name.
pub fn merge(
    base: &ResourceRequirements,
    over: &ResourceRequirements,
) -> Result<ResourceRequirements, smp::SmpError> {
    // Without claims the strategic merge is a key-by-key map overlay: do it on the typed maps (the render hot
    // path); claims keep the general engine, whose list ordering rules they need.
    if base.claims.is_none() && over.claims.is_none() {
        let overlay = |b: &Option<BTreeMap<String, Quantity>>,
                       o: &Option<BTreeMap<String, Quantity>>| {
            match (b, o) {
                (Some(b), Some(o)) => {
                    let mut merged = b.clone();
                    merged.extend(o.iter().map(|(k, v)| (k.clone(), v.clone())));
                    Some(merged)
                }
                (b, None) => b.clone(),
                (None, o) => o.clone(),
            }
        };
        return Ok(ResourceRequirements {
            limits: overlay(&base.limits, &over.limits),
            requests: overlay(&base.requests, &over.requests),
            ..base.clone()
        });
    }
    let to_value = |r: &ResourceRequirements| {
        serde_json::to_value(r).unwrap_or_else(|_| serde_json::json!({}))
    };
    let merged = smp::strategic_merge_patch(
        &to_value(base),
        &to_value(over),
        Schema::ResourceRequirements,
    )?;
    // The merged document only holds fields both inputs had, so it always reads back.
    Ok(serde_json::from_value(merged).unwrap_or_default())
}

fn parse_list(
    list: Option<&BTreeMap<String, Quantity>>,
) -> impl Iterator<Item = (&String, Amount)> {
    list.into_iter()
        .flatten()
        .filter_map(|(k, q)| Amount::parse(&q.0).ok().map(|a| (k, a)))
}

fn add_into(total: &mut ResourceList, list: Option<&BTreeMap<String, Quantity>>) {
    for (name, amount) in parse_list(list) {
        let entry = total.entry(name.clone()).or_insert(Amount::ZERO);
        *entry = entry.add(&amount);
    }
}

fn max_into(total: &mut ResourceList, other: &ResourceList) {
    for (name, amount) in other {
        match total.get(name) {
            Some(current) if !greater(amount, current) => {}
            _ => {
                total.insert(name.clone(), *amount);
            }
        }
    }
}

fn greater(a: &Amount, b: &Amount) -> bool {
    a.compare(b) == std::cmp::Ordering::Greater
}

/// Requests of one pod as Kubernetes computes them (`resourcehelpers.PodRequests`): the sum over containers and
/// sidecars, at least the largest init-container step, plus overhead. Unparseable quantities are skipped (the API
/// server rejects them earlier).
pub fn pod_requests(spec: &PodSpec) -> ResourceList {
    let mut total = ResourceList::new();
    for c in &spec.containers {
        add_into(
            &mut total,
            c.resources.as_ref().and_then(|r| r.requests.as_ref()),
        );
    }
    let mut sidecars = ResourceList::new();
    let mut init_max = ResourceList::new();
    for c in spec.init_containers.iter().flatten() {
        let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
        let step = if c.restart_policy.as_deref() == Some("Always") {
            add_into(&mut total, requests);
            add_into(&mut sidecars, requests);
            sidecars.clone()
        } else {
            let mut step = ResourceList::new();
            add_into(&mut step, requests);
            for (k, v) in &sidecars {
                let e = step.entry(k.clone()).or_insert(Amount::ZERO);
                *e = e.add(v);
            }
            step
        };
        max_into(&mut init_max, &step);
    }
    max_into(&mut total, &init_max);
    add_into(&mut total, spec.overhead.as_ref());
    total
}

/// GPUs per node (`runtime.GetNumGPUPerNode`): the first resource whose name contains "gpu" in requests, else in
/// limits, rounded up. The webhook's torchtune rules count the same way, so both share one implementation.
pub fn gpus(res: &ResourceRequirements) -> i64 {
    kubetrain_api::validation::gpus_per_node(Some(res))
}

/// CPUs per node (torch `getNumCPUPerNode`): requests.cpu if non-zero, else limits.cpu, rounded up; 0 if none.
pub fn cpus(res: &ResourceRequirements) -> i64 {
    let cpu = |list: Option<&BTreeMap<String, Quantity>>| {
        list.and_then(|l| l.get("cpu"))
            .and_then(|q| Amount::parse(&q.0).ok())
    };
    match cpu(res.requests.as_ref()) {
        Some(a) if !a.is_zero() => a.ceil(),
        _ => cpu(res.limits.as_ref()).map_or(0, |a| a.ceil()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Container;

    fn res(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> ResourceRequirements {
        let list = |l: &[(&str, &str)]| {
            (!l.is_empty()).then(|| {
                l.iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect()
            })
        };
        ResourceRequirements {
            requests: list(requests),
            limits: list(limits),
            claims: None,
        }
    }

    #[test]
    fn merge_is_key_by_key() {
        let merged = merge(
            &res(
                &[("cpu", "1"), ("memory", "1Gi")],
                &[("nvidia.com/gpu", "2")],
            ),
            &res(&[("cpu", "4")], &[]),
        )
        .unwrap();
        assert_eq!(
            merged,
            res(
                &[("cpu", "4"), ("memory", "1Gi")],
                &[("nvidia.com/gpu", "2")]
            )
        );
    }

    #[test]
    fn typed_overlay_equals_the_strategic_merge() {
        let cases = [
            (
                res(&[("cpu", "1")], &[("memory", "1Gi")]),
                res(&[("cpu", "4")], &[]),
            ),
            (
                res(&[], &[]),
                res(&[("cpu", "4")], &[("nvidia.com/gpu", "1")]),
            ),
            (res(&[("cpu", "1")], &[]), res(&[], &[])),
            (
                ResourceRequirements {
                    limits: Some(BTreeMap::new()),
                    ..Default::default()
                },
                res(&[], &[("cpu", "2")]),
            ),
        ];
        for (base, over) in cases {
            let to_value = |r: &ResourceRequirements| serde_json::to_value(r).unwrap();
            let general: ResourceRequirements = serde_json::from_value(
                smp::strategic_merge_patch(
                    &to_value(&base),
                    &to_value(&over),
                    Schema::ResourceRequirements,
                )
                .unwrap(),
            )
            .unwrap();
            assert_eq!(merge(&base, &over).unwrap(), general, "{base:?} + {over:?}");
        }
    }

    #[test]
    fn cpu_counts_as_upstream_torch_tests() {
        // torch_test.go facts: cpu 4 -> 4, none -> 0 (then max(1, _)), 2.5 -> 3, 0.7 -> 1, requests 3 no limit -> 3.
        assert_eq!(cpus(&res(&[], &[("cpu", "4")])), 4);
        assert_eq!(cpus(&res(&[], &[])), 0);
        assert_eq!(cpus(&res(&[], &[("cpu", "2.5")])), 3);
        assert_eq!(cpus(&res(&[], &[("cpu", "0.7")])), 1);
        assert_eq!(cpus(&res(&[("cpu", "3")], &[])), 3);
        assert_eq!(cpus(&res(&[("cpu", "0")], &[("cpu", "5")])), 5);
    }

    #[test]
    fn gpus_prefer_requests_then_limits() {
        assert_eq!(gpus(&res(&[("nvidia.com/gpu", "2")], &[])), 2);
        assert_eq!(gpus(&res(&[], &[("nvidia.com/gpu", "4")])), 4);
        assert_eq!(gpus(&res(&[("cpu", "6")], &[])), 0);
    }

    #[test]
    fn pod_requests_sum_containers_and_take_init_max() {
        let container = |name: &str, r: ResourceRequirements, restart: Option<&str>| Container {
            name: name.into(),
            resources: Some(r),
            restart_policy: restart.map(str::to_owned),
            ..Default::default()
        };
        let spec = PodSpec {
            containers: vec![
                container("a", res(&[("cpu", "1"), ("memory", "1Gi")], &[]), None),
                container("b", res(&[("cpu", "300m")], &[]), None),
            ],
            init_containers: Some(vec![
                container("init", res(&[("cpu", "2")], &[]), None),
                container("sidecar", res(&[("memory", "1Gi")], &[]), Some("Always")),
            ]),
            ..Default::default()
        };
        let got = pod_requests(&spec);
        assert_eq!(got["cpu"].to_string(), "2");
        assert_eq!(got["memory"].to_string(), "2Gi");
    }
}
