use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kubetrain_api::jobset::{JobSet, JobSetStatus};
use kubetrain_api::{Metric, TrainJob, TrainerStatus};
use serde_json::json;

use super::*;

fn at(text: &str) -> Time {
    Time(text.parse::<Timestamp>().unwrap())
}

fn job(metrics: &[(&str, &str)], updated: &str, history: Option<&RestartHistory>) -> TrainJob {
    let mut job: TrainJob = kubetrain_test_support::fixtures::trainjob("spot")
        .namespace("ns")
        .uid("u")
        .num_nodes(2)
        .typed();
    if !metrics.is_empty() {
        job.status
            .get_or_insert_with(Default::default)
            .trainer_status = Some(TrainerStatus {
            metrics: metrics
                .iter()
                .map(|(n, v)| Metric {
                    name: (*n).to_owned(),
                    value: (*v).to_owned(),
                })
                .collect(),
            last_updated_time: Some(at(updated)),
            ..TrainerStatus::default()
        });
    }
    if let Some(h) = history {
        job.metadata.annotations = Some(
            [(RESTARTS_ANNOTATION.to_owned(), h.to_annotation())]
                .into_iter()
                .collect(),
        );
    }
    job
}

fn jobset(restarts: i32, counted: i32, reason: &str) -> JobSet {
    let mut js: JobSet = serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "spot", "namespace": "ns"},
        "spec": {"replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": {
            "parallelism": 2, "completions": 2,
            "template": {"spec": {"containers": [{"name": "node", "image": "i",
                "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}}}}]},
    }))
    .unwrap();
    js.status = Some(JobSetStatus {
        restarts: Some(restarts),
        restarts_count_towards_max: Some(counted),
        conditions: vec![Condition {
            type_: "RestartingJobSet".to_owned(),
            status: "True".to_owned(),
            reason: reason.to_owned(),
            message: "applying RestartJobSetAndIgnoreMaxRestarts failure policy action (first failed job: spot-node-0)".to_owned(),
            last_transition_time: at("2026-01-01T00:10:00Z"),
            observed_generation: None,
        }],
        ..JobSetStatus::default()
    });
    js
}

const PROGRESS: [(&str, &str); 3] = [
    (METRIC_STEP, "437"),
    (METRIC_CHECKPOINT_STEP, "400"),
    (METRIC_CHECKPOINT_TIME, "2026-01-01T00:09:00Z"),
];

#[test]
fn the_jobset_gpus_are_replicas_times_parallelism_times_the_pods() {
    assert_eq!(gpus(&jobset(0, 0, "")), 8.0);
}

#[test]
fn nothing_changes_without_a_new_restart() {
    let now = at("2026-01-01T00:11:00Z");
    assert_eq!(
        observe(
            &job(&PROGRESS, "2026-01-01T00:09:30Z", None),
            None,
            8.0,
            true,
            &now
        ),
        None
    );
    let js = jobset(0, 0, "");
    assert_eq!(
        observe(
            &job(&PROGRESS, "2026-01-01T00:09:30Z", None),
            Some(&js),
            8.0,
            true,
            &now
        ),
        None
    );
}

#[test]
fn a_disruption_restart_keeps_the_budget_and_says_what_was_lost() {
    let now = at("2026-01-01T00:10:01Z");
    let js = jobset(1, 0, "FailurePolicy_RestartOnDisruption");
    let update = observe(
        &job(&PROGRESS, "2026-01-01T00:09:30Z", None),
        Some(&js),
        8.0,
        true,
        &now,
    )
    .expect("a restart");
    let h = &update.history;
    assert_eq!(
        (h.restarts, h.counted, h.disruptions, h.failures),
        (1, 0, 1, 0)
    );
    let r = &h.records[0];
    assert_eq!(r.cause, Cause::Disruption);
    assert_eq!(
        (r.step, r.checkpoint_step, r.steps_lost),
        (Some(437), Some(400), Some(37))
    );
    // 60 s from the checkpoint to the restart, on 8 GPUs.
    assert_eq!(r.gpu_seconds_lost, Some(480.0));
    assert_eq!(r.time, "2026-01-01T00:10:00Z");
    let event = &update.events[0];
    assert_eq!(event.reason, TRAINJOB_RESTARTED);
    assert!(!event.warning);
    assert_eq!(event.action, "Restart1");
    let note = event.note.as_str();
    assert!(note.contains("a disruption"), "{note}");
    assert!(note.contains("37 steps and 480 GPU-seconds lost"), "{note}");
    let condition = update.condition.expect("opted in");
    assert_eq!(
        (condition.type_.as_str(), condition.reason.as_str()),
        ("Restarted", "Disruption")
    );

    // Not opted in: the event and the history, no condition.
    let update = observe(
        &job(&PROGRESS, "2026-01-01T00:09:30Z", None),
        Some(&js),
        8.0,
        false,
        &now,
    )
    .unwrap();
    assert!(update.condition.is_none());
    assert_eq!(update.events.len(), 1);
}

#[test]
fn a_failure_restart_spends_the_budget() {
    let now = at("2026-01-01T00:10:01Z");
    let before = RestartHistory {
        restarts: 1,
        counted: 0,
        disruptions: 1,
        ..RestartHistory::default()
    };
    let js = jobset(2, 1, "DefaultFailurePolicy");
    let update = observe(
        &job(&PROGRESS, "2026-01-01T00:09:30Z", Some(&before)),
        Some(&js),
        8.0,
        true,
        &now,
    )
    .unwrap();
    let h = &update.history;
    assert_eq!(
        (h.restarts, h.counted, h.disruptions, h.failures),
        (2, 1, 1, 1)
    );
    assert_eq!(h.records[0].cause, Cause::Failure);
    assert!(update.events[0].warning);
    assert_eq!(update.events[0].to_event().type_, EventType::Warning);
    assert_eq!(update.condition.unwrap().reason, "Failure");
}

#[test]
fn the_resumed_step_is_recorded_once_when_reported_after_the_restart() {
    let now = at("2026-01-01T00:10:01Z");
    let js = jobset(1, 0, "FailurePolicy_RestartOnDisruption");
    let first = observe(
        &job(&PROGRESS, "2026-01-01T00:09:30Z", None),
        Some(&js),
        8.0,
        true,
        &now,
    )
    .unwrap()
    .history;
    // A report from before the restart carrying an old resumed-from-step does not count.
    let mut stale = PROGRESS.to_vec();
    stale.push((METRIC_RESUMED_FROM_STEP, "0"));
    assert_eq!(
        observe(
            &job(&stale, "2026-01-01T00:09:30Z", Some(&first)),
            Some(&js),
            8.0,
            true,
            &now
        ),
        None
    );
    let fresh = [(METRIC_STEP, "401"), (METRIC_RESUMED_FROM_STEP, "400")];
    let later = at("2026-01-01T00:10:30Z");
    let update = observe(
        &job(&fresh, "2026-01-01T00:10:20Z", Some(&first)),
        Some(&js),
        8.0,
        true,
        &later,
    )
    .unwrap();
    assert_eq!(update.history.records[0].resumed_from_step, Some(400));
    assert_eq!(update.events[0].reason, TRAINJOB_RESUMED);
    assert!(update.events[0].note.contains("resumed from step 400"));
    assert_eq!(update.condition.unwrap().reason, "Resumed");
    // Once recorded, nothing more.
    assert_eq!(
        observe(
            &job(&fresh, "2026-01-01T00:10:20Z", Some(&update.history)),
            Some(&js),
            8.0,
            true,
            &later
        ),
        None
    );
}

#[test]
fn the_history_is_bounded_and_follows_a_recreated_jobset() {
    let now = at("2026-01-01T00:10:01Z");
    let mut history = RestartHistory::default();
    for n in 1..=MAX_RECORDS as i32 + 3 {
        let js = jobset(n, 0, "FailurePolicy_RestartOnDisruption");
        history = observe(&job(&[], "", Some(&history)), Some(&js), 0.0, false, &now)
            .unwrap()
            .history;
    }
    assert_eq!(history.records.len(), MAX_RECORDS);
    assert_eq!(history.records[0].restart, 4);
    assert_eq!(history.disruptions, MAX_RECORDS as i32 + 3);
    let fresh = jobset(0, 0, "");
    let update = observe(
        &job(&[], "", Some(&history)),
        Some(&fresh),
        0.0,
        false,
        &now,
    )
    .unwrap();
    assert!(update.events.is_empty());
    assert_eq!(update.history.restarts, 0);
    assert_eq!(update.history.disruptions, MAX_RECORDS as i32 + 3);
}

#[test]
fn metric_values_parse_leniently_and_bad_ones_are_ignored() {
    assert_eq!(parse_step("400"), Some(400));
    assert_eq!(parse_step("400.0"), Some(400));
    assert_eq!(parse_step("4.5"), None);
    assert_eq!(parse_step("nan"), None);
    assert_eq!(
        parse_time("1767225600").map(|t| t.to_string()),
        Some("2026-01-01T00:00:00Z".to_owned())
    );
    assert_eq!(
        parse_time("2026-01-01T00:00:00Z").map(|t| t.to_string()),
        Some("2026-01-01T00:00:00Z".to_owned())
    );
    assert_eq!(parse_time("yesterday"), None);
    let bad = job(
        &[(METRIC_STEP, "x"), (METRIC_CHECKPOINT_TIME, "y")],
        "2026-01-01T00:00:00Z",
        None,
    );
    let p = Progress::of(bad.status.as_ref());
    assert_eq!((p.step, p.checkpoint_time), (None, None));
}

#[test]
fn an_unreadable_annotation_is_an_empty_history() {
    let mut j = job(&[], "", None);
    j.metadata.annotations = Some(
        [(RESTARTS_ANNOTATION.to_owned(), "{not json".to_owned())]
            .into_iter()
            .collect(),
    );
    assert_eq!(RestartHistory::of(&j), RestartHistory::default());
}
