//! Flux (HPC workload manager): the Flux view init container, its volumes and mounts, and the command wrapped in
//! the Flux entrypoint. The entrypoint ConfigMap and the CURVE certificate Secret are built in `kubetrain-jobset`.
//!
//! Upstream (`plugins/flux/flux.go`) does not touch counts or env; PlainML runs for Flux runtimes too (its
//! policy gate only excludes torch, MPI and JAX) and is registered before this plugin, so its effects come
//! first.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, EmptyDirVolumeSource, SecretVolumeSource, Volume, VolumeMount,
};
use kubetrain_api::constants::{ANCESTOR_TRAINER, FLUX_INSTALLER, NODE};
use kubetrain_api::{MLPolicySource, TrainJob};

use super::{EnforceMlPolicy, Plugin};
use crate::error::MergeError;
use crate::info::Info;
use crate::upsert;

/// The Flux plugin.
#[derive(Debug, Clone, Copy)]
pub struct Flux;

/// Setting: the image of the `flux-installer` init container (a Flux view matching the application's OS).
pub const VIEW_IMAGE: &str = "FLUX_VIEW_IMAGE";
/// Setting: the network device the brokers bind to.
pub const NETWORK_DEVICE: &str = "FLUX_NETWORK_DEVICE";
/// Setting: the fluxion queue policy.
pub const QUEUE_POLICY: &str = "FLUX_QUEUE_POLICY";
/// The settings and their defaults (upstream `brokerDefaults`); env vars of the same name override them.
pub const SETTINGS: [(&str, &str); 3] = [
    (
        VIEW_IMAGE,
        "ghcr.io/converged-computing/flux-view-ubuntu:tag-jammy",
    ),
    (NETWORK_DEVICE, "eth0"),
    (QUEUE_POLICY, "fcfs"),
];

/// Volume (emptyDir) the Flux view is copied into.
pub const INSTALL_VOLUME: &str = "flux-install";
/// Where the Flux view volume is mounted.
pub const INSTALL_PATH: &str = "/mnt/flux";
/// Volume (emptyDir) for the spack software tree the view links to.
pub const SPACK_VOLUME: &str = "spack-install";
/// Where the spack software tree is restored in the application container.
pub const SPACK_PATH: &str = "/opt/software";
/// Where the entrypoint ConfigMap is mounted (upstream names this constant `FluxConfigVolumeName`).
pub const CONFIG_PATH: &str = "/etc/flux-config";
/// Volume of the CURVE certificate Secret.
pub const CURVE_VOLUME: &str = "flux-curve";
/// Where the CURVE certificate is mounted.
pub const CURVE_PATH: &str = "/curve";
/// Memory-backed emptyDir for shared memory.
pub const MEMORY_VOLUME: &str = "shared-memory";
/// Where the shared memory volume is mounted.
pub const MEMORY_PATH: &str = "/dev/shm";
/// Key of the application entrypoint in the ConfigMap.
pub const ENTRYPOINT_KEY: &str = "entrypoint.sh";
/// Key of the init container script in the ConfigMap.
pub const INIT_KEY: &str = "init.sh";
/// Key of the certificate in the Secret.
pub const CURVE_CERT_KEY: &str = "curve.cert";

/// `<job>-flux-entrypoint`: the ConfigMap with the scripts, also the name of its volume.
pub fn entrypoint_config_map_name(job: &str) -> String {
    format!("{job}-flux-entrypoint")
}

/// `<job>-flux-curve`: the Secret with the CURVE certificate.
pub fn curve_secret_name(job: &str) -> String {
    format!("{job}-flux-curve")
}

/// The Flux settings of a TrainJob (upstream `brokerSettingsFromEnvironment`): the defaults, overridden by the
/// trainer container's env (literal, non-empty values), overridden by the TrainJob's `trainer.env` (whose value
/// counts even when empty, as upstream reads the Go string).
pub fn settings(info: &Info, job: &TrainJob) -> BTreeMap<&'static str, String> {
    let mut settings: BTreeMap<&'static str, String> = SETTINGS
        .iter()
        .map(|(k, v)| (*k, (*v).to_owned()))
        .collect();
    let mut set = |name: &str, value: &str| {
        if let Some((key, _)) = SETTINGS.iter().find(|(k, _)| *k == name) {
            settings.insert(key, value.to_owned());
        }
    };
    if let Some(c) = info.trainer_container() {
        for env in c.env.iter().flatten() {
            if let Some(value) = env.value.as_deref().filter(|v| !v.is_empty()) {
                set(&env.name, value);
            }
        }
    }
    for env in job.spec.trainer.iter().flat_map(|t| &t.env) {
        set(&env.name, env.value.as_deref().unwrap_or_default());
    }
    settings
}

/// The application command Flux runs (upstream `getOriginalCommand`): the runtime trainer container's command,
/// replaced by the TrainJob's command if set, then the TrainJob's args, joined by spaces and trimmed.
pub fn original_command(info: &Info, job: &TrainJob) -> String {
    let trainer = job.spec.trainer.as_ref();
    let command = trainer
        .and_then(|t| t.command.as_deref())
        .or_else(|| info.trainer_container().and_then(|c| c.command.as_deref()))
        .unwrap_or_default();
    let args = trainer.and_then(|t| t.args.as_deref()).unwrap_or_default();
    command
        .iter()
        .chain(args)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(" ")
        .trim()
        .to_owned()
}

/// Nodes of the Flux cluster: `trainer.numNodes`; upstream dereferences it unchecked (a nil pointer panic when it
/// is unset), we fall back to the trainer count (`mlPolicy.numNodes`, default 1), which is what the pods are.
pub fn nodes(info: &Info, job: &TrainJob) -> i32 {
    job.spec
        .trainer
        .as_ref()
        .and_then(|t| t.num_nodes)
        .or_else(|| {
            info.pod_set_by_ancestor(ANCESTOR_TRAINER)
                .map(|i| info.pod_sets[i].count)
        })
        .unwrap_or(1)
}

/// Tasks per node: `trainer.numProcPerNode`, else the policy's `numProcPerNode` (CRD default 1).
pub fn tasks_per_node(info: &Info, job: &TrainJob) -> i32 {
    let policy = match info.ml_source() {
        Some(MLPolicySource::Flux(f)) => f.num_proc_per_node,
        _ => None,
    };
    job.spec
        .trainer
        .as_ref()
        .and_then(|t| t.num_proc_per_node)
        .or(policy)
        .unwrap_or(1)
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

fn empty_dir(name: &str, medium: Option<&str>) -> Volume {
    Volume {
        name: name.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: medium.map(str::to_owned),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The volumes on the `node` pod set, in upstream's order.
fn volumes(job: &str) -> [Volume; 5] {
    let config_map = entrypoint_config_map_name(job);
    [
        empty_dir(SPACK_VOLUME, None),
        empty_dir(INSTALL_VOLUME, None),
        Volume {
            name: config_map.clone(),
            config_map: Some(ConfigMapVolumeSource {
                name: config_map,
                default_mode: Some(0o755),
                ..Default::default()
            }),
            ..Default::default()
        },
        empty_dir(MEMORY_VOLUME, Some("Memory")),
        Volume {
            name: CURVE_VOLUME.to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(curve_secret_name(job)),
                default_mode: Some(0o400),
                ..Default::default()
            }),
            ..Default::default()
        },
    ]
}

/// The `flux-installer` init container: copies the Flux view into the shared volume and writes the config.
fn installer(job: &str, image: String) -> Container {
    Container {
        name: FLUX_INSTALLER.to_owned(),
        image: Some(image),
        command: Some(vec![
            "/bin/bash".to_owned(),
            format!("{CONFIG_PATH}/{INIT_KEY}"),
        ]),
        volume_mounts: Some(vec![
            mount(INSTALL_VOLUME, INSTALL_PATH, false),
            mount(&entrypoint_config_map_name(job), CONFIG_PATH, true),
        ]),
        ..Default::default()
    }
}

impl Plugin for Flux {
    fn name(&self) -> &str {
        "Flux"
    }

    fn ml_policy(&self) -> Option<&dyn EnforceMlPolicy> {
        Some(self)
    }
}

impl EnforceMlPolicy for Flux {
    fn enforce_ml_policy(&self, info: &mut Info, job: &TrainJob) -> Result<(), MergeError> {
        if !matches!(info.ml_source(), Some(MLPolicySource::Flux(_))) {
            return Ok(());
        }

        let name = job.name();
        let image = settings(info, job).remove(VIEW_IMAGE).unwrap_or_default();
        // Upstream rewrites the in-memory TrainJob: the command becomes the entrypoint wrapping the original
        // command line, and the args are cleared (so the builder leaves the runtime's args in place).
        info.trainer_command = Some(vec![
            "/bin/bash".to_owned(),
            format!("{CONFIG_PATH}/{ENTRYPOINT_KEY}"),
            original_command(info, job),
        ]);
        info.trainer_args = None;

        let config_map = entrypoint_config_map_name(name);
        let mounts = [
            mount(INSTALL_VOLUME, INSTALL_PATH, false),
            mount(SPACK_VOLUME, SPACK_PATH, false),
            mount(&config_map, CONFIG_PATH, true),
            mount(CURVE_VOLUME, CURVE_PATH, true),
            mount(MEMORY_VOLUME, MEMORY_PATH, true),
        ];
        for index in 0..info.pod_sets.len() {
            if info.pod_sets[index].name != NODE {
                continue;
            }
            let pod = info.pod_spec_mut(index);
            upsert::volumes(&mut pod.volumes, &volumes(name));
            pod.init_containers
                .get_or_insert_with(Vec::new)
                .push(installer(name, image.clone()));
            for c in pod.containers.iter_mut().filter(|c| c.name == NODE) {
                upsert::volume_mounts(&mut c.volume_mounts, &mounts);
            }
        }
        Ok(())
    }
}
