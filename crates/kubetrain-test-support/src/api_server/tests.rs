use super::*;

#[test]
fn routes() {
    let key = |v: &str, p: &str, ns: &str, n: &str| (v.into(), p.into(), ns.into(), n.into());
    let cases = [
        ("/api/v1", Some(Route::Discovery("v1".into()))),
        (
            "/apis/jobset.x-k8s.io/v1alpha2",
            Some(Route::Discovery("jobset.x-k8s.io/v1alpha2".into())),
        ),
        (
            "/apis/trainer.kubeflow.org/v1alpha1/trainjobs",
            Some(Route::Collection {
                api_version: "trainer.kubeflow.org/v1alpha1".into(),
                plural: "trainjobs".into(),
                namespace: None,
            }),
        ),
        (
            "/api/v1/namespaces/a/configmaps",
            Some(Route::Collection {
                api_version: "v1".into(),
                plural: "configmaps".into(),
                namespace: Some("a".into()),
            }),
        ),
        (
            "/api/v1/namespaces/a/configmaps/x",
            Some(Route::Object {
                key: key("v1", "configmaps", "a", "x"),
                status: false,
            }),
        ),
        (
            "/apis/trainer.kubeflow.org/v1alpha1/namespaces/a/trainjobs/j/status",
            Some(Route::Object {
                key: key("trainer.kubeflow.org/v1alpha1", "trainjobs", "a", "j"),
                status: true,
            }),
        ),
        (
            "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes/t",
            Some(Route::Object {
                key: key(
                    "trainer.kubeflow.org/v1alpha1",
                    "clustertrainingruntimes",
                    "",
                    "t",
                ),
                status: false,
            }),
        ),
        (
            "/api/v1/namespaces/a/pods/p/log",
            Some(Route::Log {
                key: key("v1", "pods", "a", "p"),
            }),
        ),
        ("/healthz", None),
    ];
    for (path, want) in cases {
        assert_eq!(route(path), want, "{path}");
    }
}

#[test]
fn label_selectors() {
    let labels = json!({"app": "x", "tier": "web"});
    let labels = labels.as_object().unwrap();
    let cases = [
        ("", Some(true)),
        ("app=x", Some(true)),
        ("app==x,tier=web", Some(true)),
        ("app=y", Some(false)),
        ("app!=y", Some(true)),
        ("app in (y, x)", Some(true)),
        ("app in (y,z)", Some(false)),
        ("app notin (y,z),tier", Some(true)),
        ("missing notin (y)", Some(true)),
        ("!missing", Some(true)),
        ("!app", Some(false)),
        ("app in x", None),
        ("app in (x", None),
    ];
    for (selector, want) in cases {
        assert_eq!(selects(selector, labels), want, "{selector:?}");
    }
}

#[tokio::test]
async fn creates_records_and_serves_logs() {
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};
    use kube::api::{Api, ListParams, LogParams, PostParams};
    let server = FakeApiServer::start();
    server.record_requests();
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "a");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "c",
            "labels": {"app": "x"}}}))
    .unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let err = cms.create(&PostParams::default(), &cm).await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409),
        "{err:?}"
    );
    let selected = |s: &str| ListParams::default().labels(s);
    assert_eq!(
        cms.list(&selected("app in (x)")).await.unwrap().items.len(),
        1
    );
    assert_eq!(cms.list(&selected("app!=x")).await.unwrap().items.len(), 0);

    server.set_log("a", "p", "main", "one\ntwo\n");
    let pods: Api<Pod> = Api::namespaced(server.client(), "a");
    let params = LogParams {
        container: Some("main".into()),
        ..LogParams::default()
    };
    assert_eq!(pods.logs("p", &params).await.unwrap(), "one\ntwo\n");
    assert!(pods.logs("q", &params).await.is_err());

    let seen: Vec<String> = server
        .requests()
        .iter()
        .map(|r| format!("{} {}", r.method, r.uri))
        .collect();
    assert_eq!(
        seen,
        [
            "POST /api/v1/namespaces/a/configmaps",
            "POST /api/v1/namespaces/a/configmaps",
            "GET /api/v1/namespaces/a/configmaps?labelSelector=app in (x)",
            "GET /api/v1/namespaces/a/configmaps?labelSelector=app!=x",
            "GET /api/v1/namespaces/a/pods/p/log?container=main",
            "GET /api/v1/namespaces/a/pods/q/log?container=main",
        ]
    );
    assert_eq!(server.requests()[0].body["metadata"]["name"], "c");
    assert_eq!((server.stats().creates, server.stats().logs), (2, 2));
}

#[tokio::test]
async fn intercepts_holds_and_speaks_the_api_servers_errors() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    use kube::api::{Api, Patch, PatchParams};
    let server = FakeApiServer::start();
    server.record_requests();
    let classes: Api<PriorityClass> = Api::all(server.client());
    let err = classes.get("high").await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404
                && s.message == "priorityclasses.scheduling.k8s.io \"high\" not found"),
        "{err:?}"
    );
    server.insert(
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                             "metadata": {"name": "high"}, "value": 1000}),
    );
    assert_eq!(classes.get("high").await.unwrap().value, Some(1000));

    server.intercept(|r| {
        r.uri
            .ends_with("/high")
            .then(|| api_status(403, "Forbidden", "priorityclasses is forbidden"))
    });
    let err = classes.get("high").await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 403 && s.reason == "Forbidden"),
        "{err:?}"
    );
    assert_eq!(server.stats().gets, 2, "a canned reply is not counted");
    let seen: Vec<String> = server
        .take_requests()
        .iter()
        .map(|r| format!("{} {}", r.method, r.uri))
        .collect();
    assert_eq!(
        seen,
        ["GET /apis/scheduling.k8s.io/v1/priorityclasses/high"; 3]
    );
    assert!(server.requests().is_empty(), "taken");

    // A held write stays unanswered while others are served; released, it applies to the store then.
    let mut held = server.hold(|r| r.method == "PATCH");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "a");
    let cm: ConfigMap = serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "a"}, "data": {"k": "v"}}))
    .unwrap();
    let write = tokio::spawn({
        let cms = cms.clone();
        async move {
            cms.patch("c", &PatchParams::apply("m"), &Patch::Apply(&cm))
                .await
        }
    });
    let patch = held.next().await.unwrap();
    assert_eq!(patch.request.body["data"]["k"], "v");
    assert!(cms.get_opt("c").await.unwrap().is_none(), "not applied yet");
    patch.release();
    assert_eq!(write.await.unwrap().unwrap().data.unwrap()["k"], "v");
    assert!(cms.get_opt("c").await.unwrap().is_some());
}

#[tokio::test]
async fn serves_over_loopback_through_its_kubeconfig_until_stopped() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::Api;
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let server = FakeApiServer::start();
    server.record_requests();
    server.insert(json!({"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": "settings", "namespace": "team-a"}}));
    let served = server.serve().unwrap();
    assert_eq!(served.url(), format!("http://{}", served.address()));
    assert!(served.address().ip().is_loopback());

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config");
    served.write_kubeconfig(&path, "team-a").unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(&path).unwrap(),
        &KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(config.default_namespace, "team-a");
    let cms: Api<ConfigMap> = Api::default_namespaced(Client::try_from(config).unwrap());
    assert!(cms.get_opt("settings").await.unwrap().is_some());
    let err = cms.get("nope").await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404
                && s.message == "configmaps \"nope\" not found"),
        "{err:?}"
    );
    let seen: Vec<String> = server
        .requests()
        .iter()
        .map(|r| format!("{} {}", r.method, r.uri))
        .collect();
    assert_eq!(
        seen,
        [
            "GET /api/v1/namespaces/team-a/configmaps/settings",
            "GET /api/v1/namespaces/team-a/configmaps/nope",
        ]
    );
    assert_eq!(server.stats().gets, 2, "the same store and counters");

    let address = served.address();
    served.stop().await;
    assert!(
        tokio::net::TcpStream::connect(address).await.is_err(),
        "stopped: the port is closed"
    );
}

#[tokio::test]
async fn replaces_with_the_api_servers_concurrency_check() {
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::api::{Api, PostParams};
    let server = FakeApiServer::start();
    let leases: Api<Lease> = Api::namespaced(server.client(), "a");
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": "l"},
            "spec": {"holderIdentity": "x"}}))
    .unwrap();
    let err = leases
        .replace("l", &PostParams::default(), &lease)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404),
        "{err:?}"
    );
    let created = leases.create(&PostParams::default(), &lease).await.unwrap();
    let replaced = leases
        .replace("l", &PostParams::default(), &created)
        .await
        .unwrap();
    assert_ne!(
        replaced.metadata.resource_version,
        created.metadata.resource_version
    );
    assert_eq!(replaced.metadata.uid, created.metadata.uid);
    let err = leases
        .replace("l", &PostParams::default(), &created)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409 && s.reason == "Conflict"),
        "a stale resourceVersion loses: {err:?}"
    );
    assert_eq!(server.stats().replaces, 3);
}

#[test]
fn merge_patch_semantics() {
    let mut v = json!({"a": 1, "b": {"c": 2, "d": 3}});
    merge(&mut v, &json!({"a": null, "b": {"c": 5}, "e": [1]}));
    assert_eq!(v, json!({"b": {"c": 5, "d": 3}, "e": [1]}));
}

#[tokio::test]
async fn lists_in_pages_and_applies_keep_status() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, ListParams, Patch, PatchParams};
    let server = FakeApiServer::start();
    for i in 0..5 {
        server.insert(json!({"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": format!("c{i}"), "namespace": "a"}}));
    }
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "a");
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(first.items.len(), 2);
    let token = first.metadata.continue_.clone().unwrap();
    let rest = api
        .list(&ListParams::default().limit(10).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(rest.items.len(), 3);
    assert!(rest.metadata.continue_.is_none());

    let cm: ConfigMap = serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c0", "namespace": "a"}, "data": {"k": "v"}}))
    .unwrap();
    let stored = api
        .patch("c0", &PatchParams::apply("m").force(), &Patch::Apply(&cm))
        .await
        .unwrap();
    assert_eq!(stored.data.unwrap()["k"], "v");
    assert_eq!(server.stats().applies, 1);
    assert_eq!(server.stats().lists, 2);
    assert!(api.get_opt("nope").await.unwrap().is_none());
}
