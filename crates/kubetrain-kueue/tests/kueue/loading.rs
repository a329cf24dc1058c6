//! Loading and validation: field-path errors (kueue.md §1) and the upstream example setups.

use crate::shared_data;

use kubetrain_kueue::error::LoadError;
use kubetrain_kueue::load::Setup;
use kubetrain_kueue::model::Model;

fn errors(yaml: &str) -> Vec<String> {
    let setup = match Setup::from_yaml(yaml) {
        Ok(s) => s,
        Err(LoadError::Invalid(list)) => return list.iter().map(ToString::to_string).collect(),
        Err(e) => return vec![e.to_string()],
    };
    match Model::build(&setup) {
        Ok(_) => Vec::new(),
        Err(LoadError::Invalid(list)) => list.iter().map(ToString::to_string).collect(),
        Err(e) => vec![e.to_string()],
    }
}

fn cq(spec: &str) -> String {
    format!(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {{name: cq}}\nspec:\n{spec}"
    )
}

const RG: &str = "  resourceGroups:\n  - coveredResources: [cpu]\n    flavors:\n    - name: f\n      resources:\n      - name: cpu\n";

#[test]
fn webhook_rules_table() {
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "negative quota",
            cq(&format!("{RG}        nominalQuota: -1\n")),
            "ClusterQueue/cq: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: must be greater than or equal to 0",
        ),
        (
            "lending above nominal",
            cq(&format!("  cohortName: c\n{RG}        nominalQuota: 2\n        lendingLimit: 3\n")),
            "ClusterQueue/cq: spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: Invalid value: \"3\": must be less than or equal to the nominalQuota",
        ),
        (
            "borrowing limit without cohort",
            cq(&format!("{RG}        nominalQuota: 2\n        borrowingLimit: 3\n")),
            "ClusterQueue/cq: spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit: borrowingLimit must be nil when cohort is empty",
        ),
        (
            "unknown field",
            cq(&format!("{RG}        nominalQuota: 2\n        nominal: 3\n")),
            "ClusterQueue/cq: spec.resourceGroups[0].flavors[0].resources[0].nominal: unknown field `nominal`",
        ),
        (
            "bad quantity",
            cq(&format!("{RG}        nominalQuota: 2x\n")),
            "ClusterQueue/cq: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: quantities must match",
        ),
        (
            "preference needs TryNextFlavor",
            cq("  flavorFungibility: {preference: BorrowingOverPreemption}\n"),
            "ClusterQueue/cq: spec.flavorFungibility.preference: preference can only be set when whenCanBorrow and whenCanPreempt are both TryNextFlavor",
        ),
        (
            "borrowWithinCohort needs reclaim",
            cq("  preemption: {borrowWithinCohort: {policy: LowerPriority}}\n"),
            "ClusterQueue/cq: spec.preemption: reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never",
        ),
        (
            "resources must match coveredResources",
            cq("  resourceGroups:\n  - coveredResources: [cpu, memory]\n    flavors: [{name: f, resources: [{name: cpu, nominalQuota: 1}]}]\n"),
            "ClusterQueue/cq: spec.resourceGroups[0].flavors[0].resources: must have the same number of resources as the coveredResources",
        ),
        (
            "two minCounts",
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {name: w, namespace: ns}\nspec:\n  podSets:\n  - {name: a, count: 2, minCount: 1}\n  - {name: b, count: 2, minCount: 1}\n".to_string(),
            "Workload/ns/w: spec.podSets: at most one podSet can use minCount",
        ),
        (
            "unknown strategy",
            cq("  queueingStrategy: Fifo\n"),
            "ClusterQueue/cq: spec.queueingStrategy: Unsupported value: \"Fifo\"",
        ),
    ];
    for (name, yaml, want) in cases {
        let errs = errors(&yaml);
        assert!(
            errs.iter().any(|e| e.starts_with(want)),
            "case {name}: want prefix {want:?}, got {errs:?}"
        );
    }
}

#[test]
fn valid_setup_has_no_errors() {
    let yaml = cq(&format!(
        "  cohortName: c\n{RG}        nominalQuota: 2\n        lendingLimit: 1\n        borrowingLimit: 3\n"
    ));
    assert_eq!(errors(&yaml), Vec::<String>::new());
}

#[test]
fn v1beta1_spellings_are_read() {
    let yaml = "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: cq}\nspec:\n  cohort: c\n  admissionChecks: [x]\n";
    let setup = Setup::from_yaml(yaml).unwrap();
    let model = Model::build(&setup).unwrap();
    let node = model.cqs[0].node;
    assert_eq!(model.tree.names[model.tree.parent[node].unwrap()], "c");
}

#[test]
fn cohort_cycle_disables_tree() {
    let yaml = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Cohort\nmetadata: {name: a}\nspec: {parentName: b}\n---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Cohort\nmetadata: {name: b}\nspec: {parentName: a}\n---\n".to_string()
        + &cq("  cohortName: a\n");
    let model = Model::build(&Setup::from_yaml(&yaml).unwrap()).unwrap();
    assert_eq!(model.cqs[0].inactive.as_ref().unwrap().0, "CohortCycle");
}

#[test]
fn upstream_examples_load() {
    let Some(dir) = shared_data::shared_dir("upstream/kueue/examples") else {
        return;
    };
    let entries = std::fs::read_dir(&dir).expect("readable shared directory");
    let mut n = 0;
    for e in entries.flatten() {
        let text = std::fs::read_to_string(e.path()).unwrap();
        let mut setup = Setup::default();
        setup
            .add_yaml(&e.path().display().to_string(), &text)
            .unwrap_or_else(|err| panic!("{}: {err}", e.path().display()));
        Model::build(&setup).unwrap_or_else(|err| panic!("{}: {err}", e.path().display()));
        n += 1;
    }
    assert!(n > 0);
}

#[test]
fn a_stream_of_thousands_of_documents_loads() {
    // serde-saphyr refuses more than 1,024 documents in one parse; the loader parses one at a time.
    let mut yaml = String::new();
    for i in 0..3_000 {
        yaml.push_str(&format!(
            "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {{name: w{i}, namespace: ns}}\n\
             spec:\n  queueName: lq\n  podSets:\n  - {{name: main, count: 1, template: {{spec: {{containers: \
             [{{name: c, resources: {{requests: {{cpu: '1'}}}}}}]}}}}}}\n"
        ));
    }
    let setup = Setup::from_yaml(&yaml).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(setup.workloads.len(), 3_000);
    // A syntax error names its document and line.
    let broken = format!("{yaml}---\nkind: [unclosed\n");
    let error = Setup::from_yaml(&broken).unwrap_err().to_string();
    assert!(
        error.contains("document 3002") && error.contains("line 24001"),
        "{error}"
    );
}
