//! How `train` turns its arguments into a TrainJob, as the Python SDK does (trainer.md §6).

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};

use k8s_openapi::api::core::v1::EnvVar;
use kubetrain_api::{DatasetInitializer, ModelInitializer, RuntimeRef, TrainJob, TrainJobSpec};

use crate::types::{Initializer, TrainOptions, Trainer};

/// The runtime `train` uses when none is given.
pub const DEFAULT_RUNTIME: &str = "torch-distributed";

/// A job name like the Python SDK's: a lowercase letter and 11 hex digits.
///
/// ```
/// let name = kubetrain_client::build::generate_name();
/// assert_eq!(name.len(), 12);
/// assert!(name.as_bytes()[0].is_ascii_lowercase());
/// assert!(name[1..].chars().all(|c| c.is_ascii_hexdigit()));
/// ```
pub fn generate_name() -> String {
    // RandomState is seeded per process from the OS; mixing in the time and a counter gives distinct names.
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    let bits = h.finish();
    let letter = char::from(b'a' + (bits % 26) as u8);
    format!("{letter}{:011x}", (bits >> 8) & 0xfff_ffff_ffff)
}

fn env(map: &BTreeMap<String, String>) -> Vec<EnvVar> {
    map.iter()
        .map(|(k, v)| EnvVar {
            name: k.clone(),
            value: Some(v.clone()),
            value_from: None,
        })
        .collect()
}

/// The TrainJob `train` creates: `spec.runtimeRef = {name}` only (the kind defaults server-side), the trainer
/// and initializers as given, options' labels and annotations on the object.
///
/// ```
/// use kubetrain_client::{Trainer, TrainOptions, build::build_trainjob};
/// let job = build_trainjob("torch-distributed", Some(&Trainer::command(["python", "train.py"]).with_num_nodes(2)),
///     None, &TrainOptions { name: Some("demo".into()), ..Default::default() }, "team-a");
/// assert_eq!(job.name(), "demo");
/// assert_eq!(job.spec.runtime_ref.kind, None);
/// assert_eq!(job.spec.trainer.as_ref().unwrap().num_nodes, Some(2));
/// ```
pub fn build_trainjob(
    runtime: &str,
    trainer: Option<&Trainer>,
    initializer: Option<&Initializer>,
    options: &TrainOptions,
    namespace: &str,
) -> TrainJob {
    let name = options.name.clone().unwrap_or_else(generate_name);
    let spec = TrainJobSpec {
        runtime_ref: RuntimeRef {
            name: runtime.to_string(),
            ..RuntimeRef::default()
        },
        trainer: trainer.map(|t| kubetrain_api::Trainer {
            image: t.image.clone(),
            command: (!t.command.is_empty()).then(|| t.command.clone()),
            args: (!t.args.is_empty()).then(|| t.args.clone()),
            env: t.env_vars(),
            num_nodes: t.num_nodes,
            resources_per_node: t.resources_per_node.clone(),
            ..kubetrain_api::Trainer::default()
        }),
        initializer: initializer.map(|i| kubetrain_api::Initializer {
            dataset: i.dataset.as_ref().map(|(uri, e)| DatasetInitializer {
                storage_uri: Some(uri.clone()),
                env: env(e),
                ..DatasetInitializer::default()
            }),
            model: i.model.as_ref().map(|(uri, e)| ModelInitializer {
                storage_uri: Some(uri.clone()),
                env: env(e),
                ..ModelInitializer::default()
            }),
        }),
        ..TrainJobSpec::default()
    };
    let mut job = TrainJob::new(name, spec);
    job.metadata.namespace = Some(namespace.to_string());
    if !options.labels.is_empty() {
        job.metadata.labels = Some(options.labels.clone());
    }
    if !options.annotations.is_empty() {
        job.metadata.annotations = Some(options.annotations.clone());
    }
    job
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_and_well_formed() {
        let names: std::collections::BTreeSet<String> = (0..200).map(|_| generate_name()).collect();
        assert_eq!(names.len(), 200);
        for n in &names {
            assert_eq!(n.len(), 12, "{n}");
            assert!(n.as_bytes()[0].is_ascii_lowercase(), "{n}");
            assert!(
                n[1..]
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
                "{n}"
            );
        }
    }
}
