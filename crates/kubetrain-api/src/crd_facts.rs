//! Schema facts of core Kubernetes types that `k8s-openapi`'s JSON schemas do not carry: list types and merge
//! keys (which server-side apply relies on), map types and defaults. Keyed by the last two segments of a schema
//! path (`containers[].env`); applied only where the schema does not already say otherwise.

use serde_json::Value;

/// `(path suffix, facts as JSON)`, from the Kubernetes OpenAPI definitions of the core types.
const FACTS: &[(&str, &str)] = &[
    ("azureDisk.fsType", r#"{"default":"ext4"}"#),
    ("azureDisk.readOnly", r#"{"default":false}"#),
    ("capabilities.add", r#"{"x-kubernetes-list-type":"atomic"}"#),
    (
        "capabilities.drop",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    ("cephfs.monitors", r#"{"x-kubernetes-list-type":"atomic"}"#),
    ("cephfs.secretRef", r#"{"x-kubernetes-map-type":"atomic"}"#),
    ("cinder.secretRef", r#"{"x-kubernetes-map-type":"atomic"}"#),
    (
        "clusterTrustBundle.labelSelector",
        r#"{"x-kubernetes-map-type":"atomic"}"#,
    ),
    ("configMap.items", r#"{"x-kubernetes-list-type":"atomic"}"#),
    ("configMap.name", r#"{"default":""}"#),
    ("configMapKeyRef.name", r#"{"default":""}"#),
    ("configMapRef.name", r#"{"default":""}"#),
    (
        "containers[].args",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "containers[].command",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "containers[].env",
        r#"{"x-kubernetes-list-map-keys":["name"],"x-kubernetes-list-type":"map"}"#,
    ),
    (
        "containers[].envFrom",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "containers[].ports",
        r#"{"x-kubernetes-list-map-keys":["containerPort","protocol"],"x-kubernetes-list-type":"map"}"#,
    ),
    (
        "containers[].resizePolicy",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "containers[].restartPolicyRules",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "containers[].volumeDevices",
        r#"{"x-kubernetes-list-map-keys":["devicePath"],"x-kubernetes-list-type":"map"}"#,
    ),
    (
        "containers[].volumeMounts",
        r#"{"x-kubernetes-list-map-keys":["mountPath"],"x-kubernetes-list-type":"map"}"#,
    ),
    (
        "csi.nodePublishSecretRef",
        r#"{"x-kubernetes-map-type":"atomic"}"#,
    ),
    (
        "dataset.env",
        r#"{"x-kubernetes-list-map-keys":["name"],"x-kubernetes-list-type":"map"}"#,
    ),
    ("dataset.secretRef", r#"{"x-kubernetes-map-type":"atomic"}"#),
    (
        "dnsConfig.nameservers",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "dnsConfig.options",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "dnsConfig.searches",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "downwardAPI.items",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "envFrom[].configMapRef",
        r#"{"x-kubernetes-map-type":"atomic"}"#,
    ),
    (
        "envFrom[].secretRef",
        r#"{"x-kubernetes-map-type":"atomic"}"#,
    ),
    (
        "envInjection.targets",
        r#"{"x-kubernetes-list-map-keys":["jobName"],"x-kubernetes-list-type":"map"}"#,
    ),
    (
        "ephemeralContainers[].args",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "ephemeralContainers[].command",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "ephemeralContainers[].env",
        r#"{"x-kubernetes-list-map-keys":["name"],"x-kubernetes-list-type":"map"}"#,
    ),
    (
        "ephemeralContainers[].envFrom",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "ephemeralContainers[].ports",
        r#"{"x-kubernetes-list-map-keys":["containerPort","protocol"],"x-kubernetes-list-type":"map"}"#,
    ),
    (
        "ephemeralContainers[].resizePolicy",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "ephemeralContainers[].restartPolicyRules",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "ephemeralContainers[].volumeDevices",
        r#"{"x-kubernetes-list-map-keys":["devicePath"],"x-kubernetes-list-type":"map"}"#,
    ),
    (
        "ephemeralContainers[].volumeMounts",
        r#"{"x-kubernetes-list-map-keys":["mountPath"],"x-kubernetes-list-type":"map"}"#,
    ),
    ("exec.command", r#"{"x-kubernetes-list-type":"atomic"}"#),
    ("exitCodes.values", r#"{"x-kubernetes-list-type":"set"}"#),
    ("fc.targetWWNs", r#"{"x-kubernetes-list-type":"atomic"}"#),
    ("fc.wwids", r#"{"x-kubernetes-list-type":"atomic"}"#),
    ("fileKeyRef.optional", r#"{"default":false}"#),
    (
        "flexVolume.secretRef",
        r#"{"x-kubernetes-map-type":"atomic"}"#,
    ),
    ("grpc.service", r#"{"default":""}"#),
    (
        "hostAliases[].hostnames",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "httpGet.httpHeaders",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    ("imagePullSecrets[].name", r#"{"default":""}"#),
    (
        "initContainers[].args",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "initContainers[].command",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "initContainers[].env",
        r#"{"x-kubernetes-list-map-keys":["name"],"x-kubernetes-list-type":"map"}"#,
    ),
    (
        "initContainers[].envFrom",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "initContainers[].ports",
        r#"{"x-kubernetes-list-map-keys":["containerPort","protocol"],"x-kubernetes-list-type":"map"}"#,
    ),
    (
        "initContainers[].resizePolicy",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "initContainers[].restartPolicyRules",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "initContainers[].volumeDevices",
        r#"{"x-kubernetes-list-map-keys":["devicePath"],"x-kubernetes-list-type":"map"}"#,
    ),
    (
        "initContainers[].volumeMounts",
        r#"{"x-kubernetes-list-map-keys":["mountPath"],"x-kubernetes-list-type":"map"}"#,
    ),
    ("iscsi.iscsiInterface", r#"{"default":"default"}"#),
    ("iscsi.portals", r#"{"x-kubernetes-list-type":"atomic"}"#),
    ("iscsi.secretRef", r#"{"x-kubernetes-map-type":"atomic"}"#),
    ("items[].fieldRef", r#"{"x-kubernetes-map-type":"atomic"}"#),
    (
        "items[].resourceFieldRef",
        r#"{"x-kubernetes-map-type":"atomic"}"#,
    ),
    (
        "labelSelector.matchExpressions",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "matchExpressions[].values",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "matchFields[].values",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "model.env",
        r#"{"x-kubernetes-list-map-keys":["name"],"x-kubernetes-list-type":"map"}"#,
    ),
    ("model.secretRef", r#"{"x-kubernetes-map-type":"atomic"}"#),
    (
        "namespaceSelector.matchExpressions",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        r#"{"x-kubernetes-map-type":"atomic"}"#,
    ),
    ("nodePublishSecretRef.name", r#"{"default":""}"#),
    (
        "nodeSelectorTerms[].matchExpressions",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "nodeSelectorTerms[].matchFields",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    ("onExitCodes.values", r#"{"x-kubernetes-list-type":"set"}"#),
    (
        "podAffinity.preferredDuringSchedulingIgnoredDuringExecution",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "podAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "podAffinityTerm.labelSelector",
        r#"{"x-kubernetes-map-type":"atomic"}"#,
    ),
    (
        "podAffinityTerm.matchLabelKeys",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "podAffinityTerm.mismatchLabelKeys",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "podAffinityTerm.namespaceSelector",
        r#"{"x-kubernetes-map-type":"atomic"}"#,
    ),
    (
        "podAffinityTerm.namespaces",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "podFailurePolicy.rules",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    ("ports[].protocol", r#"{"default":"TCP"}"#),
    (
        "preference.matchExpressions",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "preference.matchFields",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "preferredDuringSchedulingIgnoredDuringExecution[].preference",
        r#"{"x-kubernetes-map-type":"atomic"}"#,
    ),
    (
        "projected.sources",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    ("rbd.keyring", r#"{"default":"/etc/ceph/keyring"}"#),
    ("rbd.monitors", r#"{"x-kubernetes-list-type":"atomic"}"#),
    ("rbd.pool", r#"{"default":"rbd"}"#),
    ("rbd.secretRef", r#"{"x-kubernetes-map-type":"atomic"}"#),
    ("rbd.user", r#"{"default":"admin"}"#),
    (
        "requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[]",
        r#"{"x-kubernetes-map-type":"atomic"}"#,
    ),
    (
        "requiredDuringSchedulingIgnoredDuringExecution[].labelSelector",
        r#"{"x-kubernetes-map-type":"atomic"}"#,
    ),
    (
        "requiredDuringSchedulingIgnoredDuringExecution[].matchLabelKeys",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "requiredDuringSchedulingIgnoredDuringExecution[].mismatchLabelKeys",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "requiredDuringSchedulingIgnoredDuringExecution[].namespaceSelector",
        r#"{"x-kubernetes-map-type":"atomic"}"#,
    ),
    (
        "requiredDuringSchedulingIgnoredDuringExecution[].namespaces",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "resources.claims",
        r#"{"x-kubernetes-list-map-keys":["name"],"x-kubernetes-list-type":"map"}"#,
    ),
    (
        "resourcesPerNode.claims",
        r#"{"x-kubernetes-list-map-keys":["name"],"x-kubernetes-list-type":"map"}"#,
    ),
    ("retentionPolicy.whenDeleted", r#"{"default":"Delete"}"#),
    (
        "rules[].onPodConditions",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    ("scaleIO.fsType", r#"{"default":"xfs"}"#),
    ("scaleIO.secretRef", r#"{"x-kubernetes-map-type":"atomic"}"#),
    ("scaleIO.storageMode", r#"{"default":"ThinProvisioned"}"#),
    ("secret.items", r#"{"x-kubernetes-list-type":"atomic"}"#),
    ("secret.name", r#"{"default":""}"#),
    ("secretKeyRef.name", r#"{"default":""}"#),
    ("secretRef.name", r#"{"default":""}"#),
    (
        "securityContext.supplementalGroups",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "securityContext.sysctls",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "selector.matchExpressions",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "sources[].configMap",
        r#"{"x-kubernetes-map-type":"atomic"}"#,
    ),
    ("sources[].secret", r#"{"x-kubernetes-map-type":"atomic"}"#),
    ("spec.accessModes", r#"{"x-kubernetes-list-type":"atomic"}"#),
    (
        "spec.containers",
        r#"{"x-kubernetes-list-map-keys":["name"],"x-kubernetes-list-type":"map"}"#,
    ),
    ("spec.dataSource", r#"{"x-kubernetes-map-type":"atomic"}"#),
    (
        "spec.ephemeralContainers",
        r#"{"x-kubernetes-list-map-keys":["name"],"x-kubernetes-list-type":"map"}"#,
    ),
    (
        "spec.hostAliases",
        r#"{"x-kubernetes-list-map-keys":["ip"],"x-kubernetes-list-type":"map"}"#,
    ),
    (
        "spec.imagePullSecrets",
        r#"{"x-kubernetes-list-map-keys":["name"],"x-kubernetes-list-type":"map"}"#,
    ),
    (
        "spec.imagePullSecrets[]",
        r#"{"x-kubernetes-map-type":"atomic"}"#,
    ),
    (
        "spec.initContainers",
        r#"{"x-kubernetes-list-map-keys":["name"],"x-kubernetes-list-type":"map"}"#,
    ),
    ("spec.nodeSelector", r#"{"x-kubernetes-map-type":"atomic"}"#),
    (
        "spec.readinessGates",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "spec.resourceClaims",
        r#"{"x-kubernetes-list-map-keys":["name"],"x-kubernetes-list-type":"map"}"#,
    ),
    (
        "spec.schedulingGates",
        r#"{"x-kubernetes-list-map-keys":["name"],"x-kubernetes-list-type":"map"}"#,
    ),
    ("spec.selector", r#"{"x-kubernetes-map-type":"atomic"}"#),
    ("spec.tolerations", r#"{"x-kubernetes-list-type":"atomic"}"#),
    (
        "spec.topologySpreadConstraints",
        r#"{"x-kubernetes-list-map-keys":["topologyKey","whenUnsatisfiable"],"x-kubernetes-list-type":"map"}"#,
    ),
    (
        "spec.volumeClaimPolicies",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "spec.volumes",
        r#"{"x-kubernetes-list-map-keys":["name"],"x-kubernetes-list-type":"map"}"#,
    ),
    (
        "status.accessModes",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "status.allocatedResourceStatuses",
        r#"{"x-kubernetes-map-type":"granular"}"#,
    ),
    (
        "status.conditions",
        r#"{"x-kubernetes-list-map-keys":["type"],"x-kubernetes-list-type":"map"}"#,
    ),
    (
        "storageos.secretRef",
        r#"{"x-kubernetes-map-type":"atomic"}"#,
    ),
    (
        "successPolicy.rules",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "successPolicy.targetReplicatedJobs",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "targets[].containerNames",
        r#"{"x-kubernetes-list-type":"set"}"#,
    ),
    (
        "topologySpreadConstraints[].labelSelector",
        r#"{"x-kubernetes-map-type":"atomic"}"#,
    ),
    (
        "topologySpreadConstraints[].matchLabelKeys",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "trainer.env",
        r#"{"x-kubernetes-list-map-keys":["name"],"x-kubernetes-list-type":"map"}"#,
    ),
    (
        "valueFrom.configMapKeyRef",
        r#"{"x-kubernetes-map-type":"atomic"}"#,
    ),
    (
        "valueFrom.fieldRef",
        r#"{"x-kubernetes-map-type":"atomic"}"#,
    ),
    (
        "valueFrom.fileKeyRef",
        r#"{"x-kubernetes-map-type":"atomic"}"#,
    ),
    (
        "valueFrom.resourceFieldRef",
        r#"{"x-kubernetes-map-type":"atomic"}"#,
    ),
    (
        "valueFrom.secretKeyRef",
        r#"{"x-kubernetes-map-type":"atomic"}"#,
    ),
    (
        "volumeClaimPolicies[].templates",
        r#"{"x-kubernetes-list-type":"atomic"}"#,
    ),
    (
        "volumes[].configMap",
        r#"{"x-kubernetes-map-type":"atomic"}"#,
    ),
];

/// Adds the facts of [`FACTS`] to every matching node of `schema`.
pub(crate) fn apply(schema: &mut Value) {
    let table: Vec<(&str, serde_json::Map<String, Value>)> = FACTS
        .iter()
        .filter_map(|(suffix, facts)| match serde_json::from_str(facts) {
            Ok(Value::Object(map)) => Some((*suffix, map)),
            _ => None,
        })
        .collect();
    walk(schema, "", "", &table);
    embedded_object_meta(schema);
}

/// The properties upstream's CRDs declare for the metadata of an embedded object (a pod, job or claim
/// template): controller-gen's `generateEmbeddedObjectMeta` keeps these five `ObjectMeta` fields. The API
/// server prunes every other field there, and every field of a `metadata` declared as a bare object.
const EMBEDDED_OBJECT_META: &str = r#"{
    "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    "finalizers": {"type": "array", "items": {"type": "string"}},
    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    "name": {"type": "string"},
    "namespace": {"type": "string"}
}"#;

/// Gives every `metadata` property below the root (`schema` is a spec or status schema, so each is an
/// embedded object's `ObjectMeta`) upstream's [`EMBEDDED_OBJECT_META`] properties, keeping its description
/// and nullability.
fn embedded_object_meta(schema: &mut Value) {
    let Ok(meta) = serde_json::from_str::<Value>(EMBEDDED_OBJECT_META) else {
        return;
    };
    fn walk(node: &mut Value, meta: &Value) {
        let Value::Object(map) = node else {
            return;
        };
        if let Some(Value::Object(properties)) = map.get_mut("properties") {
            for (key, child) in properties.iter_mut() {
                if key == "metadata"
                    && let Value::Object(child) = child
                    && child.get("type").and_then(Value::as_str) == Some("object")
                {
                    child.remove("additionalProperties");
                    child.insert("properties".into(), meta.clone());
                } else {
                    walk(child, meta);
                }
            }
        }
        if let Some(items) = map.get_mut("items") {
            walk(items, meta);
        }
        if let Some(additional @ Value::Object(_)) = map.get_mut("additionalProperties") {
            walk(additional, meta);
        }
    }
    walk(schema, &meta);
}

fn walk(
    node: &mut Value,
    parent: &str,
    segment: &str,
    table: &[(&str, serde_json::Map<String, Value>)],
) {
    let suffix = format!("{parent}.{segment}");
    if let Value::Object(map) = node {
        if let Some((_, facts)) = table.iter().find(|(s, _)| *s == suffix) {
            for (key, value) in facts {
                let taken = map.contains_key(key)
                    || (key == "x-kubernetes-list-map-keys"
                        && map
                            .get("x-kubernetes-list-type")
                            .is_some_and(|t| t != "map"));
                if !taken {
                    map.insert(key.clone(), value.clone());
                }
            }
        }
        if let Some(Value::Object(properties)) = map.get_mut("properties") {
            for (key, child) in properties.iter_mut() {
                walk(child, segment, key, table);
            }
        }
        if let Some(items) = map.get_mut("items") {
            walk(items, parent, &format!("{segment}[]"), table);
        }
        if let Some(additional @ Value::Object(_)) = map.get_mut("additionalProperties") {
            walk(additional, parent, &format!("{segment}{{}}"), table);
        }
    }
}
