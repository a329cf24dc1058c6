//! The patch metadata of the types a runtime patch can reach: which lists merge and by which key.
//!
//! Kubernetes reads this metadata from Go struct tags (`patchStrategy`, `patchMergeKey`); we keep the
//! same facts as a small table. Anything not listed behaves like an untagged Go field: objects merge key
//! by key, lists are replaced.

/// A type in the JobSet tree whose fields carry strategic-merge metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Schema {
    /// `jobset.x-k8s.io/v1alpha2` `JobSetSpec`.
    JobSetSpec,
    /// `ReplicatedJob` inside a JobSetSpec.
    ReplicatedJob,
    /// `batch/v1` `JobTemplateSpec`.
    JobTemplateSpec,
    /// `batch/v1` `JobSpec`.
    JobSpec,
    /// `core/v1` `PodTemplateSpec`.
    PodTemplateSpec,
    /// `meta/v1` `ObjectMeta`.
    ObjectMeta,
    /// `core/v1` `PodSpec`.
    PodSpec,
    /// `core/v1` `Container` (also used for init and ephemeral containers).
    Container,
    /// `core/v1` `ResourceRequirements` (claims merge by name).
    ResourceRequirements,
    /// Any other type: objects merge recursively, lists are replaced.
    Opaque,
}

/// How a list field is merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ListStrategy {
    /// The patch list replaces the original (no `patchStrategy` tag, or `listType=atomic`).
    Replace,
    /// Objects are matched by the value of this key and merged; unmatched patch items are added.
    MergeByKey(&'static str),
    /// A list of scalars merged as a set (e.g. `metadata.finalizers`).
    MergeScalars,
}

/// Patch metadata of one field: the schema of its value (or list items) and its list strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Field {
    /// Schema of the field's value, or of each item when the field is a list.
    pub schema: Schema,
    /// Strategy used when both sides hold a list.
    pub list: ListStrategy,
}

impl Field {
    const fn object(schema: Schema) -> Self {
        Field {
            schema,
            list: ListStrategy::Replace,
        }
    }

    const fn merged(schema: Schema, key: &'static str) -> Self {
        Field {
            schema,
            list: ListStrategy::MergeByKey(key),
        }
    }

    const OPAQUE: Field = Field::object(Schema::Opaque);
}

impl Schema {
    /// Patch metadata of field `key` of this type.
    ///
    /// ```
    /// use kubetrain_merge::smp::{ListStrategy, Schema};
    /// assert_eq!(Schema::Container.field("volumeMounts").list, ListStrategy::MergeByKey("mountPath"));
    /// assert_eq!(Schema::PodSpec.field("tolerations").list, ListStrategy::Replace);
    /// ```
    pub fn field(self, key: &str) -> Field {
        use Schema as S;
        match (self, key) {
            (S::JobSetSpec, "replicatedJobs") => Field::merged(S::ReplicatedJob, "name"),
            (S::ReplicatedJob, "template") => Field::object(S::JobTemplateSpec),
            (S::ReplicatedJob, "dependsOn") => Field::merged(S::Opaque, "name"),
            (S::JobTemplateSpec | S::PodTemplateSpec, "metadata") => Field::object(S::ObjectMeta),
            (S::JobTemplateSpec, "spec") => Field::object(S::JobSpec),
            (S::JobSpec, "template") => Field::object(S::PodTemplateSpec),
            (S::PodTemplateSpec, "spec") => Field::object(S::PodSpec),
            (S::ObjectMeta, "finalizers") => Field {
                schema: S::Opaque,
                list: ListStrategy::MergeScalars,
            },
            (S::ObjectMeta, "ownerReferences") => Field::merged(S::Opaque, "uid"),
            (S::PodSpec, "containers" | "initContainers" | "ephemeralContainers") => {
                Field::merged(S::Container, "name")
            }
            (S::PodSpec, "volumes" | "imagePullSecrets" | "resourceClaims" | "schedulingGates") => {
                Field::merged(S::Opaque, "name")
            }
            (S::PodSpec, "hostAliases") => Field::merged(S::Opaque, "ip"),
            (S::PodSpec, "topologySpreadConstraints") => Field::merged(S::Opaque, "topologyKey"),
            (S::Container, "env") => Field::merged(S::Opaque, "name"),
            (S::Container, "ports") => Field::merged(S::Opaque, "containerPort"),
            (S::Container, "volumeMounts") => Field::merged(S::Opaque, "mountPath"),
            (S::Container, "volumeDevices") => Field::merged(S::Opaque, "devicePath"),
            (S::Container, "resources") => Field::object(S::ResourceRequirements),
            (S::ResourceRequirements, "claims") => Field::merged(S::Opaque, "name"),
            _ => Field::OPAQUE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_keys_follow_the_kubernetes_tags() {
        let cases = [
            (
                Schema::JobSetSpec,
                "replicatedJobs",
                ListStrategy::MergeByKey("name"),
            ),
            (
                Schema::JobSetSpec,
                "volumeClaimPolicies",
                ListStrategy::Replace,
            ),
            (
                Schema::PodSpec,
                "containers",
                ListStrategy::MergeByKey("name"),
            ),
            (
                Schema::PodSpec,
                "initContainers",
                ListStrategy::MergeByKey("name"),
            ),
            (Schema::PodSpec, "volumes", ListStrategy::MergeByKey("name")),
            (
                Schema::PodSpec,
                "imagePullSecrets",
                ListStrategy::MergeByKey("name"),
            ),
            (
                Schema::PodSpec,
                "schedulingGates",
                ListStrategy::MergeByKey("name"),
            ),
            (Schema::PodSpec, "tolerations", ListStrategy::Replace),
            (Schema::Container, "env", ListStrategy::MergeByKey("name")),
            (
                Schema::Container,
                "ports",
                ListStrategy::MergeByKey("containerPort"),
            ),
            (
                Schema::Container,
                "volumeMounts",
                ListStrategy::MergeByKey("mountPath"),
            ),
            (Schema::Container, "envFrom", ListStrategy::Replace),
            (Schema::Container, "args", ListStrategy::Replace),
            (Schema::ObjectMeta, "finalizers", ListStrategy::MergeScalars),
        ];
        for (schema, key, want) in cases {
            assert_eq!(schema.field(key).list, want, "{schema:?}.{key}");
        }
    }

    #[test]
    fn nesting_reaches_containers() {
        let mut s = Schema::JobSetSpec;
        for key in [
            "replicatedJobs",
            "template",
            "spec",
            "template",
            "spec",
            "containers",
        ] {
            s = s.field(key).schema;
        }
        assert_eq!(s, Schema::Container);
    }
}
