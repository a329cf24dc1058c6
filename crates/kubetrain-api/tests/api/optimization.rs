//! OptimizationJobs: upstream's CRD rules (CEL after defaulting) and kubetrain's search rules, each finding at
//! its field path, and unknown fields with a did-you-mean.

use kubetrain_api::validation::validate_document;
use kubetrain_api::{Document, OptimizationJob, ParseError, RuntimeCatalog, parse_documents};

const RUNTIME: &str = r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: torch-distributed}
spec:
  mlPolicy: {numNodes: 1, torch: {}}
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
            spec:
              template:
                spec:
                  containers: [{name: node, image: pytorch}]
"#;

/// An OptimizationJob in upstream's shape with `extra` lines appended to its spec.
fn job(annotations: &str, spec: &str) -> String {
    format!(
        r#"apiVersion: trainer.kubeflow.org/v1alpha1
kind: OptimizationJob
metadata:
  name: sweep
  namespace: default
  annotations: {{{annotations}}}
spec:
  objectives: [{{metric: loss}}]
  trainJobTemplate:
    spec:
      runtimeRef: {{name: torch-distributed}}
{spec}
"#
    )
}

const PARAMETERS: &str = r#"  parameters:
    - name: lr
      searchSpace: {logUniform: {min: "1e-4", max: "1e-1"}}
    - name: batch-size
      searchSpace: {categorical: {choices: ["16", "32"]}}"#;

fn catalog() -> RuntimeCatalog {
    let mut catalog = RuntimeCatalog::new();
    for doc in parse_documents(RUNTIME).expect("runtime parses") {
        catalog.add_document(&doc.document);
    }
    catalog
}

fn findings(yaml: &str) -> Vec<String> {
    let docs = match parse_documents(yaml) {
        Ok(docs) => docs,
        Err(ParseError::Fields(errors)) => return errors.iter().map(ToString::to_string).collect(),
        Err(e) => panic!("{e}"),
    };
    validate_document(&docs[0].document, &catalog())
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn has(found: &[String], expected: &str) {
    assert!(
        found.iter().any(|f| f == expected),
        "expected {expected:?} among {found:#?}"
    );
}

#[test]
fn an_upstream_shaped_job_is_valid_and_defaulted() {
    let yaml = job("", PARAMETERS);
    assert_eq!(findings(&yaml), Vec::<String>::new());
    let docs = parse_documents(&yaml).unwrap();
    let Document::OptimizationJob(parsed) = &docs[0].document else {
        panic!("an OptimizationJob")
    };
    let stored: OptimizationJob = kubetrain_api::crd::with_defaults(&**parsed).unwrap();
    assert_eq!(stored.spec.num_trials, Some(1));
    assert_eq!(stored.spec.parallel_trials, Some(1));
    assert_eq!(
        stored
            .spec
            .search_algorithm
            .as_ref()
            .map(|a| a.random.is_some()),
        Some(true)
    );
    assert_eq!(
        stored.spec.objectives[0].direction,
        Some(kubetrain_api::ObjectiveDirection::Minimize)
    );
    let space = &stored.spec.parameters[0].search_space;
    assert_eq!(
        space.log_uniform.as_ref().unwrap().type_,
        Some(kubetrain_api::ParameterType::Float)
    );
    // It round-trips: what we write back is what was read.
    let again = parse_documents(&kubetrain_api::to_yaml(&**parsed).unwrap()).unwrap();
    assert_eq!(again[0].document, docs[0].document);
}

#[test]
fn upstream_cel_rules_apply_after_defaulting() {
    let found = findings(&job(
        "",
        &format!("{PARAMETERS}\n  numTrials: 2\n  parallelTrials: 3"),
    ));
    has(
        &found,
        "OptimizationJob/sweep: spec: parallelTrials cannot exceed numTrials",
    );
    // parallelTrials defaults to 1 and numTrials to 1: no finding.
    assert!(findings(&job("", PARAMETERS)).is_empty());
    let grid = job(
        "",
        &format!("{PARAMETERS}\n  searchAlgorithm: {{grid: {{}}}}\n  numTrials: 2"),
    );
    has(
        &findings(&grid),
        "OptimizationJob/sweep: spec: Grid search requires all parameters to be Categorical; Uniform and LogUniform are not supported.",
    );
    let both = job(
        "",
        "  searchAlgorithm: {random: {}, grid: {}}\n  parameters:\n    - name: x\n      searchSpace: {uniform: {min: \"1\", max: \"1\"}, categorical: {choices: [a]}}",
    );
    let found = findings(&both);
    has(
        &found,
        "OptimizationJob/sweep: spec.searchAlgorithm: exactly one of the fields in [random grid] must be set",
    );
    has(
        &found,
        "OptimizationJob/sweep: spec.parameters[0].searchSpace: exactly one of the fields in [uniform logUniform categorical] must be set",
    );
    has(
        &found,
        "OptimizationJob/sweep: spec.parameters[0].searchSpace.uniform: min must be strictly less than max",
    );
    let log = job(
        "",
        "  parameters:\n    - name: x\n      searchSpace: {logUniform: {min: \"0\", max: \"1\"}}",
    );
    has(
        &findings(&log),
        "OptimizationJob/sweep: spec.parameters[0].searchSpace.logUniform: min must be strictly greater than 0",
    );
}

#[test]
fn schema_constraints_have_paths() {
    let yaml = job(
        "",
        "  numTrials: 101\n  parameters:\n    - name: x\n      searchSpace: {uniform: {min: \"abc\", max: \"1\"}}",
    );
    let found = findings(&yaml);
    assert!(
        found
            .iter()
            .any(|f| f.starts_with("OptimizationJob/sweep: spec.numTrials: Invalid value: 101")),
        "{found:#?}"
    );
    assert!(
        found
            .iter()
            .any(|f| f.starts_with("OptimizationJob/sweep: spec.parameters[0].searchSpace.uniform.min: Invalid value: \"abc\"")),
        "{found:#?}"
    );
    let named = job("", PARAMETERS).replace(
        "  trainJobTemplate:\n",
        "  trainJobTemplate:\n    metadata: {name: fixed}\n",
    );
    has(
        &findings(&named),
        "OptimizationJob/sweep: spec.trainJobTemplate.metadata: name and namespace cannot be set in a template.",
    );
}

#[test]
fn unknown_fields_get_a_did_you_mean() {
    let found = findings(&job("", &format!("{PARAMETERS}\n  numTrial: 3")));
    has(
        &found,
        "OptimizationJob/sweep: spec.numTrial: unknown field \"numTrial\"; did you mean \"numTrials\"?",
    );
    let found = findings(&job(
        "",
        "  parameters:\n    - name: x\n      searchSpace: {logUniform: {min: \"1\", max: \"2\", typ: Int}}",
    ));
    has(
        &found,
        "OptimizationJob/sweep: spec.parameters[0].searchSpace.logUniform.typ: unknown field \"typ\"; did you mean \"type\"?",
    );
}

#[test]
fn kubetrain_rules_for_the_search() {
    let yaml = job(
        "kubetrain.dev/search-algorithm: bayes, kubetrain.dev/early-stopping: hyperband",
        "  parameters:\n    - name: batch-size\n      searchSpace: {uniform: {min: \"0.2\", max: \"0.8\", type: Int}}\n    - name: batch_size\n      searchSpace: {uniform: {min: \"1e999\", max: \"2\"}}",
    );
    let found = findings(&yaml);
    has(
        &found,
        "OptimizationJob/sweep: spec.parameters[0].searchSpace.uniform: Invalid value: [0.2, 0.8]: type Int needs at least two integers between min and max",
    );
    has(
        &found,
        "OptimizationJob/sweep: spec.parameters[1].name: Invalid value: \"batch_size\": parameters \"batch-size\" and \"batch_size\" both become env var KUBEFLOW_TRAINER_OPT_BATCH_SIZE; rename one",
    );
    has(
        &found,
        "OptimizationJob/sweep: spec.parameters[1].searchSpace.uniform.min: Invalid value: \"1e999\": out of range for a 64-bit float; use a smaller exponent",
    );
    has(
        &found,
        "OptimizationJob/sweep: metadata.annotations[kubetrain.dev/search-algorithm]: Unsupported value: \"bayes\": supported values: \"tpe\" (random and grid are spec.searchAlgorithm)",
    );
    has(
        &found,
        "OptimizationJob/sweep: metadata.annotations[kubetrain.dev/early-stopping]: Unsupported value: \"hyperband\": supported values: \"median\"",
    );
    let tpe = job(
        "kubetrain.dev/search-algorithm: tpe, kubetrain.dev/early-stopping: median",
        &format!("{PARAMETERS}\n  numTrials: 4"),
    );
    assert_eq!(findings(&tpe), Vec::<String>::new());
}

#[test]
fn the_template_meets_the_trainjob_webhook_under_its_own_path() {
    let yaml = job("", PARAMETERS).replace("torch-distributed", "missing");
    has(
        &findings(&yaml),
        "OptimizationJob/sweep: spec.trainJobTemplate.spec.runtimeRef.name: ClusterTrainingRuntime \"missing\" not found; available: torch-distributed",
    );
}
