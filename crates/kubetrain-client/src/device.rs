//! The device a pod runs on, as the Python SDK reports it (a step's `device` and `device_count`): shared by
//! the runtime and TrainJob views, the Kubernetes status and the local plan.

use k8s_openapi::api::core::v1::ResourceRequirements;

/// Device kind and count from a container's resource limits, as the Python SDK derives them.
pub(crate) fn device_of(resources: Option<&ResourceRequirements>) -> (String, String) {
    let limits = resources.and_then(|r| r.limits.as_ref());
    let Some(limits) = limits else {
        return ("Unknown".into(), "Unknown".into());
    };
    for (key, device) in [
        ("nvidia.com/gpu", "gpu"),
        ("amd.com/gpu", "gpu"),
        ("cpu", "cpu"),
    ] {
        if let Some(q) = limits.get(key) {
            return (device.into(), q.0.clone());
        }
    }
    ("Unknown".into(), "Unknown".into())
}
