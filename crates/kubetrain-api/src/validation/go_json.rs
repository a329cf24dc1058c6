//! The bad value in upstream's `field.Invalid` messages (`path: Invalid value: <value>: detail`).
//!
//! apimachinery's `ErrorBody` prints numbers and booleans plainly, strings quoted, and anything else as Go's
//! `json.Marshal` of upstream's typed value: struct fields in Go's declaration order, `omitempty` fields left
//! out when empty, fields without `omitempty` always present (a zero struct as `{}`), map keys sorted, and
//! `<`, `>`, `&` escaped. The tables below are those Go types (trainer v2.3.0, k8s.io/api v0.36), as far as
//! upstream's webhooks print them; a field not listed keeps its place after the listed ones, sorted.

use std::fmt::Write as _;

use serde_json::Value;

/// A Go type as `encoding/json` writes it.
pub(crate) enum Ty {
    /// A type not tabled here: printed as given, keys sorted.
    Any,
    /// A Go map: keys sorted; empty counts as empty for `omitempty`.
    Map(&'static Ty),
    /// A Go slice.
    List(&'static Ty),
    /// A Go struct (behind a pointer where `omitempty` applies): its fields in declaration order.
    Struct(&'static [Field]),
}

/// One struct field: its JSON name, type, and the zero printed when it is absent and has no `omitempty`
/// (`None`: `omitempty`, left out when empty).
pub(crate) struct Field(&'static str, &'static Ty, Option<&'static str>);

const fn opt(name: &'static str, ty: &'static Ty) -> Field {
    Field(name, ty, None)
}

const fn req(name: &'static str, ty: &'static Ty, zero: &'static str) -> Field {
    Field(name, ty, Some(zero))
}

static ANY: Ty = Ty::Any;
static STRINGS: Ty = Ty::List(&ANY);
static STRING_MAP: Ty = Ty::Map(&ANY);

/// trainer `RuntimeRef`.
pub(crate) static RUNTIME_REF: Ty =
    Ty::Struct(&[opt("name", &ANY), opt("apiGroup", &ANY), opt("kind", &ANY)]);

/// trainer `EnvInjectionTarget`.
pub(crate) static ENV_INJECTION_TARGET: Ty =
    Ty::Struct(&[opt("jobName", &ANY), opt("containerNames", &STRINGS)]);

static OBJECT_FIELD_SELECTOR: Ty =
    Ty::Struct(&[opt("apiVersion", &ANY), req("fieldPath", &ANY, "\"\"")]);
static RESOURCE_FIELD_SELECTOR: Ty = Ty::Struct(&[
    opt("containerName", &ANY),
    req("resource", &ANY, "\"\""),
    // A Quantity is a struct: `omitempty` does not leave it out.
    req("divisor", &ANY, "\"0\""),
]);
static KEY_SELECTOR: Ty = Ty::Struct(&[
    opt("name", &ANY),
    req("key", &ANY, "\"\""),
    opt("optional", &ANY),
]);
static ENV_VAR_SOURCE: Ty = Ty::Struct(&[
    opt("fieldRef", &OBJECT_FIELD_SELECTOR),
    opt("resourceFieldRef", &RESOURCE_FIELD_SELECTOR),
    opt("configMapKeyRef", &KEY_SELECTOR),
    opt("secretKeyRef", &KEY_SELECTOR),
    opt("fileKeyRef", &ANY),
]);
static ENV_VAR: Ty = Ty::Struct(&[
    req("name", &ANY, "\"\""),
    opt("value", &ANY),
    opt("valueFrom", &ENV_VAR_SOURCE),
]);
/// corev1 `[]EnvVar`.
pub(crate) static ENV_VARS: Ty = Ty::List(&ENV_VAR);

static RESOURCE_CLAIM: Ty = Ty::Struct(&[req("name", &ANY, "\"\""), opt("request", &ANY)]);
static RESOURCE_CLAIMS: Ty = Ty::List(&RESOURCE_CLAIM);
/// corev1 `ResourceRequirements`.
pub(crate) static RESOURCE_REQUIREMENTS: Ty = Ty::Struct(&[
    opt("limits", &STRING_MAP),
    opt("requests", &STRING_MAP),
    opt("claims", &RESOURCE_CLAIMS),
]);

static CONTAINER_PORT: Ty = Ty::Struct(&[
    opt("name", &ANY),
    opt("hostPort", &ANY),
    req("containerPort", &ANY, "0"),
    opt("protocol", &ANY),
    opt("hostIP", &ANY),
]);
static CONTAINER_PORTS: Ty = Ty::List(&CONTAINER_PORT);
static VOLUME_MOUNT: Ty = Ty::Struct(&[
    req("name", &ANY, "\"\""),
    opt("readOnly", &ANY),
    opt("recursiveReadOnly", &ANY),
    req("mountPath", &ANY, "\"\""),
    opt("subPath", &ANY),
    opt("mountPropagation", &ANY),
    opt("subPathExpr", &ANY),
]);
static VOLUME_MOUNTS: Ty = Ty::List(&VOLUME_MOUNT);
static ANY_LIST: Ty = Ty::List(&ANY);
static CONTAINER: Ty = Ty::Struct(&[
    req("name", &ANY, "\"\""),
    opt("image", &ANY),
    opt("command", &STRINGS),
    opt("args", &STRINGS),
    opt("workingDir", &ANY),
    opt("ports", &CONTAINER_PORTS),
    opt("envFrom", &ANY_LIST),
    opt("env", &ENV_VARS),
    // A struct: `omitempty` does not leave it out.
    req("resources", &RESOURCE_REQUIREMENTS, "{}"),
    opt("resizePolicy", &ANY_LIST),
    opt("restartPolicy", &ANY),
    opt("restartPolicyRules", &ANY_LIST),
    opt("volumeMounts", &VOLUME_MOUNTS),
    opt("volumeDevices", &ANY_LIST),
    opt("livenessProbe", &ANY),
    opt("readinessProbe", &ANY),
    opt("startupProbe", &ANY),
    opt("lifecycle", &ANY),
    opt("terminationMessagePath", &ANY),
    opt("terminationMessagePolicy", &ANY),
    opt("imagePullPolicy", &ANY),
    opt("securityContext", &ANY),
    opt("stdin", &ANY),
    opt("stdinOnce", &ANY),
    opt("tty", &ANY),
]);
/// corev1 `[]Container`.
pub(crate) static CONTAINERS: Ty = Ty::List(&CONTAINER);

static OBJECT_META: Ty = Ty::Struct(&[
    opt("name", &ANY),
    opt("generateName", &ANY),
    opt("namespace", &ANY),
    opt("selfLink", &ANY),
    opt("uid", &ANY),
    opt("resourceVersion", &ANY),
    opt("generation", &ANY),
    opt("creationTimestamp", &ANY),
    opt("deletionTimestamp", &ANY),
    opt("deletionGracePeriodSeconds", &ANY),
    opt("labels", &STRING_MAP),
    opt("annotations", &STRING_MAP),
    opt("ownerReferences", &ANY_LIST),
    opt("finalizers", &STRINGS),
    opt("managedFields", &ANY_LIST),
]);
static CONTAINER_PATCH: Ty = Ty::Struct(&[
    opt("name", &ANY),
    opt("env", &ENV_VARS),
    opt("volumeMounts", &VOLUME_MOUNTS),
    opt("securityContext", &ANY),
]);
static CONTAINER_PATCHES: Ty = Ty::List(&CONTAINER_PATCH);
static LOCAL_OBJECT_REFERENCE: Ty = Ty::Struct(&[opt("name", &ANY)]);
static LOCAL_OBJECT_REFERENCES: Ty = Ty::List(&LOCAL_OBJECT_REFERENCE);
static TOLERATION: Ty = Ty::Struct(&[
    opt("key", &ANY),
    opt("operator", &ANY),
    opt("value", &ANY),
    opt("effect", &ANY),
    opt("tolerationSeconds", &ANY),
]);
static TOLERATIONS: Ty = Ty::List(&TOLERATION);
static SCHEDULING_GATES: Ty = Ty::List(&LOCAL_OBJECT_REFERENCE);
static POD_SPEC_PATCH: Ty = Ty::Struct(&[
    opt("serviceAccountName", &ANY),
    opt("volumes", &ANY_LIST),
    opt("initContainers", &CONTAINER_PATCHES),
    opt("containers", &CONTAINER_PATCHES),
    opt("imagePullSecrets", &LOCAL_OBJECT_REFERENCES),
    opt("securityContext", &ANY),
    opt("nodeSelector", &STRING_MAP),
    opt("affinity", &ANY),
    opt("tolerations", &TOLERATIONS),
    opt("schedulingGates", &SCHEDULING_GATES),
    opt("terminationGracePeriodSeconds", &ANY),
]);
static POD_TEMPLATE_PATCH: Ty =
    Ty::Struct(&[opt("metadata", &OBJECT_META), opt("spec", &POD_SPEC_PATCH)]);
static JOB_SPEC_PATCH: Ty = Ty::Struct(&[opt("template", &POD_TEMPLATE_PATCH)]);
static JOB_TEMPLATE_PATCH: Ty =
    Ty::Struct(&[opt("metadata", &OBJECT_META), opt("spec", &JOB_SPEC_PATCH)]);
static REPLICATED_JOB_PATCH: Ty =
    Ty::Struct(&[opt("name", &ANY), opt("template", &JOB_TEMPLATE_PATCH)]);
static REPLICATED_JOB_PATCHES: Ty = Ty::List(&REPLICATED_JOB_PATCH);
static JOBSET_SPEC_PATCH: Ty = Ty::Struct(&[opt("replicatedJobs", &REPLICATED_JOB_PATCHES)]);
static JOBSET_TEMPLATE_PATCH: Ty = Ty::Struct(&[
    opt("metadata", &OBJECT_META),
    opt("spec", &JOBSET_SPEC_PATCH),
]);
static TRAINING_RUNTIME_SPEC_PATCH: Ty = Ty::Struct(&[opt("template", &JOBSET_TEMPLATE_PATCH)]);
static RUNTIME_PATCH: Ty = Ty::Struct(&[
    opt("manager", &ANY),
    opt("time", &ANY),
    opt("trainingRuntimeSpec", &TRAINING_RUNTIME_SPEC_PATCH),
]);
/// trainer `[]RuntimePatch`.
pub(crate) static RUNTIME_PATCHES: Ty = Ty::List(&RUNTIME_PATCH);

/// `value` as Go's `json.Marshal` writes the Go type `ty` decoded from it.
pub(crate) fn marshal(value: &Value, ty: &Ty) -> String {
    let mut out = String::new();
    write(&mut out, value, ty);
    out
}

/// `value` (serialized from one of our types) as `marshal` writes it; `null` when it does not serialize.
pub(crate) fn marshal_typed<T: serde::Serialize + ?Sized>(value: &T, ty: &Ty) -> String {
    serde_json::to_value(value).map_or_else(|_| "null".to_owned(), |v| marshal(&v, ty))
}

/// `Invalid value: <value>: <detail>`, the body of upstream's `field.Invalid` for a non-scalar value.
pub(crate) fn invalid<T: serde::Serialize + ?Sized>(value: &T, ty: &Ty, detail: &str) -> String {
    format!("Invalid value: {}: {detail}", marshal_typed(value, ty))
}

/// What Go's `omitempty` leaves out: `false`, `0`, `""`, a nil pointer, an empty slice or map (not an empty
/// struct).
fn empty(value: &Value, ty: &Ty) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty() && matches!(ty, Ty::Map(_)),
    }
}

fn write(out: &mut String, value: &Value, ty: &Ty) {
    match (value, ty) {
        (Value::Object(map), Ty::Struct(fields)) => {
            out.push('{');
            let mut first = true;
            let mut sep = |out: &mut String| {
                if !first {
                    out.push(',');
                }
                first = false;
            };
            for Field(name, field_ty, zero) in fields.iter() {
                match (map.get(*name), zero) {
                    (Some(v), Some(_)) if !v.is_null() => {
                        sep(out);
                        write_key(out, name);
                        write(out, v, field_ty);
                    }
                    (_, Some(zero)) => {
                        sep(out);
                        write_key(out, name);
                        out.push_str(zero);
                    }
                    (Some(v), None) if !empty(v, field_ty) => {
                        sep(out);
                        write_key(out, name);
                        write(out, v, field_ty);
                    }
                    _ => {}
                }
            }
            let mut rest: Vec<_> = map
                .iter()
                .filter(|(k, v)| !v.is_null() && !fields.iter().any(|f| f.0 == k.as_str()))
                .collect();
            rest.sort_by(|a, b| a.0.cmp(b.0));
            for (k, v) in rest {
                sep(out);
                write_key(out, k);
                write(out, v, &ANY);
            }
            out.push('}');
        }
        (Value::Object(map), Ty::Map(inner)) => write_sorted(out, map, inner),
        (Value::Object(map), _) => write_sorted(out, map, &ANY),
        (Value::Array(items), ty) => {
            let inner = match ty {
                Ty::List(inner) => inner,
                _ => &ANY,
            };
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(out, item, inner);
            }
            out.push(']');
        }
        (Value::String(s), _) => write_string(out, s),
        (other, _) => out.push_str(&other.to_string()),
    }
}

fn write_sorted(out: &mut String, map: &serde_json::Map<String, Value>, inner: &Ty) {
    let mut entries: Vec<_> = map.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    out.push('{');
    for (i, (k, v)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_key(out, k);
        write(out, v, inner);
    }
    out.push('}');
}

fn write_key(out: &mut String, key: &str) {
    write_string(out, key);
    out.push(':');
}

/// Go's `encoding/json` string: HTML-safe (`<`, `>`, `&` as `\u003c`…), U+2028/U+2029 escaped.
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Each row: the value as our types serialize it (keys sorted), the Go type, what upstream printed on the
    /// e2e cluster (docs/e2e.md, side by side) or what Go's `json.Marshal` writes.
    #[test]
    fn go_marshal_table() {
        let rows: &[(Value, &Ty, &str)] = &[
            (
                json!({"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": "torch-distributed"}),
                &RUNTIME_REF,
                r#"{"name":"torch-distributed","apiGroup":"trainer.kubeflow.org","kind":"ClusterTrainingRuntime"}"#,
            ),
            (
                json!([{"name": "PET_NNODES", "value": "9"}, {"name": "E", "value": ""}]),
                &ENV_VARS,
                r#"[{"name":"PET_NNODES","value":"9"},{"name":"E"}]"#,
            ),
            (
                json!([{"name": "R", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}]),
                &ENV_VARS,
                r#"[{"name":"R","valueFrom":{"resourceFieldRef":{"resource":"limits.cpu","divisor":"0"}}}]"#,
            ),
            (
                json!([{"image": "busybox:1.36", "name": "main"}]),
                &CONTAINERS,
                r#"[{"name":"main","image":"busybox:1.36","resources":{}}]"#,
            ),
            (
                json!([
                    {"manager": "e2e.kubetrain.dev/generator", "time": "2026-12-01T18:04:37Z",
                     "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": "node",
                        "template": {"spec": {"template": {"spec": {"containers": [
                            {"env": [{"name": "X", "value": "1"}], "name": "node"}]}}}}}]}}}},
                    {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {"spec": {}}}}
                ]),
                &RUNTIME_PATCHES,
                r#"[{"manager":"e2e.kubetrain.dev/generator","time":"2026-12-01T18:04:37Z","trainingRuntimeSpec":{"template":{"spec":{"replicatedJobs":[{"name":"node","template":{"spec":{"template":{"spec":{"containers":[{"name":"node","env":[{"name":"X","value":"1"}]}]}}}}}]}}}},{"manager":"kueue.x-k8s.io/manager","trainingRuntimeSpec":{"template":{"spec":{}}}}]"#,
            ),
            (
                json!({"requests": {"nvidia.com/gpu": "2", "cpu": "1"}, "limits": {}}),
                &RESOURCE_REQUIREMENTS,
                r#"{"requests":{"cpu":"1","nvidia.com/gpu":"2"}}"#,
            ),
            (
                json!({"name": "a<b>&\u{2028}\"\\\n\u{1}"}),
                &RUNTIME_REF,
                r#"{"name":"a\u003cb\u003e\u0026\u2028\"\\\n\u0001"}"#,
            ),
            (json!(null), &RESOURCE_REQUIREMENTS, "null"),
        ];
        for (value, ty, want) in rows {
            assert_eq!(marshal(value, ty), *want, "{value}");
        }
    }
}
