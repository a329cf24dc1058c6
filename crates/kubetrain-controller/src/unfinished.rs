//! How many TrainJobs are unfinished: the controller's measure of how busy it is, read from the watch cache at
//! most once a second (a count over the store; a reconcile asks only when it would write counts alone).

use std::sync::Mutex;
use std::time::Duration;

use kube::runtime::reflector::Store;
use kubetrain_api::TrainJob;
use kubetrain_jobset::status::is_finished;
use tokio::time::Instant;

/// How long a count stays good.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// The number of unfinished TrainJobs in a store, recounted at most every [`FRESH_FOR`].
#[derive(Debug, Default)]
pub(crate) struct UnfinishedCount {
    last: Mutex<Option<(Instant, usize)>>,
}

impl UnfinishedCount {
    /// TrainJobs in `store` without a true `Complete` or `Failed` condition, as of at most a second ago.
    pub(crate) fn get(&self, store: &Store<TrainJob>, now: Instant) -> usize {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, count)) = *last
            && now.saturating_duration_since(at) < FRESH_FOR
        {
            return count;
        }
        let count = store
            .state()
            .iter()
            .filter(|job| !job.status.as_ref().is_some_and(is_finished))
            .count();
        *last = Some((now, count));
        count
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::{reflector, watcher};
    use kubetrain_api::TrainJobStatus;

    use super::*;

    fn job(name: &str, finished: bool) -> TrainJob {
        let mut job: TrainJob = kubetrain_test_support::fixtures::trainjob(name)
            .namespace("team-a")
            .typed();
        if finished {
            job.status = Some(serde_json::from_value::<TrainJobStatus>(serde_json::json!({
                "conditions": [{"type": "Complete", "status": "True", "reason": "JobSetCompleted",
                                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
            })).unwrap());
        }
        job
    }

    #[test]
    fn finished_jobs_do_not_count_and_the_count_is_kept_for_a_second() {
        let (store, mut writer) = reflector::store::<TrainJob>();
        for j in [job("a", false), job("b", true), job("c", false)] {
            writer.apply_watcher_event(&watcher::Event::Apply(j));
        }
        let count = UnfinishedCount::default();
        let start = Instant::now();
        assert_eq!(count.get(&store, start), 2);
        writer.apply_watcher_event(&watcher::Event::Apply(job("d", false)));
        assert_eq!(
            count.get(&store, start + Duration::from_millis(900)),
            2,
            "still fresh"
        );
        assert_eq!(
            count.get(&store, start + Duration::from_secs(1)),
            3,
            "recounted"
        );
    }
}
