use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, HostPathVolumeSource, PodSpec, ResourceRequirements, SecurityContext,
    Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kubetrain_api::jobset::ReplicatedJob;
use kubetrain_api::{ClusterTrainingRuntime, RuntimeEntry, TrainJob, TrainingRuntimeSpec};
use proptest::prelude::*;

use super::*;

fn policy(spec: &str) -> TrainingPolicy {
    let text = format!(
        "apiVersion: kubetrain.dev/v1alpha1\nkind: TrainingPolicy\nmetadata: {{name: test}}\nspec:\n{spec}"
    );
    TrainingPolicy::from_yaml(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn error(text: &str) -> String {
    TrainingPolicy::from_yaml(text).unwrap_err().to_string()
}

fn privileged_container() -> Container {
    Container {
        name: "node".into(),
        image: Some("docker.io/pytorch/pytorch:2.5".into()),
        security_context: Some(SecurityContext {
            privileged: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn runtime(name: &str, pod: PodSpec) -> ClusterTrainingRuntime {
    let mut job = ReplicatedJob {
        name: "node".into(),
        ..Default::default()
    };
    job.template
        .metadata
        .get_or_insert_default()
        .labels
        .get_or_insert_default()
        .insert(
            kubetrain_api::constants::ANCESTOR_LABEL.into(),
            "trainer".into(),
        );
    *job.pod_spec_mut() = pod;
    let mut spec = TrainingRuntimeSpec::default();
    spec.template.spec.replicated_jobs = vec![job];
    let mut runtime = ClusterTrainingRuntime::new(name, spec);
    runtime.metadata.name = Some(name.into());
    runtime
}

fn job(namespace: &str, yaml_spec: &str) -> TrainJob {
    let text = format!(
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: j, namespace: \"{namespace}\"}}\nspec:\n  runtimeRef: {{name: rt}}\n{yaml_spec}"
    );
    let value = kubetrain_yaml::fast::from_str(&text).unwrap();
    serde_json::from_value(value).unwrap()
}

const PRIVILEGED_PATCH: &str = "  runtimePatches:
    - manager: user
      trainingRuntimeSpec:
        template:
          spec:
            replicatedJobs:
              - name: node
                template:
                  spec:
                    template:
                      spec:
                        containers:
                          - name: node
                            securityContext: {privileged: true}
";

#[test]
fn parse_errors_carry_field_paths() {
    let table = [
        (
            "apiVersion: v1\nkind: TrainingPolicy\n",
            "apiVersion: must be kubetrain.dev/v1alpha1",
        ),
        (
            "apiVersion: kubetrain.dev/v1alpha1\nkind: Policy\n",
            "kind: must be TrainingPolicy",
        ),
        (
            "apiVersion: kubetrain.dev/v1alpha1\nkind: TrainingPolicy\nspec: {registries: [\"\"]}\n",
            "spec.registries[0]: an empty prefix",
        ),
        (
            "apiVersion: kubetrain.dev/v1alpha1\nkind: TrainingPolicy\nspec: {exceptions: [{allow: {hostNetwork: yes please}}]}\n",
            "spec.exceptions[0].allow.hostNetwork: invalid type",
        ),
        (
            "apiVersion: kubetrain.dev/v1alpha1\nkind: TrainingPolicy\nspec: {exceptions: [{runtimes: [{kind: Job, name: x}]}]}\n",
            "spec.exceptions[0].runtimes[0].kind: must be ClusterTrainingRuntime or TrainingRuntime",
        ),
        (
            "apiVersion: kubetrain.dev/v1alpha1\nkind: TrainingPolicy\nspec: {exceptions: [{namespaceSelector: {matchExpressions: [{key: a, operator: In}]}}]}\n",
            "spec.exceptions[0].namespaceSelector.matchExpressions[0].values: In and NotIn need",
        ),
        (
            "apiVersion: kubetrain.dev/v1alpha1\nkind: TrainingPolicy\nspec: {exceptions: [{allow: {hostPaths: [\"\"]}}]}\n",
            "spec.exceptions[0].allow.hostPaths[0]: must not be empty",
        ),
        (
            "apiVersion: v1\nkind: ConfigMap\ndata: {}\n",
            "data.policy.yaml: the ConfigMap holds no policy",
        ),
        (
            "apiVersion: v1\nkind: ConfigMap\ndata:\n  policy.yaml: \"apiVersion: kubetrain.dev/v1alpha1\\nkind: TrainingPolicy\\nspec: {registry: []}\"\n",
            "data.policy.yaml: spec.registry: unknown field `registry`, expected `registries` or `exceptions`",
        ),
        ("a: [", "not YAML"),
    ];
    for (text, expected) in table {
        let message = error(text);
        assert!(message.starts_with(expected), "{text:?}: {message}");
    }
}

#[test]
fn configmap_and_document_read_the_same() {
    let document = "apiVersion: kubetrain.dev/v1alpha1\nkind: TrainingPolicy\nspec: {registries: [ghcr.io/]}\n";
    let configmap = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: kubetrain-training-policy}}\ndata:\n  policy.yaml: {}\n",
        serde_json::to_string(document).unwrap()
    );
    assert_eq!(
        TrainingPolicy::from_yaml(document).unwrap(),
        TrainingPolicy::from_yaml(&configmap).unwrap()
    );
}

fn risk(kind: RiskKind, subject: &str) -> Risk {
    Risk {
        kind,
        path: "p".into(),
        detail: "d".into(),
        subject: subject.into(),
    }
}

#[test]
fn each_rule_is_refused_without_an_exception_and_allowed_with_one() {
    let subject = Subject::namespace("team-a");
    let table = [
        (risk(RiskKind::Privileged, ""), "privileged: true"),
        (
            risk(RiskKind::PrivilegeEscalation, ""),
            "privilegeEscalation: true",
        ),
        (risk(RiskKind::HostNetwork, ""), "hostNetwork: true"),
        (risk(RiskKind::HostPid, ""), "hostPID: true"),
        (risk(RiskKind::HostIpc, ""), "hostIPC: true"),
        (risk(RiskKind::HostPath, "/data/sets"), "hostPaths: [/data]"),
        (risk(RiskKind::HostPath, "/anything"), "hostPaths: [\"*\"]"),
        (
            risk(RiskKind::Device, "/dev/infiniband/uverbs0"),
            "devices: [/dev/infiniband]",
        ),
        (
            risk(RiskKind::Device, "SYS_ADMIN"),
            "devices: [CAP_SYS_ADMIN]",
        ),
        (risk(RiskKind::Device, "rdma/hca"), "devices: [rdma/hca]"),
        (
            risk(RiskKind::Image, "busybox"),
            "registries: [docker.io/library/]",
        ),
    ];
    let none = policy("  exceptions: []\n");
    for (risk, allow) in table {
        assert!(
            !none.allows(&risk, &subject),
            "{risk:?} allowed without an exception"
        );
        let allowing = policy(&format!(
            "  exceptions:\n    - namespaces: [team-a]\n      allow: {{{allow}}}\n"
        ));
        assert!(
            allowing.allows(&risk, &subject),
            "{allow} does not allow {risk:?}"
        );
        let elsewhere = policy(&format!(
            "  exceptions:\n    - namespaces: [team-b]\n      allow: {{{allow}}}\n"
        ));
        assert!(
            !elsewhere.allows(&risk, &subject),
            "{allow} for team-b allows {risk:?} in team-a"
        );
    }
}

#[test]
fn near_misses_are_not_allowed() {
    let subject = Subject::namespace("team-a");
    let table = [
        (risk(RiskKind::HostPath, "/database"), "hostPaths: [/data]"),
        (
            risk(RiskKind::Device, "/dev/nvme0"),
            "devices: [/dev/infiniband]",
        ),
        (risk(RiskKind::Device, "NET_ADMIN"), "devices: [SYS_ADMIN]"),
        (risk(RiskKind::Device, "rdma/hca"), "devices: [/dev/rdma]"),
        (risk(RiskKind::Privileged, ""), "hostNetwork: true"),
    ];
    for (risk, allow) in table {
        let p = policy(&format!("  exceptions:\n    - allow: {{{allow}}}\n"));
        assert!(!p.allows(&risk, &subject), "{allow} allows {risk:?}");
    }
}

#[test]
fn exceptions_select_namespaces_by_name_or_label_and_runtimes() {
    let p = policy(
        "  exceptions:
    - namespaceSelector: {matchLabels: {gpu-infra: \"true\"}}
      allow: {privileged: true}
    - runtimes: [{kind: ClusterTrainingRuntime, name: nccl-tests}]
      allow: {hostNetwork: true}
    - namespaces: [ops]
      runtimes: [{name: \"*\"}]
      allow: {hostIPC: true}
    - namespaceSelector: {matchExpressions: [{key: tier, operator: NotIn, values: [prod]}]}
      allow: {hostPID: true}
",
    );
    let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    let privileged = risk(RiskKind::Privileged, "");
    assert!(p.allows(
        &privileged,
        &Subject::namespace("x").with_labels(labels(&[("gpu-infra", "true")]))
    ));
    assert!(!p.allows(
        &privileged,
        &Subject::namespace("x").with_labels(labels(&[("gpu-infra", "no")]))
    ));
    assert!(
        !p.allows(&privileged, &Subject::namespace("x")),
        "unknown labels never match"
    );
    let host_network = risk(RiskKind::HostNetwork, "");
    let nccl = Subject::namespace("x").with_runtime("ClusterTrainingRuntime", "nccl-tests");
    assert!(p.allows(&host_network, &nccl));
    assert!(!p.allows(
        &host_network,
        &Subject::namespace("x").with_runtime("TrainingRuntime", "nccl-tests")
    ));
    let ipc = risk(RiskKind::HostIpc, "");
    assert!(p.allows(
        &ipc,
        &Subject::namespace("ops").with_runtime("TrainingRuntime", "a")
    ));
    assert!(
        !p.allows(&ipc, &Subject::namespace("ops")),
        "a runtime part needs a runtime"
    );
    let pid = risk(RiskKind::HostPid, "");
    assert!(p.allows(
        &pid,
        &Subject::namespace("x").with_labels(labels(&[("tier", "dev")]))
    ));
    assert!(!p.allows(
        &pid,
        &Subject::namespace("x").with_labels(labels(&[("tier", "prod")]))
    ));
    assert!(
        !p.allows(&pid, &Subject::default()),
        "a cluster runtime has no namespace"
    );
    assert!(p.needs_namespace_labels());
}

#[test]
fn registries_are_an_allow_list_only_when_set() {
    let any = policy("  exceptions: []\n");
    assert!(any.image_allowed("busybox", &Subject::default()));
    let listed = policy("  registries: [ghcr.io/kubeflow, nvcr.io/]\n");
    assert!(listed.image_allowed("ghcr.io/kubeflow/trainer:v1", &Subject::default()));
    assert!(listed.image_allowed("nvcr.io/nvidia/pytorch:24.01", &Subject::default()));
    assert!(!listed.image_allowed("ghcr.io/kubeflowx/trainer", &Subject::default()));
    assert!(!listed.image_allowed("busybox", &Subject::default()));
    let none = policy("  registries: []\n");
    assert!(!none.image_allowed("ghcr.io/kubeflow/trainer", &Subject::default()));
}

#[test]
fn trainjob_own_fields_are_denied_at_trainjob_paths() {
    let p = policy("  registries: [ghcr.io/]\n");
    let mut j = job("team-a", PRIVILEGED_PATCH);
    j.spec.trainer = Some(kubetrain_api::Trainer {
        image: Some("docker.io/evil/miner".into()),
        resources_per_node: Some(ResourceRequirements {
            limits: Some([("amd.com/gpu".to_owned(), Quantity("1".into()))].into()),
            ..Default::default()
        }),
        ..Default::default()
    });
    let paths: Vec<String> = p
        .evaluate_trainjob(&j, None, None)
        .into_iter()
        .map(|d| d.path)
        .collect();
    assert_eq!(
        paths,
        [
            "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].securityContext.privileged",
            "spec.trainer.resourcesPerNode.limits[amd.com/gpu]",
            "spec.trainer.image",
        ]
    );
    let message = &p.evaluate_trainjob(&j, None, None)[0].message;
    assert!(
        message.contains("container \"node\" runs privileged"),
        "{message}"
    );
    assert!(message.contains("training policy \"test\""), "{message}");
    assert!(message.contains("namespace \"team-a\""), "{message}");
    assert!(message.contains("allow.privileged: true"), "{message}");
}

#[test]
fn runtime_risks_reach_the_trainjob_with_the_runtime_name() {
    let p = policy("  registries: [docker.io/pytorch/]\n");
    let rt = runtime(
        "rt",
        PodSpec {
            containers: vec![privileged_container()],
            ..Default::default()
        },
    );
    let j = job("team-a", "");
    let denials = p.evaluate_trainjob(&j, Some(RuntimeEntry::Cluster(&rt)), None);
    assert_eq!(denials.len(), 1);
    assert_eq!(
        denials[0].path,
        "ClusterTrainingRuntime/rt:spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].securityContext.privileged"
    );
    // The job turns privileged off: its pods are not privileged.
    let off = job(
        "team-a",
        &PRIVILEGED_PATCH.replace("privileged: true", "privileged: false"),
    );
    assert!(
        p.evaluate_trainjob(&off, Some(RuntimeEntry::Cluster(&rt)), None)
            .is_empty()
    );
    // An exception for the runtime allows its TrainJobs.
    let allowed = policy("  exceptions: [{runtimes: [{name: rt}], allow: {privileged: true}}]\n");
    assert!(
        allowed
            .evaluate_trainjob(&j, Some(RuntimeEntry::Cluster(&rt)), None)
            .is_empty()
    );
    // spec.trainer.image replaces the trainer image, which is then judged at the TrainJob's path.
    let mut image = job("team-a", "");
    image.spec.trainer = Some(kubetrain_api::Trainer {
        image: Some("quay.io/x/y".into()),
        ..Default::default()
    });
    let paths: Vec<String> = allowed
        .evaluate_trainjob(&image, Some(RuntimeEntry::Cluster(&rt)), None)
        .into_iter()
        .map(|d| d.path)
        .collect();
    assert!(paths.is_empty(), "{paths:?}");
    let strict =
        policy("  registries: [docker.io/pytorch/]\n  exceptions: [{allow: {privileged: true}}]\n");
    let paths: Vec<String> = strict
        .evaluate_trainjob(&image, Some(RuntimeEntry::Cluster(&rt)), None)
        .into_iter()
        .map(|d| d.path)
        .collect();
    assert_eq!(paths, ["spec.trainer.image"]);
}

#[test]
fn runtimes_are_judged_at_runtime_paths() {
    let p = policy("  exceptions: [{namespaces: [infra], allow: {hostPaths: [/data]}}]\n");
    let pod = PodSpec {
        volumes: Some(vec![Volume {
            name: "data".into(),
            host_path: Some(HostPathVolumeSource {
                path: "/data/imagenet".into(),
                type_: None,
            }),
            ..Default::default()
        }]),
        containers: vec![Container {
            name: "node".into(),
            security_context: Some(SecurityContext {
                capabilities: Some(Capabilities {
                    add: Some(vec!["IPC_LOCK".into()]),
                    drop: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    };
    let rt = runtime("rt", pod);
    let in_infra = p.evaluate_runtime("TrainingRuntime", "rt", Some("infra"), &rt.spec, None);
    assert_eq!(
        in_infra.iter().map(|d| d.path.as_str()).collect::<Vec<_>>(),
        [
            "spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].securityContext.capabilities.add[0]"
        ]
    );
    assert!(
        in_infra[0]
            .message
            .contains("allow.devices: [\"IPC_LOCK\"]"),
        "{}",
        in_infra[0].message
    );
    let cluster = p.evaluate_runtime("ClusterTrainingRuntime", "rt", None, &rt.spec, None);
    assert_eq!(cluster.len(), 2);
    assert!(
        cluster[0]
            .message
            .contains("runtime ClusterTrainingRuntime/rt"),
        "{}",
        cluster[0].message
    );
}

fn arbitrary_pod() -> impl Strategy<Value = PodSpec> {
    (
        any::<[Option<bool>; 5]>(),
        proptest::collection::vec("(/[a-z]{1,5}){1,3}", 0..3),
        proptest::collection::vec("[A-Z_]{1,10}", 0..3),
        proptest::collection::vec("[a-z.]{1,8}/[a-z]{1,5}", 0..3),
        "[a-z./:]{1,20}",
    )
        .prop_map(|(flags, paths, capabilities, resources, image)| PodSpec {
            host_network: flags[0],
            host_pid: flags[1],
            host_ipc: flags[2],
            volumes: Some(
                paths
                    .into_iter()
                    .map(|path| Volume {
                        name: "v".into(),
                        host_path: Some(HostPathVolumeSource { path, type_: None }),
                        ..Default::default()
                    })
                    .collect(),
            ),
            containers: vec![Container {
                name: "node".into(),
                image: Some(image),
                security_context: Some(SecurityContext {
                    privileged: flags[3],
                    allow_privilege_escalation: flags[4],
                    capabilities: Some(Capabilities {
                        add: Some(capabilities),
                        drop: None,
                    }),
                    ..Default::default()
                }),
                resources: Some(ResourceRequirements {
                    limits: Some(
                        resources
                            .into_iter()
                            .map(|r| (r, Quantity("1".into())))
                            .collect(),
                    ),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        })
}

proptest! {
    #[test]
    fn a_policy_allowing_everything_never_denies(pod in arbitrary_pod(), namespace in "[a-z]{1,8}") {
        let everything = TrainingPolicy::allow_all();
        let rt = runtime("rt", pod.clone());
        prop_assert!(everything.evaluate_runtime("ClusterTrainingRuntime", "rt", None, &rt.spec, None).is_empty());
        let j = job(&namespace, PRIVILEGED_PATCH);
        prop_assert!(everything.evaluate_trainjob(&j, Some(RuntimeEntry::Cluster(&rt)), None).is_empty());
        // The same pods are denied something by the empty policy whenever they carry a risk.
        let risks = crate::risk::pod_spec_risks(&pod, "spec");
        let empty = TrainingPolicy::from_yaml("apiVersion: kubetrain.dev/v1alpha1\nkind: TrainingPolicy\n").unwrap();
        let denials = empty.evaluate_runtime("ClusterTrainingRuntime", "rt", None, &rt.spec, None);
        prop_assert_eq!(denials.len(), risks.len());
    }
}
