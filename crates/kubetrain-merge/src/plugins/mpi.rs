//! MPI: node counts, slots and the SSH-auth volumes for every implementation; the hostfile and the launcher
//! env for Open MPI only. The Secret and the hostfile ConfigMap are built in `kubetrain-jobset`.
//!
//! Upstream's CRD admits only `OpenMPI` (and `""`) in `spec.mlPolicy.mpi.mpiImplementation`, so another
//! implementation is chosen with the [`IMPLEMENTATION_ANNOTATION`] on the runtime's JobSet template. For such a
//! runtime this plugin still places the ranks and the SSH keys, and leaves the hostfile (its format, its volume:
//! [`mount_hostfile`]) and the launcher env ([`launcher_env`]) to the plugin that handles the implementation.
//! When no plugin mounted a hostfile, [`builtin_companions`] fails the render, naming the annotation.

use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, EnvVar, KeyToPath, SecretVolumeSource, Volume, VolumeMount,
};
use kubetrain_api::constants::{LAUNCHER, NODE};
use kubetrain_api::{MLPolicySource, MPIImplementation, TrainJob};

use super::{EnforceMlPolicy, Plugin};
use crate::error::MergeError;
use crate::info::Info;
use crate::{resources, upsert};

/// The MPI plugin.
#[derive(Debug, Clone, Copy)]
pub struct Mpi;

/// Volume name of the SSH keys.
pub const SSH_AUTH_VOLUME: &str = "mpi-ssh-auth";
/// Volume name of the hostfile.
pub const HOSTFILE_VOLUME: &str = "mpi-hostfile";
/// Where the launcher sees the hostfile.
pub const HOSTFILE_DIR: &str = "/etc/mpi";
/// Key and file name of the hostfile.
pub const HOSTFILE_NAME: &str = "hostfile";

/// Annotation of a runtime's JobSet template (`spec.template.metadata.annotations`, which a TrainJob's
/// `runtimePatches` may also set) naming the MPI implementation when it is not Open MPI, e.g. `MPICH` or
/// `IntelMPI` (the names upstream's Go constants use). When set it takes precedence over
/// `spec.mlPolicy.mpi.mpiImplementation`, whose CRD enum refuses those values.
pub const IMPLEMENTATION_ANNOTATION: &str = "kubetrain.dev/mpi-implementation";

/// The implementation this plugin renders in full.
pub const OPEN_MPI: &str = "OpenMPI";

/// Field path of [`IMPLEMENTATION_ANNOTATION`] in a runtime, for errors.
pub const IMPLEMENTATION_ANNOTATION_PATH: &str =
    "spec.template.metadata.annotations[kubetrain.dev/mpi-implementation]";

/// The MPI implementation `info`'s runtime asks for: [`IMPLEMENTATION_ANNOTATION`] when set, else
/// `mpiImplementation` (`OpenMPI` by default, `""` when set empty). `None` when the runtime has no MPI policy.
pub fn implementation(info: &Info) -> Option<&str> {
    let Some(MLPolicySource::Mpi(policy)) = info.ml_source() else {
        return None;
    };
    if let Some(name) = info.annotations.get(IMPLEMENTATION_ANNOTATION) {
        return Some(name.as_str());
    }
    Some(match policy.mpi_implementation_or_default() {
        MPIImplementation::OpenMPI => OPEN_MPI,
        MPIImplementation::Unset => "",
    })
}

/// Whether `info`'s runtime asks for an MPI implementation other than Open MPI (or `""`), which this plugin
/// leaves to another plugin.
fn delegated(info: &Info) -> bool {
    implementation(info).is_some_and(|name| !name.is_empty() && name != OPEN_MPI)
}

/// The companions the built-in MPI builder renders for `info`, from [`builtin_companions`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Companions {
    /// The SSH-auth Secret and the Open MPI hostfile.
    SecretAndHostfile,
    /// The SSH-auth Secret only: the plugin that handles the implementation builds the hostfile.
    SecretOnly,
}

/// What the built-in MPI builder renders for `info` once every ML policy has run: nothing without an MPI
/// policy, the Secret only when a plugin handles the implementation (it mounted the hostfile on the launcher
/// with [`mount_hostfile`]), both otherwise.
///
/// # Errors
/// [`MergeError::Invalid`] at [`IMPLEMENTATION_ANNOTATION_PATH`] when the runtime asks for an implementation
/// other than Open MPI and no plugin mounted a hostfile on the launcher: no registered plugin handles it.
pub fn builtin_companions(info: &Info) -> Result<Option<Companions>, MergeError> {
    let Some(name) = implementation(info) else {
        return Ok(None);
    };
    if !delegated(info) {
        return Ok(Some(Companions::SecretAndHostfile));
    }
    let launcher = info.pod_set_by_name(LAUNCHER);
    let mounted = launcher.and_then(|i| info.pod_spec(i)).is_some_and(|pod| {
        pod.volumes
            .iter()
            .flatten()
            .any(|v| v.name == HOSTFILE_VOLUME)
    });
    if launcher.is_some() && !mounted {
        return Err(MergeError::Invalid {
            path: IMPLEMENTATION_ANNOTATION_PATH.to_owned(),
            message: format!(
                "MPI implementation {name:?} is not handled by any registered plugin (the built-in MPI plugin \
                 renders OpenMPI only, the one value spec.mlPolicy.mpi.mpiImplementation admits); register a \
                 plugin for it in the operator (docs/plugins.md), or remove the annotation to use OpenMPI"
            ),
        });
    }
    Ok(Some(Companions::SecretOnly))
}

/// Mounts the hostfile ConfigMap (`<job>-mpi-hostfile`, key [`HOSTFILE_NAME`]) at [`HOSTFILE_DIR`] in the
/// launcher's `node` container, as this plugin does for Open MPI. A plugin that handles another implementation
/// calls it from its ML policy and builds the ConfigMap in its own format.
pub fn mount_hostfile(info: &mut Info, job: &TrainJob) {
    let Some(index) = info.pod_set_by_name(LAUNCHER) else {
        return;
    };
    let pod = info.pod_spec_mut(index);
    upsert::volumes(&mut pod.volumes, &[hostfile_volume(job.name())]);
    for c in pod.containers.iter_mut().filter(|c| c.name == NODE) {
        upsert::volume_mounts(
            &mut c.volume_mounts,
            &[mount(HOSTFILE_VOLUME, HOSTFILE_DIR)],
        );
    }
}

/// Upserts `env` into the launcher's `node` container; returns whether there was one.
pub fn launcher_env(info: &mut Info, env: &[EnvVar]) -> bool {
    let Some(index) = info.pod_set_by_name(LAUNCHER) else {
        return false;
    };
    let mut found = false;
    for c in info
        .pod_spec_mut(index)
        .containers
        .iter_mut()
        .filter(|c| c.name == NODE)
    {
        upsert::env(&mut c.env, env);
        found = true;
    }
    found
}

/// `<job>-mpi-ssh-auth`.
pub fn ssh_auth_secret_name(job: &str) -> String {
    format!("{job}-mpi-ssh-auth")
}

/// `<job>-mpi-hostfile`.
pub fn hostfile_config_map_name(job: &str) -> String {
    format!("{job}-mpi-hostfile")
}

fn key(key: &str, path: &str, mode: i32) -> KeyToPath {
    KeyToPath {
        key: key.to_owned(),
        path: path.to_owned(),
        mode: Some(mode),
        ..Default::default()
    }
}

fn ssh_volume(job: &str) -> Volume {
    Volume {
        name: SSH_AUTH_VOLUME.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(ssh_auth_secret_name(job)),
            default_mode: Some(0o400),
            items: Some(vec![
                key("ssh-privatekey", "id_rsa", 0o640),
                key("ssh-publickey", "id_rsa.pub", 0o644),
                key("ssh-publickey", "authorized_keys", 0o644),
            ]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn hostfile_volume(job: &str) -> Volume {
    Volume {
        name: HOSTFILE_VOLUME.to_owned(),
        config_map: Some(ConfigMapVolumeSource {
            name: hostfile_config_map_name(job),
            items: Some(vec![key(HOSTFILE_NAME, HOSTFILE_NAME, 0o444)]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Whether pod set `index` has a `node` container.
fn has_node(info: &Info, index: usize) -> bool {
    info.pod_spec(index)
        .is_some_and(|pod| pod.containers.iter().any(|c| c.name == NODE))
}

fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        ..Default::default()
    }
}

impl Plugin for Mpi {
    fn name(&self) -> &str {
        "MPI"
    }

    fn ml_policy(&self) -> Option<&dyn EnforceMlPolicy> {
        Some(self)
    }
}

impl EnforceMlPolicy for Mpi {
    fn enforce_ml_policy(&self, info: &mut Info, job: &TrainJob) -> Result<(), MergeError> {
        let Some(MLPolicySource::Mpi(policy)) = info.ml_source().cloned() else {
            return Ok(());
        };
        let launcher_as_node = policy.run_launcher_as_node_or_default();

        if let Some(n) = job.spec.trainer.as_ref().and_then(|t| t.num_nodes)
            && let Some(i) = info.pod_set_by_name(NODE)
        {
            info.pod_sets[i].count = if launcher_as_node { (n - 1).max(1) } else { n };
        }

        let mut slots = policy.num_proc_per_node_or_default();
        if let Some(n) = job.spec.trainer.as_ref().and_then(|t| t.num_proc_per_node) {
            slots = n;
        } else if slots == 1 {
            let gpus = info.resources_per_node_ref(job).map_or(0, resources::gpus);
            if gpus > 1 {
                slots = i32::try_from(gpus).unwrap_or(i32::MAX);
            }
        }
        // Resolve the defaults in the info, as upstream does: the hostfile builder reads them.
        let mut resolved = policy.clone();
        resolved.num_proc_per_node = Some(slots);
        if let Some(p) = info.ml_policy.as_mut() {
            p.source = Some(MLPolicySource::Mpi(resolved));
        }

        let name = job.name();
        let mount_path = policy.ssh_auth_mount_path_or_default().to_owned();
        for index in 0..info.pod_sets.len() {
            let ps_name = &info.pod_sets[index].name;
            if ps_name != NODE && ps_name != LAUNCHER {
                continue;
            }
            let pod = info.pod_spec_mut(index);
            upsert::volumes(&mut pod.volumes, &[ssh_volume(name)]);
            for c in pod.containers.iter_mut().filter(|c| c.name == NODE) {
                upsert::volume_mounts(&mut c.volume_mounts, &[mount(SSH_AUTH_VOLUME, &mount_path)]);
            }
        }
        if delegated(info) {
            return Ok(());
        }
        mount_hostfile(info, job);
        let env = [
            upsert::env_value(
                "OMPI_MCA_orte_default_hostfile",
                format!("{HOSTFILE_DIR}/{HOSTFILE_NAME}"),
            ),
            upsert::env_value("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
            upsert::env_value("OMPI_MCA_orte_set_default_slots", slots.to_string()),
            upsert::env_value("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
        ];
        let unset = implementation(info) == Some("");
        if unset
            && info
                .pod_set_by_name(LAUNCHER)
                .is_some_and(|i| has_node(info, i))
        {
            return Err(MergeError::UnsupportedMpiImplementation(String::new()));
        }
        launcher_env(info, &env);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use kubetrain_api::{Document, TrainJob, parse_documents};

    use super::*;

    /// The info of an MPI runtime with `mpi` as its policy and `annotations` on its template, and its job.
    fn runtime_info(mpi: &str, annotations: &str) -> (Info, TrainJob) {
        let yaml = format!(
            "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: ClusterTrainingRuntime\nmetadata: {{name: m}}\n\
             spec:\n  mlPolicy: {{mpi: {mpi}}}\n  template:\n    metadata: {{annotations: {annotations}}}\n    \
             spec:\n      replicatedJobs:\n        - name: launcher\n          template: {{spec: {{template: \
             {{spec: {{containers: [{{name: node, image: x}}]}}}}}}}}\n---\n\
             apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: j}}\n\
             spec: {{runtimeRef: {{name: m}}}}\n"
        );
        let docs = parse_documents(&yaml).unwrap();
        let (Document::ClusterTrainingRuntime(rt), Document::TrainJob(job)) =
            (&docs[0].document, &docs[1].document)
        else {
            panic!("a runtime and a TrainJob");
        };
        (Info::new(job, &rt.spec).unwrap(), (**job).clone())
    }

    fn enforced(mpi: &str, annotations: &str) -> Result<Info, MergeError> {
        let (mut info, job) = runtime_info(mpi, annotations);
        Mpi.enforce_ml_policy(&mut info, &job).map(|()| info)
    }

    #[test]
    fn the_annotation_takes_precedence_over_the_field() {
        let (info, _) = runtime_info(
            "{mpiImplementation: OpenMPI}",
            "{kubetrain.dev/mpi-implementation: MPICH}",
        );
        assert_eq!(implementation(&info), Some("MPICH"));
        let (info, _) = runtime_info("{}", "{}");
        assert_eq!(implementation(&info), Some("OpenMPI"));
        let (info, _) = runtime_info("{mpiImplementation: ''}", "{}");
        assert_eq!(implementation(&info), Some(""));
    }

    #[test]
    fn another_implementation_gets_ssh_keys_but_no_hostfile_or_open_mpi_env() {
        let info = enforced("{}", "{kubetrain.dev/mpi-implementation: MPICH}").unwrap();
        let pod = info.pod_spec(0).unwrap();
        let volumes: Vec<_> = pod
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(volumes, [SSH_AUTH_VOLUME]);
        assert_eq!(pod.containers[0].env, None);
        let error = builtin_companions(&info).unwrap_err();
        assert!(
            error.to_string().starts_with(&format!(
                "{IMPLEMENTATION_ANNOTATION_PATH}: MPI implementation \"MPICH\""
            )),
            "{error}"
        );
    }

    #[test]
    fn a_mounted_hostfile_hands_the_hostfile_to_the_plugin() {
        let (mut info, job) = runtime_info("{}", "{kubetrain.dev/mpi-implementation: MPICH}");
        Mpi.enforce_ml_policy(&mut info, &job).unwrap();
        mount_hostfile(&mut info, &job);
        assert_eq!(
            builtin_companions(&info).unwrap(),
            Some(Companions::SecretOnly)
        );
    }

    #[test]
    fn open_mpi_keeps_its_hostfile_and_env_and_an_empty_implementation_stays_refused() {
        let info = enforced("{}", "{kubetrain.dev/mpi-implementation: OpenMPI}").unwrap();
        assert_eq!(
            builtin_companions(&info).unwrap(),
            Some(Companions::SecretAndHostfile)
        );
        let env = info.pod_spec(0).unwrap().containers[0].env.clone().unwrap();
        assert_eq!(env[0].name, "OMPI_MCA_orte_default_hostfile");
        assert!(matches!(
            enforced("{mpiImplementation: ''}", "{}"),
            Err(MergeError::UnsupportedMpiImplementation(_))
        ));
    }
}
