//! What an operator deployment can tune about the TrainJob controller.

use std::time::Duration;

use crate::CountWriteBudget;

/// The server-side apply field manager every object and status write uses.
pub const FIELD_MANAGER: &str = "trainer.kubeflow.org/kubetrain";

/// The `reportingController` of the events the controller publishes (upstream's event recorder name).
pub const EVENT_REPORTER: &str = "trainer-trainjob-controller";

/// Settings of the TrainJob controller; [`Settings::default`] suits a single-namespace or cluster-wide
/// deployment alike.
///
/// ```
/// use std::time::Duration;
/// use kubetrain_controller::Settings;
///
/// let settings = Settings {
///     namespace: Some("team-a".into()),
///     concurrency: 8,
///     ..Settings::default()
/// };
/// assert_eq!(settings.field_manager, "trainer.kubeflow.org/kubetrain");
/// assert_eq!(settings.backoff_max, Duration::from_secs(300));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Field manager of every server-side apply (one manager for all objects), default [`FIELD_MANAGER`].
    pub field_manager: String,
    /// Namespace to watch; `None` watches TrainJobs in every namespace.
    pub namespace: Option<String>,
    /// Reconciles that may run at once (upstream's `groupKindConcurrency` for TrainJob is 5); 0 = unbounded.
    pub concurrency: u16,
    /// Debounce of reconcile requests for one TrainJob (bursts of child events collapse into one reconcile).
    pub debounce: Duration,
    /// First retry delay after a failed reconcile; doubled on each further failure of the same TrainJob.
    pub backoff_base: Duration,
    /// The longest retry delay.
    pub backoff_max: Duration,
    /// How often a replica that is not the leader re-computes a TrainJob (it never writes).
    pub follower_requeue: Duration,
    /// How often a follower checks whether it became the leader (then every TrainJob is reconciled at once).
    pub leadership_poll: Duration,
    /// `reportingController` of published events, default [`EVENT_REPORTER`].
    pub event_reporter: String,
    /// `reportingInstance` of published events (e.g. the pod name); `None` uses the host name.
    pub event_instance: Option<String>,
    /// Reconcile every TrainJob at least this often, even when nothing changed (controller-runtime's
    /// `SyncPeriod`, 10 h in upstream's manager and in `kubetrain-operator`): repairs drift that no watch
    /// event reports, such as a child deleted while the operator was down. `None` waits for changes only.
    pub sync_period: Option<Duration>,
    /// The budget of status writes that change only a TrainJob's `jobsStatus` counts, shared by every
    /// TrainJob (conditions, times and results are always written at once, with the counts of that moment).
    /// Beyond it, count changes wait in line and most fold into the next condition's write
    /// ([`CountWriteBudget`]). `None` writes every count change at once. Used by [`crate::run`] only: a
    /// [`crate::controller::Context`] reconciled by hand writes every change.
    pub status_count_writes: Option<CountWriteBudget>,
    /// Optional render plugins: with `trainjob_status` set (upstream's `TrainJobStatus` feature gate), trainer
    /// pods get the status server's URL, CA certificate and a token for it ([`crate::status_server`]).
    /// Default: none, as upstream.
    pub render: kubetrain_jobset::RenderOptions,
    /// Kinds of the objects custom render plugins build for a TrainJob (upstream's `WatchExtensionPlugin`):
    /// each one the API server serves is watched (metadata only, in [`Settings::namespace`]), and a change to
    /// an object a TrainJob owns reconciles that TrainJob at once, e.g. to restore a companion deleted by hand.
    /// Needs `list` and `watch` on the kind (docs/plugins.md). Default: none.
    pub owned_kinds: Vec<kube::api::ApiResource>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            field_manager: FIELD_MANAGER.to_owned(),
            namespace: None,
            concurrency: 5,
            debounce: Duration::from_millis(100),
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(300),
            follower_requeue: Duration::from_secs(30),
            leadership_poll: Duration::from_secs(1),
            event_reporter: EVENT_REPORTER.to_owned(),
            event_instance: None,
            sync_period: None,
            status_count_writes: Some(CountWriteBudget::default()),
            render: kubetrain_jobset::RenderOptions::default(),
            owned_kinds: Vec::new(),
        }
    }
}
