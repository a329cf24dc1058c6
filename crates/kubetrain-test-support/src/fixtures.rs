//! Builders for the TrainJobs and runtimes that tests put in an API server, hand to a webhook or write to a
//! file, so that each test states only what it is about.
//!
//! A [`TrainJobFixture`] starts as the smallest TrainJob upstream accepts (`spec.runtimeRef` to
//! `torch-distributed`, namespace `default`) and ends as JSON ([`TrainJobFixture::json`]), a typed value
//! ([`TrainJobFixture::typed`]) or YAML text ([`TrainJobFixture::yaml`]: JSON is YAML).
//!
//! ```
//! use kubetrain_test_support::fixtures::trainjob;
//! let job = trainjob("mnist").namespace("team-a").uid("uid-1").num_nodes(2).json();
//! assert_eq!(job["spec"]["trainer"]["numNodes"], 2);
//! assert_eq!(job["spec"]["runtimeRef"]["name"], "torch-distributed");
//! ```

use serde_json::{Value, json};

/// The apiVersion of TrainJobs and training runtimes.
pub const TRAINER_API_VERSION: &str = "trainer.kubeflow.org/v1alpha1";

/// A TrainJob under construction; see the module docs.
#[derive(Clone, Debug)]
#[must_use]
pub struct TrainJobFixture(Value);

/// A TrainJob `name` in namespace `default` that refers to the ClusterTrainingRuntime `torch-distributed`.
pub fn trainjob(name: &str) -> TrainJobFixture {
    TrainJobFixture(json!({
        "apiVersion": TRAINER_API_VERSION, "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}},
    }))
}

/// A minimal (Cluster)TrainingRuntime `name` of `kind` (`TrainingRuntime` or `ClusterTrainingRuntime`): one
/// replicated job `node` with one container, in `namespace` (none for a cluster-scoped runtime), carrying
/// `finalizers`.
pub fn runtime_with_finalizers(
    kind: &str,
    name: &str,
    namespace: Option<&str>,
    finalizers: &[&str],
) -> Value {
    let mut metadata = json!({"name": name, "finalizers": finalizers});
    if let Some(namespace) = namespace {
        metadata["namespace"] = json!(namespace);
    }
    json!({
        "apiVersion": TRAINER_API_VERSION, "kind": kind, "metadata": metadata,
        "spec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {
            "template": {"spec": {"containers": [{"name": "node", "image": "x"}]}}}}}]}}},
    })
}

/// An in-memory API server holding the runtimes of the legacy-finalizer tests: ClusterTrainingRuntime `legacy`
/// with the finalizers `legacy` and `other`, ClusterTrainingRuntime `clean` with `other` only, and
/// TrainingRuntime `team-a/legacy` with `legacy` only.
pub fn runtimes_with_legacy_finalizer(legacy: &str, other: &str) -> crate::FakeApiServer {
    let server = crate::FakeApiServer::start();
    for object in [
        runtime_with_finalizers("ClusterTrainingRuntime", "legacy", None, &[legacy, other]),
        runtime_with_finalizers("ClusterTrainingRuntime", "clean", None, &[other]),
        runtime_with_finalizers("TrainingRuntime", "legacy", Some("team-a"), &[legacy]),
    ] {
        server.insert(object);
    }
    server
}

/// The stored `metadata.finalizers` of the runtime `plural`/`namespace`/`name` (`null` when it has none).
pub fn stored_finalizers(
    server: &crate::FakeApiServer,
    plural: &str,
    namespace: &str,
    name: &str,
) -> Value {
    server
        .get(TRAINER_API_VERSION, plural, namespace, name)
        .expect("runtime stored")["metadata"]
        .get("finalizers")
        .cloned()
        .unwrap_or(Value::Null)
}

impl TrainJobFixture {
    /// `metadata.namespace`.
    pub fn namespace(self, namespace: &str) -> Self {
        self.set(&["metadata", "namespace"], json!(namespace))
    }

    /// No `metadata.namespace` (a manifest the CLI or the SDK places).
    pub fn without_namespace(mut self) -> Self {
        if let Some(metadata) = self.0["metadata"].as_object_mut() {
            metadata.remove("namespace");
        }
        self
    }

    /// `metadata.uid`.
    pub fn uid(self, uid: &str) -> Self {
        self.set(&["metadata", "uid"], json!(uid))
    }

    /// `metadata.creationTimestamp` (RFC 3339).
    pub fn created(self, timestamp: &str) -> Self {
        self.set(&["metadata", "creationTimestamp"], json!(timestamp))
    }

    /// One `metadata.labels` entry.
    pub fn label(self, key: &str, value: &str) -> Self {
        self.set(&["metadata", "labels", key], json!(value))
    }

    /// `spec.runtimeRef.name` (a ClusterTrainingRuntime unless [`TrainJobFixture::spec`] sets the kind).
    pub fn runtime(self, name: &str) -> Self {
        self.set(&["spec", "runtimeRef", "name"], json!(name))
    }

    /// `spec.trainer.numNodes`.
    pub fn num_nodes(self, nodes: i64) -> Self {
        self.set(&["spec", "trainer", "numNodes"], json!(nodes))
    }

    /// `spec.trainer.command`.
    pub fn command(self, command: &[&str]) -> Self {
        self.set(&["spec", "trainer", "command"], json!(command))
    }

    /// `spec.suspend`.
    pub fn suspend(self, suspend: bool) -> Self {
        self.set(&["spec", "suspend"], json!(suspend))
    }

    /// Merges `fields` into `spec.trainer` (a field given replaces the one there).
    pub fn trainer(self, fields: Value) -> Self {
        self.merge(&["spec", "trainer"], fields)
    }

    /// Merges `fields` into `spec` (a field given replaces the one there, `runtimeRef` included).
    pub fn spec(self, fields: Value) -> Self {
        self.merge(&["spec"], fields)
    }

    /// `status.conditions`.
    pub fn conditions(self, conditions: Value) -> Self {
        self.set(&["status", "conditions"], conditions)
    }

    /// The TrainJob as JSON.
    pub fn json(self) -> Value {
        self.0
    }

    /// The TrainJob as YAML text, as a manifest file holds it.
    pub fn yaml(&self) -> String {
        format!("{}\n", self.0)
    }

    /// The TrainJob as `T` (kubetrain-api's `TrainJob`, a `DynamicObject`); panics when it does not
    /// deserialize, which is a broken fixture.
    pub fn typed<T: serde::de::DeserializeOwned>(self) -> T {
        serde_json::from_value(self.0)
            .unwrap_or_else(|e| panic!("the fixture is not a valid TrainJob: {e}"))
    }

    fn set(mut self, path: &[&str], value: Value) -> Self {
        *slot(&mut self.0, path) = value;
        self
    }

    fn merge(mut self, path: &[&str], fields: Value) -> Self {
        let target = slot(&mut self.0, path);
        match (target.as_object_mut(), fields) {
            (Some(target), Value::Object(fields)) => target.extend(fields),
            (_, fields) => *target = fields,
        }
        self
    }
}

/// The value at `path`, with objects created on the way (a non-object on the way is replaced).
fn slot<'a>(mut value: &'a mut Value, path: &[&str]) -> &'a mut Value {
    for key in path {
        if !value.is_object() {
            *value = json!({});
        }
        value = value
            .as_object_mut()
            .map(|object| object.entry(key.to_string()).or_insert(Value::Null))
            .unwrap_or_else(|| unreachable!("made an object above"));
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smallest_trainjob_is_upstreams_minimal_manifest() {
        assert_eq!(
            trainjob("j").json(),
            json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                   "metadata": {"name": "j", "namespace": "default"},
                   "spec": {"runtimeRef": {"name": "torch-distributed"}}})
        );
    }

    #[test]
    fn setters_build_nested_fields_and_merges_keep_the_others() {
        let job = trainjob("j")
            .without_namespace()
            .label("kueue.x-k8s.io/queue-name", "q")
            .num_nodes(2)
            .trainer(json!({"command": ["sh"]}))
            .spec(json!({"suspend": true}))
            .json();
        assert_eq!(
            job["metadata"],
            json!({"name": "j", "labels": {"kueue.x-k8s.io/queue-name": "q"}})
        );
        assert_eq!(
            job["spec"]["trainer"],
            json!({"numNodes": 2, "command": ["sh"]})
        );
        assert_eq!(job["spec"]["runtimeRef"]["name"], "torch-distributed");
        assert_eq!(job["spec"]["suspend"], true);
    }

    #[test]
    fn yaml_is_the_json_text() {
        let text = trainjob("j").yaml();
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, trainjob("j").json());
    }
}
