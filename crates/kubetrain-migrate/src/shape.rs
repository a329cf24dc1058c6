//! Generated runtimes are named after their shape, so that jobs of the same shape share one.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use kubetrain_api::TrainingRuntimeSpec;
use kubetrain_api::constants::{ANCESTOR_LABEL, ANCESTOR_TRAINER, FRAMEWORK_LABEL, NODE};
use sha2::{Digest, Sha256};

use crate::v1::V1Kind;

/// The label naming the v1 kind a generated runtime was made for.
pub(crate) const MIGRATED_FROM_LABEL: &str = "kubetrain.io/migrated-from";

/// `<kind>-<first 10 hex digits of the SHA-256 of the spec>`. The trainer container's image is left out: each
/// TrainJob sets its own, so jobs that differ only there share a runtime.
pub(crate) fn runtime_name(kind: V1Kind, spec: &TrainingRuntimeSpec) -> String {
    let mut shape = spec.clone();
    for job in &mut shape.template.spec.replicated_jobs {
        let trainer = job
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.as_ref())
            .and_then(|l| l.get(ANCESTOR_LABEL))
            .is_some_and(|v| v == ANCESTOR_TRAINER);
        let pod = job
            .template
            .spec
            .as_mut()
            .and_then(|j| j.template.spec.as_mut());
        if let (true, Some(pod)) = (trainer, pod) {
            pod.containers
                .iter_mut()
                .filter(|c| c.name == NODE)
                .for_each(|c| c.image = None);
        }
    }
    // Struct fields serialise in declaration order and maps in key order: the text is canonical.
    let text = serde_json::to_string(&shape).unwrap_or_default();
    let digest = Sha256::digest(text.as_bytes());
    let mut hex = String::new();
    for byte in &digest[..5] {
        let _ = write!(hex, "{byte:02x}");
    }
    format!("{}-{hex}", kind.as_str().to_lowercase())
}

/// The generated runtime's labels: the framework (as the built-in runtimes have) and the v1 kind.
pub(crate) fn runtime_labels(kind: V1Kind) -> BTreeMap<String, String> {
    let framework = match kind {
        V1Kind::PyTorchJob => "torch",
        V1Kind::TFJob => "tensorflow",
        V1Kind::MPIJob => "mpi",
        V1Kind::XGBoostJob => "xgboost",
        V1Kind::PaddleJob => "paddle",
        V1Kind::JAXJob => "jax",
    };
    BTreeMap::from([
        (FRAMEWORK_LABEL.to_owned(), framework.to_owned()),
        (MIGRATED_FROM_LABEL.to_owned(), kind.as_str().to_owned()),
    ])
}
