//! Status writes, coalesced per TrainJob: at most one patch per TrainJob is in flight, and at most one more
//! waits behind it. An update that arrives while one waits replaces it (only the newest status matters), and
//! everyone waiting is answered with the outcome of the write that carried the newest update. Memory is bounded
//! by the number of TrainJobs writing at once ([`Coalescer::new`]'s `max_jobs`, past it: busy) and the
//! number of open connections; nothing queues without bound.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kubetrain_api::TrainJob;
use serde_json::Value;
use tokio::sync::oneshot;

/// How a status write ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Written.
    Written,
    /// The API server refused the status (422 or 400), with its message.
    Invalid(String),
    /// The TrainJob does not exist.
    NotFound,
    /// Anything else (logged).
    Failed(String),
}

/// More TrainJobs are writing at once than the coalescer tracks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Busy;

type Key = (String, String);

struct Waiting {
    patch: Value,
    waiters: Vec<oneshot::Sender<WriteOutcome>>,
}

#[derive(Default)]
struct Slot {
    /// The newest update not written yet, and who waits for it.
    next: Option<Waiting>,
}

/// The per-TrainJob write coalescer; cloning shares it.
#[derive(Clone)]
pub struct Coalescer {
    client: kube::Client,
    field_manager: String,
    max_jobs: usize,
    /// A TrainJob has a slot while a writer task runs for it.
    slots: Arc<Mutex<HashMap<Key, Slot>>>,
    superseded: Arc<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for Coalescer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coalescer")
            .field("field_manager", &self.field_manager)
            .field("max_jobs", &self.max_jobs)
            .finish_non_exhaustive()
    }
}

impl Coalescer {
    /// Writes with `client` as `field_manager`, tracking at most `max_jobs` TrainJobs at once;
    /// `superseded` is called for every update replaced by a newer one before it was written.
    pub fn new(
        client: kube::Client,
        field_manager: impl Into<String>,
        max_jobs: usize,
        superseded: impl Fn() + Send + Sync + 'static,
    ) -> Self {
        Self {
            client,
            field_manager: field_manager.into(),
            max_jobs: max_jobs.max(1),
            slots: Arc::default(),
            superseded: Arc::new(superseded),
        }
    }

    /// Writes `patch` (a status merge patch) to `namespace/name`, or a newer update that replaced it, and
    /// returns how that write ended.
    pub async fn submit(
        &self,
        namespace: &str,
        name: &str,
        patch: Value,
    ) -> Result<WriteOutcome, Busy> {
        let key = (namespace.to_owned(), name.to_owned());
        let (tx, rx) = oneshot::channel();
        let start_writer = {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            let writing = slots.contains_key(&key);
            if !writing && slots.len() >= self.max_jobs {
                return Err(Busy);
            }
            let slot = slots.entry(key.clone()).or_default();
            match &mut slot.next {
                Some(waiting) => {
                    (self.superseded)();
                    waiting.patch = patch;
                    waiting.waiters.push(tx);
                }
                None => {
                    slot.next = Some(Waiting {
                        patch,
                        waiters: vec![tx],
                    });
                }
            }
            !writing
        };
        if start_writer {
            tokio::spawn(self.clone().write_until_idle(key));
        }
        // The writer always answers; a dropped sender would mean it panicked.
        Ok(rx
            .await
            .unwrap_or_else(|_| WriteOutcome::Failed("status writer ended".into())))
    }

    /// TrainJobs with a write in flight or waiting.
    #[cfg(test)]
    fn active(&self) -> usize {
        self.slots.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    async fn write_until_idle(self, key: Key) {
        loop {
            let waiting = {
                let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
                match slots.get_mut(&key).and_then(|slot| slot.next.take()) {
                    Some(waiting) => waiting,
                    None => {
                        slots.remove(&key);
                        return;
                    }
                }
            };
            let outcome = self.write(&key, &waiting.patch).await;
            for waiter in waiting.waiters {
                let _ = waiter.send(outcome.clone());
            }
        }
    }

    async fn write(&self, (namespace, name): &Key, patch: &Value) -> WriteOutcome {
        let params = PatchParams {
            field_manager: Some(self.field_manager.clone()),
            ..Default::default()
        };
        // The answer is not read as a TrainJob: a stored object our types cannot parse was still written.
        let resource = ApiResource::erase::<TrainJob>(&());
        let written =
            Api::<DynamicObject>::namespaced_with(self.client.clone(), namespace, &resource)
                .patch_status(name, &params, &Patch::Merge(patch))
                .await;
        match written {
            Ok(_) => WriteOutcome::Written,
            Err(kube::Error::Api(status)) if status.code == 422 || status.code == 400 => {
                WriteOutcome::Invalid(status.message)
            }
            Err(kube::Error::Api(status)) if status.code == 404 => WriteOutcome::NotFound,
            Err(error) => {
                tracing::warn!(%namespace, %name, %error, "writing trainerStatus failed");
                WriteOutcome::Failed(error.to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The coalescing against the in-memory API server, which holds each status write until the test
    //! releases it.

    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use kubetrain_test_support::fixtures::trainjob;
    use kubetrain_test_support::{FakeApiServer, Held, HeldRequest};
    use serde_json::json;

    use super::*;

    const NS: &str = "team-a";
    const JOB: &str = "mnist";
    /// How long one step may take before the test gives up (generous: the machine may be loaded).
    const PATIENCE: Duration = Duration::from_secs(60);

    /// The status path of `team-a/<job>`.
    fn path(namespace: &str, name: &str) -> String {
        format!(
            "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"
        )
    }

    /// The API server holding the TrainJob `team-a/mnist`.
    fn api_with_job() -> FakeApiServer {
        let api = FakeApiServer::start();
        api.insert(trainjob(JOB).namespace(NS).json());
        api
    }

    /// The next status write the API server holds: its body, checked to be our field manager's patch of
    /// `team-a/<job>`'s status.
    async fn next_patch(held: &mut Held, job: &str) -> HeldRequest {
        let patch = tokio::time::timeout(PATIENCE, held.next())
            .await
            .expect("a status patch in time")
            .expect("the API server is alive");
        assert_eq!(patch.request.method, "PATCH");
        let uri = &patch.request.uri;
        assert!(uri.starts_with(&format!("{}?", path(NS, job))), "{uri}");
        assert!(uri.contains("fieldManager=trainer-status"), "{uri}");
        patch
    }

    #[tokio::test]
    async fn a_flood_from_one_job_is_coalesced_to_one_write_in_flight_and_the_newest_waiting() {
        let api = api_with_job();
        api.record_requests();
        let mut held = api.hold(|r| r.method == "PATCH");
        let superseded = Arc::new(AtomicU64::new(0));
        let counted = superseded.clone();
        let writes = Coalescer::new(api.client(), "trainer-status", 1, move || {
            counted.fetch_add(1, Ordering::Relaxed);
        });
        let submit = |n: i64| {
            let writes = writes.clone();
            tokio::spawn(async move { writes.submit(NS, JOB, json!({"n": n})).await })
        };

        let first = submit(0);
        let in_flight = next_patch(&mut held, JOB).await;
        assert_eq!(in_flight.request.body, json!({"n": 0}));
        // While the first write is in flight, 100 more arrive; each replaces the one waiting.
        let mut later = Vec::new();
        for n in 1..=100 {
            later.push(submit(n));
            // Wait until this update is the waiting one (it was taken by the lock) before sending the next.
            while superseded.load(Ordering::Relaxed) + 1 < n as u64 {
                tokio::task::yield_now().await;
            }
        }
        while superseded.load(Ordering::Relaxed) < 99 {
            tokio::task::yield_now().await;
        }
        // Another TrainJob while this one holds the only slot: busy, not queued.
        assert_eq!(writes.submit(NS, "other", json!({})).await, Err(Busy));

        in_flight.release();
        assert_eq!(first.await.unwrap(), Ok(WriteOutcome::Written));
        let second = next_patch(&mut held, JOB).await;
        assert_eq!(
            second.request.body,
            json!({"n": 100}),
            "only the newest update is written"
        );
        second.release();
        for waiter in later {
            assert_eq!(waiter.await.unwrap(), Ok(WriteOutcome::Written));
        }
        assert_eq!(superseded.load(Ordering::Relaxed), 99);
        // The writer ended: the slot is free for other TrainJobs.
        while writes.active() > 0 {
            tokio::task::yield_now().await;
        }
        let other = {
            let writes = writes.clone();
            tokio::spawn(async move { writes.submit(NS, "other", json!({})).await })
        };
        // No TrainJob "other" is stored: the API server answers 404 NotFound.
        next_patch(&mut held, "other").await.release();
        assert_eq!(other.await.unwrap(), Ok(WriteOutcome::NotFound));
        // Two writes for 101 updates of one TrainJob, one for the other; nothing else was sent.
        assert_eq!(api.requests().len(), 3, "{:?}", api.requests());
    }
}
