//! The plugin API: custom plugins registered beside the built-ins run in the documented order, their objects are
//! rendered, their errors name them; the built-in registry is complete and each built-in keeps to its policy.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ConfigMap;
use kubetrain_api::{FieldError, RuntimeCatalog, TrainJob};
use kubetrain_jobset::object::child_meta;
use kubetrain_jobset::plugins::{BuildContext, ComponentBuilder, Registry, RenderPlugin};
use kubetrain_jobset::{
    DynamicObject, Object, Observed, RenderError, RenderOptions, StatusServerAddress,
    TrainJobStatusOptions, builtin, render, render_with_registry, resolve, ssh::seeded_rng,
};
use kubetrain_merge::plugins::{
    CustomValidation, EnforceMlPolicy, EnforcePodGroupPolicy, EnforcePodSpec, Plugin,
    PreComponentBuilder,
};
use kubetrain_merge::{Info, MergeError};

use crate::common::load;

const GANG_LABEL: &str = "toy.example.com/gang";

/// A toy gang scheduler: a label on every pod and a ConfigMap with the gang size.
struct ToyGang;

impl Plugin for ToyGang {
    fn name(&self) -> &str {
        "ToyGang"
    }
    fn pod_group_policy(&self) -> Option<&dyn EnforcePodGroupPolicy> {
        Some(self)
    }
}

impl EnforcePodGroupPolicy for ToyGang {
    fn enforce_pod_group_policy(&self, info: &mut Info, job: &TrainJob) -> Result<(), MergeError> {
        info.scheduler
            .pod_labels
            .insert(GANG_LABEL.to_owned(), job.name().to_owned());
        Ok(())
    }
}

impl RenderPlugin for ToyGang {
    fn component_builder(&self) -> Option<&dyn ComponentBuilder> {
        Some(self)
    }
}

impl ComponentBuilder for ToyGang {
    fn build(
        &self,
        info: &Info,
        job: &TrainJob,
        _: &mut BuildContext<'_>,
    ) -> Result<Vec<Object>, RenderError> {
        // Counts are final here: every ML policy ran before.
        let members: i32 = info.pod_sets.iter().map(|p| p.count).sum();
        Ok(vec![Object::ConfigMap(Box::new(ConfigMap {
            metadata: child_meta(job, format!("{}-toy-gang", job.name())),
            data: Some(BTreeMap::from([(
                "members".to_owned(),
                members.to_string(),
            )])),
            ..Default::default()
        }))])
    }
}

/// Logs every extension point it is called at as `<name> <phase>`.
struct Recorder {
    name: &'static str,
    log: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    fn record(&self, phase: &str) {
        self.log
            .lock()
            .unwrap()
            .push(format!("{} {phase}", self.name));
    }
}

impl Plugin for Recorder {
    fn name(&self) -> &str {
        self.name
    }
    fn ml_policy(&self) -> Option<&dyn EnforceMlPolicy> {
        Some(self)
    }
    fn pod_group_policy(&self) -> Option<&dyn EnforcePodGroupPolicy> {
        Some(self)
    }
    fn pod_spec(&self) -> Option<&dyn EnforcePodSpec> {
        Some(self)
    }
    fn pre_component_builder(&self) -> Option<&dyn PreComponentBuilder> {
        Some(self)
    }
    fn custom_validation(&self) -> Option<&dyn CustomValidation> {
        Some(self)
    }
}

impl EnforceMlPolicy for Recorder {
    fn enforce_ml_policy(&self, _: &mut Info, _: &TrainJob) -> Result<(), MergeError> {
        self.record("ml-policy");
        Ok(())
    }
}

impl EnforcePodGroupPolicy for Recorder {
    fn enforce_pod_group_policy(&self, _: &mut Info, _: &TrainJob) -> Result<(), MergeError> {
        self.record("pod-group-policy");
        Ok(())
    }
}

impl EnforcePodSpec for Recorder {
    fn enforce_pod_spec(&self, _: &mut Info, _: &TrainJob) -> Result<(), MergeError> {
        self.record("pod-spec");
        Ok(())
    }
}

impl PreComponentBuilder for Recorder {
    fn pre_build(&self, info: &mut Info, _: &TrainJob) -> Result<(), MergeError> {
        // After the JobSet plugin's own pre-build: parallelism already follows the counts.
        let parallelism = info.spec.replicated_jobs[0]
            .template
            .spec
            .as_ref()
            .and_then(|s| s.parallelism);
        self.record(&format!("pre-build parallelism={parallelism:?}"));
        Ok(())
    }
}

impl CustomValidation for Recorder {
    fn validate(&self, _: &Info, _: Option<&TrainJob>, _: &TrainJob) -> Vec<FieldError> {
        self.record("validate");
        vec![FieldError::warning("spec.trainer", "recorded")]
    }
}

impl RenderPlugin for Recorder {
    fn component_builder(&self) -> Option<&dyn ComponentBuilder> {
        Some(self)
    }
}

impl ComponentBuilder for Recorder {
    fn build(
        &self,
        _: &Info,
        _: &TrainJob,
        _: &mut BuildContext<'_>,
    ) -> Result<Vec<Object>, RenderError> {
        self.record("build");
        Ok(Vec::new())
    }
}

/// Fails at one extension point with a field path.
struct Failing {
    at_build: bool,
}

impl Plugin for Failing {
    fn name(&self) -> &str {
        "Failing"
    }
    fn ml_policy(&self) -> Option<&dyn EnforceMlPolicy> {
        Some(self)
    }
}

impl EnforceMlPolicy for Failing {
    fn enforce_ml_policy(&self, _: &mut Info, _: &TrainJob) -> Result<(), MergeError> {
        if self.at_build {
            return Ok(());
        }
        Err(MergeError::Invalid {
            path: "spec.trainer.numNodes".to_owned(),
            message: "must be even".to_owned(),
        })
    }
}

impl RenderPlugin for Failing {
    fn component_builder(&self) -> Option<&dyn ComponentBuilder> {
        Some(self)
    }
}

impl ComponentBuilder for Failing {
    fn build(
        &self,
        _: &Info,
        _: &TrainJob,
        _: &mut BuildContext<'_>,
    ) -> Result<Vec<Object>, RenderError> {
        Err(RenderError::Merge(MergeError::Invalid {
            path: "spec.trainer".to_owned(),
            message: "no gang fits".to_owned(),
        }))
    }
}

const TORCH_JOB: &str = "
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: mnist, namespace: default, uid: u-1}
spec:
  runtimeRef: {name: torch-distributed}
  trainer: {numNodes: 3}
";

fn torch_job() -> (RuntimeCatalog, TrainJob) {
    let mut catalog = builtin::catalog();
    let job = load(TORCH_JOB, &mut catalog).remove(0);
    (catalog, job)
}

fn render_registry(registry: &Registry) -> Result<kubetrain_jobset::Rendered, RenderError> {
    let (catalog, job) = torch_job();
    let runtime = resolve(&catalog, &job).unwrap();
    render_with_registry(
        &job,
        runtime,
        &Observed::default(),
        registry,
        &mut seeded_rng(1),
    )
}

#[test]
fn a_custom_pod_group_plugin_beside_the_builtins_labels_pods_and_adds_a_companion() {
    let mut registry = Registry::builtin(&RenderOptions::default());
    registry.register(ToyGang).unwrap();
    let r = render_registry(&registry).unwrap();

    let names: Vec<(&str, &str)> = r.objects.iter().map(|o| (o.kind(), o.name())).collect();
    assert_eq!(
        names,
        [("JobSet", "mnist"), ("ConfigMap", "mnist-toy-gang")]
    );
    let Object::ConfigMap(cm) = &r.objects[1] else {
        panic!("the companion is a ConfigMap");
    };
    assert_eq!(
        cm.data.as_ref().unwrap()["members"],
        "3",
        "built after Torch applied numNodes"
    );
    assert_eq!(
        cm.metadata.owner_references.as_ref().unwrap()[0].name,
        "mnist"
    );
    let jobset = r.objects[0].as_jobset().unwrap();
    let labels = jobset.spec.replicated_jobs[0]
        .template
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .as_ref()
        .unwrap();
    assert_eq!(labels[GANG_LABEL], "mnist");
}

#[test]
fn extension_points_run_phase_by_phase_in_registration_order() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut registry = Registry::builtin(&RenderOptions::default());
    for name in ["A", "B"] {
        registry
            .register(Recorder {
                name,
                log: log.clone(),
            })
            .unwrap();
    }
    render_registry(&registry).unwrap();
    let (catalog, job) = torch_job();
    let info = Info::new(&job, resolve(&catalog, &job).unwrap()).unwrap();
    let findings = registry.plugins().validate(&info, None, &job);

    assert_eq!(
        *log.lock().unwrap(),
        [
            "A ml-policy",
            "B ml-policy",
            "A pod-group-policy",
            "B pod-group-policy",
            "A pod-spec",
            "B pod-spec",
            "A pre-build parallelism=Some(3)",
            "B pre-build parallelism=Some(3)",
            "A build",
            "B build",
            "A validate",
            "B validate",
        ]
    );
    let messages: Vec<&str> = findings.iter().map(|f| f.message.as_str()).collect();
    assert_eq!(messages, ["plugin A: recorded", "plugin B: recorded"]);
}

#[test]
fn errors_of_every_phase_name_their_plugin_and_keep_the_field_path() {
    let mut registry = Registry::builtin(&RenderOptions::default());
    registry.register(Failing { at_build: false }).unwrap();
    let err = render_registry(&registry).unwrap_err();
    assert_eq!(
        err.to_string(),
        "plugin Failing: spec.trainer.numNodes: must be even"
    );
    assert_eq!(err.plugin(), Some("Failing"));
    assert_eq!(err.field_path(), "spec.trainer.numNodes");
    assert_eq!(err.message(), "plugin Failing: must be even");

    let mut registry = Registry::builtin(&RenderOptions::default());
    registry.register(Failing { at_build: true }).unwrap();
    let err = render_registry(&registry).unwrap_err();
    assert_eq!(
        err.to_string(),
        "plugin Failing: spec.trainer: no gang fits"
    );
    assert_eq!(err.field_path(), "spec.trainer");
}

#[test]
fn a_builtin_plugin_error_names_the_builtin() {
    let yaml = "
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: mpi-unset}
spec:
  mlPolicy: {numNodes: 1, mpi: {mpiImplementation: ''}}
  template:
    spec:
      replicatedJobs:
        - name: launcher
          template:
            metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
            spec: {template: {spec: {containers: [{name: node, image: x}]}}}
        - name: node
          template: {spec: {template: {spec: {containers: [{name: node, image: x}]}}}}
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: j}
spec: {runtimeRef: {name: mpi-unset}}
";
    let mut catalog = RuntimeCatalog::new();
    let job = load(yaml, &mut catalog).remove(0);
    let runtime = resolve(&catalog, &job).unwrap();
    let err = render(&job, runtime, &Observed::default(), &mut seeded_rng(1)).unwrap_err();
    assert_eq!(err.plugin(), Some("MPI"));
    assert!(
        err.to_string()
            .starts_with("plugin MPI: runtime mlPolicy.mpi.mpiImplementation: "),
        "{err}"
    );
    assert_eq!(err.field_path(), "runtime mlPolicy.mpi.mpiImplementation");
}

#[test]
fn a_second_plugin_of_the_same_name_is_refused() {
    let mut registry = Registry::builtin(&RenderOptions::default());
    let before = registry.plugins().iter().count();
    let err = registry
        .register(kubetrain_merge::plugins::mpi::Mpi)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "plugin MPI is already registered; plugin names must be unique"
    );
    assert_eq!(registry.plugins().iter().count(), before);
}

fn names(registry: &Registry) -> Vec<&str> {
    registry.plugins().iter().map(|p| p.name()).collect()
}

#[test]
fn the_builtin_registry_holds_every_builtin_in_the_merge_crates_order_then_the_jobset() {
    let plain = Registry::builtin(&RenderOptions::default());
    let merge_names: Vec<String> = kubetrain_merge::plugins::Registry::builtin(&Default::default())
        .iter()
        .map(|p| p.name().to_owned())
        .collect();
    let mut expected: Vec<&str> = merge_names.iter().map(String::as_str).collect();
    expected.push("JobSet");
    assert_eq!(names(&plain), expected);
    assert_eq!(
        expected,
        [
            "PlainML",
            "Torch",
            "MPI",
            "JAX",
            "XGBoost",
            "Flux",
            "CoScheduling",
            "Volcano",
            "JobSet"
        ]
    );

    let status = RenderOptions {
        trainjob_status: Some(TrainJobStatusOptions {
            server: StatusServerAddress::default(),
            ca_cert: "CA".into(),
        }),
    };
    let with_status = Registry::builtin(&status);
    assert_eq!(names(&with_status)[8..], ["TrainJobStatus", "JobSet"]);
}

#[test]
fn builtins_registered_by_hand_around_a_custom_plugin_render_like_the_builtin_registry() {
    use kubetrain_jobset::plugins::JobSetPlugin;
    use kubetrain_merge::plugins::{
        coscheduling::Coscheduling, flux::Flux, jax::Jax, mpi::Mpi, plainml::PlainMl, torch::Torch,
        volcano::Volcano, xgboost::Xgboost,
    };
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut registry = Registry::new();
    registry
        .register(Recorder {
            name: "First",
            log: log.clone(),
        })
        .unwrap()
        .register(PlainMl)
        .unwrap()
        .register(Torch)
        .unwrap()
        .register(Mpi)
        .unwrap()
        .register(Jax)
        .unwrap()
        .register(Xgboost)
        .unwrap()
        .register(Flux)
        .unwrap()
        .register(Coscheduling)
        .unwrap()
        .register(Volcano)
        .unwrap()
        .register(JobSetPlugin)
        .unwrap();
    let by_hand = render_registry(&registry).unwrap();
    let builtin = render_registry(&Registry::builtin(&RenderOptions::default())).unwrap();
    assert_eq!(by_hand, builtin);
    assert_eq!(log.lock().unwrap()[0], "First ml-policy");
}

#[test]
fn the_builtin_registry_renders_exactly_what_render_does() {
    let (catalog, job) = torch_job();
    let runtime = resolve(&catalog, &job).unwrap();
    let observed = Observed::default();
    let ours = render_with_registry(
        &job,
        runtime,
        &observed,
        &Registry::builtin(&RenderOptions::default()),
        &mut seeded_rng(1),
    )
    .unwrap();
    let theirs = render(&job, runtime, &observed, &mut seeded_rng(1)).unwrap();
    assert_eq!(ours, theirs);
    // An empty registry runs no plugin: the info is the runtime's, and nothing is built.
    let empty = render_with_registry(
        &job,
        runtime,
        &observed,
        &Registry::new(),
        &mut seeded_rng(1),
    )
    .unwrap();
    assert!(empty.objects.is_empty());
    assert_eq!(
        empty.info.pod_sets[0].count, 1,
        "no plugin applied numNodes"
    );
}

const POD_GROUP_RUNTIMES: &str = "
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: plain-coscheduled}
spec:
  podGroupPolicy: {coscheduling: {}}
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
            spec: {template: {spec: {containers: [{name: node, image: x}]}}}
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: plain-volcano}
spec:
  podGroupPolicy: {volcano: {}}
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
            spec: {template: {spec: {containers: [{name: node, image: x}]}}}
";

/// Which runtimes' policies a built-in owns, by the policy's name in the runtime.
fn owns(plugin: &str, ml: Option<&str>, pod_group: Option<&str>) -> bool {
    match plugin {
        "PlainML" => matches!(ml, None | Some("flux")),
        "Torch" => ml == Some("torch"),
        "MPI" => ml == Some("mpi"),
        "JAX" => ml == Some("jax"),
        "XGBoost" => ml == Some("xgboost"),
        "Flux" => ml == Some("flux"),
        "CoScheduling" => pod_group == Some("coscheduling"),
        "Volcano" => pod_group == Some("volcano"),
        other => panic!("unexpected built-in {other}"),
    }
}

fn policy_names(info: &Info) -> (Option<&'static str>, Option<&'static str>) {
    use kubetrain_api::{MLPolicySource as M, PodGroupPolicySource as G};
    let ml = info.ml_source().map(|s| match s {
        M::Torch(_) => "torch",
        M::Mpi(_) => "mpi",
        M::Jax(_) => "jax",
        M::Xgboost(_) => "xgboost",
        M::Flux(_) => "flux",
    });
    let pg = info
        .pod_group_policy
        .as_ref()
        .and_then(|p| p.source.as_ref())
        .map(|s| match s {
            G::Coscheduling(_) => "coscheduling",
            G::Volcano(_) => "volcano",
        });
    (ml, pg)
}

#[test]
fn each_builtin_leaves_runtimes_of_other_policies_untouched() {
    let mut catalog = builtin::catalog();
    load(POD_GROUP_RUNTIMES, &mut catalog);
    let registry = kubetrain_merge::plugins::Registry::builtin(&Default::default());
    let runtimes: Vec<String> = catalog.cluster_names().map(str::to_owned).collect();
    let mut owned = 0;
    for runtime_name in &runtimes {
        let yaml = format!(
            "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: j}}\n\
             spec: {{runtimeRef: {{name: {runtime_name}}}, trainer: {{numNodes: 2, env: [{{name: A, value: b}}]}}}}\n"
        );
        let job = load(&yaml, &mut RuntimeCatalog::new()).remove(0);
        let runtime = resolve(&catalog, &job).unwrap();
        let fresh = Info::new(&job, runtime).unwrap();
        let (ml, pg) = policy_names(&fresh);
        for plugin in registry.iter() {
            let mut info = fresh.clone();
            if let Some(p) = plugin.ml_policy() {
                p.enforce_ml_policy(&mut info, &job).unwrap();
            }
            if let Some(p) = plugin.pod_group_policy() {
                p.enforce_pod_group_policy(&mut info, &job).unwrap();
            }
            if owns(plugin.name(), ml, pg) {
                owned += 1;
                assert!(info != fresh, "{} changes {runtime_name}", plugin.name());
            } else {
                // Not assert_eq!: the two infos would fill the screen.
                assert!(
                    info == fresh,
                    "{} must leave {runtime_name} alone",
                    plugin.name()
                );
            }
        }
    }
    assert!(owned >= runtimes.len(), "every runtime has an owner");
}

/// Builds a KAI-style PodGroup, a kind this crate has no type for.
struct AnyKind;

impl Plugin for AnyKind {
    fn name(&self) -> &str {
        "AnyKind"
    }
}

impl RenderPlugin for AnyKind {
    fn component_builder(&self) -> Option<&dyn ComponentBuilder> {
        Some(self)
    }
}

impl ComponentBuilder for AnyKind {
    fn build(
        &self,
        _: &Info,
        job: &TrainJob,
        _: &mut BuildContext<'_>,
    ) -> Result<Vec<Object>, RenderError> {
        let spec = serde_json::json!({"spec": {"minMember": 3, "queue": "team-a"}});
        let serde_json::Value::Object(fields) = spec else {
            unreachable!("a JSON object literal")
        };
        let pod_group = DynamicObject::new(
            "scheduling.run.ai/v2alpha2",
            "PodGroup",
            child_meta(job, job.name().to_owned()),
            fields,
        )
        .map_err(|e| {
            RenderError::Merge(MergeError::Invalid {
                path: "spec".to_owned(),
                message: e.to_string(),
            })
        })?;
        Ok(vec![Object::Dynamic(Box::new(pod_group))])
    }
}

#[test]
fn a_plugin_builds_objects_of_any_kind_sorted_and_printed_like_the_others() {
    let mut registry = Registry::builtin(&RenderOptions::default());
    registry.register(AnyKind).unwrap();
    registry.register(ToyGang).unwrap();
    let r = render_registry(&registry).unwrap();
    let names: Vec<(&str, &str, &str)> = r
        .objects
        .iter()
        .map(|o| (o.api_version(), o.kind(), o.name()))
        .collect();
    assert_eq!(
        names,
        [
            ("jobset.x-k8s.io/v1alpha2", "JobSet", "mnist"),
            ("scheduling.run.ai/v2alpha2", "PodGroup", "mnist"),
            ("v1", "ConfigMap", "mnist-toy-gang"),
        ]
    );
    let json = serde_json::to_value(&r.objects[1]).unwrap();
    assert_eq!(json["apiVersion"], "scheduling.run.ai/v2alpha2");
    assert_eq!(json["kind"], "PodGroup");
    assert_eq!(json["metadata"]["ownerReferences"][0]["kind"], "TrainJob");
    assert_eq!(json["spec"]["queue"], "team-a");
}

#[test]
fn a_dynamic_object_refuses_empty_identities_and_repeated_reserved_fields() {
    let meta = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta::default;
    let fields = |key: &str| {
        let mut m = serde_json::Map::new();
        m.insert(key.to_owned(), serde_json::json!({}));
        m
    };
    let err = DynamicObject::new("", "PodGroup", meta(), fields("spec")).unwrap_err();
    assert_eq!(err.to_string(), "apiVersion: must not be empty");
    let err = DynamicObject::new("v1", "", meta(), fields("spec")).unwrap_err();
    assert_eq!(err.to_string(), "kind: must not be empty");
    let err = DynamicObject::new("v1", "Thing", meta(), fields("kind")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "kind: is given by its own argument; remove it from the fields"
    );
    assert!(DynamicObject::new("v1", "Thing", meta(), fields("spec")).is_ok());

    let err = DynamicObject::from_value(serde_json::json!({"kind": "Thing"})).unwrap_err();
    assert_eq!(err.to_string(), "apiVersion: must be a string");
    let err = DynamicObject::from_value(serde_json::json!([1])).unwrap_err();
    assert_eq!(err.to_string(), "(root): must be a JSON object");
    let err = DynamicObject::from_value(
        serde_json::json!({"apiVersion": "v1", "kind": "Thing", "metadata": {"name": 3}}),
    )
    .unwrap_err();
    assert!(err.to_string().starts_with("metadata: "), "{err}");
}

#[test]
fn a_dynamic_object_from_json_prints_as_the_json_it_came_from() {
    let value = serde_json::json!({
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "mnist", "namespace": "default"},
        "spec": {"minMember": 3},
    });
    let object = Object::Dynamic(Box::new(DynamicObject::from_value(value.clone()).unwrap()));
    assert_eq!(object.api_version(), "scheduling.run.ai/v2alpha2");
    assert_eq!(object.name(), "mnist");
    assert_eq!(serde_json::to_value(&object).unwrap(), value);
}
