//! The budget of status writes that change only a TrainJob's `jobsStatus` counts.
//!
//! Conditions, times and results are written as soon as they change. The counts (how many Jobs are active,
//! ready, done or suspended) change far more often, and one change alone tells little: when thousands of
//! TrainJobs start at once, the JobSet controller falls behind and every JobSet shows its Jobs active for
//! minutes, so each TrainJob got a count write of its own before the one that completed it (issue 39: at
//! N = 5,000 these were 0.58 status patches per TrainJob, most of the API requests we made beyond upstream's).
//!
//! So count-only writes share a token bucket ([`CountWriteBudget`]): `burst` may go out at once, then one per
//! `period`. Beyond that they wait in one line, oldest first, one place per TrainJob (a later count change keeps
//! the place). When a token frees, the TrainJob at the head is reconciled again and writes the counts of that
//! moment. A condition written meanwhile carries the counts with it, and the TrainJob leaves the line: under
//! load most count writes fold into the write that finishes the TrainJob. A cluster whose counts change
//! slower than the budget never waits; a burst beyond it sees counts at most `waiting × period` old.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::Stream;
use kube::runtime::reflector::{ObjectRef, Store};
use kubetrain_api::TrainJob;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backoff::Key;

/// How many status writes that change only `jobsStatus` counts may go out, cluster-wide: `burst` at once,
/// then one each `period` ([`crate::Settings::status_count_writes`]).
///
/// ```
/// use std::time::Duration;
/// use kubetrain_controller::CountWriteBudget;
///
/// let budget = CountWriteBudget::default();
/// assert_eq!((budget.period, budget.burst), (Duration::from_secs(5), 100));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CountWriteBudget {
    /// One more write may go out each period.
    pub period: Duration,
    /// Writes that may go out at once after a quiet spell (the bucket's size, full at start).
    pub burst: u32,
}

impl Default for CountWriteBudget {
    /// One write every 5 s after a burst of 100: a cluster starting fewer than 100 TrainJobs at once, or fewer
    /// than 12 a minute, never waits.
    fn default() -> Self {
        Self {
            period: Duration::from_secs(5),
            burst: 100,
        }
    }
}

/// What a reconcile with a count-only write to make may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Write it now.
    Write,
    /// Keep the written counts; the TrainJob is reconciled again when its turn comes.
    Wait,
}

/// What the line's pump does next ([`CountWrites::next_turn`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Turn {
    /// Reconcile this TrainJob now: a token is kept for it.
    Reconcile(Key),
    /// The head waits for a token: look again after this long (or when woken).
    After(Duration),
    /// Nobody waits: sleep until woken.
    Idle,
}

/// A turn that is not taken within this long (the TrainJob was deleted, or its reconcile found nothing to
/// write and did not say so) is dropped, so that a lost turn never blocks the line.
const TURN_TTL: Duration = Duration::from_secs(60);

/// The shared line of count-only writes (see the module docs).
#[derive(Debug)]
pub(crate) struct CountWrites {
    budget: CountWriteBudget,
    state: Mutex<State>,
    /// Wakes the pump when the line gets a new entry.
    wake: Notify,
    waiting_gauge: Gauge,
}

#[derive(Debug)]
struct State {
    tokens: f64,
    refilled: Instant,
    /// Keys in the order they joined; an entry no longer in `waiting` is skipped when it comes to the head.
    line: VecDeque<Key>,
    waiting: HashMap<Key, Waiter>,
    /// The turns given, oldest first: the stale ones are found at the front, without a scan of `waiting`.
    turns: VecDeque<(Key, Instant)>,
}

#[derive(Debug)]
struct Waiter {
    uid: String,
    /// When its turn came (a token is kept for it), if it has.
    turn_since: Option<Instant>,
}

impl CountWrites {
    /// A line with a full bucket at `now`; `waiting_gauge` follows the number of TrainJobs in it.
    pub(crate) fn new(budget: CountWriteBudget, now: Instant, waiting_gauge: Gauge) -> Self {
        Self {
            budget,
            state: Mutex::new(State {
                tokens: f64::from(budget.burst),
                refilled: now,
                line: VecDeque::new(),
                waiting: HashMap::new(),
                turns: VecDeque::new(),
            }),
            wake: Notify::new(),
            waiting_gauge,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A reconcile of `job` (uid `uid`) wants to write a change of its counts only.
    pub(crate) fn request(&self, job: &Key, uid: &str, now: Instant) -> Verdict {
        let mut state = self.lock();
        state.refill(self.budget, now);
        if let Some(waiter) = state.waiting.get_mut(job) {
            waiter.uid = uid.to_owned();
            if waiter.turn_since.is_none() {
                return Verdict::Wait;
            }
            state.waiting.remove(job);
            self.waiting_gauge.set(state.waiting.len() as i64);
            return Verdict::Write;
        }
        if state.waiting.is_empty() && state.tokens >= 1.0 {
            state.tokens -= 1.0;
            return Verdict::Write;
        }
        state.waiting.insert(
            job.clone(),
            Waiter {
                uid: uid.to_owned(),
                turn_since: None,
            },
        );
        state.line.push_back(job.clone());
        self.waiting_gauge.set(state.waiting.len() as i64);
        drop(state);
        self.wake.notify_one();
        Verdict::Wait
    }

    /// `job` has no count-only write to make any more (a condition carried its counts, the counts went back,
    /// or it finished): it leaves the line, and a token kept for its turn goes back to the bucket.
    pub(crate) fn withdraw(&self, job: &Key) {
        let mut state = self.lock();
        if let Some(waiter) = state.waiting.remove(job) {
            if waiter.turn_since.is_some() {
                state.tokens = (state.tokens + 1.0).min(f64::from(self.budget.burst));
            }
            self.waiting_gauge.set(state.waiting.len() as i64);
        }
    }

    /// The pump's next step at `now`; `exists(key, uid)` says whether that TrainJob is still there (a gone
    /// one leaves the line without using a token).
    pub(crate) fn next_turn(&self, now: Instant, exists: impl Fn(&Key, &str) -> bool) -> Turn {
        let mut state = self.lock();
        state.refill(self.budget, now);
        state.drop_stale_turns(now);
        loop {
            let Some(head) = state.line.front().cloned() else {
                self.waiting_gauge.set(state.waiting.len() as i64);
                return Turn::Idle;
            };
            let Some(waiter) = state.waiting.get(&head) else {
                state.line.pop_front();
                continue;
            };
            if waiter.turn_since.is_some() {
                // Its turn came and it has not been taken yet: the entry stays until taken or stale.
                state.line.pop_front();
                continue;
            }
            if !exists(&head, &waiter.uid) {
                state.waiting.remove(&head);
                state.line.pop_front();
                continue;
            }
            if state.tokens < 1.0 {
                let missing = 1.0 - state.tokens;
                self.waiting_gauge.set(state.waiting.len() as i64);
                return Turn::After(self.budget.period.mul_f64(missing));
            }
            state.tokens -= 1.0;
            state.line.pop_front();
            if let Some(waiter) = state.waiting.get_mut(&head) {
                waiter.turn_since = Some(now);
            }
            state.turns.push_back((head.clone(), now));
            return Turn::Reconcile(head);
        }
    }

    /// How many TrainJobs wait for their turn (or have it and have not taken it yet).
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }

    /// Waits until a new TrainJob joins the line (or one joined since the last call).
    pub(crate) async fn joined(&self) {
        self.wake.notified().await;
    }
}

/// The TrainJobs whose turn came, for the controller's `reconcile_on`: the line's pump, which sleeps while
/// nobody waits or the bucket is empty. `store` is the controller's TrainJob cache.
pub(crate) fn turns(
    writes: Arc<CountWrites>,
    store: Store<TrainJob>,
) -> impl Stream<Item = ObjectRef<TrainJob>> + Send + 'static {
    futures_util::stream::unfold((writes, store), |(writes, store)| async move {
        loop {
            let exists = |(namespace, name): &Key, uid: &str| {
                store
                    .get(&ObjectRef::new(name).within(namespace))
                    .is_some_and(|job| job.metadata.uid.as_deref() == Some(uid))
            };
            match writes.next_turn(Instant::now(), exists) {
                Turn::Reconcile((namespace, name)) => {
                    let next = ObjectRef::new(&name).within(&namespace);
                    return Some((next, (writes, store)));
                }
                // A TrainJob joining behind the head cannot bring the head's turn sooner.
                Turn::After(wait) => tokio::time::sleep(wait).await,
                Turn::Idle => writes.joined().await,
            }
        }
    })
}

impl State {
    fn refill(&mut self, budget: CountWriteBudget, now: Instant) {
        let elapsed = now.saturating_duration_since(self.refilled);
        self.refilled = now;
        if budget.period.is_zero() {
            self.tokens = f64::from(budget.burst);
            return;
        }
        let earned = elapsed.as_secs_f64() / budget.period.as_secs_f64();
        self.tokens = (self.tokens + earned).min(f64::from(budget.burst));
    }

    fn drop_stale_turns(&mut self, now: Instant) {
        while let Some((key, since)) = self
            .turns
            .front()
            .filter(|(_, since)| now.saturating_duration_since(*since) >= TURN_TTL)
            .cloned()
        {
            self.turns.pop_front();
            // Still the same untaken turn (not taken, withdrawn, or a later one of the same TrainJob).
            if self.waiting.get(&key).and_then(|w| w.turn_since) == Some(since) {
                self.waiting.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests;
