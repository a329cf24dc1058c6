//! Workload conditions with Kueue's types, reasons and messages (kueue.md §1.6, §2.10).

use serde::Serialize;

/// A status condition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Condition {
    /// Condition type, e.g. `QuotaReserved`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True` or `False`.
    pub status: String,
    /// Machine-readable reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

/// Sets (replaces) the condition of `type_` in `list`.
pub fn set(list: &mut Vec<Condition>, type_: &str, status: bool, reason: &str, message: &str) {
    let status_text = if status { "True" } else { "False" };
    if list.iter().any(|c| {
        c.type_ == type_ && c.status == status_text && c.reason == reason && c.message == message
    }) {
        return;
    }
    let c = Condition {
        type_: type_.to_string(),
        status: if status { "True" } else { "False" }.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
    };
    match list.iter_mut().find(|c| c.type_ == type_) {
        Some(old) => *old = c,
        None => list.push(c),
    }
}

/// Finds a condition by type.
pub fn find<'a>(list: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    list.iter().find(|c| c.type_ == type_)
}

/// Marks a pending workload: `QuotaReserved=False` with `reason` and `message`, and (with the
/// UnadmittedWorkloadsObservability gate) `Admitted=False/NoReservation`. With the gate off every
/// reason becomes `Pending` (`WaitingForPodsReady` becomes `Waiting`).
pub fn set_pending(list: &mut Vec<Condition>, observability: bool, reason: &str, message: &str) {
    if observability {
        set(list, "QuotaReserved", false, reason, message);
        set(
            list,
            "Admitted",
            false,
            "NoReservation",
            "The workload has no reservation",
        );
    } else {
        let legacy = if reason == "WaitingForPodsReady" {
            "Waiting"
        } else {
            "Pending"
        };
        set(list, "QuotaReserved", false, legacy, message);
    }
}

/// The condition the workload controller writes for a workload whose queue blocks it
/// (`getQueueBlocker`: missing or inactive LocalQueue or ClusterQueue): the granular reason with the
/// `UnadmittedWorkloadsObservability` gate, `Inadmissible` without it
/// (`resolveLegacyUnadmittedQuotaReservedCondition`).
pub fn set_blocked(list: &mut Vec<Condition>, observability: bool, reason: &str, message: &str) {
    if observability {
        set_pending(list, true, reason, message);
    } else {
        set(list, "QuotaReserved", false, "Inadmissible", message);
    }
}

/// Marks an admitted workload (`SetQuotaReservation` and `SyncAdmittedCondition`).
pub fn set_admitted(list: &mut Vec<Condition>, cq: &str) {
    set(
        list,
        "QuotaReserved",
        true,
        "QuotaReserved",
        &format!("Quota reserved in ClusterQueue {cq}"),
    );
    set(
        list,
        "Admitted",
        true,
        "Admitted",
        "The workload is admitted",
    );
    for t in ["Evicted", "Preempted"] {
        if let Some(c) = list.iter_mut().find(|c| c.type_ == t && c.status == "True") {
            c.status = "False".to_string();
            c.reason = "QuotaReserved".to_string();
            c.message = format!("Previously: {}", c.message);
        }
    }
}
