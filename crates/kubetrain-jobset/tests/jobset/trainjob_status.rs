//! Facts of upstream's TrainJobStatus plugin (`plugins/trainjobstatus` and its tests) through `render_with`.

use crate::common::*;
use kubetrain_api::RuntimeCatalog;
use kubetrain_jobset::plugins::Registry;
use kubetrain_jobset::{
    CaCert, Object, Observed, RenderError, RenderOptions, Rendered, TrainJobStatusOptions, builtin,
    render_with, render_with_registry, resolve, ssh::seeded_rng,
};
use kubetrain_merge::plugins::trainjobstatus::StatusServerAddress;

const JOB: &str = "
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: test-job, namespace: default, uid: test-uid}
spec:
  runtimeRef: {name: torch-distributed}
  trainer: {numNodes: 2}
";

fn render_status(yaml: &str, options: &RenderOptions) -> Result<Rendered, RenderError> {
    let mut catalog = RuntimeCatalog::new();
    let jobs = load(yaml, &mut catalog);
    for rt in builtin::runtimes() {
        catalog.add_cluster_if_absent(rt);
    }
    let job = &jobs[0];
    let runtime = resolve(&catalog, job).unwrap();
    render_with(
        job,
        runtime,
        &Observed::default(),
        options,
        &mut seeded_rng(1),
    )
}

fn on(ca: &str) -> RenderOptions {
    RenderOptions {
        trainjob_status: Some(TrainJobStatusOptions {
            server: StatusServerAddress::default(),
            ca_cert: ca.into(),
        }),
    }
}

#[test]
fn trainer_containers_get_the_status_env_mount_and_token_volume() {
    let r = render_status(JOB, &on("-----BEGIN CERTIFICATE-----\n")).unwrap();
    let js = jobset(&r);
    let node = container(js, "node", "node");
    let url = "https://kubeflow-trainer-controller-manager.kubeflow-system.svc:10443/apis/trainer.kubeflow.org/v1alpha1/namespaces/default/trainjobs/test-job/status";
    assert_eq!(
        env_value(node, "KUBEFLOW_TRAINER_SERVER_URL").as_deref(),
        Some(url)
    );
    assert_eq!(
        env_value(node, "KUBEFLOW_TRAINER_SERVER_CA_CERT").as_deref(),
        Some("/var/run/secrets/kubeflow/trainer/ca.crt")
    );
    assert_eq!(
        env_value(node, "KUBEFLOW_TRAINER_SERVER_TOKEN").as_deref(),
        Some("/var/run/secrets/kubeflow/trainer/token")
    );
    // After the ML plugin's env (upstream runs EnforcePodSpec after EnforceMLPolicy).
    let names = env_names(node);
    assert_eq!(
        names[..5],
        [
            "PET_NNODES",
            "PET_NPROC_PER_NODE",
            "PET_NODE_RANK",
            "PET_MASTER_ADDR",
            "PET_MASTER_PORT"
        ]
    );
    assert_eq!(
        names[5..],
        [
            "KUBEFLOW_TRAINER_SERVER_URL",
            "KUBEFLOW_TRAINER_SERVER_CA_CERT",
            "KUBEFLOW_TRAINER_SERVER_TOKEN"
        ]
    );

    let mount = node
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == "kubeflow-trainer-token")
        .unwrap();
    assert_eq!(
        (mount.mount_path.as_str(), mount.read_only),
        ("/var/run/secrets/kubeflow/trainer", Some(true))
    );
    let volume = pod(js, "node")
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "kubeflow-trainer-token")
        .unwrap();
    let sources = volume.projected.as_ref().unwrap().sources.as_ref().unwrap();
    let token = sources[0].service_account_token.as_ref().unwrap();
    assert_eq!(
        (
            token.audience.as_deref(),
            token.expiration_seconds,
            token.path.as_str()
        ),
        (
            Some("trainer.kubeflow.org/v1alpha1/namespaces/default/trainjobs/test-job/status"),
            Some(3600),
            "token"
        )
    );
    let cm = sources[1].config_map.as_ref().unwrap();
    assert_eq!(cm.name, "test-job-tls-config");
    let item = &cm.items.as_ref().unwrap()[0];
    assert_eq!(
        (item.key.as_str(), item.path.as_str()),
        ("ca.crt", "ca.crt")
    );

    let Some(Object::ConfigMap(tls)) = find(&r, "ConfigMap", "test-job-tls-config") else {
        panic!("no TLS ConfigMap")
    };
    assert_eq!(
        tls.data.as_ref().unwrap()["ca.crt"],
        "-----BEGIN CERTIFICATE-----\n"
    );
    let owner = &tls.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.uid.as_str(), owner.controller),
        ("test-uid", Some(true))
    );
}

#[test]
fn every_container_of_the_trainer_pod_set_and_only_it() {
    let yaml = format!(
        "
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {{name: two-containers}}
spec:
  mlPolicy: {{numNodes: 1, torch: {{}}}}
  template:
    spec:
      replicatedJobs:
        - name: dataset-initializer
          template:
            metadata: {{labels: {{trainer.kubeflow.org/trainjob-ancestor-step: dataset-initializer}}}}
            spec: {{template: {{spec: {{containers: [{{name: dataset-initializer, image: init}}]}}}}}}
        - name: node
          template:
            metadata: {{labels: {{trainer.kubeflow.org/trainjob-ancestor-step: trainer}}}}
            spec: {{template: {{spec: {{containers: [{{name: node, image: a}}, {{name: sidecar, image: b}}]}}}}}}
---
{}",
        JOB.replace("torch-distributed", "two-containers")
    );
    let r = render_status(&yaml, &on("ca")).unwrap();
    let js = jobset(&r);
    for name in ["node", "sidecar"] {
        assert!(
            env_value(container(js, "node", name), "KUBEFLOW_TRAINER_SERVER_URL").is_some(),
            "{name}"
        );
    }
    let init = container(js, "dataset-initializer", "dataset-initializer");
    assert!(
        env_names(init)
            .iter()
            .all(|n| !n.starts_with("KUBEFLOW_TRAINER"))
    );
    assert!(pod(js, "dataset-initializer").volumes.is_none());
}

#[test]
fn off_by_default_and_a_missing_ca_certificate_is_an_error() {
    let r = render_status(JOB, &RenderOptions::default()).unwrap();
    assert!(
        env_value(
            container(jobset(&r), "node", "node"),
            "KUBEFLOW_TRAINER_SERVER_URL"
        )
        .is_none()
    );
    assert!(find(&r, "ConfigMap", "test-job-tls-config").is_none());
    let err = render_status(JOB, &on("")).unwrap_err();
    assert!(matches!(err, RenderError::MissingStatusServerCaCert));
    assert!(err.to_string().contains("ca.crt"), "{err}");
}

/// The operator's built-in certificates: one registry for the process, the CA learnt (and renewed) later.
#[test]
fn a_shared_ca_certificate_is_read_at_each_render() {
    let ca = CaCert::default();
    let registry = Registry::builtin(&RenderOptions {
        trainjob_status: Some(TrainJobStatusOptions {
            server: StatusServerAddress::default(),
            ca_cert: ca.clone(),
        }),
    });
    let mut catalog = RuntimeCatalog::new();
    let jobs = load(JOB, &mut catalog);
    for rt in builtin::runtimes() {
        catalog.add_cluster_if_absent(rt);
    }
    let runtime = resolve(&catalog, &jobs[0]).unwrap();
    let render = || {
        render_with_registry(
            &jobs[0],
            runtime,
            &Observed::default(),
            &registry,
            &mut seeded_rng(1),
        )
    };
    let tls_ca = |r: &Rendered| match find(r, "ConfigMap", "test-job-tls-config") {
        Some(Object::ConfigMap(cm)) => cm.data.as_ref().and_then(|d| d.get("ca.crt")).cloned(),
        _ => None,
    };

    // Until the certificate management's first pass: upstream's error, named by the plugin.
    let error = render().unwrap_err().to_string();
    assert!(
        error.contains("plugin TrainJobStatus") && error.contains("ca.crt"),
        "{error}"
    );
    ca.set("first CA".to_owned());
    assert_eq!(tls_ca(&render().unwrap()).as_deref(), Some("first CA"));
    ca.set("renewed CA".to_owned());
    assert_eq!(tls_ca(&render().unwrap()).as_deref(), Some("renewed CA"));
}

#[test]
fn server_address_is_configurable() {
    let mut options = on("ca");
    if let Some(s) = options.trainjob_status.as_mut() {
        s.server = StatusServerAddress {
            service_name: "trainer".into(),
            operator_namespace: "ops".into(),
            port: 8443,
        };
    }
    let r = render_status(
        &JOB.replace("namespace: default", "namespace: team-a"),
        &options,
    )
    .unwrap();
    assert_eq!(
        env_value(
            container(jobset(&r), "node", "node"),
            "KUBEFLOW_TRAINER_SERVER_URL"
        )
        .as_deref(),
        Some(
            "https://trainer.ops.svc:8443/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/test-job/status"
        )
    );
}
