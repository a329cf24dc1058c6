//! Table tests: each item passes on what `add-team` creates, and each change below turns one item to warn or
//! fail with its evidence and fix.

use serde_json::{Value, json};

use super::*;
use crate::team::{TeamSpec, team_objects};

fn typed<T: serde::de::DeserializeOwned>(value: &Value) -> T {
    serde_json::from_value(value.clone()).unwrap()
}

/// The cluster after `add-team team-a --group ml-team-a`, with an audit policy, a clean runtime and a TrainJob.
fn good_view() -> ClusterView {
    let mut spec = TeamSpec::new("team-a");
    spec.groups = vec!["ml-team-a".into()];
    let mut view = ClusterView::default();
    for object in team_objects(&spec).unwrap() {
        let v = &object.value;
        match object.kind() {
            "Namespace" => view.namespaces.push(typed(v)),
            "RoleBinding" => view.role_bindings.push(typed(v)),
            "ClusterRoleBinding" => view.cluster_role_bindings.push(typed(v)),
            "ResourceQuota" => view.resource_quotas.push(typed(v)),
            "LimitRange" => view.limit_ranges.push(typed(v)),
            "NetworkPolicy" => view.network_policies.push(typed(v)),
            "LocalQueue" => view.local_queues.push(v.clone()),
            "ClusterQueue" => view.cluster_queues.push(v.clone()),
            _ => {}
        }
    }
    view.network_policies.push(typed(&json!({
        "metadata": {"name": "kubetrain-operator-webhook", "namespace": "kubeflow-system"},
        "spec": {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "kubetrain-operator"}},
                 "policyTypes": ["Ingress"]},
    })));
    view.runtimes.push(runtime(
        json!({"image": "ghcr.io/kubeflow/trainer/torch:1"}),
        Some(3600),
    ));
    view.train_jobs.push(json!({
        "kind": "TrainJob",
        "metadata": {"name": "mnist", "namespace": "team-a"},
        "spec": {"runtimeRef": {"name": "torch"}, "ttlSecondsAfterFinished": 600,
                 "trainer": {"env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]}},
    }));
    view.training_policies.push(typed(&json!({
        "metadata": {"name": TRAINING_POLICY_CONFIGMAP, "namespace": "kubeflow-system"},
        "data": {"policy.yaml": "apiVersion: kubetrain.dev/v1alpha1\nkind: TrainingPolicy\nspec:\n  registries: [ghcr.io/kubeflow/]\n"},
    })));
    view.api_server = ApiServerArgs::Read {
        source: "pod kube-system/kube-apiserver-cp".into(),
        args: vec![
            "kube-apiserver".into(),
            "--audit-log-path=/var/log/audit.log".into(),
            "--audit-policy-file".into(),
            "/etc/kubernetes/audit.yaml".into(),
            "--encryption-provider-config=/etc/kubernetes/enc.yaml".into(),
        ],
    };
    view.audit_policy = Some(AuditPolicySource {
        source: "audit.yaml".into(),
        policy: json!({"rules": [
            {"level": "Metadata", "resources": [{"group": "", "resources": ["secrets"]}]},
            {"level": "RequestResponse", "verbs": ["create"], "resources": [{"group": "trainer.kubeflow.org", "resources": ["trainjobs"]}]},
            {"level": "None"},
        ]}),
    });
    view
}

/// A ClusterTrainingRuntime `torch` whose node container is `container` (merged over name and image).
fn runtime(container: Value, ttl: Option<i64>) -> Value {
    let mut c = json!({"name": "node", "image": "ghcr.io/kubeflow/trainer/torch:1"});
    for (k, v) in container.as_object().unwrap() {
        c[k] = v.clone();
    }
    let mut r = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "torch"},
        "spec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {"containers": [c]}}}}}]}}},
    });
    if let Some(ttl) = ttl {
        r["spec"]["runPolicy"] = json!({"ttlSecondsAfterFinished": ttl});
    }
    r
}

#[test]
fn what_add_team_creates_passes_every_item() {
    let report = check(&good_view());
    for item in &report.items {
        assert_eq!(item.verdict, Verdict::Pass, "{item:#?}");
        assert!(item.fix.is_none());
    }
    assert_eq!(report.team_namespaces, ["team-a"]);
    assert_eq!(report.exit_code(), 0);
    assert_eq!(report.items.len(), 10);
    assert_eq!(
        report.summary,
        Summary {
            pass: 10,
            warn: 0,
            fail: 0
        }
    );
}

/// One row: a change to the good view, the item it affects, the verdict, a piece of evidence and of the fix.
struct Case {
    name: &'static str,
    change: fn(&mut ClusterView),
    item: &'static str,
    verdict: Verdict,
    evidence: &'static str,
    fix: &'static str,
}

fn remove_kind(view: &mut ClusterView, name: &str) {
    view.network_policies
        .retain(|np| np.metadata.name.as_deref() != Some(name));
}

const CASES: &[Case] = &[
    Case {
        name: "no LocalQueue in a labelled namespace",
        change: |v| v.local_queues.clear(),
        item: "team-namespaces",
        verdict: Verdict::Fail,
        evidence: "team-a: no LocalQueue",
        fix: "kubetrain tenancy add-team team-a --apply",
    },
    Case {
        name: "LocalQueue of a missing ClusterQueue",
        change: |v| v.cluster_queues.clear(),
        item: "team-namespaces",
        verdict: Verdict::Fail,
        evidence: "points at ClusterQueue \"team-a\", which does not exist",
        fix: "create ClusterQueue \"team-a\"",
    },
    Case {
        name: "inactive ClusterQueue",
        change: |v| {
            v.cluster_queues[0]["status"] = json!({"conditions": [
                {"type": "Active", "status": "False", "reason": "FlavorNotFound", "message": "Can't admit new workloads: references missing ResourceFlavor(s): default-flavor."}
            ]})
        },
        item: "team-namespaces",
        verdict: Verdict::Warn,
        evidence: "which is not active: Can't admit new workloads: references missing ResourceFlavor(s)",
        fix: "a missing ResourceFlavor is the usual cause",
    },
    Case {
        name: "TrainJob outside team namespaces",
        change: |v| {
            v.train_jobs
                .push(json!({"metadata": {"name": "x", "namespace": "default"}}))
        },
        item: "team-namespaces",
        verdict: Verdict::Warn,
        evidence: "TrainJobs outside team namespaces: default/x",
        fix: "run TrainJobs in team namespaces only",
    },
    Case {
        name: "no group binding",
        change: |v| v.role_bindings.clear(),
        item: "rbac-groups",
        verdict: Verdict::Fail,
        evidence: "team-a: no RoleBinding grants a group access",
        fix: "kubetrain tenancy add-team team-a --group GROUP --apply",
    },
    Case {
        name: "a user bound",
        change: |v| {
            v.role_bindings[0].subjects.as_mut().unwrap().push(
                k8s_openapi::api::rbac::v1::Subject {
                    kind: "User".into(),
                    name: "alice@example.com".into(),
                    ..Default::default()
                },
            )
        },
        item: "rbac-groups",
        verdict: Verdict::Warn,
        evidence: "binds the single user alice@example.com",
        fix: "bind your identity provider's groups",
    },
    Case {
        name: "quota removed",
        change: |v| v.resource_quotas.clear(),
        item: "quotas",
        verdict: Verdict::Fail,
        evidence: "team-a: no ResourceQuota",
        fix: "kubetrain tenancy add-team team-a --gpus N",
    },
    Case {
        name: "quota without GPUs and storage",
        change: |v| {
            let hard = v.resource_quotas[0]
                .spec
                .as_mut()
                .unwrap()
                .hard
                .as_mut()
                .unwrap();
            hard.remove("requests.nvidia.com/gpu");
            hard.remove("requests.storage");
        },
        item: "quotas",
        verdict: Verdict::Fail,
        evidence: "team-a: the ResourceQuota does not bound nvidia.com/gpu, storage",
        fix: "add the missing resources",
    },
    Case {
        name: "no LimitRange",
        change: |v| v.limit_ranges.clear(),
        item: "quotas",
        verdict: Verdict::Warn,
        evidence: "team-a: no LimitRange for containers",
        fix: "creates LimitRange kubetrain-team",
    },
    Case {
        name: "no Pod Security label",
        change: |v| {
            v.namespaces[0]
                .metadata
                .labels
                .as_mut()
                .unwrap()
                .remove(POD_SECURITY_ENFORCE);
        },
        item: "pod-security",
        verdict: Verdict::Fail,
        evidence: "team-a: no pod-security.kubernetes.io/enforce label",
        fix: "kubectl label namespace team-a pod-security.kubernetes.io/enforce=baseline --overwrite",
    },
    Case {
        name: "privileged level",
        change: |v| {
            v.namespaces[0]
                .metadata
                .labels
                .as_mut()
                .unwrap()
                .insert(POD_SECURITY_ENFORCE.into(), "privileged".into());
        },
        item: "pod-security",
        verdict: Verdict::Fail,
        evidence: "team-a: enforce=privileged admits privileged pods",
        fix: "enforce=baseline",
    },
    Case {
        name: "privileged runtime, no policy",
        change: |v| {
            v.training_policies.clear();
            v.admission_policies
                .push(json!({"metadata": {"name": "image-registries"}}));
            v.runtimes = vec![runtime(
                json!({"securityContext": {"privileged": true}}),
                Some(1),
            )];
        },
        item: "runtimes",
        verdict: Verdict::Fail,
        evidence: "ClusterTrainingRuntime torch: privileged at spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].securityContext.privileged",
        fix: "put a TrainingPolicy in ConfigMap kubetrain-training-policy",
    },
    Case {
        name: "privileged runtime allowed by an exception",
        change: |v| {
            v.training_policies[0].data.as_mut().unwrap().insert(
                "policy.yaml".into(),
                "apiVersion: kubetrain.dev/v1alpha1\nkind: TrainingPolicy\nspec:\n  registries: [ghcr.io/]\n  exceptions:\n    - runtimes: [{name: torch}]\n      allow: {privileged: true}\n".into(),
            );
            v.runtimes = vec![runtime(
                json!({"securityContext": {"privileged": true}}),
                Some(1),
            )];
        },
        item: "runtimes",
        verdict: Verdict::Warn,
        evidence: "allowed by an exception of the policy in kubeflow-system/kubetrain-training-policy",
        fix: "review the policy's exceptions",
    },
    Case {
        name: "no image policy",
        change: |v| v.training_policies.clear(),
        item: "image-policy",
        verdict: Verdict::Warn,
        evidence: "no image policy found",
        fix: "set spec.registries in the training policy",
    },
    Case {
        name: "no default deny",
        change: |v| {
            remove_kind(v, "kubetrain-default-deny");
            remove_kind(v, "kubetrain-training");
        },
        item: "network-policies",
        verdict: Verdict::Fail,
        evidence: "team-a: no default deny for ingress and egress",
        fix: "creates the default-deny and training NetworkPolicies",
    },
    Case {
        name: "default deny without the training allowances",
        change: |v| remove_kind(v, "kubetrain-training"),
        item: "network-policies",
        verdict: Verdict::Warn,
        evidence: "team-a: the operator's status server (port 10443) is not allowed out",
        fix: "kubetrain tenancy add-team team-a --apply",
    },
    Case {
        name: "operator ports open",
        change: |v| remove_kind(v, "kubetrain-operator-webhook"),
        item: "network-policies",
        verdict: Verdict::Warn,
        evidence: "no NetworkPolicy limits who reaches the operator's webhook (9443)",
        fix: "examples/manifests/deploy/networkpolicy.yaml",
    },
    Case {
        name: "API server without an audit log",
        change: |v| {
            v.api_server = ApiServerArgs::Read {
                source: "pod kube-system/kube-apiserver-cp".into(),
                args: vec!["--encryption-provider-config=/e".into()],
            }
        },
        item: "audit",
        verdict: Verdict::Fail,
        evidence: "the API server audits nothing",
        fix: "--audit-policy-file FILE and --audit-log-path PATH",
    },
    Case {
        name: "policy that skips TrainJobs",
        change: |v| {
            v.audit_policy.as_mut().unwrap().policy["rules"]
                .as_array_mut()
                .unwrap()
                .remove(1);
        },
        item: "audit",
        verdict: Verdict::Fail,
        evidence: "audit.yaml: TrainJob creation is not logged",
        fix: "log TrainJob create and Secret get/list",
    },
    Case {
        name: "audit policy unknown",
        change: |v| {
            v.audit_policy = None;
            v.api_server = ApiServerArgs::Unknown {
                reason: "no kube-apiserver pod in kube-system".into(),
            };
        },
        item: "audit",
        verdict: Verdict::Warn,
        evidence: "the audit policy: unknown, because it is a file on the control plane",
        fix: "kubetrain tenancy check --audit-policy FILE",
    },
    Case {
        name: "literal token",
        change: |v| {
            v.train_jobs[0]["spec"]["trainer"]["env"] =
                json!([{"name": "WANDB_API_KEY", "value": "abc"}])
        },
        item: "secrets",
        verdict: Verdict::Fail,
        evidence: "TrainJob team-a/mnist: spec.trainer.env[0] (WANDB_API_KEY) holds a literal value",
        fix: "move the credential into a Secret",
    },
    Case {
        name: "no encryption at rest",
        change: |v| {
            v.api_server = ApiServerArgs::Read {
                source: "pod kube-system/kube-apiserver-cp".into(),
                args: vec!["--audit-log-path=/a".into()],
            }
        },
        item: "secrets",
        verdict: Verdict::Warn,
        evidence: "no --encryption-provider-config",
        fix: "configure encryption at rest",
    },
    Case {
        name: "runtime without TTL",
        change: |v| v.runtimes = vec![runtime(json!({}), None)],
        item: "cleanup",
        verdict: Verdict::Warn,
        evidence: "1 of 1 runtime(s) set no TTL: torch",
        fix: "set spec.runPolicy.ttlSecondsAfterFinished",
    },
    Case {
        name: "finished TrainJob without TTL, its runtime's TTL missing too",
        change: |v| {
            let job = &mut v.train_jobs[0];
            job["spec"]
                .as_object_mut()
                .unwrap()
                .remove("ttlSecondsAfterFinished");
            job["status"] = json!({"conditions": [{"type": "Complete", "status": "True"}]});
            v.runtimes[0]["spec"]
                .as_object_mut()
                .unwrap()
                .remove("runPolicy");
        },
        item: "cleanup",
        verdict: Verdict::Warn,
        evidence: "finished TrainJobs kept without a TTL: team-a/mnist",
        fix: "set spec.ttlSecondsAfterFinished",
    },
];

#[test]
fn each_change_turns_its_item_with_evidence_and_fix() {
    for case in CASES {
        let mut view = good_view();
        (case.change)(&mut view);
        let report = check(&view);
        let item = report.item(case.item).unwrap();
        assert_eq!(item.verdict, case.verdict, "{}: {item:#?}", case.name);
        assert!(
            item.evidence.iter().any(|e| e.contains(case.evidence)),
            "{}: evidence {:?} not in {item:#?}",
            case.name,
            case.evidence
        );
        let fix = item.fix.as_deref().unwrap_or_default();
        assert!(
            fix.contains(case.fix),
            "{}: fix {:?} not in {fix:?}",
            case.name,
            case.fix
        );
        for other in report.items.iter().filter(|i| i.id != case.item) {
            assert_eq!(other.verdict, Verdict::Pass, "{}: {other:#?}", case.name);
        }
        assert_eq!(
            report.exit_code(),
            u8::from(case.verdict == Verdict::Fail),
            "{}",
            case.name
        );
    }
}

#[test]
fn a_finished_trainjob_is_cleaned_up_by_its_runtimes_ttl() {
    let mut view = good_view();
    let job = &mut view.train_jobs[0];
    job["spec"]
        .as_object_mut()
        .unwrap()
        .remove("ttlSecondsAfterFinished");
    job["status"] = json!({"conditions": [{"type": "Failed", "status": "True"}]});
    let cleanup = check(&view).item("cleanup").unwrap().clone();
    assert_eq!(cleanup.verdict, Verdict::Pass, "{cleanup:#?}");
}

#[test]
fn namespaces_with_local_queues_are_team_namespaces() {
    let mut view = ClusterView::default();
    view.local_queues.push(
        json!({"metadata": {"name": "q", "namespace": "research"}, "spec": {"clusterQueue": "cq"}}),
    );
    let report = check(&view);
    assert_eq!(report.team_namespaces, ["research"]);
    let quotas = report.item("quotas").unwrap();
    assert_eq!(quotas.verdict, Verdict::Fail);
    assert!(
        quotas
            .evidence
            .contains(&"research: no ResourceQuota".to_owned())
    );
}

#[test]
fn namespaces_being_deleted_are_not_judged() {
    let mut view = good_view();
    view.namespaces[0].status = Some(k8s_openapi::api::core::v1::NamespaceStatus {
        phase: Some("Terminating".into()),
        ..Default::default()
    });
    let report = check(&view);
    assert!(report.team_namespaces.is_empty());
    assert_eq!(
        report.item("quotas").unwrap().evidence,
        ["no team namespace to judge"]
    );
}

/// A TrainJob left in a namespace being deleted (the e2e suite's finished scenarios) goes away with it: no
/// "outside team namespaces" warning for it.
#[test]
fn trainjobs_in_namespaces_being_deleted_are_not_outside_the_teams() {
    let mut view = good_view();
    view.namespaces.push(typed(&json!({
        "metadata": {"name": "leftover"},
        "status": {"phase": "Terminating"},
    })));
    view.train_jobs
        .push(json!({"metadata": {"name": "x", "namespace": "leftover"}}));
    let report = check(&view);
    let item = report.item("team-namespaces").unwrap();
    assert_eq!(item.verdict, Verdict::Pass, "{:?}", item.evidence);
}

#[test]
fn unreadable_lists_are_unknown_not_pass() {
    let mut view = ClusterView::default();
    view.unreadable.insert(
        "LocalQueue".into(),
        "the server has no kueue.x-k8s.io/v1beta2 (Kueue is not installed)".into(),
    );
    view.unreadable
        .insert("RoleBinding".into(), "forbidden".into());
    let report = check(&view);
    let teams = report.item("team-namespaces").unwrap();
    assert_eq!(teams.verdict, Verdict::Warn);
    assert!(teams.evidence[0].starts_with("LocalQueues: unknown, because the server has no"));
    assert_eq!(
        report.item("rbac-groups").unwrap().evidence,
        ["RoleBindings: unknown, because forbidden"]
    );
}

#[test]
fn json_field_names_are_stable() {
    let mut view = good_view();
    view.resource_quotas.clear();
    let json = serde_json::to_value(check(&view)).unwrap();
    assert_eq!(json["verdict"], "fail");
    assert_eq!(json["summary"], json!({"pass": 9, "warn": 0, "fail": 1}));
    assert_eq!(json["teamNamespaces"], json!(["team-a"]));
    let quotas = &json["items"][2];
    assert_eq!(quotas["id"], "quotas");
    assert_eq!(quotas["verdict"], "fail");
    assert_eq!(quotas["evidence"][0], "team-a: no ResourceQuota");
    assert!(
        quotas["fix"]
            .as_str()
            .unwrap()
            .starts_with("kubetrain tenancy add-team team-a")
    );
    assert!(
        json["items"][0].get("fix").is_none(),
        "no fix key on a pass"
    );
    let back: Report = serde_json::from_value(json).unwrap();
    assert_eq!(back.exit_code(), 1);
}

#[test]
fn text_and_html_show_each_item_with_its_fix() {
    let mut view = good_view();
    view.resource_quotas.clear();
    view.train_jobs
        .push(json!({"metadata": {"name": "<b>x</b>", "namespace": "default"}}));
    let report = check(&view);
    let text = report.to_text();
    assert!(
        text.contains("FAIL  quotas  ResourceQuota and LimitRange"),
        "{text}"
    );
    assert!(
        text.contains("      - team-a: no ResourceQuota\n"),
        "{text}"
    );
    assert!(
        text.contains("      fix: kubetrain tenancy add-team team-a --gpus N"),
        "{text}"
    );
    assert!(text.ends_with("FAIL: 8 pass, 1 warn, 1 fail\n"), "{text}");
    let html = report.to_html("https://127.0.0.1:6443");
    assert!(html.contains("id=\"verdict\" class=\"banner fail\">FAIL"));
    assert!(html.contains("<tr id=\"item-quotas\" class=\"fail\">"));
    assert!(html.contains("default/&lt;b&gt;x&lt;/b&gt;"), "escaped");
    assert!(!html.contains("<script") && !html.contains("http://"));
}

#[test]
fn api_server_flags_read_both_spellings() {
    let args = ApiServerArgs::Read {
        source: "x".into(),
        args: vec!["--a=1".into(), "--b".into(), "2".into(), "--ab=3".into()],
    };
    assert_eq!(args.flag("a"), Some("1"));
    assert_eq!(args.flag("b"), Some("2"));
    assert_eq!(args.flag("ab"), Some("3"));
    assert_eq!(args.flag("c"), None);
    assert_eq!(ApiServerArgs::default().flag("a"), None);
}

#[test]
fn audit_rules_match_in_order_and_skip_restricted_ones() {
    let policy = json!({"rules": [
        {"level": "None", "users": ["system:kube-proxy"]},
        {"level": "None", "verbs": ["watch"]},
        {"level": "Request", "resources": [{"group": "trainer.kubeflow.org"}]},
        {"level": "Metadata", "resources": [{"group": "", "resources": ["secrets/*"]}]},
    ]});
    assert_eq!(
        audit_level(&policy, "create", "trainer.kubeflow.org", "trainjobs"),
        AuditLevel::Request
    );
    assert_eq!(
        audit_level(&policy, "watch", "trainer.kubeflow.org", "trainjobs"),
        AuditLevel::None
    );
    assert_eq!(
        audit_level(&policy, "get", "", "secrets"),
        AuditLevel::Metadata
    );
    assert_eq!(
        audit_level(&policy, "get", "", "configmaps"),
        AuditLevel::None
    );
}
