//! Companion objects: the MPI SSH-auth Secret and hostfile ConfigMap, the TrainJobStatus TLS ConfigMap, and the
//! PodGroups.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kubetrain_api::constants::{LAUNCHER, NODE, VOLCANO_QUEUE_ANNOTATION};
use kubetrain_api::podgroup::{coscheduling, volcano};
use kubetrain_api::quantity::Amount;
use kubetrain_api::{
    CoschedulingPodGroupPolicySource, MLPolicySource, NetworkTopologyMode, TrainJob,
    VolcanoPodGroupPolicySource,
};
use kubetrain_merge::Info;
use kubetrain_merge::plugins::mpi::{
    HOSTFILE_NAME, hostfile_config_map_name, ssh_auth_secret_name,
};

use crate::builder::endpoints;
use crate::object::child_meta;
use crate::ssh::SshKeyPair;

/// The hostfile: `<endpoint> slots=<n>` for every pod of every node pod set (`node`, and `launcher` when the
/// launcher runs as a node), in runtime order.
pub fn hostfile(info: &Info, job: &TrainJob) -> String {
    let Some(MLPolicySource::Mpi(mpi)) = info.ml_source() else {
        return String::new();
    };
    let slots = mpi.num_proc_per_node_or_default();
    let launcher_as_node = mpi.run_launcher_as_node_or_default();
    let mut out = String::new();
    for (i, ps) in info.pod_sets.iter().enumerate() {
        if ps.name == NODE || (launcher_as_node && ps.name == LAUNCHER) {
            for endpoint in endpoints(info, job, i) {
                out.push_str(&endpoint);
                out.push_str(" slots=");
                out.push_str(&slots.to_string());
                out.push('\n');
            }
        }
    }
    out
}

/// How many lines [`hostfile`] writes.
pub fn hostfile_entries(info: &Info) -> u64 {
    let Some(MLPolicySource::Mpi(mpi)) = info.ml_source() else {
        return 0;
    };
    let launcher_as_node = mpi.run_launcher_as_node_or_default();
    info.pod_sets
        .iter()
        .zip(&info.spec.replicated_jobs)
        .filter(|(ps, _)| ps.name == NODE || (launcher_as_node && ps.name == LAUNCHER))
        .map(|(ps, rjob)| {
            u64::try_from(ps.count).unwrap_or(0)
                * u64::try_from(rjob.replicas_or_default()).unwrap_or(0)
        })
        .sum()
}

/// `<job>-mpi-hostfile` with key `hostfile`.
pub fn hostfile_config_map(info: &Info, job: &TrainJob) -> ConfigMap {
    ConfigMap {
        metadata: child_meta(job, hostfile_config_map_name(job.name())),
        data: Some(BTreeMap::from([(
            HOSTFILE_NAME.to_owned(),
            hostfile(info, job),
        )])),
        ..Default::default()
    }
}

/// `<job>-mpi-ssh-auth`: type `kubernetes.io/ssh-auth`, immutable, keys `ssh-privatekey` and `ssh-publickey`.
pub fn ssh_auth_secret(job: &TrainJob, key: &SshKeyPair) -> Secret {
    Secret {
        metadata: child_meta(job, ssh_auth_secret_name(job.name())),
        type_: Some("kubernetes.io/ssh-auth".to_owned()),
        immutable: Some(true),
        data: Some(BTreeMap::from([
            (
                "ssh-privatekey".to_owned(),
                ByteString(key.private_key_pem.clone().into_bytes()),
            ),
            (
                "ssh-publickey".to_owned(),
                ByteString(key.public_key.clone().into_bytes()),
            ),
        ])),
        ..Default::default()
    }
}

/// `<job>-tls-config` with key `ca.crt`: the status server's CA certificate for the TrainJobStatus plugin.
pub fn tls_config_map(job: &TrainJob, ca_cert: &str) -> ConfigMap {
    use kubetrain_merge::plugins::trainjobstatus::{CA_CERT_FILE, tls_config_map_name};
    ConfigMap {
        metadata: child_meta(job, tls_config_map_name(job.name())),
        data: Some(BTreeMap::from([(
            CA_CERT_FILE.to_owned(),
            ca_cert.to_owned(),
        )])),
        ..Default::default()
    }
}

/// `minMember = Σ count` and `minResources = Σ count × pod requests` over every pod set.
pub fn pod_group_totals(info: &Info) -> (i32, BTreeMap<String, Quantity>) {
    let mut members: i32 = 0;
    let mut totals: BTreeMap<String, Amount> = BTreeMap::new();
    for ps in &info.pod_sets {
        members = members.saturating_add(ps.count);
        for (name, amount) in &ps.single_pod_requests {
            let total = totals.entry(name.clone()).or_insert(Amount::ZERO);
            *total = total.add(&amount.mul(i64::from(ps.count)));
        }
    }
    (
        members,
        totals
            .into_iter()
            .map(|(k, v)| (k, Quantity(v.to_string())))
            .collect(),
    )
}

/// The scheduler-plugins PodGroup named like the TrainJob.
pub fn coscheduling_pod_group(
    info: &Info,
    job: &TrainJob,
    policy: &CoschedulingPodGroupPolicySource,
) -> coscheduling::PodGroup {
    let (members, resources) = pod_group_totals(info);
    coscheduling::PodGroup {
        metadata: child_meta(job, job.name().to_owned()),
        spec: coscheduling::PodGroupSpec {
            min_member: Some(members),
            min_resources: Some(resources),
            schedule_timeout_seconds: Some(policy.schedule_timeout_seconds_or_default()),
        },
        status: None,
    }
}

/// The Volcano PodGroup named like the TrainJob: queue from the template annotation, the last pod
/// `priorityClassName` that is set, and the network topology of the policy.
pub fn volcano_pod_group(
    info: &Info,
    job: &TrainJob,
    policy: &VolcanoPodGroupPolicySource,
) -> volcano::PodGroup {
    let (members, resources) = pod_group_totals(info);
    let priority_class_name = info
        .spec
        .replicated_jobs
        .iter()
        .filter_map(|r| {
            r.template
                .spec
                .as_ref()?
                .template
                .spec
                .as_ref()?
                .priority_class_name
                .clone()
        })
        .next_back();
    let network_topology = policy
        .network_topology
        .as_ref()
        .map(|t| volcano::NetworkTopologySpec {
            mode: Some(match t.mode.unwrap_or(NetworkTopologyMode::Hard) {
                NetworkTopologyMode::Hard => "hard".to_owned(),
                NetworkTopologyMode::Soft => "soft".to_owned(),
            }),
            highest_tier_allowed: Some(t.highest_tier_allowed.unwrap_or(1)),
        });
    volcano::PodGroup {
        metadata: child_meta(job, job.name().to_owned()),
        spec: volcano::PodGroupSpec {
            min_member: Some(members),
            min_resources: Some(resources),
            queue: info.annotations.get(VOLCANO_QUEUE_ANNOTATION).cloned(),
            priority_class_name,
            network_topology,
            ..Default::default()
        },
        status: None,
    }
}
