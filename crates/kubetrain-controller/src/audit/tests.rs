use serde_json::json;

use super::*;

fn job(spec: serde_json::Value) -> TrainJob {
    serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "j", "namespace": "team-a"},
        "spec": spec,
    }))
    .unwrap()
}

#[test]
fn actions_are_written_in_kebab_case_with_every_field() {
    let table = [
        (AuditAction::Submit, "submit"),
        (AuditAction::Admit, "admit"),
        (AuditAction::Deny, "deny"),
        (AuditAction::RuntimeChange, "runtime-change"),
        (AuditAction::SecretReference, "secret-reference"),
    ];
    for (action, name) in table {
        let line = AuditLine::new(action, "TrainJob", Some("team-a"), "j", "alice");
        let value = serde_json::to_value(&line).unwrap();
        assert_eq!(value["action"], name);
        let keys: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "action",
                "details",
                "kind",
                "name",
                "namespace",
                "time",
                "user"
            ]
        );
        assert!(value["time"].as_str().unwrap().ends_with('Z'), "{value}");
    }
    let cluster = AuditLine::new(
        AuditAction::RuntimeChange,
        "ClusterTrainingRuntime",
        None,
        "rt",
        "admin",
    );
    assert!(
        serde_json::to_value(&cluster)
            .unwrap()
            .get("namespace")
            .is_none()
    );
}

#[test]
fn lines_are_one_json_object_each() {
    let (log, buffer) = AuditLog::in_memory();
    log.record(&AuditLine::new(
        AuditAction::Submit,
        "TrainJob",
        Some("a"),
        "x",
        "u",
    ));
    log.record(
        &AuditLine::new(AuditAction::Deny, "TrainJob", Some("a"), "x", "u")
            .with_details(json!({"reasons": ["spec.trainer.image: no"]})),
    );
    let lines = buffer.lines();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["details"]["reasons"][0], "spec.trainer.image: no");
}

#[test]
fn a_file_log_is_appended_to() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    std::fs::write(&path, "{\"old\":true}\n").unwrap();
    let log = AuditLog::open(&path).unwrap();
    log.record(&AuditLine::new(
        AuditAction::Admit,
        "TrainJob",
        Some("a"),
        "x",
        "u",
    ));
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(AuditLog::open(&dir.path().join("missing/dir/file")).is_err());
}

#[test]
fn secret_references_name_the_secret_and_the_field_never_a_value() {
    let job = job(json!({
        "runtimeRef": {"name": "rt"},
        "initializer": {"dataset": {"storageUri": "hf://x/y", "secretRef": {"name": "hf-token"}}},
        "trainer": {"env": [
            {"name": "PLAIN", "value": "hunter2"},
            {"name": "WANDB", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}}
        ]},
        "runtimePatches": [{"manager": "user", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": {"spec": {
                "volumes": [{"name": "creds", "secret": {"secretName": "s3-creds"}}],
                "imagePullSecrets": [{"name": "registry"}]
            }}}}}
        ]}}}}]
    }));
    let mut runtime = TrainingRuntimeSpec::default();
    let mut replicated = kubetrain_api::jobset::ReplicatedJob {
        name: "node".into(),
        ..Default::default()
    };
    replicated.pod_spec_mut().containers.push(
        serde_json::from_value(json!({
            "name": "node",
            "envFrom": [{"secretRef": {"name": "shared-env"}}]
        }))
        .unwrap(),
    );
    runtime.template.spec.replicated_jobs.push(replicated);

    let found = trainjob_secrets(&job, Some(("ClusterTrainingRuntime", "rt", &runtime)));
    let pairs: Vec<(&str, &str)> = found
        .iter()
        .map(|r| (r.secret.as_str(), r.path.as_str()))
        .collect();
    assert_eq!(
        pairs,
        [
            ("hf-token", "spec.initializer.dataset.secretRef"),
            (
                "registry",
                "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec.imagePullSecrets[0]"
            ),
            (
                "s3-creds",
                "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec.volumes[0].secret.secretName"
            ),
            (
                "shared-env",
                "ClusterTrainingRuntime/rt:spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].envFrom[0].secretRef"
            ),
            ("wandb", "spec.trainer.env[1].valueFrom.secretKeyRef"),
        ],
        "sorted by Secret name"
    );
    let text = serde_json::to_string(&found).unwrap();
    assert!(
        !text.contains("hunter2") && !text.contains("api-key"),
        "{text}"
    );
}

#[test]
fn projected_secrets_and_init_containers_count() {
    let spec: PodSpec = serde_json::from_value(json!({
        "initContainers": [{"name": "i", "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "tok", "key": "k"}}}]}],
        "containers": [{"name": "c"}],
        "volumes": [{"name": "p", "projected": {"sources": [{"configMap": {"name": "cm"}}, {"secret": {"name": "proj"}}]}}]
    }))
    .unwrap();
    let found = pod_spec_secrets(&spec, "spec");
    let paths: Vec<&str> = found.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "spec.volumes[0].projected.sources[1].secret",
            "spec.initContainers[0].env[0].valueFrom.secretKeyRef"
        ]
    );
}
