//! An embedder's render plugins in the operator: `Operator::plugin` reaches every render of the controller
//! (pod labels on the JobSet, companions applied with the TrainJob as owner, by server-side apply) and the
//! admission webhook runs their `CustomValidation`, denying with the plugin's field path; a plugin's own kind
//! listed in `Settings::owned_kinds` is watched, and a change to an object reconciles the TrainJob owning it.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kubetrain_api::{FieldError, TrainJob, TrainingRuntimeSpec};
use kubetrain_controller::webhook::{Admission, Route};
use kubetrain_controller::{Operator, OperatorError, Settings};
use kubetrain_jobset::object::{DynamicObject, child_meta};
use kubetrain_jobset::plugins::{BuildContext, ComponentBuilder, Registry, RenderPlugin};
use kubetrain_jobset::{Object, RenderError, RenderOptions};
use kubetrain_merge::plugins::{CustomValidation, EnforcePodGroupPolicy, Plugin};
use kubetrain_merge::{Info, MergeError};
use kubetrain_test_support::fixtures::trainjob;
use kubetrain_test_support::{FakeApiServer, insert_builtin_runtimes};
use serde_json::{Value, json};

use crate::support::wait_for;

const NS: &str = "team-a";
const GANG_LABEL: &str = "toy.example.com/gang";
/// How long one step may take before the test gives up (generous: the machine may be loaded).
const PATIENCE: Duration = Duration::from_secs(120);

/// A toy gang scheduler: a label on every pod, a ConfigMap with the gang size and a `Gang` of its own kind.
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
            .insert(GANG_LABEL.into(), job.name().into());
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
        let members: i32 = info.pod_sets.iter().map(|p| p.count).sum();
        let mut cm = ConfigMap {
            metadata: child_meta(job, format!("{}-gang", job.name())),
            ..ConfigMap::default()
        };
        cm.data = Some([("members".to_owned(), members.to_string())].into());
        let fields = json!({"spec": {"members": members}});
        let Value::Object(fields) = fields else {
            unreachable!()
        };
        let gang = DynamicObject::new(
            "toy.example.com/v1",
            "Gang",
            child_meta(job, job.name().to_owned()),
            fields,
        )
        .expect("a valid object");
        Ok(vec![
            Object::ConfigMap(Box::new(cm)),
            Object::Dynamic(Box::new(gang)),
        ])
    }
}

/// Refuses TrainJobs of more than four nodes, naming the field.
struct MaxNodes;

impl Plugin for MaxNodes {
    fn name(&self) -> &str {
        "MaxNodes"
    }

    fn custom_validation(&self) -> Option<&dyn CustomValidation> {
        Some(self)
    }
}

impl RenderPlugin for MaxNodes {}

impl CustomValidation for MaxNodes {
    fn validate(&self, _: &Info, _: Option<&TrainJob>, new: &TrainJob) -> Vec<FieldError> {
        match new.spec.trainer.as_ref().and_then(|t| t.num_nodes) {
            Some(n) if n > 4 => vec![FieldError::error(
                "spec.trainer.numNodes",
                format!("{n} nodes; this cluster runs at most 4 per TrainJob: lower numNodes"),
            )],
            _ => Vec::new(),
        }
    }

    /// A runtime whose own default is over the limit is refused before any TrainJob uses it.
    fn validate_runtime(&self, runtime: &TrainingRuntimeSpec) -> Vec<FieldError> {
        match runtime.ml_policy.as_ref().and_then(|p| p.num_nodes) {
            Some(n) if n > 4 => vec![FieldError::error(
                "spec.mlPolicy.numNodes",
                format!("{n} nodes by default; this cluster runs at most 4 per TrainJob"),
            )],
            _ => Vec::new(),
        }
    }
}

fn train_job(name: &str, num_nodes: i64) -> Value {
    trainjob(name)
        .namespace(NS)
        .uid(&format!("uid-{name}"))
        .num_nodes(num_nodes)
        .json()
}

/// The owner reference a companion of TrainJob `name` carries.
fn owned_by(object: &Value, name: &str) -> bool {
    let owner = &object["metadata"]["ownerReferences"][0];
    owner["kind"] == "TrainJob"
        && owner["name"] == name
        && owner["uid"] == format!("uid-{name}")
        && owner["controller"] == true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_plugin_labels_the_pods_and_its_companions_are_applied_owned_by_the_trainjob() {
    let server = FakeApiServer::start();
    insert_builtin_runtimes(&server);
    server.insert(train_job("mnist", 3));
    server.record_requests();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = Operator::new(Settings::default())
        .plugin(ToyGang)
        .shutdown_on(async move {
            let _ = stopped.await;
        })
        .start(server.client())
        .await
        .unwrap();

    wait_for("the JobSet and the plugin's companions", PATIENCE, || {
        server
            .get("jobset.x-k8s.io/v1alpha2", "jobsets", NS, "mnist")
            .is_some()
    })
    .await;
    let jobset = server
        .get("jobset.x-k8s.io/v1alpha2", "jobsets", NS, "mnist")
        .unwrap();
    let pod_labels =
        &jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["labels"];
    assert_eq!(pod_labels[GANG_LABEL], "mnist", "{jobset:#}");

    // Companions are applied before the JobSet, so they are stored by now.
    let cm = server.get("v1", "configmaps", NS, "mnist-gang").unwrap();
    assert_eq!(cm["data"]["members"], "3");
    assert!(owned_by(&cm, "mnist"), "{cm:#}");
    let gang = server
        .get("toy.example.com/v1", "gangs", NS, "mnist")
        .unwrap();
    assert_eq!(gang["kind"], "Gang");
    assert_eq!(gang["spec"]["members"], 3);
    assert!(owned_by(&gang, "mnist"), "{gang:#}");
    // By server-side apply with the controller's field manager, like the built-in companions.
    let gang_apply = server
        .requests()
        .into_iter()
        .find(|r| r.method == "PATCH" && r.uri.contains("/gangs/mnist"))
        .expect("the Gang is applied");
    assert!(
        gang_apply
            .content_type
            .starts_with("application/apply-patch"),
        "{gang_apply:?}"
    );
    assert!(
        gang_apply
            .uri
            .starts_with("/apis/toy.example.com/v1/namespaces/team-a/gangs/mnist?"),
        "{gang_apply:?}"
    );
    assert!(
        gang_apply
            .uri
            .contains("fieldManager=trainer.kubeflow.org/kubetrain"),
        "{gang_apply:?}"
    );

    let _ = stop.send(());
    tokio::time::timeout(PATIENCE, running.wait())
        .await
        .expect("the operator stops")
        .unwrap();
}

#[tokio::test]
async fn a_plugin_named_like_a_built_in_is_refused_before_the_cluster_is_contacted() {
    struct Impostor;
    impl Plugin for Impostor {
        fn name(&self) -> &str {
            "MPI"
        }
    }
    impl RenderPlugin for Impostor {}

    let server = FakeApiServer::start();
    server.record_requests();
    let error = Operator::new(Settings::default())
        .plugin(Impostor)
        .start(server.client())
        .await
        .unwrap_err();
    assert!(matches!(error, OperatorError::Plugin(_)), "{error}");
    assert_eq!(
        error.to_string(),
        "Operator::plugin: plugin MPI is already registered; plugin names must be unique"
    );
    assert!(server.requests().is_empty(), "{:?}", server.requests());
}

fn create_review(object: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"},
            "resource": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "resource": "trainjobs"},
            "name": object["metadata"]["name"],
            "namespace": NS,
            "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": object,
        }
    }))
    .unwrap()
}

#[tokio::test]
async fn the_webhook_denies_with_a_validation_plugins_field_path() {
    let api = FakeApiServer::start();
    insert_builtin_runtimes(&api);
    let mut plugins = Registry::builtin(&RenderOptions::default());
    plugins.register(MaxNodes).unwrap();
    let admission = Admission::new(api.client()).with_plugins(Arc::new(plugins));

    let review = |object| async {
        let answer = admission
            .review(Route::ValidateTrainJob, &create_review(object))
            .await
            .unwrap();
        serde_json::to_value(answer).unwrap()["response"].clone()
    };
    let denied = review(train_job("big", 8)).await;
    assert_eq!(denied["allowed"], false, "{denied:#}");
    assert_eq!(denied["status"]["code"], 403, "{denied:#}");
    assert_eq!(
        denied["status"]["message"],
        "spec.trainer.numNodes: plugin MaxNodes: 8 nodes; this cluster runs at most 4 per TrainJob: lower numNodes"
    );
    let allowed = review(train_job("small", 4)).await;
    assert_eq!(allowed["allowed"], true, "{allowed:#}");

    // Without the plugin the same TrainJob is admitted: the denial is the plugin's.
    let plain = Admission::new(api.client());
    let answer = plain
        .review(Route::ValidateTrainJob, &create_review(train_job("big", 8)))
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(answer).unwrap()["response"]["allowed"],
        true
    );
}

/// The response to a ClusterTrainingRuntime create review of `object`.
async fn review_runtime(admission: &Admission, object: Value) -> Value {
    let mut body: Value = serde_json::from_slice(&create_review(object)).unwrap();
    body["request"]["kind"]["kind"] = json!("ClusterTrainingRuntime");
    body["request"]["resource"]["resource"] = json!("clustertrainingruntimes");
    body["request"]["namespace"] = Value::Null;
    let answer = admission
        .review(
            Route::ValidateClusterTrainingRuntime,
            &serde_json::to_vec(&body).unwrap(),
        )
        .await
        .unwrap();
    serde_json::to_value(answer).unwrap()["response"].clone()
}

#[tokio::test]
async fn the_runtime_webhook_denies_with_a_validation_plugins_field_path() {
    let api = FakeApiServer::start();
    let mut plugins = Registry::builtin(&RenderOptions::default());
    plugins.register(MaxNodes).unwrap();
    let admission = Admission::new(api.client()).with_plugins(Arc::new(plugins));
    let runtime = |nodes: i64| {
        json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "ClusterTrainingRuntime",
            "metadata": {"name": format!("torch-{nodes}")},
            "spec": {
                "mlPolicy": {"numNodes": nodes, "torch": {}},
                "template": {"spec": {"replicatedJobs": [{
                    "name": "node",
                    "template": {
                        "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                        "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "torch"}]}}},
                    },
                }]}},
            },
        })
    };
    let denied = review_runtime(&admission, runtime(8)).await;
    assert_eq!(denied["allowed"], false, "{denied:#}");
    assert_eq!(
        denied["status"]["message"],
        "spec.mlPolicy.numNodes: plugin MaxNodes: 8 nodes by default; this cluster runs at most 4 per TrainJob"
    );
    let allowed = review_runtime(&admission, runtime(4)).await;
    assert_eq!(allowed["allowed"], true, "{allowed:#}");
    // Without the plugin the same runtime is admitted: the denial is the plugin's.
    let plain = Admission::new(api.client());
    let answer = review_runtime(&plain, runtime(8)).await;
    assert_eq!(answer["allowed"], true, "{answer:#}");
}

/// A self-signed `localhost` certificate in a directory for `Operator::webhooks`, and a TLS client trusting it.
fn webhook_certificate() -> (tempfile::TempDir, tokio_rustls::TlsConnector) {
    use kubetrain_controller::webhook::tls::{CERT_FILE, KEY_FILE};
    let dir = tempfile::tempdir().unwrap();
    let pair = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    std::fs::write(dir.path().join(CERT_FILE), pair.cert.pem()).unwrap();
    std::fs::write(dir.path().join(KEY_FILE), pair.signing_key.serialize_pem()).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(pair.cert.der().clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    (dir, tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// Posts `body` to the operator's TrainJob validation webhook at `addr`; the review's `response`.
async fn post_review(
    connector: &tokio_rustls::TlsConnector,
    addr: std::net::SocketAddr,
    body: Vec<u8>,
) -> Value {
    use http_body_util::BodyExt;
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = connector.connect(name, tcp).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(connection);
    let request = http::Request::post(Route::ValidateTrainJob.path())
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), http::StatusCode::OK);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice::<Value>(&body).unwrap()["response"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_webhook_runs_the_plugins_given_to_the_operator() {
    let server = FakeApiServer::start();
    insert_builtin_runtimes(&server);
    let (certs, connector) = webhook_certificate();
    let running = Operator::new(Settings::default())
        .plugin(MaxNodes)
        .webhooks(0, certs.path())
        .unwrap()
        .status_server_port(0)
        .start(server.client())
        .await
        .unwrap();
    let addr = running.webhook_addr().expect("the webhook server runs");
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], addr.port()));

    let denied = post_review(&connector, addr, create_review(train_job("big", 8))).await;
    assert_eq!(denied["allowed"], false, "{denied:#}");
    assert_eq!(
        denied["status"]["message"],
        "spec.trainer.numNodes: plugin MaxNodes: 8 nodes; this cluster runs at most 4 per TrainJob: lower numNodes"
    );
    let allowed = post_review(&connector, addr, create_review(train_job("small", 2))).await;
    assert_eq!(allowed["allowed"], true, "{allowed:#}");

    running.stop();
    tokio::time::timeout(PATIENCE, running.wait())
        .await
        .expect("the operator stops")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_plugin_kind_reconciles_the_trainjob_that_owns_the_object() {
    let server = FakeApiServer::start();
    insert_builtin_runtimes(&server);
    server.insert(train_job("mnist", 2));
    // A Gang owned by the TrainJob, stored by a server-side apply (the store keeps any kind applied to it).
    let gang_kind = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
        "toy.example.com",
        "v1",
        "Gang",
    ));
    let gang = json!({
        "apiVersion": "toy.example.com/v1", "kind": "Gang",
        "metadata": {"name": "mnist", "namespace": NS, "ownerReferences": [{
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "mnist",
            "uid": "uid-mnist", "controller": true,
        }]},
    });
    kube::Api::<kube::api::DynamicObject>::namespaced_with(server.client(), NS, &gang_kind)
        .patch(
            "mnist",
            &kube::api::PatchParams::apply("test"),
            &kube::api::Patch::Apply(&gang),
        )
        .await
        .unwrap();
    // The cluster serves the kind (the in-memory API server's discovery knows kubetrain's kinds only).
    server.intercept(|r| {
        (r.uri == "/apis/toy.example.com/v1").then(|| {
            (
                200,
                json!({
                    "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "toy.example.com/v1",
                    "resources": [{"name": "gangs", "singularName": "gang", "namespaced": true, "kind": "Gang",
                                   "verbs": ["create", "list", "patch", "watch"]}],
                }),
            )
        })
    });
    // The Gangs' first list waits until the TrainJob's own first reconcile is done, so that the reconcile the
    // Gang triggers is told apart from it.
    let mut held = server.hold(|r| r.method == "GET" && r.uri.contains("/gangs"));
    // A follower re-checking hourly: nothing but the watches triggers a reconcile.
    let (_elect, leadership) = kubetrain_controller::Leadership::channel();
    let metrics = Arc::new(kubetrain_controller::ControllerMetrics::default());
    let settings = Settings {
        owned_kinds: vec![gang_kind],
        follower_requeue: Duration::from_secs(3600),
        ..Settings::default()
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let controller = tokio::spawn(kubetrain_controller::run(
        server.client(),
        settings,
        leadership,
        metrics.clone(),
        async move {
            let _ = stopped.await;
        },
    ));

    wait_for("the TrainJob's first reconcile", PATIENCE, || {
        metrics.reconciles() >= 1
    })
    .await;
    let list = tokio::time::timeout(PATIENCE, held.next())
        .await
        .expect("the controller lists the Gangs")
        .expect("a held request");
    assert_eq!(metrics.reconciles(), 1);
    list.release();
    wait_for("the reconcile the Gang triggers", PATIENCE, || {
        metrics.reconciles() >= 2
    })
    .await;

    let _ = stop.send(());
    tokio::time::timeout(PATIENCE, controller)
        .await
        .expect("graceful shutdown")
        .expect("task")
        .expect("run");
}
