//! Facts of trainer.md, checked on hand-written fixtures: one table per plugin, plus upstream's small
//! unit-test facts (trainer.md §5).

use crate::common::*;
use kubetrain_api::jobset::JobSet;
use kubetrain_jobset::{Observed, ObservedJobSet};

fn torch_job(trainer: &str) -> String {
    format!(
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: job, namespace: ns, uid: u-1}}\n\
         spec:\n  runtimeRef: {{name: torch-distributed}}\n  trainer: {trainer}\n"
    )
}

#[test]
fn torch_num_proc_per_node_follows_upstream_unit_tests() {
    // torch_test.go: cpu 4 -> "4", no resources -> "1", 2.5 -> "3", 0.7 -> "1", requests 3 no limit -> "3",
    // gpu 2 -> "auto", cpu 6 + gpu 2 -> "auto"; an explicit numProcPerNode wins.
    let cases = [
        ("{resourcesPerNode: {limits: {cpu: '4'}}}", "4"),
        ("{}", "1"),
        ("{resourcesPerNode: {limits: {cpu: '2.5'}}}", "3"),
        ("{resourcesPerNode: {limits: {cpu: '0.7'}}}", "1"),
        ("{resourcesPerNode: {requests: {cpu: '3'}}}", "3"),
        (
            "{resourcesPerNode: {requests: {nvidia.com/gpu: '2'}}}",
            "auto",
        ),
        (
            "{resourcesPerNode: {limits: {cpu: '6', nvidia.com/gpu: '2'}}}",
            "auto",
        ),
        (
            "{numProcPerNode: 3, resourcesPerNode: {limits: {nvidia.com/gpu: '8'}}}",
            "3",
        ),
    ];
    for (trainer, want) in cases {
        let r = render_yaml(&torch_job(trainer));
        let node = container(jobset(&r), "node", "node");
        assert_eq!(
            env_value(node, "PET_NPROC_PER_NODE").as_deref(),
            Some(want),
            "{trainer}"
        );
    }
}

#[test]
fn torch_env_counts_ports_and_order() {
    let r = render_yaml(&torch_job("{numNodes: 4, env: [{name: A, value: '1'}]}"));
    let js = jobset(&r);
    assert_eq!(parallelism(js, "node"), (Some(4), Some(4)));
    assert_eq!(rjob(js, "node").replicas, Some(1));
    let node = container(js, "node", "node");
    assert_eq!(
        env_names(node),
        [
            "A",
            "PET_NNODES",
            "PET_NPROC_PER_NODE",
            "PET_NODE_RANK",
            "PET_MASTER_ADDR",
            "PET_MASTER_PORT"
        ]
    );
    assert_eq!(env_value(node, "PET_NNODES").as_deref(), Some("4"));
    assert_eq!(
        env_value(node, "PET_MASTER_ADDR").as_deref(),
        Some("job-node-0-0.job")
    );
    assert_eq!(env_value(node, "PET_MASTER_PORT").as_deref(), Some("29500"));
    let rank = env(node, "PET_NODE_RANK")
        .unwrap()
        .value_from
        .as_ref()
        .unwrap()
        .field_ref
        .as_ref()
        .unwrap();
    assert_eq!(
        rank.field_path,
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    );
    let ports = node.ports.as_ref().unwrap();
    assert_eq!(
        (
            ports.len(),
            ports[0].container_port,
            ports[0].name.as_deref()
        ),
        (1, 29500, None)
    );
    // Owner reference, name, namespace and suspend.
    assert_eq!(js.metadata.name.as_deref(), Some("job"));
    assert_eq!(js.metadata.namespace.as_deref(), Some("ns"));
    let owner = &js.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (
            owner.api_version.as_str(),
            owner.kind.as_str(),
            owner.name.as_str(),
            owner.uid.as_str()
        ),
        ("trainer.kubeflow.org/v1alpha1", "TrainJob", "job", "u-1")
    );
    assert_eq!(
        (owner.controller, owner.block_owner_deletion),
        (Some(true), Some(true))
    );
    assert_eq!(js.spec.suspend, Some(false));
}

#[test]
fn trainjob_without_trainer_gets_no_pet_env() {
    let yaml = "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: job}\nspec: {runtimeRef: {name: torch-distributed}}\n";
    let r = render_yaml(yaml);
    assert!(container(jobset(&r), "node", "node").env.is_none());
}

#[test]
fn num_nodes_zero_is_accepted_and_renders_zero() {
    let r = render_yaml(&torch_job("{numNodes: 0}"));
    let js = jobset(&r);
    assert_eq!(parallelism(js, "node"), (Some(0), Some(0)));
    assert_eq!(
        env_value(container(js, "node", "node"), "PET_NNODES").as_deref(),
        Some("0")
    );
}

const UNNAMED_PORT_RUNTIME: &str = "
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: ports}
spec:
  mlPolicy: {numNodes: 2, torch: {}}
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
            spec:
              parallelism: 7
              template:
                spec:
                  containers:
                    - name: node
                      image: x
                      ports: [{containerPort: 8080}, {containerPort: 9090, name: metrics}]
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: job}
spec: {runtimeRef: {name: ports}, trainer: {}}
";

#[test]
fn unnamed_port_is_replaced_as_upstream_does_and_ml_policy_overrides_parallelism() {
    let r = render_yaml(UNNAMED_PORT_RUNTIME);
    let js = jobset(&r);
    let ports: Vec<(i32, Option<String>)> = container(js, "node", "node")
        .ports
        .iter()
        .flatten()
        .map(|p| (p.container_port, p.name.clone()))
        .collect();
    assert_eq!(ports, [(29500, None), (9090, Some("metrics".into()))]);
    // Runtime parallelism 7 is ignored: mlPolicy.numNodes (2) wins when mlPolicy exists.
    assert_eq!(parallelism(js, "node"), (Some(2), Some(2)));
}

fn mpi_job(runtime: &str, trainer: &str) -> String {
    format!(
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: job, namespace: ns}}\n\
         spec:\n  runtimeRef: {{name: {runtime}}}\n  trainer: {trainer}\n"
    )
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one scenario's facts from upstream's test, asserted in order"
)]
fn deepspeed_mpi_objects() {
    let r = render_yaml(&mpi_job(
        "deepspeed-distributed",
        "{numNodes: 3, env: [{name: X, value: 'y'}]}",
    ));
    let js = jobset(&r);
    // runLauncherAsNode: node job = numNodes - 1, launcher keeps 1.
    assert_eq!(parallelism(js, "node"), (Some(2), Some(2)));
    assert_eq!(parallelism(js, "launcher"), (Some(1), Some(1)));
    let launcher = container(js, "launcher", "node");
    assert_eq!(
        env_value(launcher, "OMPI_MCA_orte_default_hostfile").as_deref(),
        Some("/etc/mpi/hostfile")
    );
    assert_eq!(
        env_value(launcher, "OMPI_MCA_orte_keep_fqdn_hostnames").as_deref(),
        Some("true")
    );
    assert_eq!(
        env_value(launcher, "OMPI_MCA_orte_set_default_slots").as_deref(),
        Some("1")
    );
    assert_eq!(
        env_value(launcher, "OMPI_MCA_plm_rsh_args").as_deref(),
        Some("-o ConnectionAttempts=10")
    );
    // TrainJob env reaches the launcher (trainer ancestor) and, with runLauncherAsNode, the node job.
    assert_eq!(env_value(launcher, "X").as_deref(), Some("y"));
    assert_eq!(
        env_value(container(js, "node", "node"), "X").as_deref(),
        Some("y")
    );
    assert!(env_value(container(js, "node", "node"), "OMPI_MCA_plm_rsh_args").is_none());

    let mounts = |job: &str| -> Vec<(String, String)> {
        container(js, job, "node")
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| (m.name.clone(), m.mount_path.clone()))
            .collect()
    };
    assert_eq!(
        mounts("node"),
        [("mpi-ssh-auth".to_owned(), "/home/mpiuser/.ssh".to_owned())]
    );
    assert_eq!(
        mounts("launcher"),
        [
            ("mpi-ssh-auth".to_owned(), "/home/mpiuser/.ssh".to_owned()),
            ("mpi-hostfile".to_owned(), "/etc/mpi".to_owned())
        ]
    );
    let ssh = pod(js, "node")
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == "mpi-ssh-auth")
        .unwrap();
    let secret = ssh.secret.as_ref().unwrap();
    assert_eq!(secret.secret_name.as_deref(), Some("job-mpi-ssh-auth"));
    assert_eq!(secret.default_mode, Some(0o400));
    let items: Vec<(&str, &str, Option<i32>)> = secret
        .items
        .iter()
        .flatten()
        .map(|i| (i.key.as_str(), i.path.as_str(), i.mode))
        .collect();
    assert_eq!(
        items,
        [
            ("ssh-privatekey", "id_rsa", Some(0o640)),
            ("ssh-publickey", "id_rsa.pub", Some(0o644)),
            ("ssh-publickey", "authorized_keys", Some(0o644))
        ]
    );
    let hostfile_volume = pod(js, "launcher")
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == "mpi-hostfile")
        .unwrap();
    let cm = hostfile_volume.config_map.as_ref().unwrap();
    assert_eq!(cm.name, "job-mpi-hostfile");
    assert_eq!(cm.items.as_ref().unwrap()[0].mode, Some(0o444));

    // Companion objects: JobSet, then ConfigMap, then Secret (sorted by apiVersion, kind, name).
    let kinds: Vec<&str> = r.objects.iter().map(|o| o.kind()).collect();
    assert_eq!(kinds, ["JobSet", "ConfigMap", "Secret"]);
    let Some(kubetrain_jobset::Object::ConfigMap(hostfile)) =
        find(&r, "ConfigMap", "job-mpi-hostfile")
    else {
        panic!()
    };
    assert_eq!(
        hostfile.data.as_ref().unwrap()["hostfile"],
        "job-node-0-0.job slots=1\njob-node-0-1.job slots=1\njob-launcher-0-0.job slots=1\n"
    );
    let Some(kubetrain_jobset::Object::Secret(s)) = find(&r, "Secret", "job-mpi-ssh-auth") else {
        panic!()
    };
    assert_eq!(s.type_.as_deref(), Some("kubernetes.io/ssh-auth"));
    assert_eq!(s.immutable, Some(true));
    let data = s.data.as_ref().unwrap();
    assert!(
        String::from_utf8_lossy(&data["ssh-privatekey"].0)
            .starts_with("-----BEGIN EC PRIVATE KEY-----")
    );
    assert!(
        String::from_utf8_lossy(&data["ssh-publickey"].0).starts_with("ecdsa-sha2-nistp521 AAAA")
    );
}

#[test]
fn mpi_slots_follow_gpus_and_num_proc_per_node() {
    let slots = |trainer: &str| {
        let r = render_yaml(&mpi_job("mlx-distributed", trainer));
        env_value(
            container(jobset(&r), "launcher", "node"),
            "OMPI_MCA_orte_set_default_slots",
        )
        .unwrap()
    };
    assert_eq!(
        slots("{resourcesPerNode: {limits: {nvidia.com/gpu: '4'}}}"),
        "4"
    );
    assert_eq!(
        slots("{resourcesPerNode: {limits: {nvidia.com/gpu: '1'}}}"),
        "1"
    );
    assert_eq!(
        slots("{numProcPerNode: 3, resourcesPerNode: {limits: {nvidia.com/gpu: '4'}}}"),
        "3"
    );
}

#[test]
fn existing_secret_is_not_regenerated_and_running_jobset_is_not_updated() {
    let observed = Observed {
        ssh_secret_exists: true,
        jobset: Some(ObservedJobSet { suspended: false }),
        pod_group_exists: true,
    };
    let r = render_observed(
        &mpi_job("deepspeed-distributed", "{numNodes: 2}"),
        &observed,
    );
    let kinds: Vec<&str> = r.objects.iter().map(|o| o.kind()).collect();
    assert_eq!(kinds, ["ConfigMap"], "only the hostfile is re-applied");

    let suspended = Observed {
        jobset: Some(ObservedJobSet { suspended: true }),
        ..observed
    };
    let r = render_observed(
        &mpi_job("deepspeed-distributed", "{numNodes: 2}"),
        &suspended,
    );
    assert_eq!(
        r.objects[0].kind(),
        "JobSet",
        "a suspended JobSet is re-applied in full"
    );
}

#[test]
fn jax_and_xgboost_env() {
    let r = render_yaml(&mpi_job(
        "jax-distributed",
        "{numNodes: 2, env: [{name: U, value: v}]}",
    ));
    let node = container(jobset(&r), "node", "node");
    assert_eq!(
        env_names(node),
        [
            "JAX_NUM_PROCESSES",
            "JAX_PROCESS_ID",
            "JAX_COORDINATOR_ADDRESS",
            "U"
        ]
    );
    assert_eq!(env_value(node, "JAX_NUM_PROCESSES").as_deref(), Some("2"));
    assert_eq!(
        env_value(node, "JAX_COORDINATOR_ADDRESS").as_deref(),
        Some("job-node-0-0.job:29500")
    );

    let r = render_yaml(&mpi_job(
        "xgboost-distributed",
        "{numNodes: 3, resourcesPerNode: {limits: {nvidia.com/gpu: '2'}}}",
    ));
    let node = container(jobset(&r), "node", "node");
    assert_eq!(
        env_value(node, "DMLC_TRACKER_URI").as_deref(),
        Some("job-node-0-0.job")
    );
    assert_eq!(
        env_value(node, "DMLC_TRACKER_PORT").as_deref(),
        Some("29500")
    );
    assert_eq!(env_value(node, "DMLC_NUM_WORKER").as_deref(), Some("6"));
    assert!(env(node, "DMLC_TASK_ID").unwrap().value_from.is_some());

    // The TrainJob env comes before DMLC_*: upstream's PlainML plugin runs for XGBoost runtimes first (found by
    // the live side-by-side differential; JAX above keeps its own order, PlainML skips JAX).
    let r = render_yaml(&mpi_job(
        "xgboost-distributed",
        "{numNodes: 2, env: [{name: U, value: v}]}",
    ));
    let node = container(jobset(&r), "node", "node");
    assert_eq!(
        env_names(node),
        [
            "U",
            "DMLC_TRACKER_URI",
            "DMLC_TRACKER_PORT",
            "DMLC_TASK_ID",
            "DMLC_NUM_WORKER"
        ]
    );
}

#[test]
fn torchtune_command_rewrite() {
    let job = |name: &str, trainer: &str| {
        format!(
            "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: tt}}\n\
             spec:\n  runtimeRef: {{name: {name}}}\n  trainer: {trainer}\n"
        )
    };
    let command = |yaml: String| {
        container(jobset(&render_yaml(&yaml)), "node", "node")
            .command
            .clone()
            .unwrap()
    };
    // Runtime default: 2 GPUs, auto -> distributed with rendezvous, full finetune.
    let cmd = command(job("torchtune-llama3.2-1b", "{command: [tune, run]}"));
    assert_eq!(
        cmd,
        [
            "tune",
            "run",
            "--rdzv_endpoint=tt-node-0-0.tt:29500",
            "full_finetune_distributed",
            "--config",
            "llama3_2/1B_full",
            "output_dir=/workspace/output",
            "tokenizer.path=/workspace/model/original/tokenizer.model",
            "checkpointer.checkpoint_dir=/workspace/model"
        ]
    );
    // One GPU and LoRA args: single-device LoRA recipe, no rendezvous.
    let cmd = command(job(
        "torchtune-qwen2.5-1.5b",
        "{command: [tune, run], args: ['model.lora_attn_modules=[q_proj,v_proj]'], resourcesPerNode: {limits: {nvidia.com/gpu: '1'}}}",
    ));
    assert_eq!(
        &cmd[2..5],
        [
            "lora_finetune_single_device",
            "--config",
            "qwen2_5/1.5B_lora_single_device"
        ]
    );
    assert!(cmd.contains(&"tokenizer.merges_file=/workspace/model/merges.txt".to_owned()));
    // QLoRA on 2 GPUs: distributed QLoRA config.
    let cmd = command(job(
        "torchtune-llama3.2-3b",
        "{command: [tune, run], args: ['model.quantize_base=True']}",
    ));
    assert_eq!(
        &cmd[3..6],
        ["lora_finetune_distributed", "--config", "llama3_2/3B_qlora"]
    );
    // Torchtune gets no PET_MASTER_* env.
    let r = render_yaml(&job("torchtune-llama3.2-1b", "{command: [tune, run]}"));
    let node = container(jobset(&r), "node", "node");
    assert!(env(node, "PET_MASTER_ADDR").is_none() && env(node, "PET_NNODES").is_some());
}

#[test]
fn initializers_get_storage_uri_env_and_secret() {
    let yaml = "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: tt}\nspec:\n  \
        runtimeRef: {name: torchtune-llama3.2-1b}\n  initializer:\n    \
        dataset: {storageUri: 'hf://a/b', env: [{name: E, value: '1'}], secretRef: {name: hf}}\n    \
        model: {storageUri: 's3://m'}\n";
    let r = render_yaml(yaml);
    let js = jobset(&r);
    let ds = container(js, "dataset-initializer", "dataset-initializer");
    assert_eq!(env_names(ds), ["STORAGE_URI", "E"]);
    assert_eq!(env_value(ds, "STORAGE_URI").as_deref(), Some("hf://a/b"));
    assert_eq!(
        ds.env_from.as_ref().unwrap()[0]
            .secret_ref
            .as_ref()
            .unwrap()
            .name,
        "hf"
    );
    let model = container(js, "model-initializer", "model-initializer");
    assert_eq!(env_value(model, "STORAGE_URI").as_deref(), Some("s3://m"));
    assert!(model.env_from.is_none());
    assert_eq!(rjob(js, "dataset-initializer").replicas, Some(1));
}

const VOLCANO: &str = "
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: volcano}
spec:
  mlPolicy: {numNodes: 1, torch: {}}
  podGroupPolicy: {volcano: {networkTopology: {mode: hard, highestTierAllowed: 1}}}
  template:
    metadata: {annotations: {scheduling.volcano.sh/queue-name: q0}}
    spec:
      replicatedJobs:
        - name: launcher
          template:
            spec:
              parallelism: 1
              template:
                spec:
                  priorityClassName: first
                  containers: [{name: launcher, image: x, resources: {requests: {cpu: 300m, memory: 1Gi}}}]
        - name: node
          template:
            metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
            spec:
              template:
                spec:
                  priorityClassName: high
                  containers: [{name: node, image: x, resources: {requests: {cpu: 500m, memory: 512Mi}}}]
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: vj, namespace: ns}
spec:
  runtimeRef: {name: volcano}
  trainer: {numNodes: 4}
  runtimePatches:
    - manager: kueue.x-k8s.io/manager
      trainingRuntimeSpec: {template: {metadata: {annotations: {scheduling.volcano.sh/queue-name: q1}}}}
";

#[test]
fn volcano_pod_group_follows_upstream_unit_test() {
    // volcano_test.go: minMember 5, cpu 2300m, memory 3Gi, queue q1, priority class, topology hard/1.
    let r = render_yaml(VOLCANO);
    let Some(kubetrain_jobset::Object::VolcanoPodGroup(pg)) = find(&r, "PodGroup", "vj") else {
        panic!("{:?}", r.objects)
    };
    assert_eq!(pg.spec.min_member, Some(5));
    let res = pg.spec.min_resources.as_ref().unwrap();
    assert_eq!(
        (res["cpu"].0.as_str(), res["memory"].0.as_str()),
        ("2300m", "3Gi")
    );
    assert_eq!(pg.spec.queue.as_deref(), Some("q1"));
    assert_eq!(pg.spec.priority_class_name.as_deref(), Some("high"));
    let topo = pg.spec.network_topology.as_ref().unwrap();
    assert_eq!(
        (topo.mode.as_deref(), topo.highest_tier_allowed),
        (Some("hard"), Some(1))
    );
    let js = jobset(&r);
    for job in ["launcher", "node"] {
        let meta = rjob(js, job)
            .template
            .spec
            .as_ref()
            .unwrap()
            .template
            .metadata
            .as_ref()
            .unwrap();
        assert_eq!(
            meta.annotations.as_ref().unwrap()["scheduling.k8s.io/group-name"],
            "vj"
        );
    }
    assert_eq!(
        js.metadata.annotations.as_ref().unwrap()["scheduling.volcano.sh/queue-name"],
        "q1"
    );
}

#[test]
fn coscheduling_pod_group_and_skip_rule() {
    let yaml = VOLCANO.replace(
        "{volcano: {networkTopology: {mode: hard, highestTierAllowed: 1}}}",
        "{coscheduling: {scheduleTimeoutSeconds: 100}}",
    );
    let r = render_yaml(&yaml);
    let Some(kubetrain_jobset::Object::CoschedulingPodGroup(pg)) = find(&r, "PodGroup", "vj")
    else {
        panic!()
    };
    assert_eq!(pg.spec.min_member, Some(5));
    assert_eq!(pg.spec.schedule_timeout_seconds, Some(100));
    let js: &JobSet = jobset(&r);
    let meta = rjob(js, "node")
        .template
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap();
    assert_eq!(
        meta.labels.as_ref().unwrap()["scheduling.x-k8s.io/pod-group"],
        "vj"
    );
    // coscheduling_test.go: an existing PodGroup and a running TrainJob -> no PodGroup.
    let r = render_observed(
        &yaml,
        &Observed {
            pod_group_exists: true,
            ..Default::default()
        },
    );
    assert!(find(&r, "PodGroup", "vj").is_none());
}

#[test]
fn custom_subdomain_shapes_endpoints() {
    // jobset_test.go: network.subdomain kubeflow.org -> trainJob-launcher-0-0.kubeflow.org (upstream's unit test
    // names the job `trainJob`, which the API server refuses and so do the render entry points).
    let yaml = "
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: mpi-sub}
spec:
  mlPolicy: {numNodes: 1, mpi: {runLauncherAsNode: true}}
  template:
    spec:
      network: {subdomain: kubeflow.org}
      replicatedJobs:
        - name: launcher
          template:
            metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
            spec: {template: {spec: {containers: [{name: node, image: x}]}}}
        - name: node
          template: {spec: {template: {spec: {containers: [{name: node, image: x}]}}}}
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: trainjob}
spec: {runtimeRef: {name: mpi-sub}}
";
    let r = render_yaml(yaml);
    let Some(kubetrain_jobset::Object::ConfigMap(cm)) =
        find(&r, "ConfigMap", "trainjob-mpi-hostfile")
    else {
        panic!()
    };
    let hostfile = &cm.data.as_ref().unwrap()["hostfile"];
    assert_eq!(
        hostfile,
        "trainjob-launcher-0-0.kubeflow.org slots=1\ntrainjob-node-0-0.kubeflow.org slots=1\n"
    );
}

#[test]
fn runtime_patches_merge_and_restore_order() {
    let yaml = "
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: p}
spec:
  runtimeRef: {name: torchtune-llama3.2-1b}
  runtimePatches:
    - manager: a.io/one
      trainingRuntimeSpec:
        template:
          metadata: {labels: {team: a, keep: x}}
          spec:
            replicatedJobs:
              - name: node
                template:
                  metadata: {labels: {job-label: j}}
                  spec:
                    template:
                      metadata: {annotations: {pod-annotation: p}}
                      spec:
                        nodeSelector: {gpu: h100}
                        tolerations: [{key: a, operator: Exists}]
                        schedulingGates: [{name: g1}]
              - name: dataset-initializer
                template:
                  spec:
                    template:
                      spec:
                        containers: [{name: dataset-initializer, env: [{name: EXTRA, value: '1'}]}]
    - manager: b.io/two
      trainingRuntimeSpec:
        template:
          metadata: {labels: {team: b}}
          spec:
            replicatedJobs:
              - name: node
                template: {spec: {template: {spec: {tolerations: [{key: b, operator: Exists}]}}}}
";
    let r = render_yaml(yaml);
    let js = jobset(&r);
    let names: Vec<&str> = js
        .spec
        .replicated_jobs
        .iter()
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(names, ["dataset-initializer", "model-initializer", "node"]);
    let labels = js.metadata.labels.as_ref().unwrap();
    assert_eq!(
        (labels["team"].as_str(), labels["keep"].as_str()),
        ("b", "x")
    );
    let node = pod(js, "node");
    assert_eq!(node.node_selector.as_ref().unwrap()["gpu"], "h100");
    let tolerations: Vec<_> = node
        .tolerations
        .iter()
        .flatten()
        .map(|t| t.key.clone().unwrap())
        .collect();
    assert_eq!(tolerations, ["b"], "tolerations are replaced, not merged");
    assert_eq!(node.scheduling_gates.as_ref().unwrap()[0].name, "g1");
    let job_labels = rjob(js, "node")
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .as_ref()
        .unwrap();
    assert_eq!(job_labels["job-label"], "j");
    assert_eq!(
        job_labels["trainer.kubeflow.org/trainjob-ancestor-step"],
        "trainer"
    );
    let ds = container(js, "dataset-initializer", "dataset-initializer");
    assert_eq!(
        env_names(ds),
        ["EXTRA", "STORAGE_URI"],
        "a new patch item lands before original-only items"
    );
    assert_eq!(
        container(js, "node", "node").image.as_deref(),
        Some("ghcr.io/kubeflow/trainer/torchtune-trainer")
    );
}

#[test]
fn resources_per_node_merges_key_by_key() {
    let r = render_yaml(&mpi_job(
        "torchtune-llama3.2-1b",
        "{resourcesPerNode: {requests: {cpu: '8'}}}",
    ));
    let res = container(jobset(&r), "node", "node")
        .resources
        .clone()
        .unwrap();
    assert_eq!(res.limits.unwrap()["nvidia.com/gpu"].0, "2");
    assert_eq!(res.requests.unwrap()["cpu"].0, "8");
}

#[test]
fn unknown_runtime_errors_name_the_field() {
    let mut catalog = kubetrain_api::RuntimeCatalog::new();
    let jobs = load(
        &torch_job("{}").replace("torch-distributed", "nope"),
        &mut catalog,
    );
    let err = kubetrain_jobset::resolve(&catalog, &jobs[0]).unwrap_err();
    assert_eq!(err.field_path(), "spec.runtimeRef.name");
    assert_eq!(
        err.message(),
        "ClusterTrainingRuntime \"nope\" not found; no ClusterTrainingRuntime is known"
    );
}

#[test]
fn trainjob_without_uid_renders_unowned_children_deterministically() {
    let yaml = mpi_job("deepspeed-distributed", "{numNodes: 2}");
    assert!(!yaml.contains("uid"));
    let r = render_yaml(&yaml);
    assert!(r.objects.len() >= 3, "JobSet, Secret, hostfile");
    for o in &r.objects {
        assert_eq!(o.metadata().owner_references, None, "{}", o.kind());
    }
    assert_eq!(render_yaml(&yaml), r, "deterministic");
    let owned = render_yaml(&yaml.replace("namespace: ns}", "namespace: ns, uid: u-1}"));
    for o in &owned.objects {
        let refs = o.metadata().owner_references.as_ref().unwrap();
        assert_eq!(
            (refs.len(), refs[0].uid.as_str()),
            (1, "u-1"),
            "{}",
            o.kind()
        );
    }
}

#[test]
fn rendered_quantities_are_canonical_as_the_api_server_stores_them() {
    let r = render_yaml(&torch_job(
        "{resourcesPerNode: {limits: {cpu: 1000m, memory: 1024Mi, nvidia.com/gpu: '2'}, requests: {cpu: '0.5', memory: 1.5Gi}}}",
    ));
    let node = container(jobset(&r), "node", "node");
    let res = node.resources.as_ref().unwrap();
    let text = |l: &Option<
        std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >,
                k: &str| { l.as_ref().unwrap()[k].0.clone() };
    assert_eq!(text(&res.limits, "cpu"), "1");
    assert_eq!(text(&res.limits, "memory"), "1Gi");
    assert_eq!(text(&res.limits, "nvidia.com/gpu"), "2");
    assert_eq!(text(&res.requests, "cpu"), "500m");
    assert_eq!(text(&res.requests, "memory"), "1536Mi");
    // With GPUs, numProcPerNode stays auto.
    assert_eq!(
        env_value(node, "PET_NPROC_PER_NODE").as_deref(),
        Some("auto")
    );
}

/// A runtime without an ML policy (PlainML) whose trainer, initializer, sidecar and init containers carry no
/// env, or an explicitly empty one.
const PLAIN_RUNTIME: &str = "
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: plain}
spec:
  template:
    spec:
      replicatedJobs:
        - name: dataset-initializer
          template:
            metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: dataset-initializer}}
            spec:
              template:
                spec:
                  containers: [{name: dataset-initializer, image: i, env: []}]
        - name: node
          template:
            metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
            spec:
              template:
                spec:
                  initContainers: [{name: prepare, image: p, env: []}]
                  containers: [{name: node, image: x}, {name: sidecar, image: s, env: []}]
---
";

/// One container's env: `(replicatedJob, container, env names or None when absent)`.
type EnvRow = (String, String, Option<Vec<String>>);

/// Every container of the rendered JobSet as an [`EnvRow`].
fn env_table(js: &JobSet) -> Vec<EnvRow> {
    let mut rows = Vec::new();
    for rjob in &js.spec.replicated_jobs {
        let pod = pod(js, &rjob.name);
        let containers = pod.init_containers.iter().flatten().chain(&pod.containers);
        for c in containers {
            let env = c
                .env
                .as_ref()
                .map(|e| e.iter().map(|v| v.name.clone()).collect());
            rows.push((rjob.name.clone(), c.name.clone(), env));
        }
    }
    rows
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one scenario's facts from upstream's test, asserted in order"
)]
fn empty_env_is_omitted_where_upstream_omits_it() {
    // Upstream upserts the TrainJob env into a nil slice (which stays nil) and applies an apply configuration
    // whose `env` is `omitempty`: no container of the applied JobSet ever has `env: []`.
    let plain = |trainer: &str, init: &str| {
        format!(
            "{PLAIN_RUNTIME}apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: job, namespace: ns}}\n\
             spec:\n  runtimeRef: {{name: plain}}\n  trainer: {trainer}\n{init}"
        )
    };
    let row = |job: &str, c: &str, env: Option<&[&str]>| {
        (
            job.to_owned(),
            c.to_owned(),
            env.map(|e| e.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
        )
    };
    let cases: Vec<(&str, String, Vec<EnvRow>)> = vec![
        (
            // Upstream's PlainML test: `trainer: {numNodes: 5}` leaves the trainer container without env.
            "PlainML, numNodes only",
            plain("{numNodes: 5}", ""),
            vec![
                row("dataset-initializer", "dataset-initializer", None),
                row("node", "prepare", None),
                row("node", "node", None),
                row("node", "sidecar", None),
            ],
        ),
        (
            "PlainML, explicit empty env",
            plain("{env: []}", ""),
            vec![
                row("dataset-initializer", "dataset-initializer", None),
                row("node", "prepare", None),
                row("node", "node", None),
                row("node", "sidecar", None),
            ],
        ),
        (
            "PlainML with env, initializer without storageUri or env",
            plain(
                "{env: [{name: A, value: '1'}]}",
                "  initializer: {dataset: {secretRef: {name: s}}}\n",
            ),
            vec![
                row("dataset-initializer", "dataset-initializer", None),
                row("node", "prepare", None),
                row("node", "node", Some(&["A"])),
                row("node", "sidecar", None),
            ],
        ),
        (
            "PlainML, initializer with storageUri",
            plain(
                "{numNodes: 2}",
                "  initializer: {dataset: {storageUri: 'hf://a/b'}}\n",
            ),
            vec![
                row(
                    "dataset-initializer",
                    "dataset-initializer",
                    Some(&["STORAGE_URI"]),
                ),
                row("node", "prepare", None),
                row("node", "node", None),
                row("node", "sidecar", None),
            ],
        ),
        (
            // MPI with runLauncherAsNode: the TrainJob env is upserted into the node job too; none given.
            "MPI node job, numNodes only",
            mpi_job("deepspeed-distributed", "{numNodes: 3}"),
            vec![
                row("node", "node", None),
                row(
                    "launcher",
                    "node",
                    Some(&[
                        "OMPI_MCA_orte_default_hostfile",
                        "OMPI_MCA_orte_keep_fqdn_hostnames",
                        "OMPI_MCA_orte_set_default_slots",
                        "OMPI_MCA_plm_rsh_args",
                    ]),
                ),
            ],
        ),
        (
            "MPI node job with env",
            mpi_job(
                "deepspeed-distributed",
                "{numNodes: 3, env: [{name: X, value: 'y'}]}",
            ),
            vec![
                row("node", "node", Some(&["X"])),
                row(
                    "launcher",
                    "node",
                    // The MPI plugin's env first, the builder's TrainJob env after (upstream's order).
                    Some(&[
                        "OMPI_MCA_orte_default_hostfile",
                        "OMPI_MCA_orte_keep_fqdn_hostnames",
                        "OMPI_MCA_orte_set_default_slots",
                        "OMPI_MCA_plm_rsh_args",
                        "X",
                    ]),
                ),
            ],
        ),
    ];
    for (name, yaml, want) in cases {
        let r = render_yaml(&yaml);
        let js = jobset(&r);
        assert_eq!(env_table(js), want, "{name}");
        let printed = serde_json::to_string(js).unwrap();
        assert!(!printed.contains("\"env\":[]"), "{name}: {printed}");
    }
}

#[test]
fn runtimes_from_files_render_with_their_crd_defaults() {
    // The controller renders against the stored runtime, which the API server has defaulted: every
    // replicatedJob has `replicas: 1` and `groupName: default` unless the runtime says otherwise.
    for yaml in [
        VOLCANO.to_owned(),
        torch_job("{numNodes: 2}"),
        mpi_job("deepspeed-distributed", "{}"),
    ] {
        let r = render_yaml(&yaml);
        for rjob in &jobset(&r).spec.replicated_jobs {
            assert_eq!(
                (rjob.replicas, rjob.group_name.as_deref()),
                (Some(1), Some("default")),
                "{}",
                rjob.name
            );
        }
    }
}
