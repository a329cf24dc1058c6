//! Idempotent upserts into pod-spec lists, as upstream's `pkg/apply` helpers do them.
//!
//! An item replaces the existing item with the same key in place; new items are appended in order. Upserting
//! no items leaves the list as it was: an absent list stays absent, as upstream's nil slice stays nil (and is
//! then omitted from the applied object instead of being applied as an empty list).

use k8s_openapi::api::core::v1::{ContainerPort, EnvVar, Volume, VolumeMount};

fn upsert_by<T: Clone>(list: &mut Option<Vec<T>>, items: &[T], same: impl Fn(&T, &T) -> bool) {
    if items.is_empty() {
        return;
    }
    let list = list.get_or_insert_with(Vec::new);
    for item in items {
        match list.iter_mut().find(|existing| same(existing, item)) {
            Some(existing) => *existing = item.clone(),
            None => list.push(item.clone()),
        }
    }
}

/// Upserts env vars by name.
pub fn env(list: &mut Option<Vec<EnvVar>>, items: &[EnvVar]) {
    upsert_by(list, items, |a, b| a.name == b.name);
}

/// Upserts volumes by name.
pub fn volumes(list: &mut Option<Vec<Volume>>, items: &[Volume]) {
    upsert_by(list, items, |a, b| a.name == b.name);
}

/// Upserts volume mounts by mount path (the Kubernetes merge key).
pub fn volume_mounts(list: &mut Option<Vec<VolumeMount>>, items: &[VolumeMount]) {
    upsert_by(list, items, |a, b| a.mount_path == b.mount_path);
}

/// Upserts ports as upstream does: an existing port matches when its `containerPort` OR its `name` is equal,
/// and two absent names are equal, so an unnamed port replaces the first unnamed port (trainer.md §9).
pub fn ports(list: &mut Option<Vec<ContainerPort>>, items: &[ContainerPort]) {
    upsert_by(list, items, |a, b| {
        a.container_port == b.container_port || a.name == b.name
    });
}

/// An env var with a literal value.
pub fn env_value(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.into()),
        value_from: None,
    }
}

/// An env var taken from a pod field (`fieldRef.fieldPath`).
pub fn env_field(name: &str, field_path: &str) -> EnvVar {
    use k8s_openapi::api::core::v1::{EnvVarSource, ObjectFieldSelector};
    EnvVar {
        name: name.to_owned(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: field_path.to_owned(),
                api_version: None,
            }),
            ..Default::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_upsert_replaces_in_place_and_appends() {
        let mut list = Some(vec![env_value("A", "1"), env_value("B", "2")]);
        env(&mut list, &[env_value("B", "3"), env_value("C", "4")]);
        let got: Vec<_> = list
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.value.unwrap()))
            .collect();
        assert_eq!(
            got,
            [
                ("A".into(), "1".into()),
                ("B".into(), "3".into()),
                ("C".into(), "4".into())
            ]
        );
    }

    #[test]
    fn upserting_nothing_keeps_an_absent_list_absent() {
        let mut list = None;
        env(&mut list, &[]);
        assert_eq!(list, None);
        let mut list = Some(vec![env_value("A", "1")]);
        env(&mut list, &[]);
        assert_eq!(list.map(|l| l.len()), Some(1));
    }

    #[test]
    fn unnamed_port_replaces_an_unnamed_port() {
        let port = |p: i32, name: Option<&str>| ContainerPort {
            container_port: p,
            name: name.map(str::to_owned),
            ..Default::default()
        };
        let mut list = Some(vec![port(8080, None)]);
        ports(&mut list, &[port(29500, None)]);
        assert_eq!(list.as_deref(), Some(&[port(29500, None)][..]));

        let mut list = Some(vec![port(8080, Some("http"))]);
        ports(&mut list, &[port(29500, None)]);
        assert_eq!(list.unwrap().len(), 2);
    }
}
