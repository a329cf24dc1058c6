//! What a team needs on a GPU cluster, as objects: `kubetrain tenancy add-team` prints or applies
//! [`team_objects`].
//!
//! For a team `NAME`: the shared ClusterRoles [`TRAINJOB_EDITOR`] and [`RUNTIME_VIEWER`]; Namespace `NAME`
//! labelled [`TEAM_LABEL`] with Pod Security `enforce: baseline` (`warn`/`audit`:
//! `restricted`); a RoleBinding of the groups to [`TRAINJOB_EDITOR`] and a ClusterRoleBinding to
//! [`RUNTIME_VIEWER`]; ResourceQuota and LimitRange `kubetrain-team`; the Kueue ResourceFlavor, a
//! ClusterQueue `NAME` (in the cohort when one is given) and LocalQueue `NAME/default`; NetworkPolicies
//! `kubetrain-default-deny` and `kubetrain-training`.
//!
//! ```
//! use kubetrain_tenancy::team::{TeamSpec, team_objects};
//! let mut spec = TeamSpec::new("vision");
//! spec.gpus = 16;
//! spec.groups = vec!["oidc:vision".into()];
//! let objects = team_objects(&spec).unwrap();
//! let quota = objects.iter().find(|o| o.kind() == "ResourceQuota").unwrap();
//! assert_eq!(quota.value["spec"]["hard"]["requests.nvidia.com/gpu"], "16");
//!
//! let mut bad = TeamSpec::new("Vision_Team");
//! bad.memory = "lots".into();
//! let error = team_objects(&bad).unwrap_err().to_string();
//! assert!(error.starts_with("NAME: \"Vision_Team\" is not a DNS label"), "{error}");
//! assert!(error.contains("--memory: \"lots\" is not a quantity"), "{error}");
//! ```

use kubetrain_api::quantity::Amount;
use serde_json::{Value, json};

use crate::check::{POD_SECURITY_ENFORCE, STATUS_SERVER_PORT, TEAM_LABEL};

/// The ClusterRole team members get in their namespace: TrainJobs, their pods, logs and queue.
pub const TRAINJOB_EDITOR: &str = "kubetrain-trainjob-editor";

/// The ClusterRole that lets team members read the cluster's ClusterTrainingRuntimes.
pub const RUNTIME_VIEWER: &str = "kubetrain-runtime-viewer";

/// The field manager of `add-team --apply`.
pub const FIELD_MANAGER: &str = "kubetrain-tenancy";

/// The Kueue API version of the queue objects (what Kueue v0.19 serves).
pub const KUEUE_API_VERSION: &str = "kueue.x-k8s.io/v1beta2";

/// What `add-team` is asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TeamSpec {
    /// The team's name: its namespace and ClusterQueue (a DNS label).
    pub name: String,
    /// GPUs (`nvidia.com/gpu`) the team may request in total.
    pub gpus: u32,
    /// CPU the team may request in total (a quantity).
    pub cpu: String,
    /// Memory the team may request in total (a quantity).
    pub memory: String,
    /// Persistent volume storage the team may request in total (a quantity).
    pub storage: String,
    /// The identity provider's groups given access (default: the team's name).
    pub groups: Vec<String>,
    /// The Kueue cohort of the team's ClusterQueue (none: the team borrows from nobody).
    pub cohort: Option<String>,
    /// The Kueue ResourceFlavor its quota is in.
    pub flavor: String,
    /// The namespace of the kubetrain operator (its status server).
    pub operator_namespace: String,
    /// The CIDRs of the team's dataset endpoints, allowed out.
    pub dataset_cidrs: Vec<String>,
    /// The Pod Security level enforced: `baseline` or `restricted`.
    pub pod_security: String,
}

impl TeamSpec {
    /// A team with the defaults: 8 GPUs, 96 CPUs, 768Gi memory, 1Ti storage, group `name`, no cohort,
    /// flavor `default-flavor`, operator in `kubeflow-system`, no dataset endpoint, `baseline`.
    pub fn new(name: impl Into<String>) -> Self {
        TeamSpec {
            name: name.into(),
            gpus: 8,
            cpu: "96".into(),
            memory: "768Gi".into(),
            storage: "1Ti".into(),
            groups: Vec::new(),
            cohort: None,
            flavor: "default-flavor".into(),
            operator_namespace: "kubeflow-system".into(),
            dataset_cidrs: Vec::new(),
            pod_security: "baseline".into(),
        }
    }
}

/// Why a [`TeamSpec`] was refused: every bad field, one a line, each named by its flag.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.join("\n"))]
pub struct TeamError(pub Vec<String>);

/// One object of a team, with what a client needs to apply it.
#[derive(Clone, Debug, PartialEq)]
pub struct TeamObject {
    /// The resource's plural (`namespaces`, `clusterqueues`, ...).
    pub plural: &'static str,
    /// Whether it lives in a namespace.
    pub namespaced: bool,
    /// The object.
    pub value: Value,
}

impl TeamObject {
    fn new(plural: &'static str, namespaced: bool, value: Value) -> Self {
        TeamObject {
            plural,
            namespaced,
            value,
        }
    }

    /// `kind`.
    pub fn kind(&self) -> &str {
        self.value["kind"].as_str().unwrap_or_default()
    }

    /// `apiVersion`.
    pub fn api_version(&self) -> &str {
        self.value["apiVersion"].as_str().unwrap_or_default()
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.value["metadata"]["name"].as_str().unwrap_or_default()
    }

    /// `metadata.namespace`, when namespaced.
    pub fn namespace(&self) -> Option<&str> {
        self.value["metadata"]["namespace"].as_str()
    }
}

/// Whether `name` is a DNS label (RFC 1123: lower-case alphanumerics and `-`, at most 63, alphanumeric ends).
pub fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

fn validate(spec: &TeamSpec) -> Result<(), TeamError> {
    let mut errors = Vec::new();
    if !is_dns_label(&spec.name) {
        errors.push(format!(
            "NAME: {:?} is not a DNS label (lower-case letters, digits and '-', at most 63, starting and ending with a letter or digit), e.g. {:?}",
            spec.name,
            suggest_label(&spec.name)
        ));
    }
    for (flag, value) in [
        ("--cpu", &spec.cpu),
        ("--memory", &spec.memory),
        ("--storage", &spec.storage),
    ] {
        match Amount::parse(value) {
            Ok(amount)
                if amount
                    .compare(&Amount::parse("0").expect("0 parses"))
                    .is_lt() =>
            {
                errors.push(format!("{flag}: {value:?} is negative"));
            }
            Ok(_) => {}
            Err(_) => errors.push(format!(
                "{flag}: {value:?} is not a quantity (e.g. 64, 500m, 512Gi, 1Ti)"
            )),
        }
    }
    for (flag, value) in [
        ("--cohort", spec.cohort.as_deref()),
        ("--flavor", Some(spec.flavor.as_str())),
    ] {
        if let Some(value) = value
            && !is_dns_label(value)
        {
            errors.push(format!("{flag}: {value:?} is not a DNS label"));
        }
    }
    if !is_dns_label(&spec.operator_namespace) {
        errors.push(format!(
            "--operator-namespace: {:?} is not a DNS label",
            spec.operator_namespace
        ));
    }
    for group in &spec.groups {
        if group.trim().is_empty() {
            errors.push("--group: empty group name".to_owned());
        }
    }
    for cidr in &spec.dataset_cidrs {
        if !is_cidr(cidr) {
            errors.push(format!(
                "--dataset-cidr: {cidr:?} is not a CIDR (e.g. 10.20.0.0/16)"
            ));
        }
    }
    if !matches!(spec.pod_security.as_str(), "baseline" | "restricted") {
        errors.push(format!(
            "--pod-security: {:?} is not baseline or restricted",
            spec.pod_security
        ));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(TeamError(errors))
    }
}

fn suggest_label(name: &str) -> String {
    let mapped: String = name
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let trimmed = mapped.trim_matches('-');
    let cut: String = trimmed.chars().take(63).collect();
    if cut.is_empty() {
        "team-a".to_owned()
    } else {
        cut.trim_end_matches('-').to_owned()
    }
}

fn is_cidr(text: &str) -> bool {
    let Some((address, bits)) = text.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    match address.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => bits <= 32,
        Ok(std::net::IpAddr::V6(_)) => bits <= 128,
        Err(_) => false,
    }
}

/// The objects of `spec`'s team, in the order to apply them (cluster-scoped first, the namespace before what
/// lives in it). Refuses a bad name or quantity with every problem named by its flag.
pub fn team_objects(spec: &TeamSpec) -> Result<Vec<TeamObject>, TeamError> {
    validate(spec)?;
    let groups = if spec.groups.is_empty() {
        vec![spec.name.clone()]
    } else {
        spec.groups.clone()
    };
    let mut objects = cluster_roles();
    objects.push(namespace(spec));
    objects.extend(bindings(spec, &groups));
    objects.extend(quota(spec));
    objects.extend(queues(spec));
    objects.extend(network_policies(spec));
    Ok(objects)
}

fn labels(spec: &TeamSpec) -> Value {
    json!({"app.kubernetes.io/managed-by": FIELD_MANAGER, TEAM_LABEL: spec.name})
}

fn cluster_roles() -> Vec<TeamObject> {
    let read = json!(["get", "list", "watch"]);
    let editor = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": TRAINJOB_EDITOR, "labels": {"app.kubernetes.io/managed-by": FIELD_MANAGER}},
        "rules": [
            {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"],
             "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
            {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs/status", "trainingruntimes"], "verbs": read},
            {"apiGroups": [""], "resources": ["pods", "pods/log", "events", "persistentvolumeclaims"], "verbs": read},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create", "update", "patch", "delete"]},
            {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": read},
            {"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues", "workloads"], "verbs": read},
        ],
    });
    let viewer = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": RUNTIME_VIEWER, "labels": {"app.kubernetes.io/managed-by": FIELD_MANAGER}},
        "rules": [
            {"apiGroups": ["trainer.kubeflow.org"], "resources": ["clustertrainingruntimes"], "verbs": read},
        ],
    });
    vec![
        TeamObject::new("clusterroles", false, editor),
        TeamObject::new("clusterroles", false, viewer),
    ]
}

fn namespace(spec: &TeamSpec) -> TeamObject {
    let mut labels = labels(spec);
    labels[POD_SECURITY_ENFORCE] = json!(spec.pod_security);
    labels["pod-security.kubernetes.io/enforce-version"] = json!("latest");
    labels["pod-security.kubernetes.io/warn"] = json!("restricted");
    labels["pod-security.kubernetes.io/audit"] = json!("restricted");
    TeamObject::new(
        "namespaces",
        false,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": spec.name, "labels": labels}}),
    )
}

fn bindings(spec: &TeamSpec, groups: &[String]) -> Vec<TeamObject> {
    let subjects: Vec<Value> = groups
        .iter()
        .map(|g| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}))
        .collect();
    let rb = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": TRAINJOB_EDITOR, "namespace": spec.name, "labels": labels(spec)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": TRAINJOB_EDITOR},
        "subjects": subjects,
    });
    let crb = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": format!("{RUNTIME_VIEWER}-{}", spec.name), "labels": labels(spec)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": RUNTIME_VIEWER},
        "subjects": subjects,
    });
    vec![
        TeamObject::new("rolebindings", true, rb),
        TeamObject::new("clusterrolebindings", false, crb),
    ]
}

fn quota(spec: &TeamSpec) -> Vec<TeamObject> {
    let rq = json!({
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "kubetrain-team", "namespace": spec.name, "labels": labels(spec)},
        "spec": {"hard": {
            "requests.nvidia.com/gpu": spec.gpus.to_string(),
            "requests.cpu": spec.cpu,
            "requests.memory": spec.memory,
            "requests.storage": spec.storage,
        }},
    });
    let mut container = json!({
        "type": "Container",
        "defaultRequest": {"cpu": "1", "memory": "4Gi"},
    });
    if spec.gpus > 0 {
        container["max"] = json!({"nvidia.com/gpu": spec.gpus.to_string()});
    }
    let lr = json!({
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "kubetrain-team", "namespace": spec.name, "labels": labels(spec)},
        "spec": {"limits": [
            container,
            {"type": "PersistentVolumeClaim", "max": {"storage": spec.storage}},
        ]},
    });
    vec![
        TeamObject::new("resourcequotas", true, rq),
        TeamObject::new("limitranges", true, lr),
    ]
}

fn queues(spec: &TeamSpec) -> Vec<TeamObject> {
    let flavor = json!({
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": {"name": spec.flavor, "labels": {"app.kubernetes.io/managed-by": FIELD_MANAGER}},
    });
    let mut cq_spec = json!({
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": spec.name}},
        "resourceGroups": [{
            "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
            "flavors": [{"name": spec.flavor, "resources": [
                {"name": "cpu", "nominalQuota": spec.cpu},
                {"name": "memory", "nominalQuota": spec.memory},
                {"name": "nvidia.com/gpu", "nominalQuota": spec.gpus.to_string()},
            ]}],
        }],
    });
    if let Some(cohort) = &spec.cohort {
        cq_spec["cohortName"] = json!(cohort);
    }
    let cq = json!({
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": spec.name, "labels": labels(spec)},
        "spec": cq_spec,
    });
    let lq = json!({
        "apiVersion": KUEUE_API_VERSION,
        "kind": "LocalQueue",
        "metadata": {"name": "default", "namespace": spec.name, "labels": labels(spec)},
        "spec": {"clusterQueue": spec.name},
    });
    vec![
        TeamObject::new("resourceflavors", false, flavor),
        TeamObject::new("clusterqueues", false, cq),
        TeamObject::new("localqueues", true, lq),
    ]
}

fn network_policies(spec: &TeamSpec) -> Vec<TeamObject> {
    let deny = json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "kubetrain-default-deny", "namespace": spec.name, "labels": labels(spec)},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
    });
    let mut egress = vec![
        // Pod to pod in the namespace: rendezvous, collectives, the initializers' volumes' peers.
        json!({"to": [{"podSelector": {}}]}),
        // DNS, wherever the resolver runs (kube-dns, node-local caches).
        json!({"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]}),
        // The operator's status server: training pods report progress.
        json!({
            "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": spec.operator_namespace}}}],
            "ports": [{"port": STATUS_SERVER_PORT, "protocol": "TCP"}],
        }),
    ];
    for cidr in &spec.dataset_cidrs {
        egress.push(json!({"to": [{"ipBlock": {"cidr": cidr}}]}));
    }
    let training = json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "kubetrain-training", "namespace": spec.name, "labels": labels(spec)},
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"podSelector": {}}]}],
            "egress": egress,
        },
    });
    vec![
        TeamObject::new("networkpolicies", true, deny),
        TeamObject::new("networkpolicies", true, training),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_come_in_apply_order_with_the_flags_values() {
        let mut spec = TeamSpec::new("nlp");
        spec.gpus = 4;
        spec.cpu = "32".into();
        spec.groups = vec!["g1".into(), "g2".into()];
        spec.cohort = Some("research".into());
        spec.dataset_cidrs = vec!["10.20.0.0/16".into()];
        let objects = team_objects(&spec).unwrap();
        let kinds: Vec<&str> = objects.iter().map(TeamObject::kind).collect();
        assert_eq!(
            kinds,
            [
                "ClusterRole",
                "ClusterRole",
                "Namespace",
                "RoleBinding",
                "ClusterRoleBinding",
                "ResourceQuota",
                "LimitRange",
                "ResourceFlavor",
                "ClusterQueue",
                "LocalQueue",
                "NetworkPolicy",
                "NetworkPolicy"
            ]
        );
        let by_kind = |k: &str| objects.iter().find(|o| o.kind() == k).unwrap();
        assert_eq!(
            by_kind("Namespace").value["metadata"]["labels"][POD_SECURITY_ENFORCE],
            "baseline"
        );
        assert_eq!(by_kind("RoleBinding").value["subjects"][1]["name"], "g2");
        let cq = &by_kind("ClusterQueue").value;
        assert_eq!(cq["spec"]["cohortName"], "research");
        assert_eq!(
            cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"],
            "4"
        );
        assert_eq!(by_kind("LocalQueue").namespace(), Some("nlp"));
        let training = &objects[11].value;
        assert_eq!(
            training["spec"]["egress"][3]["to"][0]["ipBlock"]["cidr"],
            "10.20.0.0/16"
        );
        assert!(
            objects
                .iter()
                .all(|o| o.namespaced == o.namespace().is_some())
        );
    }

    #[test]
    fn the_group_defaults_to_the_team_and_no_cohort_means_none() {
        let objects = team_objects(&TeamSpec::new("cv")).unwrap();
        assert_eq!(objects[3].value["subjects"][0]["name"], "cv");
        assert!(objects[8].value["spec"].get("cohortName").is_none());
    }

    #[test]
    fn every_bad_flag_is_named() {
        let mut spec = TeamSpec::new("-bad");
        spec.cpu = "-2".into();
        spec.storage = "1TB".into();
        spec.cohort = Some("Research".into());
        spec.dataset_cidrs = vec!["10.0.0.0".into()];
        spec.pod_security = "privileged".into();
        spec.groups = vec![" ".into()];
        let TeamError(errors) = team_objects(&spec).unwrap_err();
        let expected = [
            "NAME: \"-bad\" is not a DNS label",
            "--cpu: \"-2\" is negative",
            "--storage: \"1TB\" is not a quantity",
            "--cohort: \"Research\" is not a DNS label",
            "--group: empty group name",
            "--dataset-cidr: \"10.0.0.0\" is not a CIDR",
            "--pod-security: \"privileged\" is not baseline or restricted",
        ];
        assert_eq!(errors.len(), expected.len(), "{errors:#?}");
        for (error, want) in errors.iter().zip(expected) {
            assert!(error.starts_with(want), "{error} / {want}");
        }
        assert!(errors[0].ends_with("e.g. \"bad\""), "{}", errors[0]);
    }

    #[test]
    fn dns_labels() {
        for good in ["a", "team-a", "a1", &"x".repeat(63)] {
            assert!(is_dns_label(good), "{good}");
        }
        for bad in ["", "A", "a_b", "-a", "a-", "a.b", &"x".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
    }
}
