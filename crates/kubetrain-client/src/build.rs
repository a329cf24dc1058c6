//! How `train` turns its arguments into a TrainJob, as the Python SDK 0.5.0 does (trainer.md §6).

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};

use k8s_openapi::api::core::v1::EnvVar;
use kubetrain_api::{RuntimePatch, RuntimeRef, TrainJob, TrainJobSpec};

use crate::error::{ClientError, Result};
use crate::initializers::Initializer;
use crate::trainer::TrainerSpec;
use crate::types::{Runtime, SDK_PATCH_MANAGER, TrainOptions};

/// The runtime `train` uses when none is given.
pub const DEFAULT_RUNTIME: &str = "torch-distributed";

/// A job name like the Python SDK's: a lowercase letter and 11 hex digits.
pub(crate) fn generate_name() -> String {
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

/// The TrainJob `train` creates, as the Python SDK 0.5.0 builds it: `spec.runtimeRef = {name, kind}` of the
/// resolved runtime, `spec.trainer` from the trainer (left out when empty), the initializers, and the
/// options (labels, annotations, runtime patch, active deadline, command/args overrides).
///
/// ```
/// use kubetrain_client::{Runtime, Trainer, TrainOptions, build::build_trainjob};
/// let runtime = Runtime { name: "torch-distributed".into(), kind: "ClusterTrainingRuntime".into(), ..Default::default() };
/// let trainer = Trainer::command(["python", "train.py"]).with_num_nodes(2).into();
/// let job = build_trainjob(&runtime, Some(&trainer), None,
///     &TrainOptions { name: Some("demo".into()), ..Default::default() }, "team-a").unwrap();
/// assert_eq!(job.name(), "demo");
/// assert_eq!(job.spec.runtime_ref.kind.as_deref(), Some("ClusterTrainingRuntime"));
/// assert_eq!(job.spec.trainer.as_ref().unwrap().num_nodes, Some(2));
/// ```
pub fn build_trainjob(
    runtime: &Runtime,
    trainer: Option<&TrainerSpec>,
    initializer: Option<&Initializer>,
    options: &TrainOptions,
    namespace: &str,
) -> Result<TrainJob> {
    let mut trainer_cr = match trainer {
        Some(t) => trainer_cr(runtime, t, initializer)?,
        None => kubetrain_api::Trainer::default(),
    };
    if options.trainer_command.is_some() || options.trainer_args.is_some() {
        if let Some(t) = trainer.filter(|t| !matches!(t, TrainerSpec::Container(_))) {
            return Err(ClientError::InvalidArgument(format!(
                "options.trainer_command/trainer_args: only with a container trainer (Trainer); a {} builds its own command and args",
                t.kind()
            )));
        }
        if let Some(c) = &options.trainer_command {
            trainer_cr.command = Some(c.clone());
        }
        if let Some(a) = &options.trainer_args {
            trainer_cr.args = Some(a.clone());
        }
    }
    if let Some(s) = options.active_deadline_seconds
        && s < 1
    {
        return Err(ClientError::InvalidArgument(format!(
            "options.active_deadline_seconds: must be a positive integer (minimum 1), got {s}"
        )));
    }
    if let Some(s) = options.ttl_seconds_after_finished
        && s < 0
    {
        return Err(ClientError::InvalidArgument(format!(
            "options.ttl_seconds_after_finished: must be 0 or more seconds, got {s}"
        )));
    }
    let spec = TrainJobSpec {
        runtime_ref: RuntimeRef {
            name: runtime.name.clone(),
            kind: (!runtime.kind.is_empty()).then(|| runtime.kind.clone()),
            ..RuntimeRef::default()
        },
        trainer: (trainer_cr != kubetrain_api::Trainer::default()).then_some(trainer_cr),
        initializer: match initializer {
            Some(i) => i.to_api()?,
            None => None,
        },
        runtime_patches: options
            .runtime_patch
            .iter()
            .map(|p| RuntimePatch {
                manager: SDK_PATCH_MANAGER.to_string(),
                time: None,
                training_runtime_spec: Some(p.clone()),
            })
            .collect(),
        active_deadline_seconds: options.active_deadline_seconds,
        ttl_seconds_after_finished: options.ttl_seconds_after_finished,
        ..TrainJobSpec::default()
    };
    let name = options.name.clone().unwrap_or_else(generate_name);
    let mut job = TrainJob::new(name, spec);
    job.metadata.namespace = Some(namespace.to_string());
    if !options.labels.is_empty() {
        job.metadata.labels = Some(options.labels.clone());
    }
    if !options.annotations.is_empty() {
        job.metadata.annotations = Some(options.annotations.clone());
    }
    Ok(job)
}

/// `spec.trainer` for `trainer` on `runtime`: the SDK's `get_trainer_cr_from_custom_trainer` and
/// `get_trainer_cr_from_builtin_trainer`. A function or container trainer needs a `custom` runtime, a
/// built-in one a `builtin` (TorchTune) runtime.
pub(crate) fn trainer_cr(
    runtime: &Runtime,
    trainer: &TrainerSpec,
    initializer: Option<&Initializer>,
) -> Result<kubetrain_api::Trainer> {
    let builtin_runtime = runtime.trainer.trainer_type == "builtin";
    let wrong = |want: &str| {
        ClientError::InvalidArgument(format!(
            "trainer: a {} can't be used with runtime {:?} (framework {}, {} trainer); use a {want} runtime",
            trainer.kind(),
            runtime.name,
            runtime.trainer.framework,
            runtime.trainer.trainer_type
        ))
    };
    let env = |map: &BTreeMap<String, String>| -> Vec<EnvVar> {
        map.iter()
            .map(|(k, v)| EnvVar {
                name: k.clone(),
                value: Some(v.clone()),
                value_from: None,
            })
            .collect()
    };
    Ok(match trainer {
        TrainerSpec::Container(t) => {
            if builtin_runtime {
                return Err(wrong("custom"));
            }
            kubetrain_api::Trainer {
                image: t.image.clone(),
                command: (!t.command.is_empty()).then(|| t.command.clone()),
                args: (!t.args.is_empty()).then(|| t.args.clone()),
                env: env(&t.env),
                num_nodes: t.num_nodes.filter(|n| *n != 0),
                resources_per_node: t.resources_per_node.clone(),
                ..kubetrain_api::Trainer::default()
            }
        }
        TrainerSpec::Function(f) => {
            if builtin_runtime {
                return Err(wrong("custom"));
            }
            kubetrain_api::Trainer {
                image: f.image.clone(),
                command: Some(f.command(&runtime.trainer.command)?),
                env: env(&f.env),
                num_nodes: f.num_nodes.filter(|n| *n != 0),
                resources_per_node: f.resources_per_node.clone(),
                ..kubetrain_api::Trainer::default()
            }
        }
        TrainerSpec::Builtin(b) => {
            if !builtin_runtime {
                return Err(wrong("builtin (TorchTune)"));
            }
            kubetrain_api::Trainer {
                command: Some(runtime.trainer.command.clone()),
                args: Some(b.args(initializer)),
                num_nodes: b.config.num_nodes.filter(|n| *n != 0),
                resources_per_node: b.config.resources_per_node.clone(),
                ..kubetrain_api::Trainer::default()
            }
        }
    })
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
