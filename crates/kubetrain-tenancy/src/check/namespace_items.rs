//! The items judged per team namespace: the namespace and its LocalQueue, RBAC, quotas and limit ranges,
//! Pod Security admission.

use std::collections::BTreeSet;

use k8s_openapi::api::rbac::v1::Subject;

use super::{
    ClusterView, Item, POD_SECURITY_ENFORCE, TEAM_LABEL, Verdict, object_ref, str_at, unreadable,
};

/// `team-namespaces`: a namespace per team, each with a Kueue LocalQueue of an existing ClusterQueue.
pub(super) fn team_namespaces(view: &ClusterView, teams: &BTreeSet<String>) -> Item {
    let mut item = Item::new(
        "team-namespaces",
        "A namespace per team, each with its Kueue LocalQueue",
    );
    if let Some(line) = unreadable(view, "LocalQueue") {
        item.finding(
            Verdict::Warn,
            line,
            Some("install Kueue (docs/kueue.md) or grant list on localqueues.kueue.x-k8s.io"),
        );
    }
    if teams.is_empty() {
        item.finding(
            Verdict::Warn,
            format!("no team namespace: none is labelled {TEAM_LABEL} and none holds a LocalQueue"),
            Some("onboard each team: kubetrain tenancy add-team NAME --group GROUP --apply"),
        );
    }
    let cluster_queues: BTreeSet<&str> = view
        .cluster_queues
        .iter()
        .filter_map(|cq| str_at(cq, &["metadata", "name"]))
        .collect();
    let cq_known = !view.unreadable.contains_key("ClusterQueue");
    for ns in teams {
        let queues: Vec<(&str, &str)> = view
            .local_queues
            .iter()
            .filter(|lq| str_at(lq, &["metadata", "namespace"]) == Some(ns))
            .map(|lq| {
                (
                    str_at(lq, &["metadata", "name"]).unwrap_or("?"),
                    str_at(lq, &["spec", "clusterQueue"]).unwrap_or(""),
                )
            })
            .collect();
        if queues.is_empty() {
            let fix = format!(
                "kubetrain tenancy add-team {ns} --apply (creates its ClusterQueue and LocalQueue)"
            );
            item.finding(Verdict::Fail, format!("{ns}: no LocalQueue"), Some(&fix));
        }
        for (name, cq) in queues {
            if cq_known && !cluster_queues.contains(cq) {
                let fix = format!(
                    "create ClusterQueue {cq:?} or point LocalQueue {ns}/{name} at an existing one"
                );
                item.finding(
                    Verdict::Fail,
                    format!("{ns}: LocalQueue {name} points at ClusterQueue {cq:?}, which does not exist"),
                    Some(&fix),
                );
            } else if let Some(why) = inactive(view, cq) {
                item.finding(
                    Verdict::Warn,
                    format!("{ns}: LocalQueue {name} -> ClusterQueue {cq}, which is not active: {why}"),
                    Some("fix the ClusterQueue (kubectl describe clusterqueue NAME): a missing ResourceFlavor is the usual cause"),
                );
            } else {
                item.pass(format!("{ns}: LocalQueue {name} -> ClusterQueue {cq}"));
            }
        }
    }
    // Outside every team namespace of the cluster, not only the ones judged (`--namespace`); TrainJobs in a
    // namespace being deleted are going away with it.
    let all_teams = super::team_namespaces(view);
    let terminating = super::terminating_namespaces(view);
    let outside: Vec<String> = view
        .train_jobs
        .iter()
        .filter(|job| {
            !str_at(job, &["metadata", "namespace"]).is_some_and(|ns| {
                teams.contains(ns) || all_teams.contains(ns) || terminating.contains(ns)
            })
        })
        .map(object_ref)
        .collect();
    if !outside.is_empty() {
        item.finding(
            Verdict::Warn,
            format!("TrainJobs outside team namespaces: {}", list(&outside)),
            Some("run TrainJobs in team namespaces only (label the namespace with kubetrain tenancy add-team)"),
        );
    }
    item
}

/// `rbac-groups`: team namespaces grant access to identity-provider groups, not to single users.
pub(super) fn rbac_groups(view: &ClusterView, teams: &BTreeSet<String>) -> Item {
    let mut item = Item::new(
        "rbac-groups",
        "RBAC bound to identity-provider groups, not to single users",
    );
    if let Some(line) = unreadable(view, "RoleBinding") {
        item.finding(
            Verdict::Warn,
            line,
            Some("run the check as a user who may list rolebindings"),
        );
        return item;
    }
    for ns in teams {
        let bindings: Vec<_> = view
            .role_bindings
            .iter()
            .filter(|rb| rb.metadata.namespace.as_deref() == Some(ns))
            .collect();
        let mut groups = BTreeSet::new();
        for rb in &bindings {
            let name = rb.metadata.name.as_deref().unwrap_or("?");
            for subject in rb.subjects.iter().flatten() {
                match subject.kind.as_str() {
                    "Group" => {
                        groups.insert(subject.name.clone());
                    }
                    "User" if !is_system(subject) => item.finding(
                        Verdict::Warn,
                        format!("{ns}: RoleBinding {name} binds the single user {}", subject.name),
                        Some("bind your identity provider's groups instead of users (kubetrain tenancy add-team NAME --group GROUP), then delete the user bindings"),
                    ),
                    _ => {}
                }
            }
        }
        if groups.is_empty() {
            let fix = format!("kubetrain tenancy add-team {ns} --group GROUP --apply");
            item.finding(
                Verdict::Fail,
                format!("{ns}: no RoleBinding grants a group access"),
                Some(&fix),
            );
        } else {
            let groups: Vec<String> = groups.into_iter().collect();
            item.pass(format!("{ns}: bound to group(s) {}", groups.join(", ")));
        }
    }
    for crb in &view.cluster_role_bindings {
        if crb.role_ref.name != "cluster-admin" {
            continue;
        }
        for subject in crb.subjects.iter().flatten() {
            if subject.kind == "User" && !is_system(subject) {
                item.finding(
                    Verdict::Warn,
                    format!(
                        "ClusterRoleBinding {} makes the single user {} cluster-admin",
                        crb.metadata.name.as_deref().unwrap_or("?"),
                        subject.name
                    ),
                    Some("give cluster-admin to an admin group of your identity provider, not to users"),
                );
            }
        }
    }
    item
}

/// Why ClusterQueue `name` is not active, when its `Active` condition says `False`.
fn inactive(view: &ClusterView, name: &str) -> Option<String> {
    let cq = view
        .cluster_queues
        .iter()
        .find(|cq| str_at(cq, &["metadata", "name"]) == Some(name))?;
    let conditions = super::at(cq, &["status", "conditions"])?.as_array()?;
    let active = conditions
        .iter()
        .find(|c| str_at(c, &["type"]) == Some("Active"))?;
    (str_at(active, &["status"]) == Some("False")).then(|| {
        str_at(active, &["message"])
            .or_else(|| str_at(active, &["reason"]))
            .unwrap_or("no reason given")
            .to_owned()
    })
}

fn is_system(subject: &Subject) -> bool {
    subject.name.starts_with("system:")
}

/// The resource names a ResourceQuota bounds, for each of the guide's four resources.
const QUOTA_RESOURCES: [(&str, &[&str]); 4] = [
    (
        "nvidia.com/gpu",
        &["requests.nvidia.com/gpu", "limits.nvidia.com/gpu"],
    ),
    ("cpu", &["cpu", "requests.cpu", "limits.cpu"]),
    ("memory", &["memory", "requests.memory", "limits.memory"]),
    ("storage", &["requests.storage"]),
];

/// `quotas`: every team namespace has a ResourceQuota for GPUs, CPU, memory and storage, and a LimitRange.
pub(super) fn quotas(view: &ClusterView, teams: &BTreeSet<String>) -> Item {
    let mut item = Item::new(
        "quotas",
        "ResourceQuota and LimitRange for nvidia.com/gpu, CPU, memory and storage",
    );
    for kind in ["ResourceQuota", "LimitRange"] {
        if let Some(line) = unreadable(view, kind) {
            item.finding(Verdict::Warn, line, None);
        }
    }
    for ns in teams {
        let hard: BTreeSet<String> = view
            .resource_quotas
            .iter()
            .filter(|q| q.metadata.namespace.as_deref() == Some(ns))
            .filter_map(|q| q.spec.as_ref()?.hard.as_ref())
            .flat_map(|hard| hard.keys().cloned())
            .collect();
        let covered = |names: &[&str], resource: &str| {
            names.iter().any(|n| hard.contains(*n))
                || (resource == "storage"
                    && hard
                        .iter()
                        .any(|k| k.ends_with(".storageclass.storage.k8s.io/requests.storage")))
        };
        let missing: Vec<&str> = QUOTA_RESOURCES
            .iter()
            .filter(|(resource, names)| !covered(names, resource))
            .map(|(resource, _)| *resource)
            .collect();
        let fix = format!(
            "kubetrain tenancy add-team {ns} --gpus N --cpu Q --memory Q --storage Q --apply (or add the missing resources to its ResourceQuota)"
        );
        if hard.is_empty() {
            item.finding(Verdict::Fail, format!("{ns}: no ResourceQuota"), Some(&fix));
        } else if !missing.is_empty() {
            item.finding(
                Verdict::Fail,
                format!(
                    "{ns}: the ResourceQuota does not bound {}",
                    missing.join(", ")
                ),
                Some(&fix),
            );
        } else {
            item.pass(format!(
                "{ns}: ResourceQuota bounds nvidia.com/gpu, cpu, memory and storage"
            ));
        }
        let limited = view.limit_ranges.iter().any(|lr| {
            lr.metadata.namespace.as_deref() == Some(ns)
                && lr.spec.as_ref().is_some_and(|s| {
                    s.limits.iter().any(|l| {
                        l.type_ == "Container"
                            && [&l.default_request, &l.default, &l.max]
                                .iter()
                                .any(|m| m.as_ref().is_some_and(|m| !m.is_empty()))
                    })
                })
        });
        if limited {
            item.pass(format!(
                "{ns}: LimitRange gives containers defaults or bounds"
            ));
        } else {
            let fix = format!(
                "kubetrain tenancy add-team {ns} --apply (creates LimitRange kubetrain-team)"
            );
            item.finding(
                Verdict::Warn,
                format!(
                    "{ns}: no LimitRange for containers (pods without requests fail the quota)"
                ),
                Some(&fix),
            );
        }
    }
    item
}

/// `pod-security`: every team namespace enforces Pod Security `baseline` or `restricted`.
pub(super) fn pod_security(view: &ClusterView, teams: &BTreeSet<String>) -> Item {
    let mut item = Item::new(
        "pod-security",
        "Pod Security admission enforces baseline or restricted in team namespaces",
    );
    for ns in teams {
        let level = view
            .namespaces
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(ns))
            .and_then(|n| {
                n.metadata
                    .labels
                    .as_ref()?
                    .get(POD_SECURITY_ENFORCE)
                    .cloned()
            });
        let fix =
            format!("kubectl label namespace {ns} {POD_SECURITY_ENFORCE}=baseline --overwrite");
        match level.as_deref() {
            Some(level @ ("baseline" | "restricted")) => {
                item.pass(format!("{ns}: enforce={level}"));
            }
            Some(other) => item.finding(
                Verdict::Fail,
                format!("{ns}: enforce={other} admits privileged pods"),
                Some(&fix),
            ),
            None => item.finding(
                Verdict::Fail,
                format!("{ns}: no {POD_SECURITY_ENFORCE} label (the cluster default applies, privileged unless configured)"),
                Some(&fix),
            ),
        }
    }
    item
}

/// `a, b, c` for up to 5 entries, then `and N more`.
pub(super) fn list(names: &[String]) -> String {
    const SHOWN: usize = 5;
    if names.len() <= SHOWN {
        names.join(", ")
    } else {
        format!(
            "{}, and {} more",
            names[..SHOWN].join(", "),
            names.len() - SHOWN
        )
    }
}
