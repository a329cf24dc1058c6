//! Table tests per kind over our own fixtures (tests/fixtures): what each v1 job becomes, what the report says,
//! and that every TrainJob and runtime validates and renders.

mod support;

use k8s_openapi::api::core::v1::EnvVar;
use kubetrain_api::Document;
use kubetrain_migrate::{MigrateOptions, Migration, Outcome, RuntimeKind, migrate_values};
use support::{env_value, fixture, rendered, validated};

fn migrate(name: &str, options: &MigrateOptions) -> Migration {
    let migration = migrate_values(&fixture(name), options).expect("the fixture migrates");
    validated(&migration);
    migration
}

fn env(migration: &Migration, job: usize) -> &[EnvVar] {
    &migration.jobs[job]
        .trainjob
        .spec
        .trainer
        .as_ref()
        .unwrap()
        .env
}

fn outcome(migration: &Migration, job: usize, path: &str) -> Option<Outcome> {
    migration.jobs[job]
        .report
        .entries
        .iter()
        .find(|e| e.path == path)
        .map(|e| e.outcome)
}

#[test]
fn pytorch_with_a_plain_template_uses_the_builtin_runtime() {
    let m = migrate("pytorch-plain.yaml", &MigrateOptions::default());
    assert!(m.runtimes.is_empty());
    let job = &m.jobs[0].trainjob;
    assert_eq!(job.spec.runtime_ref.name, "torch-distributed");
    assert_eq!(job.metadata.namespace.as_deref(), Some("team-a"));
    let trainer = job.spec.trainer.as_ref().unwrap();
    assert_eq!(trainer.num_nodes, Some(3));
    assert_eq!(trainer.num_proc_per_node, Some(2));
    assert_eq!(trainer.image.as_deref(), Some("example.com/mnist:1"));
    assert_eq!(
        trainer.command.as_deref(),
        Some(&["python".to_owned(), "/opt/mnist.py".to_owned()][..])
    );
    assert_eq!(job.spec.suspend, Some(true));
    assert_eq!(job.spec.active_deadline_seconds, Some(3600));
    assert_eq!(
        job.metadata.labels.as_ref().unwrap()["kueue.x-k8s.io/queue-name"],
        "team-a-queue"
    );
    // The world v1 gave each process: WORLD_SIZE = nodes x processes, the master at node 0.
    assert_eq!(env_value(env(&m, 0), "WORLD_SIZE"), Some("6"));
    assert_eq!(
        env_value(env(&m, 0), "MASTER_ADDR"),
        Some("mnist-node-0-0.mnist")
    );
    assert_eq!(env_value(env(&m, 0), "MASTER_PORT"), Some("23456"));
    assert_eq!(env_value(env(&m, 0), "DATA"), Some("/data"));
    assert_eq!(outcome(&m, 0, "(v1 operator env)"), Some(Outcome::Changed));
    assert!(!m.needs_person(), "{}", m.jobs[0].report.to_text());
    // The rendered pods see the rank as the completion index, as v1's RANK.
    let jobset = rendered(&m, 0);
    let text = serde_json::to_string(&jobset).unwrap();
    assert!(text.contains("job-completion-index"), "{text}");
}

#[test]
fn pytorch_jobs_of_one_shape_share_a_generated_runtime() {
    let m = migrate("pytorch-full.yaml", &MigrateOptions::default());
    assert_eq!(m.runtimes.len(), 1, "one shape, one runtime");
    let Document::ClusterTrainingRuntime(runtime) = &m.runtimes[0] else {
        panic!("a ClusterTrainingRuntime by default")
    };
    assert!(
        runtime
            .metadata
            .name
            .as_deref()
            .unwrap()
            .starts_with("pytorchjob-")
    );
    for job in &m.jobs {
        assert_eq!(
            job.trainjob.spec.runtime_ref.name,
            runtime.metadata.name.clone().unwrap()
        );
    }
    let rjob = &runtime.spec.template.spec.replicated_jobs[0];
    let job_spec = rjob.template.spec.as_ref().unwrap();
    let pod = job_spec.template.spec.as_ref().unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some("trainer"));
    assert_eq!(pod.node_selector.as_ref().unwrap()["gpu"], "a100");
    assert_eq!(pod.tolerations.as_ref().unwrap().len(), 1);
    assert_eq!(pod.volumes.as_ref().unwrap().len(), 2);
    assert_eq!(pod.init_containers.as_ref().unwrap()[0].name, "fetch");
    assert_eq!(pod.containers[1].name, "metrics");
    assert_eq!(pod.containers[0].name, "node");
    assert_eq!(pod.priority_class_name.as_deref(), Some("high"));
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    assert_eq!(job_spec.backoff_limit, Some(3));
    let failure = job_spec.pod_failure_policy.as_ref().unwrap();
    assert_eq!(
        failure.rules[0]
            .on_exit_codes
            .as_ref()
            .unwrap()
            .values
            .len(),
        127
    );
    // The image, command and resources are the TrainJob's, so the two jobs differ there only.
    assert_eq!(
        m.jobs[1].trainjob.spec.trainer.as_ref().unwrap().num_nodes,
        Some(4)
    );
    assert_eq!(
        m.jobs[1]
            .trainjob
            .spec
            .trainer
            .as_ref()
            .unwrap()
            .image
            .as_deref(),
        Some("example.com/bert-large:2")
    );
    // PET_NNODES belongs to the torch plugin; the user's secret env is kept.
    assert_eq!(env_value(env(&m, 0), "PET_NNODES"), None);
    assert!(
        env(&m, 0)
            .iter()
            .any(|e| e.name == "TOKEN" && e.value_from.is_some())
    );
    let labels = m.jobs[0].trainjob.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["kueue.x-k8s.io/queue-name"], "research");
    for (path, want) in [
        ("spec.elasticPolicy", Outcome::Changed),
        ("spec.runPolicy.cleanPodPolicy", Outcome::NotCarried),
        ("spec.runPolicy.ttlSecondsAfterFinished", Outcome::Exact),
        ("spec.runPolicy.backoffLimit", Outcome::Changed),
        ("spec.runPolicy.schedulingPolicy.queue", Outcome::Changed),
        (
            "spec.runPolicy.schedulingPolicy.priorityClass",
            Outcome::Changed,
        ),
        (
            "spec.runPolicy.schedulingPolicy.minAvailable/minResources",
            Outcome::NotCarried,
        ),
        (
            "spec.pytorchReplicaSpecs.Worker.restartPolicy",
            Outcome::Changed,
        ),
        (
            "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].name",
            Outcome::Changed,
        ),
    ] {
        assert_eq!(
            outcome(&m, 0, path),
            Some(want),
            "{path}:\n{}",
            m.jobs[0].report.to_text()
        );
    }
    assert!(m.needs_person());
}

#[test]
fn pytorch_elastic_jobs_of_one_shape_share_an_elastic_runtime() {
    let m = migrate("pytorch-full.yaml", &MigrateOptions::default());
    let Document::ClusterTrainingRuntime(runtime) = &m.runtimes[0] else {
        panic!("a ClusterTrainingRuntime by default")
    };
    // Elastic without a Master: v1 set no MASTER_*, WORLD_SIZE or RANK, and neither does the TrainJob.
    for name in ["MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"] {
        assert!(!env(&m, 0).iter().any(|e| e.name == name), "{name}");
    }
    // The runtime is elastic with v1's bounds; both jobs start with their v1 pod count.
    let Some(kubetrain_api::MLPolicySource::Torch(torch)) = runtime
        .spec
        .ml_policy
        .as_ref()
        .and_then(|p| p.source.as_ref())
    else {
        panic!("a torch policy")
    };
    let elastic = torch.elastic_policy.as_ref().expect("an elastic policy");
    assert_eq!((elastic.min_nodes, elastic.max_nodes), (1, 4));
    let rendered_env = rendered_node_env(&m, 0);
    assert_eq!(env_value(&rendered_env, "PET_NNODES"), Some("1:4"));
    assert_eq!(env_value(&rendered_env, "PET_RDZV_BACKEND"), Some("c10d"));
    assert_eq!(
        env_value(&rendered_env, "PET_RDZV_ENDPOINT"),
        Some("bert-node-0-0.bert:29500")
    );
    assert!(!rendered_env.iter().any(|e| e.name == "PET_NODE_RANK"));
    assert_eq!(
        m.jobs[1].trainjob.spec.trainer.as_ref().unwrap().num_nodes,
        Some(4)
    );
}

#[test]
fn training_runtimes_live_in_each_jobs_namespace() {
    let options = MigrateOptions {
        runtime_kind: RuntimeKind::TrainingRuntime,
        queue: Some("batch".to_owned()),
    };
    let m = migrate("pytorch-full.yaml", &options);
    let Document::TrainingRuntime(runtime) = &m.runtimes[0] else {
        panic!("a TrainingRuntime")
    };
    assert_eq!(runtime.metadata.namespace.as_deref(), Some("team-b"));
    let job = &m.jobs[0].trainjob;
    assert_eq!(
        job.spec.runtime_ref.kind.as_deref(),
        Some("TrainingRuntime")
    );
    assert_eq!(
        job.metadata.labels.as_ref().unwrap()["kueue.x-k8s.io/queue-name"],
        "batch"
    );
    assert_eq!(
        outcome(&m, 0, "metadata.labels[kueue.x-k8s.io/queue-name]"),
        Some(Outcome::Changed),
        "--queue replaced the job's own queue"
    );
}

#[test]
fn tfjob_roles_become_replicated_jobs_with_v1s_tf_config() {
    let m = migrate("tfjob.yaml", &MigrateOptions::default());
    let Document::ClusterTrainingRuntime(runtime) = &m.runtimes[0] else {
        panic!()
    };
    let names: Vec<&str> = runtime
        .spec
        .template
        .spec
        .replicated_jobs
        .iter()
        .map(|j| j.name.as_str())
        .collect();
    assert_eq!(names, ["node", "chief", "ps"]);
    assert!(
        runtime.spec.ml_policy.as_ref().unwrap().source.is_none(),
        "PlainML"
    );
    assert_eq!(
        m.jobs[0].trainjob.spec.trainer.as_ref().unwrap().num_nodes,
        Some(2)
    );
    assert_eq!(outcome(&m, 0, "(v1 operator env)"), Some(Outcome::Changed));
    // Every pod gets v1's TF_CONFIG: the cluster spec with the JobSet's DNS names and v1's port, its own
    // task type, and the index the kubelet expands from the Job completion index.
    let cluster = serde_json::json!({
        "chief": ["dist-mnist-chief-0-0.dist-mnist:2222"],
        "ps": ["dist-mnist-ps-0-0.dist-mnist:2222"],
        "worker": ["dist-mnist-node-0-0.dist-mnist:2222", "dist-mnist-node-0-1.dist-mnist:2222"],
    });
    let tf_config = |vars: &[EnvVar], index: &str| -> serde_json::Value {
        let at = |name: &str| vars.iter().position(|e| e.name == name).unwrap();
        assert!(
            at("KUBETRAIN_TF_TASK_INDEX") < at("TF_CONFIG"),
            "defined before it is expanded"
        );
        let value = vars[at("TF_CONFIG")].value.as_deref().unwrap();
        serde_json::from_str(&value.replace("$(KUBETRAIN_TF_TASK_INDEX)", index)).unwrap()
    };
    let expected = |task: &str, index: u32| serde_json::json!({"cluster": cluster, "task": {"type": task, "index": index}, "environment": "cloud"});
    assert_eq!(tf_config(env(&m, 0), "1"), expected("worker", 1));
    for (at, task) in [(1, "chief"), (2, "ps")] {
        let job = &runtime.spec.template.spec.replicated_jobs[at].template;
        let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        let vars = pod.containers[0].env.as_deref().unwrap();
        assert_eq!(tf_config(vars, "0"), expected(task, 0));
    }
    // AllWorkers: the JobSet succeeds when the workers do, not when the PS (which never ends) does.
    assert_eq!(outcome(&m, 0, "spec.successPolicy"), Some(Outcome::Exact));
    let success = runtime.spec.template.spec.success_policy.as_ref().unwrap();
    assert_eq!(success.target_replicated_jobs, ["node"]);
}

#[test]
fn mpijob_becomes_an_mpi_runtime_with_the_launcher_as_trainer() {
    let m = migrate("mpijob.yaml", &MigrateOptions::default());
    let Document::ClusterTrainingRuntime(runtime) = &m.runtimes[0] else {
        panic!()
    };
    let Some(kubetrain_api::MLPolicySource::Mpi(mpi)) = runtime
        .spec
        .ml_policy
        .as_ref()
        .and_then(|p| p.source.clone())
    else {
        panic!("an MPI policy")
    };
    assert_eq!(mpi.num_proc_per_node, Some(2));
    assert_eq!(mpi.run_launcher_as_node, Some(false));
    // The launcher starts when the workers are ready, and its success ends the job, as in v1.
    let launcher = &runtime.spec.template.spec.replicated_jobs[1];
    assert_eq!(
        (launcher.name.as_str(), launcher.depends_on[0].name.as_str()),
        ("launcher", "node")
    );
    let success = runtime.spec.template.spec.success_policy.as_ref().unwrap();
    assert_eq!(success.target_replicated_jobs, ["launcher"]);
    let trainer = m.jobs[0].trainjob.spec.trainer.as_ref().unwrap();
    assert_eq!(trainer.num_nodes, Some(2));
    assert_eq!(trainer.command.as_ref().unwrap()[0], "mpirun");
    assert_eq!(
        outcome(&m, 0, "(v1 operator launch)"),
        Some(Outcome::NotCarried)
    );
    assert_eq!(
        outcome(&m, 0, "spec.runPolicy.cleanPodPolicy"),
        Some(Outcome::NotCarried)
    );
}

#[test]
fn mpijob_report_names_what_the_ssh_launch_does_not_give_the_ranks() {
    let note = |m: &Migration, path: &str| {
        m.jobs[0]
            .report
            .entries
            .iter()
            .find(|e| e.path == path)
            .map(|e| (e.outcome, e.note.clone()))
    };
    // The fixture's worker has no command: v1 ran `sleep 365d` there; its launcher runs mpirun.
    let m = migrate("mpijob.yaml", &MigrateOptions::default());
    let (outcome, launch) = note(&m, "(v1 operator launch)").unwrap();
    assert_eq!(outcome, Outcome::NotCarried);
    for says in ["sleep 365d", "sshd", "SSH session's env", "mpirun -x"] {
        assert!(launch.contains(says), "{says}: {launch}");
    }
    assert_eq!(note(&m, "(v1 discover_hosts.sh)"), None);

    // Horovod elastic: the launcher reads v1's discover_hosts.sh, which V2 does not write; the worker runs sshd.
    let mut job = fixture("mpijob.yaml").remove(0);
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"] =
        serde_json::json!([
            "horovodrun",
            "-np",
            "2",
            "--host-discovery-script",
            "/etc/mpi/discover_hosts.sh",
            "python",
            "t.py"
        ]);
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"] =
        serde_json::json!(["/usr/sbin/sshd", "-De"]);
    let m = migrate_values(&[job], &MigrateOptions::default()).unwrap();
    validated(&m);
    let (outcome, discover) = note(&m, "(v1 discover_hosts.sh)").unwrap();
    assert_eq!(outcome, Outcome::NotCarried);
    assert!(discover.contains("host:slots"), "{discover}");
    let (_, launch) = note(&m, "(v1 operator launch)").unwrap();
    assert!(!launch.contains("sleep 365d"), "{launch}");
}

#[test]
fn xgboostjob_keeps_never_in_a_generated_runtime_and_the_rabit_env() {
    let m = migrate("xgboostjob.yaml", &MigrateOptions::default());
    assert_eq!(
        m.runtimes.len(),
        1,
        "restartPolicy Never is not the built-in's OnFailure"
    );
    assert_eq!(env_value(env(&m, 0), "MASTER_PORT"), Some("9991"));
    assert_eq!(env_value(env(&m, 0), "WORLD_SIZE"), Some("3"));
    assert_eq!(
        env_value(env(&m, 0), "WORKER_ADDRS"),
        Some("iris-node-0-1.iris,iris-node-0-2.iris")
    );
    assert!(!m.needs_person(), "{}", m.jobs[0].report.to_text());
}

#[test]
fn paddlejob_is_plain_ml_with_paddle_env() {
    let m = migrate("paddlejob.yaml", &MigrateOptions::default());
    assert_eq!(m.runtimes.len(), 1);
    assert_eq!(
        env_value(env(&m, 0), "PADDLE_MASTER"),
        Some("resnet-node-0-0.resnet:36543")
    );
    assert_eq!(env_value(env(&m, 0), "PADDLE_NNODES"), Some("2"));
    assert!(!m.needs_person(), "{}", m.jobs[0].report.to_text());
}

#[test]
fn jaxjob_on_failure_uses_the_builtin_runtime() {
    let m = migrate("jaxjob.yaml", &MigrateOptions::default());
    assert!(m.runtimes.is_empty());
    assert_eq!(m.jobs[0].trainjob.spec.runtime_ref.name, "jax-distributed");
    assert_eq!(
        env_value(env(&m, 0), "COORDINATOR_ADDRESS"),
        Some("jax-mnist-node-0-0.jax-mnist")
    );
    assert_eq!(env_value(env(&m, 0), "NUM_PROCESSES"), Some("2"));
    assert!(!m.needs_person());
}

#[test]
fn bad_input_is_an_error_with_the_field_path() {
    let cases = [
        (
            serde_json::json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "a"},
                "spec": {"pytorchReplicaSpecs": {"Chief": {"template": {}}}}}),
            "spec.pytorchReplicaSpecs.Chief",
        ),
        (
            serde_json::json!({"apiVersion": "kubeflow.org/v1", "kind": "JAXJob", "metadata": {"name": "a"},
                "spec": {"jaxReplicaSpecs": {"Worker": {"replicas": -1}}}}),
            "spec.jaxReplicaSpecs.Worker.replicas",
        ),
        (
            serde_json::json!({"apiVersion": "kubeflow.org/v1", "kind": "XGBoostJob", "metadata": {"name": "a"},
                "spec": {"xgbReplicaSpecs": {"Worker": {"template": {"spec": {"containers": []}}}}}}),
            "spec.xgbReplicaSpecs.Worker.template.spec.containers",
        ),
        (
            serde_json::json!({"apiVersion": "kubeflow.org/v1", "kind": "PaddleJob", "metadata": {},
                "spec": {"paddleReplicaSpecs": {}}}),
            "metadata.name",
        ),
        (
            serde_json::json!({"apiVersion": "kubeflow.org/v1", "kind": "MPIJob", "metadata": {"name": "a"},
                "spec": {"mpiReplicaSpecs": {"Worker": {"template": {"spec": {"containers": [{"name": "mpi", "image": "i"}]}}}}}}),
            "spec.mpiReplicaSpecs",
        ),
        (
            serde_json::json!({"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "a"},
                "spec": {"tfReplicaSpecs": {"Worker": {"template": {"spec": {"containers": [{"name": "tensorflow"}]}}}}}}),
            "spec.tfReplicaSpecs.Worker.template.spec.containers[0].image",
        ),
        (
            serde_json::json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "a"},
                "spec": {"pytorchReplicaSpecs": {"Worker": {"restartPolicy": "Sometimes"}}}}),
            "spec.pytorchReplicaSpecs.Worker.restartPolicy",
        ),
        (
            serde_json::json!({"apiVersion": "kubeflow.org/v1", "kind": "JAXJob", "metadata": {"name": "my.job"},
                "spec": {"jaxReplicaSpecs": {"Worker": {"template": {"spec": {"containers": [{"name": "jax", "image": "i"}]}}}}}}),
            "metadata.name",
        ),
        (
            serde_json::json!({"apiVersion": "kubeflow.org/v1", "kind": "JAXJob", "metadata": {"name": "a"},
                "spec": {"runPolicy": {"schedulingPolicy": {"queue": "team a/gpu"}},
                    "jaxReplicaSpecs": {"Worker": {"template": {"spec": {"containers": [{"name": "jax", "image": "i"}]}}}}}}),
            "spec.runPolicy.schedulingPolicy.queue",
        ),
        (
            serde_json::json!({"apiVersion": "kubeflow.org/v1", "kind": "XGBoostJob", "metadata": {"name": "a"},
                "spec": {"xgbReplicaSpecs": {"Worker": {"replicas": 2147483647,
                    "template": {"spec": {"containers": [{"name": "xgboost", "image": "i"}]}}}}}}),
            "spec.xgbReplicaSpecs",
        ),
    ];
    for (value, path) in cases {
        let error = migrate_values(&[value], &MigrateOptions::default()).unwrap_err();
        assert_eq!(error.path, path, "{error}");
    }
}

#[test]
fn unknown_fields_and_differing_templates_need_a_person() {
    let job = serde_json::json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "a", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u"}]},
        "status": {"conditions": []},
        "spec": {
            "runPolicy": {"managedBy": "kueue.x-k8s.io/multikueue"},
            "pytorchReplicaSpecs": {
                "Master": {"template": {"spec": {"containers": [{"name": "pytorch", "image": "i:1"}]}}},
                "Worker": {"replicas": 2, "template": {"spec": {"containers": [{"name": "pytorch", "image": "i:2"}]}}},
            },
        },
    });
    let m = migrate_values(&[job], &MigrateOptions::default()).unwrap();
    validated(&m);
    for (path, want) in [
        ("spec.runPolicy.managedBy", Outcome::NotCarried),
        (
            "spec.pytorchReplicaSpecs.Worker.template",
            Outcome::NotCarried,
        ),
        ("metadata.ownerReferences", Outcome::NotCarried),
        ("status", Outcome::Changed),
    ] {
        assert_eq!(
            outcome(&m, 0, path),
            Some(want),
            "{path}:\n{}",
            m.jobs[0].report.to_text()
        );
    }
    // Every node runs the Master's template.
    assert_eq!(
        m.jobs[0]
            .trainjob
            .spec
            .trainer
            .as_ref()
            .unwrap()
            .image
            .as_deref(),
        Some("i:1")
    );
    assert!(m.needs_person());
}

#[test]
fn pytorch_without_nproc_per_node_keeps_v1s_default_auto() {
    // v1.8.1 defaults nprocPerNode to "auto": torchrun saw PET_NPROC_PER_NODE=auto (found by
    // e2e/migrate-compare.sh against the real v1 operator). V2's auto gives torchrun the same with GPUs.
    let mut job = fixture("pytorch-plain.yaml").remove(0);
    job["spec"].as_object_mut().unwrap().remove("nprocPerNode");
    let m = migrate_values(&[job], &MigrateOptions::default()).unwrap();
    validated(&m);
    let trainer = m.jobs[0].trainjob.spec.trainer.as_ref().unwrap();
    assert_eq!(trainer.num_proc_per_node, None);
    assert_eq!(
        outcome(&m, 0, "spec.nprocPerNode"),
        Some(Outcome::Changed),
        "the report says what became of the unset field"
    );
    // v1 still counted one process per node in WORLD_SIZE.
    let world = env_value(env(&m, 0), "WORLD_SIZE").map(str::to_owned);
    let nodes = trainer.num_nodes.unwrap();
    assert_eq!(world, Some(nodes.to_string()));
}

/// The env of the rendered node container of job `index`.
fn rendered_node_env(migration: &Migration, index: usize) -> Vec<EnvVar> {
    let jobset = rendered(migration, index);
    let node = jobset
        .spec
        .replicated_jobs
        .iter()
        .find(|r| r.name == "node")
        .expect("a node job");
    let pod = node
        .template
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("a pod");
    let container = pod
        .containers
        .iter()
        .find(|c| c.name == "node")
        .expect("node");
    container.env.clone().unwrap_or_default()
}

fn elastic_job(policy: serde_json::Value, workers: i32) -> serde_json::Value {
    serde_json::json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "echo", "namespace": "v2"},
        "spec": {"elasticPolicy": policy, "pytorchReplicaSpecs": {"Worker": {"replicas": workers,
            "template": {"spec": {"containers": [{"name": "pytorch", "image": "example.com/echo:1",
                "command": ["python", "-m", "torch.distributed.run", "./echo.py"],
                "env": [{"name": "PET_RDZV_ID", "value": "mine"}]}]}}}}}})
}

#[test]
fn pytorch_elastic_policy_becomes_an_elastic_runtime_field_by_field() {
    // v1's echo example, plus every other field of the policy.
    let policy = serde_json::json!({"minReplicas": 1, "maxReplicas": 2, "rdzvBackend": "c10d", "maxRestarts": 100,
        "rdzvConf": [{"key": "join_timeout", "value": "600"}, {"key": "read_timeout", "value": "60"}],
        "rdzvId": "echo-1", "rdzvPort": 29400, "standalone": true, "nProcPerNode": 2,
        "metrics": [{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 80}}}]});
    let m = migrate_values(&[elastic_job(policy, 2)], &MigrateOptions::default()).unwrap();
    validated(&m);
    let trainer = m.jobs[0].trainjob.spec.trainer.as_ref().unwrap();
    assert_eq!(trainer.num_nodes, Some(2));
    assert_eq!(
        trainer.num_proc_per_node,
        Some(2),
        "the deprecated nProcPerNode"
    );
    assert_eq!(env_value(&trainer.env, "PET_MAX_RESTARTS"), Some("100"));
    assert_eq!(
        env_value(&trainer.env, "PET_RDZV_CONF"),
        Some("join_timeout=600,read_timeout=60")
    );
    // The rendezvous id is the torch policy's on an elastic runtime: the user's is dropped.
    assert_eq!(env_value(&trainer.env, "PET_RDZV_ID"), None);
    let rendered_env = rendered_node_env(&m, 0);
    assert_eq!(env_value(&rendered_env, "PET_NNODES"), Some("1:2"));
    assert_eq!(env_value(&rendered_env, "PET_MAX_RESTARTS"), Some("100"));
    assert_eq!(env_value(&rendered_env, "PET_NPROC_PER_NODE"), Some("2"));
    for (path, want) in [
        ("spec.elasticPolicy", Outcome::Changed),
        ("spec.elasticPolicy.minReplicas", Outcome::Exact),
        ("spec.elasticPolicy.maxReplicas", Outcome::Exact),
        ("spec.elasticPolicy.rdzvBackend", Outcome::Exact),
        ("spec.elasticPolicy.maxRestarts", Outcome::Exact),
        ("spec.elasticPolicy.rdzvConf", Outcome::Exact),
        ("spec.elasticPolicy.rdzvId", Outcome::Changed),
        ("spec.elasticPolicy.rdzvPort", Outcome::Changed),
        ("spec.elasticPolicy.standalone", Outcome::NotCarried),
        ("spec.elasticPolicy.nProcPerNode", Outcome::Changed),
        ("spec.elasticPolicy.metrics", Outcome::Changed),
        (
            "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].env[PET_RDZV_ID]",
            Outcome::Changed,
        ),
    ] {
        assert_eq!(
            outcome(&m, 0, path),
            Some(want),
            "{path}:\n{}",
            m.jobs[0].report.to_text()
        );
    }
    let Document::ClusterTrainingRuntime(runtime) = &m.runtimes[0] else {
        panic!("a generated runtime")
    };
    let Some(kubetrain_api::MLPolicySource::Torch(torch)) = runtime
        .spec
        .ml_policy
        .as_ref()
        .and_then(|p| p.source.as_ref())
    else {
        panic!("a torch policy")
    };
    assert_eq!(torch.elastic_policy.as_ref().unwrap().metrics.len(), 1);
    // With metrics the job starts, and stays while they cannot be read, at v1's replicas; without, it follows
    // the nodes, where v1 (no HPA) kept its replicas: the report says which.
    let note = |m: &Migration| {
        let entry = m.jobs[0].report.entries.iter();
        entry
            .filter(|e| e.path == "spec.elasticPolicy")
            .map(|e| e.note.clone())
            .collect::<String>()
    };
    assert!(
        note(&m).contains("metrics that cannot be read keep the size"),
        "{}",
        note(&m)
    );
    let m = migrate_values(
        &[elastic_job(
            serde_json::json!({"minReplicas": 1, "maxReplicas": 2}),
            1,
        )],
        &MigrateOptions::default(),
    )
    .unwrap();
    assert!(note(&m).contains("kept its replicas"), "{}", note(&m));
}

#[test]
fn pytorch_elastic_defaults_bounds_and_sizes_as_v1() {
    // Neither bound: v1 takes the Worker replicas for both.
    let m = migrate_values(
        &[elastic_job(serde_json::json!({}), 3)],
        &MigrateOptions::default(),
    )
    .unwrap();
    validated(&m);
    assert_eq!(
        env_value(&rendered_node_env(&m, 0), "PET_NNODES"),
        Some("3:3")
    );
    assert_eq!(
        outcome(&m, 0, "spec.elasticPolicy.maxReplicas"),
        Some(Outcome::Changed)
    );
    // Within the bounds the TrainJob starts with v1's Worker replicas, as v1 did (elastic/imagenet: 2 in
    // [1, 3]), and the rendered node job has that many pods.
    let m = migrate_values(
        &[elastic_job(
            serde_json::json!({"minReplicas": 1, "maxReplicas": 3}),
            2,
        )],
        &MigrateOptions::default(),
    )
    .unwrap();
    validated(&m);
    let trainer = m.jobs[0].trainjob.spec.trainer.as_ref().unwrap();
    assert_eq!(trainer.num_nodes, Some(2));
    assert_eq!(outcome(&m, 0, "(v1 elastic size)"), None);
    let jobset = rendered(&m, 0);
    let node = jobset
        .spec
        .replicated_jobs
        .iter()
        .find(|r| r.name == "node");
    let parallelism = node.and_then(|r| r.template.spec.as_ref()?.parallelism);
    assert_eq!(parallelism, Some(2));
    // One bound: the other takes its value; 5 pods outside [2, 2] start as 2.
    let m = migrate_values(
        &[elastic_job(serde_json::json!({"minReplicas": 2}), 5)],
        &MigrateOptions::default(),
    )
    .unwrap();
    validated(&m);
    let trainer = m.jobs[0].trainjob.spec.trainer.as_ref().unwrap();
    assert_eq!(trainer.num_nodes, Some(2));
    assert_eq!(outcome(&m, 0, "(v1 elastic size)"), Some(Outcome::Changed));
    // etcd is not V2's rendezvous: reported, and the job meets at node 0's c10d store.
    let m = migrate_values(
        &[elastic_job(
            serde_json::json!({"minReplicas": 1, "maxReplicas": 2, "rdzvBackend": "etcd", "rdzvHost": "etcd.infra"}),
            2,
        )],
        &MigrateOptions::default(),
    )
    .unwrap();
    validated(&m);
    assert_eq!(
        outcome(&m, 0, "spec.elasticPolicy.rdzvBackend"),
        Some(Outcome::NotCarried)
    );
    assert!(m.needs_person());
    // Bounds torchrun cannot take are bad input.
    for (policy, path) in [
        (
            serde_json::json!({"minReplicas": 0, "maxReplicas": 2}),
            "spec.elasticPolicy.minReplicas",
        ),
        (
            serde_json::json!({"minReplicas": 3, "maxReplicas": 2}),
            "spec.elasticPolicy.maxReplicas",
        ),
    ] {
        let error =
            migrate_values(&[elastic_job(policy, 2)], &MigrateOptions::default()).unwrap_err();
        assert_eq!(error.path, path, "{error}");
    }
}

fn torch_job(
    command: &[&str],
    args: &[&str],
    nproc: Option<&str>,
    gpus: bool,
) -> serde_json::Value {
    let mut container =
        serde_json::json!({"name": "pytorch", "image": "example.com/t:1", "command": command});
    if !args.is_empty() {
        container["args"] = serde_json::json!(args);
    }
    if gpus {
        container["resources"] = serde_json::json!({"limits": {"nvidia.com/gpu": "2"}});
    }
    let mut job = serde_json::json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "t"},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2,
            "template": {"spec": {"containers": [container]}}}}}});
    if let Some(n) = nproc {
        job["spec"]["nprocPerNode"] = serde_json::json!(n);
    }
    job
}

/// A torchrun case: command, args, v1's nprocPerNode, GPUs, and the command and args expected (None: as given).
type NprocCase = (
    &'static [&'static str],
    &'static [&'static str],
    Option<&'static str>,
    bool,
    Option<(&'static [&'static str], &'static [&'static str])>,
);

#[test]
fn torchrun_gets_v1s_nproc_per_node_where_v2_would_differ() {
    let cases: [NprocCase; 7] = [
        // CPU pods, v1's default auto: V2 would give the CPU count, so torchrun gets the flag.
        (
            &["torchrun"],
            &["/opt/t.py"],
            None,
            false,
            Some((&["torchrun", "--nproc-per-node=auto"], &["/opt/t.py"])),
        ),
        (
            &["python"],
            &["-m", "torch.distributed.run", "t.py"],
            None,
            false,
            Some((
                &["python"],
                &[
                    "-m",
                    "torch.distributed.run",
                    "--nproc-per-node=auto",
                    "t.py",
                ],
            )),
        ),
        (
            &["/usr/bin/torchrun"],
            &[],
            Some("cpu"),
            true,
            Some((&["/usr/bin/torchrun", "--nproc-per-node=cpu"], &[])),
        ),
        // GPUs and auto: V2 gives auto too.
        (&["torchrun"], &["/opt/t.py"], None, true, None),
        // An integer is numProcPerNode; a flag already there wins over the env; a shell line is not parsed.
        (&["torchrun"], &["/opt/t.py"], Some("2"), false, None),
        (
            &["torchrun", "--nproc_per_node", "4"],
            &["t.py"],
            None,
            false,
            None,
        ),
        (&["bash", "-c", "torchrun t.py"], &[], None, false, None),
    ];
    for (command, args, nproc, gpus, want) in cases {
        let m = migrate_values(
            &[torch_job(command, args, nproc, gpus)],
            &MigrateOptions::default(),
        )
        .unwrap();
        validated(&m);
        let trainer = m.jobs[0].trainjob.spec.trainer.as_ref().unwrap();
        let own = |words: &[&str]| {
            (!words.is_empty()).then(|| words.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>())
        };
        let (want_command, want_args) = want.unwrap_or((command, args));
        assert_eq!(trainer.command, own(want_command), "{command:?} {args:?}");
        assert_eq!(trainer.args, own(want_args), "{command:?} {args:?}");
        let changed = ["command", "args"].iter().any(|f| {
            outcome(
                &m,
                0,
                &format!("spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].{f}"),
            ) == Some(Outcome::Changed)
        });
        assert_eq!(changed, want.is_some(), "{command:?} {args:?}");
    }
}
