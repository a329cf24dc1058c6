//! Upstream's admission-webhook rules (trainer `pkg/webhooks` and each plugin's `Validate`), with upstream's field
//! paths and messages.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, ResourceRequirements};

use super::go_json::{self, invalid};
use crate::catalog::{LookupError, RuntimeCatalog};
use crate::constants::*;
use crate::error::FieldError;
use crate::jobset::{JobSetSpec, ReplicatedJob};
use crate::quantity::Nanos;
use crate::torchtune::{self, ProcsPerNode};
use crate::{
    MLPolicySource, MPIMLPolicySource, PodGroupPolicySource, TorchMLPolicySource, TrainJob,
    TrainingRuntimeSpec,
};

/// The TrainJob rules that need its runtime: lookup, then every plugin's checks.
pub(crate) fn trainjob(job: &TrainJob, catalog: &RuntimeCatalog, out: &mut Vec<FieldError>) {
    let namespace = job
        .metadata
        .namespace
        .as_deref()
        .unwrap_or(crate::catalog::DEFAULT_NAMESPACE);
    let runtime = match catalog.lookup(&job.spec.runtime_ref, namespace) {
        Ok(runtime) => runtime,
        Err(LookupError::Unsupported(key)) => {
            // Upstream returns a plain error here, not a field error: its message has no path.
            out.push(FieldError::error("", format!("unsupported runtime: {key}")));
            return;
        }
        Err(error @ LookupError::NotFound { .. }) => {
            out.push(not_found(job, catalog, &error));
            return;
        }
    };
    if runtime.kind() == CLUSTER_TRAINING_RUNTIME_KIND
        && runtime.label(SUPPORT_LABEL) == Some(SUPPORT_DEPRECATED)
    {
        out.push(FieldError::warning(
            "spec.runtimeRef",
            format!(
                "Referenced ClusterTrainingRuntime {:?} is deprecated and will be removed in a future release of Kubeflow Trainer. See runtime deprecation policy: {DEPRECATION_POLICY_URL}",
                runtime.name()
            ),
        ));
    }
    runtime_rules(job, runtime.spec(), out);
}

/// The rules between a TrainJob and the runtime spec it resolved to: every plugin's checks.
pub(crate) fn runtime_rules(
    job: &TrainJob,
    runtime: &TrainingRuntimeSpec,
    out: &mut Vec<FieldError>,
) {
    jobset_plugin(job, runtime, out);
    policy_plugins(job, runtime, out);
}

fn not_found(job: &TrainJob, catalog: &RuntimeCatalog, error: &LookupError) -> FieldError {
    let cluster = job.spec.runtime_ref.kind_or_default() == CLUSTER_TRAINING_RUNTIME_KIND;
    // The webhook's catalog holds only the runtime the TrainJob names, so it is empty here and the
    // cluster gets upstream's text (the side-by-side runs compare it); an offline catalog (`validate`,
    // `render`, `run`) holds the available runtimes: a short message at the TrainJob's own field.
    if catalog.entries().next().is_some() {
        return FieldError::error("spec.runtimeRef.name", error.short_message());
    }
    // Upstream's path for the cluster case really is capitalised.
    let (path, what) = if cluster {
        ("spec.RuntimeRef", "clusterTrainingRuntime")
    } else {
        ("spec.runtimeRef", "trainingRuntime")
    };
    let message = invalid(
        &runtime_ref_value(job),
        &go_json::RUNTIME_REF,
        &format!("{error}: specified {what} must be created before the TrainJob is created"),
    );
    FieldError::error(path, message)
}

/// The TrainJob's `runtimeRef` with its CRD defaults, as upstream's webhook sees the stored object.
fn runtime_ref_value(job: &TrainJob) -> serde_json::Value {
    let r = &job.spec.runtime_ref;
    serde_json::json!({"name": r.name, "apiGroup": r.api_group_or_default(), "kind": r.kind_or_default()})
}

fn containers_of(job: &ReplicatedJob) -> impl Iterator<Item = &Container> {
    job.pod_spec().into_iter().flat_map(|s| {
        s.init_containers
            .iter()
            .flatten()
            .chain(s.containers.iter())
    })
}

fn regular_containers(job: &ReplicatedJob) -> &[Container] {
    job.pod_spec().map_or(&[], |s| s.containers.as_slice())
}

/// JobSet plugin: initializer jobs and runtime patch targets.
fn jobset_plugin(job: &TrainJob, runtime: &TrainingRuntimeSpec, out: &mut Vec<FieldError>) {
    // Most TrainJobs have neither initializers nor patches: then there is nothing to index.
    if job.spec.initializer.is_none() && job.spec.runtime_patches.is_empty() {
        return;
    }
    let jobs = &runtime.template.spec.replicated_jobs;
    let names: BTreeMap<&str, BTreeSet<&str>> = jobs
        .iter()
        .map(|j| {
            (
                j.name.as_str(),
                containers_of(j).map(|c| c.name.as_str()).collect(),
            )
        })
        .collect();

    if let Some(initializer) = &job.spec.initializer {
        let runtime_ref = go_json::marshal(&runtime_ref_value(job), &go_json::RUNTIME_REF);
        if initializer.dataset.is_some() {
            check_initializer(
                jobs,
                &names,
                DATASET_INITIALIZER,
                "datasetConfig",
                &runtime_ref,
                out,
            );
        }
        if initializer.model.is_some() {
            check_initializer(
                jobs,
                &names,
                MODEL_INITIALIZER,
                "modelConfig",
                &runtime_ref,
                out,
            );
        }
    }
    check_patch_targets(job, &names, out);
}

/// Every replicated job, initContainer and container a runtime patch names exists in the runtime, and no
/// patch sets env on the initializer or node containers.
fn check_patch_targets(
    job: &TrainJob,
    names: &BTreeMap<&str, BTreeSet<&str>>,
    out: &mut Vec<FieldError>,
) {
    // Upstream prints every patch with each finding about one of them.
    let patches = || go_json::marshal_typed(&job.spec.runtime_patches, &go_json::RUNTIME_PATCHES);
    let refuse = |what: String| {
        FieldError::error(
            "spec.runtimePatches",
            format!("Invalid value: {}: {what}", patches()),
        )
    };
    for patch in &job.spec.runtime_patches {
        out.extend(domain_prefixed_path(
            "spec.runtimePatches.manager",
            &patch.manager,
        ));
        let Some(rjobs) = patch
            .training_runtime_spec
            .as_ref()
            .and_then(|s| s.template.as_ref())
            .and_then(|t| t.spec.as_ref())
            .and_then(|s| s.replicated_jobs.as_ref())
        else {
            continue;
        };
        for rjob in rjobs {
            let Some(containers) = names.get(rjob.name.as_str()) else {
                out.push(refuse(
                    "must not have replicated job that doesn't exist in the runtime job template"
                        .into(),
                ));
                continue;
            };
            let Some(pod) = rjob
                .template
                .as_ref()
                .and_then(|t| t.spec.as_ref())
                .and_then(|s| s.template.as_ref())
                .and_then(|t| t.spec.as_ref())
            else {
                continue;
            };
            for c in pod.init_containers.iter().flatten() {
                if !containers.contains(c.name.as_str()) {
                    out.push(refuse(format!(
                        "must not have initContainer that doesn't exist in the runtime job {}",
                        rjob.name
                    )));
                }
            }
            for c in pod.containers.iter().flatten() {
                if !containers.contains(c.name.as_str()) {
                    out.push(refuse(format!(
                        "must not have container that doesn't exist in the runtime job {}",
                        rjob.name
                    )));
                } else if c.env.as_ref().is_some_and(|e| !e.is_empty())
                    && [DATASET_INITIALIZER, MODEL_INITIALIZER, NODE].contains(&c.name.as_str())
                {
                    out.push(refuse(
                        "must not have envs for the dataset-initializer, model-initializer, node containers".into(),
                    ));
                }
            }
        }
    }
}

fn check_initializer(
    jobs: &[ReplicatedJob],
    names: &BTreeMap<&str, BTreeSet<&str>>,
    role: &str,
    config: &str,
    runtime_ref: &str,
    out: &mut Vec<FieldError>,
) {
    let Some(containers) = names.get(role) else {
        out.push(FieldError::error(
            "spec.runtimeRef",
            format!("Invalid value: {runtime_ref}: must have {role} job when trainJob is configured with input {config}"),
        ));
        return;
    };
    if !containers.contains(role) {
        out.push(FieldError::error(
            "spec.runtimeRef",
            format!("Invalid value: {runtime_ref}: must have container with name - {role} in the {role} job"),
        ));
        return;
    }
    let mounted = jobs
        .iter()
        .filter(|j| j.name == role)
        .flat_map(regular_containers)
        .any(|c| {
            c.name == role
                && c.volume_mounts
                    .iter()
                    .flatten()
                    .any(|m| m.name == INITIALIZER_VOLUME)
        });
    if !mounted {
        out.push(FieldError::error(
            "spec.runtimeRef",
            format!("Invalid value: {runtime_ref}: must have volumeMount with name - {INITIALIZER_VOLUME} in container {role} of the {role} job"),
        ));
    }
}

/// Plugins gated on the runtime's ML and pod-group policies.
fn policy_plugins(job: &TrainJob, spec: &TrainingRuntimeSpec, out: &mut Vec<FieldError>) {
    match spec.ml_policy.as_ref().and_then(|p| p.source.as_ref()) {
        Some(MLPolicySource::Torch(torch)) => torch_rules(job, spec, torch, out),
        Some(MLPolicySource::Mpi(mpi)) => mpi_rules(job, spec, mpi, out),
        Some(MLPolicySource::Xgboost(_)) => {
            for (i, name) in trainer_env_names(job).enumerate() {
                if XGBOOST_RESERVED_ENV.contains(&name) {
                    out.push(FieldError::error(
                        format!("spec.trainer.env[{i}]"),
                        format!("Forbidden: {name} is reserved for the XGBoost runtime"),
                    ));
                }
            }
        }
        Some(MLPolicySource::Flux(_)) => flux_rules(spec, out),
        Some(MLPolicySource::Jax(_)) | None => {}
    }
    if let Some(PodGroupPolicySource::Volcano(_)) = spec
        .pod_group_policy
        .as_ref()
        .and_then(|p| p.source.as_ref())
    {
        let queue = volcano_queue(job, spec);
        if queue.as_deref() == Some("") {
            out.push(FieldError::error(
                format!("spec.annotations[{VOLCANO_QUEUE_ANNOTATION}]"),
                "Invalid value: \"\": Volcano queue name must not be empty",
            ));
        }
    }
}

/// The names of the TrainJob's trainer env, in order.
fn trainer_env_names(job: &TrainJob) -> impl Iterator<Item = &str> {
    job.spec
        .trainer
        .iter()
        .flat_map(|t| t.env.iter())
        .map(|e| e.name.as_str())
}

/// The trainer env names that `list` reserves.
fn reserved_in(job: &TrainJob, list: &[&str]) -> BTreeSet<String> {
    trainer_env_names(job)
        .filter(|n| list.contains(n))
        .map(str::to_owned)
        .collect()
}

/// Torch: env-injection targets exist in the runtime, reserved env stays unset, torchtune's own rules.
fn torch_rules(
    job: &TrainJob,
    spec: &TrainingRuntimeSpec,
    torch: &TorchMLPolicySource,
    out: &mut Vec<FieldError>,
) {
    for target in torch.env_injection.iter().flat_map(|e| &e.targets) {
        for container in &target.container_names {
            if !has_container(&spec.template.spec, &target.job_name, container) {
                out.push(FieldError::error(
                    "spec.runtimeRef",
                    invalid(
                        target,
                        &go_json::ENV_INJECTION_TARGET,
                        &format!(
                            "envInjection target podSet {:?} container {container:?} not found in runtime template",
                            target.job_name
                        ),
                    ),
                ));
            }
        }
    }
    if let Some(elastic) = &torch.elastic_policy {
        elastic_trainjob_rules(job, elastic, out);
    }
    if let Some(trainer) = job.spec.trainer.as_ref() {
        let found = reserved_in(job, &TORCH_RESERVED_ENV);
        if !found.is_empty() {
            out.push(reserved_envs(&trainer.env, &found));
        }
        if torchtune::is_torchtune_command(trainer.command.as_deref()) {
            torchtune_rules(job, spec, out);
        }
    }
}

/// Elastic torch (KEP-2903, ours ahead of upstream v2.3): the TrainJob's `numNodes` is its initial size and
/// lies within the runtime's bounds; the c10d rendezvous env is the plugin's.
fn elastic_trainjob_rules(
    job: &TrainJob,
    elastic: &crate::TorchElasticPolicy,
    out: &mut Vec<FieldError>,
) {
    let Some(trainer) = job.spec.trainer.as_ref() else {
        return;
    };
    if let Some(nodes) = trainer.num_nodes
        && !elastic.admits(nodes)
    {
        out.push(FieldError::error(
            "spec.trainer.numNodes",
            format!(
                "Invalid value: {nodes}: must be between the runtime's mlPolicy.torch.elasticPolicy.minNodes ({}) \
and maxNodes ({}): numNodes is the initial size of an elastic TrainJob",
                elastic.min_nodes, elastic.max_nodes
            ),
        ));
    }
    let found = reserved_in(job, &TORCH_ELASTIC_RESERVED_ENV);
    if !found.is_empty() {
        let names: Vec<&str> = found.iter().map(String::as_str).collect();
        out.push(FieldError::error(
            "spec.trainer.env",
            format!(
                "must not set [{}]: the c10d rendezvous of an elastic runtime (mlPolicy.torch.elasticPolicy) \
sets them",
                names.join(" ")
            ),
        ));
    }
}

/// MPI: several nodes need both the launcher and node jobs when the launcher runs as a node; reserved env.
fn mpi_rules(
    job: &TrainJob,
    spec: &TrainingRuntimeSpec,
    mpi: &MPIMLPolicySource,
    out: &mut Vec<FieldError>,
) {
    let nodes = job
        .spec
        .trainer
        .as_ref()
        .and_then(|t| t.num_nodes)
        .or(spec.ml_policy.as_ref().and_then(|p| p.num_nodes))
        .unwrap_or(1);
    if u64::try_from(nodes).is_ok_and(|hosts| hosts > MAX_MPI_HOSTS) {
        // Ours, not upstream's: the renderer would refuse it (`kubetrain_jobset::MAX_HOSTFILE_ENTRIES`).
        out.push(FieldError::error(
            "spec.trainer.numNodes",
            format!(
                "the MPI hostfile would list {nodes} hosts; at most {MAX_MPI_HOSTS} are supported"
            ),
        ));
    }
    let Some(trainer) = job.spec.trainer.as_ref() else {
        return;
    };
    let has_job = |name: &str| {
        spec.template
            .spec
            .replicated_jobs
            .iter()
            .any(|j| j.name == name)
    };
    if trainer.num_nodes.unwrap_or(1) >= 2
        && mpi.run_launcher_as_node_or_default()
        && (!has_job(LAUNCHER) || !has_job(NODE))
    {
        out.push(FieldError::error(
            "spec.trainer.numNodes",
            format!(
                "Invalid value: {}: must have 1 when MPI trainingRuntime with enabled runLauncherAsNode does not have either launcher and node",
                trainer.num_nodes.unwrap_or(1)
            ),
        ));
    }
    let found = reserved_in(job, &MPI_RESERVED_ENV);
    if !found.is_empty() {
        out.push(reserved_envs(&trainer.env, &found));
    }
}

/// Flux: the runtime's node job must not already have the init container Flux adds.
fn flux_rules(spec: &TrainingRuntimeSpec, out: &mut Vec<FieldError>) {
    let node = spec
        .template
        .spec
        .replicated_jobs
        .iter()
        .filter(|j| j.name == NODE);
    let init = node
        .flat_map(ReplicatedJob::pod_spec)
        .flat_map(|s| s.init_containers.iter().flatten());
    if init.into_iter().any(|c| c.name == FLUX_INSTALLER) {
        out.push(FieldError::error(
            "spec.trainer.initContainers",
            format!(
                "Invalid value: {FLUX_INSTALLER:?}: InitContainer 'flux-installer' is reserved"
            ),
        ));
    }
}

/// The queue annotation after runtime patches: the runtime template's, overridden by patch metadata in order.
fn volcano_queue(job: &TrainJob, spec: &TrainingRuntimeSpec) -> Option<String> {
    let template = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.as_ref());
    let mut queue = template
        .and_then(|a| a.get(VOLCANO_QUEUE_ANNOTATION))
        .cloned();
    for patch in &job.spec.runtime_patches {
        let annotations = patch
            .training_runtime_spec
            .as_ref()
            .and_then(|s| s.template.as_ref())
            .and_then(|t| t.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref());
        if let Some(value) = annotations.and_then(|a| a.get(VOLCANO_QUEUE_ANNOTATION)) {
            queue = Some(value.clone());
        }
    }
    queue
}

fn reserved_envs(
    env: &[k8s_openapi::api::core::v1::EnvVar],
    found: &BTreeSet<String>,
) -> FieldError {
    let names: Vec<&str> = found.iter().map(String::as_str).collect();
    FieldError::error(
        "spec.trainer.env",
        invalid(
            env,
            &go_json::ENV_VARS,
            &format!(
                "must not have reserved envs, invalid envs configured: [{}]",
                names.join(" ")
            ),
        ),
    )
}

fn has_container(spec: &JobSetSpec, job: &str, container: &str) -> bool {
    spec.replicated_jobs
        .iter()
        .filter(|j| j.name == job)
        .flat_map(containers_of)
        .any(|c| c.name == container)
}

/// The runtime's trainer resources: container `node` in the job named `node` or labelled as the trainer.
pub(crate) fn runtime_resources_per_node(spec: &JobSetSpec) -> Option<&ResourceRequirements> {
    spec.replicated_jobs
        .iter()
        .filter(|j| j.name == NODE || j.ancestor() == Some(ANCESTOR_TRAINER))
        .flat_map(regular_containers)
        .find(|c| c.name == NODE && c.resources.is_some())
        .and_then(|c| c.resources.as_ref())
}

/// GPU count of a resource requirement as upstream counts it: the first resource whose name contains "gpu" in
/// requests, else in limits, rounded up.
pub fn gpus_per_node(resources: Option<&ResourceRequirements>) -> i64 {
    let count = |list: Option<
        &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >| {
        list.into_iter()
            .flatten()
            .find(|(name, _)| name.to_lowercase().contains("gpu"))
            .and_then(|(_, q)| Nanos::from_quantity(q).ok())
            .map_or(0, Nanos::ceil_units)
    };
    let Some(resources) = resources else { return 0 };
    let requested = count(resources.requests.as_ref());
    if requested == 0 {
        count(resources.limits.as_ref())
    } else {
        requested
    }
}

fn torchtune_rules(job: &TrainJob, spec: &TrainingRuntimeSpec, out: &mut Vec<FieldError>) {
    let Some(trainer) = job.spec.trainer.as_ref() else {
        return;
    };
    let name = job.spec.runtime_ref.name.as_str();
    let model = torchtune::model_from_runtime_name(name);
    if !torchtune::SUPPORTED_MODELS.contains(&model.as_str()) {
        out.push(FieldError::error(
            "spec.runtimeRef.name",
            format!("Invalid value: {name:?}: must have a supported pretrained model, invalid model configured: {model}"),
        ));
    }
    let nodes = trainer.num_nodes.unwrap_or(1);
    if nodes > 1 && model != torchtune::LLAMA3_3_70B {
        out.push(FieldError::error(
            "spec.trainer.numNodes",
            format!("Invalid value: {nodes}: must be 1 for {model} model"),
        ));
    }
    let procs = trainer
        .num_proc_per_node
        .map_or(ProcsPerNode::Auto, |n| ProcsPerNode::Count(i64::from(n)));
    let resources = trainer
        .resources_per_node
        .as_ref()
        .or_else(|| runtime_resources_per_node(&spec.template.spec));
    let args = trainer.args.as_deref().unwrap_or_default();
    let (_, config) =
        torchtune::recipe_and_config(nodes, procs, gpus_per_node(resources), name, args);
    if config.contains(torchtune::QLORA_DISTRIBUTED_SUFFIX) {
        if model == torchtune::QWEN2_5_1_5B {
            out.push(FieldError::error(
                "spec.runtimeRef.name",
                format!("Invalid value: {name:?}: QLoRA is not supported for {model} model"),
            ));
        }
        if !config.contains(torchtune::QLORA_SINGLE_DEVICE_SUFFIX)
            && (model == torchtune::LLAMA3_2_1B || model == torchtune::LLAMA3_2_3B)
        {
            // Upstream's value is an IntOrString: `"auto"` or the number.
            let procs_value = trainer
                .num_proc_per_node
                .map_or_else(|| "\"auto\"".to_owned(), |n| n.to_string());
            out.push(FieldError::error(
                "spec.trainer.numProcPerNode",
                format!("Invalid value: {procs_value}: must be auto or 1 for {model} model when using QLoRA"),
            ));
            out.push(FieldError::error(
                "spec.trainer.resourcesPerNode",
                invalid(
                    &trainer.resources_per_node,
                    &go_json::RESOURCE_REQUIREMENTS,
                    &format!(
                        "must have gpu resource with value 1 for {model} model when using QLoRA"
                    ),
                ),
            ));
        }
    }
    if nodes > 1 && (torchtune::is_lora(args) || torchtune::is_qlora(args)) {
        out.push(FieldError::error(
            "spec.trainer.numNodes",
            format!("Invalid value: {nodes}: LoRA fine-tuning is not supported for multi-node training in TorchTune"),
        ));
    }
    for (i, arg) in args.iter().enumerate() {
        let key = arg.split('=').next().unwrap_or_default();
        if torchtune::IMMUTABLE_CONFIGS.contains(&key) {
            out.push(FieldError::error(
                format!("spec.trainer.args[{i}]"),
                format!("Invalid value: {arg:?}: must not set immutable config {key:?} in trainer args; it is managed by the runtime"),
            ));
        }
    }
}

/// Kubernetes' `IsDomainPrefixedPath`.
pub(crate) fn domain_prefixed_path(path: &str, value: &str) -> Vec<FieldError> {
    if value.is_empty() {
        return vec![FieldError::error(path, "Required value")];
    }
    let Some((host, rest)) = value
        .split_once('/')
        .filter(|(h, r)| !h.is_empty() && !r.is_empty())
    else {
        return vec![FieldError::error(
            path,
            format!(
                "Invalid value: {value:?}: must be a domain-prefixed path (such as \"acme.io/foo\")"
            ),
        )];
    };
    let mut errors = Vec::new();
    if !is_dns1123_subdomain(host) {
        errors.push(FieldError::error(
            path,
            format!(
                "Invalid value: {host:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ),
        ));
    }
    let path_char = |c: char| c.is_ascii_alphanumeric() || "/-._~%!$&'()*+,;=:".contains(c);
    if !rest.chars().all(path_char) {
        errors.push(FieldError::error(
            path,
            format!(
                "Invalid value: {rest:?}: Invalid path (regex used for validation is '[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+')"
            ),
        ));
    }
    errors
}

/// RFC 1123 subdomain: dot-separated labels of `[a-z0-9-]`, alphanumeric at both ends, at most 253 characters.
pub(crate) fn is_dns1123_subdomain(value: &str) -> bool {
    value.len() <= 253
        && value.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// The runtime webhook: ancestor jobs have one replica and their required container.
pub(crate) fn runtime(spec: &TrainingRuntimeSpec, out: &mut Vec<FieldError>) {
    claim_namespaces(&spec.template.spec, out);
    elastic_runtime(spec, out);
    for (i, job) in spec.template.spec.replicated_jobs.iter().enumerate() {
        let Some(role) = job.ancestor() else { continue };
        let required = match role {
            ANCESTOR_TRAINER => NODE,
            DATASET_INITIALIZER => DATASET_INITIALIZER,
            MODEL_INITIALIZER => MODEL_INITIALIZER,
            _ => continue,
        };
        let path = format!("spec.template.spec.replicatedJobs[{i}]");
        let replicas = job.replicas_or_default();
        if replicas != 1 {
            out.push(FieldError::error(
                format!("{path}.replicas"),
                format!("Invalid value: {replicas}: always must be 1"),
            ));
        }
        let containers = regular_containers(job);
        if !containers.iter().any(|c| c.name == required) {
            out.push(FieldError::error(
                format!("{path}.template.spec.template.spec.containers"),
                invalid(
                    containers,
                    &go_json::CONTAINERS,
                    &format!("must contain the required container for the ancestor: {role}"),
                ),
            ));
        }
    }
}

/// Upstream's CRD rule "namespace cannot be set for VolumeClaimPolicies templates" never fires on a cluster:
/// `namespace` is a CEL reserved word, which Kubernetes exposes to rules as `__namespace__`, so
/// `has(t.metadata.namespace)` is false even when the template sets one (kube-cel agrees). Its intent is
/// enforced here.
fn claim_namespaces(spec: &JobSetSpec, out: &mut Vec<FieldError>) {
    for (i, policy) in spec.volume_claim_policies.iter().enumerate() {
        let namespaced = policy.templates.iter().any(|t| {
            t.metadata
                .as_ref()
                .and_then(|m| m.namespace.as_deref())
                .is_some_and(|ns| !ns.is_empty())
        });
        if namespaced {
            out.push(FieldError::error(
                format!("spec.template.spec.volumeClaimPolicies[{i}]"),
                "namespace cannot be set for VolumeClaimPolicies templates",
            ));
        }
    }
}

/// An elastic runtime (KEP-2903's webhook rules, ahead of upstream v2.3): its trainer job is an Indexed Job whose
/// pod count the renderer and the scaling loop set, so the template must not fix another completion mode or
/// a parallelism that differs from its completions. (Runtime patches cannot set either field, so KEP-2903's
/// third rule holds by construction.)
fn elastic_runtime(spec: &TrainingRuntimeSpec, out: &mut Vec<FieldError>) {
    let Some(MLPolicySource::Torch(TorchMLPolicySource {
        elastic_policy: Some(_),
        ..
    })) = spec.ml_policy.as_ref().and_then(|p| p.source.as_ref())
    else {
        return;
    };
    for (i, job) in spec.template.spec.replicated_jobs.iter().enumerate() {
        if job.name != NODE && job.ancestor() != Some(ANCESTOR_TRAINER) {
            continue;
        }
        let Some(job_spec) = job.template.spec.as_ref() else {
            continue;
        };
        let path = format!("spec.template.spec.replicatedJobs[{i}].template.spec");
        if let Some(mode) = job_spec.completion_mode.as_deref()
            && mode != "Indexed"
        {
            out.push(FieldError::error(
                format!("{path}.completionMode"),
                format!(
                    "Invalid value: {mode:?}: must be Indexed when mlPolicy.torch.elasticPolicy is set"
                ),
            ));
        }
        if let (Some(p), Some(c)) = (job_spec.parallelism, job_spec.completions)
            && p != c
        {
            out.push(FieldError::error(
                format!("{path}.parallelism"),
                format!(
                    "Invalid value: {p}: must equal completions ({c}) when mlPolicy.torch.elasticPolicy is set"
                ),
            ));
        }
    }
}
