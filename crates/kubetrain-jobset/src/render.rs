//! `render()`: a TrainJob and its runtime in, every object the controller would apply out. Pure and
//! deterministic: what the caller observed in the cluster and the randomness source are inputs.

use std::sync::OnceLock;

use kubetrain_api::FieldError;
use kubetrain_api::jobset::JobSet;
use kubetrain_api::{RuntimeCatalog, TrainJob, TrainingRuntimeSpec};
use kubetrain_merge::Info;

use crate::error::RenderError;
use crate::options::{Observed, RenderOptions};

use crate::object::{Object, sort};
use crate::plugins::{BuildContext, Registry};
use crate::ssh::KeySource;

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
    crate::disruption::apply_to_objects(job, &mut objects);
    sort(&mut objects);
    Ok(Rendered { info, objects })
}
