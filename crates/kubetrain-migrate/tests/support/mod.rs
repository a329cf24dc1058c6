//! What the tests share: fixtures, and the check that a migration's output validates and renders.

#![allow(dead_code)]

use k8s_openapi::api::core::v1::EnvVar;
use kubetrain_api::constants::ANCESTOR_LABEL;
use kubetrain_api::jobset::JobSet;
use kubetrain_api::validation::validate_document;
use kubetrain_api::{Document, FieldError, RuntimeCatalog};
use kubetrain_jobset::ssh::seeded_rng;
use kubetrain_jobset::{Observed, RenderOptions, builtin, render_trainjob};
use kubetrain_migrate::Migration;
use serde_json::Value;

/// The documents of `tests/fixtures/<name>`.
pub fn fixture(name: &str) -> Vec<Value> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    kubetrain_yaml::split_documents(&text)
        .into_iter()
        .filter(|(_, t)| !t.trim().is_empty())
        .map(|(_, t)| kubetrain_yaml::fast::from_str(t).expect("fixture YAML"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// The built-in runtimes plus the migration's own.
pub fn catalog(migration: &Migration) -> RuntimeCatalog {
    let mut catalog = builtin::catalog();
    for runtime in &migration.runtimes {
        assert!(catalog.add_document(runtime), "a runtime document");
    }
    catalog
}

fn errors(findings: Vec<FieldError>) -> Vec<String> {
    findings
        .into_iter()
        .filter(FieldError::is_error)
        .map(|e| e.to_string())
        .collect()
}

/// Every runtime and TrainJob of `migration` passes `kubetrain validate`, and every TrainJob renders.
pub fn validated(migration: &Migration) {
    let catalog = catalog(migration);
    for runtime in &migration.runtimes {
        let found = errors(validate_document(runtime, &catalog));
        assert!(found.is_empty(), "runtime {}: {found:?}", runtime.name());
    }
    for (index, job) in migration.jobs.iter().enumerate() {
        let document = Document::TrainJob(Box::new(job.trainjob.clone()));
        let found = errors(validate_document(&document, &catalog));
        assert!(
            found.is_empty(),
            "TrainJob {}: {found:?}",
            job.trainjob.metadata.name.as_deref().unwrap_or("")
        );
        same_world(job, &rendered(migration, index));
    }
}

/// The rendered JobSet runs what the TrainJob says: `numNodes` pods of replicatedJob node, the trainer's image
/// in the trainer step's `node` container.
fn same_world(job: &kubetrain_migrate::MigratedJob, jobset: &JobSet) {
    let trainer = job.trainjob.spec.trainer.as_ref().expect("a trainer");
    let source = &job.report.source;
    let rjobs = &jobset.spec.replicated_jobs;
    let node = rjobs
        .iter()
        .find(|r| r.name == "node")
        .unwrap_or_else(|| panic!("{source}: no node job"));
    let parallelism = node.template.spec.as_ref().and_then(|s| s.parallelism);
    assert_eq!(parallelism, trainer.num_nodes, "{source}: node pods");
    let step = rjobs
        .iter()
        .find(|r| {
            r.template
                .metadata
                .as_ref()
                .and_then(|m| m.labels.as_ref())
                .and_then(|l| l.get(ANCESTOR_LABEL))
                == Some(&"trainer".to_owned())
        })
        .unwrap_or_else(|| panic!("{source}: no trainer step"));
    let pod = step
        .template
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("a pod spec");
    let container = pod
        .containers
        .iter()
        .find(|c| c.name == "node")
        .expect("a node container");
    assert_eq!(container.image, trainer.image, "{source}: trainer image");
}

/// The JobSet job `index` renders into.
pub fn rendered(migration: &Migration, index: usize) -> JobSet {
    let catalog = catalog(migration);
    let job = &migration.jobs[index].trainjob;
    let rendered = render_trainjob(
        job,
        &catalog,
        &Observed::default(),
        &RenderOptions::default(),
        &mut seeded_rng(0),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", migration.jobs[index].report.source));
    rendered.jobset().expect("a JobSet").clone()
}

/// The literal value of env var `name`.
pub fn env_value<'a>(env: &'a [EnvVar], name: &str) -> Option<&'a str> {
    env.iter()
        .find(|e| e.name == name)
        .and_then(|e| e.value.as_deref())
}

/// What the v1 operator would have run for `job`, computed from the v1 JSON alone (the test's oracle): the
/// number of training pods and the image of the container that starts training.
pub fn v1_world(job: &Value) -> (i32, String) {
    let kind = job["kind"].as_str().unwrap_or_default();
    let field = kubetrain_migrate::v1::V1Kind::from_name(kind)
        .expect("a v1 kind")
        .replica_specs_field();
    let specs = &job["spec"][field];
    let replicas = |role: &str| {
        specs
            .get(role)
            .map(|s| s["replicas"].as_i64().unwrap_or(1) as i32)
    };
    let (node_roles, image_role): (Vec<&str>, Option<&str>) = match kind {
        "PyTorchJob" | "XGBoostJob" | "PaddleJob" => (vec!["Master", "Worker"], None),
        "MPIJob" => (vec!["Worker"], Some("Launcher")),
        "TFJob" => {
            let first = ["Worker", "Chief", "Master"]
                .into_iter()
                .find(|r| specs.get(*r).is_some());
            (first.into_iter().collect(), None)
        }
        _ => (vec!["Worker"], None),
    };
    let nodes: i32 = node_roles.iter().filter_map(|r| replicas(r)).sum();
    // An elastic PyTorchJob starts within its bounds (v1's defaulting: a missing bound takes the other's
    // value, both missing take the Worker replicas).
    let elastic = &job["spec"]["elasticPolicy"];
    let nodes = if kind == "PyTorchJob" && elastic.is_object() {
        let bound = |b: &str| elastic[b].as_i64().map(|v| v as i32);
        let workers = replicas("Worker").unwrap_or(nodes);
        let min = bound("minReplicas")
            .or(bound("maxReplicas"))
            .unwrap_or(workers);
        let max = bound("maxReplicas")
            .or(bound("minReplicas"))
            .unwrap_or(workers);
        nodes.clamp(min, max.max(min))
    } else {
        nodes
    };
    let role = image_role
        .or_else(|| node_roles.iter().copied().find(|r| specs.get(*r).is_some()))
        .unwrap();
    let containers = specs[role]["template"]["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let main_name = kubetrain_migrate::v1::V1Kind::from_name(kind)
        .unwrap()
        .default_container();
    let main = containers
        .iter()
        .find(|c| c["name"] == main_name)
        .or(containers.first())
        .expect("a container");
    (nodes, main["image"].as_str().unwrap_or_default().to_owned())
}

/// The migration of the one v1 job `job` runs the world v1 ran: [`v1_world`] against the TrainJob (which
/// [`validated`] holds to the rendered JobSet).
pub fn same_world_as_v1(job: &Value, migration: &Migration) {
    let (nodes, image) = v1_world(job);
    let trainer = migration.jobs[0]
        .trainjob
        .spec
        .trainer
        .as_ref()
        .expect("a trainer");
    assert_eq!(trainer.num_nodes, Some(nodes), "{job}");
    assert_eq!(trainer.image.as_deref(), Some(image.as_str()), "{job}");
}
