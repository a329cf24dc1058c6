//! The generated CRDs cover upstream's: every property path, CEL rule, default and list-map key of the upstream
//! CRD schemas exists in ours. Skips when `../shared/upstream` is not beside the repository (CI fails instead:
//! `shared_data`).

use std::collections::BTreeSet;

use crate::shared_data;
use kubetrain_api::crd;
use serde_json::Value;

fn upstream_schema(file: &str) -> Option<Value> {
    let path = shared_data::shared_dir("upstream/trainer/crds")?.join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{} is in the shared data: {e}", path.display()));
    let crd: Value = serde_saphyr::from_str(&text).expect("upstream CRD is YAML");
    Some(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone())
}

/// Facts of a schema: property paths, plus the rules, defaults and list keys found at each path.
fn facts(schema: &Value, path: &str, out: &mut BTreeSet<String>) {
    if let Some(rules) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        for rule in rules {
            let text: String = rule["rule"]
                .as_str()
                .unwrap_or_default()
                .split_whitespace()
                .collect();
            out.insert(format!("{path} rule {text}"));
        }
    }
    if let Some(default) = schema.get("default") {
        out.insert(format!("{path} default {default}"));
    }
    if let Some(keys) = schema.get("x-kubernetes-list-map-keys") {
        out.insert(format!("{path} keys {keys}"));
    }
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (key, child) in properties {
            let child_path = format!("{path}.{key}");
            out.insert(child_path.clone());
            facts(child, &child_path, out);
        }
    }
    if let Some(items) = schema.get("items") {
        facts(items, &format!("{path}[]"), out);
    }
    if let Some(additional) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        facts(additional, &format!("{path}{{}}"), out);
    }
}

fn assert_covers(upstream: &Value, ours: &Value) {
    let (mut theirs, mut mine) = (BTreeSet::new(), BTreeSet::new());
    facts(upstream, "", &mut theirs);
    facts(ours, "", &mut mine);
    let missing: Vec<&String> = theirs.difference(&mine).collect();
    assert!(
        missing.is_empty(),
        "{} upstream facts missing from our CRD, e.g.:\n{:#?}",
        missing.len(),
        &missing[..missing.len().min(40)]
    );
    assert!(theirs.len() > 100, "upstream schema looks empty");
}

/// `(path, declared properties)` of every `metadata` schema below the root.
fn metadata_nodes(schema: &Value, path: &str, out: &mut Vec<(String, Vec<String>)>) {
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (key, child) in properties {
            let child_path = format!("{path}.{key}");
            if key == "metadata" && !path.is_empty() {
                let declared = child
                    .get("properties")
                    .and_then(Value::as_object)
                    .map(|p| p.keys().cloned().collect())
                    .unwrap_or_default();
                out.push((child_path.clone(), declared));
            }
            metadata_nodes(child, &child_path, out);
        }
    }
    if let Some(items) = schema.get("items") {
        metadata_nodes(items, &format!("{path}[]"), out);
    }
    if let Some(additional) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        metadata_nodes(additional, &format!("{path}{{}}"), out);
    }
}

/// Every embedded `metadata` declares exactly upstream's properties: a bare object would make the API server
/// prune a template's name and labels, and extra properties would keep what upstream's server prunes.
fn assert_embedded_metadata_matches(upstream: &Value, ours: &Value) {
    let (mut theirs, mut mine) = (Vec::new(), Vec::new());
    metadata_nodes(upstream, "", &mut theirs);
    metadata_nodes(ours, "", &mut mine);
    assert!(!theirs.is_empty(), "upstream declares embedded metadata");
    for (path, declared) in &theirs {
        let found = mine.iter().find(|(p, _)| p == path);
        assert_eq!(
            found.map(|(_, d)| d),
            Some(declared),
            "{path}: our metadata properties differ from upstream's"
        );
    }
    let five = ["annotations", "finalizers", "labels", "name", "namespace"];
    for (path, declared) in &mine {
        assert_eq!(
            declared, &five,
            "{path}: not upstream's embedded ObjectMeta"
        );
    }
}

fn schema_of(
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> Value {
    serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref()),
    )
    .unwrap()
}

#[test]
fn trainjob_crd_covers_upstream() {
    let Some(upstream) = upstream_schema("trainer.kubeflow.org_trainjobs.yaml") else {
        return;
    };
    assert_covers(&upstream, &schema_of(&crd::trainjob_crd()));
    assert_embedded_metadata_matches(&upstream, &schema_of(&crd::trainjob_crd()));
}

#[test]
fn training_runtime_crd_covers_upstream() {
    let Some(upstream) = upstream_schema("trainer.kubeflow.org_trainingruntimes.yaml") else {
        return;
    };
    assert_covers(&upstream, &schema_of(&crd::training_runtime_crd()));
    assert_embedded_metadata_matches(&upstream, &schema_of(&crd::training_runtime_crd()));
}

#[test]
fn cluster_training_runtime_crd_covers_upstream() {
    let Some(upstream) = upstream_schema("trainer.kubeflow.org_clustertrainingruntimes.yaml")
    else {
        return;
    };
    assert_covers(&upstream, &schema_of(&crd::cluster_training_runtime_crd()));
    assert_embedded_metadata_matches(&upstream, &schema_of(&crd::cluster_training_runtime_crd()));
}

#[test]
fn trainjob_crd_has_status_subresource_and_columns() {
    let crd = crd::trainjob_crd();
    let version = &crd.spec.versions[0];
    assert!(
        version
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some()
    );
    let columns: Vec<&str> = version
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.json_path.as_str())
        .collect();
    assert_eq!(
        columns,
        [
            ".status.conditions[-1:].type",
            ".metadata.creationTimestamp"
        ]
    );
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd::cluster_training_runtime_crd().spec.scope, "Cluster");
}
