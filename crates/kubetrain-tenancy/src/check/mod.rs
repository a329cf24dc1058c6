//! The GPU-cluster guide's multi-tenancy checklist judged on a snapshot of a cluster: [`check`] turns a
//! [`ClusterView`] (what a client read, or what a test builds) into a [`Report`] of [`Item`]s, each with a
//! [`Verdict`], its evidence and, when it is not a pass, the fix.
//!
//! Everything here is pure: no client, no clock. `kubetrain tenancy check` reads the view live and prints the
//! report as text ([`Report::to_text`]), JSON (the [`Report`] serialized) or HTML ([`Report::to_html`]).
//!
//! **Team namespaces** are the namespaces labelled [`TEAM_LABEL`] (what `kubetrain tenancy add-team` sets)
//! and the namespaces that hold a Kueue LocalQueue; the per-namespace items judge each of them.
//!
//! ```
//! use kubetrain_tenancy::check::{ClusterView, Verdict, check};
//! let report = check(&ClusterView::default());
//! let teams = report.item("team-namespaces").unwrap();
//! assert_eq!(teams.verdict, Verdict::Warn);
//! assert!(teams.fix.as_deref().unwrap().contains("kubetrain tenancy add-team"));
//! ```

mod audit;
mod cluster_items;
mod namespace_items;
mod network;
mod render;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{ConfigMap, LimitRange, Namespace, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use audit::{AuditLevel, audit_level};

/// The label that marks a team namespace; its value is the team's name.
pub const TEAM_LABEL: &str = "kubetrain.dev/team";

/// The Pod Security admission label that enforces a level on a namespace.
pub const POD_SECURITY_ENFORCE: &str = "pod-security.kubernetes.io/enforce";

/// The name of the training policy's ConfigMap (any namespace).
pub const TRAINING_POLICY_CONFIGMAP: &str = "kubetrain-training-policy";

/// The TrainJob status server's port on the operator (training pods report progress to it).
pub const STATUS_SERVER_PORT: i32 = 10443;

/// The operator's admission webhook port.
pub const WEBHOOK_PORT: i32 = 9443;

/// What the cluster looked like: the objects the checklist reads. Lists the client could not read are named
/// in [`ClusterView::unreadable`] with the reason, and the items that need them say "unknown".
#[derive(Clone, Debug, Default)]
pub struct ClusterView {
    /// Every Namespace.
    pub namespaces: Vec<Namespace>,
    /// Every RoleBinding (all namespaces).
    pub role_bindings: Vec<RoleBinding>,
    /// Every ClusterRoleBinding.
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
    /// Every ResourceQuota.
    pub resource_quotas: Vec<ResourceQuota>,
    /// Every LimitRange.
    pub limit_ranges: Vec<LimitRange>,
    /// Every NetworkPolicy.
    pub network_policies: Vec<NetworkPolicy>,
    /// Kueue LocalQueues as the API server returned them.
    pub local_queues: Vec<Value>,
    /// Kueue ClusterQueues as the API server returned them.
    pub cluster_queues: Vec<Value>,
    /// ClusterTrainingRuntimes and TrainingRuntimes (their `kind` tells which), raw.
    pub runtimes: Vec<Value>,
    /// Every TrainJob, raw (fields newer than this crate's types are still read).
    pub train_jobs: Vec<Value>,
    /// The ConfigMaps named [`TRAINING_POLICY_CONFIGMAP`].
    pub training_policies: Vec<ConfigMap>,
    /// ValidatingAdmissionPolicies, raw.
    pub admission_policies: Vec<Value>,
    /// Validating and mutating webhook configurations, raw (their `kind` tells which).
    pub webhook_configurations: Vec<Value>,
    /// The API server's command line, when readable.
    pub api_server: ApiServerArgs,
    /// The audit policy in force, when the caller has it (a file given by the admin).
    pub audit_policy: Option<AuditPolicySource>,
    /// The lists that could not be read: the kind (e.g. `LocalQueue`) and why.
    pub unreadable: BTreeMap<String, String>,
}

/// The API server's flags, or why they are unknown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiServerArgs {
    /// Read from `source` (e.g. `pod kube-system/kube-apiserver-node1`).
    Read {
        /// Where the flags were read.
        source: String,
        /// The command and its arguments.
        args: Vec<String>,
    },
    /// Not readable.
    Unknown {
        /// Why (a sentence that follows "unknown, because").
        reason: String,
    },
}

impl Default for ApiServerArgs {
    fn default() -> Self {
        ApiServerArgs::Unknown {
            reason: "the API server's flags were not read".to_owned(),
        }
    }
}

impl ApiServerArgs {
    /// The value of `--flag` (`--flag=value` or `--flag value`), when the flags were read and hold it.
    pub fn flag(&self, flag: &str) -> Option<&str> {
        let ApiServerArgs::Read { args, .. } = self else {
            return None;
        };
        let name = format!("--{flag}");
        args.iter().enumerate().find_map(|(i, arg)| {
            if let Some(value) = arg.strip_prefix(&name).and_then(|r| r.strip_prefix('=')) {
                Some(value)
            } else if *arg == name {
                args.get(i + 1).map(String::as_str)
            } else {
                None
            }
        })
    }
}

/// An audit policy document (`audit.k8s.io/v1` `Policy`) and where it came from.
#[derive(Clone, Debug)]
pub struct AuditPolicySource {
    /// Where it was read (a file name).
    pub source: String,
    /// The policy.
    pub policy: Value,
}

/// An item's judgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// In place.
    Pass,
    /// Partly in place, or not judgeable: read the evidence.
    Warn,
    /// Missing: the fix says what to do.
    Fail,
}

impl Verdict {
    /// `pass`, `warn` or `fail`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Warn => "warn",
            Verdict::Fail => "fail",
        }
    }
}

/// One checklist item's result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    /// Stable identifier (`team-namespaces`, `rbac-groups`, ...; docs/tenancy.md lists them).
    pub id: String,
    /// The guide's item, in words.
    pub title: String,
    /// The judgement.
    pub verdict: Verdict,
    /// What was seen, one finding a line.
    pub evidence: Vec<String>,
    /// What to do, when the verdict is not a pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Item {
    fn new(id: &str, title: &str) -> Self {
        Item {
            id: id.to_owned(),
            title: title.to_owned(),
            verdict: Verdict::Pass,
            evidence: Vec::new(),
            fix: None,
        }
    }

    /// Adds a finding at `verdict` (the item's verdict is the worst of its findings) with its fix.
    fn finding(&mut self, verdict: Verdict, evidence: impl Into<String>, fix: Option<&str>) {
        self.verdict = self.verdict.max(verdict);
        self.evidence.push(evidence.into());
        if let Some(fix) = fix {
            match &mut self.fix {
                Some(existing) if existing.contains(fix) => {}
                Some(existing) => {
                    existing.push('\n');
                    existing.push_str(fix);
                }
                None => self.fix = Some(fix.to_owned()),
            }
        }
    }

    fn pass(&mut self, evidence: impl Into<String>) {
        self.finding(Verdict::Pass, evidence, None);
    }
}

/// The counts of each verdict.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Items that pass.
    pub pass: usize,
    /// Items that warn.
    pub warn: usize,
    /// Items that fail.
    pub fail: usize,
}

/// The checklist's result: `kubetrain tenancy check -o json` prints it as is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The worst item verdict (`pass` when every item passes).
    pub verdict: Verdict,
    /// How many items had each verdict.
    pub summary: Summary,
    /// The namespaces judged as team namespaces, sorted.
    pub team_namespaces: Vec<String>,
    /// One entry per checklist item, in the guide's order.
    pub items: Vec<Item>,
}

impl Report {
    /// The item `id`.
    pub fn item(&self, id: &str) -> Option<&Item> {
        self.items.iter().find(|item| item.id == id)
    }

    /// The process exit code `kubetrain tenancy check` uses: 1 when any item fails, else 0.
    pub fn exit_code(&self) -> u8 {
        u8::from(self.verdict == Verdict::Fail)
    }
}

/// Judges every checklist item on `view`, for its team namespaces ([`team_namespaces`]).
pub fn check(view: &ClusterView) -> Report {
    check_namespaces(view, team_namespaces(view))
}

/// Judges every checklist item on `view`, with `teams` as the team namespaces (`kubetrain tenancy check
/// --namespace`).
pub fn check_namespaces(view: &ClusterView, teams: BTreeSet<String>) -> Report {
    let items = vec![
        namespace_items::team_namespaces(view, &teams),
        namespace_items::rbac_groups(view, &teams),
        namespace_items::quotas(view, &teams),
        namespace_items::pod_security(view, &teams),
        cluster_items::runtimes(view),
        cluster_items::image_policy(view),
        network::network_policies(view, &teams),
        audit::audit(view),
        cluster_items::secrets(view),
        cluster_items::cleanup(view),
    ];
    let mut items = items;
    for item in items.iter_mut().filter(|i| i.evidence.is_empty()) {
        item.pass("no team namespace to judge");
    }
    let mut summary = Summary::default();
    for item in &items {
        match item.verdict {
            Verdict::Pass => summary.pass += 1,
            Verdict::Warn => summary.warn += 1,
            Verdict::Fail => summary.fail += 1,
        }
    }
    Report {
        verdict: items
            .iter()
            .map(|i| i.verdict)
            .max()
            .unwrap_or(Verdict::Pass),
        summary,
        team_namespaces: teams.into_iter().collect(),
        items,
    }
}

/// The team namespaces of `view`: labelled [`TEAM_LABEL`], or holding a LocalQueue; not the ones being
/// deleted (phase `Terminating`).
pub fn team_namespaces(view: &ClusterView) -> BTreeSet<String> {
    let terminating = terminating_namespaces(view);
    let labelled = view.namespaces.iter().filter_map(|ns| {
        let labels = ns.metadata.labels.as_ref()?;
        labels
            .contains_key(TEAM_LABEL)
            .then(|| ns.metadata.name.clone())?
    });
    let queued = view
        .local_queues
        .iter()
        .filter_map(|lq| str_at(lq, &["metadata", "namespace"]).map(str::to_owned));
    labelled
        .chain(queued)
        .filter(|ns| !terminating.contains(ns.as_str()))
        .collect()
}

/// The namespaces being deleted (phase `Terminating`): what is in them is going away.
pub(crate) fn terminating_namespaces(view: &ClusterView) -> BTreeSet<&str> {
    view.namespaces
        .iter()
        .filter(|ns| ns.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating"))
        .filter_map(|ns| ns.metadata.name.as_deref())
        .collect()
}

/// The string at `path` in `value`.
pub(crate) fn str_at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(value, path)?.as_str()
}

/// The value at `path` in `value`.
pub(crate) fn at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, key| v.get(key))
}

/// `namespace/name` of a raw object (just `name` when cluster-scoped).
pub(crate) fn object_ref(value: &Value) -> String {
    let name = str_at(value, &["metadata", "name"]).unwrap_or("?");
    match str_at(value, &["metadata", "namespace"]) {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_owned(),
    }
}

/// The evidence line for a list the client could not read, when it could not.
pub(crate) fn unreadable(view: &ClusterView, kind: &str) -> Option<String> {
    view.unreadable
        .get(kind)
        .map(|why| format!("{kind}s: unknown, because {why}"))
}
