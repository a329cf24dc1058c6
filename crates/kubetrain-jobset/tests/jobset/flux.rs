//! Facts of upstream's Flux plugin (`plugins/flux/flux.go` and its tests), checked on our own fixtures.

use crate::common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kubetrain_jobset::Object;

/// A Flux runtime like upstream's example one, with runtime args and a runtime env override.
const RUNTIME: &str = "
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: flux-test}
spec:
  mlPolicy: {numNodes: 1, flux: {numProcPerNode: 2}}
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
            spec:
              template:
                spec:
                  initContainers: [{name: setup, image: busybox}]
                  volumes: [{name: data, emptyDir: {}}]
                  containers:
                    - name: node
                      image: ubuntu:jammy
                      command: [sleep]
                      args: [runtime-arg]
                      env: [{name: FLUX_QUEUE_POLICY, value: easy}, {name: KEEP, value: k}]
                      volumeMounts: [{name: data, mountPath: /data}]
";

fn flux_job(trainer: &str) -> String {
    format!(
        "{RUNTIME}---\napiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\n\
         metadata: {{name: lammps, namespace: hpc, uid: uid-123}}\n\
         spec:\n  runtimeRef: {{name: flux-test}}\n  trainer: {trainer}\n"
    )
}

fn config_map(r: &kubetrain_jobset::Rendered) -> &ConfigMap {
    match find(r, "ConfigMap", "lammps-flux-entrypoint") {
        Some(Object::ConfigMap(cm)) => cm,
        other => panic!("no entrypoint ConfigMap: {other:?}"),
    }
}

fn secret(r: &kubetrain_jobset::Rendered) -> &Secret {
    match find(r, "Secret", "lammps-flux-curve") {
        Some(Object::Secret(s)) => s,
        other => panic!("no curve Secret: {other:?}"),
    }
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one scenario's facts from upstream's test, asserted in order"
)]
fn pod_spec_gets_the_flux_view_volumes_mounts_and_init_container() {
    let r = render_yaml(&flux_job(
        "{numNodes: 2, numProcPerNode: 4, image: lmp:1, command: [lmp, -in, in.reaxc], env: [{name: FLUX_VIEW_IMAGE, value: view:rocky}]}",
    ));
    let js = jobset(&r);
    assert_eq!(parallelism(js, "node"), (Some(2), Some(2)), "PlainML count");
    let pod = pod(js, "node");

    let volumes: Vec<_> = pod
        .volumes
        .iter()
        .flatten()
        .map(|v| v.name.as_str())
        .collect();
    assert_eq!(
        volumes,
        [
            "data",
            "spack-install",
            "flux-install",
            "lammps-flux-entrypoint",
            "shared-memory",
            "flux-curve"
        ]
    );
    let volume = |name: &str| {
        pod.volumes
            .iter()
            .flatten()
            .find(|v| v.name == name)
            .unwrap()
    };
    let cm = volume("lammps-flux-entrypoint")
        .config_map
        .as_ref()
        .unwrap();
    assert_eq!(
        (cm.name.as_str(), cm.default_mode),
        ("lammps-flux-entrypoint", Some(0o755))
    );
    let curve = volume("flux-curve").secret.as_ref().unwrap();
    assert_eq!(
        (curve.secret_name.as_deref(), curve.default_mode),
        (Some("lammps-flux-curve"), Some(0o400))
    );
    assert_eq!(
        volume("shared-memory")
            .empty_dir
            .as_ref()
            .unwrap()
            .medium
            .as_deref(),
        Some("Memory")
    );
    assert!(
        volume("spack-install").empty_dir.is_some() && volume("flux-install").empty_dir.is_some()
    );

    // The installer is appended after the runtime's init containers.
    let init = pod.init_containers.as_ref().unwrap();
    assert_eq!(init.len(), 2);
    assert_eq!(init[0].name, "setup");
    let installer = &init[1];
    assert_eq!(installer.name, "flux-installer");
    assert_eq!(
        installer.image.as_deref(),
        Some("view:rocky"),
        "TrainJob env overrides FLUX_VIEW_IMAGE"
    );
    assert_eq!(
        installer.command.as_deref(),
        Some(
            &[
                "/bin/bash".to_owned(),
                "/etc/flux-config/init.sh".to_owned()
            ][..]
        )
    );
    let mounts =
        |c: &k8s_openapi::api::core::v1::Container| -> Vec<(String, String, Option<bool>)> {
            c.volume_mounts
                .iter()
                .flatten()
                .map(|m| (m.name.clone(), m.mount_path.clone(), m.read_only))
                .collect()
        };
    let own = |n: &str, p: &str, ro: Option<bool>| (n.to_owned(), p.to_owned(), ro);
    assert_eq!(
        mounts(installer),
        [
            own("flux-install", "/mnt/flux", None),
            own("lammps-flux-entrypoint", "/etc/flux-config", Some(true))
        ]
    );

    let node = container(js, "node", "node");
    assert_eq!(
        mounts(node),
        [
            own("data", "/data", None),
            own("flux-install", "/mnt/flux", None),
            own("spack-install", "/opt/software", None),
            own("lammps-flux-entrypoint", "/etc/flux-config", Some(true)),
            own("flux-curve", "/curve", Some(true)),
            own("shared-memory", "/dev/shm", Some(true)),
        ]
    );
    assert_eq!(node.image.as_deref(), Some("lmp:1"));
    // The command wraps the TrainJob command; args are cleared in the TrainJob, so the runtime's stay.
    assert_eq!(
        node.command.as_deref(),
        Some(
            &[
                "/bin/bash".to_owned(),
                "/etc/flux-config/entrypoint.sh".to_owned(),
                "lmp -in in.reaxc".to_owned()
            ][..]
        )
    );
    assert_eq!(node.args.as_deref(), Some(&["runtime-arg".to_owned()][..]));
    // PlainML: the TrainJob env reaches the trainer container; Flux adds no env of its own.
    assert_eq!(
        env_names(node),
        ["FLUX_QUEUE_POLICY", "KEEP", "FLUX_VIEW_IMAGE"]
    );
}

#[test]
fn config_map_scripts_carry_hostlist_flags_and_broker_settings() {
    let r = render_yaml(&flux_job(
        "{numNodes: 4, numProcPerNode: 3, command: [lmp], args: [-v, x], resourcesPerNode: {limits: {nvidia.com/gpu: '2'}}}",
    ));
    let cm = config_map(&r);
    let owner = &cm.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.name.as_str(), owner.uid.as_str(), owner.controller),
        ("lammps", "uid-123", Some(true))
    );
    assert_eq!(cm.metadata.namespace.as_deref(), Some("hpc"));
    let data = cm.data.as_ref().unwrap();
    assert_eq!(
        data.keys().collect::<Vec<_>>(),
        ["entrypoint.sh", "init.sh"]
    );

    let entrypoint = &data["entrypoint.sh"];
    assert!(entrypoint.starts_with("#!/bin/bash\n"));
    assert!(entrypoint.contains("mainHost=\"lammps-node-0-0\"\n"));
    assert!(
        entrypoint.contains("flags=\"-N 4 -n 12 -g 2\"\n"),
        "{entrypoint}"
    );
    assert!(
        entrypoint.contains("flux R encode --hosts=\"${hosts}\" --cores=0-2 --gpu=0-1 > /tmp/R\n")
    );
    assert!(!entrypoint.contains("{{"), "every placeholder is filled");

    let init = &data["init.sh"];
    assert!(init.contains("fluxroot=/opt/view\n"));
    assert!(init.contains("mainHost=lammps-0\n"));
    assert!(init.contains("hosts=\"lammps-node-0-[0-3]\"\n"));
    for line in [
        "default_bind = \"tcp://eth0:%p\"",
        "default_connect = \"tcp://%h.lammps.hpc.svc.cluster.local:%p\"",
        "{ host=\"lammps-node-0-[0-3]\"},",
        "queue-policy = \"easy\"",
        "curve_cert = \"/mnt/flux/config/etc/curve/curve.cert\"",
        "default_port = 8050",
    ] {
        assert!(init.lines().any(|l| l == line), "{line} in\n{init}");
    }
    assert!(!init.contains("{{"), "every placeholder is filled");

    // The wrapped command joins the TrainJob command and args.
    let node = container(jobset(&r), "node", "node");
    assert_eq!(node.command.as_ref().unwrap()[2], "lmp -v x");
}

#[test]
fn tasks_default_to_the_policy_and_no_gpu_means_no_gpu_flags() {
    let r = render_yaml(&flux_job("{numNodes: 3}"));
    let entrypoint = &config_map(&r).data.as_ref().unwrap()["entrypoint.sh"];
    assert!(entrypoint.contains("flags=\"-N 3 -n 6\"\n"), "{entrypoint}");
    assert!(entrypoint.contains("--cores=0-1 > /tmp/R"));
    // No TrainJob command: the runtime's command is wrapped (its args are not part of the command line).
    let node = container(jobset(&r), "node", "node");
    assert_eq!(node.command.as_ref().unwrap()[2], "sleep");
}

#[test]
fn curve_secret_is_derived_from_the_uid() {
    let r = render_yaml(&flux_job("{numNodes: 1}"));
    let s = secret(&r);
    assert_eq!(
        s.type_, None,
        "upstream sets no type (the API server defaults Opaque)"
    );
    let cert = String::from_utf8(s.data.as_ref().unwrap()["curve.cert"].0.clone()).unwrap();
    assert_eq!(
        cert,
        kubetrain_jobset::flux::curve_certificate("lammps", "uid-123")
    );
    // Same uid, same certificate; the RNG plays no part.
    let again = render_yaml(&flux_job("{numNodes: 2}"));
    assert_eq!(secret(&again).data, s.data);
    let other = render_yaml(&flux_job("{numNodes: 1}").replace("uid-123", "uid-999"));
    assert_ne!(secret(&other).data, s.data);
}

#[test]
fn unset_num_nodes_and_trainer_fall_back_to_the_trainer_count() {
    // Upstream dereferences trainer.numNodes (and spec.trainer) unchecked; we use the trainer count.
    let r = render_yaml(&flux_job("{}"));
    let entrypoint = &config_map(&r).data.as_ref().unwrap()["entrypoint.sh"];
    assert!(entrypoint.contains("flags=\"-N 1 -n 2\"\n"));
    let no_trainer = flux_job("{}").replace("\n  trainer: {}\n", "\n");
    assert!(!no_trainer.contains("trainer: {}"));
    let r = render_yaml(&no_trainer);
    let node = container(jobset(&r), "node", "node");
    assert_eq!(
        node.command.as_deref(),
        Some(
            &[
                "/bin/bash".to_owned(),
                "/etc/flux-config/entrypoint.sh".to_owned(),
                "sleep".to_owned()
            ][..]
        )
    );
    assert!(
        config_map(&r).data.as_ref().unwrap()["init.sh"].contains("hosts=\"lammps-node-0-[0]\"\n")
    );
}

#[test]
fn empty_trainjob_env_value_overrides_a_setting() {
    // Upstream reads the Go string of the TrainJob env: a valueFrom entry counts as "".
    let r = render_yaml(&flux_job(
        "{numNodes: 1, env: [{name: FLUX_NETWORK_DEVICE, valueFrom: {fieldRef: {fieldPath: status.podIP}}}]}",
    ));
    let init = &config_map(&r).data.as_ref().unwrap()["init.sh"];
    assert!(init.contains("default_bind = \"tcp://:%p\""), "{init}");
}
