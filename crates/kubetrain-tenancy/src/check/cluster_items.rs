//! The cluster-wide items: risky runtimes, the image policy, secret management, clean-up rules.

use k8s_openapi::api::core::v1::ConfigMap;
use kubetrain_api::TrainingRuntimeSpec;
use serde_json::Value;

use super::namespace_items::list;
use super::{ClusterView, Item, Verdict, at, object_ref, str_at, unreadable};
use crate::policy::{CONFIGMAP_KEY, Subject, TrainingPolicy};
use crate::risk::runtime_risks;

/// The training policy in force: the first ConfigMap that holds a readable one, with its `namespace/name`;
/// the ConfigMaps whose policy does not parse are returned as evidence lines.
pub(super) fn training_policy(
    view: &ClusterView,
) -> (Option<(String, TrainingPolicy)>, Vec<String>) {
    let mut broken = Vec::new();
    let mut found = None;
    for cm in &view.training_policies {
        let name = configmap_ref(cm);
        let Some(text) = cm.data.as_ref().and_then(|d| d.get(CONFIGMAP_KEY)) else {
            broken.push(format!("ConfigMap {name} has no {CONFIGMAP_KEY} key"));
            continue;
        };
        match TrainingPolicy::from_yaml(text) {
            Ok(policy) if found.is_none() => found = Some((name, policy)),
            Ok(_) => {}
            Err(e) => broken.push(format!("ConfigMap {name}: {CONFIGMAP_KEY}: {e}")),
        }
    }
    (found, broken)
}

fn configmap_ref(cm: &ConfigMap) -> String {
    format!(
        "{}/{}",
        cm.metadata.namespace.as_deref().unwrap_or("?"),
        cm.metadata.name.as_deref().unwrap_or("?")
    )
}

const POLICY_FIX: &str = "put a TrainingPolicy in ConfigMap kubetrain-training-policy of the operator's namespace (docs/training-policy.md); the operator then refuses these settings at admission";

/// `runtimes`: no runtime gives pods privileged containers, host paths, the host network or devices unless
/// the training policy decides.
pub(super) fn runtimes(view: &ClusterView) -> Item {
    let mut item = Item::new(
        "runtimes",
        "Runtimes that allow privileged pods, host paths, host network or devices",
    );
    for kind in ["ClusterTrainingRuntime", "TrainingRuntime"] {
        if let Some(line) = unreadable(view, kind) {
            item.finding(Verdict::Warn, line, None);
        }
    }
    let (policy, broken) = training_policy(view);
    for line in broken {
        item.finding(
            Verdict::Warn,
            line,
            Some("fix the policy document (kubetrain validate --policy FILE)"),
        );
    }
    let mut clean = 0;
    for runtime in &view.runtimes {
        let kind = str_at(runtime, &["kind"]).unwrap_or("ClusterTrainingRuntime");
        let name = str_at(runtime, &["metadata", "name"]).unwrap_or("?");
        let label = format!("{kind} {}", object_ref(runtime));
        let spec = match runtime
            .get("spec")
            .map(|s| serde_json::from_value::<TrainingRuntimeSpec>(s.clone()))
        {
            Some(Ok(spec)) => spec,
            Some(Err(e)) => {
                item.finding(
                    Verdict::Warn,
                    format!("{label}: spec not readable: {e}"),
                    None,
                );
                continue;
            }
            None => continue,
        };
        let risks = runtime_risks(&spec);
        if risks.is_empty() {
            clean += 1;
            continue;
        }
        let mut subject = Subject::default().with_runtime(kind, name);
        subject.namespace = str_at(runtime, &["metadata", "namespace"]).map(str::to_owned);
        for risk in risks {
            let what = format!(
                "{label}: {} at {} ({})",
                risk.kind.as_str(),
                risk.path,
                risk.detail
            );
            match &policy {
                None => item.finding(
                    Verdict::Fail,
                    format!("{what}; no training policy refuses it"),
                    Some(POLICY_FIX),
                ),
                Some((source, p)) if p.allows(&risk, &subject) => item.finding(
                    Verdict::Warn,
                    format!("{what}; allowed by an exception of the policy in {source}"),
                    Some("review the policy's exceptions: keep only the runtimes that need this access"),
                ),
                Some((source, _)) => item.pass(format!(
                    "{what}; refused at admission by the policy in {source}"
                )),
            }
        }
    }
    item.pass(format!(
        "{clean} of {} runtime(s) ask for no privileged access",
        view.runtimes.len()
    ));
    item
}

/// Names of admission objects that enforce image rules: policy engines and signature verifiers.
const IMAGE_POLICY_HINTS: [&str; 10] = [
    "image",
    "registry",
    "kyverno",
    "gatekeeper",
    "sigstore",
    "cosign",
    "connaisseur",
    "ratify",
    "notation",
    "portieris",
];

/// `image-policy`: an image registry policy in force (the training policy's `spec.registries`, or an
/// admission policy or webhook that checks images).
pub(super) fn image_policy(view: &ClusterView) -> Item {
    let mut item = Item::new(
        "image-policy",
        "Image registry policy in force (registries, signatures or scanning at admission)",
    );
    let (policy, _) = training_policy(view);
    if let Some((source, policy)) = &policy {
        match &policy.spec.registries {
            Some(registries) => item.pass(format!(
                "training policy in {source} allows images from: {}",
                if registries.is_empty() {
                    "no registry".to_owned()
                } else {
                    registries.join(", ")
                }
            )),
            None => item.finding(
                Verdict::Warn,
                format!("training policy in {source} sets no spec.registries: any registry"),
                Some("list the allowed registries in the policy's spec.registries"),
            ),
        }
    }
    let admission = view
        .admission_policies
        .iter()
        .map(|p| ("ValidatingAdmissionPolicy", p))
        .chain(view.webhook_configurations.iter().map(|w| {
            (
                str_at(w, &["kind"]).unwrap_or("ValidatingWebhookConfiguration"),
                w,
            )
        }));
    let mut engines = Vec::new();
    for (kind, object) in admission {
        let text = format!(
            "{} {}",
            object_ref(object),
            object
                .get("webhooks")
                .map(Value::to_string)
                .unwrap_or_default()
        )
        .to_lowercase();
        if IMAGE_POLICY_HINTS.iter().any(|hint| text.contains(hint)) {
            engines.push(format!("{kind} {}", object_ref(object)));
        }
    }
    if !engines.is_empty() {
        item.pass(format!("admission checks images: {}", list(&engines)));
    }
    if policy.is_none() && engines.is_empty() {
        item.finding(
            Verdict::Warn,
            "no image policy found: no training policy with spec.registries, no admission policy or webhook that checks images",
            Some("set spec.registries in the training policy (docs/training-policy.md), or install a signature verifier (e.g. sigstore policy-controller, Kyverno verifyImages)"),
        );
    }
    item
}

/// Env names that hold credentials.
const SECRET_NAMES: [&str; 7] = [
    "PASSWORD",
    "TOKEN",
    "SECRET",
    "API_KEY",
    "ACCESS_KEY",
    "PRIVATE_KEY",
    "CREDENTIAL",
];

/// `secrets`: credentials come from Secrets, not literal env values; Secrets encrypted at rest when the API
/// server's flags are readable. Rotation stays the admin's job.
pub(super) fn secrets(view: &ClusterView) -> Item {
    let mut item = Item::new(
        "secrets",
        "Secret management: credentials from Secrets, encrypted at rest",
    );
    let mut literal = Vec::new();
    let mut referenced = std::collections::BTreeSet::new();
    for object in view.train_jobs.iter().chain(&view.runtimes) {
        let owner = format!(
            "{} {}",
            str_at(object, &["kind"]).unwrap_or("TrainJob"),
            object_ref(object)
        );
        if let Some(spec) = object.get("spec") {
            walk_secrets(spec, "spec", &owner, &mut literal, &mut referenced);
        }
    }
    for line in &literal {
        item.finding(
            Verdict::Fail,
            line.clone(),
            Some("move the credential into a Secret and reference it (env[].valueFrom.secretKeyRef), then rotate it"),
        );
    }
    if literal.is_empty() {
        item.pass("no credential-like env var holds a literal value in TrainJobs or runtimes");
    }
    if !referenced.is_empty() {
        let names: Vec<String> = referenced.into_iter().collect();
        item.pass(format!("Secrets referenced: {}", list(&names)));
    }
    match (&view.api_server, view.api_server.flag("encryption-provider-config")) {
        (_, Some(file)) => item.pass(format!("Secrets encrypted at rest (--encryption-provider-config {file})")),
        (super::ApiServerArgs::Read { source, .. }, None) => item.finding(
            Verdict::Warn,
            format!("{source}: no --encryption-provider-config, Secrets are stored unencrypted in etcd"),
            Some("configure encryption at rest for secrets (kube-apiserver --encryption-provider-config)"),
        ),
        (super::ApiServerArgs::Unknown { reason }, None) => {
            item.pass(format!("encryption at rest: unknown, because {reason}"));
        }
    }
    item
}

fn walk_secrets(
    value: &Value,
    path: &str,
    owner: &str,
    literal: &mut Vec<String>,
    referenced: &mut std::collections::BTreeSet<String>,
) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let child_path = format!("{path}.{key}");
                if matches!(key.as_str(), "secretKeyRef" | "secretRef")
                    && let Some(name) = str_at(child, &["name"])
                {
                    referenced.insert(name.to_owned());
                }
                if key == "secret"
                    && let Some(name) = str_at(child, &["secretName"])
                {
                    referenced.insert(name.to_owned());
                }
                if key == "env"
                    && let Some(env) = child.as_array()
                {
                    for (i, var) in env.iter().enumerate() {
                        let name = str_at(var, &["name"]).unwrap_or("");
                        let upper = name.to_uppercase();
                        let has_value = str_at(var, &["value"]).is_some_and(|v| !v.is_empty());
                        if has_value && SECRET_NAMES.iter().any(|s| upper.contains(s)) {
                            literal.push(format!(
                                "{owner}: {child_path}[{i}] ({name}) holds a literal value"
                            ));
                        }
                    }
                }
                walk_secrets(child, &child_path, owner, literal, referenced);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                walk_secrets(child, &format!("{path}[{i}]"), owner, literal, referenced);
            }
        }
        _ => {}
    }
}

/// The TTL of a runtime: `spec.runPolicy.ttlSecondsAfterFinished` (its TrainJobs' default).
fn runtime_ttl(runtime: &Value) -> Option<i64> {
    at(runtime, &["spec", "runPolicy", "ttlSecondsAfterFinished"]).and_then(Value::as_i64)
}

/// Whether a TrainJob is deleted after it finishes: its own `spec.ttlSecondsAfterFinished`, else its
/// runtime's default.
fn job_has_ttl(job: &Value, runtimes: &[Value]) -> bool {
    if at(job, &["spec", "ttlSecondsAfterFinished"]).is_some() {
        return true;
    }
    let kind = str_at(job, &["spec", "runtimeRef", "kind"]).unwrap_or("ClusterTrainingRuntime");
    let name = str_at(job, &["spec", "runtimeRef", "name"]);
    let namespace = str_at(job, &["metadata", "namespace"]);
    runtimes.iter().any(|r| {
        str_at(r, &["kind"]) == Some(kind)
            && str_at(r, &["metadata", "name"]) == name
            && (kind == "ClusterTrainingRuntime"
                || str_at(r, &["metadata", "namespace"]) == namespace)
            && runtime_ttl(r).is_some()
    })
}

/// Whether a TrainJob has finished (`Complete` or `Failed` condition true).
fn finished(job: &Value) -> bool {
    at(job, &["status", "conditions"])
        .and_then(Value::as_array)
        .is_some_and(|conditions| {
            conditions.iter().any(|c| {
                matches!(str_at(c, &["type"]), Some("Complete" | "Failed"))
                    && str_at(c, &["status"]) == Some("True")
            })
        })
}

/// `cleanup`: finished TrainJobs are deleted after a TTL (theirs or their runtime's). Scratch volumes,
/// checkpoints and logs stay the admin's job.
pub(super) fn cleanup(view: &ClusterView) -> Item {
    let mut item = Item::new("cleanup", "Clean-up rules: TTLs on TrainJobs and runtimes");
    let without: Vec<String> = view
        .runtimes
        .iter()
        .filter(|r| runtime_ttl(r).is_none())
        .map(object_ref)
        .collect();
    if without.is_empty() {
        item.pass(format!(
            "every runtime ({}) sets a TTL after finishing",
            view.runtimes.len()
        ));
    } else {
        item.finding(
            Verdict::Warn,
            format!("{} of {} runtime(s) set no TTL: {}", without.len(), view.runtimes.len(), list(&without)),
            Some("set spec.runPolicy.ttlSecondsAfterFinished on the runtimes (or spec.ttlSecondsAfterFinished on each TrainJob)"),
        );
    }
    let lingering: Vec<String> = view
        .train_jobs
        .iter()
        .filter(|job| finished(job) && !job_has_ttl(job, &view.runtimes))
        .map(object_ref)
        .collect();
    if lingering.is_empty() {
        item.pass("no finished TrainJob without a TTL");
    } else {
        item.finding(
            Verdict::Warn,
            format!(
                "finished TrainJobs kept without a TTL: {}",
                list(&lingering)
            ),
            Some("delete them (kubetrain delete NAME) and set spec.ttlSecondsAfterFinished (or the runtime's spec.runPolicy.ttlSecondsAfterFinished)"),
        );
    }
    item
}
