//! The RBAC rules the TrainJob controller needs, exactly: what it watches, reads and writes. The install
//! manifests' ClusterRole is checked against [`required_rules`] (leader election and webhooks add their own).

use k8s_openapi::api::rbac::v1::PolicyRule;

fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(resources.iter().map(|r| (*r).to_owned()).collect()),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        ..Default::default()
    }
}

/// Every API group, resource and verb the controller uses:
///
/// - TrainJobs are listed and watched (the reconcile reads the cache) and their status is merge-patched; a
///   finished TrainJob whose `ttlSecondsAfterFinished` expired is `delete`d (KEP-2899).
/// - Runtimes are read with `get` on the first reconcile of a TrainJob (later renders use the snapshot), and
///   watched (`list`, `watch`) and `patch`ed by the runtime controllers that remove the legacy
///   `resource-in-use` finalizer ([`crate::runtime_finalizer`]).
/// - Children (JobSets, ConfigMaps, Secrets, both PodGroup kinds) are read with `get`, watched (`list`,
///   `watch`) to trigger reconciles, and written with server-side apply, which is a `patch` that also needs
///   `create` when the object does not exist yet. JobSets are `delete`d after the active deadline.
/// - A TrainJob's `kubetrain.dev/restarts` annotation is merge-`patch`ed when its JobSet restarted
///   (`reconcile::restarts`).
/// - Nodes are `list`ed for elastic TrainJobs only (`reconcile::elastic`), and the node pods' `PodMetrics`
///   (`metrics.k8s.io`) for elastic TrainJobs with `Resource` or `ContainerResource` metrics.
/// - Events are created, and patched when they repeat (an event series).
/// - OptimizationJobs are watched and their status merge-patched; their trials are TrainJobs the controller
///   creates and patches (early stopping), see [`crate::optimization::required_rules`].
///
/// Verbs are sorted, so the rules compare as data.
pub fn required_rules() -> Vec<PolicyRule> {
    const CHILD: &[&str] = &["create", "get", "list", "patch", "watch"];
    vec![
        rule(
            "trainer.kubeflow.org",
            &["trainjobs"],
            &["delete", "list", "patch", "watch"],
        ),
        rule("trainer.kubeflow.org", &["trainjobs/status"], &["patch"]),
        rule(
            "trainer.kubeflow.org",
            &["clustertrainingruntimes", "trainingruntimes"],
            &["get", "list", "patch", "watch"],
        ),
        rule(
            "jobset.x-k8s.io",
            &["jobsets"],
            &["create", "delete", "get", "list", "patch", "watch"],
        ),
        rule("", &["configmaps", "secrets"], CHILD),
        rule("scheduling.x-k8s.io", &["podgroups"], CHILD),
        rule("scheduling.volcano.sh", &["podgroups"], CHILD),
        rule("events.k8s.io", &["events"], &["create", "patch"]),
        // The elastic loop counts the nodes an elastic TrainJob's pods fit on (reconcile::elastic).
        rule("", &["nodes"], &["list"]),
        // The elastic loop reads the node pods' usage for Resource metrics (reconcile::elastic::metrics).
        rule("metrics.k8s.io", &["pods"], &["list"]),
    ]
    .into_iter()
    // The OptimizationJob controller: its jobs and their status, and the trial TrainJobs it creates and stops.
    .chain(crate::optimization::required_rules())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allows(group: &str, resource: &str, verb: &str) -> bool {
        required_rules().iter().any(|r| {
            r.api_groups.iter().flatten().any(|g| g == group)
                && r.resources.iter().flatten().any(|x| x == resource)
                && r.verbs.iter().any(|v| v == verb)
        })
    }

    #[test]
    fn covers_every_call_the_controller_makes() {
        for (group, resource, verb) in [
            ("trainer.kubeflow.org", "trainjobs", "watch"),
            ("trainer.kubeflow.org", "trainjobs", "delete"),
            ("trainer.kubeflow.org", "trainjobs/status", "patch"),
            ("trainer.kubeflow.org", "trainingruntimes", "get"),
            ("trainer.kubeflow.org", "clustertrainingruntimes", "get"),
            ("trainer.kubeflow.org", "clustertrainingruntimes", "patch"),
            ("trainer.kubeflow.org", "trainingruntimes", "watch"),
            ("jobset.x-k8s.io", "jobsets", "create"),
            ("jobset.x-k8s.io", "jobsets", "delete"),
            ("", "configmaps", "patch"),
            ("", "secrets", "get"),
            ("scheduling.x-k8s.io", "podgroups", "patch"),
            ("scheduling.volcano.sh", "podgroups", "watch"),
            ("events.k8s.io", "events", "create"),
            ("trainer.kubeflow.org", "trainjobs", "patch"),
            ("", "nodes", "list"),
            ("metrics.k8s.io", "pods", "list"),
        ] {
            assert!(allows(group, resource, verb), "{verb} {group}/{resource}");
        }
    }

    #[test]
    fn asks_for_nothing_it_does_not_use() {
        for (group, resource, verb) in [
            ("trainer.kubeflow.org", "trainjobs", "update"),
            ("trainer.kubeflow.org", "trainingruntimes", "update"),
            (
                "trainer.kubeflow.org",
                "trainingruntimes/finalizers",
                "update",
            ),
            ("", "secrets", "delete"),
            ("", "pods", "get"),
            ("coordination.k8s.io", "leases", "get"),
        ] {
            assert!(!allows(group, resource, verb), "{verb} {group}/{resource}");
        }
        for r in required_rules() {
            let mut sorted = r.verbs.clone();
            sorted.sort();
            assert_eq!(r.verbs, sorted);
        }
    }
}
