//! The mutating admission webhook of TrainJobs: stamping `spec.runtimePatches[].time`.
//!
//! Upstream's defaulter (`pkg/webhooks/trainjob_webhook.go`) records when each manager's patch last changed, so
//! consumers can tell a fresh Kueue patch from a stale one.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::{RuntimePatch, TrainJob};

/// Stamps the runtime-patch times of `job` as upstream's defaulter does.
///
/// On create (`old` is `None`) every patch without a time gets `now`. On update a patch whose content (ignoring
/// the time) equals the old patch of the same manager keeps the old time; a changed patch gets `now`; a new
/// manager's patch gets `now` unless it already carries a time.
///
/// ```
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
/// use kubetrain_api::{RuntimePatch, TrainJob, TrainJobSpec};
/// use kubetrain_api::defaulting::stamp_runtime_patch_times;
///
/// let now = Time("2026-01-02T03:04:05Z".parse().unwrap());
/// let mut job = TrainJob::new("j", TrainJobSpec {
///     runtime_patches: vec![RuntimePatch { manager: "kueue.x-k8s.io/manager".into(), ..Default::default() }],
///     ..Default::default()
/// });
/// stamp_runtime_patch_times(None, &mut job, &now);
/// assert_eq!(job.spec.runtime_patches[0].time, Some(now));
/// ```
pub fn stamp_runtime_patch_times(old: Option<&TrainJob>, job: &mut TrainJob, now: &Time) {
    let Some(old) = old else {
        for patch in &mut job.spec.runtime_patches {
            patch.time.get_or_insert_with(|| now.clone());
        }
        return;
    };
    for patch in &mut job.spec.runtime_patches {
        match old
            .spec
            .runtime_patches
            .iter()
            .find(|p| p.manager == patch.manager)
        {
            Some(previous) if same_content(previous, patch) => patch.time = previous.time.clone(),
            Some(_) => patch.time = Some(now.clone()),
            None => {
                patch.time.get_or_insert_with(|| now.clone());
            }
        }
    }
}

fn same_content(a: &RuntimePatch, b: &RuntimePatch) -> bool {
    a.manager == b.manager && a.training_runtime_spec == b.training_runtime_spec
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{TrainJobSpec, TrainingRuntimeSpecPatch};

    fn time(text: &str) -> Time {
        Time(text.parse().expect("timestamp"))
    }

    fn patch(manager: &str, with_spec: bool, at: Option<&str>) -> RuntimePatch {
        RuntimePatch {
            manager: manager.into(),
            time: at.map(time),
            training_runtime_spec: with_spec.then(TrainingRuntimeSpecPatch::default),
        }
    }

    fn job(patches: Vec<RuntimePatch>) -> TrainJob {
        TrainJob::new(
            "j",
            TrainJobSpec {
                runtime_patches: patches,
                ..Default::default()
            },
        )
    }

    #[test]
    fn create_stamps_only_missing_times() {
        let now = time("2026-05-05T00:00:00Z");
        let mut new = job(vec![
            patch("a.io/x", false, None),
            patch("b.io/y", false, Some("2020-01-01T00:00:00Z")),
        ]);
        stamp_runtime_patch_times(None, &mut new, &now);
        assert_eq!(new.spec.runtime_patches[0].time, Some(now));
        assert_eq!(
            new.spec.runtime_patches[1].time,
            Some(time("2020-01-01T00:00:00Z"))
        );
    }

    #[test]
    fn update_keeps_unchanged_and_restamps_changed() {
        let now = time("2026-05-05T00:00:00Z");
        let earlier = "2026-01-01T00:00:00Z";
        let old = job(vec![
            patch("a.io/same", false, Some(earlier)),
            patch("a.io/changed", false, Some(earlier)),
        ]);
        let mut new = job(vec![
            patch("a.io/same", false, Some("2030-01-01T00:00:00Z")),
            patch("a.io/changed", true, Some(earlier)),
            patch("a.io/new", false, None),
        ]);
        stamp_runtime_patch_times(Some(&old), &mut new, &now);
        let times: Vec<_> = new
            .spec
            .runtime_patches
            .iter()
            .map(|p| p.time.clone())
            .collect();
        assert_eq!(times, [Some(time(earlier)), Some(now.clone()), Some(now)]);
    }
}
