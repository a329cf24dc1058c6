//! Golden tests against upstream's data: every example TrainJob in `../shared/upstream/trainer/trainjobs`
//! rendered against the runtime it names (from the same files, upstream's shipped runtimes, or ours), and every
//! shipped runtime rendered with a 3-node TrainJob. Skips cleanly when the upstream data is absent (CI fails
//! instead: `shared_data`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::common::*;
use crate::shared_data;
use kubetrain_api::{Document, MLPolicySource, RuntimeCatalog, TrainJob, parse_documents};
use kubetrain_jobset::{Object, Observed, Rendered, builtin, render, resolve, ssh::seeded_rng};

fn upstream(dir: &str) -> Option<PathBuf> {
    shared_data::shared_dir(&format!("upstream/trainer/{dir}"))
}

fn yaml_files(dir: &PathBuf) -> Vec<(String, String)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

/// Checks that hold for every rendered TrainJob.
fn check_invariants(job: &TrainJob, r: &Rendered) {
    let name = job.name();
    let js = r.objects[0]
        .as_jobset()
        .unwrap_or_else(|| panic!("{name}: the JobSet comes first"));
    assert_eq!(js.metadata.name.as_deref(), Some(name));
    // Upstream's examples carry no uid: children are printed unowned (see object::owner_references).
    assert_eq!(
        js.metadata.owner_references.is_some(),
        job.metadata.uid.is_some()
    );
    assert_eq!(
        js.spec.suspend,
        Some(job.spec.is_suspended()),
        "{name}: suspend mirrors the TrainJob"
    );
    for (ps, rjob) in r.info.pod_sets.iter().zip(&js.spec.replicated_jobs) {
        let spec = rjob.template.spec.as_ref().unwrap();
        assert_eq!(
            (spec.parallelism, spec.completions),
            (Some(ps.count), Some(ps.count)),
            "{name}/{}",
            ps.name
        );
    }
    for o in &r.objects {
        let Some(owners) = &o.metadata().owner_references else {
            assert!(job.metadata.uid.is_none(), "{name}: {} owner", o.kind());
            continue;
        };
        let owner = &owners[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.controller),
            ("TrainJob", name, Some(true)),
            "{name}: {} owner",
            o.kind()
        );
    }
    let mut sorted = r.objects.clone();
    kubetrain_jobset::object::sort(&mut sorted);
    assert_eq!(sorted, r.objects, "{name}: objects are sorted");
    if let (Some(MLPolicySource::Torch(_)), Some(_)) = (r.info.ml_source(), &job.spec.trainer) {
        let trainer = r.info.pod_set_by_ancestor("trainer").unwrap();
        let node = container(js, &r.info.pod_sets[trainer].name, "node");
        assert_eq!(
            env_value(node, "PET_NNODES"),
            Some(r.info.pod_sets[trainer].count.to_string()),
            "{name}"
        );
        assert!(
            node.ports
                .iter()
                .flatten()
                .any(|p| p.container_port == 29500),
            "{name}: port 29500"
        );
    }
}

#[allow(
    clippy::too_many_lines,
    reason = "per-example facts of upstream's examples, one match arm each"
)]
fn specific_facts(job: &TrainJob, r: &Rendered) {
    let js = jobset(r);
    match job.name() {
        "multi-node-example" => {
            let node = container(js, "node", "node");
            assert_eq!(parallelism(js, "node"), (Some(3), Some(3)));
            assert_eq!(env_value(node, "PET_NPROC_PER_NODE").as_deref(), Some("1"));
            assert_eq!(
                env_value(node, "PET_MASTER_ADDR").as_deref(),
                Some("multi-node-example-node-0-0.multi-node-example")
            );
            assert_eq!(node.command.as_ref().unwrap()[0], "torchrun");
        }
        "runtime-patches-example" => {
            let node = container(js, "node", "node");
            assert_eq!(
                &env_names(node)[..3],
                ["CUSTOM_VAR", "PYTHONUNBUFFERED", "PET_NNODES"]
            );
            assert_eq!(
                env_value(node, "PET_NPROC_PER_NODE").as_deref(),
                Some("2"),
                "requests.cpu wins over limits"
            );
            let p = pod(js, "node");
            assert_eq!(p.service_account_name.as_deref(), Some("training-sa"));
            assert_eq!(p.node_selector.as_ref().unwrap()["node-type"], "training");
            assert_eq!(
                p.tolerations.as_ref().unwrap()[0].key.as_deref(),
                Some("training-workload")
            );
            let labels = js.metadata.labels.as_ref().unwrap();
            assert_eq!(
                (labels["team"].as_str(), labels["cost-center"].as_str()),
                ("ml-platform", "research")
            );
            assert_eq!(
                js.metadata.annotations.as_ref().unwrap()["prometheus.io/scrape"],
                "true"
            );
            let res = node.resources.as_ref().unwrap();
            assert_eq!(res.requests.as_ref().unwrap()["memory"].0, "4Gi");
            assert_eq!(res.limits.as_ref().unwrap()["cpu"].0, "4");
        }
        "kueue-example" => {
            assert_eq!(js.spec.suspend, Some(true));
            assert_eq!(
                container(js, "node", "node").image.as_deref(),
                Some("python:3.11-slim")
            );
            assert_eq!(parallelism(js, "node"), (Some(3), Some(3)));
            // TrainJob labels (the Kueue queue name) are not propagated.
            assert!(js.metadata.labels.is_none());
        }
        "volcano-example" => {
            let Some(Object::VolcanoPodGroup(pg)) = find(r, "PodGroup", "volcano-example") else {
                panic!("no PodGroup")
            };
            assert_eq!(pg.spec.min_member, Some(4));
            let res = pg.spec.min_resources.as_ref().unwrap();
            assert_eq!(
                (res["cpu"].0.as_str(), res["memory"].0.as_str()),
                ("4", "8Gi")
            );
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
                meta.annotations.as_ref().unwrap()["scheduling.k8s.io/group-name"],
                "volcano-example"
            );
        }
        "multi-step-example" => {
            let ds = container(js, "dataset-initializer", "dataset-initializer");
            assert_eq!(
                env_value(ds, "STORAGE_URI").as_deref(),
                Some("hf://tatsu-lab/alpaca")
            );
            assert_eq!(rjob(js, "dataset-initializer").replicas, Some(1));
            assert_eq!(parallelism(js, "node"), (Some(2), Some(2)));
            assert_eq!(parallelism(js, "dataset-initializer"), (Some(1), Some(1)));
        }
        "lammps-flux" | "lammps-flux-interactive" => {
            // flux.go: the command is wrapped by the entrypoint, the init container installs the view.
            let node = container(js, "node", "node");
            let command = node.command.as_ref().unwrap();
            assert_eq!(
                command[..2],
                ["/bin/bash", "/etc/flux-config/entrypoint.sh"]
            );
            let original = job.spec.trainer.as_ref().unwrap().command.as_ref().unwrap();
            assert_eq!(command[2], original.join(" "));
            let installer = &pod(js, "node").init_containers.as_ref().unwrap()[0];
            assert_eq!(installer.name, "flux-installer");
            assert_eq!(
                installer.image.as_deref(),
                Some("ghcr.io/converged-computing/flux-view-ubuntu:tag-jammy")
            );
            let nodes = job.spec.trainer.as_ref().unwrap().num_nodes.unwrap();
            assert_eq!(parallelism(js, "node"), (Some(nodes), Some(nodes)));
            let Some(Object::ConfigMap(cm)) =
                find(r, "ConfigMap", &format!("{}-flux-entrypoint", job.name()))
            else {
                panic!("{}: no entrypoint ConfigMap", job.name())
            };
            let hosts = format!("hosts=\"{}-node-0-[0-{}]\"", job.name(), nodes - 1);
            assert!(cm.data.as_ref().unwrap()["init.sh"].contains(&hosts));
            assert!(find(r, "Secret", &format!("{}-flux-curve", job.name())).is_some());
        }
        _ => {}
    }
}

#[test]
fn every_upstream_example_renders_with_upstream_facts() {
    let (Some(jobs_dir), Some(runtimes_dir)) = (upstream("trainjobs"), upstream("runtimes")) else {
        return;
    };
    let mut catalog = RuntimeCatalog::new();
    let mut jobs: Vec<(String, TrainJob)> = Vec::new();
    for (file, text) in yaml_files(&jobs_dir)
        .into_iter()
        .chain(yaml_files(&runtimes_dir))
    {
        let Ok(docs) = parse_documents(&text) else {
            eprintln!(
                "{file}: not parseable against the current API (stale upstream snippet), skipped"
            );
            continue;
        };
        for d in docs {
            match d.document {
                Document::TrainJob(j) => jobs.push((file.clone(), *j)),
                other => {
                    catalog.add_document(&other);
                }
            }
        }
    }
    for rt in builtin::runtimes() {
        catalog.add_cluster_if_absent(rt);
    }
    let mut rendered = BTreeMap::new();
    for (file, job) in &jobs {
        let Ok(runtime) = resolve(&catalog, job) else {
            eprintln!(
                "{file}: {} names a runtime upstream does not ship, skipped",
                job.name()
            );
            continue;
        };
        let r = render(job, runtime, &Observed::default(), &mut seeded_rng(7))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        check_invariants(job, &r);
        specific_facts(job, &r);
        let again = render(job, runtime, &Observed::default(), &mut seeded_rng(7)).unwrap();
        assert_eq!(again, r, "{file}: render is deterministic");
        rendered.insert(job.name().to_owned(), r);
    }
    for name in [
        "multi-node-example",
        "runtime-patches-example",
        "kueue-example",
        "volcano-example",
        "multi-step-example",
        "lammps-flux",
        "lammps-flux-interactive",
    ] {
        assert!(rendered.contains_key(name), "{name} was rendered");
    }
}

#[test]
fn every_shipped_runtime_renders_a_three_node_job() {
    let Some(runtimes_dir) = upstream("runtimes") else {
        return;
    };
    for (file, text) in yaml_files(&runtimes_dir) {
        let mut catalog = RuntimeCatalog::new();
        let docs = parse_documents(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        let Some(rt) = docs.iter().find_map(|d| match &d.document {
            Document::ClusterTrainingRuntime(rt) => Some(rt.clone()),
            _ => None,
        }) else {
            continue;
        };
        let name = rt.name().to_owned();
        catalog.add_cluster(*rt);
        let yaml = format!(
            "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: j3, namespace: ns, uid: u-3}}\n\
             spec: {{runtimeRef: {{name: {name}}}, trainer: {{numNodes: 3}}}}\n"
        );
        let jobs = load(&yaml, &mut catalog);
        let job = &jobs[0];
        let r = render(
            job,
            resolve(&catalog, job).unwrap(),
            &Observed::default(),
            &mut seeded_rng(3),
        )
        .unwrap_or_else(|e| panic!("{file}: {e}"));
        check_invariants(job, &r);
        match r.info.ml_source() {
            Some(MLPolicySource::Mpi(_)) => {
                let Some(Object::ConfigMap(cm)) = find(&r, "ConfigMap", "j3-mpi-hostfile") else {
                    panic!("{file}")
                };
                let hostfile = &cm.data.as_ref().unwrap()["hostfile"];
                // runLauncherAsNode: 2 workers + the launcher, workers first (runtime order).
                assert_eq!(
                    hostfile,
                    "j3-node-0-0.j3 slots=1\nj3-node-0-1.j3 slots=1\nj3-launcher-0-0.j3 slots=1\n",
                    "{file}"
                );
                assert!(find(&r, "Secret", "j3-mpi-ssh-auth").is_some(), "{file}");
            }
            Some(MLPolicySource::Torch(_)) => {
                let trainer = r.info.pod_set_by_ancestor("trainer").unwrap();
                assert_eq!(r.info.pod_sets[trainer].count, 3, "{file}");
            }
            Some(MLPolicySource::Jax(_)) => {
                assert_eq!(
                    env_value(container(jobset(&r), "node", "node"), "JAX_NUM_PROCESSES")
                        .as_deref(),
                    Some("3")
                );
            }
            Some(MLPolicySource::Xgboost(_)) => {
                assert_eq!(
                    env_value(container(jobset(&r), "node", "node"), "DMLC_NUM_WORKER").as_deref(),
                    Some("3")
                );
            }
            other => panic!("{file}: unexpected policy {other:?}"),
        }
    }
}
