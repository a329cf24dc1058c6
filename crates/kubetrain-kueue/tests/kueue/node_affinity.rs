//! Required node affinity in flavor matching (issue 15, item 6): the pod set's `nodeSelector` and
//! required node affinity terms, each restricted to the flavor's own label keys, must match the
//! flavor's `nodeLabels` (Kueue v0.19.1 `flavorassigner.go` `flavorSelector`). Each case names the
//! `TestAssignFlavors` case of `pkg/scheduler/flavorassigner/flavorassigner_test.go` it mirrors.

use kubetrain_kueue::load::Setup;
use kubetrain_kueue::model::Model;
use kubetrain_kueue::sched::Scheduler;
use kubetrain_kueue::sched::conditions::find;

/// The flavors of upstream's `TestAssignFlavors` that these cases use.
const FLAVORS: &str = r#"
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: one}
spec: {nodeLabels: {type: one}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: two}
spec: {nodeLabels: {type: two}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: label-x-a}
spec: {nodeLabels: {x: a}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: label-xy-b}
spec: {nodeLabels: {x: b, y: k}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gen}
spec: {nodeLabels: {gen: "5"}}
"#;

/// Runs one cycle for a workload with `pod_spec_extra` (indented for `spec:` of the pod template)
/// in a queue with `flavors` (4 cpu each); returns (reason, message, flavor of cpu when admitted).
fn assign(flavors: &[&str], pod_spec_extra: &str) -> (String, String, Option<String>) {
    let flavor_list = flavors
        .iter()
        .map(|f| format!("{{name: {f}, resources: [{{name: cpu, nominalQuota: 4}}]}}"))
        .collect::<Vec<_>>()
        .join(", ");
    let yaml = format!(
        "{FLAVORS}---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {{name: cq}}\nspec:\n  namespaceSelector: {{}}\n  resourceGroups:\n  - coveredResources: [cpu]\n    flavors: [{flavor_list}]\n---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {{name: lq, namespace: ns}}\nspec: {{clusterQueue: cq}}\n---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {{name: w, namespace: ns}}\nspec:\n  queueName: lq\n  podSets:\n  - name: main\n    count: 1\n    template:\n      spec:\n        containers: [{{name: c, resources: {{requests: {{cpu: \"1\"}}}}}}]\n{pod_spec_extra}"
    );
    let setup = Setup::from_yaml(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    let mut s = Scheduler::new(Model::build(&setup).unwrap());
    s.arrive_all();
    s.cycle();
    let c = find(&s.state(0).conditions, "QuotaReserved").expect("QuotaReserved");
    let flavor = s.state(0).admission.as_ref().map(|a| {
        let (_, f, _) = a.pod_sets[0].resources[0];
        s.model().flavors[f].name.clone()
    });
    (c.reason.clone(), c.message.clone(), flavor)
}

fn affinity(terms: &str) -> String {
    format!(
        "        affinity:\n          nodeAffinity:\n            requiredDuringSchedulingIgnoredDuringExecution:\n              nodeSelectorTerms:\n{terms}"
    )
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "a table test: one case per row, read top to bottom"
)]
fn required_node_affinity_table() {
    struct Case {
        upstream: &'static str,
        flavors: &'static [&'static str],
        extra: String,
        want_flavor: Option<&'static str>,
        want_message: &'static str,
    }
    let cases = [
        Case {
            upstream: "multiple flavors, fits with node affinity",
            flavors: &["one", "two"],
            extra: format!(
                "        nodeSelector: {{ignored1: foo}}\n{}",
                affinity(
                    "              - matchExpressions: [{key: type, operator: In, values: [two]}]\n"
                )
            ),
            want_flavor: Some("two"),
            want_message: "Quota reserved in ClusterQueue cq",
        },
        Case {
            upstream: "multiple flavors, node affinity fits any flavor",
            flavors: &["one", "two"],
            extra: affinity(
                "              - matchExpressions: [{key: ignored2, operator: In, values: [bar]}]\n              - matchExpressions: [{key: cpuType, operator: In, values: [two]}]\n",
            ),
            want_flavor: Some("one"),
            want_message: "Quota reserved in ClusterQueue cq",
        },
        Case {
            upstream: "multiple flavors with different label keys, selector only uses flavor's own keys",
            flavors: &["label-x-a", "label-xy-b"],
            extra: "        nodeSelector: {x: a, y: g}\n".to_string(),
            want_flavor: Some("label-x-a"),
            want_message: "Quota reserved in ClusterQueue cq",
        },
        Case {
            upstream: "labelless flavor in group with labeled flavor, workload uses labeled selector",
            flavors: &["default", "two"],
            extra: "        nodeSelector: {type: two}\n".to_string(),
            want_flavor: Some("default"),
            want_message: "Quota reserved in ClusterQueue cq",
        },
        Case {
            upstream: "multiple flavors, doesn't fit node affinity",
            flavors: &["one", "two"],
            extra: affinity(
                "              - matchExpressions: [{key: type, operator: In, values: [three]}]\n",
            ),
            want_flavor: None,
            want_message: "couldn't assign flavors to pod set main: flavor one doesn't match node affinity, flavor two doesn't match node affinity",
        },
        // Our own cases for the operators upstream's table does not cover.
        Case {
            upstream: "(ours) NotIn skips the excluded flavor",
            flavors: &["one", "two"],
            extra: affinity(
                "              - matchExpressions: [{key: type, operator: NotIn, values: [one]}]\n",
            ),
            want_flavor: Some("two"),
            want_message: "Quota reserved in ClusterQueue cq",
        },
        Case {
            upstream: "(ours) Gt compares integers; each flavor sees only its own keys",
            flavors: &["one", "gen"],
            extra: affinity(
                "              - matchExpressions: [{key: gen, operator: Gt, values: [\"4\"]}, {key: type, operator: DoesNotExist}]\n",
            ),
            want_flavor: Some("gen"),
            want_message: "Quota reserved in ClusterQueue cq",
        },
        Case {
            upstream: "(ours) DoesNotExist on a key the flavor labels rules it out",
            flavors: &["one"],
            extra: affinity(
                "              - matchExpressions: [{key: type, operator: DoesNotExist}]\n",
            ),
            want_flavor: None,
            want_message: "couldn't assign flavors to pod set main: flavor one doesn't match node affinity",
        },
        Case {
            upstream: "(ours) every term must fail for the flavor to be ruled out",
            flavors: &["one", "two"],
            extra: affinity(
                "              - matchExpressions: [{key: type, operator: In, values: [three]}]\n              - matchExpressions: [{key: type, operator: In, values: [two]}]\n",
            ),
            want_flavor: Some("two"),
            want_message: "Quota reserved in ClusterQueue cq",
        },
    ];
    for c in cases {
        let (reason, message, flavor) = assign(c.flavors, &c.extra);
        assert_eq!(
            flavor.as_deref(),
            c.want_flavor,
            "{}: {reason}: {message}",
            c.upstream
        );
        assert_eq!(message, c.want_message, "{}", c.upstream);
        if c.want_flavor.is_none() {
            assert_eq!(reason, "NoMatchingFlavor", "{}", c.upstream);
        }
    }
}
