//! The ordered plugin registry: registration order is run order, names are unique, errors name the plugin.

use std::fmt;
use std::sync::Arc;

use kubetrain_api::{FieldError, TrainJob, TrainingRuntimeSpec};

use super::Plugin;
use crate::error::MergeError;
use crate::info::Info;

/// A second plugin with a name already registered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("plugin {0} is already registered; plugin names must be unique")]
pub struct DuplicatePlugin(pub String);

/// Plugins in registration order, which is the order every phase runs them in.
///
/// `P` is the plugin trait object: [`dyn Plugin`](Plugin) here; `kubetrain-jobset` keeps its render plugins
/// (a subtrait that adds the component builder) in the same registry type.
pub struct Registry<P: ?Sized = dyn Plugin> {
    plugins: Vec<Arc<P>>,
}

impl<P: ?Sized> Clone for Registry<P> {
    fn clone(&self) -> Self {
        Self {
            plugins: self.plugins.clone(),
        }
    }
}

impl<P: ?Sized> Default for Registry<P> {
    fn default() -> Self {
        Self {
            plugins: Vec::new(),
        }
    }
}

impl<P: ?Sized + Plugin> fmt::Debug for Registry<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.plugins.iter().map(|p| p.name()))
            .finish()
    }
}

impl<P: ?Sized + Plugin> Registry<P> {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `plugin`; it runs after every plugin registered before it. A name already registered is
    /// refused (the registry is unchanged).
    pub fn register(&mut self, plugin: Arc<P>) -> Result<&mut Self, DuplicatePlugin> {
        if self.get(plugin.name()).is_some() {
            return Err(DuplicatePlugin(plugin.name().to_owned()));
        }
        self.plugins.push(plugin);
        Ok(self)
    }

    /// The plugin named `name`.
    pub fn get(&self, name: &str) -> Option<&P> {
        self.iter().find(|p| p.name() == name)
    }

    /// The plugins in run order.
    pub fn iter(&self) -> impl Iterator<Item = &P> {
        self.plugins.iter().map(|p| &**p)
    }

    /// Runs the enforce phases: every [`EnforceMlPolicy`](super::EnforceMlPolicy), then every
    /// [`EnforcePodGroupPolicy`](super::EnforcePodGroupPolicy), then every
    /// [`EnforcePodSpec`](super::EnforcePodSpec), each phase in registration order. The first error stops the
    /// run and names its plugin.
    pub fn enforce(&self, info: &mut Info, job: &TrainJob) -> Result<(), MergeError> {
        for plugin in self.iter() {
            if let Some(p) = plugin.ml_policy() {
                p.enforce_ml_policy(info, job).map_err(named(plugin))?;
            }
        }
        for plugin in self.iter() {
            if let Some(p) = plugin.pod_group_policy() {
                p.enforce_pod_group_policy(info, job)
                    .map_err(named(plugin))?;
            }
        }
        for plugin in self.iter() {
            if let Some(p) = plugin.pod_spec() {
                p.enforce_pod_spec(info, job).map_err(named(plugin))?;
            }
        }
        Ok(())
    }

    /// Runs every [`PreComponentBuilder`](super::PreComponentBuilder) in registration order; call it after
    /// [`Registry::enforce`] and before building objects.
    pub fn pre_build(&self, info: &mut Info, job: &TrainJob) -> Result<(), MergeError> {
        for plugin in self.iter() {
            if let Some(p) = plugin.pre_component_builder() {
                p.pre_build(info, job).map_err(named(plugin))?;
            }
        }
        Ok(())
    }

    /// Every [`CustomValidation`](super::CustomValidation)'s findings, in registration order; each message
    /// starts with `plugin <name>: `.
    pub fn validate(&self, info: &Info, old: Option<&TrainJob>, new: &TrainJob) -> Vec<FieldError> {
        self.findings(|p| p.validate(info, old, new))
    }

    /// Every [`CustomValidation::validate_runtime`](super::CustomValidation::validate_runtime)'s findings
    /// about a runtime's spec, in registration order; each message starts with `plugin <name>: `.
    pub fn validate_runtime(&self, runtime: &TrainingRuntimeSpec) -> Vec<FieldError> {
        self.findings(|p| p.validate_runtime(runtime))
    }

    /// What `check` finds with every [`CustomValidation`](super::CustomValidation), each message naming its
    /// plugin.
    fn findings(
        &self,
        check: impl Fn(&dyn super::CustomValidation) -> Vec<FieldError>,
    ) -> Vec<FieldError> {
        let mut findings = Vec::new();
        for plugin in self.iter() {
            if let Some(p) = plugin.custom_validation() {
                findings.extend(check(p).into_iter().map(|mut f| {
                    f.message = format!("plugin {}: {}", plugin.name(), f.message);
                    f
                }));
            }
        }
        findings
    }
}

/// Wraps an error of `plugin` so that it names the plugin.
fn named<P: ?Sized + Plugin>(plugin: &P) -> impl FnOnce(MergeError) -> MergeError + '_ {
    move |source| MergeError::Plugin {
        plugin: plugin.name().to_owned(),
        source: Box::new(source),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::Options;

    #[test]
    fn builtins_in_run_order_and_duplicates_refused() {
        let mut registry = Registry::builtin(&Options::default());
        assert_eq!(
            format!("{registry:?}"),
            r#"["PlainML", "Torch", "MPI", "JAX", "XGBoost", "Flux", "CoScheduling", "Volcano"]"#
        );
        let err = registry
            .register(Arc::new(crate::plugins::volcano::Volcano))
            .unwrap_err();
        assert_eq!(err, DuplicatePlugin("Volcano".to_owned()));
        assert_eq!(registry.iter().count(), 8, "unchanged");
        assert!(
            registry
                .get("Torch")
                .is_some_and(|p| p.ml_policy().is_some())
        );
        assert!(
            registry
                .get("Torch")
                .is_some_and(|p| p.pod_spec().is_none())
        );

        let status = Options {
            trainjob_status: Some(Default::default()),
        };
        let registry = Registry::builtin(&status);
        assert!(
            registry
                .get("TrainJobStatus")
                .is_some_and(|p| p.pod_spec().is_some())
        );
    }
}
