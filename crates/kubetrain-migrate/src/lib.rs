#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod convert;
mod kinds;
mod report;
mod shape;
pub mod v1;

use std::collections::BTreeMap;

use kubetrain_api::{ClusterTrainingRuntime, Document, TrainJob, TrainingRuntime};

pub use report::{Entry, MigrationReport, Outcome};
use v1::{Parsed, V1Job, V1Kind};

/// The label Kueue reads a job's LocalQueue from.
pub const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";

/// Which kind of runtime to generate for jobs no built-in runtime fits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RuntimeKind {
    /// A namespaced `TrainingRuntime` in each job's namespace.
    TrainingRuntime,
    /// A cluster-scoped `ClusterTrainingRuntime` (the default: one runtime for every namespace).
    #[default]
    ClusterTrainingRuntime,
}

/// How to migrate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MigrateOptions {
    /// The kind of the generated runtimes.
    pub runtime_kind: RuntimeKind,
    /// A Kueue LocalQueue for every TrainJob (`kueue.x-k8s.io/queue-name`), over the jobs' own.
    pub queue: Option<String>,
}

/// Why a v1 job could not be migrated: the job, the field path and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{job}: {path}: {message}")]
pub struct MigrateError {
    /// `Kind/name` of the job, as far as it could be read.
    pub job: String,
    /// The field path in the v1 job (`spec.pytorchReplicaSpecs.Worker.replicas`); empty for the whole document.
    pub path: String,
    /// What is wrong and what to do.
    pub message: String,
}

impl MigrateError {
    pub(crate) fn new(identity: &v1::Identity, path: &str, message: String) -> Self {
        let kind = if identity.kind.is_empty() {
            "document"
        } else {
            &identity.kind
        };
        let name = if identity.name.is_empty() {
            "<unnamed>"
        } else {
            &identity.name
        };
        MigrateError {
            job: format!("{kind}/{name}"),
            path: path.to_owned(),
            message,
        }
    }
}

/// One migrated job: its TrainJob and the report.
#[derive(Clone, Debug, PartialEq)]
pub struct MigratedJob {
    /// The TrainJob, referencing a built-in runtime or one of [`Migration::runtimes`].
    pub trainjob: TrainJob,
    /// What became of each v1 field.
    pub report: MigrationReport,
}

/// The result of a migration: the generated runtimes (each once, however many jobs share it) and the jobs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Migration {
    /// The generated `TrainingRuntime`s or `ClusterTrainingRuntime`s, in name order.
    pub runtimes: Vec<Document>,
    /// The jobs, in input order.
    pub jobs: Vec<MigratedJob>,
}

impl Migration {
    /// Whether a person must act on some job: a field was not carried.
    pub fn needs_person(&self) -> bool {
        self.jobs.iter().any(|j| j.report.needs_person())
    }
}

/// Migrates `jobs` (read with [`V1Job::from_value`]): each becomes a TrainJob; the jobs no built-in runtime
/// fits share generated runtimes, one per shape (the name is `<kind>-<hash of the runtime spec>`).
/// An error names the first job that cannot be migrated and its field path.
pub fn migrate(jobs: &[Parsed], options: &MigrateOptions) -> Result<Migration, MigrateError> {
    let mut runtimes: BTreeMap<(String, String), Document> = BTreeMap::new();
    let mut migrated = Vec::with_capacity(jobs.len());
    for parsed in jobs {
        let convert::Converted {
            mut trainjob,
            runtime,
            mut report,
        } = convert::convert(parsed, options)?;
        if let Some(spec) = runtime {
            let name = shape::runtime_name(parsed.job.kind(), &spec);
            let namespace = match options.runtime_kind {
                RuntimeKind::TrainingRuntime => trainjob.metadata.namespace.clone(),
                RuntimeKind::ClusterTrainingRuntime => None,
            };
            trainjob.spec.runtime_ref.name = name.clone();
            let key = (namespace.clone().unwrap_or_default(), name.clone());
            runtimes.entry(key).or_insert_with(|| {
                runtime_document(parsed.job.kind(), &name, namespace, spec, options)
            });
        }
        let kind = trainjob.spec.runtime_ref.kind_or_default().to_owned();
        report.runtime = format!("{kind}/{}", trainjob.spec.runtime_ref.name);
        migrated.push(MigratedJob { trainjob, report });
    }
    Ok(Migration {
        runtimes: runtimes.into_values().collect(),
        jobs: migrated,
    })
}

/// Reads and migrates JSON values (one v1 job each): [`V1Job::from_value`] then [`migrate`].
pub fn migrate_values(
    values: &[serde_json::Value],
    options: &MigrateOptions,
) -> Result<Migration, MigrateError> {
    let parsed = values
        .iter()
        .map(V1Job::from_value)
        .collect::<Result<Vec<_>, _>>()?;
    migrate(&parsed, options)
}

fn runtime_document(
    kind: V1Kind,
    name: &str,
    namespace: Option<String>,
    spec: kubetrain_api::TrainingRuntimeSpec,
    options: &MigrateOptions,
) -> Document {
    let labels = shape::runtime_labels(kind);
    match options.runtime_kind {
        RuntimeKind::TrainingRuntime => {
            let mut runtime = TrainingRuntime::new(name, spec);
            runtime.metadata.namespace = namespace;
            runtime.metadata.labels = Some(labels);
            Document::TrainingRuntime(Box::new(runtime))
        }
        RuntimeKind::ClusterTrainingRuntime => {
            let mut runtime = ClusterTrainingRuntime::new(name, spec);
            runtime.metadata.labels = Some(labels);
            Document::ClusterTrainingRuntime(Box::new(runtime))
        }
    }
}
