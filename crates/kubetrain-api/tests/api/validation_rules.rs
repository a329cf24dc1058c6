//! One table row per CEL rule and per webhook rule: accepted and rejected cases with upstream's paths, messages
//! and boundary values.

use kubetrain_api::validation::{validate_document, validate_trainjob_update};
use kubetrain_api::{Document, ParseError, RuntimeCatalog, TrainJob, parse_documents};

const TORCH_RUNTIME: &str = r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: torch-distributed}
spec:
  mlPolicy: {numNodes: 1, torch: {}}
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
            spec:
              template:
                spec:
                  containers: [{name: node, image: pytorch}]
"#;

const INIT_RUNTIME: &str = r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: torchtune-llama3.2-1b}
spec:
  mlPolicy: {numNodes: 1, torch: {}}
  template:
    spec:
      replicatedJobs:
        - name: dataset-initializer
          template:
            metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: dataset-initializer}}
            spec:
              template:
                spec:
                  containers: [{name: dataset-initializer, image: init, volumeMounts: [{name: initializer, mountPath: /workspace}]}]
        - name: model-initializer
          template:
            metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: model-initializer}}
            spec:
              template:
                spec:
                  containers: [{name: model-initializer, image: init}]
        - name: node
          template:
            metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
            spec:
              template:
                spec:
                  containers: [{name: node, image: tune, resources: {limits: {nvidia.com/gpu: 2}}}]
"#;

fn runtime_with(name: &str, ml_policy: &str, extra_spec: &str) -> String {
    format!(
        r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {{name: {name}}}
spec:
  mlPolicy: {ml_policy}
  {extra_spec}
  template:
    spec:
      replicatedJobs:
        - name: launcher
          template:
            metadata: {{labels: {{trainer.kubeflow.org/trainjob-ancestor-step: trainer}}}}
            spec:
              template:
                spec:
                  containers: [{{name: node, image: x}}]
        - name: node
          template:
            spec:
              template:
                spec:
                  initContainers: [{{name: flux-installer, image: z}}]
                  containers: [{{name: node, image: x}}]
"#
    )
}

fn job(spec: &str) -> String {
    format!(
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: job}}\nspec:\n{spec}\n"
    )
}

/// Parses every document, puts the runtimes in a catalog and validates everything.
fn findings(documents: &[&str]) -> Vec<String> {
    let text = documents.join("\n---\n");
    let parsed = match parse_documents(&text) {
        Ok(parsed) => parsed,
        Err(ParseError::Fields(errors)) => return errors.iter().map(ToString::to_string).collect(),
        Err(other) => return vec![other.to_string()],
    };
    let mut catalog = RuntimeCatalog::new();
    for doc in &parsed {
        catalog.add_document(&doc.document);
    }
    parsed
        .iter()
        .flat_map(|d| validate_document(&d.document, &catalog))
        .map(|e| {
            if e.is_error() {
                e.to_string()
            } else {
                format!("warning: {e}")
            }
        })
        .collect()
}

fn assert_rejected(documents: &[&str], expected: &str) {
    let found = findings(documents);
    assert!(
        found.iter().any(|f| f.contains(expected)),
        "expected {expected:?} in {found:#?}"
    );
}

fn assert_accepted(documents: &[&str]) {
    let found: Vec<String> = findings(documents)
        .into_iter()
        .filter(|f| !f.starts_with("warning:"))
        .collect();
    assert!(found.is_empty(), "expected no errors, got {found:#?}");
}

#[test]
fn resource_quantities_are_refused_with_their_path_when_no_pod_could_use_them() {
    let with = |resources: &str| {
        job(&format!(
            "  runtimeRef: {{name: torch-distributed}}\n  trainer: {{resourcesPerNode: {resources}}}"
        ))
    };
    for (resources, expected) in [
        (
            "{requests: {cpu: '-1'}}",
            "spec.trainer.resourcesPerNode.requests[cpu]: Invalid value: \"-1\": must be greater than or equal to 0",
        ),
        (
            "{limits: {memory: '-2Gi'}}",
            "spec.trainer.resourcesPerNode.limits[memory]: Invalid value: \"-2Gi\": must be greater than or equal to 0",
        ),
        (
            "{limits: {nvidia.com/gpu: '-1'}}",
            "spec.trainer.resourcesPerNode.limits[nvidia.com/gpu]: Invalid value: \"-1\": must be greater than or equal to 0",
        ),
        (
            "{limits: {nvidia.com/gpu: '1e26'}}",
            "spec.trainer.resourcesPerNode.limits[nvidia.com/gpu]: Invalid value: \"1e26\": must be less than or equal to 9223372036854775807",
        ),
        (
            "{requests: {cpu: '1e999999999'}}",
            "spec.trainer.resourcesPerNode.requests[cpu]: Invalid value: \"1e999999999\": quantities must match",
        ),
        (
            "{limits: {nvidia.com/gpu: '0.5'}}",
            "spec.trainer.resourcesPerNode.limits[nvidia.com/gpu]: Invalid value: \"0.5\": must be an integer",
        ),
    ] {
        assert_rejected(&[TORCH_RUNTIME, &with(resources)], expected);
    }
    assert_accepted(&[
        TORCH_RUNTIME,
        &with("{requests: {cpu: 500m, memory: 1.5Gi}, limits: {nvidia.com/gpu: '8', cpu: '0'}}"),
    ]);
}

#[test]
fn zero_nodes_is_accepted_with_a_warning_that_no_trainer_runs() {
    let document = job("  runtimeRef: {name: torch-distributed}\n  trainer: {numNodes: 0}");
    assert_accepted(&[TORCH_RUNTIME, &document]);
    let found = findings(&[TORCH_RUNTIME, &document]);
    assert!(
        found.contains(
            &"warning: TrainJob/job: spec.trainer.numNodes: numNodes is 0: the job runs no trainer pods (it completes without training)"
                .to_owned()
        ),
        "{found:#?}"
    );
}

#[test]
fn cel_and_schema_boundaries() {
    let ok = |trainer: &str| {
        job(&format!(
            "  runtimeRef: {{name: torch-distributed}}\n  trainer: {trainer}"
        ))
    };
    let accepted = [
        ok("{numNodes: 0}"),
        ok("{numNodes: 4, numProcPerNode: 1}"),
        ok(&format!("{{command: [\"{}\"]}}", "a".repeat(1_048_576))),
        job("  runtimeRef: {name: torch-distributed}\n  managedBy: kueue.x-k8s.io/multikueue"),
        job("  runtimeRef: {name: torch-distributed}\n  activeDeadlineSeconds: 1"),
    ];
    for document in &accepted {
        assert_accepted(&[TORCH_RUNTIME, document]);
    }
    let rejected = [
        (
            ok("{numNodes: -1}"),
            "TrainJob/job: spec.trainer.numNodes: Invalid value: -1: should be greater than or equal to 0",
        ),
        (
            ok("{numProcPerNode: 0}"),
            "spec.trainer.numProcPerNode: numProcPerNode must be greater than or equal to 1",
        ),
        (
            ok(&format!("{{command: [\"{}\"]}}", "a".repeat(1_048_577))),
            "spec.trainer.command[0]: Too long: may not be more than 1048576 bytes",
        ),
        (
            job("  runtimeRef: {name: torch-distributed}\n  managedBy: me"),
            "spec.managedBy: ManagedBy must be trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if set",
        ),
        (
            job("  runtimeRef: {name: torch-distributed}\n  activeDeadlineSeconds: 0"),
            "spec.activeDeadlineSeconds: Invalid value: 0",
        ),
        (
            job(
                "  runtimeRef: {name: torch-distributed}\n  initializer: {dataset: {storageUri: not-a-uri}}",
            ),
            "storageUri may be empty, or it must be a valid URI (scheme://...)",
        ),
        (
            job("  runtimeRef: {name: ''}"),
            "spec.runtimeRef.name: Invalid value: \"\": should be at least 1 chars long",
        ),
    ];
    for (document, expected) in &rejected {
        assert_rejected(&[TORCH_RUNTIME, document], expected);
    }
}

#[test]
fn names_must_be_rfc1035_labels() {
    let named = |name: &str| {
        format!(
            "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: '{name}'}}\nspec: {{runtimeRef: {{name: torch-distributed}}}}"
        )
    };
    assert_accepted(&[TORCH_RUNTIME, &named("a")]);
    assert_accepted(&[TORCH_RUNTIME, &named(&"a".repeat(63))]);
    assert_rejected(
        &[TORCH_RUNTIME, &named(&"a".repeat(64))],
        "metadata.name must be no more than 63 characters",
    );
    for bad in ["1job", "Job", "job-", "my_job"] {
        assert_rejected(
            &[TORCH_RUNTIME, &named(bad)],
            "metadata.name must match RFC 1035 DNS label format",
        );
    }
}

#[test]
fn runtime_cel_rules() {
    let cases = [
        (
            "{mpi: {numProcPerNode: 0}}",
            "",
            "NumProcPerNode in mpiPolicy must be >= 1",
        ),
        (
            "{flux: {numProcPerNode: 0}}",
            "",
            "NumProcPerNode in fluxPolicy must be >= 1",
        ),
        (
            "{torch: {envInjection: {targets: [{jobName: node, containerNames: [node]}]}}}",
            "",
            "containerNames must not include the main node container because PET_* envs are always injected into it",
        ),
        (
            "{torch: {}, mpi: {}}",
            "",
            "Only one of the policy can be configured (found torch, mpi); keep exactly one",
        ),
        (
            "{jax: {}}",
            "podGroupPolicy: {coscheduling: {}, volcano: {}}",
            "Only one of coscheduling and volcano",
        ),
        ("{mpi: {mpiImplementation: Intel}}", "", "spec.mlPolicy"),
    ];
    for (policy, extra, expected) in cases {
        assert_rejected(&[&runtime_with("rt", policy, extra)], expected);
    }
    assert_accepted(&[&runtime_with(
        "rt",
        "{mpi: {numProcPerNode: 1, runLauncherAsNode: true}}",
        "",
    )]);
}

#[test]
fn jobset_cel_rules() {
    let runtime = |spec: &str| {
        format!(
            "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainingRuntime\nmetadata: {{name: rt}}\nspec:\n  template:\n    spec:\n{spec}"
        )
    };
    let startup = runtime(
        "      startupPolicy: {startupPolicyOrder: InOrder}\n      replicatedJobs:\n        - {name: a, template: {spec: {template: {spec: {containers: []}}}}}\n        - {name: b, dependsOn: [{name: a, status: Complete}], template: {spec: {template: {spec: {containers: []}}}}}",
    );
    assert_rejected(
        &[&startup],
        "StartupPolicy and DependsOn APIs are mutually exclusive",
    );
    let claims = runtime(
        "      volumeClaimPolicies: [{templates: [{metadata: {name: initializer, namespace: other}}]}]\n      replicatedJobs: []",
    );
    assert_rejected(
        &[&claims],
        "namespace cannot be set for VolumeClaimPolicies templates",
    );
}

#[test]
fn transition_rules_keep_fields_immutable() {
    let parse = |spec: &str| -> TrainJob {
        match parse_documents(&job(spec)).unwrap().remove(0).document {
            Document::TrainJob(job) => *job,
            other => panic!("{other:?}"),
        }
    };
    let mut catalog = RuntimeCatalog::new();
    for d in parse_documents(&format!(
        "{TORCH_RUNTIME}\n---\n{}",
        runtime_with("other", "{torch: {}}", "")
    ))
    .unwrap()
    {
        catalog.add_document(&d.document);
    }
    let old = parse("  runtimeRef: {name: torch-distributed}\n  trainer: {numNodes: 1}");
    let new = parse("  runtimeRef: {name: other}\n  trainer: {numNodes: 2}");
    let errors: Vec<String> = validate_trainjob_update(&old, &new, &catalog, None)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        errors.contains(&"TrainJob/job: spec.runtimeRef: field is immutable".to_owned()),
        "{errors:#?}"
    );
    assert!(
        errors.contains(&"TrainJob/job: spec.trainer: field is immutable".to_owned()),
        "{errors:#?}"
    );
    let same: Vec<_> = validate_trainjob_update(&old, &old, &catalog, None);
    assert!(same.is_empty(), "{same:#?}");
}

#[test]
fn runtime_patches_change_only_while_suspended() {
    let parse = |spec: &str| -> TrainJob {
        match parse_documents(&job(spec)).unwrap().remove(0).document {
            Document::TrainJob(job) => *job,
            other => panic!("{other:?}"),
        }
    };
    let mut catalog = RuntimeCatalog::new();
    catalog.add_document(&parse_documents(TORCH_RUNTIME).unwrap()[0].document);
    let patch = "\n  runtimePatches: [{manager: kueue.x-k8s.io/manager, trainingRuntimeSpec: {template: {spec: {replicatedJobs: [{name: node, template: {spec: {template: {spec: {nodeSelector: {a: b}}}}}}]}}}}]";
    let running = parse("  runtimeRef: {name: torch-distributed}");
    let patched_running = parse(&format!("  runtimeRef: {{name: torch-distributed}}{patch}"));
    let suspended = parse("  runtimeRef: {name: torch-distributed}\n  suspend: true");
    let patched_resumed = parse(&format!(
        "  runtimeRef: {{name: torch-distributed}}\n  suspend: false{patch}"
    ));
    let shown = |old: &TrainJob,
                 new: &TrainJob,
                 jobset: Option<&kubetrain_api::jobset::JobSet>|
     -> Vec<String> {
        validate_trainjob_update(old, new, &catalog, jobset)
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    assert_eq!(
        shown(&running, &patched_running, None),
        [
            "TrainJob/job: spec.runtimePatches: Forbidden: RuntimePatches can only be modified when the TrainJob is suspended before or after the update"
        ]
    );
    assert!(
        shown(&suspended, &patched_resumed, None).is_empty(),
        "Kueue's admit-and-patch update is allowed"
    );
    let jobset: kubetrain_api::jobset::JobSet = serde_json::from_value(serde_json::json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "job"},
        "spec": {}, "status": {"replicatedJobsStatus": [{"name": "node", "active": 1}]}
    }))
    .unwrap();
    assert_eq!(
        shown(&suspended, &patched_resumed, Some(&jobset)),
        [
            "TrainJob/job: spec.runtimePatches: Forbidden: RuntimePatches cannot be modified when the JobSet's ReplicatedJob node is still active"
        ]
    );
}

/// The API server correlates `runtimePatches` items by `manager` (a `listType: map`), so a patch added before
/// an existing one is new: `manager`'s `self == oldSelf` does not run on it, and only the webhook's rule fires
/// (side-by-side case `tj-update-patches-active`, where Kueue's patch was first in the old object).
#[test]
fn added_runtime_patch_is_not_compared_with_another_manager() {
    let parse = |spec: &str| -> TrainJob {
        match parse_documents(&job(spec)).unwrap().remove(0).document {
            Document::TrainJob(job) => *job,
            other => panic!("{other:?}"),
        }
    };
    let mut catalog = RuntimeCatalog::new();
    catalog.add_document(&parse_documents(TORCH_RUNTIME).unwrap()[0].document);
    let kueue = "{manager: kueue.x-k8s.io/manager, trainingRuntimeSpec: {template: {spec: {}}}}";
    let ours = "{manager: example.com/generator, trainingRuntimeSpec: {template: {spec: {replicatedJobs: [{name: node, template: {metadata: {labels: {a: b}}}}]}}}}";
    let old = parse(&format!(
        "  runtimeRef: {{name: torch-distributed}}\n  runtimePatches: [{kueue}]"
    ));
    let forbidden = "TrainJob/job: spec.runtimePatches: Forbidden: RuntimePatches can only be modified when the TrainJob is suspended before or after the update";
    for patches in [
        format!("[{ours}]"),
        format!("[{ours}, {kueue}]"),
        format!("[{kueue}, {ours}]"),
    ] {
        let new = parse(&format!(
            "  runtimeRef: {{name: torch-distributed}}\n  runtimePatches: {patches}"
        ));
        let shown: Vec<String> = validate_trainjob_update(&old, &new, &catalog, None)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(shown, [forbidden], "patches {patches}");
    }
    // A patch that keeps its manager but changes it elsewhere is still the same item.
    let renamed = parse(
        "  runtimeRef: {name: torch-distributed}\n  suspend: true\n  runtimePatches: [{manager: kueue.x-k8s.io/manager, trainingRuntimeSpec: {template: {spec: {replicatedJobs: [{name: node}]}}}}]",
    );
    let suspended_old = parse(&format!(
        "  runtimeRef: {{name: torch-distributed}}\n  suspend: true\n  runtimePatches: [{kueue}]"
    ));
    let shown = validate_trainjob_update(&suspended_old, &renamed, &catalog, None);
    assert!(shown.is_empty(), "{shown:#?}");
}

#[test]
fn runtime_lookup() {
    assert_rejected(
        &[&job("  runtimeRef: {name: nope}")],
        "TrainJob/job: spec.RuntimeRef: Invalid value: {\"name\":\"nope\",\"apiGroup\":\"trainer.kubeflow.org\",\"kind\":\"ClusterTrainingRuntime\"}: ClusterTrainingRuntime.trainer.kubeflow.org \"nope\" not found: specified clusterTrainingRuntime must be created before the TrainJob is created",
    );
    assert_rejected(
        &[&job("  runtimeRef: {name: nope, kind: TrainingRuntime}")],
        "TrainJob/job: spec.runtimeRef: Invalid value: {\"name\":\"nope\",\"apiGroup\":\"trainer.kubeflow.org\",\"kind\":\"TrainingRuntime\"}: TrainingRuntime.trainer.kubeflow.org \"nope\" not found: specified trainingRuntime must be created before the TrainJob is created",
    );
    // Offline (the catalog knows runtimes, as `validate` has the built-ins): a short message at the
    // TrainJob's own field (issue 39 item 6); the webhook's catalog above is empty and keeps upstream's.
    assert_rejected(
        &[
            TORCH_RUNTIME,
            &job("  runtimeRef: {name: nope, kind: TrainingRuntime}"),
        ],
        "TrainJob/job: spec.runtimeRef.name: TrainingRuntime \"nope\" not found in namespace default; namespace default has no TrainingRuntime",
    );
    assert_rejected(
        &[
            TORCH_RUNTIME,
            &job("  runtimeRef: {name: torch-distributd}"),
        ],
        "TrainJob/job: spec.runtimeRef.name: ClusterTrainingRuntime \"torch-distributd\" not found; did you mean \"torch-distributed\"?",
    );
    assert_rejected(
        &[&job("  runtimeRef: {name: x, kind: Job, apiGroup: batch}")],
        "TrainJob/job: unsupported runtime: Job.batch",
    );
    let deprecated = TORCH_RUNTIME.replace(
        "{name: torch-distributed}",
        "{name: torch-distributed, labels: {trainer.kubeflow.org/support: deprecated}}",
    );
    let found = findings(&[&deprecated, &job("  runtimeRef: {name: torch-distributed}")]);
    assert!(found.iter().any(|f| f.starts_with("warning: TrainJob/job: spec.runtimeRef: Referenced ClusterTrainingRuntime \"torch-distributed\" is deprecated")), "{found:#?}");
    assert!(found.iter().any(|f| f.starts_with("warning: ClusterTrainingRuntime/torch-distributed: metadata.labels: ClusterTrainingRuntime \"torch-distributed\" is deprecated")), "{found:#?}");
    assert!(
        found.iter().all(|f| f.starts_with("warning:")),
        "{found:#?}"
    );
}

#[test]
fn initializer_jobs_must_exist() {
    let with = |init: &str| {
        job(&format!(
            "  runtimeRef: {{name: RUNTIME}}\n  initializer: {init}"
        ))
    };
    let torch = |init: &str| with(init).replace("RUNTIME", "torch-distributed");
    let tune = |init: &str| with(init).replace("RUNTIME", "torchtune-llama3.2-1b");
    assert_rejected(
        &[TORCH_RUNTIME, &torch("{dataset: {storageUri: 'hf://a/b'}}")],
        "spec.runtimeRef: Invalid value: {\"name\":\"torch-distributed\",\"apiGroup\":\"trainer.kubeflow.org\",\"kind\":\"ClusterTrainingRuntime\"}: must have dataset-initializer job when trainJob is configured with input datasetConfig",
    );
    assert_rejected(
        &[TORCH_RUNTIME, &torch("{model: {storageUri: 'hf://a/b'}}")],
        "spec.runtimeRef: Invalid value: {\"name\":\"torch-distributed\",\"apiGroup\":\"trainer.kubeflow.org\",\"kind\":\"ClusterTrainingRuntime\"}: must have model-initializer job when trainJob is configured with input modelConfig",
    );
    assert_accepted(&[INIT_RUNTIME, &tune("{dataset: {storageUri: 'hf://a/b'}}")]);
    assert_rejected(
        &[INIT_RUNTIME, &tune("{model: {storageUri: 'hf://a/b'}}")],
        "Invalid value: {\"name\":\"torchtune-llama3.2-1b\",\"apiGroup\":\"trainer.kubeflow.org\",\"kind\":\"ClusterTrainingRuntime\"}: must have volumeMount with name - initializer in container model-initializer of the model-initializer job",
    );
    let renamed = INIT_RUNTIME.replace(
        "[{name: model-initializer, image: init}]",
        "[{name: other, image: init}]",
    );
    assert_rejected(
        &[&renamed, &tune("{model: {storageUri: 'hf://a/b'}}")],
        "Invalid value: {\"name\":\"torchtune-llama3.2-1b\",\"apiGroup\":\"trainer.kubeflow.org\",\"kind\":\"ClusterTrainingRuntime\"}: must have container with name - model-initializer in the model-initializer job",
    );
}

#[test]
fn runtime_patch_targets() {
    let patched = |manager: &str, rjob: &str, pod: &str| {
        job(&format!(
            "  runtimeRef: {{name: torch-distributed}}\n  runtimePatches: [{{manager: '{manager}', trainingRuntimeSpec: {{template: {{spec: {{replicatedJobs: [{{name: {rjob}, template: {{spec: {{template: {{spec: {pod}}}}}}}}}]}}}}}}}}]"
        ))
    };
    assert_accepted(&[
        TORCH_RUNTIME,
        &patched(
            "kueue.x-k8s.io/manager",
            "node",
            "{nodeSelector: {gpu: a100}}",
        ),
    ]);
    let cases = [
        (
            patched("kueue", "node", "{}"),
            "spec.runtimePatches.manager: Invalid value: \"kueue\": must be a domain-prefixed path (such as \"acme.io/foo\")",
        ),
        (
            patched("Kueue.io/m", "node", "{}"),
            "a lowercase RFC 1123 subdomain",
        ),
        (
            patched("a.io/m", "worker", "{}"),
            "spec.runtimePatches: Invalid value: [{\"manager\":\"a.io/m\",\"trainingRuntimeSpec\":{\"template\":{\"spec\":{\"replicatedJobs\":[{\"name\":\"worker\",\"template\":{\"spec\":{\"template\":{\"spec\":{}}}}}]}}}}]: must not have replicated job that doesn't exist in the runtime job template",
        ),
        (
            patched("a.io/m", "node", "{containers: [{name: sidecar}]}"),
            "must not have container that doesn't exist in the runtime job node",
        ),
        (
            patched("a.io/m", "node", "{initContainers: [{name: init}]}"),
            "must not have initContainer that doesn't exist in the runtime job node",
        ),
        (
            patched(
                "a.io/m",
                "node",
                "{containers: [{name: node, env: [{name: A, value: b}]}]}",
            ),
            "must not have envs for the dataset-initializer, model-initializer, node containers",
        ),
        (
            patched("a.io/m", "node", "{containers: [{name: node, image: x}]}"),
            "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].image: unknown field \"image\"",
        ),
    ];
    for (document, expected) in &cases {
        assert_rejected(&[TORCH_RUNTIME, document], expected);
    }
}

#[test]
fn reserved_env_per_policy() {
    let env = |runtime: &str, names: &[&str]| {
        let list: Vec<String> = names
            .iter()
            .map(|n| format!("{{name: {n}, value: x}}"))
            .collect();
        job(&format!(
            "  runtimeRef: {{name: {runtime}}}\n  trainer: {{env: [{}]}}",
            list.join(", ")
        ))
    };
    assert_rejected(
        &[
            TORCH_RUNTIME,
            &env(
                "torch-distributed",
                &["PET_NODE_RANK", "FOO", "PET_MASTER_ADDR"],
            ),
        ],
        "spec.trainer.env: Invalid value: [{\"name\":\"PET_NODE_RANK\",\"value\":\"x\"},{\"name\":\"FOO\",\"value\":\"x\"},{\"name\":\"PET_MASTER_ADDR\",\"value\":\"x\"}]: must not have reserved envs, invalid envs configured: [PET_MASTER_ADDR PET_NODE_RANK]",
    );
    assert_accepted(&[TORCH_RUNTIME, &env("torch-distributed", &["FOO"])]);
    let mpi = runtime_with("mpi", "{mpi: {}}", "");
    assert_rejected(
        &[&mpi, &env("mpi", &["OMPI_MCA_plm_rsh_args"])],
        "invalid envs configured: [OMPI_MCA_plm_rsh_args]",
    );
    let xgb = runtime_with("xgb", "{xgboost: {}}", "");
    assert_rejected(
        &[&xgb, &env("xgb", &["A", "DMLC_TASK_ID"])],
        "spec.trainer.env[1]: Forbidden: DMLC_TASK_ID is reserved for the XGBoost runtime",
    );
    let jax = runtime_with("jax", "{jax: {}}", "");
    assert_accepted(&[&jax, &env("jax", &["PET_NODE_RANK", "DMLC_TASK_ID"])]);
}

#[test]
fn policy_specific_rules() {
    let target = runtime_with(
        "t",
        "{torch: {envInjection: {targets: [{jobName: node, containerNames: [sidecar]}]}}}",
        "",
    );
    assert_rejected(
        &[&target, &job("  runtimeRef: {name: t}")],
        "spec.runtimeRef: Invalid value: {\"jobName\":\"node\",\"containerNames\":[\"sidecar\"]}: envInjection target podSet \"node\" container \"sidecar\" not found in runtime template",
    );
    let found = runtime_with(
        "t",
        "{torch: {envInjection: {targets: [{jobName: node, containerNames: [flux-installer]}]}}}",
        "",
    );
    assert_accepted(&[&found, &job("  runtimeRef: {name: t}")]);

    let no_launcher = TORCH_RUNTIME
        .replace("torch: {}", "mpi: {runLauncherAsNode: true}")
        .replace("torch-distributed", "mpi");
    assert_rejected(
        &[
            &no_launcher,
            &job("  runtimeRef: {name: mpi}\n  trainer: {numNodes: 2}"),
        ],
        "spec.trainer.numNodes: Invalid value: 2: must have 1 when MPI trainingRuntime with enabled runLauncherAsNode does not have either launcher and node",
    );
    assert_accepted(&[
        &no_launcher,
        &job("  runtimeRef: {name: mpi}\n  trainer: {numNodes: 1}"),
    ]);
    let both = runtime_with("mpi2", "{mpi: {runLauncherAsNode: true}}", "");
    assert_accepted(&[
        &both,
        &job("  runtimeRef: {name: mpi2}\n  trainer: {numNodes: 3}"),
    ]);

    let flux = runtime_with("flux", "{flux: {}}", "");
    assert_rejected(
        &[&flux, &job("  runtimeRef: {name: flux}")],
        "spec.trainer.initContainers: Invalid value: \"flux-installer\": InitContainer 'flux-installer' is reserved",
    );

    let volcano = runtime_with("v", "{jax: {}}", "podGroupPolicy: {volcano: {}}");
    let queue = |value: &str| {
        job(&format!(
            "  runtimeRef: {{name: v}}\n  runtimePatches: [{{manager: a.io/b, trainingRuntimeSpec: {{template: {{metadata: {{annotations: {{scheduling.volcano.sh/queue-name: '{value}'}}}}}}}}}}]"
        ))
    };
    assert_rejected(
        &[&volcano, &queue("")],
        "spec.annotations[scheduling.volcano.sh/queue-name]: Invalid value: \"\": Volcano queue name must not be empty",
    );
    assert_accepted(&[&volcano, &queue("research")]);
}

#[test]
fn torchtune_rules() {
    let tune = |name: &str, trainer: &str| {
        job(&format!(
            "  runtimeRef: {{name: {name}}}\n  trainer: {{command: [tune, run], {trainer}}}"
        ))
    };
    let runtime = |name: &str| INIT_RUNTIME.replace("torchtune-llama3.2-1b", name);
    let llama = runtime("torchtune-llama3.2-1b");
    assert_accepted(&[&llama, &tune("torchtune-llama3.2-1b", "numNodes: 1")]);
    let cases = [
        (
            "torchtune-gpt-2",
            "numNodes: 1",
            "spec.runtimeRef.name: Invalid value: \"torchtune-gpt-2\": must have a supported pretrained model, invalid model configured: gpt/2",
        ),
        (
            "torchtune-llama3.2-1b",
            "numNodes: 2",
            "spec.trainer.numNodes: Invalid value: 2: must be 1 for llama3_2/1B model",
        ),
        (
            "torchtune-llama3.3-70b",
            "numNodes: 2, args: ['model.lora_attn_modules=[q_proj]']",
            "spec.trainer.numNodes: Invalid value: 2: LoRA fine-tuning is not supported for multi-node training in TorchTune",
        ),
        (
            "torchtune-llama3.2-1b",
            "args: [dtype=bf16, 'output_dir=/tmp']",
            "spec.trainer.args[1]: Invalid value: \"output_dir=/tmp\": must not set immutable config \"output_dir\" in trainer args; it is managed by the runtime",
        ),
        (
            "torchtune-qwen2.5-1.5b",
            "args: [model.quantize_base=True]",
            "spec.runtimeRef.name: Invalid value: \"torchtune-qwen2.5-1.5b\": QLoRA is not supported for qwen2_5/1.5B model",
        ),
        (
            "torchtune-llama3.2-3b",
            "args: [model.quantize_base=true]",
            "spec.trainer.numProcPerNode: Invalid value: \"auto\": must be auto or 1 for llama3_2/3B model when using QLoRA",
        ),
        (
            "torchtune-llama3.2-3b",
            "args: [model.quantize_base=true]",
            "spec.trainer.resourcesPerNode: Invalid value: null: must have gpu resource with value 1 for llama3_2/3B model when using QLoRA",
        ),
    ];
    for (name, trainer, expected) in cases {
        assert_rejected(&[&runtime(name), &tune(name, trainer)], expected);
    }
    let single_gpu =
        "args: [model.quantize_base=true], resourcesPerNode: {limits: {nvidia.com/gpu: 1}}";
    assert_accepted(&[
        &runtime("torchtune-llama3.2-3b"),
        &tune("torchtune-llama3.2-3b", single_gpu),
    ]);
}

#[test]
fn runtime_webhook_rules() {
    let bad = INIT_RUNTIME
        .replace("- name: node\n", "- name: node\n          replicas: 2\n")
        .replace(
            "[{name: model-initializer, image: init}]",
            "[{name: other, image: init}]",
        );
    let found = findings(&[&bad]);
    assert!(found.contains(&"ClusterTrainingRuntime/torchtune-llama3.2-1b: spec.template.spec.replicatedJobs[2].replicas: Invalid value: 2: always must be 1".to_owned()), "{found:#?}");
    assert!(found.contains(&"ClusterTrainingRuntime/torchtune-llama3.2-1b: spec.template.spec.replicatedJobs[1].template.spec.template.spec.containers: Invalid value: [{\"name\":\"other\",\"image\":\"init\",\"resources\":{}}]: must contain the required container for the ancestor: model-initializer".to_owned()), "{found:#?}");
    let disabled = bad.replace("{name: torchtune-llama3.2-1b}", "{name: torchtune-llama3.2-1b, labels: {trainer.kubeflow.org/webhook-validation: disabled}}");
    assert_accepted(&[&disabled]);
}

#[test]
fn parse_errors_name_the_field_and_the_fix() {
    let old = "apiVersion: kubeflow.org/v2alpha1\nkind: TrainJob\nmetadata: {name: old}\nspec: {runtimeRef: {name: torch-distributed}}";
    assert_rejected(
        &[old],
        "TrainJob/old: apiVersion: apiVersion \"kubeflow.org/v2alpha1\" is not served for TrainJob; use apiVersion: trainer.kubeflow.org/v1alpha1",
    );
    let typo = job("  runtimeRef: {name: torch-distributed}\n  trainer: {numNode: 2}");
    assert_rejected(
        &[&typo],
        "TrainJob/job: spec.trainer.numNode: unknown field \"numNode\"; did you mean \"numNodes\"?",
    );
    let mistyped = job("  runtimeRef: {name: torch-distributed}\n  trainer: {numNodes: two}");
    assert_rejected(
        &[&mistyped],
        "TrainJob/job: spec.trainer.numNodes: invalid type",
    );
    let legacy = job(
        "  runtimeRef: {name: torch-distributed}\n  podTemplateOverrides: []\n  labels: {a: b}",
    );
    assert_rejected(
        &[&legacy],
        "spec.labels: unknown field \"labels\" (TrainJob spec.labels/annotations were removed in v2.2",
    );
    assert_rejected(&["kind: TrainJob\nmetadata: {name: x}"], "apiVersion");
    assert_rejected(
        &["apiVersion: trainer.kubeflow.org/v1alpha1\nkind: Job"],
        "kind \"Job\" is not served by trainer.kubeflow.org/v1alpha1",
    );
    assert_rejected(&["- a\n- b"], "a document must be a mapping");
    assert_rejected(&["a: [b"], "invalid YAML");
}

#[test]
fn other_api_groups_are_kept_not_interpreted() {
    let docs = parse_documents("apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {name: q}\n---\n# only a comment\n").unwrap();
    assert_eq!(docs.len(), 1);
    assert_eq!(docs[0].document.kind(), "LocalQueue");
    assert!(validate_document(&docs[0].document, &RuntimeCatalog::new()).is_empty());
}

#[test]
fn more_transition_rules() {
    let parse = |spec: &str| -> TrainJob {
        match parse_documents(&job(spec)).unwrap().remove(0).document {
            Document::TrainJob(job) => *job,
            other => panic!("{other:?}"),
        }
    };
    let mut catalog = RuntimeCatalog::new();
    catalog.add_document(&parse_documents(TORCH_RUNTIME).unwrap()[0].document);
    let base = "  runtimeRef: {name: torch-distributed}\n  suspend: true\n";
    let patch = |pod: &str| {
        format!(
            "{base}  runtimePatches: [{{manager: a.io/m, trainingRuntimeSpec: {{template: {{spec: {{replicatedJobs: [{{name: node, template: {{spec: {{template: {{spec: {pod}}}}}}}}}]}}}}}}}}]"
        )
    };
    let cases = [
        (
            format!("{base}  activeDeadlineSeconds: 10"),
            format!("{base}  activeDeadlineSeconds: 20"),
            "spec.activeDeadlineSeconds: field is immutable",
        ),
        (
            format!("{base}  managedBy: kueue.x-k8s.io/multikueue"),
            base.to_owned(),
            "spec.managedBy: field is immutable",
        ),
        (
            format!("{base}  initializer: {{model: {{storageUri: 'hf://a/b'}}}}"),
            format!("{base}  initializer: {{model: {{storageUri: 'hf://a/c'}}}}"),
            "spec.initializer: field is immutable",
        ),
        (
            patch("{serviceAccountName: a}"),
            patch("{serviceAccountName: b}"),
            "serviceAccountName: field is immutable",
        ),
        (
            patch("{containers: [{name: node}]}"),
            patch("{containers: [{name: node, volumeMounts: [{name: v, mountPath: /v}]}]}"),
            "containers: field is immutable",
        ),
    ];
    for (old, new, expected) in &cases {
        let errors: Vec<String> =
            validate_trainjob_update(&parse(old), &parse(new), &catalog, None)
                .iter()
                .map(ToString::to_string)
                .collect();
        assert!(
            errors.iter().any(|e| e.contains(expected)),
            "expected {expected:?} in {errors:#?}"
        );
    }
    // nodeSelector and tolerations stay mutable inside a patch (Kueue rewrites them on every admission).
    let errors = validate_trainjob_update(
        &parse(&patch("{nodeSelector: {a: b}}")),
        &parse(&patch(
            "{nodeSelector: {a: c}, tolerations: [{key: k, operator: Exists}]}",
        )),
        &catalog,
        None,
    );
    assert!(errors.is_empty(), "{errors:#?}");
}

#[test]
fn trainer_status_needs_last_updated_time() {
    let with_status = |status: &str| {
        format!(
            "{}status: {status}\n",
            job("  runtimeRef: {name: torch-distributed}")
        )
    };
    assert_rejected(
        &[
            TORCH_RUNTIME,
            &with_status("{trainerStatus: {progressPercentage: 50}}"),
        ],
        "status.trainerStatus: lastUpdatedTime is required when trainerStatus is present",
    );
    assert_rejected(
        &[
            TORCH_RUNTIME,
            &with_status(
                "{trainerStatus: {progressPercentage: 101, lastUpdatedTime: '2026-01-01T00:00:00Z'}}",
            ),
        ],
        "status.trainerStatus.progressPercentage: Invalid value: 101: should be less than or equal to 100",
    );
    assert_accepted(&[
        TORCH_RUNTIME,
        &with_status(
            "{trainerStatus: {progressPercentage: 100, lastUpdatedTime: '2026-01-01T00:00:00Z'}}",
        ),
    ]);
}

#[test]
fn defaults_match_upstream() {
    let rt = runtime_with("rt", "{mpi: {}}", "podGroupPolicy: {coscheduling: {}}");
    let Document::ClusterTrainingRuntime(runtime) =
        parse_documents(&rt).unwrap().remove(0).document
    else {
        panic!()
    };
    let stored = kubetrain_api::crd::with_defaults(&*runtime).expect("defaults apply");
    let Some(kubetrain_api::MLPolicySource::Mpi(mpi)) =
        stored.spec.ml_policy.and_then(|p| p.source)
    else {
        panic!()
    };
    assert_eq!(mpi.num_proc_per_node, Some(1));
    assert_eq!(
        mpi.mpi_implementation,
        Some(kubetrain_api::MPIImplementation::OpenMPI)
    );
    assert_eq!(mpi.ssh_auth_mount_path.as_deref(), Some("/root/.ssh"));
    assert_eq!(mpi.run_launcher_as_node, Some(false));
    let Some(kubetrain_api::PodGroupPolicySource::Coscheduling(c)) =
        stored.spec.pod_group_policy.and_then(|p| p.source)
    else {
        panic!()
    };
    assert_eq!(c.schedule_timeout_seconds, Some(60));
    let jobs = &stored.spec.template.spec.replicated_jobs;
    assert!(
        jobs.iter()
            .all(|j| j.replicas == Some(1) && j.group_name.as_deref() == Some("default"))
    );
}

#[test]
fn a_stream_of_more_than_1024_documents_is_read_one_document_at_a_time() {
    let mut text = String::new();
    for i in 0..2_000 {
        text.push_str(&format!(
            "---\napiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: job-{i}}}\nspec:\n  runtimeRef: {{name: torch-distributed}}\n"
        ));
    }
    let docs = kubetrain_api::parse_documents(&text).expect("2,000 documents");
    assert_eq!(docs.len(), 2_000);
    assert_eq!(docs[1_999].index, 1_999);
    // A syntax error names its document and the line it starts on.
    let broken = format!("{text}---\nkind: [unclosed\n");
    let error = kubetrain_api::parse_documents(&broken)
        .unwrap_err()
        .to_string();
    assert!(error.contains("document 2001 (from line 12001)"), "{error}");
}

/// KEP-2899 (ahead of v2.3): the runtime's `runPolicy` bounds, the TTL's minimum and the two template rules
/// that keep cleanup and deadlines with the TrainJob controller; the TTL stays mutable.
#[test]
fn run_policy_and_ttl_rules() {
    let runtime = |extra: &str, jobset: &str, job_spec: &str| {
        format!(
            "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainingRuntime\nmetadata: {{name: rt}}\nspec:\n  {extra}\n  template:\n    spec:\n      {jobset}\n      replicatedJobs:\n        - {{name: node, template: {{spec: {{{job_spec}template: {{spec: {{containers: [{{name: node, image: x}}]}}}}}}}}}}\n"
        )
    };
    assert_accepted(&[&runtime(
        "runPolicy: {activeDeadlineSeconds: 60, ttlSecondsAfterFinished: 0}",
        "",
        "",
    )]);
    assert_rejected(
        &[&runtime("runPolicy: {activeDeadlineSeconds: 0}", "", "")],
        "spec.runPolicy.activeDeadlineSeconds",
    );
    assert_rejected(
        &[&runtime("runPolicy: {ttlSecondsAfterFinished: -1}", "", "")],
        "spec.runPolicy.ttlSecondsAfterFinished",
    );
    assert_rejected(
        &[&runtime("", "ttlSecondsAfterFinished: 10", "")],
        kubetrain_api::JOBSET_TTL_IN_TEMPLATE,
    );
    for job_field in ["activeDeadlineSeconds: 5, ", "ttlSecondsAfterFinished: 5, "] {
        assert_rejected(
            &[&runtime("", "", job_field)],
            kubetrain_api::JOB_LIFECYCLE_IN_TEMPLATE,
        );
    }
    assert_rejected(
        &[&job(
            "  runtimeRef: {name: r}\n  ttlSecondsAfterFinished: -5",
        )],
        "spec.ttlSecondsAfterFinished",
    );
    assert_accepted(&[
        TORCH_RUNTIME,
        &job("  runtimeRef: {name: torch-distributed}\n  ttlSecondsAfterFinished: 0"),
    ]);
    // Mutable: a finished job's retention can be shortened or extended.
    let parse = |spec: &str| -> TrainJob {
        match parse_documents(&job(spec)).unwrap().remove(0).document {
            Document::TrainJob(j) => *j,
            other => panic!("a TrainJob, got {other:?}"),
        }
    };
    let old = parse("  runtimeRef: {name: r}\n  ttlSecondsAfterFinished: 600");
    let new = parse("  runtimeRef: {name: r}\n  ttlSecondsAfterFinished: 5");
    let errors = kubetrain_api::validation::validate_trainjob_update(
        &old,
        &new,
        &RuntimeCatalog::new(),
        None,
    );
    assert!(
        errors
            .iter()
            .all(|e| !e.to_string().contains("ttlSecondsAfterFinished")),
        "{errors:#?}"
    );
}

/// An elastic torch runtime (KEP-2903, ahead of upstream v2.3) with a node job at `node_spec`.
fn elastic_runtime(ml_policy: &str, node_spec: &str) -> String {
    format!(
        r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {{name: torch-elastic}}
spec:
  mlPolicy: {ml_policy}
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            metadata: {{labels: {{trainer.kubeflow.org/trainjob-ancestor-step: trainer}}}}
            spec:
              {node_spec}
              template:
                spec:
                  containers: [{{name: node, image: pytorch}}]
"#
    )
}

#[test]
fn elastic_policy_rules() {
    let bounds = "{torch: {elasticPolicy: {minNodes: 2, maxNodes: 4}}}";
    let runtime = elastic_runtime(bounds, "");
    assert_accepted(&[&runtime]);
    // The schema: both bounds required, minNodes >= 1, minNodes <= maxNodes, metrics are MetricSpecs.
    let cases = [
        (
            "{torch: {elasticPolicy: {minNodes: 0, maxNodes: 4}}}",
            "spec.mlPolicy.torch.elasticPolicy.minNodes: minNodes must be greater than or equal to 1",
        ),
        (
            "{torch: {elasticPolicy: {minNodes: 3, maxNodes: 2}}}",
            "spec.mlPolicy.torch.elasticPolicy: minNodes must be less than or equal to maxNodes",
        ),
        (
            "{torch: {elasticPolicy: {minNodes: 1}}}",
            "spec.mlPolicy.torch.elasticPolicy",
        ),
        (
            "{numNodes: 5, torch: {elasticPolicy: {minNodes: 2, maxNodes: 4}}}",
            "spec.mlPolicy: numNodes must be between torch.elasticPolicy.minNodes and torch.elasticPolicy.maxNodes",
        ),
        (
            "{torch: {elasticPolicy: {minNodes: 1, maxNodes: 2, metrics: [{type: Resource, resource: 7}]}}}",
            "spec.mlPolicy.torch.elasticPolicy.metrics[0].resource",
        ),
    ];
    for (policy, expected) in cases {
        assert_rejected(&[&elastic_runtime(policy, "")], expected);
    }
    assert_accepted(&[&elastic_runtime(
        "{numNodes: 3, torch: {elasticPolicy: {minNodes: 2, maxNodes: 4, metrics: [{type: Resource, \
resource: {name: cpu, target: {type: Utilization, averageUtilization: 80}}}]}}}",
        "",
    )]);
    // The runtime webhook (KEP-2903's rules 1 and 2).
    assert_rejected(
        &[&elastic_runtime(bounds, "completionMode: NonIndexed")],
        "spec.template.spec.replicatedJobs[0].template.spec.completionMode: Invalid value: \"NonIndexed\": \
must be Indexed when mlPolicy.torch.elasticPolicy is set",
    );
    assert_rejected(
        &[&elastic_runtime(
            bounds,
            "parallelism: 2\n              completions: 3",
        )],
        "spec.template.spec.replicatedJobs[0].template.spec.parallelism: Invalid value: 2: must equal completions (3)",
    );
    // A TrainJob's numNodes is its initial size, within the bounds; the rendezvous env is the plugin's.
    let trainjob = |trainer: &str| {
        job(&format!(
            "  runtimeRef: {{name: torch-elastic}}\n  trainer: {trainer}"
        ))
    };
    assert_accepted(&[&runtime, &trainjob("{numNodes: 2}")]);
    assert_accepted(&[&runtime, &trainjob("{numNodes: 4}")]);
    assert_accepted(&[&runtime, &trainjob("{image: x}")]);
    for nodes in [1, 5] {
        assert_rejected(
            &[&runtime, &trainjob(&format!("{{numNodes: {nodes}}}"))],
            &format!(
                "spec.trainer.numNodes: Invalid value: {nodes}: must be between the runtime's \
mlPolicy.torch.elasticPolicy.minNodes (2) and maxNodes (4)"
            ),
        );
    }
    assert_rejected(
        &[
            &runtime,
            &trainjob(
                "{env: [{name: PET_RDZV_ENDPOINT, value: 'x'}, {name: PET_RDZV_ID, value: 'id'}]}",
            ),
        ],
        "spec.trainer.env: must not set [PET_RDZV_ENDPOINT PET_RDZV_ID]",
    );
    // Without an elastic policy the rendezvous env stays the user's, as upstream has it.
    assert_accepted(&[
        TORCH_RUNTIME,
        &job(
            "  runtimeRef: {name: torch-distributed}\n  trainer: {env: [{name: PET_RDZV_ID, value: 'id'}]}",
        ),
    ]);
    // A TrainJob-level elasticPolicy (KEP-2903's override) is not supported and says where the field lives.
    assert_rejected(
        &[
            &runtime,
            &trainjob("{elasticPolicy: {minNodes: 1, maxNodes: 2}}"),
        ],
        "elasticPolicy belongs in the runtime's mlPolicy.torch",
    );
}
