use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kubetrain_api::jobset::{JobSet, JobSetStatus, ReplicatedJobStatus};
use kubetrain_api::{ClusterTrainingRuntime, JobStatus, TrainJobStatus};
use serde_json::json;

use super::*;

fn at(seconds: i64) -> Time {
    Time(Timestamp::from_second(seconds).unwrap())
}

fn job(yaml_spec: serde_json::Value) -> TrainJob {
    let mut job = kubetrain_test_support::fixtures::trainjob("j")
        .namespace("ns")
        .uid("uid-1")
        .created("2026-01-01T00:00:00Z")
        .json();
    job["spec"] = yaml_spec;
    serde_json::from_value(job).unwrap()
}

fn builtin(name: &str) -> ClusterTrainingRuntime {
    kubetrain_jobset::builtin::runtimes()
        .into_iter()
        .find(|r| r.name() == name)
        .unwrap()
}

fn cond(type_: &str, status: &str, reason: &str, t: i64) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: String::new(),
        last_transition_time: at(t),
        observed_generation: None,
    }
}

#[test]
fn skip_table() {
    let mut deleting = job(json!({"runtimeRef": {"name": "r"}}));
    deleting.metadata.deletion_timestamp = Some(at(5));
    let cases = [
        (job(json!({"runtimeRef": {"name": "r"}})), None),
        (
            job(
                json!({"runtimeRef": {"name": "r"}, "managedBy": "trainer.kubeflow.org/trainjob-controller"}),
            ),
            None,
        ),
        (
            job(json!({"runtimeRef": {"name": "r"}, "managedBy": "kueue.x-k8s.io/multikueue"})),
            Some(Skip::ManagedElsewhere("kueue.x-k8s.io/multikueue".into())),
        ),
        (deleting, Some(Skip::Deleting)),
    ];
    for (job, want) in cases {
        assert_eq!(skip(&job), want, "{:?}", job.spec.managed_by);
    }
}

#[test]
fn runtime_kind_table() {
    let cases = [
        (json!({"name": "r"}), Ok(RuntimeKind::Cluster)),
        (
            json!({"name": "r", "kind": "TrainingRuntime"}),
            Ok(RuntimeKind::Namespaced),
        ),
        (
            json!({"name": "r", "kind": "ClusterTrainingRuntime", "apiGroup": "trainer.kubeflow.org"}),
            Ok(RuntimeKind::Cluster),
        ),
        (
            json!({"name": "r", "kind": "Other"}),
            Err(UnsupportedRuntime("Other.trainer.kubeflow.org".to_owned())),
        ),
        (
            json!({"name": "r", "kind": "TrainingRuntime", "apiGroup": "example.com"}),
            Err(UnsupportedRuntime("TrainingRuntime.example.com".to_owned())),
        ),
    ];
    for (runtime_ref, want) in cases {
        let j = job(json!({ "runtimeRef": runtime_ref.clone() }));
        assert_eq!(runtime_kind(&j), want, "{runtime_ref}");
    }
}

#[test]
fn reads_follow_the_runtime_policies() {
    assert_eq!(
        reads(&builtin("torch-distributed").spec),
        Reads {
            ssh_secret: false,
            pod_group: None
        }
    );
    assert_eq!(
        reads(&builtin("deepspeed-distributed").spec),
        Reads {
            ssh_secret: true,
            pod_group: None
        }
    );
    let mut gang = builtin("torch-distributed").spec;
    gang.pod_group_policy = serde_json::from_value(json!({"coscheduling": {}})).unwrap();
    assert_eq!(reads(&gang).pod_group, Some(PodGroupKind::Coscheduling));
    gang.pod_group_policy = serde_json::from_value(json!({"volcano": {}})).unwrap();
    assert_eq!(reads(&gang).pod_group, Some(PodGroupKind::Volcano));
}

#[test]
fn observed_maps_what_was_read() {
    let o = observed(Some(Some(true)), true, false);
    assert_eq!(o.jobset.map(|j| j.suspended), Some(true));
    assert!(o.ssh_secret_exists && !o.pod_group_exists);
    // A JobSet without spec.suspend runs.
    assert_eq!(
        observed(Some(None), false, true)
            .jobset
            .map(|j| j.suspended),
        Some(false)
    );
    assert_eq!(observed(None, false, false).jobset, None);
}

#[test]
fn every_builtin_runtimes_snapshot_is_read_by_the_fast_yaml_path() {
    // Every reconcile reads the snapshot; serde-saphyr's full reader costs several times the fast path.
    let j = job(json!({"runtimeRef": {"name": "torch-distributed"}}));
    for runtime in kubetrain_jobset::builtin::runtimes() {
        let name = runtime.metadata.name.clone().unwrap_or_default();
        let cm = snapshot_config_map(&j, &FetchedRuntime::Cluster(Box::new(runtime))).unwrap();
        let yaml = &cm.data.as_ref().unwrap()[RUNTIME_KEY];
        assert!(
            kubetrain_yaml::fast::parse(yaml).is_some(),
            "{name}: the snapshot leaves the fast reader's subset:\n{yaml}"
        );
    }
}

#[test]
fn snapshot_round_trips_and_is_checked_like_upstream() {
    let j = job(json!({"runtimeRef": {"name": "torch-distributed"}}));
    let runtime = builtin("torch-distributed");
    let cm = snapshot_config_map(&j, &FetchedRuntime::Cluster(Box::new(runtime.clone()))).unwrap();
    assert_eq!(cm.metadata.name.as_deref(), Some("j-runtime-snapshot"));
    assert_eq!(read_snapshot(&j, &cm).unwrap(), runtime.spec);

    let mut foreign = cm.clone();
    foreign.metadata.owner_references.as_mut().unwrap()[0].uid = "someone-else".into();
    let mut no_key = cm.clone();
    no_key.data = Some(Default::default());
    let other_name = job(json!({"runtimeRef": {"name": "jax-distributed"}}));
    let other_kind =
        job(json!({"runtimeRef": {"name": "torch-distributed", "kind": "TrainingRuntime"}}));
    let mut garbage = cm.clone();
    garbage
        .data
        .as_mut()
        .unwrap()
        .insert(RUNTIME_KEY.into(), "kind: [".into());
    let cases = [
        (&j, &foreign, "owned by another object"),
        (&j, &no_key, "missing \"runtime\" data key"),
        (&other_name, &cm, "refers to the wrong runtime"),
        (&other_kind, &cm, "refers to the wrong runtime"),
        (&j, &garbage, "unable to unmarshal"),
    ];
    for (job, cm, want) in cases {
        let e = read_snapshot(job, cm).unwrap_err().to_string();
        assert!(e.starts_with("invalid runtime snapshot: "), "{e}");
        assert!(e.contains(want), "{e} lacks {want}");
    }
}

/// (job, jobset, unsupported runtime, patched condition (type, status, reason) or no patch)
type StatusCase<'a> = (
    &'a TrainJob,
    Option<&'a JobSet>,
    Option<&'a str>,
    Option<(&'a str, &'a str, &'a str)>,
);

#[test]
fn status_decisions() {
    let fresh = job(json!({"runtimeRef": {"name": "r"}}));
    let suspended = job(json!({"runtimeRef": {"name": "r"}, "suspend": true}));
    let finished_js = JobSet {
        status: Some(JobSetStatus {
            conditions: vec![cond("Failed", "True", "FailedJobs", 50)],
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut after_deadline = job(json!({"runtimeRef": {"name": "r"}}));
    after_deadline.status = Some(TrainJobStatus {
        conditions: vec![cond("Failed", "True", "DeadlineExceeded", 40)],
        ..Default::default()
    });

    let cases: Vec<StatusCase> = vec![
        (&fresh, None, None, None),
        (
            &suspended,
            None,
            None,
            Some(("Suspended", "True", "Suspended")),
        ),
        (
            &fresh,
            Some(&finished_js),
            None,
            Some(("Failed", "True", "FailedJobs")),
        ),
        (
            &fresh,
            None,
            Some("X.example.com"),
            Some(("Failed", "True", "TrainingRuntimeNotSupported")),
        ),
        // The deadline failure survives a JobSet failure copied over it.
        (&after_deadline, Some(&finished_js), None, None),
    ];
    for (i, (job, js, unsupported, want)) in cases.into_iter().enumerate() {
        let d = decide_status(job, js, unsupported, None, &at(100));
        match want {
            None => assert_eq!(d.patch, None, "case {i}: {:?}", d.status),
            Some((t, s, r)) => {
                let patch = d.patch.expect("a patch");
                let c = patch["status"]["conditions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|c| c["type"] == t)
                    .unwrap_or_else(|| panic!("case {i}: {patch}"))
                    .clone();
                assert_eq!(
                    (c["status"].as_str(), c["reason"].as_str()),
                    (Some(s), Some(r)),
                    "case {i}"
                );
            }
        }
    }
    let kept = decide_status(&after_deadline, Some(&finished_js), None, None, &at(100));
    assert_eq!(kept.status.conditions[0].reason, "DeadlineExceeded");
}

fn jobset_with(conditions: Vec<Condition>, active: i32) -> JobSet {
    JobSet {
        status: Some(JobSetStatus {
            conditions,
            replicated_jobs_status: vec![ReplicatedJobStatus {
                name: "node".into(),
                active,
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The JobSet's first, all-zero counts are not written on their own (issue 39), and nothing else is held back.
#[test]
fn all_zero_first_counts_wait_for_a_count_or_a_condition() {
    let fresh = job(json!({"runtimeRef": {"name": "r"}}));
    let zero = jobset_with(vec![], 0);
    let held = decide_status(&fresh, Some(&zero), None, None, &at(100));
    assert_eq!(held.patch, None, "{:?}", held.status);
    assert!(held.status.jobs_status.is_empty());

    let running = decide_status(&fresh, Some(&jobset_with(vec![], 1)), None, None, &at(100));
    let patch = running.patch.expect("a count is written at once");
    assert_eq!(patch["status"]["jobsStatus"][0]["active"], 1);

    // With a condition, the zero counts go in the same patch.
    let done = jobset_with(vec![cond("Completed", "True", "AllJobsCompleted", 50)], 0);
    let finished = decide_status(&fresh, Some(&done), None, None, &at(100));
    let patch = finished.patch.expect("the condition is written");
    assert_eq!(patch["status"]["jobsStatus"][0]["name"], "node");
    assert!(patch["status"]["conditions"].is_array(), "{patch}");

    // Counts back at zero after being written are a change.
    let mut was_running = fresh.clone();
    was_running.status = Some(running.status);
    let back = decide_status(&was_running, Some(&zero), None, None, &at(100));
    let patch = back.patch.expect("the drop to zero is written");
    assert_eq!(patch["status"]["jobsStatus"][0]["active"], 0);
}

#[test]
fn merge_patches_write_only_changes_and_null_removals() {
    let before = TrainJobStatus {
        conditions: vec![cond("Suspended", "True", "Suspended", 1)],
        jobs_status: vec![JobStatus {
            name: "node".into(),
            active: 1,
            ..Default::default()
        }],
        trainer_status: None,
        ..Default::default()
    };
    assert_eq!(merge_patch(&before, &before), None);
    let mut after = before.clone();
    after.jobs_status.clear();
    assert_eq!(
        merge_patch(&before, &after),
        Some(json!({"status": {"jobsStatus": null}}))
    );
    after.conditions[0].status = "False".into();
    let patch = merge_patch(&before, &after).unwrap();
    assert_eq!(patch["status"]["conditions"][0]["status"], "False");
    assert_eq!(patch["status"]["jobsStatus"], serde_json::Value::Null);
    // From nothing to something: the whole status.
    let patch = merge_patch(&TrainJobStatus::default(), &before).unwrap();
    assert_eq!(patch["status"], serde_json::to_value(&before).unwrap());
}
