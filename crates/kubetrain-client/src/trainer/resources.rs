//! The SDK's resource shorthand: `{"gpu": 4, "cpu": 8, "memory": "32Gi"}` as requests = limits.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::error::{ClientError, Result};

const STANDARD: [&str; 5] = ["cpu", "memory", "gpu", "storage", "ephemeral-storage"];

/// Resources of one node from the Python SDK's shorthand (`resources_per_node`): requests and limits
/// both set; `cpu`, `memory`, `gpu`, `storage`, `ephemeral-storage` and `mig-*` are case-insensitive,
/// `gpu` means `nvidia.com/gpu`, `storage` `ephemeral-storage` and `mig-<profile>`
/// `nvidia.com/mig-<profile>`; other names (extended resources) are kept as written.
///
/// ```
/// use kubetrain_client::trainer::resources;
/// let r = resources([("gpu", "4"), ("CPU", "8"), ("memory", "32Gi")]).unwrap();
/// let limits = r.limits.unwrap();
/// assert_eq!(limits["nvidia.com/gpu"].0, "4");
/// assert_eq!(limits["cpu"].0, "8");
/// assert_eq!(r.requests.unwrap(), limits);
///
/// let err = resources([("gpu", "1"), ("mig-1g.5gb", "1")]).unwrap_err();
/// assert_eq!(err.to_string(), "trainer.resources_per_node: GPU (nvidia.com/gpu) and MIG (nvidia.com/mig-1g.5gb) cannot be requested together");
/// ```
pub fn resources<K, V, I>(shorthand: I) -> Result<ResourceRequirements>
where
    K: AsRef<str>,
    V: ToString,
    I: IntoIterator<Item = (K, V)>,
{
    let mut map = BTreeMap::new();
    for (k, v) in shorthand {
        let k = k.as_ref();
        let lower = k.to_ascii_lowercase();
        let key = if STANDARD.contains(&lower.as_str()) || lower.starts_with("mig-") {
            lower
        } else {
            k.to_string()
        };
        let key = match key.as_str() {
            "gpu" => "nvidia.com/gpu".to_string(),
            "storage" => "ephemeral-storage".to_string(),
            m if m.starts_with("mig-") => format!("nvidia.com/{m}"),
            _ => key,
        };
        let value = v.to_string();
        if value.trim().is_empty() {
            return Err(ClientError::InvalidArgument(format!(
                "trainer.resources_per_node.{k}: empty quantity (write e.g. \"4\" or \"32Gi\")"
            )));
        }
        map.insert(key, Quantity(value));
    }
    let mig: Vec<&String> = map
        .keys()
        .filter(|k| k.starts_with("nvidia.com/mig-"))
        .collect();
    if mig.len() > 1 {
        return Err(ClientError::InvalidArgument(format!(
            "trainer.resources_per_node: multiple MIG resource types are not supported: {}",
            mig.iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    if let Some(m) = mig.first()
        && map.contains_key("nvidia.com/gpu")
    {
        return Err(ClientError::InvalidArgument(format!(
            "trainer.resources_per_node: GPU (nvidia.com/gpu) and MIG ({m}) cannot be requested together"
        )));
    }
    Ok(ResourceRequirements {
        requests: Some(map.clone()),
        limits: Some(map),
        ..ResourceRequirements::default()
    })
}
