//! Helpers shared by the render tests: parsing fixtures and reading rendered objects.

use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec};
use kubetrain_api::jobset::{JobSet, ReplicatedJob};
use kubetrain_api::{Document, RuntimeCatalog, TrainJob, parse_documents};
use kubetrain_jobset::{Object, Observed, Rendered, builtin, render, resolve, ssh::seeded_rng};

/// Parses a YAML stream into TrainJobs, adding its runtimes to `catalog`.
pub fn load(yaml: &str, catalog: &mut RuntimeCatalog) -> Vec<TrainJob> {
    let docs = parse_documents(yaml).unwrap_or_else(|e| panic!("fixture does not parse: {e}"));
    let mut jobs = Vec::new();
    for d in docs {
        match d.document {
            Document::TrainJob(j) => jobs.push(*j),
            other => {
                catalog.add_document(&other);
            }
        }
    }
    jobs
}

/// Renders the single TrainJob in `yaml` (runtimes in `yaml` first, built-ins after).
pub fn render_yaml(yaml: &str) -> Rendered {
    render_observed(yaml, &Observed::default())
}

/// Same as [`render_yaml`] with observed cluster facts.
pub fn render_observed(yaml: &str, observed: &Observed) -> Rendered {
    let mut catalog = RuntimeCatalog::new();
    let jobs = load(yaml, &mut catalog);
    for rt in builtin::runtimes() {
        catalog.add_cluster_if_absent(rt);
    }
    let job = jobs.first().expect("a TrainJob in the fixture");
    let runtime = resolve(&catalog, job).unwrap_or_else(|e| panic!("{e}"));
    render(job, runtime, observed, &mut seeded_rng(42)).unwrap_or_else(|e| panic!("{e}"))
}

pub fn jobset(r: &Rendered) -> &JobSet {
    r.objects
        .first()
        .and_then(Object::as_jobset)
        .expect("the JobSet comes first")
}

pub fn rjob<'a>(js: &'a JobSet, name: &str) -> &'a ReplicatedJob {
    js.spec
        .replicated_jobs
        .iter()
        .find(|r| r.name == name)
        .unwrap_or_else(|| panic!("no replicatedJob {name}"))
}

pub fn pod<'a>(js: &'a JobSet, name: &str) -> &'a PodSpec {
    rjob(js, name)
        .template
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
}

pub fn container<'a>(js: &'a JobSet, job: &str, name: &str) -> &'a Container {
    pod(js, job)
        .containers
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no container {name} in {job}"))
}

pub fn env<'a>(c: &'a Container, name: &str) -> Option<&'a EnvVar> {
    c.env.iter().flatten().find(|e| e.name == name)
}

pub fn env_value(c: &Container, name: &str) -> Option<String> {
    env(c, name).and_then(|e| e.value.clone())
}

pub fn env_names(c: &Container) -> Vec<String> {
    c.env.iter().flatten().map(|e| e.name.clone()).collect()
}

pub fn parallelism(js: &JobSet, name: &str) -> (Option<i32>, Option<i32>) {
    let spec = rjob(js, name).template.spec.as_ref().unwrap();
    (spec.parallelism, spec.completions)
}

pub fn find<'a>(r: &'a Rendered, kind: &str, name: &str) -> Option<&'a Object> {
    r.objects
        .iter()
        .find(|o| o.kind() == kind && o.name() == name)
}
