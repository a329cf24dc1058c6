//! `validate` and `render` agree: every render entry point refuses what the API server would refuse, with the
//! errors `kubetrain validate` gives, and `render_trainjob` (validate, resolve, render in one call) fails exactly
//! when `validate` reports an error — so nothing `validate` passes is refused by the renderer.

use crate::common;
use kubetrain_api::validation::validate_trainjob;
use kubetrain_api::{FieldError, RuntimeCatalog, TrainJob};
use kubetrain_jobset::{
    Observed, RenderError, RenderOptions, builtin, render, render_trainjob, resolve,
    ssh::seeded_rng,
};
use proptest::prelude::*;

fn trainjob(name: &str, runtime: &str, trainer: &str) -> String {
    format!(
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: {name}, namespace: ns}}\n\
         spec:\n  runtimeRef: {{name: {runtime}}}\n  trainer: {{{trainer}}}\n"
    )
}

fn parse(yaml: &str) -> (TrainJob, RuntimeCatalog) {
    let mut catalog = builtin::catalog();
    // The elastic example runtime (`torch-elastic`, minNodes 2, maxNodes 4) beside the built-ins.
    common::load(
        include_str!("../../../../examples/manifests/elastic-runtime.yaml"),
        &mut catalog,
    );
    let job = common::load(yaml, &mut catalog).remove(0);
    (job, catalog)
}

fn errors_of(job: &TrainJob, catalog: &RuntimeCatalog) -> Vec<FieldError> {
    validate_trainjob(job, catalog)
        .into_iter()
        .filter(FieldError::is_error)
        .collect()
}

fn render_one(
    job: &TrainJob,
    catalog: &RuntimeCatalog,
) -> Result<kubetrain_jobset::Rendered, RenderError> {
    render_trainjob(
        job,
        catalog,
        &Observed::default(),
        &RenderOptions::default(),
        &mut seeded_rng(7),
    )
}

/// The cases: what `render` used to render or `validate` used to pass, now refused by both at the
/// same field path.
#[test]
fn render_and_validate_refuse_the_same_trainjobs_at_the_same_path() {
    let table = [
        // (runtime, trainer, field path): parallelism -1 was rendered before.
        ("torch-distributed", "numNodes: -1", "spec.trainer.numNodes"),
        // `validate` passed it; the renderer refused the hostfile.
        (
            "deepspeed-distributed",
            "numNodes: 100001",
            "spec.trainer.numNodes",
        ),
    ];
    for (runtime, trainer, path) in table {
        let (job, catalog) = parse(&trainjob("agree", runtime, trainer));
        let errors = errors_of(&job, &catalog);
        assert!(
            errors.iter().any(|e| e.path == path),
            "{runtime} {trainer}: validate must refuse at {path}: {errors:?}"
        );
        let error = render_one(&job, &catalog).expect_err(trainer);
        assert_eq!(error.field_path(), path, "{runtime} {trainer}: {error}");
        let RenderError::Invalid { errors: refused } = error else {
            panic!("{runtime} {trainer}: not the validation errors: {error:?}")
        };
        assert_eq!(
            refused, errors,
            "{runtime} {trainer}: the same errors as validate"
        );
    }
}

/// The plain render entry points take a resolved runtime and check what the API server checks.
#[test]
fn render_refuses_what_the_api_server_refuses() {
    let (job, catalog) = parse(&trainjob("agree", "torch-distributed", "numNodes: -1"));
    let runtime = resolve(&catalog, &job).unwrap();
    let error = render(&job, runtime, &Observed::default(), &mut seeded_rng(1)).unwrap_err();
    assert_eq!(
        error.to_string(),
        "spec.trainer.numNodes: Invalid value: -1: should be greater than or equal to 0"
    );
    let (job, _) = parse(&trainjob("Not_A_Name", "torch-distributed", "numNodes: 1"));
    let error = render(&job, runtime, &Observed::default(), &mut seeded_rng(1)).unwrap_err();
    assert!(matches!(error, RenderError::Invalid { .. }), "{error:?}");
    assert!(error.to_string().contains("metadata.name"), "{error}");
}

#[test]
fn rendered_jobset_is_the_jobset_object() {
    let (job, catalog) = parse(&trainjob("agree", "torch-distributed", "numNodes: 2"));
    let rendered = render_one(&job, &catalog).unwrap();
    let jobset = rendered.jobset().expect("a JobSet");
    assert_eq!(jobset.metadata.name.as_deref(), Some("agree"));
    assert_eq!(Some(jobset), rendered.objects[0].as_jobset());
}

fn any_trainjob() -> impl Strategy<Value = String> {
    let runtimes = vec![
        "torch-distributed",
        "torch-elastic",
        "deepspeed-distributed",
        "mlx-distributed",
        "jax-distributed",
        "xgboost-distributed",
        "torchtune-llama3.2-1b",
        "missing-runtime",
    ];
    let nodes = prop_oneof![
        Just(None),
        (-3i32..12).prop_map(Some),
        prop::sample::select(vec![99_999, 100_000, 100_001, i32::MAX]).prop_map(Some),
    ];
    let env = prop::sample::select(vec![
        "",
        "MY_VAR",
        "PET_NNODES",
        "PET_RDZV_ENDPOINT",
        "OMPI_MCA_orte_keep_fqdn_hostnames",
        "DMLC_TRACKER_URI",
    ]);
    (
        prop::sample::select(vec!["law", "Bad_Name", "x"]),
        prop::sample::select(runtimes),
        nodes,
        prop::option::of(-1i32..4),
        env,
        prop::option::of(-1i32..3),
    )
        .prop_map(|(name, runtime, nodes, procs, env, gpus)| {
            let mut trainer = Vec::new();
            if let Some(n) = nodes {
                trainer.push(format!("numNodes: {n}"));
            }
            if let Some(p) = procs {
                trainer.push(format!("numProcPerNode: {p}"));
            }
            if !env.is_empty() {
                trainer.push(format!("env: [{{name: {env}, value: v}}]"));
            }
            if let Some(g) = gpus {
                trainer.push(format!(
                    "resourcesPerNode: {{limits: {{nvidia.com/gpu: '{g}'}}}}"
                ));
            }
            trainjob(name, runtime, &trainer.join(", "))
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// One law for every generated TrainJob: the one-call render fails exactly when `validate` reports an
    /// error, and then with `validate`'s errors.
    #[test]
    fn validate_and_render_agree(yaml in any_trainjob()) {
        let (job, catalog) = parse(&yaml);
        let errors = errors_of(&job, &catalog);
        match render_one(&job, &catalog) {
            Ok(_) => prop_assert!(errors.is_empty(), "rendered, but validate refuses: {:?}", errors),
            Err(RenderError::Invalid { errors: refused }) => prop_assert_eq!(refused, errors),
            Err(other) => prop_assert!(false, "validate passed ({:?}) what render refuses: {}", errors, other),
        }
    }
}
