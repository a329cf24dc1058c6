//! Pure reads of the objects the cluster mode watches: a TrainJob's end, a Job's condition, the JobSet's
//! replicated jobs and the Kueue Workload's admission.

use k8s_openapi::api::batch::v1::Job;
use serde_json::Value;

/// The label of a JobSet's replicated job template naming the TrainJob step it runs.
pub(super) const ANCESTOR: &str = "trainer.kubeflow.org/trainjob-ancestor-step";

/// `Complete`/`Failed` of a TrainJob: `Some((complete, "reason: message"))` once either is True.
pub(crate) fn finished(job: &Value) -> Option<(bool, String)> {
    let conditions = job.pointer("/status/conditions")?.as_array()?;
    for kind in ["Failed", "Complete"] {
        if let Some(c) = conditions.iter().find(|c| {
            c.get("type").and_then(Value::as_str) == Some(kind)
                && c.get("status").and_then(Value::as_str) == Some("True")
        }) {
            let text = |k| c.get(k).and_then(Value::as_str).unwrap_or("");
            return Some((
                kind == "Complete",
                format!("{}: {}", text("reason"), text("message")),
            ));
        }
    }
    None
}

/// The True condition `kind` of a Job, as `reason: message`.
pub(super) fn job_condition(job: &Job, kind: &str) -> Option<String> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind && c.status == "True")
        .map(|c| {
            format!(
                "{}: {}",
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default()
            )
        })
}

/// The replicated job whose pods are the trainer: labelled `trainer.kubeflow.org/trainjob-ancestor-step:
/// trainer` in the JobSet, else `node`.
pub(crate) fn trainer_replicated_job(jobset: &Value) -> String {
    jobset
        .pointer("/spec/replicatedJobs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|r| {
            r.pointer("/template/metadata/labels")
                .and_then(|l| l.get(ANCESTOR))
                .and_then(Value::as_str)
                == Some("trainer")
        })
        .and_then(|r| r.get("name")?.as_str())
        .unwrap_or("node")
        .to_string()
}

/// The names of a JobSet's replicated jobs.
pub(super) fn replicated_job_names(jobset: &Value) -> Vec<String> {
    jobset
        .pointer("/spec/replicatedJobs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| Some(r.get("name")?.as_str()?.to_string()))
        .collect()
}

/// What Kueue said about a TrainJob's Workload.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub(crate) struct WorkloadView {
    /// The Workload's name.
    pub(crate) name: String,
    /// `status.admission.clusterQueue`.
    pub(crate) cluster_queue: Option<String>,
    /// The flavors of its pod sets' resources.
    pub(crate) flavors: Vec<String>,
    /// The `Admitted` condition: status, reason, message.
    pub(crate) admitted: Option<(String, String, String)>,
    /// The `QuotaReserved` condition: status, reason, message.
    pub(crate) quota_reserved: Option<(String, String, String)>,
}

/// The condition `kind` of a Workload: status, reason, message.
fn workload_condition(workload: &Value, kind: &str) -> Option<(String, String, String)> {
    workload
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
        .map(|c| {
            let t = |k| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            (t("status"), t("reason"), t("message"))
        })
}

/// The Workload Kueue made for TrainJob `job` (owner reference), from a `kueue.x-k8s.io` Workload.
pub(crate) fn workload_view(workload: &Value, job: &str) -> Option<WorkloadView> {
    let owned = workload
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|o| {
            o.get("kind").and_then(Value::as_str) == Some("TrainJob")
                && o.get("name").and_then(Value::as_str) == Some(job)
        });
    if !owned {
        return None;
    }
    let mut flavors: Vec<String> = workload
        .pointer("/status/admission/podSetAssignments")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|a| a.get("flavors")?.as_object())
        .flat_map(|f| f.values().filter_map(|v| v.as_str().map(str::to_string)))
        .collect();
    flavors.sort();
    flavors.dedup();
    Some(WorkloadView {
        name: workload
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .into(),
        cluster_queue: workload
            .pointer("/status/admission/clusterQueue")
            .and_then(Value::as_str)
            .map(str::to_string),
        flavors,
        admitted: workload_condition(workload, "Admitted"),
        quota_reserved: workload_condition(workload, "QuotaReserved"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn conditions_workloads_and_the_trainer_replicated_job() {
        let job = json!({"status": {"conditions": [
            {"type": "Suspended", "status": "False"},
            {"type": "Complete", "status": "True", "reason": "JobSetCompleted", "message": "done"}]}});
        assert_eq!(finished(&job), Some((true, "JobSetCompleted: done".into())));
        assert_eq!(finished(&json!({})), None);
        let wl = json!({
            "metadata": {"name": "trainjob-t-1", "ownerReferences": [{"kind": "TrainJob", "name": "t"}]},
            "status": {
                "admission": {"clusterQueue": "cq", "podSetAssignments": [{"flavors": {"cpu": "gpu", "nvidia.com/gpu": "gpu"}}]},
                "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "Quota reserved in ClusterQueue cq"},
                               {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "The workload is admitted"}]}});
        let v = workload_view(&wl, "t").unwrap();
        assert_eq!(v.cluster_queue.as_deref(), Some("cq"));
        assert_eq!(v.flavors, ["gpu"]);
        assert_eq!(v.admitted.unwrap().1, "Admitted");
        assert!(workload_view(&wl, "other").is_none());
        let js = json!({"spec": {"replicatedJobs": [
            {"name": "dataset-initializer", "template": {"metadata": {"labels": {ANCESTOR: "dataset-initializer"}}}},
            {"name": "trainer-x", "template": {"metadata": {"labels": {ANCESTOR: "trainer"}}}}]}});
        assert_eq!(trainer_replicated_job(&js), "trainer-x");
        assert_eq!(trainer_replicated_job(&json!({})), "node");
        assert_eq!(
            replicated_job_names(&js),
            ["dataset-initializer", "trainer-x"]
        );
    }
}
