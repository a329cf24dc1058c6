use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, HostPathVolumeSource, PodSecurityContext, PodSpec,
    ResourceRequirements, SecurityContext, Volume, WindowsSecurityContextOptions,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kubetrain_api::TrainingRuntimeSpec;
use kubetrain_api::jobset::ReplicatedJob;

use super::*;

fn container(name: &str) -> Container {
    Container {
        name: name.into(),
        ..Default::default()
    }
}

fn context(edit: impl FnOnce(&mut SecurityContext)) -> Container {
    let mut context = SecurityContext::default();
    edit(&mut context);
    Container {
        security_context: Some(context),
        ..container("node")
    }
}

fn host_path(path: &str) -> Volume {
    Volume {
        name: "v".into(),
        host_path: Some(HostPathVolumeSource {
            path: path.into(),
            type_: None,
        }),
        ..Default::default()
    }
}

fn kinds_and_paths(spec: &PodSpec) -> Vec<(RiskKind, String)> {
    pod_spec_risks(spec, "spec")
        .into_iter()
        .map(|r| (r.kind, r.path))
        .collect()
}

/// A case of the table: name, pod spec, expected kinds and paths.
type Case = (&'static str, PodSpec, Vec<(RiskKind, &'static str)>);

#[test]
#[allow(clippy::too_many_lines, reason = "a table test, one case per row")]
fn each_rule_is_found_at_its_path() {
    let with_container = |c: Container| PodSpec {
        containers: vec![c],
        ..Default::default()
    };
    let resources = |name: &str| ResourceRequirements {
        limits: Some([(name.to_owned(), Quantity("1".into()))].into()),
        ..Default::default()
    };
    let table: Vec<Case> = vec![
        ("empty", PodSpec::default(), vec![]),
        (
            "privileged",
            with_container(context(|c| c.privileged = Some(true))),
            vec![(
                RiskKind::Privileged,
                "spec.containers[0].securityContext.privileged",
            )],
        ),
        (
            "privileged false",
            with_container(context(|c| c.privileged = Some(false))),
            vec![],
        ),
        (
            "escalation",
            with_container(context(|c| c.allow_privilege_escalation = Some(true))),
            vec![(
                RiskKind::PrivilegeEscalation,
                "spec.containers[0].securityContext.allowPrivilegeEscalation",
            )],
        ),
        (
            "host process",
            with_container(context(|c| {
                c.windows_options = Some(WindowsSecurityContextOptions {
                    host_process: Some(true),
                    ..Default::default()
                })
            })),
            vec![(
                RiskKind::Privileged,
                "spec.containers[0].securityContext.windowsOptions.hostProcess",
            )],
        ),
        (
            "capability beyond baseline",
            with_container(context(|c| {
                c.capabilities = Some(Capabilities {
                    add: Some(vec!["CHOWN".into(), "cap_sys_admin".into()]),
                    drop: None,
                })
            })),
            vec![(
                RiskKind::Device,
                "spec.containers[0].securityContext.capabilities.add[1]",
            )],
        ),
        (
            "host port",
            with_container(Container {
                ports: Some(vec![ContainerPort {
                    container_port: 80,
                    host_port: Some(8080),
                    ..Default::default()
                }]),
                ..container("node")
            }),
            vec![(
                RiskKind::HostNetwork,
                "spec.containers[0].ports[0].hostPort",
            )],
        ),
        (
            "device resource",
            with_container(Container {
                resources: Some(resources("rdma/hca")),
                ..container("node")
            }),
            vec![(
                RiskKind::Device,
                "spec.containers[0].resources.limits[rdma/hca]",
            )],
        ),
        (
            "gpus are ordinary",
            with_container(Container {
                resources: Some(resources("nvidia.com/gpu")),
                ..container("node")
            }),
            vec![],
        ),
        (
            "host namespaces",
            PodSpec {
                host_network: Some(true),
                host_pid: Some(true),
                host_ipc: Some(true),
                ..Default::default()
            },
            vec![
                (RiskKind::HostNetwork, "spec.hostNetwork"),
                (RiskKind::HostPid, "spec.hostPID"),
                (RiskKind::HostIpc, "spec.hostIPC"),
            ],
        ),
        (
            "host paths and devices",
            PodSpec {
                volumes: Some(vec![
                    host_path("/data"),
                    host_path("/dev/infiniband"),
                    host_path("/devices"),
                ]),
                ..Default::default()
            },
            vec![
                (RiskKind::HostPath, "spec.volumes[0].hostPath.path"),
                (RiskKind::Device, "spec.volumes[1].hostPath.path"),
                (RiskKind::HostPath, "spec.volumes[2].hostPath.path"),
            ],
        ),
        (
            "init containers",
            PodSpec {
                init_containers: Some(vec![context(|c| c.privileged = Some(true))]),
                ..Default::default()
            },
            vec![(
                RiskKind::Privileged,
                "spec.initContainers[0].securityContext.privileged",
            )],
        ),
        (
            "pod host process",
            PodSpec {
                security_context: Some(PodSecurityContext {
                    windows_options: Some(WindowsSecurityContextOptions {
                        host_process: Some(true),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
            vec![(
                RiskKind::Privileged,
                "spec.securityContext.windowsOptions.hostProcess",
            )],
        ),
    ];
    for (name, spec, expected) in table {
        let expected: Vec<(RiskKind, String)> = expected
            .into_iter()
            .map(|(k, p)| (k, p.to_owned()))
            .collect();
        assert_eq!(kinds_and_paths(&spec), expected, "{name}");
    }
}

#[test]
fn subjects_name_what_is_accessed() {
    let spec = PodSpec {
        volumes: Some(vec![host_path("/dev/nvme0")]),
        containers: vec![context(|c| {
            c.capabilities = Some(Capabilities {
                add: Some(vec!["CAP_SYS_ADMIN".into()]),
                drop: None,
            })
        })],
        ..Default::default()
    };
    let subjects: Vec<String> = pod_spec_risks(&spec, "spec")
        .into_iter()
        .map(|r| r.subject)
        .collect();
    assert_eq!(subjects, ["/dev/nvme0", "SYS_ADMIN"]);
}

#[test]
fn runtime_risks_use_runtime_paths() {
    let mut job = ReplicatedJob {
        name: "node".into(),
        ..Default::default()
    };
    job.pod_spec_mut().host_network = Some(true);
    let mut spec = TrainingRuntimeSpec::default();
    spec.template.spec.replicated_jobs = vec![
        ReplicatedJob {
            name: "launcher".into(),
            ..Default::default()
        },
        job,
    ];
    let risks = runtime_risks(&spec);
    assert_eq!(risks.len(), 1);
    assert_eq!(
        risks[0].path,
        "spec.template.spec.replicatedJobs[1].template.spec.template.spec.hostNetwork"
    );
    assert_eq!(
        risks[0].to_string(),
        format!("{}: {}", risks[0].path, risks[0].detail)
    );
}

#[test]
fn images_are_listed_with_paths() {
    let spec = PodSpec {
        init_containers: Some(vec![Container {
            image: Some("busybox".into()),
            ..container("init")
        }]),
        containers: vec![Container {
            image: Some("ghcr.io/x/y:1".into()),
            ..container("node")
        }],
        ..Default::default()
    };
    assert_eq!(
        pod_spec_images(&spec, "spec"),
        [
            (
                "spec.initContainers[0].image".to_owned(),
                "busybox".to_owned()
            ),
            (
                "spec.containers[0].image".to_owned(),
                "ghcr.io/x/y:1".to_owned()
            )
        ]
    );
}
