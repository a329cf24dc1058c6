//! Reading trainer objects from YAML or JSON, with field-path errors.
//!
//! A document is read into a `serde_json::Value` first, then into its typed form with the path of any type error,
//! then written back and compared with the input: whatever the input had that the typed form did not keep is an
//! unknown field (a typo, or a field removed upstream), reported with its path and the closest known name.
//! The common case (nothing unknown) is proven without building the written-back value, by serializing the
//! typed form next to the input; only a document that fails that proof is compared the long way.

use serde::Serialize;
use serde_json::Value;
use thiserror::Error;

use crate::constants::{
    API_VERSION, CLUSTER_TRAINING_RUNTIME_KIND, OPTIMIZATIONJOB_KIND, TRAINING_RUNTIME_KIND,
    TRAINJOB_KIND,
};
use crate::error::FieldError;
use crate::{ClusterTrainingRuntime, OptimizationJob, TrainJob, TrainingRuntime};
use kubetrain_yaml::kept_keys::is_empty_value;
use kubetrain_yaml::{MAX_DOCUMENT_BYTES, document_too_large, split_documents, yaml_error};

/// One parsed trainer object.
#[derive(Clone, Debug, PartialEq)]
pub enum Document {
    /// A TrainJob.
    TrainJob(Box<TrainJob>),
    /// A namespaced runtime.
    TrainingRuntime(Box<TrainingRuntime>),
    /// A cluster-scoped runtime.
    ClusterTrainingRuntime(Box<ClusterTrainingRuntime>),
    /// A hyperparameter search.
    OptimizationJob(Box<OptimizationJob>),
    /// An object of another API group (a Namespace, a Kueue queue, …), kept as data and not interpreted.
    Other {
        /// Its `apiVersion`.
        api_version: String,
        /// Its `kind`.
        kind: String,
        /// Its `metadata.name`, if any.
        name: Option<String>,
    },
}

impl Document {
    /// Kind of the object.
    pub fn kind(&self) -> &str {
        match self {
            Self::TrainJob(_) => TRAINJOB_KIND,
            Self::TrainingRuntime(_) => TRAINING_RUNTIME_KIND,
            Self::ClusterTrainingRuntime(_) => CLUSTER_TRAINING_RUNTIME_KIND,
            Self::OptimizationJob(_) => OPTIMIZATIONJOB_KIND,
            Self::Other { kind, .. } => kind,
        }
    }

    /// Name of the object (`""` when it has none).
    pub fn name(&self) -> &str {
        match self {
            Self::TrainJob(o) => o.name(),
            Self::TrainingRuntime(o) => o.name(),
            Self::ClusterTrainingRuntime(o) => o.name(),
            Self::OptimizationJob(o) => o.name(),
            Self::Other { name, .. } => name.as_deref().unwrap_or_default(),
        }
    }

    /// The object as JSON data.
    pub fn to_value(&self) -> Value {
        let value = match self {
            Self::TrainJob(o) => serde_json::to_value(o),
            Self::TrainingRuntime(o) => serde_json::to_value(o),
            Self::ClusterTrainingRuntime(o) => serde_json::to_value(o),
            Self::OptimizationJob(o) => serde_json::to_value(o),
            Self::Other {
                api_version,
                kind,
                name,
            } => Ok(serde_json::json!({
                "apiVersion": api_version, "kind": kind, "metadata": {"name": name}
            })),
        };
        value.unwrap_or(Value::Null)
    }
}

/// A document with its position in the stream it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct LocatedDocument {
    /// Zero-based position among the non-empty documents of the stream.
    pub index: usize,
    /// The object.
    pub document: Document,
}

/// Why a stream of documents could not be read.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ParseError {
    /// The text is not YAML (or JSON); nothing was read.
    #[error("invalid YAML: {0}")]
    Syntax(String),
    /// Some documents are invalid; every finding is listed.
    #[error("{} invalid field(s), first: {}", .0.len(), .0.first().map(ToString::to_string).unwrap_or_default())]
    Fields(Vec<FieldError>),
}

/// Reads every document of a YAML (or JSON) stream. Empty and comment-only documents are skipped.
///
/// Documents are split at their markers ([`split_documents`]) and parsed one at a time, so a stream may
/// hold any number of them (the YAML parser's budget applies to each document, not to the stream).
/// All documents are checked; when any is invalid the error lists every finding of every document.
pub fn parse_documents(text: &str) -> Result<Vec<LocatedDocument>, ParseError> {
    let mut documents = Vec::new();
    let mut errors = Vec::new();
    let pieces = split_documents(text)
        .into_iter()
        .filter(|(_, piece)| !piece.trim().is_empty());
    for (index, (line, piece)) in pieces.enumerate() {
        if piece.len() > MAX_DOCUMENT_BYTES {
            return Err(ParseError::Syntax(document_too_large(
                index + 1,
                line,
                piece.len(),
            )));
        }
        // The fast reader where the document is in its subset (the controller reads every runtime snapshot
        // here); its answer is serde-saphyr's either way (differential tests and the `yaml_fast_path` fuzz target).
        let value: Value = kubetrain_yaml::fast::from_str(piece).map_err(|e| {
            ParseError::Syntax(format!(
                "document {} (from line {line}): {}",
                index + 1,
                yaml_error(&e, line)
            ))
        })?;
        if value.is_null() {
            continue;
        }
        match parse_value(value, index) {
            Ok(document) => documents.push(LocatedDocument { index, document }),
            Err(mut found) => errors.append(&mut found),
        }
    }
    if errors.is_empty() {
        Ok(documents)
    } else {
        Err(ParseError::Fields(errors))
    }
}

/// Reads one document from JSON data; `index` names it in errors when it has no `metadata.name`.
pub fn parse_value(value: Value, index: usize) -> Result<Document, Vec<FieldError>> {
    let Value::Object(map) = &value else {
        let name = format!("#{index}");
        return Err(vec![
            FieldError::error("", "a document must be a mapping with apiVersion and kind")
                .on("document", &name),
        ]);
    };
    let text = |key: &str| map.get(key).and_then(Value::as_str).map(str::to_owned);
    let api_version = text("apiVersion").unwrap_or_default();
    let kind = text("kind").unwrap_or_default();
    let name = map
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let shown_name = name.clone().unwrap_or_else(|| format!("#{index}"));
    let shown_kind = if kind.is_empty() {
        "document"
    } else {
        kind.as_str()
    };
    let fail = |path: &str, message: String| {
        vec![FieldError::error(path, message).on(shown_kind, &shown_name)]
    };

    if kind.is_empty() {
        return Err(fail(
            "kind",
            "kind is required (TrainJob, TrainingRuntime, ClusterTrainingRuntime or OptimizationJob)".into(),
        ));
    }
    let ours = [
        TRAINJOB_KIND,
        TRAINING_RUNTIME_KIND,
        CLUSTER_TRAINING_RUNTIME_KIND,
        OPTIMIZATIONJOB_KIND,
    ]
    .contains(&kind.as_str());
    let kubeflow_group = api_version
        .split('/')
        .next()
        .is_some_and(|g| g.ends_with("kubeflow.org"));
    if api_version != API_VERSION {
        if ours || kubeflow_group {
            return Err(fail("apiVersion", wrong_api_version(&api_version, &kind)));
        }
        if api_version.is_empty() {
            return Err(fail("apiVersion", "apiVersion is required".into()));
        }
        return Ok(Document::Other {
            api_version,
            kind,
            name,
        });
    }
    if !ours {
        return Err(fail(
            "kind",
            format!(
                "kind {kind:?} is not served by {API_VERSION}; use TrainJob, TrainingRuntime, ClusterTrainingRuntime or OptimizationJob"
            ),
        ));
    }
    let result = match kind.as_str() {
        TRAINJOB_KIND => typed::<TrainJob>(&value, crate::crd::trainjob_validation_schema)
            .map(|o| Document::TrainJob(Box::new(o))),
        TRAINING_RUNTIME_KIND => {
            typed::<TrainingRuntime>(&value, crate::crd::runtime_validation_schema)
                .map(|o| Document::TrainingRuntime(Box::new(o)))
        }
        OPTIMIZATIONJOB_KIND => {
            typed::<OptimizationJob>(&value, crate::crd::optimizationjob_validation_schema)
                .map(|o| Document::OptimizationJob(Box::new(o)))
        }
        _ => typed::<ClusterTrainingRuntime>(&value, crate::crd::runtime_validation_schema)
            .map(|o| Document::ClusterTrainingRuntime(Box::new(o))),
    };
    result.map_err(|errors| {
        errors
            .into_iter()
            .map(|e| e.on(&kind, &shown_name))
            .collect()
    })
}

fn wrong_api_version(api_version: &str, kind: &str) -> String {
    let shown = if api_version.is_empty() {
        "missing".to_owned()
    } else {
        format!("{api_version:?}")
    };
    let mut message =
        format!("apiVersion {shown} is not served for {kind}; use apiVersion: {API_VERSION}");
    if api_version.starts_with("kubeflow.org/") {
        message.push_str(
            " (the kubeflow.org/v2alpha1 spelling of early Trainer V2 posts was renamed to trainer.kubeflow.org/v1alpha1)",
        );
    }
    message
}

/// Typed deserialization with the path of the first type error, then the unknown-field check; `schema` (the
/// kind's CRD schema, looked up only when a field is unknown) gives the known names for "did you mean".
fn typed<T>(value: &Value, schema: fn() -> &'static Value) -> Result<T, Vec<FieldError>>
where
    T: serde::de::DeserializeOwned + Serialize,
{
    // Fast path: a plain read and a walk that proves no key was dropped; anything else takes the exact path
    // below, which alone produces the errors (with their paths and hints).
    if let Ok(object) = T::deserialize(value)
        && kubetrain_yaml::kept_keys::keeps_every_key(&object, value)
    {
        return Ok(object);
    }
    let object: T = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = clean_path(&e.path().to_string());
        vec![FieldError::error(
            path,
            clean_serde_message(&e.into_inner().to_string()),
        )]
    })?;
    let kept =
        serde_json::to_value(&object).map_err(|e| vec![FieldError::error("", e.to_string())])?;
    let mut unknown = Vec::new();
    unknown_fields(
        value,
        &kept,
        Some(schema()),
        &mut String::new(),
        &mut unknown,
    );
    if unknown.is_empty() {
        Ok(object)
    } else {
        Err(unknown)
    }
}

/// serde_path_to_error writes `.` for the root; we write nothing.
fn clean_path(path: &str) -> String {
    if path == "." {
        String::new()
    } else {
        path.to_owned()
    }
}

/// serde's messages carry a location suffix from some formats; the path already says where.
fn clean_serde_message(message: &str) -> String {
    message.to_owned()
}

/// Walks the input next to what the typed form kept (and the schema node of the same place) and reports every
/// input key the typed form dropped.
fn unknown_fields(
    input: &Value,
    kept: &Value,
    schema: Option<&Value>,
    path: &mut String,
    out: &mut Vec<FieldError>,
) {
    match (input, kept) {
        (Value::Object(input), Value::Object(kept)) => {
            for (key, value) in input {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                match kept.get(key) {
                    Some(kept_value) => {
                        let child = property_schema(schema, key, len == 0);
                        unknown_fields(value, kept_value, child, path, out);
                    }
                    None if is_empty_value(value) => {}
                    None => out.push(FieldError::error(
                        path.clone(),
                        unknown_message(key, kept, schema),
                    )),
                }
                path.truncate(len);
            }
        }
        (Value::Array(input), Value::Array(kept)) => {
            let items = schema.and_then(|s| s.get("items"));
            for (i, (value, kept_value)) in input.iter().zip(kept).enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                unknown_fields(value, kept_value, items, path, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// The schema of `key` inside an object's schema: a declared property, else `additionalProperties`. The
/// top-level `metadata` is declared as a bare object (as every CRD's is), so its names come from ObjectMeta.
fn property_schema<'a>(schema: Option<&'a Value>, key: &str, top: bool) -> Option<&'a Value> {
    if top && key == "metadata" {
        return Some(object_meta_schema());
    }
    let schema = schema?;
    schema
        .get("properties")
        .and_then(|p| p.get(key))
        .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()))
}

/// The field names of `metav1.ObjectMeta`, as a schema with bare properties.
fn object_meta_schema() -> &'static Value {
    static SCHEMA: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    SCHEMA.get_or_init(|| {
        let names = [
            "annotations",
            "creationTimestamp",
            "deletionGracePeriodSeconds",
            "deletionTimestamp",
            "finalizers",
            "generateName",
            "generation",
            "labels",
            "managedFields",
            "name",
            "namespace",
            "ownerReferences",
            "resourceVersion",
            "selfLink",
            "uid",
        ];
        let properties: serde_json::Map<String, Value> = names
            .iter()
            .map(|n| ((*n).to_owned(), Value::Object(Default::default())))
            .collect();
        serde_json::json!({ "type": "object", "properties": properties })
    })
}

/// "unknown field", with where a removed field went or else the closest name the schema (or the typed form)
/// knows at that place: the keys that were set are not enough, `numNode` must find the unset `numNodes`.
fn unknown_message(
    key: &str,
    kept: &serde_json::Map<String, Value>,
    schema: Option<&Value>,
) -> String {
    let mut message = format!("unknown field {key:?}");
    if let Some(hint) = removed_field_hint(key) {
        message.push_str(hint);
        return message;
    }
    let declared = schema
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|p| p.keys());
    if let Some(candidate) = closest(key, kept.keys().chain(declared)) {
        message.push_str(&format!("; did you mean {candidate:?}?"));
    }
    message
}

/// The known name closest to `key` by edit distance, if close enough to be a typo (at most 2 edits, or a
/// third of the name's length for long names); ties go to the alphabetically first.
pub(crate) fn closest<'a>(key: &str, known: impl Iterator<Item = &'a String>) -> Option<&'a str> {
    known
        .filter(|candidate| candidate.as_str() != key)
        .map(|candidate| (edit_distance(key, candidate), candidate.as_str()))
        .filter(|(distance, candidate)| *distance <= 2.max(candidate.len() / 3))
        .min()
        .map(|(_, candidate)| candidate)
}

/// Fields that older Trainer versions had, with where they went.
fn removed_field_hint(key: &str) -> Option<&'static str> {
    Some(match key {
        "podSpecOverrides" | "podTemplateOverrides" => {
            " (removed in Trainer v2.2; use spec.runtimePatches with a manager name)"
        }
        "labels" | "annotations" => {
            " (TrainJob spec.labels/annotations were removed in v2.2; use spec.runtimePatches[].trainingRuntimeSpec.template.metadata)"
        }
        "numProcPerNode" => {
            " (mlPolicy.torch.numProcPerNode was removed in v2.2; set spec.trainer.numProcPerNode on the TrainJob)"
        }
        "elasticPolicy" => {
            " (elasticPolicy belongs in the runtime's mlPolicy.torch, KEP-2903; a per-TrainJob override is not supported)"
        }
        "maxRestarts" => {
            " (v2.1's elasticPolicy.maxRestarts is not part of KEP-2903; set the runtime's JobSet failurePolicy.maxRestarts)"
        }
        _ => return None,
    })
}

/// Levenshtein distance, for "did you mean" hints.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous + usize::from(ca != *cb);
            previous = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(previous + 1);
        }
    }
    row[b.len()]
}

/// Serializes any object as YAML (the same YAML stack as kube-rs).
pub fn to_yaml<T: Serialize>(object: &T) -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_single_edits() {
        assert_eq!(edit_distance("numNodes", "numNodes"), 0);
        assert_eq!(edit_distance("numNode", "numNodes"), 1);
        assert_eq!(edit_distance("nmuNodes", "numNodes"), 2);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    /// The message for one misspelled field of a TrainJob (`spec` is YAML under `spec:`).
    fn unknown(kind: &str, spec: &str) -> Vec<String> {
        let text = format!(
            "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: {kind}\nmetadata: {{name: x}}\nspec:\n{spec}\n"
        );
        match parse_documents(&text) {
            Err(ParseError::Fields(errors)) => errors.iter().map(ToString::to_string).collect(),
            other => panic!("expected field errors for {spec:?}, got {other:?}"),
        }
    }

    #[test]
    fn misspelled_fields_get_the_schemas_closest_name_even_when_unset() {
        let pod = "  template:\n    spec:\n      replicatedJobs:\n      - name: node\n        template:\n          spec:\n            template:\n              spec:\n                containers:\n                - name: node\n";
        let cases = [
            // (kind, spec, expected finding)
            (
                "TrainJob",
                "  runtimeRef: {name: torch-distributed}\n  trainer: {numNode: 2}".to_owned(),
                "TrainJob/x: spec.trainer.numNode: unknown field \"numNode\"; did you mean \"numNodes\"?",
            ),
            (
                "TrainJob",
                "  runtimeRef: {name: torch-distributed}\n  trainer: {comand: [python]}".to_owned(),
                "TrainJob/x: spec.trainer.comand: unknown field \"comand\"; did you mean \"command\"?",
            ),
            (
                "TrainJob",
                "  runtimeRef: {name: torch-distributed}\n  trainr: {}".to_owned(),
                "TrainJob/x: spec.trainr: unknown field \"trainr\"; did you mean \"trainer\"?",
            ),
            (
                "TrainJob",
                "  runtimeRef: {name: torch-distributed, apiGrup: x}".to_owned(),
                "TrainJob/x: spec.runtimeRef.apiGrup: unknown field \"apiGrup\"; did you mean \"apiGroup\"?",
            ),
            (
                "TrainJob",
                "  runtimeRef: {name: torch-distributed}\n  trainer: {env: [{name: A, vaule: b}]}"
                    .to_owned(),
                "TrainJob/x: spec.trainer.env[0].vaule: unknown field \"vaule\"; did you mean \"value\"?",
            ),
            (
                "ClusterTrainingRuntime",
                format!("{pod}                  imagePullPolcy: Always\n"),
                "ClusterTrainingRuntime/x: spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].imagePullPolcy: unknown field \"imagePullPolcy\"; did you mean \"imagePullPolicy\"?",
            ),
            (
                "TrainJob",
                "  runtimeRef: {name: torch-distributed}\n  trainer: {zzzzzz: 1}".to_owned(),
                "TrainJob/x: spec.trainer.zzzzzz: unknown field \"zzzzzz\"",
            ),
        ];
        for (kind, spec, expected) in cases {
            assert_eq!(unknown(kind, &spec), [expected], "{spec}");
        }
    }

    #[test]
    fn misspelled_metadata_fields_get_object_metas_names() {
        let text = "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: x, namspace: y}\nspec: {runtimeRef: {name: torch-distributed}}\n";
        let Err(ParseError::Fields(errors)) = parse_documents(text) else {
            panic!("namspace is unknown");
        };
        assert_eq!(
            errors[0].to_string(),
            "TrainJob/x: metadata.namspace: unknown field \"namspace\"; did you mean \"namespace\"?"
        );
    }

    mod fast_read {
        use crate::TrainJob;
        use kubetrain_yaml::fast::{from_str_typed, parse};
        use proptest::prelude::*;

        /// Scalars as written, including forms the fast reader must decline or resolve exactly.
        fn scalar_text() -> impl Strategy<Value = String> {
            prop_oneof![
                "[a-zA-Z][a-zA-Z0-9./_:-]{0,8}",
                "-?[0-9][0-9a-zA-Z._:+-]{0,6}",
                "[ -~]{0,6}",
                "'[ -~]{0,6}'",
                "\"[ -~]{0,6}\"",
                prop::sample::select(vec![
                    "yes", "No", "~", "null", "0x1F", "012", "1_000", ".inf", "1.5", "-0", "12:30",
                    "&a x", "*a", "!x y", "|", "[x]", "{x: 1}", "{}", "[]", "-c", "--flag", "32Gi",
                ])
                .prop_map(str::to_owned),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1000))]

            /// `kubetrain render --no-validate` reads a TrainJob from the fast value; it must be the TrainJob
            /// serde-saphyr reads (the differential fuzz target `yaml_fast_path` checks the same on any text).
            #[test]
            fn trainjob_from_the_fast_value_is_serde_saphyrs(
                s in prop::collection::vec(
                    prop_oneof![
                        3 => "[a-z][a-z0-9-]{0,6}|[1-9][0-9]{0,2}|\"[0-9]{1,2}\"|'[0-9]Gi'|true|false",
                        1 => scalar_text(),
                    ],
                    12,
                ),
                flow_trainer in any::<bool>(),
            ) {
                let trainer = if flow_trainer {
                    format!(
                        "  trainer: {{numNodes: {}, image: {}, command: [{}, x], env: [{{name: {}, value: {}}}], resourcesPerNode: {{limits: {{cpu: {}, memory: {}}}}}}}\n",
                        s[4], s[5], s[6], s[7], s[8], s[9], s[10]
                    )
                } else {
                    format!(
                        "  trainer:\n    numNodes: {}\n    image: {}\n    command:\n    - {}\n    env: [{{name: {}, value: {}}}]\n    resourcesPerNode: {{limits: {{cpu: {}, memory: {}}}}}\n",
                        s[4], s[5], s[6], s[7], s[8], s[9], s[10]
                    )
                };
                let doc = format!(
                    "apiVersion: {}\nkind: TrainJob\nmetadata: {{name: {}, namespace: {}}}\nspec:\n  runtimeRef: {{name: {}}}\n{trainer}  suspend: {}\n",
                    s[0], s[1], s[2], s[3], s[11]
                );
                if let Some(fast) = parse(&doc) {
                    prop_assert_eq!(serde_saphyr::from_str::<serde_json::Value>(&doc).ok(), Some(fast), "{}", doc);
                    if let Some(job) = from_str_typed::<TrainJob>(&doc) {
                        let direct = serde_saphyr::from_str::<TrainJob>(&doc);
                        prop_assert!(direct.is_ok(), "{}", doc);
                        prop_assert_eq!(direct.unwrap(), job, "{}", doc);
                    }
                }
            }
        }
    }
}
