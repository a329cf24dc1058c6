//! What the leader last wrote, per TrainJob, so that a write whose result cannot change is not sent again.
//!
//! Per child object the memory keeps three 64-bit hashes: of its identity (apiVersion, kind, name), of the
//! body last applied, and of the uid and resourceVersion the API server answered. An apply is skipped only
//! when the rendered body hashes the same **and** the watch cache still holds the object at exactly that uid
//! and resourceVersion: nobody has changed or deleted it since, so the same apply would change nothing. Any
//! change (a new body, e.g. the JobSet's `suspend` flipping; an edit by someone else; a deletion; a cache that
//! has not seen the write yet) sends the apply.
//!
//! For the status, it keeps the resourceVersion the TrainJob had when the leader patched it and the hash of the
//! status written: a reconcile that still sees that old resourceVersion (the cache has not caught up with the
//! leader's own write) and computes the same status again skips the patch, which already landed.
//!
//! Last, it keeps a fingerprint of each TrainJob as the leader's last reconcile left it (what the reconcile reads
//! of it, and the status it wrote or found): the watch event of the leader's own status patch carries exactly
//! that, and reconciling it again would change nothing, so it triggers no reconcile (see
//! [`crate::controller::run`]). Any other change (spec, labels, a status written by someone else) differs.
//!
//! Likewise the watch event of a child carrying exactly the version the leader's own apply answered triggers
//! nothing (the reconcile that applied it already used that answer), unless a reconcile is waiting for it.
//!
//! Entries are dropped when a TrainJob finishes and by [`AppliedMemory::sweep`] when it is gone.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use serde::Serialize;

use crate::backoff::Key;

/// A 64-bit hash of `value`'s JSON form (written straight into the hasher, no buffer).
pub fn hash_json(value: &impl Serialize) -> u64 {
    struct Writer(DefaultHasher);
    impl std::io::Write for Writer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.write(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut writer = Writer(DefaultHasher::new());
    // Serializing a rendered object cannot fail; if it ever did, a hash of nothing only costs an apply.
    let _ = serde_json::to_writer(&mut writer, value);
    writer.0.finish()
}

/// A 64-bit hash of `parts`.
pub fn hash_of(parts: &[&str]) -> u64 {
    let mut hasher = DefaultHasher::new();
    parts.hash(&mut hasher);
    hasher.finish()
}

/// The hash of a stored object's identity: uid and resourceVersion.
fn version_hash((uid, resource_version): (&str, &str)) -> u64 {
    hash_of(&[uid, resource_version])
}

#[derive(Clone, Copy, Debug)]
struct Remembered {
    object: u64,
    body: u64,
    version: u64,
    /// When it was applied: a cache that lacks an object applied a moment ago has not caught up yet.
    at: Instant,
}

impl Remembered {
    fn same(&self, object: u64, body: u64, version: u64) -> bool {
        (self.object, self.body, self.version) == (object, body, version)
    }
}

#[derive(Debug, Default)]
struct Entry {
    /// The TrainJob's uid: a TrainJob deleted and created again under the same name starts afresh.
    uid: String,
    objects: Vec<Remembered>,
    /// (hash of the resourceVersion patched from, hash of the status written).
    status: Option<(u64, u64)>,
    /// The TrainJob's fingerprint after the leader's last reconcile.
    reconciled: Option<u64>,
    /// A reconcile is waiting for the watch events of the leader's own applies (so they must trigger it).
    awaiting_echoes: bool,
}

/// The per-TrainJob memory of applied objects and written statuses (see the module docs).
#[derive(Debug, Default)]
pub struct AppliedMemory {
    jobs: Mutex<HashMap<Key, Entry>>,
}

impl AppliedMemory {
    fn with_entry<T>(&self, job: &Key, uid: &str, f: impl FnOnce(&mut Entry) -> T) -> T {
        let mut jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        let entry = jobs.entry(job.clone()).or_default();
        if entry.uid != uid {
            *entry = Entry {
                uid: uid.to_owned(),
                ..Entry::default()
            };
        }
        f(entry)
    }

    fn read<T>(&self, job: &Key, uid: &str, f: impl FnOnce(&Entry) -> T) -> Option<T> {
        let jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        jobs.get(job).filter(|e| e.uid == uid).map(f)
    }

    /// Whether applying `body` to `object` would change nothing: the same body was applied last and the
    /// cache holds the object at the version that apply answered (`stored`: uid and resourceVersion).
    pub fn unchanged(
        &self,
        job: &Key,
        uid: &str,
        object: u64,
        body: u64,
        stored: Option<(&str, &str)>,
    ) -> bool {
        let Some((stored_uid, stored_rv)) = stored else {
            return false;
        };
        let version = version_hash((stored_uid, stored_rv));
        self.read(job, uid, |e| {
            e.objects.iter().any(|r| r.same(object, body, version))
        })
        .unwrap_or(false)
    }

    /// Remembers that `body` was applied to `object` and the API server answered `answered` (uid and
    /// resourceVersion).
    pub fn applied(&self, job: &Key, uid: &str, object: u64, body: u64, answered: (&str, &str)) {
        let version = version_hash(answered);
        self.with_entry(job, uid, |e| {
            let remembered = Remembered {
                object,
                body,
                version,
                at: Instant::now(),
            };
            match e.objects.iter_mut().find(|r| r.object == object) {
                Some(r) => *r = remembered,
                None => e.objects.push(remembered),
            }
        });
    }

    /// Whether this process applied `object` for the TrainJob: a cache that does not hold it has then not
    /// caught up (or it was deleted since), and a live read tells which.
    pub fn remembers(&self, job: &Key, uid: &str, object: u64) -> bool {
        self.read(job, uid, |e| e.objects.iter().any(|r| r.object == object))
            .unwrap_or(false)
    }

    /// Whether this process applied `object` for the TrainJob less than `within` ago: a cache that does not
    /// hold it has most likely not caught up yet, and the watch event of that apply will trigger a reconcile.
    pub fn applied_within(&self, job: &Key, uid: &str, object: u64, within: Duration) -> bool {
        self.read(job, uid, |e| {
            e.objects
                .iter()
                .any(|r| r.object == object && r.at.elapsed() < within)
        })
        .unwrap_or(false)
    }

    /// Forgets `object` (it was found deleted, or deleted by the controller).
    pub fn forget_object(&self, job: &Key, uid: &str, object: u64) {
        let mut jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = jobs.get_mut(job).filter(|e| e.uid == uid) {
            e.objects.retain(|r| r.object != object);
        }
    }

    /// Whether `status` (hash) was already written by a patch computed from the TrainJob at
    /// `resource_version`, which the cache still shows.
    pub fn status_written(
        &self,
        job: &Key,
        uid: &str,
        resource_version: &str,
        status: u64,
    ) -> bool {
        let from = hash_of(&[resource_version]);
        self.read(job, uid, |e| e.status == Some((from, status)))
            .unwrap_or(false)
    }

    /// Remembers that `status` (hash) was written by a patch computed from the TrainJob at `resource_version`.
    pub fn wrote_status(&self, job: &Key, uid: &str, resource_version: &str, status: u64) {
        let from = hash_of(&[resource_version]);
        self.with_entry(job, uid, |e| e.status = Some((from, status)));
    }

    /// Remembers the fingerprint of the TrainJob as the leader's reconcile left it.
    pub fn reconciled(&self, job: &Key, uid: &str, fingerprint: u64) {
        self.with_entry(job, uid, |e| e.reconciled = Some(fingerprint));
    }

    /// Whether a TrainJob read from a watch event has exactly the fingerprint the leader's last reconcile left
    /// (the event is the echo of the leader's own status write).
    pub fn left_as_is(&self, job: &Key, uid: &str, fingerprint: u64) -> bool {
        self.read(job, uid, |e| e.reconciled == Some(fingerprint))
            .unwrap_or(false)
    }

    /// Whether the leader's last apply of `object` was answered with exactly `stored` (uid, resourceVersion):
    /// a watch event carrying that version is the echo of the apply.
    pub fn applied_version(&self, job: &Key, uid: &str, object: u64, stored: (&str, &str)) -> bool {
        let version = version_hash(stored);
        self.read(job, uid, |e| {
            e.objects
                .iter()
                .any(|r| r.object == object && r.version == version)
        })
        .unwrap_or(false)
    }

    /// Marks whether a reconcile of the TrainJob waits for the watch events of the leader's own applies.
    pub fn awaiting_echoes(&self, job: &Key, uid: &str, awaiting: bool) {
        self.with_entry(job, uid, |e| e.awaiting_echoes = awaiting);
    }

    /// Whether a reconcile of the TrainJob waits for the watch events of the leader's own applies.
    pub fn is_awaiting_echoes(&self, job: &Key, uid: &str) -> bool {
        self.read(job, uid, |e| e.awaiting_echoes).unwrap_or(false)
    }

    /// Forgets a TrainJob (finished: it gets no more applies).
    pub fn forget(&self, job: &Key) {
        self.jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(job);
    }

    /// TrainJobs remembered.
    pub fn len(&self) -> usize {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Drops the TrainJobs for which `alive` is false (deleted ones).
    pub fn sweep(&self, alive: impl Fn(&Key) -> bool) {
        self.jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|k, _| alive(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        ("team-a".to_owned(), name.to_owned())
    }

    #[test]
    fn an_apply_is_skipped_only_for_the_same_body_on_the_same_stored_version() {
        let memory = AppliedMemory::default();
        let (job, uid) = (key("mnist"), "u1");
        let object = hash_of(&["v1", "ConfigMap", "mnist-mpi-hostfile"]);
        let body = hash_json(&serde_json::json!({"data": {"hostfile": "a"}}));
        memory.applied(&job, uid, object, body, ("c1", "10"));

        let other_body = hash_json(&serde_json::json!({"data": {"hostfile": "b"}}));
        let other_object = hash_of(&["v1", "ConfigMap", "other"]);
        let table = [
            // (what, job uid, object, body, stored, skipped)
            (
                "same body, cache at the answered version",
                uid,
                object,
                body,
                Some(("c1", "10")),
                true,
            ),
            (
                "a new body (e.g. suspend flipped)",
                uid,
                object,
                other_body,
                Some(("c1", "10")),
                false,
            ),
            (
                "changed by someone since",
                uid,
                object,
                body,
                Some(("c1", "11")),
                false,
            ),
            (
                "deleted and created again",
                uid,
                object,
                body,
                Some(("c2", "10")),
                false,
            ),
            ("deleted (or not seen yet)", uid, object, body, None, false),
            (
                "another object",
                uid,
                other_object,
                body,
                Some(("c1", "10")),
                false,
            ),
            (
                "a new TrainJob of the same name",
                "u2",
                object,
                body,
                Some(("c1", "10")),
                false,
            ),
        ];
        for (what, uid, object, body, stored, skipped) in table {
            assert_eq!(
                memory.unchanged(&job, uid, object, body, stored),
                skipped,
                "{what}"
            );
        }
        assert!(memory.remembers(&job, uid, object));
        assert!(!memory.remembers(&job, "u2", object));
        assert!(memory.applied_within(&job, uid, object, Duration::from_secs(60)));
        assert!(!memory.applied_within(&job, uid, object, Duration::ZERO));
        assert!(!memory.applied_within(&job, uid, other_object, Duration::from_secs(60)));

        // A new apply replaces the object's entry.
        memory.applied(&job, uid, object, other_body, ("c1", "12"));
        assert!(!memory.unchanged(&job, uid, object, body, Some(("c1", "10"))));
        assert!(memory.unchanged(&job, uid, object, other_body, Some(("c1", "12"))));
        memory.forget_object(&job, uid, object);
        assert!(!memory.remembers(&job, uid, object));
    }

    #[test]
    fn a_status_is_skipped_only_while_the_cache_shows_the_version_it_was_patched_from() {
        let memory = AppliedMemory::default();
        let job = key("mnist");
        let status = hash_json(&serde_json::json!({"conditions": []}));
        memory.wrote_status(&job, "u1", "5", status);
        assert!(
            memory.status_written(&job, "u1", "5", status),
            "stale cache, same result"
        );
        assert!(
            !memory.status_written(&job, "u1", "6", status),
            "the cache moved on: decide afresh"
        );
        assert!(
            !memory.status_written(&job, "u1", "5", status + 1),
            "another status"
        );
        assert!(
            !memory.status_written(&job, "u2", "5", status),
            "another TrainJob"
        );
    }

    #[test]
    fn a_new_trainjob_of_the_same_name_starts_afresh_and_gone_ones_are_swept() {
        let memory = AppliedMemory::default();
        memory.applied(&key("a"), "u1", 1, 2, ("x", "1"));
        memory.wrote_status(&key("a"), "u1", "1", 3);
        memory.applied(&key("a"), "u2", 4, 5, ("y", "1"));
        assert!(!memory.remembers(&key("a"), "u2", 1));
        assert!(!memory.status_written(&key("a"), "u2", "1", 3));
        assert!(memory.remembers(&key("a"), "u2", 4));

        memory.applied(&key("b"), "u3", 1, 2, ("z", "1"));
        memory.sweep(|k| k.1 == "b");
        assert_eq!(memory.len(), 1);
        memory.forget(&key("b"));
        assert_eq!(memory.len(), 0);
    }

    #[test]
    fn equal_json_hashes_equal_and_any_change_differs() {
        let a = serde_json::json!({"spec": {"suspend": true, "replicatedJobs": [1, 2]}});
        let b = serde_json::json!({"spec": {"suspend": false, "replicatedJobs": [1, 2]}});
        assert_eq!(hash_json(&a), hash_json(&a.clone()));
        assert_ne!(hash_json(&a), hash_json(&b));
        assert_ne!(hash_of(&["ab", "c"]), hash_of(&["a", "bc"]));
    }
}
