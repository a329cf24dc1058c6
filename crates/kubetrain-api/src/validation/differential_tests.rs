//! Differential tests: the native CEL evaluator against kube-cel (same paths and messages, order normalised), and
//! the compiled schema walk against the generic walk it replaced (same findings in the same order).

use proptest::prelude::*;
use serde_json::{Value, json};

use super::cel::{self, SchemaKind, check_with_kube_cel, constraints, native};
use super::cel_native::{self, Unsure};
use super::schema;
use crate::crd::{runtime_schema, trainjob_schema};
use crate::error::FieldError;

/// Findings as sorted `(path, message)` pairs (kube-cel's order follows its hash maps).
type Findings = Vec<(String, String)>;

fn sorted(errors: Vec<FieldError>) -> Findings {
    let mut pairs: Findings = errors.into_iter().map(|e| (e.path, e.message)).collect();
    pairs.sort();
    pairs
}

fn trainjob_shape() -> &'static cel_native::Shape {
    native(SchemaKind::TrainJob).expect("every TrainJob CRD rule is recognised")
}

/// Native findings (or `Unsure`) and kube-cel's, both sorted.
fn both(new: &Value, old: Option<&Value>) -> (Result<Findings, Unsure>, Findings) {
    let native = cel_native::check(trainjob_shape(), new, old).map(sorted);
    let reference = sorted(check_with_kube_cel(SchemaKind::TrainJob, new, old));
    (native, reference)
}

fn job(metadata: Value, spec: Value) -> Value {
    json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": metadata, "spec": spec})
}

fn torch() -> Value {
    job(
        json!({"name": "bench", "namespace": "default"}),
        json!({
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {
                "numNodes": 8, "image": "example.com/train:1", "command": ["torchrun", "train.py"],
                "env": [{"name": "EPOCHS", "value": "3"}],
                "resourcesPerNode": {"limits": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "8"}}
            }
        }),
    )
}

fn patched() -> Value {
    let mut value = torch();
    value["spec"]["initializer"] = json!({
        "dataset": {"storageUri": "hf://tatsu-lab/alpaca"},
        "model": {"storageUri": "hf://meta-llama/Llama-3.2-1B-Instruct"}
    });
    value["spec"]["runtimePatches"] = json!([{
        "manager": "kueue.x-k8s.io/manager",
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{
            "name": "node",
            "template": {"spec": {"template": {"spec": {
                "containers": [{"name": "node", "image": "x"}],
                "serviceAccountName": "trainer",
                "nodeSelector": {"pool": "gpu"}
            }}}}
        }]}}}
    }]);
    value
}

/// Native and kube-cel agree, and the native evaluator decided the case itself.
fn assert_native_agrees(new: &Value, old: Option<&Value>) -> Vec<(String, String)> {
    let (native, reference) = both(new, old);
    assert_eq!(
        native,
        Ok(reference.clone()),
        "native vs kube-cel on {new} (old {old:?})"
    );
    reference
}

#[test]
fn trainjob_rules_are_native_and_runtime_rules_stay_on_kube_cel() {
    assert!(native(SchemaKind::TrainJob).is_some());
    // The runtime CRD uses `exists`, `all` and `filter` macros: not recognised, so kube-cel evaluates it.
    assert!(native(SchemaKind::Runtime).is_none());
    assert!(cel_native::compile(runtime_schema()).is_none());
    assert!(cel_native::compile(trainjob_schema()).is_some());
}

#[test]
fn table_of_creates_and_updates() {
    let paths = |findings: &[(String, String)]| -> Vec<String> {
        findings.iter().map(|(p, m)| format!("{p}: {m}")).collect()
    };
    // Valid objects: nothing found.
    assert!(assert_native_agrees(&torch(), None).is_empty());
    assert!(assert_native_agrees(&patched(), None).is_empty());
    assert!(assert_native_agrees(&patched(), Some(&patched())).is_empty());

    let mut bad = patched();
    bad["metadata"]["name"] = json!("Bad_Name");
    bad["spec"]["managedBy"] = json!("someone-else");
    bad["spec"]["initializer"]["dataset"]["storageUri"] = json!("not a uri");
    bad["spec"]["initializer"]["model"]["storageUri"] = json!("");
    bad["spec"]["trainer"]["numProcPerNode"] = json!(0);
    bad["status"] = json!({"trainerStatus": {"progressPercentage": 5}});
    assert_eq!(
        paths(&assert_native_agrees(&bad, None)),
        [
            ": metadata.name must match RFC 1035 DNS label format",
            "spec.initializer.dataset.storageUri: storageUri may be empty, or it must be a valid URI (scheme://...)",
            "spec.managedBy: ManagedBy must be trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if set",
            "spec.trainer.numProcPerNode: numProcPerNode must be greater than or equal to 1",
            "status.trainerStatus: lastUpdatedTime is required when trainerStatus is present",
        ]
    );

    let mut long = torch();
    long["metadata"]["name"] = json!("a".repeat(64));
    assert_eq!(
        paths(&assert_native_agrees(&long, None)),
        [": metadata.name must be no more than 63 characters"]
    );
    // CEL's `size` counts bytes here (kube-cel's `cel`): 40 two-byte letters are too long.
    let mut wide = torch();
    wide["metadata"]["name"] = json!("é".repeat(40));
    assert_eq!(assert_native_agrees(&wide, None).len(), 2);

    // Immutable fields on update; `suspend` and the patch's nodeSelector may change.
    let mut changed = patched();
    changed["spec"]["runtimeRef"]["name"] = json!("other");
    changed["spec"]["trainer"]["numNodes"] = json!(2);
    changed["spec"]["activeDeadlineSeconds"] = json!(60);
    changed["spec"]["suspend"] = json!(true);
    let patch = &mut changed["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
        ["replicatedJobs"][0]["template"]["spec"]["template"]["spec"];
    patch["serviceAccountName"] = json!("other");
    patch["nodeSelector"] = json!({"pool": "cpu"});
    assert_eq!(
        paths(&assert_native_agrees(&changed, Some(&patched()))),
        [
            "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec.serviceAccountName: field is immutable",
            "spec.runtimeRef: field is immutable",
            "spec.trainer: field is immutable",
        ]
    );
    // activeDeadlineSeconds was absent in the old object: no transition rule runs for it.
    let mut old = patched();
    old["spec"]["activeDeadlineSeconds"] = json!(30);
    assert_eq!(paths(&assert_native_agrees(&changed, Some(&old))).len(), 4);

    // Defaults apply before CEL: an explicit default equals an omitted one.
    let mut explicit = patched();
    explicit["spec"]["managedBy"] = json!("trainer.kubeflow.org/trainjob-controller");
    explicit["spec"]["runtimeRef"]["kind"] = json!("ClusterTrainingRuntime");
    assert!(assert_native_agrees(&explicit, Some(&patched())).is_empty());
    assert!(assert_native_agrees(&patched(), Some(&explicit)).is_empty());
    let mut other_kind = patched();
    other_kind["spec"]["runtimeRef"]["kind"] = json!("TrainingRuntime");
    assert_eq!(assert_native_agrees(&other_kind, Some(&patched())).len(), 1);
}

#[test]
fn unmodelled_values_go_to_kube_cel() {
    let cases = [
        // Missing name: the rule errs in kube-cel.
        job(json!({}), json!({"runtimeRef": {"name": "x"}})),
        // Wrong types under rules.
        job(json!({"name": 5}), json!({"runtimeRef": {"name": "x"}})),
        job(
            json!({"name": "ok"}),
            json!({"runtimeRef": {"name": "x"}, "trainer": {"numProcPerNode": 0.5}}),
        ),
        job(
            json!({"name": "ok"}),
            json!({"runtimeRef": {"name": "x"}, "managedBy": null}),
        ),
    ];
    for case in &cases {
        let (native, reference) = both(case, None);
        assert_eq!(native, Err(Unsure), "{case}");
        assert!(!reference.is_empty(), "{case}");
        // The dispatcher then answers with kube-cel's findings.
        assert_eq!(
            sorted(cel::check(SchemaKind::TrainJob, case, None)),
            reference
        );
    }
}

fn pick<T: Clone + std::fmt::Debug + 'static>(items: Vec<T>) -> impl Strategy<Value = T> {
    proptest::sample::select(items)
}

fn optional(values: Vec<Value>) -> impl Strategy<Value = Option<Value>> {
    proptest::option::of(pick(values))
}

prop_compose! {
    fn trainjob()(
        name in prop_oneof![
            "[a-z][-a-z0-9]{0,70}".prop_map(Value::from),
            "[a-zA-Z0-9_.-]{0,8}".prop_map(Value::from),
            pick(vec![json!("é".repeat(31)), json!("é".repeat(32)), json!("a".repeat(63)), json!("a".repeat(64)), json!(null)]),
        ],
        managed_by in optional(vec![
            json!("trainer.kubeflow.org/trainjob-controller"), json!("kueue.x-k8s.io/multikueue"), json!("other"),
            json!(""),
        ]),
        procs in optional(vec![json!(0), json!(1), json!(-1), json!(4)]),
        nodes in optional(vec![json!(-1), json!(0), json!(3)]),
        deadline in optional(vec![json!(0), json!(1), json!(600)]),
        dataset in optional(vec![json!(""), json!("hf://a/b"), json!("s3://bucket/key"), json!("not a uri"), json!("1x://a"), json!("gs://")]),
        model in optional(vec![json!(""), json!("hf://m"), json!("://nothing")]),
        env in proptest::collection::vec(pick(vec!["A", "B", "PET_NNODES"]), 0..3),
        managers in proptest::collection::vec(pick(vec!["kueue.x-k8s.io/manager", "example.com/m", "bad"]), 0..3),
        status in optional(vec![json!({}), json!({"trainerStatus": {}}), json!({"trainerStatus": {"lastUpdatedTime": "2024-01-01T00:00:00Z"}})]),
        kind in optional(vec![json!("ClusterTrainingRuntime"), json!("TrainingRuntime")]),
    ) -> Value {
        let mut spec = json!({"runtimeRef": {"name": "torch-distributed"}, "trainer": {"image": "img"}});
        let set = |key: &str, value: Option<Value>, target: &mut Value| {
            if let Some(value) = value { target[key] = value; }
        };
        set("managedBy", managed_by, &mut spec);
        set("activeDeadlineSeconds", deadline, &mut spec);
        set("kind", kind, &mut spec["runtimeRef"]);
        set("numProcPerNode", procs, &mut spec["trainer"]);
        set("numNodes", nodes, &mut spec["trainer"]);
        if dataset.is_some() || model.is_some() {
            spec["initializer"] = json!({});
            if let Some(uri) = dataset { spec["initializer"]["dataset"] = json!({"storageUri": uri}); }
            if let Some(uri) = model { spec["initializer"]["model"] = json!({"storageUri": uri}); }
        }
        if !env.is_empty() {
            spec["trainer"]["env"] = env.iter().map(|n| json!({"name": n, "value": "1"})).collect();
        }
        if !managers.is_empty() {
            spec["runtimePatches"] = managers.iter().map(|m| json!({
                "manager": m,
                "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": "node",
                    "template": {"spec": {"template": {"spec": {"containers": [{"name": "node", "image": m}]}}}}}]}}}
            })).collect();
        }
        let mut value = job(json!({"name": name}), spec);
        if let Some(status) = status { value["status"] = status; }
        value
    }
}

/// An old object: none (a create), or the new one with one change (an update).
fn with_old() -> impl Strategy<Value = (Value, Option<Value>)> {
    (trainjob(), 0..12usize).prop_map(|(new, change)| {
        let mut old = new.clone();
        let spec = &mut old["spec"];
        match change {
            0 => return (new, None),
            1 => {}
            2 => spec["runtimeRef"]["name"] = json!("other"),
            3 => spec["trainer"]["numNodes"] = json!(9),
            4 => spec["managedBy"] = json!("kueue.x-k8s.io/multikueue"),
            5 => spec["activeDeadlineSeconds"] = json!(5),
            6 => spec["initializer"] = json!({"dataset": {"storageUri": "hf://old"}}),
            7 => {
                if let Some(patches) = spec.get_mut("runtimePatches").and_then(Value::as_array_mut)
                {
                    patches.pop();
                }
            }
            8 => {
                if let Some(patch) = spec.get_mut("runtimePatches").and_then(|p| p.get_mut(0)) {
                    patch["manager"] = json!("changed.io/m");
                }
            }
            9 => spec["runtimeRef"]["kind"] = json!("ClusterTrainingRuntime"),
            10 => {
                if let Some(map) = spec.as_object_mut() {
                    map.remove("managedBy");
                    map.remove("trainer");
                }
            }
            _ => spec["suspend"] = json!(true),
        }
        (new, Some(old))
    })
}

/// kube-cel correlates every list item with the old item at its index; the API server and the native evaluator
/// correlate an item of a `listType: map` list with the old item of the same keys. The generated objects' only
/// such difference: a runtime patch whose `manager` changed is a new item, which `manager`'s transition rule
/// (`self == oldSelf`) does not see, so kube-cel's finding there is dropped.
fn keyed_correlation(reference: Findings, new: &Value, old: Option<&Value>) -> Findings {
    let managers = |v: &Value| -> Vec<Value> {
        v["spec"]["runtimePatches"]
            .as_array()
            .map_or_else(Vec::new, |p| {
                p.iter().map(|p| p["manager"].clone()).collect()
            })
    };
    let Some(old) = old else { return reference };
    let (new_managers, old_managers) = (managers(new), managers(old));
    reference
        .into_iter()
        .filter(|(path, _)| {
            let moved = new_managers.iter().enumerate().any(|(i, m)| {
                path == &format!("spec.runtimePatches[{i}].manager")
                    && old_managers.get(i) != Some(m)
            });
            !moved
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(384))]

    #[test]
    fn native_cel_agrees_with_kube_cel((new, old) in with_old()) {
        let (native, kube_cel) = both(&new, old.as_ref());
        let reference = keyed_correlation(kube_cel.clone(), &new, old.as_ref());
        // Only a missing or non-string name is outside the model in these objects.
        let name_is_string = new["metadata"]["name"].is_string();
        prop_assert_eq!(native.is_ok(), name_is_string);
        if let Ok(native) = native {
            prop_assert_eq!(native, reference.clone());
        }
        // Where the native evaluator is unsure, kube-cel's findings stand as they are.
        let expected = if name_is_string { reference } else { kube_cel };
        prop_assert_eq!(sorted(cel::check(SchemaKind::TrainJob, &new, old.as_ref())), expected);
    }

    #[test]
    fn compiled_schema_walk_agrees_with_the_generic_walk((new, _) in with_old(), extra in optional(vec![
        json!([{"name": "A"}, {"name": "A"}, {"value": "x"}, {}]),
        json!([{"name": "A", "valueFrom": {"configMapKeyRef": {"key": "k"}}}]),
        json!({"not": "a list"}),
    ])) {
        let mut value = new;
        if let Some(extra) = extra {
            value["spec"]["trainer"]["env"] = extra.clone();
            value["spec"]["initializer"] = json!({"model": {"env": extra, "storageUri": "x".repeat(2049)}});
        }
        let mut expected = Vec::new();
        legacy::check(trainjob_schema(), &value, &mut String::new(), &mut expected);
        let mut found = Vec::new();
        schema::check(constraints(SchemaKind::TrainJob).expect("constraints"), &value, &mut found);
        prop_assert_eq!(found, expected);
    }
}

#[test]
fn compiled_schema_walk_agrees_on_runtimes_and_odd_values() {
    let runtime = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "rt"},
        "spec": {"mlPolicy": {"numNodes": -2, "torch": {"numProcPerNode": "auto"}}, "template": {"spec": {
            "replicatedJobs": [
                {"name": "node", "replicas": 0, "template": {"spec": {"template": {"spec": {"containers": [
                    {"name": "node", "ports": [{"containerPort": 1, "protocol": "TCP"}, {"containerPort": 1, "protocol": "TCP"}]},
                    {"name": "node"}
                ]}}}}},
                {"name": "node", "template": {}}
            ]
        }}}
    });
    let odd = [
        runtime.clone(),
        json!({"spec": {"mlPolicy": {"numNodes": 1.5, "mpi": {"numProcPerNode": 0.0}}}}),
        json!({"spec": {"template": {"spec": {"replicatedJobs": [{"name": 1}, {"name": 1.0}, {"name": -0.0}, {"name": 0.0}]}}}}),
        json!(null),
        json!([1, 2]),
    ];
    for value in &odd {
        for (raw, kind) in [
            (runtime_schema(), SchemaKind::Runtime),
            (trainjob_schema(), SchemaKind::TrainJob),
        ] {
            let mut expected = Vec::new();
            legacy::check(raw, value, &mut String::new(), &mut expected);
            let mut found = Vec::new();
            if let Some(constraints) = constraints(kind) {
                schema::check(constraints, value, &mut found);
            }
            assert_eq!(found, expected, "{value}");
        }
    }
}

/// The generic schema walk this module replaced, kept as the oracle for the compiled one.
mod legacy {
    use std::collections::BTreeSet;

    use serde_json::Value;

    use crate::error::FieldError;

    #[allow(
        clippy::too_many_lines,
        reason = "one rule table checked against kube-cel, case by case"
    )]
    pub(super) fn check(
        schema: &Value,
        value: &Value,
        path: &mut String,
        out: &mut Vec<FieldError>,
    ) {
        match value {
            Value::Object(map) => {
                if let Some(required) = schema.get("required").and_then(Value::as_array) {
                    for key in required.iter().filter_map(Value::as_str) {
                        if !map.contains_key(key) {
                            out.push(FieldError::error(join(path, key), "Required value"));
                        }
                    }
                }
                if let Some(min) = schema.get("minProperties").and_then(Value::as_u64)
                    && (map.len() as u64) < min
                {
                    out.push(FieldError::error(
                        path.clone(),
                        format!("Invalid value: should have at least {min} properties"),
                    ));
                }
                let properties = schema.get("properties").and_then(Value::as_object);
                let additional = schema.get("additionalProperties").filter(|a| a.is_object());
                for (key, child) in map {
                    let child_schema = properties.and_then(|p| p.get(key)).or(additional);
                    if let Some(child_schema) = child_schema {
                        let len = path.len();
                        if properties.is_some_and(|p| p.contains_key(key)) {
                            if !path.is_empty() {
                                path.push('.');
                            }
                            path.push_str(key);
                        } else {
                            path.push_str(&format!("[{key}]"));
                        }
                        check(child_schema, child, path, out);
                        path.truncate(len);
                    }
                }
            }
            Value::Array(items) => {
                let count = items.len();
                if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                    && count as u64 > max
                {
                    out.push(FieldError::error(
                        path.clone(),
                        format!("Too many: {count}: must have at most {max} items"),
                    ));
                }
                if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                    && (count as u64) < min
                {
                    out.push(FieldError::error(
                        path.clone(),
                        format!("Invalid value: {count}: should have at least {min} items"),
                    ));
                }
                uniqueness(schema, items, path, out);
                if let Some(item_schema) = schema.get("items") {
                    for (i, item) in items.iter().enumerate() {
                        let len = path.len();
                        path.push_str(&format!("[{i}]"));
                        check(item_schema, item, path, out);
                        path.truncate(len);
                    }
                }
            }
            Value::String(text) => {
                let chars = text.chars().count() as u64;
                if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                    && chars > max
                {
                    out.push(FieldError::error(
                        path.clone(),
                        format!("Too long: may not be more than {max} bytes"),
                    ));
                }
                if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
                    && chars < min
                {
                    out.push(FieldError::error(
                        path.clone(),
                        format!("Invalid value: {text:?}: should be at least {min} chars long"),
                    ));
                }
                check_enum(schema, value, path, out);
            }
            Value::Number(number) => {
                if let (Some(min), Some(n)) = (
                    schema.get("minimum").and_then(Value::as_f64),
                    number.as_f64(),
                ) && n < min
                {
                    out.push(FieldError::error(
                        path.clone(),
                        format!(
                            "Invalid value: {number}: should be greater than or equal to {min}"
                        ),
                    ));
                }
                if let (Some(max), Some(n)) = (
                    schema.get("maximum").and_then(Value::as_f64),
                    number.as_f64(),
                ) && n > max
                {
                    out.push(FieldError::error(
                        path.clone(),
                        format!("Invalid value: {number}: should be less than or equal to {max}"),
                    ));
                }
                check_enum(schema, value, path, out);
            }
            Value::Bool(_) | Value::Null => {}
        }
    }

    fn uniqueness(schema: &Value, items: &[Value], path: &str, out: &mut Vec<FieldError>) {
        match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("map") => {
                let keys: Vec<&str> = schema
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|k| k.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let mut seen = BTreeSet::new();
                for (i, item) in items.iter().enumerate() {
                    let key: Vec<String> = keys
                        .iter()
                        .map(|k| item.get(*k).map(Value::to_string).unwrap_or_default())
                        .collect();
                    if !seen.insert(key.clone()) {
                        let shown: Vec<String> = keys
                            .iter()
                            .zip(&key)
                            .map(|(k, v)| format!("{k:?}:{v}"))
                            .collect();
                        out.push(FieldError::error(
                            format!("{path}[{i}]"),
                            format!("Duplicate value: {{{}}}", shown.join(",")),
                        ));
                    }
                }
            }
            Some("set") => {
                let mut seen = BTreeSet::new();
                for (i, item) in items.iter().enumerate() {
                    if !seen.insert(item.to_string()) {
                        out.push(FieldError::error(
                            format!("{path}[{i}]"),
                            format!("Duplicate value: {item}"),
                        ));
                    }
                }
            }
            _ => {}
        }
    }

    fn check_enum(schema: &Value, value: &Value, path: &str, out: &mut Vec<FieldError>) {
        if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
            && !allowed.contains(value)
        {
            let shown: Vec<String> = allowed.iter().map(Value::to_string).collect();
            out.push(FieldError::error(
                path,
                format!(
                    "Unsupported value: {value}: supported values: {}",
                    shown.join(", ")
                ),
            ));
        }
    }

    fn join(path: &str, key: &str) -> String {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    }
}
