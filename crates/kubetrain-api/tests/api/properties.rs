//! Laws of reading and validation over generated TrainJobs.

use kubetrain_api::validation::validate_document;
use kubetrain_api::{Document, RuntimeCatalog, parse_documents, to_yaml};
use proptest::prelude::*;

fn trainjob_yaml(
    name: &str,
    nodes: i32,
    procs: Option<i32>,
    env: &[(String, String)],
    suspend: Option<bool>,
) -> String {
    let mut yaml = format!(
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: '{name}'}}\nspec:\n  runtimeRef: {{name: torch-distributed}}\n  trainer:\n    numNodes: {nodes}\n"
    );
    if let Some(procs) = procs {
        yaml.push_str(&format!("    numProcPerNode: {procs}\n"));
    }
    if !env.is_empty() {
        yaml.push_str("    env:\n");
        for (k, v) in env {
            yaml.push_str(&format!("      - {{name: '{k}', value: '{v}'}}\n"));
        }
    }
    if let Some(suspend) = suspend {
        yaml.push_str(&format!("  suspend: {suspend}\n"));
    }
    yaml
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Reading, writing and reading again gives the same object.
    #[test]
    fn yaml_round_trip_is_identity(
        name in "[a-z][a-z0-9-]{0,20}[a-z0-9]",
        nodes in any::<i32>(),
        procs in proptest::option::of(any::<i32>()),
        env in proptest::collection::vec(("[A-Z_]{1,8}", "[a-z0-9 ]{0,8}"), 0..4),
        suspend in proptest::option::of(any::<bool>()),
    ) {
        let text = trainjob_yaml(&name, nodes, procs, &env, suspend);
        let first = parse_documents(&text).expect("generated YAML is valid").remove(0).document;
        let written = match &first { Document::TrainJob(job) => to_yaml(job).expect("serializes"), _ => unreachable!() };
        let second = parse_documents(&written).expect("written YAML reads back").remove(0).document;
        prop_assert_eq!(first, second);
    }

    /// The node-count and process-count boundaries hold for every value: numNodes >= 0, numProcPerNode >= 1.
    #[test]
    fn count_boundaries(nodes in -5i32..5, procs in proptest::option::of(-3i32..3)) {
        let text = trainjob_yaml("job", nodes, procs, &[], None);
        let doc = parse_documents(&text).expect("valid YAML").remove(0).document;
        let errors: Vec<String> = validate_document(&doc, &RuntimeCatalog::new()).iter().map(ToString::to_string).collect();
        let nodes_rejected = errors.iter().any(|e| e.contains("spec.trainer.numNodes: Invalid value"));
        let procs_rejected = errors.iter().any(|e| e.contains("numProcPerNode must be greater than or equal to 1"));
        prop_assert_eq!(nodes_rejected, nodes < 0);
        prop_assert_eq!(procs_rejected, procs.is_some_and(|p| p < 1));
    }

    /// Any mapping document is either read or rejected with findings; reading never panics.
    #[test]
    fn arbitrary_specs_never_panic(spec in proptest::collection::btree_map("[a-zA-Z]{1,12}", "[a-z0-9{}\\[\\]: ]{0,12}", 0..6)) {
        let mut text = String::from("apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: x}\nspec:\n");
        for (k, v) in &spec {
            text.push_str(&format!("  {k}: {v}\n"));
        }
        if let Ok(docs) = parse_documents(&text) {
            for d in docs {
                let _ = validate_document(&d.document, &RuntimeCatalog::new());
            }
        }
    }
}
