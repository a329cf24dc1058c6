//! One v1 job in; a TrainJob, the runtime it needs (unless a built-in one fits) and its report out.

mod policies;
mod role;
mod runtime;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubetrain_api::constants::{LAUNCHER, MAX_MPI_HOSTS, NODE, TRAINING_RUNTIME_KIND};
use kubetrain_api::{RuntimeRef, TrainJob, TrainJobSpec, Trainer, TrainingRuntimeSpec};

use crate::kinds::{self, World};
use crate::report::MigrationReport;
use crate::v1::{Identity, Parsed, ReplicaSpec, RunPolicy, V1Job, V1Kind};
use crate::{MigrateError, MigrateOptions, RuntimeKind};
use role::Role;

/// What one v1 job became.
pub(crate) struct Converted {
    pub(crate) trainjob: TrainJob,
    /// The runtime spec to generate; `None` when the TrainJob references a built-in runtime.
    pub(crate) runtime: Option<TrainingRuntimeSpec>,
    pub(crate) report: MigrationReport,
}

/// A role that is not a trainer node: its replicated job's name, its template and its pod count.
struct Extra {
    name: String,
    role: Role,
    count: i32,
}

/// Converts one job. The TrainJob's `runtimeRef.name` is filled in by the caller for generated runtimes (it
/// depends on the runtime's shape).
pub(crate) fn convert(
    parsed: &Parsed,
    options: &MigrateOptions,
) -> Result<Converted, MigrateError> {
    let job = &parsed.job;
    let kind = job.kind();
    let meta = job.metadata();
    let identity = Identity {
        kind: kind.to_string(),
        name: meta.name.clone().unwrap_or_default(),
    };
    let fail = |path: &str, message: &str| MigrateError::new(&identity, path, message.to_owned());
    let name = check_input(job, options, &fail)?;
    let roles = kinds::node_roles(kind, job.replica_specs());
    let nodes = count_nodes(kind, job, &roles, &fail)?;

    let namespace = meta.namespace.as_deref().unwrap_or("default");
    let mut report = MigrationReport {
        source: format!("{kind}/{namespace}/{name}"),
        trainjob: format!("{namespace}/{name}"),
        ..MigrationReport::default()
    };
    let mut carried = Carried::default();
    policies::metadata(meta, options, job.run_policy(), &mut report, &mut carried);
    let elastic = policies::torch_elastic(job, nodes, &fail, &mut report)?;
    let (mut node, mut extra) = build_roles(job, &roles, &fail, &mut report)?;
    report_replicas(
        job.replica_specs(),
        &roles,
        nodes,
        kind.replica_specs_field(),
        &mut report,
    );

    let tf_cluster = tf_cluster(job, roles[0], &name);
    let node_type = roles[0].to_lowercase();
    if let Some(cluster) = &tf_cluster {
        add_tf_config(job, cluster, &mut extra);
    }
    let world = World {
        kind,
        name: &name,
        nodes,
        procs_per_node: role::procs_per_node(job),
        port: kinds::meeting_port(kind, node.main().and_then(|c| c.ports.as_deref())),
        has_master: job.replica_specs().contains_key("Master"),
        elastic: elastic.is_some(),
        torch_nproc: role::v1_torch_nproc(job),
        tf: tf_cluster
            .as_ref()
            .filter(|_| has_tf_container(job, &node.path))
            .map(|c| (c, node_type.as_str())),
    };
    let trainer_role = match kind {
        // check_replicas made sure the launcher is there.
        V1Kind::MPIJob => extra
            .iter_mut()
            .find(|e| e.name == LAUNCHER)
            .map(|e| &mut e.role),
        _ => Some(&mut node),
    };
    let trainer = trainer_role
        .map(|role| role::trainer(kind, role, &world, &mut report))
        .ok_or_else(|| {
            fail(
                &format!("spec.{}", kind.replica_specs_field()),
                "no trainer replica",
            )
        })?;
    let mut trainer = Trainer {
        num_nodes: Some(elastic.as_ref().map_or(nodes, |e| e.num_nodes)),
        num_proc_per_node: role::num_proc_per_node(job, &mut report),
        ..trainer
    };
    if let Some(elastic) = elastic {
        add_elastic(&mut trainer, elastic, &mut carried);
    }
    policies::job_level(parsed, &mut report, &mut carried);

    let (spec, builtin) = runtime_of(job, node, extra, &carried, &mut report);
    let trainjob = trainjob(
        name,
        meta,
        runtime_ref(builtin, options),
        trainer,
        job.run_policy(),
        carried.labels,
    );
    Ok(Converted {
        trainjob,
        runtime: builtin.is_none().then_some(spec),
        report,
    })
}

/// The generated runtime for `node` and `extra`, and the built-in runtime that takes its place when the job
/// needs nothing of its own; otherwise the report says each template is carried into the generated one.
fn runtime_of(
    job: &V1Job,
    node: Role,
    extra: Vec<Extra>,
    carried: &Carried,
    report: &mut MigrationReport,
) -> (TrainingRuntimeSpec, Option<&'static str>) {
    let kind = job.kind();
    let templates: Vec<String> = std::iter::once(node.path.clone())
        .chain(extra.iter().map(|e| e.role.path.clone()))
        .collect();
    let spec = runtime::runtime_spec(kind, job, node, extra, carried);
    let builtin = kinds::builtin_runtime(kind).filter(|_| runtime::is_plain(&spec));
    report.builtin_runtime = builtin.is_some();
    if builtin.is_none() {
        for path in templates {
            report.exact(
                format!("{path}.template"),
                "the rest of the pod template (labels, volumes, sidecars, init containers, security context, node \
                 selector, tolerations, service account, ...) is the generated runtime's, as written",
            );
        }
    }
    (spec, builtin)
}

/// TFJob: `TF_CONFIG` in the pods of the other replica types that have a `tensorflow` container.
fn add_tf_config(job: &V1Job, cluster: &kinds::TfCluster, extra: &mut [Extra]) {
    for e in extra
        .iter_mut()
        .filter(|e| has_tf_container(job, &e.role.path))
    {
        e.role.append_env(kinds::tf_config_env(cluster, &e.name));
    }
}

/// An elastic PyTorchJob: v1's elastic env on the trainer (after the user's, as v1 appended it: a name the user
/// set wins, it came first) and the policy for the runtime.
fn add_elastic(trainer: &mut Trainer, elastic: policies::Elastic, carried: &mut Carried) {
    for var in elastic.env {
        if !trainer.env.iter().any(|e| e.name == var.name) {
            trainer.env.push(var);
        }
    }
    carried.elastic = Some(elastic.policy);
}

/// What makes a v1 job impossible to migrate: no name or one a TrainJob cannot have, replicas the kind does not
/// have, a queue that cannot be a label. Returns the name.
fn check_input(
    job: &V1Job,
    options: &MigrateOptions,
    fail: &dyn Fn(&str, &str) -> MigrateError,
) -> Result<String, MigrateError> {
    let kind = job.kind();
    let meta = job.metadata();
    let name = meta.name.clone().filter(|n| !n.is_empty()).ok_or_else(|| {
        fail(
            "metadata.name",
            "a v1 job to migrate needs a name (the TrainJob is named like it)",
        )
    })?;
    if !is_dns_label(&name) {
        return Err(fail(
            "metadata.name",
            "a TrainJob's name is an RFC 1035 label (lowercase letters, digits and '-', starting with a letter, \
             ending with a letter or digit, at most 63 characters): rename the v1 job before migrating",
        ));
    }
    check_replicas(kind, job, fail)?;
    let policy_queue = job
        .run_policy()
        .scheduling_policy
        .as_ref()
        .and_then(|s| s.queue.as_deref());
    for (path, queue) in [
        ("--queue", options.queue.as_deref()),
        ("spec.runPolicy.schedulingPolicy.queue", policy_queue),
    ] {
        if queue.is_some_and(|q| !is_label_value(q)) {
            return Err(fail(
                path,
                "the Kueue queue is a label value: at most 63 letters, digits, '-', '_' or '.', starting and \
                 ending with a letter or digit",
            ));
        }
    }
    Ok(name)
}

/// Whether `name` can name a TrainJob (its CRD's CEL rules: `^[a-z]([-a-z0-9]*[a-z0-9])?$`, at most 63).
fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    let inner = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-';
    name.len() <= 63
        && bytes.first().is_some_and(u8::is_ascii_lowercase)
        && bytes
            .last()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && bytes.iter().all(inner)
}

/// Whether `value` can be a label value (Kubernetes' rule: at most 63 characters,
/// `(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?`).
fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    let edge = |b: &u8| b.is_ascii_alphanumeric();
    value.len() <= 63
        && (bytes.is_empty()
            || (bytes.first().is_some_and(edge)
                && bytes.last().is_some_and(edge)
                && bytes
                    .iter()
                    .all(|b| edge(b) || matches!(b, b'-' | b'_' | b'.'))))
}

/// The pods of the trainer's node roles, at least one.
fn count_nodes(
    kind: V1Kind,
    job: &V1Job,
    roles: &[&str],
    fail: &dyn Fn(&str, &str) -> MigrateError,
) -> Result<i32, MigrateError> {
    let field = kind.replica_specs_field();
    let Some(first) = roles.first() else {
        return Err(fail(
            &format!("spec.{field}"),
            &format!("a {kind} needs a {} replica spec", node_roles_wanted(kind)),
        ));
    };
    let mut nodes: i32 = 0;
    for role in roles {
        let replicas = job
            .replica_specs()
            .get(*role)
            .map_or(0, ReplicaSpec::replicas_or_default);
        nodes = nodes.checked_add(replicas).ok_or_else(|| {
            fail(
                &format!("spec.{field}"),
                "the replicas add up to more than 2147483647",
            )
        })?;
    }
    if nodes < 1 {
        return Err(fail(
            &format!("spec.{field}.{first}.replicas"),
            "the job has no training pods: at least one replica is needed",
        ));
    }
    // XGBoost's WORKER_ADDRS lists every node: the limit keeps that env (and the MPI hostfile) bounded.
    if u64::try_from(nodes).is_ok_and(|n| n > MAX_MPI_HOSTS) {
        return Err(fail(
            &format!("spec.{field}"),
            &format!("{nodes} training pods; at most {MAX_MPI_HOSTS} are supported"),
        ));
    }
    Ok(nodes)
}

/// The trainer's nodes (every node role shares the first role's template: Master before Worker, rank 0) and
/// the other roles, each a replicated job of its own.
fn build_roles(
    job: &V1Job,
    roles: &[&str],
    fail: &dyn Fn(&str, &str) -> MigrateError,
    report: &mut MigrationReport,
) -> Result<(Role, Vec<Extra>), MigrateError> {
    let kind = job.kind();
    let field = kind.replica_specs_field();
    let specs = job.replica_specs();
    let main = match job {
        V1Job::Mpi(j) => j.spec.main_container.as_deref(),
        _ => None,
    };
    let first = roles[0];
    let path = |role: &str| format!("spec.{field}.{role}");
    let node = Role::build(kind, &specs[first], &path(first), main, fail, report)?;
    for role in &roles[1..] {
        same_template(&specs[first], &specs[*role], first, &path(role), report);
    }
    let mut extra = Vec::new();
    for (role, spec) in specs.iter().filter(|(r, _)| !roles.contains(&r.as_str())) {
        let name = role.to_lowercase();
        let count = spec.replicas_or_default();
        report.exact(
            format!("{}.replicas", path(role)),
            format!("replicatedJob {name}: {count} pod(s)"),
        );
        let role = Role::build(kind, spec, &path(role), main, fail, report)?;
        extra.push(Extra { name, role, count });
    }
    Ok((node, extra))
}

/// The cluster spec of a TFJob's `TF_CONFIG`, as v1's `genClusterSpec` builds it (every replica type, each
/// pod as `host:port`, the port from the `tensorflow` container's `tfjob-port`, else 2222), with the JobSet's
/// DNS names: the trainer's nodes are replicated job `node`, other types their lower-case name. `None` for
/// other kinds and for a job of one pod, where v1 writes no `TF_CONFIG` (`isDistributed`).
fn tf_cluster(job: &V1Job, node_role: &str, name: &str) -> Option<kinds::TfCluster> {
    let V1Job::TF(tf) = job else {
        return None;
    };
    let specs = &tf.spec.replica_specs;
    if specs
        .values()
        .map(ReplicaSpec::replicas_or_default)
        .sum::<i32>()
        == 1
    {
        return None;
    }
    let cluster = specs
        .iter()
        .map(|(role, spec)| {
            let task_type = role.to_lowercase();
            let replicated_job = if role == node_role {
                NODE
            } else {
                task_type.as_str()
            };
            let port = kinds::meeting_port(
                V1Kind::TFJob,
                tf_container(spec).and_then(|c| c.ports.as_deref()),
            );
            let hosts = (0..spec.replicas_or_default())
                .map(|i| format!("{name}-{replicated_job}-0-{i}.{name}:{port}"))
                .collect();
            (task_type, hosts)
        })
        .collect();
    Some(cluster)
}

/// The container v1 writes `TF_CONFIG` into: the one named `tensorflow`.
fn tf_container(spec: &ReplicaSpec) -> Option<&k8s_openapi::api::core::v1::Container> {
    let pod = spec.template.spec.as_ref()?;
    pod.containers
        .iter()
        .find(|c| c.name == V1Kind::TFJob.default_container())
}

/// Whether the replica spec at `path` (`spec.tfReplicaSpecs.<Role>`) has a `tensorflow` container.
fn has_tf_container(job: &V1Job, path: &str) -> bool {
    let role = path.rsplit('.').next().unwrap_or_default();
    job.replica_specs()
        .get(role)
        .is_some_and(|spec| tf_container(spec).is_some())
}

/// A built-in ClusterTrainingRuntime by name, or the generated runtime (named by the caller) of `options`' kind.
fn runtime_ref(builtin: Option<&str>, options: &MigrateOptions) -> RuntimeRef {
    match (builtin, options.runtime_kind) {
        (Some(builtin), _) => RuntimeRef::cluster(builtin),
        (None, RuntimeKind::ClusterTrainingRuntime) => RuntimeRef::cluster(String::new()),
        (None, RuntimeKind::TrainingRuntime) => RuntimeRef {
            kind: Some(TRAINING_RUNTIME_KIND.to_owned()),
            ..RuntimeRef::default()
        },
    }
}

fn trainjob(
    name: String,
    meta: &ObjectMeta,
    runtime_ref: RuntimeRef,
    trainer: Trainer,
    run: &RunPolicy,
    labels: BTreeMap<String, String>,
) -> TrainJob {
    let mut trainjob = TrainJob::new(
        name,
        TrainJobSpec {
            runtime_ref,
            trainer: Some(trainer),
            suspend: run.suspend,
            active_deadline_seconds: run.active_deadline_seconds,
            ttl_seconds_after_finished: run.ttl_seconds_after_finished,
            ..TrainJobSpec::default()
        },
    );
    trainjob.metadata.namespace = meta.namespace.clone();
    trainjob.metadata.labels = (!labels.is_empty()).then_some(labels);
    trainjob.metadata.annotations = meta.annotations.clone().filter(|a| !a.is_empty());
    trainjob
}

/// What the job level hands to the runtime's templates.
#[derive(Default)]
struct Carried {
    labels: BTreeMap<String, String>,
    priority_class: Option<String>,
    backoff_limit: Option<i32>,
    /// A PyTorchJob's `elasticPolicy`, as the runtime's `mlPolicy.torch.elasticPolicy`.
    elastic: Option<kubetrain_api::TorchElasticPolicy>,
}

fn node_roles_wanted(kind: V1Kind) -> &'static str {
    match kind {
        V1Kind::PyTorchJob | V1Kind::XGBoostJob | V1Kind::PaddleJob => "Master or Worker",
        V1Kind::TFJob => "Worker, Chief or Master",
        V1Kind::MPIJob | V1Kind::JAXJob => "Worker",
    }
}

/// Replica types the kind knows, non-negative counts, a Launcher for MPI.
fn check_replicas(
    kind: V1Kind,
    job: &V1Job,
    fail: &dyn Fn(&str, &str) -> MigrateError,
) -> Result<(), MigrateError> {
    let field = kind.replica_specs_field();
    for (role, spec) in job.replica_specs() {
        if !kind.replica_types().contains(&role.as_str()) {
            return Err(fail(
                &format!("spec.{field}.{role}"),
                &format!(
                    "unknown replica type; a {kind} has {}",
                    kind.replica_types().join(", ")
                ),
            ));
        }
        if spec.replicas_or_default() < 0 {
            return Err(fail(
                &format!("spec.{field}.{role}.replicas"),
                "must be 0 or more",
            ));
        }
    }
    if kind == V1Kind::MPIJob && !job.replica_specs().contains_key("Launcher") {
        return Err(fail(
            &format!("spec.{field}"),
            "an MPIJob needs a Launcher replica spec",
        ));
    }
    Ok(())
}

/// A later node role's template must equal the first one's: the runtime has one template for every node.
fn same_template(
    first: &ReplicaSpec,
    other: &ReplicaSpec,
    first_role: &str,
    path: &str,
    report: &mut MigrationReport,
) {
    if first.template == other.template && first.restart_policy == other.restart_policy {
        report.exact(
            format!("{path}.template"),
            format!("same as the {first_role}'s: the runtime's node template serves every node"),
        );
    } else {
        report.not_carried(
            format!("{path}.template"),
            format!(
                "differs from the {first_role}'s (template or restartPolicy); every TrainJob node uses the \
                 {first_role}'s template: make them equal in the v1 job, or edit the generated runtime"
            ),
        );
    }
}

/// How the node roles' replicas became `numNodes`.
fn report_replicas(
    specs: &crate::v1::ReplicaSpecs,
    roles: &[&str],
    nodes: i32,
    field: &str,
    report: &mut MigrationReport,
) {
    for role in roles {
        let path = format!("spec.{field}.{role}.replicas");
        if roles.len() == 1 {
            report.exact(path, format!("spec.trainer.numNodes: {nodes}"));
        } else {
            report.changed(
                path,
                format!(
                    "{} {role} pod(s) are nodes of spec.trainer.numNodes: {nodes} ({} first: rank 0)",
                    specs[*role].replicas_or_default(),
                    roles[0]
                ),
            );
        }
    }
}
