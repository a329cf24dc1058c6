//! `render()`: a TrainJob and its runtime in, every object the controller would apply out. Pure and
//! deterministic: what the caller observed in the cluster and the randomness source are inputs.

use std::sync::OnceLock;

use kubetrain_api::FieldError;
use kubetrain_api::jobset::JobSet;
use kubetrain_api::{RuntimeCatalog, TrainJob, TrainingRuntimeSpec};
use kubetrain_merge::{Info, MergeError};

use crate::object::{Object, sort};
use crate::plugins::{BuildContext, Registry};
use crate::ssh::KeySource;

/// What the caller found in the cluster; everything `false`/`None` for a fresh TrainJob (and in the CLI).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// The JobSet named like the TrainJob, if it exists.
    pub jobset: Option<ObservedJobSet>,
    /// Whether the Secret `<job>-mpi-ssh-auth` exists (then no new key is generated).
    pub ssh_secret_exists: bool,
    /// Whether the PodGroup named like the TrainJob exists.
    pub pod_group_exists: bool,
}

/// The facts about an existing JobSet that rendering depends on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObservedJobSet {
    /// `spec.suspend` of the existing JobSet.
    pub suspended: bool,
}

/// Optional plugins of a render (upstream: feature gates and the operator configuration). The default enables
/// none, as upstream's defaults do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RenderOptions {
    /// The TrainJobStatus plugin (upstream gate `TrainJobStatus`, alpha, off by default).
    pub trainjob_status: Option<TrainJobStatusOptions>,
}

/// What the TrainJobStatus plugin needs: the status server's address and its CA certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrainJobStatusOptions {
    /// Where the operator's status server listens.
    pub server: kubetrain_merge::plugins::trainjobstatus::StatusServer,
    /// `ca.crt` of the operator's webhook certificate Secret, as the caller read it; copied into the ConfigMap
    /// `<job>-tls-config`. Empty means the Secret has none (an error, as upstream).
    pub ca_cert: String,
}

/// Why a TrainJob could not be rendered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RenderError {
    /// The TrainJob breaks rules `kubetrain validate` checks (the CRD schema and its CEL rules in every render
    /// entry point; also the webhook's rules in [`render_trainjob`]): every error, with its field path, as
    /// `validate` reports it.
    #[error("{}", invalid_summary(errors))]
    Invalid {
        /// The errors (never empty; warnings are not among them).
        errors: Vec<FieldError>,
    },
    /// The merge stage failed (runtime patches, resources, plugins).
    #[error(transparent)]
    Merge(#[from] MergeError),
    /// `runtimeRef` names an unsupported kind, or a runtime that does not exist.
    #[error("{path}: {}", source.short_message())]
    Runtime {
        /// The field path: `spec.runtimeRef.name` for a missing runtime, `spec.runtimeRef` otherwise.
        /// (The controller reports a missing runtime to the cluster in upstream's words, not with this.)
        path: &'static str,
        /// What the lookup found.
        #[source]
        source: kubetrain_api::catalog::LookupError,
    },
    /// The TrainJobStatus plugin is on but the status server's CA certificate is empty.
    #[error(
        "failed to find status server ca.crt in tls secret (the TrainJobStatus plugin needs the CA certificate of the operator's webhook Secret)"
    )]
    MissingStatusServerCaCert,
    /// A render plugin's component builder failed: its name and its error.
    #[error("plugin {plugin}: {source}")]
    Plugin {
        /// The plugin's name.
        plugin: String,
        /// What the plugin reported.
        #[source]
        source: Box<RenderError>,
    },
    /// The MPI hostfile would list more hosts than [`MAX_HOSTFILE_ENTRIES`].
    #[error(
        "spec.trainer.numNodes: the MPI hostfile would list {hosts} hosts; at most {MAX_HOSTFILE_ENTRIES} are supported"
    )]
    TooManyHosts {
        /// Hosts the hostfile would list.
        hosts: u64,
    },
}

/// `path: message` of the first error, and how many more there are.
fn invalid_summary(errors: &[FieldError]) -> String {
    let Some(first) = errors.first() else {
        return "invalid TrainJob".to_owned();
    };
    match errors.len() - 1 {
        0 => format!("{}: {}", first.path, first.message),
        more => format!(
            "{}: {} (and {more} more error{})",
            first.path,
            first.message,
            if more == 1 { "" } else { "s" }
        ),
    }
}

/// The most hosts an MPI hostfile may list (upstream has no limit; we refuse to build a file of gigabytes).
/// `kubetrain validate` refuses the same TrainJobs ([`kubetrain_api::constants::MAX_MPI_HOSTS`]).
pub const MAX_HOSTFILE_ENTRIES: u64 = kubetrain_api::constants::MAX_MPI_HOSTS;

impl RenderError {
    /// The TrainJob field path the error is about.
    pub fn field_path(&self) -> String {
        let text = self.text_without_plugin();
        text.split_once(": ")
            .map(|(p, _)| p.to_owned())
            .unwrap_or_default()
    }

    /// The message without the field path; `plugin <name>: ` first when a plugin failed.
    pub fn message(&self) -> String {
        let text = self.text_without_plugin();
        let message = text
            .split_once(": ")
            .map(|(_, m)| m.to_owned())
            .unwrap_or(text);
        match self.plugin() {
            Some(plugin) => format!("plugin {plugin}: {message}"),
            None => message,
        }
    }

    /// The plugin that failed, if a plugin did.
    pub fn plugin(&self) -> Option<&str> {
        match self {
            RenderError::Plugin { plugin, .. } => Some(plugin),
            RenderError::Merge(e) => e.plugin(),
            _ => None,
        }
    }

    /// The error's text without the `plugin <name>: ` prefix, so that it starts with the field path.
    fn text_without_plugin(&self) -> String {
        match self {
            RenderError::Plugin { source, .. } => source.text_without_plugin(),
            RenderError::Merge(e) => e.without_plugin().to_string(),
            RenderError::Invalid { errors } => invalid_summary(errors),
            other => other.to_string(),
        }
    }
}

/// The result of a render: the merged info (pod sets, counts) and the objects to apply.
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    /// The runtime info after every plugin ran.
    pub info: Info,
    /// The objects, JobSet first, then sorted by apiVersion, kind and name.
    pub objects: Vec<Object>,
}

impl Rendered {
    /// The JobSet, if a plugin built one (the built-in registry always does).
    pub fn jobset(&self) -> Option<&JobSet> {
        self.objects.iter().find_map(Object::as_jobset)
    }
}

/// One call for embedders: validates `job` as `kubetrain validate` does (against the runtimes of `catalog`),
/// resolves its `runtimeRef` in `catalog` and renders it with the built-in plugins and `options`.
///
/// ```
/// use kubetrain_jobset::{builtin, render_trainjob, ssh::seeded_rng, Observed, RenderError, RenderOptions};
///
/// let job: kubetrain_api::TrainJob = serde_json::from_value(serde_json::json!({
///     "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
///     "metadata": {"name": "demo", "namespace": "default"},
///     "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}},
/// }))?;
/// let catalog = builtin::catalog();
/// let rendered = render_trainjob(&job, &catalog, &Observed::default(), &RenderOptions::default(), &mut seeded_rng(0))?;
/// assert_eq!(rendered.jobset().and_then(|j| j.metadata.name.as_deref()), Some("demo"));
///
/// let mut bad = job.clone();
/// bad.spec.trainer.as_mut().unwrap().num_nodes = Some(-1);
/// let error = render_trainjob(&bad, &catalog, &Observed::default(), &RenderOptions::default(), &mut seeded_rng(0))
///     .unwrap_err();
/// assert!(matches!(error, RenderError::Invalid { .. }));
/// assert_eq!(error.field_path(), "spec.trainer.numNodes");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn render_trainjob<K: KeySource>(
    job: &TrainJob,
    catalog: &RuntimeCatalog,
    observed: &Observed,
    options: &RenderOptions,
    keys: &mut K,
) -> Result<Rendered, RenderError> {
    refuse_invalid(kubetrain_api::validation::validate_trainjob(job, catalog))?;
    let runtime = crate::runtimes::resolve(catalog, job)?;
    render_with(job, runtime, observed, options, keys)
}

/// `Err(Invalid)` with the errors among `findings` (warnings pass).
fn refuse_invalid(findings: Vec<FieldError>) -> Result<(), RenderError> {
    let errors: Vec<FieldError> = findings.into_iter().filter(FieldError::is_error).collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(RenderError::Invalid { errors })
    }
}

/// Renders `job` against `runtime`. The MPI SSH key is taken from `keys` (any cryptographic RNG, or a
/// [`crate::ssh::KeyPool`]) only when the Secret is needed, so a seeded RNG gives byte-identical output.
pub fn render<K: KeySource>(
    job: &TrainJob,
    runtime: &TrainingRuntimeSpec,
    observed: &Observed,
    keys: &mut K,
) -> Result<Rendered, RenderError> {
    render_with(job, runtime, observed, &RenderOptions::default(), keys)
}

/// [`render`] with optional plugins (TrainJobStatus) enabled by `options`: [`render_with_registry`] with
/// [`Registry::builtin`].
pub fn render_with<K: KeySource>(
    job: &TrainJob,
    runtime: &TrainingRuntimeSpec,
    observed: &Observed,
    options: &RenderOptions,
    keys: &mut K,
) -> Result<Rendered, RenderError> {
    if options
        .trainjob_status
        .as_ref()
        .is_some_and(|s| s.ca_cert.is_empty())
    {
        return Err(RenderError::MissingStatusServerCaCert);
    }
    if *options == RenderOptions::default() {
        // The default registry is built once: `render` runs on every reconcile.
        static DEFAULT: OnceLock<Registry> = OnceLock::new();
        let registry = DEFAULT.get_or_init(|| Registry::builtin(&RenderOptions::default()));
        return render_with_registry(job, runtime, observed, registry, keys);
    }
    render_with_registry(job, runtime, observed, &Registry::builtin(options), keys)
}

/// [`render`] running the plugins of `registry` (built-in and custom, in registration order): the enforce
/// phases, the pre-build sync, then every component builder; the objects sorted as [`crate::object::sort`] says.
///
/// Every render entry point first checks what the API server would refuse
/// ([`kubetrain_api::validation::validate_trainjob_object`]: the CRD schema, CEL rules and quantities, e.g.
/// `numNodes: -1`) and returns [`RenderError::Invalid`] with the field-path errors `kubetrain validate` gives.
/// The webhook's rules between a TrainJob and its runtime are not run here (upstream's controller renders what
/// they would deny); [`render_trainjob`] runs them too.
pub fn render_with_registry<K: KeySource>(
    job: &TrainJob,
    runtime: &TrainingRuntimeSpec,
    observed: &Observed,
    registry: &Registry,
    keys: &mut K,
) -> Result<Rendered, RenderError> {
    refuse_invalid(kubetrain_api::validation::validate_trainjob_object(job))?;
    let plugins = registry.plugins();
    let mut info = kubetrain_merge::merge_with_registry(job, runtime, plugins)?;
    plugins.pre_build(&mut info, job)?;
    let mut objects = registry.build(&info, job, &mut BuildContext::new(observed, keys))?;
    sort(&mut objects);
    Ok(Rendered { info, objects })
}
