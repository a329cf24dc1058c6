//! The job-level fields: metadata and the Kueue queue, `runPolicy`, and the fields only some kinds have.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::Carried;
use crate::report::MigrationReport;
use crate::v1::{CleanPodPolicy, Parsed, RunPolicy, V1Job};
use crate::{MigrateOptions, QUEUE_LABEL};

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
    if let Some(ttl) = run.ttl_seconds_after_finished {
        report.not_carried(
            format!("{p}.ttlSecondsAfterFinished"),
            format!("{ttl}s: a TrainJob has no TTL; delete finished TrainJobs yourself (e.g. a CronJob running `kubectl delete trainjob`)"),
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
        V1Job::PyTorch(j) if j.spec.elastic_policy.is_some() => report.not_carried(
            "spec.elasticPolicy",
            "TrainJobs have no torch elastic: the node count is fixed at numNodes; drop elasticPolicy (and HPA metrics) or keep this job on v1",
        ),
        V1Job::Paddle(j) if j.spec.elastic_policy.is_some() => report.not_carried(
            "spec.elasticPolicy",
            "TrainJobs have no Paddle elastic: the node count is fixed at numNodes",
        ),
        V1Job::TF(j) => {
            let chief = ["Chief", "Master"].iter().any(|r| j.spec.replica_specs.contains_key(*r));
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
                report.not_carried("spec.enableDynamicWorker", "TrainJobs have a fixed number of workers");
            }
        }
        V1Job::Mpi(j) => {
            report.exact("spec.slotsPerWorker", "mpi.numProcPerNode of the runtime's ML policy (default 1)");
            report.exact(
                "(v1 success)",
                "the launcher's success ends the job: the JobSet successPolicy targets replicatedJob launcher, which \
                 starts once every worker is Ready",
            );
            if j.spec.main_container.is_some() {
                report.exact("spec.mainContainer", "that container is the runtime's node container");
            }
            report.not_carried(
                "(v1 operator launch)",
                "v1 started the ranks with kubectl exec (kubexec.sh); V2 starts them over SSH with the keys and \
                 hostfile it mounts: the worker image must run sshd (see the deepspeed-distributed runtime) and \
                 the launcher's mpirun reads the hostfile from OMPI_MCA_orte_default_hostfile",
            );
        }
        _ => {}
    }
}
