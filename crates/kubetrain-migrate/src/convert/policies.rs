//! The job-level fields: metadata and the Kueue queue, `runPolicy`, and the fields only some kinds have.

use k8s_openapi::api::autoscaling::v2::MetricSpec;
use k8s_openapi::api::core::v1::EnvVar;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubetrain_api::TorchElasticPolicy;

use super::Carried;
use crate::report::MigrationReport;
use crate::v1::{CleanPodPolicy, ElasticPolicy, Parsed, ReplicaSpec, RunPolicy, V1Job};
use crate::{MigrateError, MigrateOptions, QUEUE_LABEL};

/// The most metrics a runtime's `elasticPolicy` holds (its schema's `maxItems`).
const MAX_ELASTIC_METRICS: usize = 16;

/// Labels, annotations and the Kueue queue.
pub(super) fn metadata(
    meta: &ObjectMeta,
    options: &MigrateOptions,
    run: &RunPolicy,
    report: &mut MigrationReport,
    carried: &mut Carried,
) {
    report.exact("metadata.name", "metadata.name");
    if meta.namespace.is_some() {
        report.exact("metadata.namespace", "metadata.namespace");
    }
    carried.labels = meta.labels.clone().unwrap_or_default();
    if !carried.labels.is_empty() {
        report.exact(
            "metadata.labels",
            "metadata.labels (Kueue reads kueue.x-k8s.io/* labels there)",
        );
    }
    if meta.annotations.as_ref().is_some_and(|a| !a.is_empty()) {
        report.exact("metadata.annotations", "metadata.annotations");
    }
    let policy_queue = run
        .scheduling_policy
        .as_ref()
        .and_then(|s| s.queue.clone())
        .filter(|q| !q.is_empty());
    let label = carried.labels.get(QUEUE_LABEL).cloned();
    if let Some(queue) = &policy_queue {
        let path = "spec.runPolicy.schedulingPolicy.queue";
        match &label {
            Some(l) if l == queue => report.exact(path, format!("metadata.labels[{QUEUE_LABEL}] (same value)")),
            Some(l) => report.changed(path, format!("{queue:?} (a Volcano queue) is not used: the {QUEUE_LABEL} label {l:?} names the Kueue LocalQueue")),
            None => {
                report.changed(
                    path,
                    format!("metadata.labels[{QUEUE_LABEL}]: {queue:?}, now a Kueue LocalQueue name (v1: a Volcano queue); create a LocalQueue of that name in the namespace"),
                );
                carried.labels.insert(QUEUE_LABEL.to_owned(), queue.clone());
            }
        }
    }
    let replaced = options.queue.as_ref().and_then(|queue| {
        let old = carried.labels.insert(QUEUE_LABEL.to_owned(), queue.clone());
        old.filter(|o| o != queue).map(|old| (old, queue))
    });
    if let Some((old, queue)) = replaced {
        report.changed(
            format!("metadata.labels[{QUEUE_LABEL}]"),
            format!("{old:?} replaced by --queue {queue:?}"),
        );
    }
    for (field, note) in [
        ("uid", "set by the API server"),
        ("resourceVersion", "set by the API server"),
        ("generation", "set by the API server"),
        ("creationTimestamp", "set by the API server"),
        ("managedFields", "set by the API server"),
        ("generateName", "the TrainJob has the v1 job's name"),
    ] {
        let present = match field {
            "uid" => meta.uid.is_some(),
            "resourceVersion" => meta.resource_version.is_some(),
            "generation" => meta.generation.is_some(),
            "creationTimestamp" => meta.creation_timestamp.is_some(),
            "managedFields" => meta.managed_fields.is_some(),
            _ => meta.generate_name.is_some(),
        };
        if present {
            report.changed(format!("metadata.{field}"), format!("dropped: {note}"));
        }
    }
    if meta
        .owner_references
        .as_ref()
        .is_some_and(|o| !o.is_empty())
    {
        report.not_carried(
            "metadata.ownerReferences",
            "the TrainJob has no owner: add the owners' references again if they should own it",
        );
    }
    if meta.finalizers.as_ref().is_some_and(|f| !f.is_empty()) {
        report.not_carried(
            "metadata.finalizers",
            "finalizers belong to the controllers of the v1 job; add the ones the TrainJob needs",
        );
    }
}

/// Everything at the job level but the metadata: the status, `runPolicy`, the kind's own fields and the
/// fields the types do not know.
pub(super) fn job_level(parsed: &Parsed, report: &mut MigrationReport, carried: &mut Carried) {
    let job = &parsed.job;
    if job.status().is_some() {
        report.changed(
            "status",
            "dropped: the v1 operator's status; the TrainJob gets its own",
        );
    }
    run_policy(job, report, carried);
    kind_specific(job, report);
    for path in &parsed.unknown_fields {
        report.not_carried(
            path.clone(),
            "not a field of the Training Operator v1 API this tool knows (v1.8.1, JAXJob v1.9.0); not carried",
        );
    }
}

/// `runPolicy` (and MPIJob's deprecated `cleanPodPolicy`).
fn run_policy(job: &V1Job, report: &mut MigrationReport, carried: &mut Carried) {
    let run = job.run_policy();
    let p = "spec.runPolicy";
    let clean = match job {
        V1Job::Mpi(j) if j.spec.clean_pod_policy.is_some() && run.clean_pod_policy.is_none() => {
            j.spec.clean_pod_policy.map(|c| ("spec.cleanPodPolicy", c))
        }
        _ => run
            .clean_pod_policy
            .map(|c| ("spec.runPolicy.cleanPodPolicy", c)),
    };
    match clean {
        Some((path, CleanPodPolicy::None)) => report.exact(path, "None: finished pods stay, as the JobSet's Jobs keep them"),
        Some((path, policy)) => report.not_carried(
            path,
            format!(
                "{policy:?}: the TrainJob keeps its finished pods until it is deleted; delete the TrainJob (or its \
                 JobSet) when the job ends to free them"
            ),
        ),
        None => {}
    }
    if run.ttl_seconds_after_finished.is_some() {
        // KEP-2899's field, ahead of upstream v2.3 (docs/validation.md): kubetrain-operator deletes the
        // finished TrainJob and its children, as v1 deleted the finished job.
        report.exact(
            format!("{p}.ttlSecondsAfterFinished"),
            "spec.ttlSecondsAfterFinished (KEP-2899; kubetrain-operator honours it, upstream v2.3 does not have it)",
        );
    }
    if run.active_deadline_seconds.is_some() {
        report.exact(
            format!("{p}.activeDeadlineSeconds"),
            "spec.activeDeadlineSeconds",
        );
    }
    if run.suspend.is_some() {
        report.exact(format!("{p}.suspend"), "spec.suspend");
    }
    match run.backoff_limit {
        Some(limit) => {
            carried.backoff_limit = Some(limit);
            report.changed(
                format!("{p}.backoffLimit"),
                format!("backoffLimit {limit} of every Job in the runtime: counts failed pods per replicated job, v1 counted them per job"),
            );
        }
        None => report.changed(
            format!("{p}.backoffLimit"),
            "unset: v1 retried by restartPolicy alone; the Jobs retry failed pods up to Kubernetes' default of 6 (set runPolicy.backoffLimit before migrating to choose)",
        ),
    }
    let Some(scheduling) = &run.scheduling_policy else {
        return;
    };
    let s = format!("{p}.schedulingPolicy");
    if let Some(class) = scheduling.priority_class.clone().filter(|c| !c.is_empty()) {
        report.changed(
            format!("{s}.priorityClass"),
            format!("{class:?} is every pod's priorityClassName (v1: the PodGroup's); Kueue takes the workload's priority from it"),
        );
        carried.priority_class = Some(class);
    }
    if scheduling.min_available.is_some() || scheduling.min_resources.is_some() {
        report.not_carried(
            format!("{s}.minAvailable/minResources"),
            "Kueue admits the whole TrainJob at once; without Kueue, add podGroupPolicy (coscheduling or volcano) to the runtime for a gang of every pod",
        );
    }
    if let Some(timeout) = scheduling.schedule_timeout_seconds {
        report.not_carried(
            format!("{s}.scheduleTimeoutSeconds"),
            format!("{timeout}s: set podGroupPolicy.coscheduling.scheduleTimeoutSeconds in the runtime if you gang-schedule without Kueue"),
        );
    }
}

/// Fields only some kinds have.
fn kind_specific(job: &V1Job, report: &mut MigrationReport) {
    match job {
        V1Job::Paddle(j) if j.spec.elastic_policy.is_some() => report.not_carried(
            "spec.elasticPolicy",
            "TrainJobs have no Paddle elastic: the node count is fixed at numNodes",
        ),
        V1Job::TF(j) => {
            let chief = ["Chief", "Master"]
                .iter()
                .any(|r| j.spec.replica_specs.contains_key(*r));
            let others = j.spec.replica_specs.len() > 1;
            match j.spec.success_policy.as_deref().filter(|s| !s.is_empty()) {
                Some("AllWorkers") => report.exact(
                    "spec.successPolicy",
                    "AllWorkers: the runtime's JobSet successPolicy targets the workers (replicatedJob node)",
                ),
                Some(other) => report.not_carried("spec.successPolicy", format!("{other:?} is not a v1 success policy")),
                None if others && !chief => report.changed(
                    "(v1 success)",
                    "v1 ended the job when worker 0 succeeded; the JobSet waits for every worker (successPolicy \
                     targets replicatedJob node)",
                ),
                None if others => report.exact(
                    "(v1 success)",
                    "the chief's success ends the job: the JobSet successPolicy targets its replicatedJob",
                ),
                None => {}
            }
            if j.spec.enable_dynamic_worker == Some(true) {
                report.not_carried(
                    "spec.enableDynamicWorker",
                    "TrainJobs have a fixed number of workers",
                );
            }
        }
        V1Job::Mpi(j) => {
            report.exact(
                "spec.slotsPerWorker",
                "mpi.numProcPerNode of the runtime's ML policy (default 1)",
            );
            report.exact(
                "(v1 success)",
                "the launcher's success ends the job: the JobSet successPolicy targets replicatedJob launcher, which \
                 starts once every worker is Ready",
            );
            if j.spec.main_container.is_some() {
                report.exact(
                    "spec.mainContainer",
                    "that container is the runtime's node container",
                );
            }
            mpi_launch(&j.spec.replica_specs, report);
        }
        _ => {}
    }
}

/// What v1's `kubectl exec` launch gave an MPIJob that V2's SSH launch does not (v1.8.1's
/// `mpijob_controller.go`): the worker's `sleep 365d`, the worker's env for the ranks, `discover_hosts.sh`.
fn mpi_launch(specs: &crate::v1::ReplicaSpecs, report: &mut MigrationReport) {
    let containers = |role: &str| {
        specs
            .get(role)
            .and_then(|s| s.template.spec.as_ref())
            .map(|s| s.containers.clone())
            .unwrap_or_default()
    };
    // v1 gives the worker's first container `sleep 365d` (its args too) when it has no command.
    let worker_without_command = containers("Worker")
        .first()
        .is_some_and(|c| c.command.as_ref().is_none_or(Vec::is_empty));
    let worker = if worker_without_command {
        "v1 ran `sleep 365d` in the worker's container, which has no command; V2 runs the image's entrypoint, \
         which must keep sshd running (e.g. command [/usr/sbin/sshd, -De]; see the deepspeed-distributed runtime)"
    } else {
        "the worker's command must keep sshd running"
    };
    report.not_carried(
        "(v1 operator launch)",
        format!(
            "v1 started the ranks with kubectl exec (kubexec.sh), so they inherited the worker container's env (the \
             image's ENV and the template's env); V2 starts them over SSH with the keys and hostfile it mounts, so \
             they get the SSH session's env: forward what they need with mpirun -x NAME (the launcher's value). \
             {worker}; the launcher's mpirun reads the hostfile from OMPI_MCA_orte_default_hostfile"
        ),
    );
    let discovers = containers("Launcher").iter().any(|c| {
        c.command
            .iter()
            .chain(c.args.iter())
            .flatten()
            .any(|w| w.contains("discover_hosts.sh"))
    });
    if discovers {
        report.not_carried(
            "(v1 discover_hosts.sh)",
            "the launcher names discover_hosts.sh, which v1 wrote into /etc/mpi (the running workers, for \
             horovodrun --host-discovery-script); V2 mounts only the hostfile there: ship a script that prints the \
             workers as host:slots lines (the hosts of /etc/mpi/hostfile) in the image or a ConfigMap of your own",
        );
    }
}

/// What a PyTorchJob's `elasticPolicy` became: the runtime's `mlPolicy.torch.elasticPolicy`, the node count the
/// TrainJob starts with, and the torchrun env v1 set that V2's torch policy does not (`PET_MAX_RESTARTS`,
/// `PET_RDZV_CONF`).
pub(super) struct Elastic {
    /// The runtime's elastic policy: v1's bounds (after v1's defaulting) and HPA metrics.
    pub(super) policy: TorchElasticPolicy,
    /// `spec.trainer.numNodes`: v1's pod count, within the bounds.
    pub(super) num_nodes: i32,
    /// Env for the TrainJob's trainer, as v1's `ElasticEnvVarGenerator` wrote it.
    pub(super) env: Vec<EnvVar>,
}

/// A PyTorchJob's `elasticPolicy`, field by field (v1.8.1's `setElasticPolicy` defaulting and
/// `ElasticEnvVarGenerator`). `None` for other kinds and jobs without one.
pub(super) fn torch_elastic(
    job: &V1Job,
    nodes: i32,
    fail: &dyn Fn(&str, &str) -> MigrateError,
    report: &mut MigrationReport,
) -> Result<Option<Elastic>, MigrateError> {
    let V1Job::PyTorch(j) = job else {
        return Ok(None);
    };
    let Some(elastic) = &j.spec.elastic_policy else {
        return Ok(None);
    };
    let p = "spec.elasticPolicy";
    // v1's defaulting: one bound missing takes the other's value; both missing take the Worker replicas.
    let workers = j
        .spec
        .replica_specs
        .get("Worker")
        .map_or(nodes, ReplicaSpec::replicas_or_default);
    let (min, max) = match (elastic.min_replicas, elastic.max_replicas) {
        (Some(min), Some(max)) => (min, max),
        (Some(min), None) => (min, min),
        (None, Some(max)) => (max, max),
        (None, None) => (workers, workers),
    };
    if min < 1 {
        return Err(fail(
            &format!("{p}.minReplicas"),
            &format!("{min}: torchrun needs at least 1 node (PET_NNODES={min}:{max})"),
        ));
    }
    if max < min {
        return Err(fail(
            &format!("{p}.maxReplicas"),
            &format!("{max}: must be at least minReplicas ({min})"),
        ));
    }
    // v1 made an HPA only of a policy with metrics; without one its replicas stayed.
    let sizing = if elastic.metrics.as_ref().is_some_and(|m| !m.is_empty()) {
        "it starts with spec.trainer.numNodes (v1's replicas), the nodes its pods fit on cap the size, and within \
         that the policy's metrics decide as v1's HPA did; metrics that cannot be read keep the size"
    } else {
        "without metrics it follows the nodes its pods fit on, up to maxNodes, where v1 (no HPA without metrics) \
         kept its replicas"
    };
    report.changed(
        p,
        format!(
            "mlPolicy.torch.elasticPolicy of the generated runtime: torchrun runs elastic with PET_NNODES={min}:{max} \
             and a c10d rendezvous hosted by node 0, as v1's did (no fixed RANK or PET_NODE_RANK: the rendezvous \
             assigns ranks); kubetrain-operator sizes the job itself within the bounds: {sizing} (docs/operator.md, \
             \"The elastic loop\")"
        ),
    );
    bound_entries(elastic, min, max, report);
    let num_nodes = nodes.clamp(min, max);
    if num_nodes != nodes {
        report.changed(
            "(v1 elastic size)",
            format!(
                "v1 started {nodes} pod(s), outside elasticPolicy's [{min}, {max}]; spec.trainer.numNodes is \
                 {num_nodes}, the nearest bound (an elastic TrainJob's numNodes must lie within them)"
            ),
        );
    }
    rendezvous_entries(elastic, report);
    let env = elastic_env(elastic, report);
    let metrics = metrics(elastic, report);
    Ok(Some(Elastic {
        policy: TorchElasticPolicy {
            min_nodes: min,
            max_nodes: max,
            metrics,
        },
        num_nodes,
        env,
    }))
}

/// The env v1's `ElasticEnvVarGenerator` wrote that V2's torch policy does not (`PET_MAX_RESTARTS`,
/// `PET_RDZV_CONF`), and the report lines of `standalone` and `nProcPerNode`.
fn elastic_env(elastic: &ElasticPolicy, report: &mut MigrationReport) -> Vec<EnvVar> {
    let p = "spec.elasticPolicy";
    let mut env = Vec::new();
    if let Some(restarts) = elastic.max_restarts {
        report.exact(
            format!("{p}.maxRestarts"),
            format!(
                "PET_MAX_RESTARTS={restarts} in spec.trainer.env, as v1 set it: torchrun's --max-restarts (the \
                 agent restarts its worker group); failed pods are the Jobs' backoffLimit, a failed JobSet the \
                 runtime's failurePolicy.maxRestarts"
            ),
        );
        env.push(env_var("PET_MAX_RESTARTS", &restarts.to_string()));
    }
    // v1 joins the entries as `key=value,...`; an empty list crashes v1's generator, so there is nothing to carry.
    if let Some(conf) = elastic.rdzv_conf.as_ref().filter(|c| !c.is_empty()) {
        let value = conf
            .iter()
            .map(|c| {
                format!(
                    "{}={}",
                    c.key.as_deref().unwrap_or(""),
                    c.value.as_deref().unwrap_or("")
                )
            })
            .collect::<Vec<_>>()
            .join(",");
        report.exact(
            format!("{p}.rdzvConf"),
            format!(
                "PET_RDZV_CONF={value:?} in spec.trainer.env, as v1 set it (torchrun's --rdzv-conf)"
            ),
        );
        env.push(env_var("PET_RDZV_CONF", &value));
    }
    match elastic.standalone {
        Some(true) => report.not_carried(
            format!("{p}.standalone"),
            "true: v1 set PET_STANDALONE=\"\", which torchrun's flag parser reads with int() and refuses; standalone \
             is a rendezvous local to one node, while the TrainJob's nodes meet at node 0's c10d store: drop it (a \
             one-node job needs no rendezvous of its own)",
        ),
        Some(false) => report.exact(format!("{p}.standalone"), "false: v1 set nothing, nor does the TrainJob"),
        None => {}
    }
    if elastic.n_proc_per_node.is_some() {
        report.changed(
            format!("{p}.nProcPerNode"),
            "deprecated place of spec.nprocPerNode (v1 set PET_NPROC_PER_NODE from it): spec.trainer.numProcPerNode",
        );
    }
    env
}

/// The report lines of `minReplicas` and `maxReplicas`, and of v1's defaulting when one or both are unset.
fn bound_entries(elastic: &ElasticPolicy, min: i32, max: i32, report: &mut MigrationReport) {
    let p = "spec.elasticPolicy";
    for (field, given, value, other) in [
        ("minReplicas", elastic.min_replicas, min, "minNodes"),
        ("maxReplicas", elastic.max_replicas, max, "maxNodes"),
    ] {
        let path = format!("{p}.{field}");
        match given {
            Some(_) => report.exact(path, format!("mlPolicy.torch.elasticPolicy.{other}: {value}")),
            None => report.changed(
                path,
                format!(
                    "unset: v1 defaults it to {} ({value}); mlPolicy.torch.elasticPolicy.{other}: {value}",
                    if elastic.min_replicas.is_some() || elastic.max_replicas.is_some() {
                        "the other bound"
                    } else {
                        "the Worker replicas"
                    }
                ),
            ),
        }
    }
}

/// The report lines of the rendezvous: backend, host, port and id become V2's c10d rendezvous at node 0.
fn rendezvous_entries(elastic: &ElasticPolicy, report: &mut MigrationReport) {
    let p = "spec.elasticPolicy";
    match elastic.rdzv_backend.as_deref() {
        None => report.exact(
            format!("{p}.rdzvBackend"),
            "unset: v1 set PET_RDZV_BACKEND=c10d, as the TrainJob's torch policy does",
        ),
        Some("c10d") => report.exact(format!("{p}.rdzvBackend"), "PET_RDZV_BACKEND=c10d, set by the torch policy"),
        Some(other) => report.not_carried(
            format!("{p}.rdzvBackend"),
            format!(
                "{other:?}: V2's elastic rendezvous is c10d, hosted by node 0's torchrun agent (PET_RDZV_BACKEND \
                 and PET_RDZV_ENDPOINT are the torch policy's): the job meets there instead of at the {other} \
                 server; it needs no {other}, but keep the job on v1 if it relies on that store"
            ),
        ),
    }
    // v1's endpoint host: rdzvHost, else the Service of worker 0 (v1's default, reported with the env).
    if let Some(host) = &elastic.rdzv_host {
        report.changed(
            format!("{p}.rdzvHost"),
            format!(
                "{host:?}: the TrainJob's PET_RDZV_ENDPOINT is node 0's DNS name <job>-node-0-0.<job> (the torch \
                 policy's), whose torchrun agent hosts the c10d store; a store outside the job at {host:?} is no \
                 longer used"
            ),
        );
    }
    if let Some(port) = elastic.rdzv_port {
        report.changed(
            format!("{p}.rdzvPort"),
            format!("{port}: the c10d store listens on V2's torch port 29500 of node 0 (PET_RDZV_ENDPOINT)"),
        );
    }
    if let Some(id) = &elastic.rdzv_id {
        report.changed(
            format!("{p}.rdzvId"),
            format!(
                "{id:?}: PET_RDZV_ID is the TrainJob's UID (the torch policy's); the id only has to be the same on \
                 every node, and it is"
            ),
        );
    }
}

/// `metrics`: HPA MetricSpecs, carried when they parse and fit the runtime's list.
fn metrics(elastic: &ElasticPolicy, report: &mut MigrationReport) -> Vec<MetricSpec> {
    let path = "spec.elasticPolicy.metrics";
    let Some(raw) = elastic.metrics.as_ref().filter(|m| !m.is_empty()) else {
        return Vec::new();
    };
    let parsed: Result<Vec<MetricSpec>, String> = raw
        .iter()
        .enumerate()
        .map(|(i, m)| serde_json::from_value(m.clone()).map_err(|e| format!("[{i}]: {e}")))
        .collect();
    match parsed {
        Err(e) => {
            report.not_carried(
                format!("{path}{e}"),
                "not an autoscaling/v2 MetricSpec; fix it, or set the runtime's mlPolicy.torch.elasticPolicy.metrics",
            );
            Vec::new()
        }
        Ok(m) if m.len() > MAX_ELASTIC_METRICS => {
            report.not_carried(
                path,
                format!(
                    "{} metrics; a runtime's elasticPolicy holds at most {MAX_ELASTIC_METRICS}: keep the ones that \
                     matter in mlPolicy.torch.elasticPolicy.metrics",
                    m.len()
                ),
            );
            Vec::new()
        }
        Ok(m) => {
            report.changed(
                path,
                "mlPolicy.torch.elasticPolicy.metrics: v1 made a HorizontalPodAutoscaler of them; kubetrain-operator's \
                 elastic loop computes an HPA's recommendation from them, Resource and ContainerResource metrics (CPU, \
                 memory) from the resource metrics API (a metrics server), Pods, External and Object metrics from \
                 what the trainer reports, capped by the nodes the job's pods fit on; while its metrics cannot be \
                 read the job keeps its size, as v1's HPA did (docs/operator.md, \"The elastic loop\")",
            );
            m
        }
    }
}

fn env_var(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        value_from: None,
    }
}
