//! What differs between the six kinds: which replica types become the trainer's nodes, the ML policy and
//! built-in runtime, and the env the v1 operator gave every process, rebuilt for the same world.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector};
use kubetrain_api::constants::{
    MPI_RESERVED_ENV, TORCH_ELASTIC_RESERVED_ENV, TORCH_RESERVED_ENV, XGBOOST_RESERVED_ENV,
};
use kubetrain_api::{
    JAXMLPolicySource, MLPolicySource, MPIImplementation, MPIMLPolicySource, TorchElasticPolicy,
    TorchMLPolicySource, XGBoostMLPolicySource,
};

// The Job completion index of a pod: its rank among the nodes.
use kubetrain_merge::plugins::COMPLETION_INDEX_FIELD_PATH as COMPLETION_INDEX;

use crate::v1::{ReplicaSpecs, V1Kind};

/// The replica types whose pods are the trainer's nodes, rank 0 first (v1 ranks Master before Worker).
pub(crate) fn node_roles(kind: V1Kind, specs: &ReplicaSpecs) -> Vec<&'static str> {
    let present = |role: &&str| specs.contains_key(*role);
    match kind {
        V1Kind::PyTorchJob | V1Kind::XGBoostJob | V1Kind::PaddleJob => {
            ["Master", "Worker"].into_iter().filter(present).collect()
        }
        V1Kind::JAXJob | V1Kind::MPIJob => ["Worker"].into_iter().filter(present).collect(),
        // TF: the workers train; without workers the chief (or master) is the one node.
        V1Kind::TFJob => ["Worker", "Chief", "Master"]
            .into_iter()
            .filter(present)
            .take(1)
            .collect(),
    }
}

/// The ML policy of a runtime for `kind`; `None` is PlainML (TFJob, PaddleJob). `elastic`: a PyTorchJob's
/// `elasticPolicy`, converted.
pub(crate) fn ml_policy(
    kind: V1Kind,
    slots_per_worker: Option<i32>,
    elastic: Option<TorchElasticPolicy>,
) -> Option<MLPolicySource> {
    match kind {
        V1Kind::PyTorchJob => Some(MLPolicySource::Torch(TorchMLPolicySource {
            elastic_policy: elastic,
            ..TorchMLPolicySource::default()
        })),
        V1Kind::XGBoostJob => Some(MLPolicySource::Xgboost(XGBoostMLPolicySource {})),
        V1Kind::JAXJob => Some(MLPolicySource::Jax(JAXMLPolicySource {})),
        V1Kind::MPIJob => Some(MLPolicySource::Mpi(MPIMLPolicySource {
            num_proc_per_node: Some(slots_per_worker.unwrap_or(1)),
            mpi_implementation: Some(MPIImplementation::OpenMPI),
            ssh_auth_mount_path: None,
            run_launcher_as_node: Some(false),
        })),
        V1Kind::TFJob | V1Kind::PaddleJob => None,
    }
}

/// The built-in ClusterTrainingRuntime a job of `kind` with a plain template can use.
pub(crate) fn builtin_runtime(kind: V1Kind) -> Option<&'static str> {
    match kind {
        V1Kind::PyTorchJob => Some("torch-distributed"),
        V1Kind::XGBoostJob => Some("xgboost-distributed"),
        V1Kind::JAXJob => Some("jax-distributed"),
        _ => None,
    }
}

/// Env names the V2 plugin of `kind` owns: a TrainJob may not set them (on an elastic torch runtime, the c10d
/// rendezvous names too).
pub(crate) fn reserved_env(kind: V1Kind, elastic: bool) -> Vec<&'static str> {
    match kind {
        V1Kind::PyTorchJob if elastic => TORCH_RESERVED_ENV
            .iter()
            .chain(&TORCH_ELASTIC_RESERVED_ENV)
            .copied()
            .collect(),
        V1Kind::PyTorchJob => TORCH_RESERVED_ENV.to_vec(),
        V1Kind::XGBoostJob => XGBOOST_RESERVED_ENV.to_vec(),
        V1Kind::MPIJob => MPI_RESERVED_ENV.to_vec(),
        _ => Vec::new(),
    }
}

/// The world a job runs in, as the v1 operator computed it.
pub(crate) struct World<'a> {
    pub(crate) kind: V1Kind,
    /// The TrainJob's (and the v1 job's) name.
    pub(crate) name: &'a str,
    /// Pods of the node roles.
    pub(crate) nodes: i32,
    /// Processes per node (PyTorchJob `nprocPerNode` as an integer, else 1).
    pub(crate) procs_per_node: i32,
    /// The port the v1 operator told processes to meet on.
    pub(crate) port: i32,
    /// Whether the job had a Master replica (v1 sets the master env only then for XGBoost, and for an elastic
    /// PyTorchJob).
    pub(crate) has_master: bool,
    /// Whether the PyTorchJob is elastic (`elasticPolicy`): v1 gave its pods the rendezvous env of torchrun's
    /// elastic mode and, without a Master, no `MASTER_ADDR`, `WORLD_SIZE` or `RANK`.
    pub(crate) elastic: bool,
    /// PyTorchJob: v1's `PET_NPROC_PER_NODE` when not an integer (`auto`, v1's default, `cpu`, `gpu`), which
    /// the converter hands torchrun as `--nproc-per-node` where V2's torch policy would give another value.
    pub(crate) torch_nproc: Option<String>,
    /// TFJob: the cluster spec of `TF_CONFIG` (None: one pod in all, where v1 sets no `TF_CONFIG`) and the
    /// task type of the trainer's nodes.
    pub(crate) tf: Option<(&'a TfCluster, &'a str)>,
}

/// TFJob's `TF_CONFIG` task index: the pod's Job completion index, defined before `TF_CONFIG` so that the
/// kubelet expands `$(KUBETRAIN_TF_TASK_INDEX)` in it (a pod's template cannot hold a per-pod value).
pub(crate) const TF_TASK_INDEX: &str = "KUBETRAIN_TF_TASK_INDEX";

/// The cluster spec of a TFJob's `TF_CONFIG`: each replica type (lower case, as v1 writes it) to its pods'
/// `host:port`, the hosts being the JobSet's DNS names.
pub(crate) type TfCluster = BTreeMap<String, Vec<String>>;

/// The env that gives a TFJob pod of `task_type` the `TF_CONFIG` v1 wrote: the same cluster spec (with
/// V2's DNS names), its task type and index, and v1's `environment: cloud`.
pub(crate) fn tf_config_env(cluster: &TfCluster, task_type: &str) -> Vec<EnvVar> {
    // A map of strings to string lists always serialises.
    let cluster = serde_json::to_string(cluster).unwrap_or_default();
    let config = format!(
        r#"{{"cluster":{cluster},"task":{{"type":"{task_type}","index":$({TF_TASK_INDEX})}},"environment":"cloud"}}"#
    );
    vec![
        named(TF_TASK_INDEX, field(COMPLETION_INDEX)),
        value("TF_CONFIG", &config),
    ]
}

impl World<'_> {
    /// The DNS name of node `index` of the TrainJob's JobSet.
    fn node_host(&self, index: i32) -> String {
        format!("{name}-node-0-{index}.{name}", name = self.name)
    }

    /// The env v1 set on every container, rebuilt with V2's names for the same world, and the report note.
    pub(crate) fn env(&self) -> (Vec<EnvVar>, &'static str) {
        let master = self.node_host(0);
        let port = self.port.to_string();
        let nodes = self.nodes.to_string();
        let rank = || field(COMPLETION_INDEX);
        match self.kind {
            // v1's setPodEnv sets the master env, WORLD_SIZE and RANK only when there is a Master; an elastic job
            // without one gets the elastic env alone, which the torch policy of an elastic runtime sets.
            V1Kind::PyTorchJob if self.elastic && !self.has_master => (
                vec![value("PYTHONUNBUFFERED", "1")],
                "v1 set PET_NNODES=<min>:<max>, PET_RDZV_BACKEND and PET_RDZV_ENDPOINT=<job>-worker-0:<port> (no \
                 MASTER_ADDR, WORLD_SIZE or RANK without a Master); the elastic runtime's torch policy sets \
                 PET_NNODES=<min>:<max>, PET_RDZV_BACKEND=c10d, PET_RDZV_ENDPOINT=<job>-node-0-0.<job>:29500 (node 0, \
                 worker 0 of a job without a Master), PET_RDZV_ID and PET_NPROC_PER_NODE, and PET_MASTER_ADDR and \
                 PET_MASTER_PORT, which torchrun ignores with a c10d rendezvous",
            ),
            V1Kind::PyTorchJob => (
                vec![
                    value("PYTHONUNBUFFERED", "1"),
                    value("MASTER_ADDR", &master),
                    value("MASTER_PORT", &port),
                    value(
                        "WORLD_SIZE",
                        &(self.nodes * self.procs_per_node).to_string(),
                    ),
                    named("RANK", rank()),
                ],
                "v1 set MASTER_ADDR=<job>-master-0, MASTER_PORT, WORLD_SIZE and RANK on every pod; the TrainJob \
                 sets the same names for the same world (MASTER_ADDR is node 0's DNS name, RANK the pod's \
                 completion index), and the torch plugin sets torchrun's PET_NNODES, PET_NPROC_PER_NODE, \
                 PET_NODE_RANK, PET_MASTER_ADDR and PET_MASTER_PORT (port 29500)",
            ),
            V1Kind::XGBoostJob => {
                let mut env = vec![
                    value("PYTHONUNBUFFERED", "1"),
                    value("MASTER_ADDR", &master),
                    value("MASTER_PORT", &port),
                    value("WORLD_SIZE", &nodes),
                    named("RANK", rank()),
                ];
                let first_worker = i32::from(self.has_master);
                if first_worker < self.nodes {
                    let workers: Vec<String> = (first_worker..self.nodes)
                        .map(|i| self.node_host(i))
                        .collect();
                    env.push(value("WORKER_PORT", &port));
                    env.push(value("WORKER_ADDRS", &workers.join(",")));
                }
                (
                    env,
                    "v1 set MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, WORKER_PORT and WORKER_ADDRS; the TrainJob \
                     sets the same names with the JobSet's DNS names, and the xgboost plugin adds DMLC_* for the \
                     Rabit tracker",
                )
            }
            V1Kind::PaddleJob => (
                vec![
                    value("PYTHONUNBUFFERED", "1"),
                    value("PADDLE_JOB_ID", self.name),
                    value("PADDLE_NNODES", &nodes),
                    value("PADDLE_MASTER", &format!("{master}:{port}")),
                ],
                "v1 set PADDLE_JOB_ID, PADDLE_NNODES and PADDLE_MASTER (the master's pod IP on rank 0, \
                 <job>-master-0:<port> elsewhere); the TrainJob sets them with node 0's DNS name on every rank",
            ),
            V1Kind::JAXJob => (
                vec![
                    value("PYTHONUNBUFFERED", "1"),
                    value("COORDINATOR_ADDRESS", &master),
                    value("COORDINATOR_PORT", &port),
                    value("NUM_PROCESSES", &nodes),
                    named("PROCESS_ID", rank()),
                ],
                "v1 set COORDINATOR_ADDRESS=<job>-worker-0, COORDINATOR_PORT, NUM_PROCESSES and PROCESS_ID; the \
                 TrainJob sets the same names for the same world, and the jax plugin adds JAX_COORDINATOR_ADDRESS, \
                 JAX_NUM_PROCESSES and JAX_PROCESS_ID",
            ),
            V1Kind::TFJob => match self.tf {
                Some((cluster, task_type)) => (
                    tf_config_env(cluster, task_type),
                    "v1 wrote TF_CONFIG (cluster spec, task type and index) into every pod's tensorflow container; \
                     the TrainJob writes the same into every pod, with the JobSet's DNS names \
                     <job>-<replicatedJob>-0-<index>.<job> and the task index from the Job completion index \
                     (KUBETRAIN_TF_TASK_INDEX, expanded by the kubelet)",
                ),
                None => (Vec::new(), ""),
            },
            V1Kind::MPIJob => (Vec::new(), ""),
        }
    }
}

/// The port processes meet on, as v1 chose it: the main container's port named like the kind's default port
/// (v1's defaulting adds it when absent), else the kind's default.
pub(crate) fn meeting_port(
    kind: V1Kind,
    ports: Option<&[k8s_openapi::api::core::v1::ContainerPort]>,
) -> i32 {
    let (name, default) = kind.default_port();
    ports
        .unwrap_or_default()
        .iter()
        .find(|p| p.name.as_deref() == Some(name))
        .map_or(default, |p| p.container_port)
}

fn value(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        value_from: None,
    }
}

fn named(name: &str, source: EnvVarSource) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: None,
        value_from: Some(source),
    }
}

fn field(path: &str) -> EnvVarSource {
    EnvVarSource {
        field_ref: Some(ObjectFieldSelector {
            api_version: None,
            field_path: path.to_owned(),
        }),
        ..EnvVarSource::default()
    }
}
