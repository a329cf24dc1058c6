//! Names, labels and defaults that upstream Kubeflow Trainer gives a meaning to.
//!
//! Values are copied from upstream `pkg/constants/constants.go` and the API types of v2.3, so that manifests and
//! rendered objects stay interchangeable with upstream.

/// API group of the trainer resources.
pub const GROUP: &str = "trainer.kubeflow.org";
/// The only API version of the trainer resources.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` string of the trainer resources.
pub const API_VERSION: &str = "trainer.kubeflow.org/v1alpha1";

/// Kind of a TrainJob.
pub const TRAINJOB_KIND: &str = "TrainJob";
/// Kind of a hyperparameter search (upstream master, not yet in a release).
pub const OPTIMIZATIONJOB_KIND: &str = "OptimizationJob";
/// Kind of a namespaced training runtime.
pub const TRAINING_RUNTIME_KIND: &str = "TrainingRuntime";
/// Kind of a cluster-scoped training runtime.
pub const CLUSTER_TRAINING_RUNTIME_KIND: &str = "ClusterTrainingRuntime";

/// The default and only accepted `spec.managedBy` of a TrainJob reconciled by the trainer controller.
pub const TRAINJOB_CONTROLLER: &str = "trainer.kubeflow.org/trainjob-controller";
/// `spec.managedBy` of a TrainJob dispatched by Kueue's MultiKueue: the trainer controller leaves it alone.
pub const MULTIKUEUE_CONTROLLER: &str = "kueue.x-k8s.io/multikueue";

/// Label on replicatedJob templates that binds a job to its role in the TrainJob.
pub const ANCESTOR_LABEL: &str = "trainer.kubeflow.org/trainjob-ancestor-step";
/// Ancestor value of the dataset initializer job.
pub const DATASET_INITIALIZER: &str = "dataset-initializer";
/// Ancestor value of the model initializer job.
pub const MODEL_INITIALIZER: &str = "model-initializer";
/// Ancestor value of the trainer job.
pub const ANCESTOR_TRAINER: &str = "trainer";

/// Name of the trainer container in the trainer job ("node").
pub const NODE: &str = "node";
/// Name of the MPI launcher replicatedJob.
pub const LAUNCHER: &str = "launcher";
/// Name of the volume mount that initializer containers must carry.
pub const INITIALIZER_VOLUME: &str = "initializer";

/// Runtime label naming the ML framework (`torch`, `deepspeed`, `mlx`, `jax`, `xgboost`, `torchtune`, `flux`).
pub const FRAMEWORK_LABEL: &str = "trainer.kubeflow.org/framework";
/// Runtime label that marks a runtime as deprecated (value [`SUPPORT_DEPRECATED`]).
pub const SUPPORT_LABEL: &str = "trainer.kubeflow.org/support";
/// Value of [`SUPPORT_LABEL`] for a deprecated runtime.
pub const SUPPORT_DEPRECATED: &str = "deprecated";
/// Runtime label that opts a runtime out of the validating webhooks (value `disabled`).
pub const WEBHOOK_VALIDATION_LABEL: &str = "trainer.kubeflow.org/webhook-validation";

/// Port that torch, JAX and XGBoost ranks meet on.
pub const TRAINER_PORT: i32 = 29500;

/// The most hosts an MPI hostfile may list (ours: upstream has no limit, and a larger TrainJob would make a
/// hostfile of megabytes). `validate`, the webhook and the renderer refuse more at `spec.trainer.numNodes`.
pub const MAX_MPI_HOSTS: u64 = 100_000;

/// Environment variables the torch plugin owns; users may not set them.
pub const TORCH_RESERVED_ENV: [&str; 5] = [
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
];
/// Environment variables the torch plugin also owns when the runtime has an `elasticPolicy` (the c10d
/// rendezvous); users may not set them on such a TrainJob. Without an elastic policy they stay the user's,
/// as upstream has them.
pub const TORCH_ELASTIC_RESERVED_ENV: [&str; 3] =
    ["PET_RDZV_BACKEND", "PET_RDZV_ENDPOINT", "PET_RDZV_ID"];
/// JobSet annotation of an elastic TrainJob: the fewest nodes it runs with (`elasticPolicy.minNodes`).
pub const ELASTIC_MIN_NODES_ANNOTATION: &str = "kubetrain.dev/elastic-min-nodes";
/// JobSet annotation of an elastic TrainJob: the most nodes it scales to (`elasticPolicy.maxNodes`).
pub const ELASTIC_MAX_NODES_ANNOTATION: &str = "kubetrain.dev/elastic-max-nodes";
/// JobSet annotation of an elastic TrainJob: the replicated job whose parallelism is its node count.
pub const ELASTIC_REPLICATED_JOB_ANNOTATION: &str = "kubetrain.dev/elastic-replicated-job";
/// Environment variables the MPI plugin owns; users may not set them.
pub const MPI_RESERVED_ENV: [&str; 4] = [
    "OMPI_MCA_orte_default_hostfile",
    "OMPI_MCA_plm_rsh_args",
    "OMPI_MCA_orte_keep_fqdn_hostnames",
    "OMPI_MCA_orte_set_default_slots",
];
/// Environment variables the XGBoost plugin owns; users may not set them.
pub const XGBOOST_RESERVED_ENV: [&str; 4] = [
    "DMLC_TRACKER_URI",
    "DMLC_TRACKER_PORT",
    "DMLC_TASK_ID",
    "DMLC_NUM_WORKER",
];

/// Template annotation that names the Volcano queue of a TrainJob's PodGroup.
pub const VOLCANO_QUEUE_ANNOTATION: &str = "scheduling.volcano.sh/queue-name";
/// Init container name that the Flux plugin reserves.
pub const FLUX_INSTALLER: &str = "flux-installer";
/// Priority classes that are always present on a cluster.
pub const SYSTEM_PRIORITY_CLASSES: [&str; 2] = ["system-cluster-critical", "system-node-critical"];

/// Link to upstream's runtime deprecation policy, quoted in deprecation warnings.
pub const DEPRECATION_POLICY_URL: &str = "https://trainer.kubeflow.org/en/latest/operator-guides/runtime.html#runtime-deprecation-policy";

/// `status.trainerStatus.metrics` name (kubetrain's, not upstream's): the step the trainer is at (an integer,
/// the steps done). With [`METRIC_CHECKPOINT_STEP`] it tells how much work a restart loses.
pub const METRIC_STEP: &str = "kubetrain.dev/step";
/// `status.trainerStatus.metrics` name (kubetrain's): the step of the last checkpoint the trainer wrote (an
/// integer; a restarted trainer resumes from it).
pub const METRIC_CHECKPOINT_STEP: &str = "kubetrain.dev/checkpoint-step";
/// `status.trainerStatus.metrics` name (kubetrain's): when that checkpoint was written, RFC 3339 in UTC
/// (`2026-01-02T03:04:05Z`).
pub const METRIC_CHECKPOINT_TIME: &str = "kubetrain.dev/checkpoint-time";
/// `status.trainerStatus.metrics` name (kubetrain's): the step a restarted trainer loaded its checkpoint at
/// (an integer; reported only after a restart).
pub const METRIC_RESUMED_FROM_STEP: &str = "kubetrain.dev/resumed-from-step";
