//! Quantities in the rendered JobSet in canonical form, as the API server stores them (`1000m` → `1`,
//! `0.5` → `500m`, `1024Mi` → `1Gi`), so that what `kubetrain render` prints is what `kubectl get -o yaml` shows.
//! A string that is not a quantity is left as written (the API server rejects it).
//!
//! ```
//! use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
//! use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
//! let mut pod = PodSpec {
//!     containers: vec![Container {
//!         name: "node".into(),
//!         resources: Some(ResourceRequirements {
//!             limits: Some([("cpu".to_owned(), Quantity("1000m".into()))].into()),
//!             ..Default::default()
//!         }),
//!         ..Default::default()
//!     }],
//!     ..Default::default()
//! };
//! kubetrain_jobset::canonical::pod_spec(&mut pod);
//! assert_eq!(pod.containers[0].resources.as_ref().unwrap().limits.as_ref().unwrap()["cpu"].0, "1");
//! ```

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kubetrain_api::jobset::JobSetSpec;
use kubetrain_api::quantity::Amount;

fn quantity(q: &mut Quantity) {
    // Most runtime quantities are canonical already ("8", "32Gi"): rewrite only when the text changes.
    if let Ok(amount) = Amount::parse(&q.0) {
        let text = amount.to_string();
        if text != q.0 {
            q.0 = text;
        }
    }
}

fn list(list: Option<&mut BTreeMap<String, Quantity>>) {
    list.into_iter()
        .flat_map(|l| l.values_mut())
        .for_each(quantity);
}

fn resources(r: Option<&mut ResourceRequirements>) {
    if let Some(r) = r {
        list(r.limits.as_mut());
        list(r.requests.as_mut());
    }
}

fn env(env: Option<&mut Vec<EnvVar>>) {
    let divisors = env.into_iter().flatten().filter_map(|e| {
        e.value_from
            .as_mut()?
            .resource_field_ref
            .as_mut()?
            .divisor
            .as_mut()
    });
    divisors.for_each(quantity);
}

fn container(c: &mut Container) {
    resources(c.resources.as_mut());
    env(c.env.as_mut());
}

/// Canonicalizes the quantities of a pod spec: container and init-container resources and env
/// `resourceFieldRef.divisor`, `overhead`, emptyDir `sizeLimit` and downward-API divisors of volumes.
pub fn pod_spec(pod: &mut PodSpec) {
    pod.containers.iter_mut().for_each(container);
    pod.init_containers.iter_mut().flatten().for_each(container);
    list(pod.overhead.as_mut());
    for v in pod.volumes.iter_mut().flatten() {
        if let Some(size) = v.empty_dir.as_mut().and_then(|e| e.size_limit.as_mut()) {
            quantity(size);
        }
        let items = v.downward_api.as_mut().and_then(|d| d.items.as_mut());
        for item in items.into_iter().flatten() {
            if let Some(d) = item
                .resource_field_ref
                .as_mut()
                .and_then(|r| r.divisor.as_mut())
            {
                quantity(d);
            }
        }
    }
}

/// Canonicalizes every pod template of a JobSet spec (see [`pod_spec`]).
pub fn jobset_spec(spec: &mut JobSetSpec) {
    for rjob in &mut spec.replicated_jobs {
        if let Some(pod) = rjob
            .template
            .spec
            .as_mut()
            .and_then(|s| s.template.spec.as_mut())
        {
            pod_spec(pod);
        }
    }
}
