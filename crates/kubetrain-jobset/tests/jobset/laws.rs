//! Laws of rendering: render is deterministic (byte-identical YAML for the same inputs and seed), and counts and
//! env do not depend on the order of the enforce phases.

use crate::common;
use kubetrain_api::{RuntimeCatalog, TrainJob};
use kubetrain_jobset::{Observed, builtin, render, resolve, ssh::seeded_rng};
use kubetrain_merge::Info;
use kubetrain_merge::plugins::Registry;
use proptest::prelude::*;

const RUNTIMES: [&str; 6] = [
    "torch-distributed",
    "deepspeed-distributed",
    "jax-distributed",
    "xgboost-distributed",
    "torchtune-llama3.2-1b",
    "coscheduled",
];

const COSCHEDULED: &str = "
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: coscheduled}
spec:
  mlPolicy: {numNodes: 2, mpi: {numProcPerNode: 1}}
  podGroupPolicy: {coscheduling: {}}
  template:
    spec:
      replicatedJobs:
        - name: launcher
          template:
            metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
            spec: {template: {spec: {containers: [{name: node, image: x, resources: {requests: {cpu: '1'}}}]}}}
        - name: node
          template: {spec: {template: {spec: {containers: [{name: node, image: x, resources: {requests: {cpu: 250m}}}]}}}}
";

fn catalog() -> RuntimeCatalog {
    let mut catalog = builtin::catalog();
    common::load(COSCHEDULED, &mut catalog);
    catalog
}

fn job() -> impl Strategy<Value = String> {
    (
        prop::sample::select(RUNTIMES.to_vec()),
        prop::option::of(0i32..12),
        prop::option::of(1i32..5),
        prop::option::of(0u8..5),
        prop::collection::btree_map("[A-Z]{1,4}", "[a-z0-9]{0,4}", 0..3),
        any::<bool>(),
        prop::bool::ANY,
    )
        .prop_map(|(runtime, nodes, procs, gpus, env, suspend, tune)| {
            let mut trainer = Vec::new();
            if let Some(n) = nodes {
                trainer.push(format!("numNodes: {n}"));
            }
            if let Some(p) = procs {
                trainer.push(format!("numProcPerNode: {p}"));
            }
            if let Some(g) = gpus {
                trainer.push(format!("resourcesPerNode: {{limits: {{nvidia.com/gpu: '{g}'}}}}"));
            }
            if tune && runtime.starts_with("torchtune") {
                trainer.push("command: [tune, run]".to_owned());
            }
            let env: Vec<String> = env.iter().map(|(k, v)| format!("{{name: X{k}, value: '{v}'}}")).collect();
            trainer.push(format!("env: [{}]", env.join(", ")));
            format!(
                "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: law, namespace: ns}}\n\
                 spec:\n  runtimeRef: {{name: {runtime}}}\n  suspend: {suspend}\n  trainer: {{{}}}\n",
                trainer.join(", ")
            )
        })
}

fn parse(yaml: &str, catalog: &mut RuntimeCatalog) -> TrainJob {
    common::load(yaml, catalog).remove(0)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn render_is_deterministic(yaml in job(), seed in any::<u64>()) {
        let mut catalog = catalog();
        let job = parse(&yaml, &mut catalog);
        let runtime = resolve(&catalog, &job).unwrap();
        let text = |seed| {
            let r = render(&job, runtime, &Observed::default(), &mut seeded_rng(seed)).unwrap();
            r.objects.iter().map(|o| kubetrain_yaml::to_string(&serde_json::to_value(o).unwrap())).collect::<Vec<_>>().join("---\n")
        };
        prop_assert_eq!(text(seed), text(seed));
    }

    #[test]
    fn counts_and_env_do_not_depend_on_phase_order(yaml in job()) {
        let mut catalog = catalog();
        let job = parse(&yaml, &mut catalog);
        let runtime = resolve(&catalog, &job).unwrap();
        let run = |ml_first: bool| -> Info {
            let mut info = Info::new(&job, runtime).unwrap();
            let registry = Registry::builtin(&Default::default());
            let ml = |info: &mut Info| {
                for p in registry.iter().filter_map(|p| p.ml_policy()) {
                    p.enforce_ml_policy(info, &job).unwrap();
                }
            };
            if ml_first {
                ml(&mut info);
            }
            for p in registry.iter().filter_map(|p| p.pod_group_policy()) {
                p.enforce_pod_group_policy(&mut info, &job).unwrap();
            }
            if !ml_first {
                ml(&mut info);
            }
            info
        };
        prop_assert_eq!(run(true), run(false));
    }
}
