//! Every v1 job the converter accepts gives TrainJobs and runtimes that `kubetrain validate` passes and that
//! render; everything else is an error with a field path, never a panic.

mod support;

use proptest::prelude::*;
use serde_json::{Value, json};

use kubetrain_migrate::v1::V1Kind;
use kubetrain_migrate::{MigrateOptions, RuntimeKind, migrate_values};

fn name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9]{0,8}"
}

/// A v1 job's name: mostly one a TrainJob can have, sometimes one it cannot (a dot, a digit first, a capital).
fn job_name() -> impl Strategy<Value = String> {
    prop_oneof![8 => name(), 1 => "[a-z0-9.A-Z-]{1,12}"]
}

fn container(main: &'static str) -> impl Strategy<Value = Value> {
    (
        prop_oneof![Just(main), Just("other")],
        "[a-z0-9]{1,4}",
        proptest::option::of(prop::collection::vec("[a-z.]{1,6}", 1..3)),
        prop::collection::vec(
            (
                prop_oneof![
                    Just("DATA"),
                    Just("PET_NNODES"),
                    Just("MASTER_ADDR"),
                    Just("DMLC_TASK_ID"),
                    Just("OMPI_MCA_plm_rsh_args")
                ],
                "[a-z0-9]{0,4}",
            ),
            0..3,
        ),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(name, tag, command, env, resources, port)| {
            let mut env_list: Vec<Value> = Vec::new();
            for (n, v) in env {
                if !env_list.iter().any(|e| e["name"] == n) {
                    env_list.push(json!({"name": n, "value": v}));
                }
            }
            let mut c =
                json!({"name": name, "image": format!("example.com/img:{tag}"), "env": env_list});
            if let Some(command) = command {
                c["command"] = json!(command);
            }
            if resources {
                c["resources"] = json!({"limits": {"cpu": "2", "memory": "1Gi"}});
            }
            if port {
                c["ports"] = json!([{"name": "p", "containerPort": 4000}]);
            }
            c
        })
}

fn template(main: &'static str) -> impl Strategy<Value = Value> {
    (
        container(main),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        proptest::option::of(0..3usize),
    )
        .prop_map(|(c, sidecar, volume, placement, restart)| {
            let mut containers = vec![c];
            if sidecar {
                containers.push(json!({"name": "sidecar", "image": "example.com/side:1"}));
            }
            let mut spec = json!({"containers": containers});
            if volume {
                spec["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
                spec["containers"][0]["volumeMounts"] =
                    json!([{"name": "data", "mountPath": "/data"}]);
            }
            if placement {
                spec["nodeSelector"] = json!({"pool": "gpu"});
                spec["tolerations"] = json!([{"key": "gpu", "operator": "Exists"}]);
                spec["serviceAccountName"] = json!("trainer");
            }
            if let Some(r) = restart {
                spec["restartPolicy"] = json!(["Never", "OnFailure", "Always"][r]);
            }
            json!({"spec": spec})
        })
}

fn replica(main: &'static str) -> impl Strategy<Value = Value> {
    (0..4i32, template(main), proptest::option::of(0..4usize)).prop_map(
        |(replicas, template, restart)| {
            let mut r = json!({"replicas": replicas, "template": template});
            if let Some(p) = restart {
                r["restartPolicy"] = json!(["Always", "OnFailure", "Never", "ExitCode"][p]);
            }
            r
        },
    )
}

fn run_policy() -> impl Strategy<Value = Value> {
    (
        proptest::option::of(0..3usize),
        proptest::option::of(1..1000i64),
        proptest::option::of(0..5i32),
        proptest::option::of((
            "[a-z]{1,5}",
            proptest::option::of("[a-z]{1,5}"),
            proptest::option::of(1..4i32),
        )),
        proptest::option::of(any::<bool>()),
        proptest::option::of(1..100i32),
    )
        .prop_map(|(clean, deadline, backoff, scheduling, suspend, ttl)| {
            let mut p = json!({});
            if let Some(c) = clean {
                p["cleanPodPolicy"] = json!(["All", "Running", "None"][c]);
            }
            if let Some(d) = deadline {
                p["activeDeadlineSeconds"] = json!(d);
            }
            if let Some(b) = backoff {
                p["backoffLimit"] = json!(b);
            }
            if let Some((queue, class, min)) = scheduling {
                p["schedulingPolicy"] = json!({"queue": queue});
                if let Some(class) = class {
                    p["schedulingPolicy"]["priorityClass"] = json!(class);
                }
                if let Some(min) = min {
                    p["schedulingPolicy"]["minAvailable"] = json!(min);
                }
            }
            if let Some(s) = suspend {
                p["suspend"] = json!(s);
            }
            if let Some(t) = ttl {
                p["ttlSecondsAfterFinished"] = json!(t);
            }
            p
        })
}

/// A v1 job of any kind, with any subset of its replica types (plus, sometimes, one it does not have).
fn v1_job() -> impl Strategy<Value = Value> {
    (0..V1Kind::ALL.len()).prop_flat_map(|k| {
        let kind = V1Kind::ALL[k];
        let main = kind.default_container();
        let roles: Vec<&'static str> = kind
            .replica_types()
            .iter()
            .copied()
            .chain(["Bogus"])
            .collect();
        (
            job_name(),
            proptest::option::of(name()),
            prop::collection::vec((prop::sample::select(roles), replica(main)), 1..4),
            run_policy(),
            proptest::option::of(prop_oneof![Just("1"), Just("3"), Just("auto"), Just("x")]),
            proptest::option::of(1..4i32),
            proptest::option::of(name()),
            proptest::option::of((proptest::option::of(0..4i32), proptest::option::of(0..5i32))),
        )
            .prop_map(
                move |(name, namespace, replicas, run, nproc, slots, label_queue, elastic)| {
                    let mut specs = serde_json::Map::new();
                    for (role, spec) in replicas {
                        specs.insert(role.to_owned(), spec);
                    }
                    let mut job = json!({
                        "apiVersion": "kubeflow.org/v1", "kind": kind.as_str(),
                        "metadata": {"name": name},
                        "spec": {"runPolicy": run, kind.replica_specs_field(): specs},
                    });
                    if let Some(ns) = namespace {
                        job["metadata"]["namespace"] = json!(ns);
                    }
                    if let Some(q) = label_queue {
                        job["metadata"]["labels"] = json!({"kueue.x-k8s.io/queue-name": q});
                    }
                    match kind {
                        V1Kind::PyTorchJob => {
                            if let Some(n) = nproc {
                                job["spec"]["nprocPerNode"] = json!(n);
                            }
                            if let Some((min, max)) = elastic {
                                let mut policy = json!({"rdzvBackend": "c10d", "maxRestarts": 3});
                                if let Some(min) = min {
                                    policy["minReplicas"] = json!(min);
                                }
                                if let Some(max) = max {
                                    policy["maxReplicas"] = json!(max);
                                }
                                job["spec"]["elasticPolicy"] = policy;
                            }
                        }
                        V1Kind::MPIJob => {
                            if let Some(s) = slots {
                                job["spec"]["slotsPerWorker"] = json!(s);
                            }
                        }
                        _ => {}
                    }
                    job
                },
            )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn accepted_jobs_validate_and_render(
        jobs in prop::collection::vec(v1_job(), 1..4),
        namespaced in any::<bool>(),
        queue in proptest::option::of(name()),
    ) {
        let options = MigrateOptions {
            runtime_kind: if namespaced { RuntimeKind::TrainingRuntime } else { RuntimeKind::ClusterTrainingRuntime },
            queue,
        };
        // Jobs are migrated one by one, so that one refused job does not hide the others.
        for job in jobs {
            match migrate_values(std::slice::from_ref(&job), &options) {
                Ok(migration) => {
                    support::validated(&migration);
                    support::same_world_as_v1(&job, &migration);
                }
                Err(error) => prop_assert!(
                    !error.path.is_empty() || error.message.contains("mapping"),
                    "an error without a field path: {error}"
                ),
            }
        }
    }
}

/// A v1 job the v1 operator would run: its kind's training replica types, at least one pod each.
fn well_formed_job() -> impl Strategy<Value = Value> {
    (0..V1Kind::ALL.len(), name(), prop::collection::vec(1..4i32, 3), run_policy()).prop_flat_map(
        |(k, name, counts, run)| {
            let kind = V1Kind::ALL[k];
            let roles: &[&str] = match kind {
                V1Kind::MPIJob => &["Launcher", "Worker"],
                V1Kind::TFJob => &["PS", "Worker"],
                V1Kind::PyTorchJob | V1Kind::XGBoostJob | V1Kind::PaddleJob => &["Master", "Worker"],
                V1Kind::JAXJob => &["Worker"],
            };
            prop::collection::vec(template(kind.default_container()), roles.len()).prop_map(move |templates| {
                let mut specs = serde_json::Map::new();
                for ((role, template), count) in roles.iter().zip(templates).zip(&counts) {
                    let replicas = if *role == "Master" || *role == "Launcher" { 1 } else { *count };
                    specs.insert((*role).to_owned(), json!({"replicas": replicas, "template": template}));
                }
                json!({
                    "apiVersion": "kubeflow.org/v1", "kind": kind.as_str(), "metadata": {"name": name.clone()},
                    "spec": {"runPolicy": run.clone(), kind.replica_specs_field(): specs},
                })
            })
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// The property above is not vacuous: jobs the v1 operator would run are accepted.
    #[test]
    fn well_formed_jobs_are_accepted(job in well_formed_job()) {
        let migration = migrate_values(std::slice::from_ref(&job), &MigrateOptions::default());
        prop_assert!(migration.is_ok(), "{job}: {}", migration.unwrap_err());
        let migration = migration.unwrap();
        support::validated(&migration);
        support::same_world_as_v1(&job, &migration);
    }
}
