//! Renders MPICH and Intel MPI runtimes with the plugin registered after the built-ins and asserts the hostfile,
//! the launcher env and what the built-in still does.

use k8s_openapi::api::core::v1::{ConfigMap, Container};
use kubetrain_api::{Document, TrainJob, TrainingRuntimeSpec, parse_documents};
use kubetrain_jobset::plugins::Registry;
use kubetrain_jobset::ssh::seeded_rng;
use kubetrain_jobset::{Object, Observed, RenderError, Rendered, render_with_registry};
use kubetrain_plugin_mpi_flavours::MpiFlavours;

/// A two-node MPI runtime (launcher plus node) whose template annotation names `implementation`.
fn runtime(implementation: &str) -> TrainingRuntimeSpec {
    let yaml = format!(
        r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {{name: mpi-flavour}}
spec:
  mlPolicy:
    numNodes: 1
    mpi: {{numProcPerNode: 4, sshAuthMountPath: /home/mpiuser/.ssh}}
  template:
    metadata:
      annotations: {{kubetrain.dev/mpi-implementation: "{implementation}"}}
    spec:
      replicatedJobs:
        - name: launcher
          template:
            metadata: {{labels: {{trainer.kubeflow.org/trainjob-ancestor-step: trainer}}}}
            spec: {{template: {{spec: {{containers: [{{name: node, image: mpich, command: [mpirun, hostname]}}]}}}}}}
        - name: node
          template:
            spec: {{template: {{spec: {{containers: [{{name: node, image: mpich, command: [/usr/sbin/sshd, -De]}}]}}}}}}
"#
    );
    match parse_documents(&yaml).unwrap().remove(0).document {
        Document::ClusterTrainingRuntime(rt) => rt.spec,
        other => panic!("not a runtime: {other:?}"),
    }
}

fn job() -> TrainJob {
    let yaml = r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: pi, namespace: default}
spec: {runtimeRef: {name: mpi-flavour}, trainer: {numNodes: 2}}
"#;
    match parse_documents(yaml).unwrap().remove(0).document {
        Document::TrainJob(job) => *job,
        other => panic!("not a TrainJob: {other:?}"),
    }
}

fn render(registry: &Registry, implementation: &str) -> Result<Rendered, RenderError> {
    render_with_registry(
        &job(),
        &runtime(implementation),
        &Observed::default(),
        registry,
        &mut seeded_rng(7),
    )
}

fn with_plugin() -> Registry {
    let mut registry = Registry::builtin(&Default::default());
    registry.register(MpiFlavours).unwrap();
    registry
}

fn launcher(out: &Rendered) -> Container {
    let jobset = out.objects[0].as_jobset().expect("the JobSet comes first");
    let launcher = jobset
        .spec
        .replicated_jobs
        .iter()
        .find(|r| r.name == "launcher")
        .unwrap();
    let pod = launcher
        .template
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    pod.containers
        .iter()
        .find(|c| c.name == "node")
        .unwrap()
        .clone()
}

fn env(container: &Container) -> Vec<(String, String)> {
    container
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect()
}

fn hostfiles(out: &Rendered) -> Vec<&ConfigMap> {
    out.objects
        .iter()
        .filter_map(|o| match o {
            Object::ConfigMap(cm) if o.name() == "pi-mpi-hostfile" => Some(&**cm),
            _ => None,
        })
        .collect()
}

#[test]
fn mpich_gets_a_hydra_hostfile_and_hydra_launcher_env() {
    let out = render(&with_plugin(), "MPICH").unwrap();
    let files = hostfiles(&out);
    assert_eq!(files.len(), 1, "one hostfile, the plugin's");
    assert_eq!(
        files[0].data.as_ref().unwrap()["hostfile"],
        "pi-node-0-0.pi:4\npi-node-0-1.pi:4\n"
    );
    assert_eq!(
        env(&launcher(&out)),
        [
            ("HYDRA_HOST_FILE".to_owned(), "/etc/mpi/hostfile".to_owned()),
            (
                "HYDRA_LAUNCHER_EXTRA_ARGS".to_owned(),
                "-o ConnectionAttempts=10".to_owned()
            ),
        ]
    );
    let mounts: Vec<_> = launcher(&out)
        .volume_mounts
        .unwrap()
        .into_iter()
        .map(|m| (m.name, m.mount_path))
        .collect();
    assert_eq!(
        mounts,
        [
            ("mpi-ssh-auth".to_owned(), "/home/mpiuser/.ssh".to_owned()),
            ("mpi-hostfile".to_owned(), "/etc/mpi".to_owned()),
        ]
    );
    // The built-in still builds the SSH Secret and places the ranks.
    assert!(
        out.objects
            .iter()
            .any(|o| o.kind() == "Secret" && o.name() == "pi-mpi-ssh-auth")
    );
    assert_eq!(
        out.info
            .pod_sets
            .iter()
            .find(|p| p.name == "node")
            .unwrap()
            .count,
        2
    );
}

#[test]
fn intel_mpi_gets_i_mpi_launcher_env_and_the_same_hostfile() {
    let out = render(&with_plugin(), "IntelMPI").unwrap();
    assert_eq!(
        hostfiles(&out)[0].data.as_ref().unwrap()["hostfile"],
        "pi-node-0-0.pi:4\npi-node-0-1.pi:4\n"
    );
    assert_eq!(
        env(&launcher(&out)),
        [
            (
                "I_MPI_HYDRA_HOST_FILE".to_owned(),
                "/etc/mpi/hostfile".to_owned()
            ),
            (
                "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS".to_owned(),
                "-o ConnectionAttempts=10".to_owned()
            ),
        ]
    );
}

#[test]
fn without_the_plugin_an_mpich_runtime_is_refused_naming_the_annotation() {
    let error = render(&Registry::builtin(&Default::default()), "MPICH").unwrap_err();
    assert_eq!(
        error.field_path(),
        "spec.template.metadata.annotations[kubetrain.dev/mpi-implementation]",
        "{error}"
    );
    let message = error.to_string();
    assert!(message.starts_with("plugin MPI: "), "{message}");
    assert!(
        message.contains("\"MPICH\" is not handled by any registered plugin"),
        "{message}"
    );
    assert!(
        message.contains("spec.mlPolicy.mpi.mpiImplementation"),
        "{message}"
    );
}

#[test]
fn an_unknown_implementation_stays_refused_with_the_plugin_registered() {
    let error = render(&with_plugin(), "Spectrum").unwrap_err();
    assert!(
        error.to_string().contains("\"Spectrum\" is not handled"),
        "{error}"
    );
}

#[test]
fn open_mpi_renders_exactly_as_without_the_plugin() {
    let builtin = render(&Registry::builtin(&Default::default()), "OpenMPI").unwrap();
    let plugged = render(&with_plugin(), "OpenMPI").unwrap();
    assert_eq!(builtin.objects, plugged.objects);
    assert!(
        env(&launcher(&plugged))
            .iter()
            .any(|(n, _)| n == "OMPI_MCA_orte_default_hostfile")
    );
    assert_eq!(
        hostfiles(&plugged)[0].data.as_ref().unwrap()["hostfile"],
        "pi-node-0-0.pi slots=4\npi-node-0-1.pi slots=4\n"
    );
}
