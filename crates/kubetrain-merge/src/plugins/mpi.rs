//! MPI (OpenMPI): node counts, slots, the SSH-auth and hostfile volumes and mounts, and the launcher env.
//! The Secret and the hostfile ConfigMap are built in `kubetrain-jobset`.

use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, KeyToPath, SecretVolumeSource, Volume, VolumeMount,
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
            let ps_name = info.pod_sets[index].name.clone();
            let is_launcher = ps_name == LAUNCHER;
            if ps_name != NODE && !is_launcher {
                continue;
            }
            let pod = info.pod_spec_mut(index);
            upsert::volumes(&mut pod.volumes, &[ssh_volume(name)]);
            if is_launcher {
                upsert::volumes(&mut pod.volumes, &[hostfile_volume(name)]);
            }
            for c in pod.containers.iter_mut().filter(|c| c.name == NODE) {
                upsert::volume_mounts(&mut c.volume_mounts, &[mount(SSH_AUTH_VOLUME, &mount_path)]);
                if !is_launcher {
                    continue;
                }
                upsert::volume_mounts(
                    &mut c.volume_mounts,
                    &[mount(HOSTFILE_VOLUME, HOSTFILE_DIR)],
                );
                match policy.mpi_implementation_or_default() {
                    MPIImplementation::OpenMPI => upsert::env(
                        &mut c.env,
                        &[
                            upsert::env_value(
                                "OMPI_MCA_orte_default_hostfile",
                                format!("{HOSTFILE_DIR}/{HOSTFILE_NAME}"),
                            ),
                            upsert::env_value("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
                            upsert::env_value("OMPI_MCA_orte_set_default_slots", slots.to_string()),
                            upsert::env_value("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
                        ],
                    ),
                    MPIImplementation::Unset => {
                        return Err(MergeError::UnsupportedMpiImplementation(String::new()));
                    }
                }
            }
        }
        Ok(())
    }
}
