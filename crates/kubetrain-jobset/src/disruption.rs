//! Restarts after a disruption that do not spend the failure budget (opt-in; docs/operator.md "Restarts and the
//! failure budget").
//!
//! A TrainJob annotated [`RESTART_ON_DISRUPTION_ANNOTATION`]` = "true"` gets, in its JobSet:
//!
//! - on every replicated job's Job, a first `podFailurePolicy` rule failing the Job at once when a pod has the
//!   `DisruptionTarget` condition (Kubernetes sets it when the pod's node is gone, or the pod is evicted or
//!   preempted), and the pod template's `restartPolicy: Never` that a pod failure policy requires;
//! - a first JobSet `failurePolicy` rule, [`DISRUPTION_RULE`], restarting the whole JobSet with
//!   `RestartJobSetAndIgnoreMaxRestarts` when a Job failed for that reason.
//!
//! Any other failure keeps the runtime's semantics: the Job's `backoffLimit`, then the JobSet's own rules and
//! `maxRestarts` (the failure budget; with no `failurePolicy` in the runtime, `maxRestarts` is 0 and the first
//! failed Job fails the JobSet, as before). Without the annotation nothing changes: the JobSet is upstream's,
//! byte for byte.
//!
//! ```
//! use kubetrain_jobset::{builtin, disruption, render, resolve, Observed, ssh::seeded_rng};
//!
//! let job: kubetrain_api::TrainJob = serde_json::from_value(serde_json::json!({
//!     "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
//!     "metadata": {"name": "spot", "namespace": "default",
//!                  "annotations": {"kubetrain.dev/restart-on-disruption": "true"}},
//!     "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}},
//! }))?;
//! let catalog = builtin::catalog();
//! let out = render(&job, resolve(&catalog, &job)?, &Observed::default(), &mut seeded_rng(0))?;
//! let jobset = out.jobset().unwrap();
//! let rule = &jobset.spec.failure_policy.as_ref().unwrap().rules[0];
//! assert_eq!(rule.name, disruption::DISRUPTION_RULE);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use k8s_openapi::api::batch::v1::{
    PodFailurePolicy, PodFailurePolicyOnPodConditionsPattern, PodFailurePolicyRule,
};
use kubetrain_api::TrainJob;
use kubetrain_api::constants::ELASTIC_MIN_NODES_ANNOTATION;
use kubetrain_api::jobset::{FailurePolicy, FailurePolicyAction, FailurePolicyRule, JobSet};

use crate::object::Object;

/// The TrainJob annotation that turns restarts after a disruption on (`"true"`); read when the JobSet is
/// created (JobSet's `failurePolicy` and a Job's pod template are immutable).
pub const RESTART_ON_DISRUPTION_ANNOTATION: &str = "kubetrain.dev/restart-on-disruption";
/// Name of the JobSet failure-policy rule that restarts after a disruption. The JobSet controller's
/// `RestartingJobSet` condition then has the reason `FailurePolicy_RestartOnDisruption`.
pub const DISRUPTION_RULE: &str = "RestartOnDisruption";
/// The pod condition Kubernetes sets on a pod deleted for a disruption (node gone, eviction, preemption).
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";
/// The Job failure reason after a `podFailurePolicy` `FailJob` rule matched.
pub const POD_FAILURE_POLICY_REASON: &str = "PodFailurePolicy";
/// A pattern of the Job controller's failure message when a pod matched the rule this module adds
/// (`Pod <ns>/<name> has condition DisruptionTarget matching FailJob rule at index 0`).
pub const DISRUPTION_MESSAGE_PATTERN: &str = "has condition DisruptionTarget matching FailJob rule";

/// Whether `job` asks for restarts after a disruption ([`RESTART_ON_DISRUPTION_ANNOTATION`] is `"true"`).
pub fn requested(job: &TrainJob) -> bool {
    job.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(RESTART_ON_DISRUPTION_ANNOTATION))
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// The admission finding for an update that turns [`RESTART_ON_DISRUPTION_ANNOTATION`] on or off: the JobSet's
/// failure policy is immutable, so the change could never reach it (the next apply would fail). `None` when
/// the request leaves the choice as it was.
pub fn update_finding(old: &TrainJob, new: &TrainJob) -> Option<kubetrain_api::FieldError> {
    (requested(old) != requested(new)).then(|| {
        kubetrain_api::FieldError::error(
            format!("metadata.annotations[{RESTART_ON_DISRUPTION_ANNOTATION}]"),
            "cannot be changed once the TrainJob exists: its JobSet's failure policy is immutable; delete the \
             TrainJob and create it again with the annotation you want",
        )
    })
}

/// Adds the disruption rules to the JobSet among `objects` when `job` asks for them ([`requested`]) or the
/// JobSet is elastic (it has [`ELASTIC_MIN_NODES_ANNOTATION`]: a lost node shrinks an elastic job, it never
/// spends its budget).
pub fn apply_to_objects(job: &TrainJob, objects: &mut [Object]) {
    let requested = requested(job);
    for object in objects {
        if let Object::JobSet(jobset) = object {
            let elastic = jobset
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(ELASTIC_MIN_NODES_ANNOTATION));
            if requested || elastic {
                apply(jobset);
            }
        }
    }
}

/// Adds the disruption rules to `jobset` (idempotent: a rule already there is not added twice).
pub fn apply(jobset: &mut JobSet) {
    for replicated in &mut jobset.spec.replicated_jobs {
        let Some(spec) = replicated.template.spec.as_mut() else {
            continue;
        };
        let policy = spec
            .pod_failure_policy
            .get_or_insert_with(PodFailurePolicy::default);
        let rule = pod_rule();
        if !policy.rules.contains(&rule) {
            policy.rules.insert(0, rule);
        }
        // A pod failure policy requires `restartPolicy: Never` (the API server refuses it otherwise).
        if let Some(pod) = spec.template.spec.as_mut() {
            pod.restart_policy = Some("Never".to_owned());
        }
    }
    let policy = jobset
        .spec
        .failure_policy
        .get_or_insert_with(FailurePolicy::default);
    if !policy.rules.iter().any(|r| r.name == DISRUPTION_RULE) {
        policy.rules.insert(0, jobset_rule());
    }
}

/// The Job's rule: a pod with `DisruptionTarget=True` fails the Job at once, with reason `PodFailurePolicy`.
fn pod_rule() -> PodFailurePolicyRule {
    PodFailurePolicyRule {
        action: "FailJob".to_owned(),
        on_exit_codes: None,
        on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
            status: Some("True".to_owned()),
            type_: DISRUPTION_TARGET.to_owned(),
        }]),
    }
}

/// The JobSet's rule: a Job failed by [`pod_rule`] restarts the JobSet without counting towards `maxRestarts`.
fn jobset_rule() -> FailurePolicyRule {
    FailurePolicyRule {
        name: DISRUPTION_RULE.to_owned(),
        action: FailurePolicyAction::RestartJobSetAndIgnoreMaxRestarts,
        on_job_failure_reasons: vec![POD_FAILURE_POLICY_REASON.to_owned()],
        on_job_failure_message_patterns: vec![DISRUPTION_MESSAGE_PATTERN.to_owned()],
        target_replicated_jobs: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn turning_the_choice_on_or_off_after_creation_is_refused_with_its_path() {
        let with = |value: Option<&str>| {
            let mut job = kubetrain_api::TrainJob::new("j", Default::default());
            if let Some(v) = value {
                job.metadata.annotations = Some(
                    [(
                        super::RESTART_ON_DISRUPTION_ANNOTATION.to_owned(),
                        v.to_owned(),
                    )]
                    .into(),
                );
            }
            job
        };
        for (old, new, refused) in [
            (None, Some("true"), true),
            (Some("true"), None, true),
            (Some("true"), Some("false"), true),
            (Some("true"), Some("TRUE"), false),
            (None, Some("false"), false),
            (None, None, false),
        ] {
            let finding = super::update_finding(&with(old), &with(new));
            assert_eq!(finding.is_some(), refused, "{old:?} -> {new:?}");
            if let Some(f) = finding {
                assert_eq!(
                    f.path,
                    "metadata.annotations[kubetrain.dev/restart-on-disruption]"
                );
            }
        }
    }

    use super::*;
    use crate::ssh::seeded_rng;
    use crate::{Observed, builtin, render, resolve};

    fn job(annotation: Option<&str>) -> TrainJob {
        let mut value = serde_json::json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "spot", "namespace": "default"},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}},
        });
        if let Some(v) = annotation {
            value["metadata"]["annotations"] =
                serde_json::json!({ RESTART_ON_DISRUPTION_ANNOTATION: v });
        }
        serde_json::from_value(value).unwrap()
    }

    fn rendered(job: &TrainJob) -> JobSet {
        let catalog = builtin::catalog();
        let out = render(
            job,
            resolve(&catalog, job).unwrap(),
            &Observed::default(),
            &mut seeded_rng(0),
        )
        .unwrap();
        out.jobset().unwrap().clone()
    }

    #[test]
    fn without_the_annotation_the_jobset_is_unchanged() {
        let plain = rendered(&job(None));
        assert_eq!(rendered(&job(Some("false"))), plain);
        assert!(plain.spec.failure_policy.is_none());
        let spec = plain.spec.replicated_jobs[0]
            .template
            .spec
            .as_ref()
            .unwrap();
        assert!(spec.pod_failure_policy.is_none());
    }

    #[test]
    fn the_annotation_adds_the_pod_and_jobset_rules_once() {
        let mut jobset = rendered(&job(Some("true")));
        let policy = jobset.spec.failure_policy.clone().unwrap();
        assert_eq!(policy.max_restarts, None, "the budget stays the runtime's");
        assert_eq!(policy.rules.len(), 1);
        let rule = &policy.rules[0];
        assert_eq!(
            rule.action,
            FailurePolicyAction::RestartJobSetAndIgnoreMaxRestarts
        );
        assert_eq!(rule.on_job_failure_reasons, ["PodFailurePolicy"]);
        let spec = jobset.spec.replicated_jobs[0]
            .template
            .spec
            .clone()
            .unwrap();
        let rules = spec.pod_failure_policy.unwrap().rules;
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].action, "FailJob");
        let conditions = rules[0].on_pod_conditions.as_ref().unwrap();
        assert_eq!(conditions[0].type_, "DisruptionTarget");
        assert_eq!(
            spec.template.spec.unwrap().restart_policy.as_deref(),
            Some("Never")
        );
        let before = jobset.clone();
        apply(&mut jobset);
        assert_eq!(jobset, before, "idempotent");
    }

    #[test]
    fn the_runtime_rules_and_budget_stay_after_ours() {
        let mut jobset = rendered(&job(None));
        jobset.spec.failure_policy = Some(FailurePolicy {
            max_restarts: Some(3),
            restart_strategy: None,
            rules: vec![FailurePolicyRule {
                name: "Other".to_owned(),
                action: FailurePolicyAction::FailJobSet,
                on_job_failure_reasons: vec!["DeadlineExceeded".to_owned()],
                on_job_failure_message_patterns: Vec::new(),
                target_replicated_jobs: Vec::new(),
            }],
        });
        apply(&mut jobset);
        let policy = jobset.spec.failure_policy.unwrap();
        assert_eq!(policy.max_restarts, Some(3));
        let names: Vec<_> = policy.rules.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, [DISRUPTION_RULE, "Other"]);
    }

    #[test]
    fn the_message_pattern_matches_the_job_controllers_message() {
        let message = "Pod default/spot-node-0-1-x7k2p has condition DisruptionTarget matching FailJob rule at index 0";
        assert!(message.contains(DISRUPTION_MESSAGE_PATTERN));
    }
}
