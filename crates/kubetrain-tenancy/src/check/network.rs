//! The `network-policies` item: default deny in every team namespace with what training needs open (DNS,
//! the operator's status server, pod to pod within the namespace), the dataset endpoints, and the operator's
//! webhook and status ports closed to everything else.

use std::collections::BTreeSet;

use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::namespace_items::list;
use super::{ClusterView, Item, STATUS_SERVER_PORT, Verdict, WEBHOOK_PORT, unreadable};

/// The operator pods' `app.kubernetes.io/name` label.
const OPERATOR_NAME: &str = "kubetrain-operator";

fn selects_all(np: &NetworkPolicy) -> bool {
    np.spec.as_ref().is_some_and(|s| {
        s.pod_selector.as_ref().is_none_or(|sel| {
            sel.match_labels.as_ref().is_none_or(|m| m.is_empty())
                && sel.match_expressions.as_ref().is_none_or(|m| m.is_empty())
        })
    })
}

/// Whether `np` governs `direction` (`Ingress`/`Egress`), as the API server defaults `policyTypes`.
fn governs(np: &NetworkPolicy, direction: &str) -> bool {
    let Some(spec) = &np.spec else { return false };
    match &spec.policy_types {
        Some(types) => types.iter().any(|t| t == direction),
        None => direction == "Ingress" || spec.egress.is_some(),
    }
}

fn port_allows(ports: Option<&Vec<NetworkPolicyPort>>, number: i32, names: &[&str]) -> bool {
    let Some(ports) = ports.filter(|p| !p.is_empty()) else {
        return true;
    };
    ports.iter().any(|p| match &p.port {
        None => true,
        Some(IntOrString::Int(n)) => {
            *n == number || p.end_port.is_some_and(|end| *n <= number && number <= end)
        }
        Some(IntOrString::String(name)) => names.contains(&name.as_str()),
    })
}

/// What one team namespace's policies allow.
#[derive(Default)]
struct Allowed {
    deny_ingress: bool,
    deny_egress: bool,
    dns: bool,
    status: bool,
    same_namespace: bool,
    cidrs: BTreeSet<String>,
}

fn allowed(policies: &[&NetworkPolicy]) -> Allowed {
    let mut a = Allowed::default();
    for np in policies {
        let all = selects_all(np);
        a.deny_ingress |= all && governs(np, "Ingress");
        a.deny_egress |= all && governs(np, "Egress");
        let Some(spec) = &np.spec else { continue };
        for rule in spec.egress.iter().flatten() {
            let peers = rule.to.as_ref().filter(|t| !t.is_empty());
            let anywhere = peers.is_none();
            a.dns |= port_allows(rule.ports.as_ref(), 53, &["dns", "dns-tcp"]);
            let to_other_ns = anywhere
                || peers.is_some_and(|p| p.iter().any(|peer| peer.namespace_selector.is_some()));
            a.status |= to_other_ns
                && port_allows(
                    rule.ports.as_ref(),
                    STATUS_SERVER_PORT,
                    &["status", "https-status"],
                );
            for peer in peers.into_iter().flatten() {
                if let Some(block) = &peer.ip_block {
                    a.cidrs.insert(block.cidr.clone());
                }
                a.same_namespace |=
                    peer.pod_selector.is_some() && peer.namespace_selector.is_none();
            }
        }
    }
    a
}

/// `network-policies`.
pub(super) fn network_policies(view: &ClusterView, teams: &BTreeSet<String>) -> Item {
    let mut item = Item::new(
        "network-policies",
        "NetworkPolicies: default deny, DNS, the operator's webhook and status-server ports, dataset endpoints",
    );
    if let Some(line) = unreadable(view, "NetworkPolicy") {
        item.finding(Verdict::Warn, line, None);
        return item;
    }
    for ns in teams {
        let policies: Vec<&NetworkPolicy> = view
            .network_policies
            .iter()
            .filter(|np| np.metadata.namespace.as_deref() == Some(ns))
            .collect();
        let a = allowed(&policies);
        let fix = format!(
            "kubetrain tenancy add-team {ns} --apply (creates the default-deny and training NetworkPolicies)"
        );
        if !(a.deny_ingress && a.deny_egress) {
            let open: Vec<&str> = [("ingress", a.deny_ingress), ("egress", a.deny_egress)]
                .into_iter()
                .filter(|(_, denied)| !denied)
                .map(|(d, _)| d)
                .collect();
            item.finding(
                Verdict::Fail,
                format!(
                    "{ns}: no default deny for {} (no policy selects every pod)",
                    open.join(" and ")
                ),
                Some(&fix),
            );
            continue;
        }
        item.pass(format!("{ns}: default deny for ingress and egress"));
        if !a.dns {
            item.finding(
                Verdict::Warn,
                format!("{ns}: DNS (port 53) is not allowed out"),
                Some(&fix),
            );
        }
        if !a.status {
            item.finding(
                Verdict::Warn,
                format!("{ns}: the operator's status server (port {STATUS_SERVER_PORT}) is not allowed out: training pods cannot report progress"),
                Some(&fix),
            );
        }
        if !a.same_namespace {
            item.finding(
                Verdict::Warn,
                format!("{ns}: pods may not reach each other (distributed training needs pod to pod traffic in the namespace)"),
                Some(&fix),
            );
        }
        let cidrs: Vec<String> = a.cidrs.into_iter().collect();
        item.pass(if cidrs.is_empty() {
            format!(
                "{ns}: no dataset endpoint allowed out (add-team --dataset-cidr CIDR opens one)"
            )
        } else {
            format!("{ns}: dataset endpoints allowed out: {}", list(&cidrs))
        });
    }
    operator_ports(view, &mut item);
    item
}

/// The operator's webhook (9443) and status (10443) ports: an ingress policy on its pods.
fn operator_ports(view: &ClusterView, item: &mut Item) {
    let guarding: Vec<String> = view
        .network_policies
        .iter()
        .filter(|np| governs(np, "Ingress"))
        .filter(|np| {
            np.spec
                .as_ref()
                .and_then(|s| s.pod_selector.as_ref()?.match_labels.as_ref())
                .and_then(|m| m.get("app.kubernetes.io/name"))
                .is_some_and(|name| name == OPERATOR_NAME)
        })
        .map(|np| {
            format!(
                "{}/{}",
                np.metadata.namespace.as_deref().unwrap_or("?"),
                np.metadata.name.as_deref().unwrap_or("?")
            )
        })
        .collect();
    if guarding.is_empty() {
        item.finding(
            Verdict::Warn,
            format!("no NetworkPolicy limits who reaches the operator's webhook ({WEBHOOK_PORT}) and status ({STATUS_SERVER_PORT}) ports"),
            Some("set the API server's addresses in examples/manifests/deploy/networkpolicy.yaml and apply it (docs/operator.md)"),
        );
    } else {
        item.pass(format!(
            "the operator's ports are guarded by {}",
            list(&guarding)
        ));
    }
}
