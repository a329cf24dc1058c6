//! What topology-aware scheduling reads: nodes (from `v1` `Node` documents or a scenario's node pools),
//! topologies and the pod sets' topology requests; shared by the setup, the model and the placement.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::api::Taint;
use crate::error::{LoadError, SetupFieldError};
use crate::quantity::Quantity;

/// A node as the model reads it from a `v1` `Node` document.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Node {
    /// Name.
    pub name: String,
    /// Labels (topology levels, flavor labels, node-pool labels).
    pub labels: BTreeMap<String, String>,
    /// `status.allocatable` (falls back to `status.capacity`).
    pub allocatable: BTreeMap<String, Quantity>,
    /// `spec.taints`.
    pub taints: Vec<Taint>,
    /// `spec.unschedulable`, or a `Ready` condition that is not `True`: no TAS pods go there.
    pub unschedulable: bool,
}

impl Node {
    /// The `v1` `Node` document (labels, taints, allocatable) for `kubetrain queue generate`.
    pub fn to_document(&self) -> Value {
        let allocatable: serde_json::Map<String, Value> = self
            .allocatable
            .iter()
            .map(|(r, q)| (r.clone(), Value::from(q.to_string())))
            .collect();
        let mut doc = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": self.labels},
            "status": {"allocatable": allocatable, "capacity": allocatable},
        });
        if !self.taints.is_empty() || self.unschedulable {
            doc["spec"] =
                serde_json::json!({"taints": self.taints, "unschedulable": self.unschedulable});
        }
        doc
    }

    /// Reads the parts of a `Node` document TAS uses; other fields are ignored.
    pub fn from_document(name: &str, doc: &Value) -> Result<Node, LoadError> {
        let err = |path: &str, message: String| {
            LoadError::Invalid(vec![SetupFieldError {
                kind: "Node".to_string(),
                name: name.to_string(),
                path: path.to_string(),
                message,
            }])
        };
        let labels = doc
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let resources = doc
            .pointer("/status/allocatable")
            .or_else(|| doc.pointer("/status/capacity"));
        let mut allocatable = BTreeMap::new();
        if let Some(map) = resources.and_then(Value::as_object) {
            for (r, v) in map {
                let text = match v {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    _ => {
                        return Err(err(
                            &format!("status.allocatable.{r}"),
                            "expected a quantity".into(),
                        ));
                    }
                };
                let q = Quantity::parse(&text)
                    .map_err(|e| err(&format!("status.allocatable.{r}"), e.to_string()))?;
                allocatable.insert(r.clone(), q);
            }
        }
        let taints = match doc.pointer("/spec/taints") {
            Some(t) => {
                serde_json::from_value(t.clone()).map_err(|e| err("spec.taints", e.to_string()))?
            }
            None => Vec::new(),
        };
        let not_ready = doc
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.get("type").and_then(Value::as_str) == Some("Ready")
                        && c.get("status").and_then(Value::as_str) != Some("True")
                })
            });
        let unschedulable =
            doc.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) || not_ready;
        Ok(Node {
            name: doc
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or(name)
                .to_string(),
            labels,
            allocatable,
            taints,
            unschedulable,
        })
    }
}

/// What a pod set asks of the topology.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub enum TopologyRequest {
    /// Every pod in one domain of this level (`podset-required-topology`).
    Required(String),
    /// This level if possible, wider levels otherwise (`podset-preferred-topology`).
    Preferred(String),
    /// Anywhere in the topology (`podset-unconstrained-topology`, or implied by a TAS-only queue).
    Unconstrained,
}

/// The pod-template annotations of upstream's TAS requests.
pub const REQUIRED_ANNOTATION: &str = "kueue.x-k8s.io/podset-required-topology";
/// See [`REQUIRED_ANNOTATION`].
pub const PREFERRED_ANNOTATION: &str = "kueue.x-k8s.io/podset-preferred-topology";
/// See [`REQUIRED_ANNOTATION`].
pub const UNCONSTRAINED_ANNOTATION: &str = "kueue.x-k8s.io/podset-unconstrained-topology";

/// A topology with interned node domains.
#[derive(Debug, Clone, Default)]
pub struct Topology {
    /// Name.
    pub name: String,
    /// Level labels, widest first.
    pub levels: Vec<String>,
}
