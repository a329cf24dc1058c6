//! Why a workload is in no queue and how to put it in one: no queue label, a LocalQueue that lives
//! in another namespace, or one that exists nowhere. Kueue's own condition message stays as Kueue
//! writes it (`LocalQueue  doesn't exist` for a missing label); this is the line that says what to do.

use crate::model::{Model, QueueTarget, WlId};

/// The label a job names its LocalQueue with.
const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";

/// The hint for a workload whose LocalQueue is missing; `None` when it has one.
pub(crate) fn queue_hint(m: &Model, wl: WlId) -> Option<String> {
    let w = &m.workloads[wl];
    if !matches!(w.target, QueueTarget::Blocked(..)) {
        return None;
    }
    let ns = &w.namespace;
    let Some(q) = w.queue_name.as_deref().filter(|q| !q.is_empty()) else {
        return Some(format!(
            "it has no {QUEUE_LABEL} label (a Workload: no spec.queueName); add `metadata: {{labels: {{{QUEUE_LABEL}: LOCALQUEUE}}}}` to the job ({})",
            local_queues_in(m, ns)
        ));
    };
    if m.local_queues.contains_key(&(ns.clone(), q.to_string())) {
        return None;
    }
    let elsewhere: Vec<&str> = m
        .local_queues
        .keys()
        .filter(|(_, name)| name == q)
        .map(|(other, _)| other.as_str())
        .collect();
    if elsewhere.is_empty() {
        return Some(format!(
            "no LocalQueue {q} exists in any namespace: name an existing one in the job's {QUEUE_LABEL} label or create LocalQueue {q} in namespace {ns} ({})",
            local_queues_in(m, ns)
        ));
    }
    Some(format!(
        "LocalQueue {q} is in namespace {}, not in {ns}: a LocalQueue serves only its own namespace; submit the job in {} or create LocalQueue {q} in namespace {ns} (spec.clusterQueue: {})",
        elsewhere.join(", "),
        elsewhere[0],
        m.local_queues[&(elsewhere[0].to_string(), q.to_string())]
    ))
}

/// "LocalQueues in namespace ns: a, b", or that it has none.
fn local_queues_in(m: &Model, ns: &str) -> String {
    let names: Vec<&str> = m
        .local_queues
        .keys()
        .filter(|(n, _)| n == ns)
        .map(|(_, name)| name.as_str())
        .collect();
    if names.is_empty() {
        format!("namespace {ns} has no LocalQueue yet")
    } else {
        format!("LocalQueues in namespace {ns}: {}", names.join(", "))
    }
}
