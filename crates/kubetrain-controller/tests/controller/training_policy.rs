//! The training policy at admission (issue 40): TrainJobs and runtimes refused with their field paths unless an
//! exception allows them, the ConfigMap source, upstream behaviour without a policy, and the audit of reviews
//! (events and audit lines).

use std::time::Duration;

use kubetrain_controller::audit::AuditLog;
use kubetrain_controller::webhook::{Admission, AdmissionAudit, PolicyGate, Route};
use kubetrain_tenancy::policy::TrainingPolicy;
use kubetrain_test_support::{FakeApiServer, insert_builtin_runtimes};
use serde_json::{Value, json};

use crate::support::wait_for;

const POLICY: &str = "apiVersion: kubetrain.dev/v1alpha1
kind: TrainingPolicy
metadata: {name: gpu-cluster}
spec:
  exceptions:
    - name: infra-debugging
      namespaces: [infra]
      allow: {privileged: true}
    - runtimes: [{kind: ClusterTrainingRuntime, name: nccl-tests}]
      allow: {hostNetwork: true}
";

const PRIVILEGED_PATH: &str = "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].securityContext.privileged";

fn policy() -> PolicyGate {
    PolicyGate::fixed(TrainingPolicy::from_yaml(POLICY).unwrap())
}

fn trainjob(namespace: &str, name: &str, runtime: &str, privileged: bool) -> Value {
    let mut job = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "runtimeRef": {"name": runtime},
            "trainer": {"env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]}
        }
    });
    if privileged {
        job["spec"]["runtimePatches"] = json!([{
            "manager": "example.com/user",
            "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{
                "name": "node",
                "template": {"spec": {"template": {"spec": {"containers": [{
                    "name": "node", "securityContext": {"privileged": true}
                }]}}}}
            }]}}}
        }]);
    }
    job
}

fn runtime(name: &str, host_network: bool) -> Value {
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}},
            "template": {"spec": {"replicatedJobs": [{
                "name": "node",
                "template": {
                    "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": {"template": {"spec": {
                        "hostNetwork": host_network,
                        "containers": [{"name": "node", "image": "docker.io/pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"}]
                    }}}
                }
            }]}}
        }
    })
}

fn review(operation: &str, object: &Value, old: Option<&Value>) -> Vec<u8> {
    let kind = object["kind"].as_str().unwrap();
    let resource = format!("{}s", kind.to_lowercase());
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": kind},
            "resource": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "resource": resource},
            "name": object["metadata"]["name"],
            "namespace": object["metadata"]["namespace"],
            "operation": operation,
            "userInfo": {"username": "alice"},
            "object": object,
            "oldObject": old,
        }
    }))
    .unwrap()
}

async fn answer(admission: &Admission, route: Route, body: &[u8]) -> Value {
    let answer = admission.review(route, body).await.unwrap();
    serde_json::to_value(answer).unwrap()["response"].clone()
}

#[tokio::test]
async fn a_privileged_trainjob_is_denied_at_its_field_path_unless_its_namespace_is_excepted() {
    let api = FakeApiServer::start();
    insert_builtin_runtimes(&api);
    let admission = Admission::new(api.client()).with_policy(policy());

    let denied = answer(
        &admission,
        Route::ValidateTrainJob,
        &review(
            "CREATE",
            &trainjob("team-a", "j", "torch-distributed", true),
            None,
        ),
    )
    .await;
    assert_eq!(denied["allowed"], false, "{denied:#}");
    assert_eq!(denied["status"]["code"], 403);
    let message = denied["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "{PRIVILEGED_PATH}: container \"node\" runs privileged"
        )),
        "{message}"
    );
    assert!(
        message.contains("training policy \"gpu-cluster\""),
        "{message}"
    );

    let excepted = answer(
        &admission,
        Route::ValidateTrainJob,
        &review(
            "CREATE",
            &trainjob("infra", "j", "torch-distributed", true),
            None,
        ),
    )
    .await;
    assert_eq!(excepted["allowed"], true, "{excepted:#}");

    // Without a policy the same TrainJob is admitted: upstream's behaviour.
    let plain = Admission::new(api.client());
    let upstream = answer(
        &plain,
        Route::ValidateTrainJob,
        &review(
            "CREATE",
            &trainjob("team-a", "j", "torch-distributed", true),
            None,
        ),
    )
    .await;
    assert_eq!(upstream["allowed"], true, "{upstream:#}");
}

#[tokio::test]
async fn a_trainjob_is_judged_with_its_runtime_and_updates_only_for_what_they_add() {
    let api = FakeApiServer::start();
    api.insert(runtime("host-net", true));
    api.insert(runtime("nccl-tests", true));
    let admission = Admission::new(api.client()).with_policy(policy());

    let job = trainjob("team-a", "j", "host-net", false);
    let denied = answer(
        &admission,
        Route::ValidateTrainJob,
        &review("CREATE", &job, None),
    )
    .await;
    assert_eq!(
        denied["status"]["message"]
            .as_str()
            .unwrap()
            .split(": ")
            .next()
            .unwrap(),
        "ClusterTrainingRuntime/host-net:spec.template.spec.replicatedJobs[0].template.spec.template.spec.hostNetwork",
        "{denied:#}"
    );
    // The exception for the runtime admits its TrainJobs.
    let allowed = answer(
        &admission,
        Route::ValidateTrainJob,
        &review(
            "CREATE",
            &trainjob("team-a", "j", "nccl-tests", false),
            None,
        ),
    )
    .await;
    assert_eq!(allowed["allowed"], true, "{allowed:#}");

    // An update keeps what was admitted before the policy (suspend flips pass) ...
    let mut resumed = job.clone();
    resumed["spec"]["suspend"] = json!(false);
    let update = answer(
        &admission,
        Route::ValidateTrainJob,
        &review("UPDATE", &resumed, Some(&job)),
    )
    .await;
    assert_eq!(update["allowed"], true, "{update:#}");
}

#[tokio::test]
async fn runtimes_are_judged_on_create_and_on_what_an_update_adds() {
    let api = FakeApiServer::start();
    let admission = Admission::new(api.client()).with_policy(policy());
    let route = Route::ValidateClusterTrainingRuntime;

    let risky = runtime("host-net", true);
    let denied = answer(&admission, route, &review("CREATE", &risky, None)).await;
    assert_eq!(denied["allowed"], false, "{denied:#}");
    assert!(
        denied["status"]["message"]
            .as_str()
            .unwrap()
            .starts_with("spec.template.spec.replicatedJobs[0].template.spec.template.spec.hostNetwork: the pods share the host's network"),
        "{denied:#}"
    );
    let excepted = answer(
        &admission,
        route,
        &review("CREATE", &runtime("nccl-tests", true), None),
    )
    .await;
    assert_eq!(excepted["allowed"], true, "{excepted:#}");

    let safe = runtime("host-net", false);
    let adds = answer(&admission, route, &review("UPDATE", &risky, Some(&safe))).await;
    assert_eq!(
        adds["allowed"], false,
        "an update may not add a risk: {adds:#}"
    );
    let mut relabelled = risky.clone();
    relabelled["metadata"]["labels"] = json!({"team": "a"});
    let keeps = answer(
        &admission,
        route,
        &review("UPDATE", &relabelled, Some(&risky)),
    )
    .await;
    assert_eq!(
        keeps["allowed"], true,
        "an update may keep what is there: {keeps:#}"
    );

    // TrainingRuntime updates: judged with a policy, not decoded at all without one (upstream).
    let mut namespaced = risky.clone();
    namespaced["kind"] = json!("TrainingRuntime");
    namespaced["metadata"]["namespace"] = json!("team-a");
    let mut old = safe.clone();
    old["kind"] = json!("TrainingRuntime");
    old["metadata"]["namespace"] = json!("team-a");
    let route = Route::ValidateTrainingRuntime;
    let update = answer(
        &admission,
        route,
        &review("UPDATE", &namespaced, Some(&old)),
    )
    .await;
    assert_eq!(update["allowed"], false, "{update:#}");
    let plain = Admission::new(api.client());
    let upstream = answer(
        &plain,
        route,
        &review(
            "UPDATE",
            &json!({"kind": "TrainingRuntime", "metadata": {"name": "x"}, "spec": 1}),
            None,
        ),
    )
    .await;
    assert_eq!(upstream["allowed"], true, "{upstream:#}");
}

#[tokio::test]
async fn the_configmap_policy_is_loaded_and_an_invalid_one_denies_with_the_reason() {
    let api = FakeApiServer::start();
    insert_builtin_runtimes(&api);
    api.insert(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kubetrain-training-policy", "namespace": "kubeflow-system"},
        "data": {"policy.yaml": POLICY}
    }));
    api.insert(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "broken-policy", "namespace": "kubeflow-system"},
        "data": {"policy.yaml": "apiVersion: kubetrain.dev/v1alpha1\nkind: TrainingPolicy\nspec: {exceptions: [{allow: {privilegd: true}}]}\n"}
    }));
    let (gate, watch) =
        PolicyGate::watch_configmap(api.client(), "kubeflow-system", "kubetrain-training-policy");
    tokio::spawn(watch);
    wait_for("the policy to load", Duration::from_secs(10), || {
        gate.current().is_ok_and(|p| p.is_some())
    })
    .await;
    let admission = Admission::new(api.client()).with_policy(gate);
    let body = review(
        "CREATE",
        &trainjob("team-a", "j", "torch-distributed", true),
        None,
    );
    let denied = answer(&admission, Route::ValidateTrainJob, &body).await;
    assert_eq!(denied["allowed"], false, "{denied:#}");

    let (broken, watch) =
        PolicyGate::watch_configmap(api.client(), "kubeflow-system", "broken-policy");
    tokio::spawn(watch);
    wait_for(
        "the broken policy to be read",
        Duration::from_secs(10),
        || broken.current().is_err(),
    )
    .await;
    let admission = Admission::new(api.client()).with_policy(broken);
    let body = review(
        "CREATE",
        &trainjob("team-a", "j", "torch-distributed", false),
        None,
    );
    let denied = answer(&admission, Route::ValidateTrainJob, &body).await;
    let message = denied["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("the training policy is invalid"),
        "{message}"
    );
    assert!(
        message.contains("spec.exceptions[0].allow.privilegd: unknown field"),
        "{message}"
    );

    // A ConfigMap that does not exist is no policy.
    let (absent, watch) = PolicyGate::watch_configmap(api.client(), "kubeflow-system", "absent");
    absent.apply_text(Some(POLICY));
    tokio::spawn(watch);
    wait_for("the list to find nothing", Duration::from_secs(10), || {
        absent.current().is_ok_and(|p| p.is_none())
    })
    .await;
}

#[tokio::test]
async fn reviews_are_audited_with_events_and_lines_naming_the_user_and_secrets() {
    let api = FakeApiServer::start();
    insert_builtin_runtimes(&api);
    let (log, lines) = AuditLog::in_memory();
    let reporter = kube::runtime::events::Reporter {
        controller: "kubetrain-operator".into(),
        instance: None,
    };
    let audit = AdmissionAudit::events(api.client(), reporter).with_log(std::sync::Arc::new(log));
    let admission = Admission::new(api.client())
        .with_policy(policy())
        .with_audit(audit);

    let admitted = answer(
        &admission,
        Route::ValidateTrainJob,
        &review(
            "CREATE",
            &trainjob("team-a", "ok", "torch-distributed", false),
            None,
        ),
    )
    .await;
    assert_eq!(admitted["allowed"], true, "{admitted:#}");
    let denied = answer(
        &admission,
        Route::ValidateTrainJob,
        &review(
            "CREATE",
            &trainjob("team-a", "bad", "torch-distributed", true),
            None,
        ),
    )
    .await;
    assert_eq!(denied["allowed"], false);
    let changed = answer(
        &admission,
        Route::ValidateClusterTrainingRuntime,
        &review("CREATE", &runtime("plain", false), None),
    )
    .await;
    assert_eq!(changed["allowed"], true, "{changed:#}");

    let lines = lines.lines();
    let actions: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| (l["action"].as_str().unwrap(), l["name"].as_str().unwrap()))
        .collect();
    assert_eq!(
        actions,
        [
            ("submit", "ok"),
            ("admit", "ok"),
            ("secret-reference", "ok"),
            ("submit", "bad"),
            ("deny", "bad"),
            ("runtime-change", "plain"),
            ("admit", "plain"),
        ]
    );
    assert!(lines.iter().all(|l| l["user"] == "alice"));
    assert_eq!(
        lines[2]["details"]["secrets"],
        json!([{"secret": "hf", "path": "spec.trainer.env[0].valueFrom.secretKeyRef"}])
    );
    assert!(
        lines[4]["details"]["reasons"][0]
            .as_str()
            .unwrap()
            .contains(PRIVILEGED_PATH),
        "{:#}",
        lines[4]
    );
    assert!(
        !serde_json::to_string(&lines).unwrap().contains("\"token\""),
        "never a key or value of a Secret"
    );

    // Events: the submission, the denial and the runtime change.
    wait_for("three events", Duration::from_secs(10), || {
        api.stats().events >= 3
    })
    .await;
}

#[tokio::test]
async fn without_submission_events_only_secret_references_and_denials_get_events() {
    let api = FakeApiServer::start();
    insert_builtin_runtimes(&api);
    let reporter = kube::runtime::events::Reporter {
        controller: "kubetrain-operator".into(),
        instance: None,
    };
    let (log, lines) = AuditLog::in_memory();
    let audit = AdmissionAudit::events(api.client(), reporter)
        .with_log(std::sync::Arc::new(log))
        .without_submission_events();
    let admission = Admission::new(api.client())
        .with_policy(policy())
        .with_audit(audit);
    api.record_requests();

    let mut plain = trainjob("team-a", "plain", "torch-distributed", false);
    plain["spec"]["trainer"] = json!({});
    for (job, allowed) in [
        (plain, true),
        (trainjob("team-a", "ok", "torch-distributed", false), true),
        (trainjob("team-a", "bad", "torch-distributed", true), false),
    ] {
        let answered = answer(
            &admission,
            Route::ValidateTrainJob,
            &review("CREATE", &job, None),
        )
        .await;
        assert_eq!(answered["allowed"], allowed, "{answered:#}");
    }

    // Published in the order of the reviews: had "plain" had one, it would be among the first two.
    wait_for("two events", Duration::from_secs(10), || {
        api.stats().events >= 2
    })
    .await;
    let regarding: Vec<(String, String)> = api
        .take_requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.uri.contains("/events"))
        .map(|r| {
            (
                r.body["regarding"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                r.body["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        regarding[..2],
        [
            ("ok".to_owned(), "TrainJobSubmitted".to_owned()),
            ("bad".to_owned(), "TrainJobDenied".to_owned())
        ]
    );
    // The audit lines are unchanged: every submission is there.
    let submitted: Vec<String> = lines
        .lines()
        .iter()
        .filter(|l| l["action"] == "submit")
        .map(|l| l["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(submitted, ["plain", "ok", "bad"]);
}
