//! What in a pod spec, a training runtime or a TrainJob gives its pods more than an ordinary training
//! container needs: privileged containers, privilege escalation, host paths, the host's network, PID or IPC
//! namespaces, and device access. Each finding is a [`Risk`] at the field path that causes it.
//!
//! Device access is any of: a `hostPath` volume under `/dev`, a capability added beyond the Pod Security
//! baseline set ([`BASELINE_CAPABILITIES`]), or an extended resource other than the GPUs a training cluster
//! hands out anyway ([`ORDINARY_RESOURCES`]). Only explicit settings count: an unset `allowPrivilegeEscalation`
//! is not a risk (the pods of every upstream runtime leave it unset).
//!
//! ```
//! use k8s_openapi::api::core::v1::{PodSpec, Volume, HostPathVolumeSource};
//! use kubetrain_tenancy::risk::{pod_spec_risks, RiskKind};
//!
//! let spec = PodSpec {
//!     host_network: Some(true),
//!     volumes: Some(vec![Volume {
//!         name: "data".into(),
//!         host_path: Some(HostPathVolumeSource { path: "/mnt/data".into(), type_: None }),
//!         ..Default::default()
//!     }]),
//!     ..Default::default()
//! };
//! let risks = pod_spec_risks(&spec, "spec");
//! assert_eq!(risks[0].kind, RiskKind::HostNetwork);
//! assert_eq!(risks[0].path, "spec.hostNetwork");
//! assert_eq!(risks[1].kind, RiskKind::HostPath);
//! assert_eq!(risks[1].path, "spec.volumes[0].hostPath.path");
//! assert_eq!(risks[1].subject, "/mnt/data");
//! ```

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{
    Container, PodSpec, ResourceRequirements, SecurityContext, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kubetrain_api::TrainingRuntimeSpec;

/// Capabilities that the Pod Security baseline level lets a container add; adding any other is device access.
pub const BASELINE_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Extended resources that are not device access: the GPUs every training pod asks for.
pub const ORDINARY_RESOURCES: [&str; 1] = ["nvidia.com/gpu"];

/// What kind of access a [`Risk`] gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RiskKind {
    /// `securityContext.privileged: true` (or a Windows host-process container).
    Privileged,
    /// `securityContext.allowPrivilegeEscalation: true`.
    PrivilegeEscalation,
    /// A `hostPath` volume outside `/dev`.
    HostPath,
    /// `hostNetwork: true`, or a container port bound to a `hostPort`.
    HostNetwork,
    /// `hostPID: true`.
    HostPid,
    /// `hostIPC: true`.
    HostIpc,
    /// Device access: a `/dev` host path, an added capability beyond the baseline, or an extended resource
    /// other than [`ORDINARY_RESOURCES`].
    Device,
    /// A container image (judged against a registry allow-list by the policy, never reported by this module's
    /// risk finders).
    Image,
}

impl RiskKind {
    /// Every kind, in declaration order.
    pub const ALL: [RiskKind; 8] = [
        RiskKind::Privileged,
        RiskKind::PrivilegeEscalation,
        RiskKind::HostPath,
        RiskKind::HostNetwork,
        RiskKind::HostPid,
        RiskKind::HostIpc,
        RiskKind::Device,
        RiskKind::Image,
    ];

    /// The name used in messages and in the training policy's `allow` block.
    pub fn as_str(self) -> &'static str {
        match self {
            RiskKind::Privileged => "privileged",
            RiskKind::PrivilegeEscalation => "privilegeEscalation",
            RiskKind::HostPath => "hostPaths",
            RiskKind::HostNetwork => "hostNetwork",
            RiskKind::HostPid => "hostPID",
            RiskKind::HostIpc => "hostIPC",
            RiskKind::Device => "devices",
            RiskKind::Image => "registries",
        }
    }
}

impl fmt::Display for RiskKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One field that gives pods more access than ordinary training needs.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Risk {
    /// What kind of access.
    pub kind: RiskKind,
    /// Dotted field path of the setting, in the spelling of the object it was found in.
    pub path: String,
    /// What the setting gives, in words (e.g. `container "node" runs privileged`).
    pub detail: String,
    /// What the access is to, for allow-lists to match: the host path, the capability, the resource name or
    /// the image; empty for yes/no settings (privileged, host network, ...).
    pub subject: String,
}

impl Risk {
    fn new(kind: RiskKind, path: String, detail: String) -> Self {
        Self {
            kind,
            path,
            detail,
            subject: String::new(),
        }
    }

    fn with_subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = subject.into();
        self
    }
}

impl fmt::Display for Risk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.detail)
    }
}

/// Whether `path` is `/dev` or below it.
pub(crate) fn is_device_path(path: &str) -> bool {
    let trimmed = path.trim_end_matches('/');
    trimmed == "/dev" || trimmed.starts_with("/dev/")
}

/// The risks of one pod spec; `path` is the pod spec's own path (e.g. `spec` or
/// `spec.template.spec.replicatedJobs[0].template.spec.template.spec`). Image risks are not reported here.
pub fn pod_spec_risks(spec: &PodSpec, path: &str) -> Vec<Risk> {
    let mut risks = Vec::new();
    let flags = [
        (
            spec.host_network,
            "hostNetwork",
            RiskKind::HostNetwork,
            "the pods share the host's network",
        ),
        (
            spec.host_pid,
            "hostPID",
            RiskKind::HostPid,
            "the pods share the host's process namespace",
        ),
        (
            spec.host_ipc,
            "hostIPC",
            RiskKind::HostIpc,
            "the pods share the host's IPC namespace",
        ),
    ];
    for (value, field, kind, detail) in flags {
        if value == Some(true) {
            risks.push(Risk::new(
                kind,
                format!("{path}.{field}"),
                detail.to_owned(),
            ));
        }
    }
    for (index, volume) in spec.volumes.iter().flatten().enumerate() {
        risks.extend(volume_risk(volume, &format!("{path}.volumes[{index}]")));
    }
    for (list, containers) in [
        ("initContainers", spec.init_containers.as_ref()),
        ("containers", Some(&spec.containers)),
    ] {
        for (index, container) in containers.into_iter().flatten().enumerate() {
            risks.extend(container_risks(
                container,
                &format!("{path}.{list}[{index}]"),
            ));
        }
    }
    if let Some(context) = &spec.security_context
        && context
            .windows_options
            .as_ref()
            .and_then(|w| w.host_process)
            == Some(true)
    {
        risks.push(Risk::new(
            RiskKind::Privileged,
            format!("{path}.securityContext.windowsOptions.hostProcess"),
            "the pods run as Windows host processes".to_owned(),
        ));
    }
    risks
}

/// The risk of one volume at `path` (`...volumes[i]`): a host path, or device access for one under `/dev`.
pub(crate) fn volume_risk(volume: &Volume, path: &str) -> Option<Risk> {
    let host = volume.host_path.as_ref()?;
    let (kind, what) = if is_device_path(&host.path) {
        (RiskKind::Device, "device")
    } else {
        (RiskKind::HostPath, "path")
    };
    Some(
        Risk::new(
            kind,
            format!("{path}.hostPath.path"),
            format!(
                "volume {:?} mounts the host {what} {}",
                volume.name, host.path
            ),
        )
        .with_subject(host.path.clone()),
    )
}

/// The risks of one container at `path` (`...containers[i]`): its security context, host ports and device
/// resources.
pub(crate) fn container_risks(container: &Container, path: &str) -> Vec<Risk> {
    let mut risks = Vec::new();
    if let Some(context) = &container.security_context {
        risks.extend(security_context_risks(
            context,
            &container.name,
            &format!("{path}.securityContext"),
        ));
    }
    for (index, port) in container.ports.iter().flatten().enumerate() {
        if let Some(host_port) = port.host_port.filter(|p| *p != 0) {
            risks.push(Risk::new(
                RiskKind::HostNetwork,
                format!("{path}.ports[{index}].hostPort"),
                format!("container {:?} binds host port {host_port}", container.name),
            ));
        }
    }
    if let Some(resources) = &container.resources {
        risks.extend(resource_risks(
            resources,
            &container.name,
            &format!("{path}.resources"),
        ));
    }
    risks
}

/// The risks of a container security context at `path` (`...securityContext`) of container `container`.
pub(crate) fn security_context_risks(
    context: &SecurityContext,
    container: &str,
    path: &str,
) -> Vec<Risk> {
    let mut risks = Vec::new();
    if context.privileged == Some(true) {
        risks.push(Risk::new(
            RiskKind::Privileged,
            format!("{path}.privileged"),
            format!("container {container:?} runs privileged"),
        ));
    }
    if context.allow_privilege_escalation == Some(true) {
        risks.push(Risk::new(
            RiskKind::PrivilegeEscalation,
            format!("{path}.allowPrivilegeEscalation"),
            format!("container {container:?} may gain more privileges than its parent process"),
        ));
    }
    if context
        .windows_options
        .as_ref()
        .and_then(|w| w.host_process)
        == Some(true)
    {
        risks.push(Risk::new(
            RiskKind::Privileged,
            format!("{path}.windowsOptions.hostProcess"),
            format!("container {container:?} runs as a Windows host process"),
        ));
    }
    let added = context.capabilities.as_ref().and_then(|c| c.add.as_ref());
    for (index, capability) in added.into_iter().flatten().enumerate() {
        let name = capability_name(capability);
        if !BASELINE_CAPABILITIES.contains(&name.as_str()) {
            risks.push(
                Risk::new(
                    RiskKind::Device,
                    format!("{path}.capabilities.add[{index}]"),
                    format!("container {container:?} adds capability {name}"),
                )
                .with_subject(name),
            );
        }
    }
    risks
}

/// A capability's canonical name: upper case, without the `CAP_` prefix.
pub(crate) fn capability_name(capability: &str) -> String {
    let upper = capability.trim().to_ascii_uppercase();
    upper
        .strip_prefix("CAP_")
        .map(str::to_owned)
        .unwrap_or(upper)
}

/// Whether a resource name is an extended resource that counts as device access.
pub(crate) fn is_device_resource(name: &str) -> bool {
    // Extended resources are domain-prefixed; `kubernetes.io/` names and the native ones are not devices.
    name.contains('/')
        && !name.starts_with("kubernetes.io/")
        && !name.contains(".kubernetes.io/")
        && !ORDINARY_RESOURCES.contains(&name)
}

/// The device resources of `resources` at `path` (`...resources`, or a TrainJob's
/// `spec.trainer.resourcesPerNode`) for container `container`.
pub(crate) fn resource_risks(
    resources: &ResourceRequirements,
    container: &str,
    path: &str,
) -> Vec<Risk> {
    let mut risks = Vec::new();
    let lists: [(&str, Option<&BTreeMap<String, Quantity>>); 2] = [
        ("limits", resources.limits.as_ref()),
        ("requests", resources.requests.as_ref()),
    ];
    let mut seen = std::collections::BTreeSet::new();
    for (list, map) in lists {
        for name in map.into_iter().flat_map(BTreeMap::keys) {
            if is_device_resource(name) && seen.insert(name.clone()) {
                risks.push(
                    Risk::new(
                        RiskKind::Device,
                        format!("{path}.{list}[{name}]"),
                        format!("container {container:?} asks for device resource {name}"),
                    )
                    .with_subject(name.clone()),
                );
            }
        }
    }
    risks
}

/// The path of replicated job `index`'s pod spec in a runtime (`spec.template.spec.replicatedJobs[i]...`).
pub fn runtime_pod_spec_path(index: usize) -> String {
    format!("spec.template.spec.replicatedJobs[{index}].template.spec.template.spec")
}

/// The risks of every pod a training runtime stamps out, at runtime paths
/// (`spec.template.spec.replicatedJobs[i].template.spec.template.spec...`).
pub fn runtime_risks(spec: &TrainingRuntimeSpec) -> Vec<Risk> {
    spec.template
        .spec
        .replicated_jobs
        .iter()
        .enumerate()
        .filter_map(|(index, job)| {
            Some(pod_spec_risks(
                job.pod_spec()?,
                &runtime_pod_spec_path(index),
            ))
        })
        .flatten()
        .collect()
}

/// The images of a pod spec's init containers and containers, with their paths (`...containers[i].image`).
pub(crate) fn pod_spec_images(spec: &PodSpec, path: &str) -> Vec<(String, String)> {
    let mut images = Vec::new();
    for (list, containers) in [
        ("initContainers", spec.init_containers.as_ref()),
        ("containers", Some(&spec.containers)),
    ] {
        for (index, container) in containers.into_iter().flatten().enumerate() {
            if let Some(image) = container.image.as_deref().filter(|i| !i.is_empty()) {
                images.push((format!("{path}.{list}[{index}].image"), image.to_owned()));
            }
        }
    }
    images
}

#[cfg(test)]
mod tests;
