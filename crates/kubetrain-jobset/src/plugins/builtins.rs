//! The built-in plugins as render plugins: the merge crate's plugins with their component builders, the
//! JobSet (the template's owner) and TrainJobStatus's TLS ConfigMap.

use std::sync::Arc;

use kubetrain_api::{MLPolicySource, PodGroupPolicySource, TrainJob};
use kubetrain_merge::plugins::mpi::{Companions, builtin_companions};
use kubetrain_merge::plugins::{
    EnforcePodSpec, Plugin, PreComponentBuilder, coscheduling::Coscheduling, flux::Flux, jax::Jax,
    mpi::Mpi, plainml::PlainMl, torch::Torch, trainjobstatus::TrainJobStatus, volcano::Volcano,
    xgboost::Xgboost,
};
use kubetrain_merge::{Info, MergeError};

use super::{BuildContext, ComponentBuilder, Registry, RenderPlugin};
use crate::builder::{build_jobset, sync_parallelism};
use crate::companions::{
    coscheduling_pod_group, hostfile_config_map, hostfile_entries, ssh_auth_secret, tls_config_map,
    volcano_pod_group,
};
use crate::error::{MAX_HOSTFILE_ENTRIES, RenderError};
use crate::object::Object;
use crate::options::{CaCert, RenderOptions};

/// [`Registry::builtin`]: the merge crate's built-ins in their order, TrainJobStatus, then the JobSet.
pub(super) fn registry(options: &RenderOptions) -> Registry {
    let mut plugins: Vec<Arc<dyn RenderPlugin>> = vec![
        Arc::new(PlainMl),
        Arc::new(Torch),
        Arc::new(Mpi),
        Arc::new(Jax),
        Arc::new(Xgboost),
        Arc::new(Flux),
        Arc::new(Coscheduling),
        Arc::new(Volcano),
    ];
    if let Some(status) = &options.trainjob_status {
        plugins.push(Arc::new(TrainJobStatusPlugin {
            plugin: TrainJobStatus {
                server: status.server.clone(),
            },
            ca_cert: status.ca_cert.clone(),
        }));
    }
    plugins.push(Arc::new(JobSetPlugin));
    let mut registry = Registry::new();
    for plugin in plugins {
        // Built-in names are distinct (a test checks), so nothing is refused here.
        let _ = registry.register_shared(plugin);
    }
    registry
}

impl RenderPlugin for PlainMl {}
impl RenderPlugin for Torch {}
impl RenderPlugin for Jax {}
impl RenderPlugin for Xgboost {}

impl RenderPlugin for Mpi {
    fn component_builder(&self) -> Option<&dyn ComponentBuilder> {
        Some(self)
    }
}

/// The SSH-auth Secret (unless the caller found it) and, for Open MPI, the hostfile ConfigMap (another
/// implementation's plugin builds its own: [`builtin_companions`]).
impl ComponentBuilder for Mpi {
    fn build(
        &self,
        info: &Info,
        job: &TrainJob,
        cx: &mut BuildContext<'_>,
    ) -> Result<Vec<Object>, RenderError> {
        let Some(companions) = builtin_companions(info)? else {
            return Ok(Vec::new());
        };
        let hosts = hostfile_entries(info);
        if hosts > MAX_HOSTFILE_ENTRIES {
            return Err(RenderError::TooManyHosts { hosts });
        }
        let mut objects = Vec::with_capacity(2);
        if !cx.observed().ssh_secret_exists {
            let key = cx.key_pair();
            objects.push(Object::Secret(Box::new(ssh_auth_secret(job, &key))));
        }
        if companions == Companions::SecretAndHostfile {
            objects.push(Object::ConfigMap(Box::new(hostfile_config_map(info, job))));
        }
        Ok(objects)
    }
}

impl RenderPlugin for Flux {
    fn component_builder(&self) -> Option<&dyn ComponentBuilder> {
        Some(self)
    }
}

/// The entrypoint ConfigMap and the CURVE certificate Secret.
impl ComponentBuilder for Flux {
    fn build(
        &self,
        info: &Info,
        job: &TrainJob,
        _: &mut BuildContext<'_>,
    ) -> Result<Vec<Object>, RenderError> {
        if !matches!(info.ml_source(), Some(MLPolicySource::Flux(_))) {
            return Ok(Vec::new());
        }
        Ok(vec![
            Object::ConfigMap(Box::new(crate::flux::entrypoint_config_map(info, job))),
            Object::Secret(Box::new(crate::flux::curve_secret(job))),
        ])
    }
}

/// The runtime's pod-group policy, when the PodGroup is due: it does not exist yet, or the TrainJob is
/// suspended (then it is re-applied in full).
fn due_pod_group<'i>(
    info: &'i Info,
    job: &TrainJob,
    cx: &BuildContext<'_>,
) -> Option<&'i PodGroupPolicySource> {
    if cx.observed().pod_group_exists && !job.spec.is_suspended() {
        return None;
    }
    info.pod_group_policy.as_ref()?.source.as_ref()
}

impl RenderPlugin for Coscheduling {
    fn component_builder(&self) -> Option<&dyn ComponentBuilder> {
        Some(self)
    }
}

/// The scheduler-plugins PodGroup.
impl ComponentBuilder for Coscheduling {
    fn build(
        &self,
        info: &Info,
        job: &TrainJob,
        cx: &mut BuildContext<'_>,
    ) -> Result<Vec<Object>, RenderError> {
        let Some(PodGroupPolicySource::Coscheduling(policy)) = due_pod_group(info, job, cx) else {
            return Ok(Vec::new());
        };
        Ok(vec![Object::CoschedulingPodGroup(Box::new(
            coscheduling_pod_group(info, job, policy),
        ))])
    }
}

impl RenderPlugin for Volcano {
    fn component_builder(&self) -> Option<&dyn ComponentBuilder> {
        Some(self)
    }
}

/// The Volcano PodGroup.
impl ComponentBuilder for Volcano {
    fn build(
        &self,
        info: &Info,
        job: &TrainJob,
        cx: &mut BuildContext<'_>,
    ) -> Result<Vec<Object>, RenderError> {
        let Some(PodGroupPolicySource::Volcano(policy)) = due_pod_group(info, job, cx) else {
            return Ok(Vec::new());
        };
        Ok(vec![Object::VolcanoPodGroup(Box::new(volcano_pod_group(
            info, job, policy,
        )))])
    }
}

/// TrainJobStatus as a render plugin: the merge crate's pod-spec plugin plus the ConfigMap `<job>-tls-config`
/// with the status server's CA certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrainJobStatusPlugin {
    /// The pod-spec plugin (the status server's address).
    pub plugin: TrainJobStatus,
    /// `ca.crt` of the operator's webhook certificate Secret, read at each build.
    pub ca_cert: CaCert,
}

impl Plugin for TrainJobStatusPlugin {
    fn name(&self) -> &str {
        self.plugin.name()
    }

    fn pod_spec(&self) -> Option<&dyn EnforcePodSpec> {
        Some(&self.plugin)
    }
}

impl RenderPlugin for TrainJobStatusPlugin {
    fn component_builder(&self) -> Option<&dyn ComponentBuilder> {
        Some(self)
    }
}

/// The ConfigMap `<job>-tls-config`.
impl ComponentBuilder for TrainJobStatusPlugin {
    fn build(
        &self,
        _: &Info,
        job: &TrainJob,
        _: &mut BuildContext<'_>,
    ) -> Result<Vec<Object>, RenderError> {
        let ca_cert = self.ca_cert.get();
        if ca_cert.is_empty() {
            return Err(RenderError::MissingStatusServerCaCert);
        }
        Ok(vec![Object::ConfigMap(Box::new(tls_config_map(
            job, &ca_cert,
        )))])
    }
}

/// The JobSet plugin (upstream `plugins/jobset`): owns the runtime template, so it syncs the JobSet's
/// parallelism with the final counts before any object is built, then builds the JobSet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JobSetPlugin;

impl Plugin for JobSetPlugin {
    fn name(&self) -> &str {
        "JobSet"
    }

    fn pre_component_builder(&self) -> Option<&dyn PreComponentBuilder> {
        Some(self)
    }
}

/// `parallelism = completions = count` for every pod set.
impl PreComponentBuilder for JobSetPlugin {
    fn pre_build(&self, info: &mut Info, _: &TrainJob) -> Result<(), MergeError> {
        sync_parallelism(info);
        Ok(())
    }
}

impl RenderPlugin for JobSetPlugin {
    fn component_builder(&self) -> Option<&dyn ComponentBuilder> {
        Some(self)
    }
}

/// The JobSet, unless it runs: a running JobSet is never updated; a suspended one (or a suspended TrainJob)
/// is re-applied in full.
impl ComponentBuilder for JobSetPlugin {
    fn build(
        &self,
        info: &Info,
        job: &TrainJob,
        cx: &mut BuildContext<'_>,
    ) -> Result<Vec<Object>, RenderError> {
        let running = cx.observed().jobset.is_some_and(|j| !j.suspended);
        if running && !job.spec.is_suspended() {
            return Ok(Vec::new());
        }
        Ok(vec![Object::JobSet(Box::new(build_jobset(info, job)))])
    }
}
