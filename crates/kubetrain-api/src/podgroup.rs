//! PodGroups of the two gang schedulers a runtime can ask for.

/// scheduler-plugins coscheduling: `scheduling.x-k8s.io/v1alpha1` PodGroup.
pub mod coscheduling {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::CustomResource;
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    /// Pod label that puts a pod into a coscheduling PodGroup.
    pub const POD_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";

    /// A gang of pods scheduled all or nothing.
    #[derive(
        CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq,
    )]
    #[kube(
        group = "scheduling.x-k8s.io",
        version = "v1alpha1",
        kind = "PodGroup",
        namespaced,
        status = "PodGroupStatus",
        derive = "PartialEq",
        derive = "Default"
    )]
    #[serde(rename_all = "camelCase")]
    pub struct PodGroupSpec {
        /// Pods that must be schedulable together.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub min_member: Option<i32>,
        /// Resources the whole gang needs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub min_resources: Option<BTreeMap<String, Quantity>>,
        /// Seconds to wait for the gang before giving up.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub schedule_timeout_seconds: Option<i32>,
    }

    /// Observed state of a coscheduling PodGroup.
    #[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
    #[serde(rename_all = "camelCase")]
    pub struct PodGroupStatus {
        /// Phase: Pending, PreScheduling, Scheduling, Scheduled, Running, Succeeded, Failed, Finished.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub phase: Option<String>,
        /// The object that owns the group.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub occupied_by: Option<String>,
        /// Pods scheduled.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub scheduled: Option<i32>,
        /// Pods running.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub running: Option<i32>,
        /// Pods succeeded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub succeeded: Option<i32>,
        /// Pods failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub failed: Option<i32>,
        /// When scheduling of the group started.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub schedule_start_time: Option<Time>,
    }
}

/// Volcano: `scheduling.volcano.sh/v1beta1` PodGroup.
pub mod volcano {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use kube::CustomResource;
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    /// Pod annotation that puts a pod into a Volcano PodGroup.
    pub const GROUP_NAME_ANNOTATION: &str = "scheduling.k8s.io/group-name";

    /// A Volcano gang of pods.
    #[derive(
        CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq,
    )]
    #[kube(
        group = "scheduling.volcano.sh",
        version = "v1beta1",
        kind = "PodGroup",
        namespaced,
        status = "PodGroupStatus",
        derive = "PartialEq",
        derive = "Default"
    )]
    #[serde(rename_all = "camelCase")]
    pub struct PodGroupSpec {
        /// Pods that must be schedulable together.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub min_member: Option<i32>,
        /// Minimum members per task (replicated job).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub min_task_member: Option<BTreeMap<String, i32>>,
        /// Volcano queue.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub queue: Option<String>,
        /// Priority class of the group.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub priority_class_name: Option<String>,
        /// Resources the whole gang needs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub min_resources: Option<BTreeMap<String, Quantity>>,
        /// Network topology constraint.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub network_topology: Option<NetworkTopologySpec>,
    }

    /// Network topology constraint of a Volcano PodGroup.
    #[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
    #[serde(rename_all = "camelCase")]
    pub struct NetworkTopologySpec {
        /// `hard` or `soft`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub mode: Option<String>,
        /// Highest tier the gang may span.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub highest_tier_allowed: Option<i32>,
    }

    /// Observed state of a Volcano PodGroup.
    #[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
    #[serde(rename_all = "camelCase")]
    pub struct PodGroupStatus {
        /// Phase: Pending, Running, Unknown, Inqueue, Completed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub phase: Option<String>,
        /// Pods running.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub running: Option<i32>,
        /// Pods succeeded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub succeeded: Option<i32>,
        /// Pods failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub failed: Option<i32>,
    }
}
