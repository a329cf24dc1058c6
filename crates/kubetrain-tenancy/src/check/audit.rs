//! The `audit` item: does the API server log TrainJob creation and Secret reads? Judged from the audit
//! policy when the admin gives it, and from the API server's flags when they are readable (the
//! `kube-apiserver` pod of kubeadm-style clusters); "unknown, because ..." otherwise.

use serde_json::Value;

use super::{ApiServerArgs, ClusterView, Item, Verdict, str_at};

/// An audit level, in increasing detail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum AuditLevel {
    /// Not logged.
    None,
    /// Who, what, when; no bodies.
    Metadata,
    /// Also the request body.
    Request,
    /// Also the response body.
    RequestResponse,
}

impl AuditLevel {
    fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "None" => AuditLevel::None,
            "Metadata" => AuditLevel::Metadata,
            "Request" => AuditLevel::Request,
            "RequestResponse" => AuditLevel::RequestResponse,
            _ => return None,
        })
    }
}

fn list_matches(list: Option<&Value>, wanted: &str) -> bool {
    match list.and_then(Value::as_array) {
        None => true,
        Some(items) if items.is_empty() => true,
        Some(items) => items
            .iter()
            .filter_map(Value::as_str)
            .any(|item| item == wanted || item == "*"),
    }
}

fn resources_match(rule: &Value, group: &str, resource: &str) -> bool {
    let Some(entries) = rule.get("resources").and_then(Value::as_array) else {
        return true;
    };
    entries.iter().any(|entry| {
        let entry_group = str_at(entry, &["group"]).unwrap_or("");
        (entry_group == group || entry_group == "*")
            && match entry.get("resources").and_then(Value::as_array) {
                None => true,
                Some(names) if names.is_empty() => true,
                Some(names) => names.iter().filter_map(Value::as_str).any(|n| {
                    n == resource
                        || n == "*"
                        || n == "*/*"
                        || n.strip_suffix("/*") == Some(resource)
                }),
            }
    })
}

/// The level `policy` (an `audit.k8s.io/v1` `Policy`) logs a request `verb` on `group`/`resource` at, by
/// any user in any namespace: the first rule that matches decides (rules restricted to some users, groups or
/// namespaces are skipped, as they do not cover every request); no matching rule logs nothing.
///
/// ```
/// use kubetrain_tenancy::check::{AuditLevel, audit_level};
/// let policy = serde_json::json!({"rules": [
///     {"level": "Metadata", "resources": [{"group": "", "resources": ["secrets"]}]},
///     {"level": "None"},
/// ]});
/// assert_eq!(audit_level(&policy, "get", "", "secrets"), AuditLevel::Metadata);
/// assert_eq!(audit_level(&policy, "create", "trainer.kubeflow.org", "trainjobs"), AuditLevel::None);
/// ```
pub fn audit_level(policy: &Value, verb: &str, group: &str, resource: &str) -> AuditLevel {
    let rules = policy.get("rules").and_then(Value::as_array);
    for rule in rules.into_iter().flatten() {
        let restricted = ["users", "userGroups", "namespaces", "nonResourceURLs"]
            .iter()
            .any(|key| {
                rule.get(*key)
                    .and_then(Value::as_array)
                    .is_some_and(|a| !a.is_empty())
            });
        if restricted {
            continue;
        }
        if list_matches(rule.get("verbs"), verb) && resources_match(rule, group, resource) {
            return str_at(rule, &["level"])
                .and_then(AuditLevel::parse)
                .unwrap_or(AuditLevel::None);
        }
    }
    AuditLevel::None
}

/// The requests the guide asks to audit: (what, verb, group, resource).
const AUDITED: [(&str, &str, &str, &str); 3] = [
    (
        "TrainJob creation",
        "create",
        "trainer.kubeflow.org",
        "trainjobs",
    ),
    ("Secret reads (get)", "get", "", "secrets"),
    ("Secret reads (list)", "list", "", "secrets"),
];

const POLICY_FIX: &str = "log TrainJob create and Secret get/list at Metadata or above in the audit policy (e2e/audit-policy.yaml is an example), and run the check with --audit-policy FILE";

/// `audit`.
pub(super) fn audit(view: &ClusterView) -> Item {
    let mut item = Item::new(
        "audit",
        "The API server audits TrainJob creation and Secret reads",
    );
    let log_path = view.api_server.flag("audit-log-path");
    let webhook = view.api_server.flag("audit-webhook-config-file");
    match &view.api_server {
        ApiServerArgs::Read { source, .. } => match (log_path, webhook) {
            (None, None) => item.finding(
                Verdict::Fail,
                format!("{source}: no --audit-log-path or --audit-webhook-config-file: the API server audits nothing"),
                Some("start kube-apiserver with --audit-policy-file FILE and --audit-log-path PATH (docs/tenancy.md)"),
            ),
            _ => item.pass(format!(
                "{source}: audit log at {}",
                log_path.or(webhook).unwrap_or_default()
            )),
        },
        ApiServerArgs::Unknown { reason } => {
            item.pass(format!("the API server's audit flags: unknown, because {reason}"));
        }
    }
    let Some(policy) = &view.audit_policy else {
        let where_ = view
            .api_server
            .flag("audit-policy-file")
            .map(|f| format!(" (the API server reads {f})"))
            .unwrap_or_default();
        item.finding(
            Verdict::Warn,
            format!("the audit policy: unknown, because it is a file on the control plane{where_}, not an API object"),
            Some("give the policy file to the check: kubetrain tenancy check --audit-policy FILE"),
        );
        return item;
    };
    for (what, verb, group, resource) in AUDITED {
        let level = audit_level(&policy.policy, verb, group, resource);
        if level >= AuditLevel::Metadata {
            item.pass(format!("{}: {what} logged at {level:?}", policy.source));
        } else {
            item.finding(
                Verdict::Fail,
                format!("{}: {what} is not logged", policy.source),
                Some(POLICY_FIX),
            );
        }
    }
    item
}
