//! Every upstream runtime and every valid upstream TrainJob parses and serializes back to the same data.
//! Reads `../shared/upstream/trainer` when it exists; a clone without it skips these tests with a message (CI
//! fails instead: `shared_data`).

use std::path::{Path, PathBuf};

use crate::shared_data;
use kubetrain_api::{ParseError, parse_documents};
use serde_json::Value;

fn upstream(dir: &str) -> Option<PathBuf> {
    shared_data::shared_dir(&format!("upstream/trainer/{dir}"))
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("readable dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

/// Compares as data: numbers equal strings with the same text (quantities), nulls and empty lists equal absence.
fn same_data(input: &Value, output: &Value, path: &str) -> Result<(), String> {
    match (input, output) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let here = format!("{path}.{key}");
                match b.get(key) {
                    Some(other) => same_data(value, other, &here)?,
                    None if value.is_null() || value.as_array().is_some_and(Vec::is_empty) => {}
                    None => return Err(format!("{here} was dropped")),
                }
            }
            for key in b.keys() {
                if !a.contains_key(key) {
                    return Err(format!("{path}.{key} was added"));
                }
            }
            Ok(())
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .try_for_each(|(i, (x, y))| same_data(x, y, &format!("{path}[{i}]"))),
        (Value::Number(n), Value::String(s)) if n.to_string() == *s => Ok(()),
        (a, b) if a == b => Ok(()),
        (a, b) => Err(format!("{path}: {a} became {b}")),
    }
}

fn check_round_trip(file: &Path) -> Result<usize, String> {
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let documents = parse_documents(&text).map_err(|e| match e {
        ParseError::Fields(errors) => errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    })?;
    let inputs: Vec<Value> = serde_saphyr::from_multiple(&text).map_err(|e| e.to_string())?;
    let inputs: Vec<&Value> = inputs.iter().filter(|v| !v.is_null()).collect();
    for (document, input) in documents.iter().zip(inputs) {
        same_data(input, &document.document.to_value(), "")?;
    }
    Ok(documents.len())
}

#[test]
fn upstream_runtimes_round_trip() {
    let Some(dir) = upstream("runtimes") else {
        return;
    };
    let mut count = 0;
    for file in yaml_files(&dir) {
        count += check_round_trip(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    }
    assert!(count >= 9, "expected every shipped runtime, read {count}");
}

/// Doc snippets that upstream's README lists as stale or invalid against the v2.3 API.
const KNOWN_INVALID: [&str; 4] = [
    "docs-operator-guides-runtime-1.yaml",
    "docs-operator-guides-runtime-3.yaml",
    "docs-operator-guides-job-scheduling-kai-1.yaml",
    "docs-operator-guides-runtime-patches-2.yaml",
];

#[test]
fn valid_upstream_trainjobs_round_trip() {
    let Some(dir) = upstream("trainjobs") else {
        return;
    };
    let mut count = 0;
    for file in yaml_files(&dir) {
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if KNOWN_INVALID.contains(&name) {
            continue;
        }
        count += check_round_trip(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    }
    assert!(count >= 15, "read only {count} documents");
}

#[test]
fn stale_upstream_snippets_are_rejected_with_paths() {
    let Some(dir) = upstream("trainjobs") else {
        return;
    };
    let expectations = [
        (
            "docs-operator-guides-runtime-1.yaml",
            "spec.mlPolicy.torch.numProcPerNode: unknown field",
        ),
        (
            "docs-operator-guides-runtime-3.yaml",
            "spec.mlPolicy.torch.numProcPerNode: unknown field",
        ),
        (
            "docs-operator-guides-job-scheduling-kai-1.yaml",
            "unknown field",
        ),
    ];
    for (name, expected) in expectations {
        let text = std::fs::read_to_string(dir.join(name)).expect("readable");
        match parse_documents(&text) {
            Err(ParseError::Fields(errors)) => {
                let shown: Vec<String> = errors.iter().map(ToString::to_string).collect();
                assert!(
                    shown.iter().any(|e| e.contains(expected)),
                    "{name}: {shown:#?}"
                );
            }
            other => panic!("{name} should be rejected, got {other:?}"),
        }
    }
}
