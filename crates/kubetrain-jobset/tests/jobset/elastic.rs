//! Elastic torch (KEP-2903's `mlPolicy.torch.elasticPolicy`, ahead of upstream v2.3): the c10d rendezvous env,
//! the initial size and the JobSet annotations, on the example runtime and TrainJob of examples/manifests; the
//! whole JobSet of the example, less its failure policies, is a golden file (`KUBETRAIN_BLESS=1` rewrites it).

use crate::common::*;
use kubetrain_api::constants::{
    ELASTIC_MAX_NODES_ANNOTATION, ELASTIC_MIN_NODES_ANNOTATION, ELASTIC_REPLICATED_JOB_ANNOTATION,
};

const RUNTIME: &str = include_str!("../../../../examples/manifests/elastic-runtime.yaml");
const TRAINJOB: &str = include_str!("../../../../examples/manifests/elastic-trainjob.yaml");
const GOLDEN: &str = "tests/jobset/elastic-example.jobset.yaml";

fn example(trainjob: &str) -> String {
    format!("{RUNTIME}\n---\n{trainjob}")
}

#[test]
fn the_example_renders_the_c10d_rendezvous_at_its_initial_size() {
    let r = render_yaml(&example(TRAINJOB));
    let js = jobset(&r);
    assert_eq!(
        parallelism(js, "node"),
        (Some(3), Some(3)),
        "numNodes is the initial size"
    );
    let node = container(js, "node", "node");
    let value = |name| env_value(node, name);
    assert_eq!(value("PET_NNODES").as_deref(), Some("2:4"));
    assert_eq!(value("PET_RDZV_BACKEND").as_deref(), Some("c10d"));
    assert_eq!(
        value("PET_RDZV_ENDPOINT").as_deref(),
        Some("elastic-example-node-0-0.elastic-example:29500")
    );
    assert_eq!(
        value("PET_RDZV_ID").as_deref(),
        Some("elastic-example"),
        "no UID offline: the name"
    );
    assert_eq!(value("PET_NPROC_PER_NODE").as_deref(), Some("1"));
    assert!(
        env(node, "PET_NODE_RANK").is_none(),
        "the rendezvous assigns node ranks"
    );
    let annotations = js
        .metadata
        .annotations
        .as_ref()
        .expect("elastic annotations");
    assert_eq!(annotations[ELASTIC_MIN_NODES_ANNOTATION], "2");
    assert_eq!(annotations[ELASTIC_MAX_NODES_ANNOTATION], "4");
    assert_eq!(annotations[ELASTIC_REPLICATED_JOB_ANNOTATION], "node");

    // The failure policies (JobSet `failurePolicy`, Job `podFailurePolicy`) are the failure-budget renderer's,
    // with golden cases of their own; this file pins what the elastic policy renders.
    let mut js = js.clone();
    js.spec.failure_policy = None;
    for rjob in &mut js.spec.replicated_jobs {
        if let Some(spec) = rjob.template.spec.as_mut() {
            spec.pod_failure_policy = None;
        }
    }
    let text = kubetrain_api::to_yaml(&js).expect("a JobSet serialises");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(GOLDEN);
    if std::env::var_os("KUBETRAIN_BLESS").is_some() {
        std::fs::write(&path, &text).expect("write the golden JobSet");
        return;
    }
    let golden = std::fs::read_to_string(&path).expect("the golden JobSet exists");
    assert!(
        golden == text,
        "{GOLDEN} differs from the render (KUBETRAIN_BLESS=1 rewrites it):\n{text}"
    );
}

#[test]
fn the_initial_size_is_numnodes_else_the_runtimes_else_max_nodes() {
    let without = TRAINJOB.replace("    numNodes: 3\n", "");
    let r = render_yaml(&example(&without));
    assert_eq!(
        parallelism(jobset(&r), "node"),
        (Some(4), Some(4)),
        "maxNodes"
    );

    let runtime = RUNTIME.replace("  mlPolicy:\n", "  mlPolicy:\n    numNodes: 2\n");
    let r = render_yaml(&format!("{runtime}\n---\n{without}"));
    assert_eq!(
        parallelism(jobset(&r), "node"),
        (Some(2), Some(2)),
        "the runtime's numNodes"
    );
}

#[test]
fn the_rendezvous_id_is_the_uid_when_there_is_one_and_injection_targets_get_the_env() {
    let with_uid = TRAINJOB.replace(
        "  namespace: default\n",
        "  namespace: default\n  uid: 7d1c0c7e-0000-4000-8000-000000000001\n",
    );
    let runtime = RUNTIME.replace(
        "      elasticPolicy:\n",
        "      envInjection: {targets: [{jobName: node, containerNames: [sidecar]}]}\n      elasticPolicy:\n",
    ).replace(
        "                    - {name: node, image: \"pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime\"}\n",
        "                    - {name: node, image: \"pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime\"}\n                    - {name: sidecar, image: busybox}\n",
    );
    let r = render_yaml(&format!("{runtime}\n---\n{with_uid}"));
    let js = jobset(&r);
    for name in ["node", "sidecar"] {
        let c = container(js, "node", name);
        assert_eq!(
            env_value(c, "PET_RDZV_ID").as_deref(),
            Some("7d1c0c7e-0000-4000-8000-000000000001"),
            "{name}"
        );
        assert_eq!(env_value(c, "PET_NNODES").as_deref(), Some("2:4"), "{name}");
        assert!(env(c, "PET_NODE_RANK").is_none(), "{name}");
    }
}

#[test]
fn without_an_elastic_policy_nothing_changes() {
    let (head, rest) = RUNTIME.split_once("  mlPolicy:\n").expect("an mlPolicy");
    let (_, template) = rest.split_once("  template:\n").expect("a template");
    let runtime = format!("{head}  mlPolicy: {{torch: {{}}}}\n  template:\n{template}");
    let r = render_yaml(&format!("{runtime}\n---\n{TRAINJOB}"));
    let js = jobset(&r);
    let node = container(js, "node", "node");
    assert_eq!(env_value(node, "PET_NNODES").as_deref(), Some("3"));
    assert!(env(node, "PET_NODE_RANK").is_some());
    assert!(env(node, "PET_RDZV_BACKEND").is_none());
    assert!(
        js.metadata.annotations.is_none(),
        "no kubetrain.dev/elastic-* annotations"
    );
}
