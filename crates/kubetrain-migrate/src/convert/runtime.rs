//! The runtime spec: replicated jobs from the roles, the JobSet policies, and whether a built-in runtime fits.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{JobSpec, JobTemplateSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubetrain_api::constants::{ANCESTOR_LABEL, ANCESTOR_TRAINER, LAUNCHER, NODE};
use kubetrain_api::jobset::{
    DependsOn, DependsOnStatus, JobSetSpec, Network, ReplicatedJob, SuccessOperator, SuccessPolicy,
};
use kubetrain_api::{JobSetTemplateSpec, MLPolicy, MLPolicySource, TrainingRuntimeSpec};

use super::role::Role;
use super::{Carried, Extra};
use crate::kinds;
use crate::v1::{V1Job, V1Kind};

/// The runtime spec: the ML policy and one replicated job per role group, with the JobSet policies that make
/// it end when v1 ended it.
pub(super) fn runtime_spec(
    kind: V1Kind,
    job: &V1Job,
    node: Role,
    extra: Vec<Extra>,
    carried: &Carried,
) -> TrainingRuntimeSpec {
    let slots = match job {
        V1Job::Mpi(j) => j.spec.slots_per_worker,
        _ => None,
    };
    let mut jobs = vec![replicated_job(
        NODE,
        kind != V1Kind::MPIJob,
        node,
        None,
        carried,
    )];
    for Extra { name, role, count } in extra {
        let launcher = kind == V1Kind::MPIJob && name == LAUNCHER;
        let mut rjob = replicated_job(&name, launcher, role, Some(count), carried);
        if launcher {
            // As the built-in deepspeed runtime: mpirun starts once every worker's sshd is ready.
            rjob.depends_on = vec![DependsOn {
                name: NODE.to_owned(),
                status: DependsOnStatus::Ready,
            }];
        }
        jobs.push(rjob);
    }
    let mut spec = JobSetSpec {
        success_policy: success_targets(job, &jobs).map(|targets| SuccessPolicy {
            operator: SuccessOperator::All,
            target_replicated_jobs: targets,
        }),
        replicated_jobs: jobs,
        ..JobSetSpec::default()
    };
    if kind == V1Kind::MPIJob {
        spec.network = Some(Network {
            publish_not_ready_addresses: Some(true),
            ..Network::default()
        });
    }
    // An elastic runtime's numNodes must lie within its bounds (the TrainJob's numNodes is the start).
    let num_nodes = carried.elastic.as_ref().map_or(1, |e| e.min_nodes);
    TrainingRuntimeSpec {
        ml_policy: Some(MLPolicy {
            num_nodes: Some(num_nodes),
            source: kinds::ml_policy(kind, slots, carried.elastic.clone()),
        }),
        pod_group_policy: None,
        run_policy: None,
        template: JobSetTemplateSpec {
            metadata: None,
            spec,
        },
    }
}

/// The replicated jobs whose success ends the job, as v1 decided it: MPI's launcher; TF's chief (or master),
/// or the workers with `AllWorkers` or without a chief. `None`: every job (JobSet's default).
fn success_targets(job: &V1Job, jobs: &[ReplicatedJob]) -> Option<Vec<String>> {
    match job {
        V1Job::Mpi(_) => Some(vec![LAUNCHER.to_owned()]),
        V1Job::TF(j) if jobs.len() > 1 => {
            let all_workers = j.spec.success_policy.as_deref() == Some("AllWorkers");
            let chief = jobs
                .iter()
                .map(|r| r.name.as_str())
                .find(|n| *n == "chief" || *n == "master");
            Some(vec![match (all_workers, chief) {
                (false, Some(chief)) => chief.to_owned(),
                _ => NODE.to_owned(),
            }])
        }
        _ => None,
    }
}

fn replicated_job(
    name: &str,
    trainer: bool,
    mut role: Role,
    count: Option<i32>,
    carried: &Carried,
) -> ReplicatedJob {
    if let Some(class) = &carried.priority_class {
        role.pod()
            .priority_class_name
            .get_or_insert_with(|| class.clone());
    }
    let labels =
        trainer.then(|| BTreeMap::from([(ANCESTOR_LABEL.to_owned(), ANCESTOR_TRAINER.to_owned())]));
    ReplicatedJob {
        name: name.to_owned(),
        template: JobTemplateSpec {
            metadata: labels.map(|labels| ObjectMeta {
                labels: Some(labels),
                ..ObjectMeta::default()
            }),
            spec: Some(JobSpec {
                parallelism: count,
                completions: count,
                backoff_limit: carried.backoff_limit,
                pod_failure_policy: role.pod_failure_policy,
                template: role.template,
                ..JobSpec::default()
            }),
        },
        ..ReplicatedJob::default()
    }
}

/// Whether `spec` is what a built-in runtime already is: no elastic policy, one trainer job whose pod has one
/// container with a name and an image, restarted on failure (JobSet's default), and nothing else.
pub(super) fn is_plain(spec: &TrainingRuntimeSpec) -> bool {
    let elastic = matches!(
        spec.ml_policy.as_ref().and_then(|p| p.source.as_ref()),
        Some(MLPolicySource::Torch(t)) if t.elastic_policy.is_some()
    );
    if elastic {
        return false;
    }
    let [only] = spec.template.spec.replicated_jobs.as_slice() else {
        return false;
    };
    let Some(job) = &only.template.spec else {
        return false;
    };
    let Some(pod) = &job.template.spec else {
        return false;
    };
    let [container] = pod.containers.as_slice() else {
        return false;
    };
    let plain_container = Container {
        name: NODE.to_owned(),
        image: container.image.clone(),
        ..Container::default()
    };
    let plain_pod = PodSpec {
        containers: vec![plain_container],
        restart_policy: Some("OnFailure".to_owned()),
        ..PodSpec::default()
    };
    let meta_plain = job
        .template
        .metadata
        .as_ref()
        .is_none_or(|m| *m == ObjectMeta::default());
    let job_plain = JobSpec {
        template: PodTemplateSpec::default(),
        ..job.clone()
    } == JobSpec::default();
    meta_plain && job_plain && *pod == plain_pod
}
