//! The local queue: concurrent local runs — several `kubetrain run` processes, several LocalProcess jobs in
//! one process — wait for this machine's capacity in one Kueue ClusterQueue, in arrival order.
//!
//! Every run takes a [`Ticket`]: an entry in a ledger file shared by all processes of the user
//! ([`LocalQueue::default_dir`]), guarded by an exclusive `flock`. The ledger holds the admitted runs (their
//! pod sets' requests are the ClusterQueue's usage) and the waiting ones (in arrival order). A waiting run
//! asks Kueue's model (`decide::decide`) whether it fits next to them; if not it keeps polling and shows
//! Kueue's reason and its position. Dropping the ticket (the run ended, failed or was interrupted) removes
//! the entry; entries of processes that are gone are reclaimed by the next run that opens the ledger.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), kubetrain_client::ClientError> {
//! use kubetrain_client::local::{self, LocalOptions, capacity::Capacity, queue::{LocalQueue, QueueState}};
//!
//! let job = |name: &str| format!("apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\n\
//!     metadata: {{name: {name}}}\nspec:\n  runtimeRef: {{name: torch-distributed}}\n  \
//!     trainer: {{command: [\"true\"], resourcesPerNode: {{requests: {{cpu: '2'}}}}}}\n");
//! let dir = tempfile::tempdir().unwrap();
//! let options = LocalOptions { run_dir: Some(dir.path().join("runs")), ..LocalOptions::default() };
//! let catalog = kubetrain_jobset::builtin::catalog();
//! // A 3-core machine: one 2-core job at a time.
//! let queue = LocalQueue::new(dir.path().join("queue"), Capacity { cpu: 3, memory: None, gpus: 0 });
//!
//! let mut first = queue.enqueue(&local::prepare(&job("first"), &catalog, &options)?)?;
//! let mut second = queue.enqueue(&local::prepare(&job("second"), &catalog, &options)?)?;
//! assert_eq!(first.poll()?, QueueState::Admitted);
//! let QueueState::Pending(pending) = second.poll()? else { panic!("the second job fits too") };
//! assert_eq!((pending.position, pending.waiting), (1, 1));
//! assert!(pending.reason.contains("insufficient unused quota for cpu"), "{}", pending.reason);
//!
//! drop(first); // the first run ended: its share is free
//! second.wait(|_| {}).await?;
//! assert!(second.is_admitted());
//! # Ok(()) }
//! ```

// Kueue's admission decision over the ledger, and the ledger's file format and process checks: internals.
pub(crate) mod decide;
pub(crate) mod entry;
mod error;
#[cfg(test)]
mod laws;
pub(crate) mod ledger;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;

pub use self::decide::DecideError;
use self::decide::{Verdict, decide};
pub use self::error::QueueError;
use self::ledger::{Entry, EntryState, Ledger, LedgerDir};
use super::capacity::{Capacity, check, queued_pod_sets};
pub use super::cluster_queue::QueueingStrategy;
use super::plan::JobPlan;

/// Why a run waits and where it stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    /// Kueue's pending message (`couldn't assign flavors to pod set node: insufficient unused quota ...`).
    pub reason: String,
    /// 1-based position among the waiting runs (arrival order).
    pub position: usize,
    /// How many runs wait.
    pub waiting: usize,
}

impl fmt::Display for Pending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (position {} of {} waiting)",
            self.reason, self.position, self.waiting
        )
    }
}

/// Where a ticket stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueueState {
    /// The run holds its share of the capacity and may start.
    Admitted,
    /// The run waits.
    Pending(Pending),
}

/// The ClusterQueue of local runs: a ledger directory, the capacity it holds and its strategy.
#[derive(Clone, Debug)]
pub struct LocalQueue {
    ledger: LedgerDir,
    capacity: Capacity,
    strategy: QueueingStrategy,
    poll: Duration,
    timeout: Option<Duration>,
}

/// Wakes the waiting tickets of this process when one of its tickets changes the ledger; other
/// processes' changes are seen at the next poll.
static LEDGER_CHANGED: Notify = Notify::const_new();

impl LocalQueue {
    /// The queue whose ledger lives in `dir`, holding `capacity`; BestEffortFIFO, polled every 200 ms,
    /// no timeout.
    pub fn new(dir: impl Into<PathBuf>, capacity: Capacity) -> Self {
        LocalQueue {
            ledger: LedgerDir::new(dir),
            capacity,
            strategy: QueueingStrategy::default(),
            poll: Duration::from_millis(200),
            timeout: None,
        }
    }

    /// The queue every local run of this user shares: [`default_dir`](Self::default_dir) and
    /// [this machine's capacity](Capacity::of_this_machine).
    pub fn shared() -> Self {
        Self::new(Self::default_dir(), Capacity::of_this_machine())
    }

    /// `<runs tree>/.queue`: one ledger per user, in the user's runs tree ([`super::tree`]).
    pub fn default_dir() -> PathBuf {
        super::tree::runs_root().join(".queue")
    }

    /// Orders the queue with `strategy`.
    pub fn with_strategy(mut self, strategy: QueueingStrategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// Polls the ledger every `interval` while waiting (at least 1 ms).
    pub fn with_poll_interval(mut self, interval: Duration) -> Self {
        self.poll = interval.max(Duration::from_millis(1));
        self
    }

    /// Gives up waiting after `timeout` ([`QueueError::Timeout`]); `None` waits for ever.
    pub fn with_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// Holds `capacity` instead.
    pub fn with_capacity(mut self, capacity: Capacity) -> Self {
        self.capacity = capacity;
        self
    }

    /// The ledger directory.
    pub fn dir(&self) -> &Path {
        self.ledger.dir()
    }

    /// The capacity the ClusterQueue holds.
    pub fn capacity(&self) -> &Capacity {
        &self.capacity
    }

    /// The queueing strategy.
    pub fn strategy(&self) -> QueueingStrategy {
        self.strategy
    }

    /// The wait limit.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Queues `plan`: a job that can never fit the capacity's GPUs is refused
    /// ([`QueueError::NeverFits`]); otherwise it gets a waiting entry at the end of the queue (call
    /// [`Ticket::poll`] or [`Ticket::wait`]). A job that asks more CPU or memory than the capacity holds is
    /// queued for all of it, with a notice ([`Ticket::take_notices`]).
    pub fn enqueue(&self, plan: &JobPlan) -> Result<Ticket, QueueError> {
        let mut notices = match check(plan, &self.capacity) {
            Err(why) => return Err(QueueError::NeverFits(Box::new(why))),
            Ok(warning) => warning.into_iter().collect::<Vec<_>>(),
        };
        let pid = std::process::id();
        let job = format!("{}/{}", plan.namespace, plan.name);
        let id = ticket_id(pid);
        let pod_sets = queued_pod_sets(plan, &self.capacity);
        let ((), house) = self.ledger.transact(|ledger| {
            let seq = ledger.take_seq();
            ledger.entries.push(Entry {
                id: id.clone(),
                job: job.clone(),
                seq,
                pid,
                start_ticks: super::identity::state_and_start(pid).map(|(_, t)| t),
                state: EntryState::Waiting,
                queued_at_ms: now_ms(),
                pod_sets: pod_sets.clone(),
            });
        })?;
        notices.extend(house.notices);
        Ok(Ticket {
            queue: self.clone(),
            id,
            job,
            pod_sets,
            admitted: false,
            notices,
        })
    }

    /// Every run in the ledger with its state, in queue order (admitted first): for displays.
    pub fn runs(&self) -> Result<Vec<QueuedRun>, QueueError> {
        let (runs, _) = self.ledger.transact(|ledger| -> Result<_, QueueError> {
            let verdicts = decide(&ledger.entries, &self.capacity, self.strategy)
                .map_err(|e| QueueError::Model(Box::new(e)))?;
            let mut admitted: Vec<&Entry> = ledger
                .entries
                .iter()
                .filter(|e| e.state == EntryState::Admitted)
                .collect();
            admitted.sort_by_key(|e| e.seq);
            let waiting = ledger.waiting();
            let mut runs: Vec<QueuedRun> = admitted
                .iter()
                .map(|e| QueuedRun {
                    job: e.job.clone(),
                    pid: e.pid,
                    state: QueueState::Admitted,
                })
                .collect();
            for (i, e) in waiting.iter().enumerate() {
                let reason = match verdicts.get(&e.id) {
                    Some(Verdict::Wait(why)) => why.clone(),
                    _ => "admitted at its next poll".to_string(),
                };
                runs.push(QueuedRun {
                    job: e.job.clone(),
                    pid: e.pid,
                    state: QueueState::Pending(Pending {
                        reason,
                        position: i + 1,
                        waiting: waiting.len(),
                    }),
                });
            }
            Ok(runs)
        })?;
        runs
    }
}

/// One run of [`LocalQueue::runs`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueuedRun {
    /// `namespace/name` of the TrainJob.
    pub job: String,
    /// The process that runs it.
    pub pid: u32,
    /// Admitted or pending.
    pub state: QueueState,
}

/// A run's place in the [`LocalQueue`]; dropping it releases the place (and the capacity once admitted).
#[derive(Debug)]
pub struct Ticket {
    queue: LocalQueue,
    id: String,
    job: String,
    pod_sets: Vec<ledger::PodSetEntry>,
    admitted: bool,
    notices: Vec<String>,
}

impl Ticket {
    /// `namespace/name` of the TrainJob.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// The ledger entry's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether the run was admitted.
    pub fn is_admitted(&self) -> bool {
        self.admitted
    }

    /// Notices gathered so far (oversized CPU/memory requests, reclaimed entries, a rebuilt ledger); each
    /// is returned once.
    pub fn take_notices(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notices)
    }

    /// Asks Kueue once: admits the run when it fits next to the admitted runs and the runs ahead of it.
    pub fn poll(&mut self) -> Result<QueueState, QueueError> {
        let (state, house) = self
            .queue
            .ledger
            .transact(|ledger| self.poll_locked(ledger))?;
        self.notices.extend(house.notices);
        let state = state?;
        if state == QueueState::Admitted && !self.admitted {
            self.admitted = true;
            LEDGER_CHANGED.notify_waiters();
        }
        Ok(state)
    }

    fn poll_locked(&self, ledger: &mut Ledger) -> Result<QueueState, QueueError> {
        if ledger.entry_mut(&self.id).is_none() {
            // The ledger was rebuilt (or edited) under us: take our place again.
            let pid = std::process::id();
            let seq = ledger.take_seq();
            ledger.entries.push(Entry {
                id: self.id.clone(),
                job: self.job.clone(),
                seq,
                pid,
                start_ticks: super::identity::state_and_start(pid).map(|(_, t)| t),
                state: if self.admitted {
                    EntryState::Admitted
                } else {
                    EntryState::Waiting
                },
                queued_at_ms: now_ms(),
                pod_sets: self.pod_sets.clone(),
            });
        }
        if self.admitted {
            return Ok(QueueState::Admitted);
        }
        let verdicts = decide(&ledger.entries, &self.queue.capacity, self.queue.strategy)
            .map_err(|e| QueueError::Model(Box::new(e)))?;
        match verdicts.get(&self.id) {
            Some(Verdict::Wait(reason)) => {
                let waiting = ledger.waiting();
                let position = waiting
                    .iter()
                    .position(|e| e.id == self.id)
                    .map_or(0, |p| p + 1);
                Ok(QueueState::Pending(Pending {
                    reason: reason.clone(),
                    position,
                    waiting: waiting.len(),
                }))
            }
            Some(Verdict::Admit) | None => {
                if let Some(e) = ledger.entry_mut(&self.id) {
                    e.state = EntryState::Admitted;
                }
                Ok(QueueState::Admitted)
            }
        }
    }

    /// Polls until the run is admitted, calling `on_pending` after every poll that leaves it waiting;
    /// gives up after the queue's timeout. Runs of this process that release their place wake it at once,
    /// other processes' changes are seen at the next poll.
    pub async fn wait(&mut self, mut on_pending: impl FnMut(&Pending)) -> Result<(), QueueError> {
        let start = Instant::now();
        loop {
            let changed = LEDGER_CHANGED.notified();
            match self.poll()? {
                QueueState::Admitted => return Ok(()),
                QueueState::Pending(pending) => {
                    on_pending(&pending);
                    let waited = start.elapsed();
                    let mut nap = self.queue.poll;
                    if let Some(limit) = self.queue.timeout {
                        if waited >= limit {
                            return Err(QueueError::Timeout {
                                job: self.job.clone(),
                                waited,
                                pending,
                            });
                        }
                        nap = nap.min(limit - waited);
                    }
                    tokio::select! {
                        () = tokio::time::sleep(nap) => {}
                        () = changed => {}
                    }
                }
            }
        }
    }

    /// Runs `work` (the admitted run) while keeping this ticket's entry in the ledger: every second (or
    /// every poll interval, when longer) it checks that the entry is still there and books it again if
    /// the ledger was rebuilt meanwhile, so other runs keep counting this run's share.
    pub async fn hold_while<F: std::future::Future>(&mut self, work: F) -> F::Output {
        let every = self.queue.poll.max(Duration::from_secs(1));
        let mut work = std::pin::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return out,
                () = tokio::time::sleep(every) => {
                    // A ledger that cannot be read now is tried again at the next tick.
                    let _ = self.poll();
                }
            }
        }
    }

    /// Leaves the queue (same as dropping the ticket), reporting a failure to update the ledger.
    pub fn release(mut self) -> Result<(), QueueError> {
        let result = self.release_entry();
        self.id.clear();
        result
    }

    fn release_entry(&mut self) -> Result<(), QueueError> {
        if self.id.is_empty() {
            return Ok(());
        }
        let id = self.id.clone();
        let result = self
            .queue
            .ledger
            .transact(|ledger| ledger.entries.retain(|e| e.id != id));
        LEDGER_CHANGED.notify_waiters();
        result.map(|((), _)| ())
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        // A ledger that cannot be written now is reclaimed once this process is gone.
        let _ = self.release_entry();
    }
}

/// A ticket id unique on this machine: pid, time and a per-process counter.
fn ticket_id(pid: u32) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{pid}-{nanos}-{n}")
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
