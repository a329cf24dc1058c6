//! The JobSet builder (upstream `plugins/jobset`): endpoints, parallelism, initializer and trainer overrides,
//! scheduler labels, suspend and the owner reference.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvFromSource, SecretEnvSource};
use kubetrain_api::constants::{ANCESTOR_TRAINER, DATASET_INITIALIZER, MODEL_INITIALIZER, NODE};
use kubetrain_api::jobset::{JobSet, ReplicatedJob};
use kubetrain_api::{MLPolicySource, TrainJob};
use kubetrain_merge::{Info, upsert};

use crate::object::child_meta;

/// `<job>-<rjob>-<replica>-<pod>.<subdomain>` for every pod of pod set `index`, in order.
pub fn endpoints(info: &Info, job: &TrainJob, index: usize) -> impl Iterator<Item = String> {
    let name = job.name().to_owned();
    let subdomain = info
        .spec
        .network
        .as_ref()
        .and_then(|n| n.subdomain.clone())
        .unwrap_or_else(|| name.clone());
    let rjob = &info.spec.replicated_jobs[index];
    let replicas = rjob.replicas_or_default().max(0);
    let pods = info.pod_sets[index].count.max(0);
    let rjob_name = rjob.name.clone();
    (0..replicas).flat_map(move |r| {
        let (name, rjob_name, subdomain) = (name.clone(), rjob_name.clone(), subdomain.clone());
        (0..pods).map(move |p| format!("{name}-{rjob_name}-{r}-{p}.{subdomain}"))
    })
}

/// PreBuildSync: `parallelism = completions = count` on the first replicatedJob named like each pod set.
pub fn sync_parallelism(info: &mut Info) {
    let Info { pod_sets, spec, .. } = info;
    for ps in pod_sets.iter() {
        let (name, count) = (&ps.name, ps.count);
        if let Some(rjob) = spec.replicated_jobs.iter_mut().find(|r| &r.name == name) {
            let spec = rjob.template.spec.get_or_insert_with(Default::default);
            spec.parallelism = Some(count);
            spec.completions = Some(count);
        }
    }
}

fn initializer(rjob: &mut ReplicatedJob, job: &TrainJob, container: &str) {
    rjob.replicas = Some(1);
    let init = job.spec.initializer.as_ref();
    let (storage_uri, env, secret) = match container {
        DATASET_INITIALIZER => match init.and_then(|i| i.dataset.as_ref()) {
            Some(d) => (d.storage_uri.as_ref(), &d.env, d.secret_ref.as_ref()),
            None => return,
        },
        _ => match init.and_then(|i| i.model.as_ref()) {
            Some(m) => (m.storage_uri.as_ref(), &m.env, m.secret_ref.as_ref()),
            None => return,
        },
    };
    for c in rjob
        .pod_spec_mut()
        .containers
        .iter_mut()
        .filter(|c| c.name == container)
    {
        if let Some(uri) = storage_uri {
            upsert::env(&mut c.env, &[upsert::env_value("STORAGE_URI", uri.clone())]);
        }
        upsert::env(&mut c.env, env);
        if let Some(secret) = secret {
            c.env_from.get_or_insert_with(Vec::new).push(EnvFromSource {
                secret_ref: Some(SecretEnvSource {
                    name: secret.name.clone(),
                    optional: None,
                }),
                ..Default::default()
            });
        }
    }
}

fn trainer(rjob: &mut ReplicatedJob, job: &TrainJob, info: &Info, launcher_as_node: bool) {
    let is_trainer = rjob.ancestor() == Some(ANCESTOR_TRAINER);
    let is_node_job = rjob.name == NODE;
    if is_trainer {
        rjob.replicas = Some(1);
    }
    let trainer = job.spec.trainer.as_ref();
    // The command and args come from the info: plugins may rewrite them (torchtune, Flux). Without
    // `spec.trainer` both are unset unless Flux wrapped the runtime's command.
    let (command, args) = (info.trainer_command.as_ref(), info.trainer_args.as_ref());
    if trainer.is_none() && command.is_none() {
        return;
    }
    for c in rjob
        .pod_spec_mut()
        .containers
        .iter_mut()
        .filter(|c| c.name == NODE)
    {
        if is_trainer {
            if let Some(image) = trainer.and_then(|t| t.image.as_ref()) {
                c.image = Some(image.clone());
            }
            if let Some(command) = command {
                c.command = Some(command.clone());
            }
            if let Some(args) = args {
                c.args = Some(args.clone());
            }
        }
        if let Some(t) = trainer
            && (is_trainer || (launcher_as_node && is_node_job))
        {
            upsert::env(&mut c.env, &t.env);
        }
    }
}

/// Drops an empty `env` list from every container and init container of the job's pod template. Upstream
/// builds the JobSet as an apply configuration whose `env` is `omitempty`: an empty list (from the runtime,
/// or a TrainJob without env upserted into nothing) is never applied, so server-side apply does not make the
/// operator own an empty list.
fn omit_empty_env(rjob: &mut ReplicatedJob) {
    let Some(pod) = rjob
        .template
        .spec
        .as_mut()
        .and_then(|s| s.template.spec.as_mut())
    else {
        return;
    };
    let containers = pod
        .containers
        .iter_mut()
        .chain(pod.init_containers.iter_mut().flatten());
    for c in containers {
        if c.env.as_ref().is_some_and(Vec::is_empty) {
            c.env = None;
        }
    }
}

fn merge_into(target: &mut Option<BTreeMap<String, String>>, entries: &BTreeMap<String, String>) {
    if !entries.is_empty() {
        target
            .get_or_insert_with(BTreeMap::new)
            .extend(entries.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
}

/// Builds the JobSet from the merged info (upstream JobSet `Build` and its builder steps).
pub fn build_jobset(info: &Info, job: &TrainJob) -> JobSet {
    let mut spec = info.spec.clone();
    let launcher_as_node = matches!(info.ml_source(), Some(MLPolicySource::Mpi(m)) if m.run_launcher_as_node_or_default());
    for rjob in &mut spec.replicated_jobs {
        match rjob.ancestor() {
            Some(DATASET_INITIALIZER) => initializer(rjob, job, DATASET_INITIALIZER),
            Some(MODEL_INITIALIZER) => initializer(rjob, job, MODEL_INITIALIZER),
            _ => {}
        }
        trainer(rjob, job, info, launcher_as_node);
        omit_empty_env(rjob);
        let template = &mut rjob
            .template
            .spec
            .get_or_insert_with(Default::default)
            .template;
        if !info.scheduler.pod_labels.is_empty() || !info.scheduler.pod_annotations.is_empty() {
            let meta = template.metadata.get_or_insert_with(Default::default);
            merge_into(&mut meta.labels, &info.scheduler.pod_labels);
            merge_into(&mut meta.annotations, &info.scheduler.pod_annotations);
        }
    }
    // The API server defaults TrainJob.spec.suspend to false, and upstream copies the pointer.
    spec.suspend = Some(job.spec.is_suspended());
    crate::canonical::jobset_spec(&mut spec);

    let mut metadata = child_meta(job, job.name().to_owned());
    metadata.labels = (!info.labels.is_empty()).then(|| info.labels.clone());
    metadata.annotations = (!info.annotations.is_empty()).then(|| info.annotations.clone());
    JobSet {
        metadata,
        spec,
        status: None,
    }
}
