//! The built-in runtimes: upstream's shipped ClusterTrainingRuntimes, written by us and embedded in the
//! binary so that `kubetrain render` and `kubetrain validate` work with no cluster and no runtime file.

/// Name and YAML text of every built-in ClusterTrainingRuntime, in a stable order.
pub const SOURCES: &[(&str, &str)] = &[
    (
        "torch-distributed",
        include_str!("../runtimes/torch-distributed.yaml"),
    ),
    (
        "torch-distributed-with-cache",
        include_str!("../runtimes/torch-distributed-with-cache.yaml"),
    ),
    (
        "deepspeed-distributed",
        include_str!("../runtimes/deepspeed-distributed.yaml"),
    ),
    (
        "mlx-distributed",
        include_str!("../runtimes/mlx-distributed.yaml"),
    ),
    (
        "jax-distributed",
        include_str!("../runtimes/jax-distributed.yaml"),
    ),
    (
        "xgboost-distributed",
        include_str!("../runtimes/xgboost-distributed.yaml"),
    ),
    (
        "torchtune-llama3.2-1b",
        include_str!("../runtimes/torchtune-llama3.2-1b.yaml"),
    ),
    (
        "torchtune-llama3.2-3b",
        include_str!("../runtimes/torchtune-llama3.2-3b.yaml"),
    ),
    (
        "torchtune-qwen2.5-1.5b",
        include_str!("../runtimes/torchtune-qwen2.5-1.5b.yaml"),
    ),
];

/// The built-in runtimes, parsed, in [`SOURCES`] order, as a cluster stores them once applied: with their CRD's
/// schema defaults filled in ([`kubetrain_api::crd::with_defaults`]; `replicas: 1` and `groupName: default` on
/// every replicatedJob, …). `kubetrain validate` and `kubetrain render` resolve `runtimeRef` against them when
/// no runtime file is given.
///
/// ```
/// let names: Vec<String> = kubetrain_jobset::builtin::runtimes().iter().map(|r| r.name().to_owned()).collect();
/// assert!(names.contains(&"deepspeed-distributed".to_owned()));
/// ```
pub fn runtimes() -> Vec<kubetrain_api::ClusterTrainingRuntime> {
    SOURCES
        .iter()
        .filter_map(|(_, yaml)| {
            // The sources are ours and parse (tested below); a failure would drop that runtime, not panic.
            let docs = kubetrain_api::parse_documents(yaml).ok()?;
            docs.into_iter().find_map(|d| match d.document {
                kubetrain_api::Document::ClusterTrainingRuntime(rt) => {
                    Some(kubetrain_api::crd::with_defaults(&*rt).unwrap_or(*rt))
                }
                _ => None,
            })
        })
        .collect()
}

/// A runtime catalog holding the built-in runtimes.
///
/// ```
/// let catalog = kubetrain_jobset::builtin::catalog();
/// assert!(catalog.cluster_names().any(|n| n == "torch-distributed"));
/// ```
pub fn catalog() -> kubetrain_api::RuntimeCatalog {
    let mut catalog = kubetrain_api::RuntimeCatalog::new();
    for runtime in runtimes() {
        catalog.add_cluster(runtime);
    }
    catalog
}

/// The YAML text of the built-in runtime `name`, if there is one.
///
/// ```
/// let yaml = kubetrain_jobset::builtin::source("torch-distributed").unwrap();
/// assert!(yaml.contains("kind: ClusterTrainingRuntime"));
/// assert!(kubetrain_jobset::builtin::source("no-such-runtime").is_none());
/// ```
pub fn source(name: &str) -> Option<&'static str> {
    SOURCES.iter().find(|(n, _)| *n == name).map(|(_, y)| *y)
}

// Declared here, not inside `mod tests`: there the path would start from the nonexistent src/builtin/tests/.
#[cfg(test)]
#[path = "../../../tests/support/shared_data.rs"]
mod shared_data;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn parse(yaml: &str) -> Value {
        serde_saphyr::from_str(yaml).expect("runtime YAML parses")
    }

    #[test]
    fn every_source_parses_as_a_typed_runtime() {
        assert_eq!(runtimes().len(), SOURCES.len());
    }

    #[test]
    fn names_match_the_documents() {
        for (name, yaml) in SOURCES {
            let doc = parse(yaml);
            assert_eq!(doc["metadata"]["name"], *name);
            assert_eq!(doc["kind"], "ClusterTrainingRuntime");
            assert_eq!(doc["apiVersion"], "trainer.kubeflow.org/v1alpha1");
        }
    }

    /// Our hand-written runtimes must equal upstream's shipped ones as data.
    #[test]
    fn equal_to_upstream_runtimes_as_data() {
        let Some(dir) = shared_data::shared_dir("upstream/trainer/runtimes") else {
            return;
        };
        let entries = std::fs::read_dir(&dir).expect("readable shared directory");
        let mut compared = 0;
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "yaml") {
                continue;
            }
            // The shared copy holds the development placeholder `data-cache:latest`; upstream's v2.3.0 release
            // manifests (the module at that tag, run side by side in e2e) pin `data-cache:v2.3.0`, as ours do.
            let text = std::fs::read_to_string(&path)
                .unwrap()
                .replace("trainer/data-cache:latest", "trainer/data-cache:v2.3.0");
            let upstream = parse(&text);
            let name = upstream["metadata"]["name"].as_str().unwrap().to_owned();
            let ours = source(&name).unwrap_or_else(|| panic!("no built-in runtime {name}"));
            assert_eq!(
                parse(ours),
                upstream,
                "{name} differs from {}",
                path.display()
            );
            compared += 1;
        }
        assert_eq!(
            compared,
            SOURCES.len(),
            "every built-in runtime has an upstream counterpart"
        );
    }
}
