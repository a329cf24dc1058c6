//! Render plugins: the [`kubetrain_merge::plugins`] framework plus upstream's `ComponentBuilder` extension
//! point, and the [`Registry`] that `render` runs.
//!
//! The enforce phases work on [`Info`] and live in `kubetrain-merge`; a component builder produces [`Object`]s
//! and may need what the caller observed and the key source, all of which live here. So a render plugin is a
//! [`kubetrain_merge::plugins::Plugin`] that is also a [`RenderPlugin`], and one [`Registry`] (the merge
//! registry type, holding render plugins) runs every phase of a render in this order:
//!
//! 1. the enforce phases ([`kubetrain_merge::plugins::Registry::enforce`]): ML policy, pod-group policy, pod
//!    spec;
//! 2. [`PreComponentBuilder`](kubetrain_merge::plugins::PreComponentBuilder) (the JobSet's parallelism sync);
//! 3. every [`ComponentBuilder`], in registration order; the objects are then sorted as [`crate::object::sort`]
//!    says, so the order of builders never changes the output.
//!
//! [`Registry::builtin`] registers every built-in plugin: PlainML, Torch, MPI, JAX, XGBoost, Flux,
//! CoScheduling, Volcano, TrainJobStatus (when configured), then JobSet. Writing a plugin:
//! [docs/plugins.md](https://github.com/kubetrain/kubetrain/blob/main/docs/plugins.md).
//!
//! A toy gang scheduler registered beside the built-ins: a label on every pod and a ConfigMap.
//!
//! ```
//! use kubetrain_api::{parse_documents, Document, TrainJob};
//! use kubetrain_jobset::plugins::{BuildContext, ComponentBuilder, Registry, RenderPlugin};
//! use kubetrain_jobset::{builtin, object::child_meta, render_with_registry, resolve, ssh::seeded_rng};
//! use kubetrain_jobset::{Object, Observed, RenderError, RenderOptions};
//! use kubetrain_merge::plugins::{EnforcePodGroupPolicy, Plugin};
//! use kubetrain_merge::{Info, MergeError};
//!
//! struct ToyGang;
//!
//! impl Plugin for ToyGang {
//!     fn name(&self) -> &str { "ToyGang" }
//!     fn pod_group_policy(&self) -> Option<&dyn EnforcePodGroupPolicy> { Some(self) }
//! }
//!
//! impl EnforcePodGroupPolicy for ToyGang {
//!     fn enforce_pod_group_policy(&self, info: &mut Info, job: &TrainJob) -> Result<(), MergeError> {
//!         info.scheduler.pod_labels.insert("toy.example.com/gang".into(), job.name().into());
//!         Ok(())
//!     }
//! }
//!
//! impl RenderPlugin for ToyGang {
//!     fn component_builder(&self) -> Option<&dyn ComponentBuilder> { Some(self) }
//! }
//!
//! impl ComponentBuilder for ToyGang {
//!     fn build(&self, info: &Info, job: &TrainJob, _: &mut BuildContext<'_>) -> Result<Vec<Object>, RenderError> {
//!         let members: i32 = info.pod_sets.iter().map(|p| p.count).sum();
//!         let mut cm = k8s_openapi::api::core::v1::ConfigMap::default();
//!         cm.metadata = child_meta(job, format!("{}-gang", job.name()));
//!         cm.data = Some([("members".to_owned(), members.to_string())].into());
//!         Ok(vec![Object::ConfigMap(Box::new(cm))])
//!     }
//! }
//!
//! let mut registry = Registry::builtin(&RenderOptions::default());
//! registry.register(ToyGang).unwrap();
//!
//! let docs = parse_documents("
//! apiVersion: trainer.kubeflow.org/v1alpha1
//! kind: TrainJob
//! metadata: {name: mnist, namespace: default}
//! spec: {runtimeRef: {name: torch-distributed}, trainer: {numNodes: 2}}
//! ").unwrap();
//! let Document::TrainJob(job) = &docs[0].document else { unreachable!() };
//! let catalog = builtin::catalog();
//! let runtime = resolve(&catalog, job).unwrap();
//! let out = render_with_registry(job, runtime, &Observed::default(), &registry, &mut seeded_rng(0)).unwrap();
//! let kinds: Vec<_> = out.objects.iter().map(|o| (o.kind(), o.name())).collect();
//! assert_eq!(kinds, [("JobSet", "mnist"), ("ConfigMap", "mnist-gang")]);
//! ```

mod builtins;

use std::sync::Arc;

use kubetrain_api::TrainJob;
use kubetrain_merge::Info;
use kubetrain_merge::plugins::{DuplicatePlugin, Plugin};

use crate::error::RenderError;
use crate::object::Object;
use crate::options::{Observed, RenderOptions};
use crate::ssh::{KeySource, SshKeyPair};

pub use builtins::{JobSetPlugin, TrainJobStatusPlugin};

/// A plugin a render runs: a [`Plugin`] that may also build objects.
pub trait RenderPlugin: Plugin {
    /// The plugin as a [`ComponentBuilder`].
    fn component_builder(&self) -> Option<&dyn ComponentBuilder> {
        None
    }
}

/// Builds objects for a TrainJob from the final info (upstream `ComponentBuilderPlugin`).
pub trait ComponentBuilder {
    /// The plugin's objects, none when the runtime's policy is not the plugin's. Objects a TrainJob owns carry
    /// [`crate::object::child_meta`].
    fn build(
        &self,
        info: &Info,
        job: &TrainJob,
        cx: &mut BuildContext<'_>,
    ) -> Result<Vec<Object>, RenderError>;
}

/// What a component builder may read besides the info: the caller's observations and the key source.
pub struct BuildContext<'a> {
    observed: &'a Observed,
    keys: &'a mut dyn KeySource,
}

impl<'a> BuildContext<'a> {
    /// A context over what the caller observed and its key source (for testing a builder alone).
    pub fn new(observed: &'a Observed, keys: &'a mut dyn KeySource) -> Self {
        Self { observed, keys }
    }

    /// What the caller found in the cluster.
    pub fn observed(&self) -> &Observed {
        self.observed
    }

    /// A fresh SSH key pair from the render's key source; take one only when it is used, so that a seeded
    /// source keeps renders byte-identical.
    pub fn key_pair(&mut self) -> SshKeyPair {
        self.keys.key_pair()
    }
}

/// The plugins of a render, in run order (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct Registry {
    plugins: kubetrain_merge::plugins::Registry<dyn RenderPlugin>,
}

impl Registry {
    /// An empty registry: a render with it builds nothing (register [`Registry::builtin`]'s plugins first).
    pub fn new() -> Self {
        Self::default()
    }

    /// Every built-in plugin in its run order; TrainJobStatus when `options` configures it.
    pub fn builtin(options: &RenderOptions) -> Self {
        builtins::registry(options)
    }

    /// Appends `plugin`; it runs after every plugin registered before it, in every phase. A name already
    /// registered is refused.
    pub fn register<T: RenderPlugin + 'static>(
        &mut self,
        plugin: T,
    ) -> Result<&mut Self, DuplicatePlugin> {
        self.register_shared(Arc::new(plugin))
    }

    /// [`Registry::register`] for a plugin shared with other registries.
    pub fn register_shared(
        &mut self,
        plugin: Arc<dyn RenderPlugin>,
    ) -> Result<&mut Self, DuplicatePlugin> {
        self.plugins.register(plugin)?;
        Ok(self)
    }

    /// The plugins, to run the merge-level phases ([`enforce`](kubetrain_merge::plugins::Registry::enforce),
    /// [`validate`](kubetrain_merge::plugins::Registry::validate)) or list them.
    pub fn plugins(&self) -> &kubetrain_merge::plugins::Registry<dyn RenderPlugin> {
        &self.plugins
    }

    /// Runs every component builder in registration order; an error names its plugin.
    pub fn build(
        &self,
        info: &Info,
        job: &TrainJob,
        cx: &mut BuildContext<'_>,
    ) -> Result<Vec<Object>, RenderError> {
        let mut objects = Vec::with_capacity(4);
        for plugin in self.plugins.iter() {
            if let Some(builder) = plugin.component_builder() {
                let built = builder
                    .build(info, job, cx)
                    .map_err(|source| RenderError::Plugin {
                        plugin: plugin.name().to_owned(),
                        source: Box::new(source),
                    })?;
                objects.extend(built);
            }
        }
        Ok(objects)
    }
}
