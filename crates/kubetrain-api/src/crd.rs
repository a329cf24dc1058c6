//! CustomResourceDefinitions of the trainer kinds, derived from the Rust types.
//!
//! The schemas come from `schemars` with kube-rs's structural-schema settings (the same ones `kube::CustomResource`
//! uses), so the CEL rules (`x-kubernetes-validations`), defaults and list-map keys declared on the types land in
//! the CRDs. Nothing here is hand-written YAML.

use std::sync::OnceLock;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceDefinition, CustomResourceDefinitionNames,
    CustomResourceDefinitionSpec, CustomResourceDefinitionVersion, CustomResourceSubresourceStatus,
    CustomResourceSubresources, CustomResourceValidation, JSONSchemaProps,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde_json::{Value, json};

use crate::constants::{
    CLUSTER_TRAINING_RUNTIME_KIND, GROUP, OPTIMIZATIONJOB_KIND, TRAINING_RUNTIME_KIND,
    TRAINJOB_KIND, VERSION,
};
use crate::{
    OptimizationJobSpec, OptimizationJobStatus, TrainJobSpec, TrainJobStatus, TrainingRuntimeSpec,
};

/// The OpenAPI v3 schema of `T` in the structural form Kubernetes requires, as JSON.
pub fn structural_schema<T: JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .with_transform(schemars::transform::AddNullable::default())
        .with_transform(kube::core::schema::StructuralSchemaRewriter)
        .with_transform(kube::core::schema::OptionalEnum)
        .with_transform(kube::core::schema::OptionalIntOrString)
        .into_generator();
    let mut schema =
        serde_json::to_value(generator.into_root_schema_for::<T>()).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut schema {
        // The root of a property schema carries no title; keep the CRD free of schemars' naming.
        map.remove("title");
    }
    crate::crd_facts::apply(&mut schema);
    schema
}

/// The `openAPIV3Schema` of a TrainJob, including the object-level name rules.
pub fn trainjob_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let mut schema = object_schema(
            "TrainJob represents configuration of a training job.",
            structural_schema::<TrainJobSpec>(),
            Some(structural_schema::<TrainJobStatus>()),
        );
        schema["x-kubernetes-validations"] = json!([
            {
                "rule": "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
                "message": "metadata.name must match RFC 1035 DNS label format"
            },
            {
                "rule": "size(self.metadata.name) <= 63",
                "message": "metadata.name must be no more than 63 characters"
            }
        ]);
        schema
    })
}

/// The `openAPIV3Schema` of a TrainingRuntime or ClusterTrainingRuntime (they share a spec).
pub fn runtime_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        object_schema(
            "A training runtime which can be referenced as part of `runtimeRef` API in TrainJob.",
            structural_schema::<TrainingRuntimeSpec>(),
            None,
        )
    })
}

/// The `openAPIV3Schema` of an OptimizationJob (upstream master's `optimizationjob_types.go`).
pub fn optimizationjob_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        object_schema(
            "OptimizationJob is the Schema for the optimizationjobs API.",
            structural_schema::<OptimizationJobSpec>(),
            Some(structural_schema::<OptimizationJobStatus>()),
        )
    })
}

/// The TrainJob schema as validation reads it: [`trainjob_schema`] without descriptions, embedded at build
/// time. Generating the schema (schemars plus kube's structural rewriter over the whole PodSpec) costs about
/// 0.1 s per process, which a `kubetrain render` of 10,000 TrainJobs would otherwise spend before the first
/// one; parsing the embedded JSON takes a few milliseconds. A test keeps the file equal to the generated
/// schema (`KUBETRAIN_BLESS=1 cargo test -p kubetrain-api --lib embedded_schemas` rewrites it).
pub(crate) fn trainjob_validation_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| embedded(EMBEDDED_TRAINJOB, trainjob_schema))
}

/// The (Cluster)TrainingRuntime schema as validation reads it; see [`trainjob_validation_schema`].
pub(crate) fn runtime_validation_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| embedded(EMBEDDED_RUNTIME, runtime_schema))
}

/// The OptimizationJob schema as validation reads it; see [`trainjob_validation_schema`].
pub(crate) fn optimizationjob_validation_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| embedded(EMBEDDED_OPTIMIZATIONJOB, optimizationjob_schema))
}

const EMBEDDED_TRAINJOB: &str = include_str!("schemas/trainjob.json");
const EMBEDDED_OPTIMIZATIONJOB: &str = include_str!("schemas/optimizationjob.json");
const EMBEDDED_RUNTIME: &str = include_str!("schemas/runtime.json");

/// Parses an embedded schema; should the file ever fail to parse, generating it is slower but correct.
fn embedded(text: &str, generate: fn() -> &'static Value) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| without_descriptions(generate()))
}

/// A schema without its `description` keywords (a property that happens to be named `description` has an
/// object schema as its value and stays).
fn without_descriptions(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(key, value)| !(key.as_str() == "description" && value.is_string()))
                .map(|(key, value)| (key.clone(), without_descriptions(value)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_descriptions).collect()),
        other => other.clone(),
    }
}

fn object_schema(description: &str, spec: Value, status: Option<Value>) -> Value {
    let mut properties = json!({
        "apiVersion": {"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."},
        "kind": {"type": "string", "description": "Kind is a string value representing the REST resource this object represents."},
        "metadata": {"type": "object"},
        "spec": spec,
    });
    if let Some(status) = status {
        properties["status"] = status;
    }
    json!({"type": "object", "description": description, "properties": properties, "required": ["spec"]})
}

/// The TrainJob CRD (namespaced, status subresource, `State` and `Age` columns).
pub fn trainjob_crd() -> CustomResourceDefinition {
    let mut crd = crd(TRAINJOB_KIND, "trainjobs", "Namespaced", trainjob_schema());
    let version = &mut crd.spec.versions[0];
    version.subresources = Some(CustomResourceSubresources {
        status: Some(CustomResourceSubresourceStatus(json!({}))),
        scale: None,
    });
    version.additional_printer_columns = Some(vec![
        CustomResourceColumnDefinition {
            name: "State".into(),
            type_: "string".into(),
            json_path: ".status.conditions[-1:].type".into(),
            ..Default::default()
        },
        CustomResourceColumnDefinition {
            name: "Age".into(),
            type_: "date".into(),
            json_path: ".metadata.creationTimestamp".into(),
            ..Default::default()
        },
    ]);
    crd
}

/// The OptimizationJob CRD (namespaced, status subresource; `State`, `Best` and `Age` columns, which upstream's
/// CRD does not declare).
pub fn optimizationjob_crd() -> CustomResourceDefinition {
    let mut crd = crd(
        OPTIMIZATIONJOB_KIND,
        "optimizationjobs",
        "Namespaced",
        optimizationjob_schema(),
    );
    let version = &mut crd.spec.versions[0];
    version.subresources = Some(CustomResourceSubresources {
        status: Some(CustomResourceSubresourceStatus(json!({}))),
        scale: None,
    });
    let column = |name: &str, type_: &str, json_path: &str| CustomResourceColumnDefinition {
        name: name.into(),
        type_: type_.into(),
        json_path: json_path.into(),
        ..Default::default()
    };
    version.additional_printer_columns = Some(vec![
        column("State", "string", ".status.conditions[-1:].type"),
        column("Best", "string", ".status.result.trainJobName"),
        column("Age", "date", ".metadata.creationTimestamp"),
    ]);
    crd
}

/// The TrainingRuntime CRD (namespaced).
pub fn training_runtime_crd() -> CustomResourceDefinition {
    crd(
        TRAINING_RUNTIME_KIND,
        "trainingruntimes",
        "Namespaced",
        runtime_schema(),
    )
}

/// The ClusterTrainingRuntime CRD (cluster-scoped).
pub fn cluster_training_runtime_crd() -> CustomResourceDefinition {
    crd(
        CLUSTER_TRAINING_RUNTIME_KIND,
        "clustertrainingruntimes",
        "Cluster",
        runtime_schema(),
    )
}

/// The four CRDs, in the order `kubetrain crd` prints them.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        cluster_training_runtime_crd(),
        training_runtime_crd(),
        trainjob_crd(),
        optimizationjob_crd(),
    ]
}

fn crd(kind: &str, plural: &str, scope: &str, schema: &Value) -> CustomResourceDefinition {
    let schema: JSONSchemaProps = serde_json::from_value(schema.clone()).unwrap_or_default();
    CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some(format!("{plural}.{GROUP}")),
            ..Default::default()
        },
        spec: CustomResourceDefinitionSpec {
            group: GROUP.into(),
            names: CustomResourceDefinitionNames {
                kind: kind.into(),
                list_kind: Some(format!("{kind}List")),
                plural: plural.into(),
                singular: Some(kind.to_lowercase()),
                ..Default::default()
            },
            scope: scope.into(),
            versions: vec![CustomResourceDefinitionVersion {
                name: VERSION.into(),
                served: true,
                storage: true,
                schema: Some(CustomResourceValidation {
                    open_api_v3_schema: Some(schema),
                }),
                ..Default::default()
            }],
            ..Default::default()
        },
        status: None,
    }
}

/// Properties whose schemas are core Kubernetes types; the reference links to the Kubernetes docs for them
/// instead of listing every nested field.
const CORE_TYPES: &[(&str, &str)] = &[
    ("env", "EnvVar"),
    ("resourcesPerNode", "ResourceRequirements"),
    ("secretRef", "LocalObjectReference"),
    ("metadata", "ObjectMeta"),
    ("volumes", "Volume"),
    ("volumeMounts", "VolumeMount"),
    ("affinity", "Affinity"),
    ("tolerations", "Toleration"),
    ("securityContext", "SecurityContext"),
    ("imagePullSecrets", "LocalObjectReference"),
    ("schedulingGates", "PodSchedulingGate"),
    ("conditions", "Condition"),
    ("lastUpdatedTime", "Time"),
    ("time", "Time"),
];

/// A Markdown reference of the four CRDs: every field with its type, default and validation rules, generated
/// from the same schemas as the CRDs (docs/crd-reference.md is this output).
pub fn reference_markdown() -> String {
    let mut out = String::from(
        "# CRD reference: trainer.kubeflow.org/v1alpha1\n\n\
         Generated by `kubetrain crd -o markdown` from the Rust types; a test keeps this file in sync.\n\
         Core Kubernetes types (EnvVar, ResourceRequirements, ObjectMeta, …) are named, not expanded. The JobSet\n\
         template of a runtime is a full `jobset.x-k8s.io/v1alpha2` JobSetSpec.\n",
    );
    for (kind, schema) in [
        ("TrainJob", trainjob_schema()),
        ("TrainingRuntime / ClusterTrainingRuntime", runtime_schema()),
        ("OptimizationJob", optimizationjob_schema()),
    ] {
        out.push_str(&format!("\n## {kind}\n\n| Field | Type | Default | Validation | Description |\n|---|---|---|---|---|\n"));
        for root in ["spec", "status"] {
            if let Some(node) = schema["properties"].get(root) {
                reference_rows(node, root, &mut out);
            }
        }
    }
    out
}

fn reference_rows(node: &Value, path: &str, out: &mut String) {
    let leaf = path
        .rsplit('.')
        .next()
        .unwrap_or(path)
        .trim_end_matches("[]");
    let core = CORE_TYPES
        .iter()
        .find(|(name, _)| *name == leaf)
        .map(|(_, ty)| *ty);
    let mut ty = node
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("object")
        .to_owned();
    if ty == "array" {
        let item = node["items"]
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("object");
        ty = format!("[]{}", core.unwrap_or(item));
    } else if let Some(core) = core {
        ty = core.to_owned();
    }
    let default = node
        .get("default")
        .map(|d| format!("`{d}`"))
        .unwrap_or_default();
    let mut checks: Vec<String> = Vec::new();
    for (key, label) in [
        ("minimum", "≥"),
        ("maximum", "≤"),
        ("minLength", "min length"),
        ("maxLength", "max length"),
        ("minItems", "min items"),
        ("maxItems", "max items"),
        ("minProperties", "min properties"),
    ] {
        if let Some(v) = node.get(key) {
            checks.push(format!("{label} {v}"));
        }
    }
    if let Some(keys) = node.get("x-kubernetes-list-map-keys") {
        checks.push(format!("map keyed by {keys}"));
    }
    if let Some(values) = node.get("enum") {
        checks.push(format!("one of {values}"));
    }
    for rule in node
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        checks.push(format!(
            "`{}`: {}",
            rule["rule"].as_str().unwrap_or_default(),
            rule["message"].as_str().unwrap_or_default()
        ));
    }
    let description = node
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .replace('\n', " ");
    let escape = |s: &str| s.replace('|', "\\|");
    out.push_str(&format!(
        "| `{path}` | {} | {} | {} | {} |\n",
        escape(&ty),
        escape(&default),
        escape(&checks.join("; ")),
        escape(&description)
    ));
    if core.is_some() {
        return;
    }
    let is_array = node.get("type").and_then(Value::as_str) == Some("array");
    let (children, suffix) = if is_array {
        (&node["items"], "[]")
    } else {
        (node, "")
    };
    if let Some(properties) = children.get("properties").and_then(Value::as_object) {
        // The runtime's JobSet template and pod templates are upstream JobSet / core types; stop at them.
        if path.ends_with("replicatedJobs") && path.starts_with("spec.template")
            || path.ends_with("templates")
        {
            return;
        }
        for (key, child) in properties {
            reference_rows(child, &format!("{path}{suffix}.{key}"), out);
        }
    }
}

/// The object as the API server would store it: every schema default of its CRD filled in (runtimeRef apiGroup
/// and kind, suspend, managedBy, the MPI and coscheduling defaults, JobSet replicas and groupName, …).
///
/// ```
/// use kubetrain_api::{TrainJob, TrainJobSpec, RuntimeRef};
///
/// let job = TrainJob::new("j", TrainJobSpec { runtime_ref: RuntimeRef::cluster("torch-distributed"), ..Default::default() });
/// let stored = kubetrain_api::crd::with_defaults(&job).expect("defaults apply");
/// assert_eq!(stored.spec.runtime_ref.kind.as_deref(), Some("ClusterTrainingRuntime"));
/// assert_eq!(stored.spec.suspend, Some(false));
/// assert_eq!(stored.spec.managed_by.as_deref(), Some("trainer.kubeflow.org/trainjob-controller"));
/// ```
pub fn with_defaults<T: CrdSchema>(object: &T) -> Result<T, serde_json::Error> {
    let mut value = serde_json::to_value(object)?;
    apply_schema_defaults(&mut value, T::defaulting_schema());
    serde_json::from_value(value)
}

/// Fills in the `default` values of a structural schema as the API server does for a custom resource
/// (`k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting.Default`): in every object, a declared
/// property that is absent, or `null` where the property is not `nullable`, gets a copy of its default; then
/// every property (including one just defaulted) is defaulted by its own schema, map values by
/// `additionalProperties`, and list items by `items`. Nothing else changes.
///
/// ```
/// use serde_json::json;
/// let schema = json!({"type": "object", "properties": {
///     "jobs": {"type": "array", "items": {"type": "object", "properties": {
///         "replicas": {"type": "integer", "default": 1},
///         "groupName": {"type": "string", "default": "default"}}}}}});
/// let mut value = json!({"jobs": [{"replicas": 3}, {}]});
/// kubetrain_api::crd::apply_schema_defaults(&mut value, &schema);
/// assert_eq!(value, json!({"jobs": [
///     {"replicas": 3, "groupName": "default"},
///     {"replicas": 1, "groupName": "default"}]}));
/// ```
pub fn apply_schema_defaults(value: &mut Value, schema: &Value) {
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            for (key, property) in properties.into_iter().flatten() {
                let Some(default) = property.get("default") else {
                    continue;
                };
                let nullable = property.get("nullable").and_then(Value::as_bool) == Some(true);
                match map.get_mut(key) {
                    None => {
                        map.insert(key.clone(), default.clone());
                    }
                    Some(current) if current.is_null() && !nullable => *current = default.clone(),
                    Some(_) => {}
                }
            }
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (key, child) in map.iter_mut() {
                if let Some(child_schema) = properties.and_then(|p| p.get(key)).or(additional) {
                    apply_schema_defaults(child, child_schema);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                items
                    .iter_mut()
                    .for_each(|item| apply_schema_defaults(item, item_schema));
            }
        }
        _ => {}
    }
}

/// Trainer kinds whose CRD schema is known, for [`with_defaults`].
pub trait CrdSchema: serde::Serialize + serde::de::DeserializeOwned {
    /// The kind's `openAPIV3Schema`.
    fn schema() -> &'static Value;

    /// The same schema without descriptions, embedded at build time: what defaulting and validation read
    /// (no schema generation at run time).
    fn defaulting_schema() -> &'static Value;
}

impl CrdSchema for crate::TrainJob {
    fn schema() -> &'static Value {
        trainjob_schema()
    }
    fn defaulting_schema() -> &'static Value {
        trainjob_validation_schema()
    }
}

impl CrdSchema for crate::OptimizationJob {
    fn schema() -> &'static Value {
        optimizationjob_schema()
    }
    fn defaulting_schema() -> &'static Value {
        optimizationjob_validation_schema()
    }
}

impl CrdSchema for crate::TrainingRuntime {
    fn schema() -> &'static Value {
        runtime_schema()
    }
    fn defaulting_schema() -> &'static Value {
        runtime_validation_schema()
    }
}

impl CrdSchema for crate::ClusterTrainingRuntime {
    fn schema() -> &'static Value {
        runtime_schema()
    }
    fn defaulting_schema() -> &'static Value {
        runtime_validation_schema()
    }
}

#[cfg(test)]
mod embedded_schemas {
    use super::*;

    /// The embedded validation schemas equal the generated ones (without descriptions).
    #[test]
    fn embedded_schemas_are_up_to_date() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/schemas");
        for (file, embedded_text, generated) in [
            ("trainjob.json", EMBEDDED_TRAINJOB, trainjob_schema()),
            ("runtime.json", EMBEDDED_RUNTIME, runtime_schema()),
            (
                "optimizationjob.json",
                EMBEDDED_OPTIMIZATIONJOB,
                optimizationjob_schema(),
            ),
        ] {
            let expected = without_descriptions(generated);
            if std::env::var_os("KUBETRAIN_BLESS").is_some() {
                let text = serde_json::to_string(&expected).expect("a schema serialises");
                std::fs::write(dir.join(file), text + "\n").expect("write the schema");
                continue;
            }
            let embedded: Value =
                serde_json::from_str(embedded_text).expect("embedded JSON parses");
            assert!(
                embedded == expected,
                "src/schemas/{file} is stale: run `KUBETRAIN_BLESS=1 cargo test -p kubetrain-api --lib embedded_schemas`"
            );
        }
    }

    /// Defaulting as the API server does it: into a default just inserted, a non-nullable `null` replaced,
    /// a nullable `null` kept, map values by `additionalProperties`, nothing invented where no default is.
    #[test]
    fn schema_defaults_follow_the_api_server() {
        let schema = json!({"type": "object", "properties": {
            "template": {"type": "object", "default": {}, "properties": {
                "spec": {"type": "object", "default": {}, "properties": {
                    "restart": {"type": "string", "default": "Recreate"}}}}},
            "timeout": {"type": "integer", "default": 60},
            "port": {"type": "string", "nullable": true, "default": "TCP"},
            "plain": {"type": "object", "properties": {"x": {"type": "string"}}},
            "groups": {"type": "object", "additionalProperties": {"type": "object", "properties": {
                "size": {"type": "integer", "default": 1}}}}}});
        let mut value =
            json!({"timeout": null, "port": null, "groups": {"a": {}, "b": {"size": 4}}});
        apply_schema_defaults(&mut value, &schema);
        assert_eq!(
            value,
            json!({
                "template": {"spec": {"restart": "Recreate"}},
                "timeout": 60,
                "port": null,
                "groups": {"a": {"size": 1}, "b": {"size": 4}}
            })
        );
    }

    /// Every runtime default of upstream's CRD reaches a runtime with nothing set.
    #[test]
    fn runtime_defaults_fill_replicated_jobs() {
        let mut value =
            json!({"spec": {"template": {"spec": {"replicatedJobs": [{"name": "node"}]}}}});
        apply_schema_defaults(&mut value, runtime_validation_schema());
        assert_eq!(
            value["spec"]["template"]["spec"]["replicatedJobs"][0],
            json!({"name": "node", "replicas": 1, "groupName": "default"})
        );
    }

    #[test]
    fn descriptions_go_but_a_property_named_description_stays() {
        let schema = json!({
            "description": "an object",
            "properties": {
                "description": {"type": "string", "description": "a field named description"},
                "name": {"type": "string", "description": "the name"}
            }
        });
        assert_eq!(
            without_descriptions(&schema),
            json!({"properties": {"description": {"type": "string"}, "name": {"type": "string"}}})
        );
    }
}
