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
pub enum Outcome {
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
    waiters: Vec<oneshot::Sender<Outcome>>,
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
    pub async fn submit(&self, namespace: &str, name: &str, patch: Value) -> Result<Outcome, Busy> {
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
            .unwrap_or_else(|_| Outcome::Failed("status writer ended".into())))
    }

    /// TrainJobs with a write in flight or waiting (for tests and diagnostics).
    pub fn active(&self) -> usize {
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

    async fn write(&self, (namespace, name): &Key, patch: &Value) -> Outcome {
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
            Ok(_) => Outcome::Written,
            Err(kube::Error::Api(status)) if status.code == 422 || status.code == 400 => {
                Outcome::Invalid(status.message)
            }
            Err(kube::Error::Api(status)) if status.code == 404 => Outcome::NotFound,
            Err(error) => {
                tracing::warn!(%namespace, %name, %error, "writing trainerStatus failed");
                Outcome::Failed(error.to_string())
            }
        }
    }
}
