//! Renders runtimes annotated for KAI with the plugin registered after the built-ins and asserts the pods'
//! scheduler, queue label and pod-group annotation, and the PodGroup.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use kubetrain_api::{Document, TrainJob, TrainingRuntimeSpec, parse_documents};
use kubetrain_jobset::plugins::Registry;
use kubetrain_jobset::ssh::seeded_rng;
use kubetrain_jobset::{Object, Observed, RenderError, Rendered, render_with_registry};
use kubetrain_plugin_kai::Kai;
use serde_json::json;

/// A torch runtime with `annotations` (a YAML flow map) on its template and `extra` in its spec.
fn runtime(annotations: &str, extra: &str, scheduler: &str) -> TrainingRuntimeSpec {
    let yaml = format!(
        r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {{name: torch-kai}}
spec:
  mlPolicy: {{numNodes: 3, torch: {{}}}}
  {extra}
  template:
    metadata: {{annotations: {annotations}}}
    spec:
      replicatedJobs:
        - name: node
          template:
            metadata: {{labels: {{trainer.kubeflow.org/trainjob-ancestor-step: trainer}}}}
            spec: {{template: {{spec: {{{scheduler} containers: [{{name: node, image: torch}}]}}}}}}
"#
    );
    match parse_documents(&yaml).unwrap().remove(0).document {
        Document::ClusterTrainingRuntime(rt) => rt.spec,
        other => panic!("not a runtime: {other:?}"),
    }
}

fn job() -> TrainJob {
    let yaml = "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\n\
                metadata: {name: mnist, namespace: team-a}\nspec: {runtimeRef: {name: torch-kai}}\n";
    match parse_documents(yaml).unwrap().remove(0).document {
        Document::TrainJob(job) => *job,
        other => panic!("not a TrainJob: {other:?}"),
    }
}

fn render(registry: &Registry, runtime: &TrainingRuntimeSpec) -> Result<Rendered, RenderError> {
    render_with_registry(
        &job(),
        runtime,
        &Observed::default(),
        registry,
        &mut seeded_rng(1),
    )
}

fn with_kai() -> Registry {
    let mut registry = Registry::builtin(&Default::default());
    registry.register(Kai).unwrap();
    registry
}

fn pod(out: &Rendered) -> PodTemplateSpec {
    let jobset = out.objects[0].as_jobset().expect("the JobSet comes first");
    jobset.spec.replicated_jobs[0]
        .template
        .spec
        .as_ref()
        .unwrap()
        .template
        .clone()
}

fn pod_group(out: &Rendered) -> serde_json::Value {
    let found: Vec<_> = out
        .objects
        .iter()
        .filter(|o| o.kind() == "PodGroup")
        .collect();
    assert_eq!(found.len(), 1, "one PodGroup");
    serde_json::to_value(found[0]).unwrap()
}

#[test]
fn kai_runtime_gets_scheduler_queue_and_pod_group() {
    let rt = runtime(
        "{kubetrain.dev/pod-group-policy: kai, kubetrain.dev/kai-queue: research}",
        "",
        "",
    );
    let out = render(&with_kai(), &rt).unwrap();
    let pod = pod(&out);
    assert_eq!(
        pod.spec.as_ref().unwrap().scheduler_name.as_deref(),
        Some("kai-scheduler")
    );
    let meta = pod.metadata.unwrap();
    assert_eq!(meta.labels.unwrap()["kai.scheduler/queue"], "research");
    assert_eq!(meta.annotations.unwrap()["pod-group-name"], "mnist");
    let group = pod_group(&out);
    assert_eq!(group["apiVersion"], "scheduling.run.ai/v2alpha2");
    assert_eq!(group["metadata"]["name"], "mnist");
    assert_eq!(group["metadata"]["namespace"], "team-a");
    assert_eq!(group["spec"], json!({"minMember": 3, "queue": "research"}));
}

#[test]
fn the_queue_defaults_to_kais_default_queue_and_a_kai_scheduler_name_is_kept() {
    let rt = runtime(
        "{kubetrain.dev/pod-group-policy: kai}",
        "",
        "schedulerName: kai-scheduler,",
    );
    let out = render(&with_kai(), &rt).unwrap();
    assert_eq!(pod_group(&out)["spec"]["queue"], "default-queue");
    assert_eq!(
        pod(&out).spec.unwrap().scheduler_name.as_deref(),
        Some("kai-scheduler")
    );
}

#[test]
fn another_scheduler_name_is_refused_with_its_path() {
    let rt = runtime(
        "{kubetrain.dev/pod-group-policy: kai}",
        "",
        "schedulerName: volcano,",
    );
    let error = render(&with_kai(), &rt).unwrap_err();
    assert_eq!(
        error.field_path(),
        "spec.template.spec.replicatedJobs[0].template.spec.template.spec.schedulerName"
    );
    assert!(error.to_string().starts_with("plugin KAI: "), "{error}");
}

#[test]
fn a_runtime_with_a_pod_group_policy_cannot_also_use_kai() {
    let rt = runtime(
        "{kubetrain.dev/pod-group-policy: kai}",
        "podGroupPolicy: {coscheduling: {}}",
        "",
    );
    let error = render(&with_kai(), &rt).unwrap_err();
    assert_eq!(
        error.field_path(),
        "spec.template.metadata.annotations[kubetrain.dev/pod-group-policy]"
    );
}

#[test]
fn a_runtime_without_the_annotation_renders_exactly_as_without_the_plugin() {
    let rt = runtime("{team: a}", "", "");
    let builtin = render(&Registry::builtin(&Default::default()), &rt).unwrap();
    let plugged = render(&with_kai(), &rt).unwrap();
    assert_eq!(builtin.objects, plugged.objects);
    assert!(
        !plugged
            .objects
            .iter()
            .any(|o| matches!(o, Object::Dynamic(_)))
    );
}

#[test]
fn the_webhook_validation_denies_the_same_runtimes_with_their_paths() {
    let registry = with_kai();
    let findings = |rt: &TrainingRuntimeSpec| {
        let info = kubetrain_merge::Info::new(&job(), rt).unwrap();
        registry.plugins().validate(&info, None, &job())
    };
    let both = runtime(
        "{kubetrain.dev/pod-group-policy: kai}",
        "podGroupPolicy: {volcano: {}}",
        "schedulerName: volcano,",
    );
    let paths: Vec<String> = findings(&both).into_iter().map(|f| f.path).collect();
    assert_eq!(
        paths,
        [
            "spec.template.metadata.annotations[kubetrain.dev/pod-group-policy]",
            "spec.template.spec.replicatedJobs[0].template.spec.template.spec.schedulerName",
        ]
    );
    assert!(findings(&runtime("{kubetrain.dev/pod-group-policy: kai}", "", "")).is_empty());
    assert!(findings(&runtime("{}", "", "schedulerName: volcano,")).is_empty());
}

#[test]
fn the_runtime_webhook_refuses_a_kai_runtime_with_a_pod_group_policy_before_any_trainjob_uses_it() {
    let registry = with_kai();
    let both = runtime(
        "{kubetrain.dev/pod-group-policy: kai}",
        "podGroupPolicy: {volcano: {}}",
        "",
    );
    let findings = registry.plugins().validate_runtime(&both);
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert_eq!(
        findings[0].path,
        "spec.template.metadata.annotations[kubetrain.dev/pod-group-policy]"
    );
    assert!(
        findings[0].message.starts_with("plugin KAI: "),
        "{}",
        findings[0].message
    );
    assert!(findings[0].is_error());
    // Without the annotation the plugin has nothing to say about a runtime.
    let plain = runtime("{}", "podGroupPolicy: {volcano: {}}", "");
    assert!(registry.plugins().validate_runtime(&plain).is_empty());
}
