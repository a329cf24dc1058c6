//! The install manifests in `examples/manifests/deploy/` against the code: generated files in sync, RBAC
//! exactly what the code declares, webhook paths served, every document parses.
//!
//! Regenerate the generated files with
//! `KUBETRAIN_BLESS=1 cargo test -p kubetrain-controller --test controller manifests_deploy`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use kubetrain_controller::webhook::Route;
use serde_json::Value;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/manifests/deploy")
}

fn read(name: &str) -> String {
    let path = deploy_dir().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn documents(name: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(&read(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

fn one<T: serde::de::DeserializeOwned>(file: &str, kind: &str) -> T {
    let docs: Vec<Value> = documents(file)
        .into_iter()
        .filter(|d| d["kind"] == kind)
        .collect();
    assert_eq!(docs.len(), 1, "{file}: expected one {kind}");
    serde_json::from_value(docs[0].clone()).unwrap_or_else(|e| panic!("{file} {kind}: {e}"))
}

/// Compares a generated file with its committed copy; `KUBETRAIN_BLESS=1` rewrites the copy.
fn check_generated(name: &str, generated: &str) {
    let path = deploy_dir().join(name);
    if std::env::var_os("KUBETRAIN_BLESS").is_some() {
        std::fs::write(&path, generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is out of date; regenerate with KUBETRAIN_BLESS=1 cargo test -p kubetrain-controller --test controller manifests_deploy",
        path.display()
    );
}

#[test]
fn the_crds_are_the_generated_ones() {
    let mut text = String::new();
    for (i, crd) in kubetrain_api::crd::crds().iter().enumerate() {
        if i > 0 {
            text.push_str("---\n");
        }
        text.push_str(&kubetrain_api::to_yaml(crd).unwrap());
    }
    check_generated("crds.yaml", &text);
    let mut kinds: Vec<String> = documents("crds.yaml")
        .iter()
        .map(|d| d["spec"]["names"]["kind"].as_str().unwrap().to_owned())
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "ClusterTrainingRuntime",
            "OptimizationJob",
            "TrainJob",
            "TrainingRuntime"
        ]
    );
}

#[test]
fn the_runtimes_are_the_built_in_ones() {
    let text = kubetrain_jobset::builtin::SOURCES
        .iter()
        .map(|(_, yaml)| *yaml)
        .collect::<Vec<_>>()
        .join("---\n");
    check_generated("runtimes/runtimes.yaml", &text);
    let names: Vec<String> = documents("runtimes/runtimes.yaml")
        .iter()
        .map(|d| {
            assert_eq!(d["kind"], "ClusterTrainingRuntime");
            d["metadata"]["name"].as_str().unwrap().to_owned()
        })
        .collect();
    let builtin: Vec<String> = kubetrain_jobset::builtin::runtimes()
        .iter()
        .map(|r| r.name().to_owned())
        .collect();
    assert_eq!(names, builtin);
    // Each passes the runtime webhook it will meet on apply.
    for runtime in kubetrain_jobset::builtin::runtimes() {
        let errors: Vec<String> =
            kubetrain_api::validation::validate_cluster_training_runtime(&runtime)
                .iter()
                .filter(|e| e.is_error())
                .map(ToString::to_string)
                .collect();
        assert!(errors.is_empty(), "{errors:?}");
    }
}

/// (apiGroup, resource, verb) triples, so that rules compare however they are grouped.
fn triples(rules: &[PolicyRule]) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for rule in rules {
        assert!(
            rule.resource_names.is_none() && rule.non_resource_urls.is_none(),
            "unexpected rule shape: {rule:?}"
        );
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    assert_ne!(verb, "*", "no wildcards");
                    out.insert((group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
    out
}

#[test]
fn the_cluster_role_is_exactly_what_controller_and_webhooks_use() {
    let role: ClusterRole = one("rbac.yaml", "ClusterRole");
    let declared = triples(role.rules.as_deref().unwrap_or_default());
    let mut needed = triples(&kubetrain_controller::permissions::required_rules());
    needed.extend(triples(&kubetrain_controller::webhook::required_rules()));
    needed.extend(triples(
        &kubetrain_controller::status_server::required_rules(),
    ));
    needed.extend(triples(&kubetrain_controller::certs::required_rules()));
    needed.extend(triples(
        &kubetrain_controller::metrics_auth::required_rules(),
    ));
    let missing: Vec<_> = needed.difference(&declared).collect();
    let extra: Vec<_> = declared.difference(&needed).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "ClusterRole differs from the code: missing {missing:?}, extra {extra:?}"
    );
}

#[test]
fn the_lease_role_is_exactly_what_election_uses_in_the_operators_namespace() {
    let role: Role = one("rbac.yaml", "Role");
    let mut needed = triples(&kubetrain_controller::election::required_rules());
    needed.extend(triples(&kubetrain_controller::certs::namespaced_rules()));
    assert_eq!(triples(role.rules.as_deref().unwrap_or_default()), needed);
    let deployment: Deployment = one("operator.yaml", "Deployment");
    assert_eq!(role.metadata.namespace, deployment.metadata.namespace);
    // The Lease namespace comes from the pod's own namespace, which the Role covers.
    let container = &deployment.spec.template.spec.unwrap().containers[0];
    let env = container.env.as_deref().unwrap_or_default();
    let lease_ns = env
        .iter()
        .find(|e| e.name == "KUBETRAIN_LEADER_ELECT_NAMESPACE")
        .expect("lease namespace env");
    let field = lease_ns
        .value_from
        .as_ref()
        .and_then(|v| v.field_ref.as_ref())
        .map(|f| f.field_path.as_str());
    assert_eq!(field, Some("metadata.namespace"));
}

#[test]
fn the_bindings_grant_the_roles_to_the_deployments_service_account() {
    let deployment: Deployment = one("operator.yaml", "Deployment");
    let account = deployment
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap();
    for (kind, role) in [
        ("ClusterRoleBinding", "ClusterRole"),
        ("RoleBinding", "Role"),
    ] {
        let binding = documents("rbac.yaml")
            .into_iter()
            .find(|d| d["kind"] == kind)
            .unwrap();
        assert_eq!(binding["roleRef"]["kind"], role);
        assert_eq!(binding["subjects"][0]["name"], account.as_str());
        assert_eq!(
            binding["subjects"][0]["namespace"].as_str(),
            deployment.metadata.namespace.as_deref()
        );
    }
}

#[test]
fn the_webhook_configurations_call_the_servers_routes_through_the_service() {
    let mutating: MutatingWebhookConfiguration =
        one("webhooks.yaml", "MutatingWebhookConfiguration");
    let validating: ValidatingWebhookConfiguration =
        one("webhooks.yaml", "ValidatingWebhookConfiguration");
    let service: Service = one("operator.yaml", "Service");
    let mut seen = Vec::new();
    let mut check = |name: &str,
                     client: &k8s_openapi::api::admissionregistration::v1::WebhookClientConfig,
                     mutating: bool| {
        let target = client.service.as_ref().expect("service reference");
        let route = Route::from_path(target.path.as_deref().unwrap_or_default())
            .unwrap_or_else(|| panic!("{name}: path {:?} is not served", target.path));
        assert_eq!(route.webhook_name(), name);
        assert_eq!(route.is_mutating(), mutating, "{name}");
        assert_eq!(Some(&target.name), service.metadata.name.as_ref());
        assert_eq!(Some(&target.namespace), service.metadata.namespace.as_ref());
        assert_eq!(target.port.unwrap_or(443), 443);
        seen.push(route);
    };
    for hook in mutating.webhooks.iter().flatten() {
        check(&hook.name, &hook.client_config, true);
        assert_eq!(hook.failure_policy.as_deref(), Some("Fail"));
    }
    for hook in validating.webhooks.iter().flatten() {
        check(&hook.name, &hook.client_config, false);
        assert_eq!(hook.failure_policy.as_deref(), Some("Fail"));
    }
    seen.sort_by_key(|r| r.path());
    let mut all = Route::ALL.to_vec();
    all.sort_by_key(|r| r.path());
    assert_eq!(seen, all, "every route is registered exactly once");

    // The Service's 443 reaches the container's webhook port, and cert-manager injects the CA.
    let port = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|p| p.iter().find(|p| p.port == 443))
        .expect("port 443");
    assert_eq!(
        port.target_port,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("webhook".into()))
    );
    for annotations in [
        &mutating.metadata.annotations,
        &validating.metadata.annotations,
    ] {
        assert_eq!(
            annotations
                .as_ref()
                .and_then(|a| a.get("cert-manager.io/inject-ca-from"))
                .map(String::as_str),
            Some("kubeflow-system/kubetrain-webhook-cert")
        );
    }
}

#[test]
fn the_certificate_covers_the_service_and_lands_where_the_deployment_mounts_it() {
    let certificate = documents("webhooks.yaml")
        .into_iter()
        .find(|d| d["kind"] == "Certificate")
        .unwrap();
    let names: Vec<&str> = certificate["spec"]["dnsNames"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(names.contains(&"kubetrain-operator.kubeflow-system.svc"));
    let deployment: Deployment = one("operator.yaml", "Deployment");
    let pod = deployment.spec.template.spec.unwrap();
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "cert")
        .unwrap();
    assert_eq!(
        volume
            .secret
            .as_ref()
            .and_then(|s| s.secret_name.as_deref()),
        certificate["spec"]["secretName"].as_str()
    );
    let container = &pod.containers[0];
    let mount = container
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == "cert")
        .unwrap();
    assert_eq!(
        mount.mount_path,
        kubetrain_controller::webhook::tls::DEFAULT_CERT_DIR
    );
    // Probes hit the endpoints the binary serves, on the port it is told to use.
    let liveness = container
        .liveness_probe
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap();
    let readiness = container
        .readiness_probe
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap();
    assert_eq!(liveness.path.as_deref(), Some("/healthz"));
    assert_eq!(readiness.path.as_deref(), Some("/readyz"));
    let security = container.security_context.as_ref().unwrap();
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
}

#[test]
fn every_manifest_parses_and_the_kustomizations_list_existing_files() {
    for dir in [deploy_dir(), deploy_dir().join("runtimes")] {
        let kustomization: Value = serde_saphyr::from_str(
            &std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap(),
        )
        .unwrap();
        let resources = kustomization["resources"].as_array().unwrap();
        assert!(!resources.is_empty());
        for resource in resources {
            let file = dir.join(resource.as_str().unwrap());
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            for doc in serde_saphyr::from_multiple::<Value>(&text)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
                .into_iter()
                .filter(|d| !d.is_null())
            {
                assert!(
                    doc["apiVersion"].is_string() && doc["kind"].is_string(),
                    "{}: document without apiVersion/kind",
                    file.display()
                );
                assert!(doc["metadata"]["name"].is_string(), "{}", file.display());
            }
        }
    }
}

#[test]
fn the_network_policy_admits_the_api_server_to_the_webhook_port_and_trainjob_pods_to_the_status_port()
 {
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    let policy: NetworkPolicy = one("networkpolicy.yaml", "NetworkPolicy");
    let deployment: Deployment = one("operator.yaml", "Deployment");
    assert_eq!(policy.metadata.namespace, deployment.metadata.namespace);
    let spec = policy.spec.unwrap();
    // It selects exactly the operator's pods.
    let pod_labels = deployment
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap();
    let selector = spec.pod_selector.unwrap().match_labels.unwrap();
    for (key, value) in &selector {
        assert_eq!(pod_labels.get(key), Some(value), "selector {key}={value}");
    }
    assert_eq!(
        spec.policy_types.as_deref(),
        Some(&["Ingress".to_owned()][..])
    );

    // Every port it names is a container port; the webhook port only from IP blocks (the API server).
    let container = &deployment.spec.template.spec.unwrap().containers[0];
    let ports: Vec<(String, i32)> = container
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.clone().unwrap_or_default(), p.container_port))
        .collect();
    let is_webhook = |port: &IntOrString| match port {
        IntOrString::String(name) => name == "webhook",
        IntOrString::Int(number) => *number == 9443,
    };
    let mut admitted = BTreeSet::new();
    let mut webhook_rules = 0;
    for rule in spec.ingress.iter().flatten() {
        for port in rule.ports.iter().flatten() {
            let named = port.port.as_ref().expect("a port per rule");
            let known = ports.iter().any(|(name, number)| match named {
                IntOrString::String(n) => n == name,
                IntOrString::Int(n) => n == number,
            });
            assert!(known, "{named:?} is not a container port");
            admitted.insert(format!("{named:?}"));
            if is_webhook(named) {
                webhook_rules += 1;
                let peers = rule.from.as_deref().unwrap_or_default();
                assert!(!peers.is_empty(), "the webhook port is open to everyone");
                for peer in peers {
                    assert!(
                        peer.ip_block.is_some()
                            && peer.namespace_selector.is_none()
                            && peer.pod_selector.is_none(),
                        "the webhook port admits more than the API server: {peer:?}"
                    );
                }
            }
        }
    }
    assert_eq!(webhook_rules, 1, "one rule admits the webhook port");
    // The status port only from TrainJob (JobSet) pods: any other pod could stall progress reports and
    // make the operator send a TokenReview per forged token (issue 39).
    let status_peers: Vec<_> = spec
        .ingress
        .iter()
        .flatten()
        .filter(|rule| {
            rule.ports.iter().flatten().any(|p| {
                matches!(&p.port, Some(IntOrString::String(n)) if n == "status")
                    || matches!(&p.port, Some(IntOrString::Int(10443)))
            })
        })
        .flat_map(|rule| rule.from.clone().unwrap_or_default())
        .collect();
    assert!(
        !status_peers.is_empty(),
        "the status port is open to everyone"
    );
    for peer in &status_peers {
        let pods = peer
            .pod_selector
            .as_ref()
            .expect("a pod selector on the status port");
        let jobset_pods = pods
            .match_expressions
            .iter()
            .flatten()
            .any(|e| e.key == "jobset.sigs.k8s.io/jobset-name" && e.operator == "Exists");
        assert!(
            jobset_pods,
            "the status port admits more than TrainJob pods: {peer:?}"
        );
    }
    // The probes and the scrapes still get through.
    for port in ["health", "metrics"] {
        assert!(
            admitted.contains(&format!("{:?}", IntOrString::String(port.to_owned()))),
            "{port} is not admitted"
        );
    }
}
