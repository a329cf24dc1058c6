//! The status server end to end: a real HTTPS server on loopback with a self-signed certificate, requests as
//! the Python SDK sends them, tokens reviewed and statuses written by the in-memory API server
//! (`FakeApiServer`). The per-TrainJob coalescing has its unit tests next to it (`src/status_server/coalesce.rs`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use kubetrain_controller::status_server::{
    MAX_BODY, MAX_CONCURRENT_REVIEWS, StatusMetrics, StatusPostOutcome, StatusServer,
};
use kubetrain_merge::plugins::trainjobstatus::token_audience as audience;
use kubetrain_test_support::fixtures::trainjob;
use kubetrain_test_support::{FakeApiServer, FakeToken};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::support::Tls;

const NS: &str = "team-a";
const JOB: &str = "mnist";
const GOOD: &str = "good-token";
/// How long one step may take before the test gives up (generous: the machine may be loaded).
const PATIENCE: Duration = Duration::from_secs(60);

fn path(namespace: &str, name: &str) -> String {
    format!("/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status")
}

struct Fixture {
    addr: SocketAddr,
    api: FakeApiServer,
    metrics: Arc<StatusMetrics>,
    tls: Tls,
    stop: Option<oneshot::Sender<()>>,
    served: tokio::task::JoinHandle<()>,
}

/// The API server holding the TrainJob `team-a/mnist`.
fn api_with_job() -> FakeApiServer {
    let api = FakeApiServer::start();
    let resumed = json!([{"type": "Suspended", "status": "False", "reason": "Resumed",
        "message": "TrainJob is resumed", "lastTransitionTime": "2026-01-01T00:00:00Z"}]);
    api.insert(trainjob(JOB).namespace(NS).conditions(resumed).json());
    api
}

impl Fixture {
    async fn start() -> Self {
        let tls = Tls::self_signed();
        let api = api_with_job();
        let sa = |ns: &str| format!("system:serviceaccount:{ns}:default");
        api.add_token(
            GOOD,
            FakeToken {
                username: sa(NS),
                audiences: vec![audience(NS, JOB)],
                expired: false,
            },
        );
        api.add_token(
            "api-audience",
            FakeToken {
                username: sa(NS),
                audiences: vec!["https://kubernetes.default.svc".into()],
                expired: false,
            },
        );
        api.add_token(
            "other-job",
            FakeToken {
                username: sa(NS),
                audiences: vec![audience(NS, "other")],
                expired: false,
            },
        );
        api.add_token(
            "expired",
            FakeToken {
                username: sa(NS),
                audiences: vec![audience(NS, JOB)],
                expired: true,
            },
        );
        // A token minted in another namespace for this TrainJob's audience (anyone may request any audience).
        api.add_token(
            "other-namespace",
            FakeToken {
                username: sa("team-b"),
                audiences: vec![audience(NS, JOB)],
                expired: false,
            },
        );
        api.add_token(
            "not-a-service-account",
            FakeToken {
                username: "alice".into(),
                audiences: vec![audience(NS, JOB)],
                expired: false,
            },
        );
        // Allowed, for a TrainJob that does not exist.
        api.add_token(
            "missing-job",
            FakeToken {
                username: sa(NS),
                audiences: vec![audience(NS, "missing")],
                expired: false,
            },
        );

        let metrics =
            StatusMetrics::register(&mut prometheus_client::registry::Registry::default());
        let server = StatusServer::bind(
            "127.0.0.1:0".parse().unwrap(),
            tls.cert.clone(),
            tls.provider.clone(),
            api.client(),
        )
        .await
        .unwrap()
        .with_metrics(metrics.clone());
        let addr = server.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(server.serve(async {
            let _ = stopped.await;
        }));
        Self {
            addr,
            api,
            metrics,
            tls,
            stop: Some(stop),
            served,
        }
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Vec<u8>,
        content_length: Option<&str>,
    ) -> (StatusCode, Value) {
        let tls = self.tls.connect(self.addr, PATIENCE).await;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                .await
                .unwrap();
        tokio::spawn(connection);
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "localhost")
            .header("content-type", "application/json");
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        if let Some(length) = content_length {
            request = request.header("content-length", length);
        }
        let request = request.body(Full::new(Bytes::from(body))).unwrap();
        let response = sender.send_request(request).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let value = serde_json::from_slice(&body)
            .unwrap_or_else(|_| panic!("JSON answer: {}", String::from_utf8_lossy(&body)));
        (status, value)
    }

    /// Sends a chunked body of `len` spaces (no Content-Length) over raw TLS; returns the status code and
    /// the JSON answer.
    async fn send_chunked(&self, token: Option<&str>, len: usize) -> (u16, Value) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut tls = self.tls.connect(self.addr, PATIENCE).await;
        let auth = token.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
        let head = format!(
            "POST {} HTTP/1.1\r\nhost: localhost\r\n{auth}content-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n",
            path(NS, JOB)
        );
        tls.write_all(head.as_bytes()).await.unwrap();
        let chunk = vec![b' '; 4096];
        let mut sent = 0;
        while sent < len {
            let n = chunk.len().min(len - sent);
            let framed = [format!("{n:x}\r\n").as_bytes(), &chunk[..n], b"\r\n"].concat();
            // The server may answer and close before the whole body is sent.
            if tls.write_all(&framed).await.is_err() {
                break;
            }
            sent += n;
        }
        let _ = tls.write_all(b"0\r\n\r\n").await;
        let mut raw = Vec::new();
        let _ = tls.read_to_end(&mut raw).await;
        let text = String::from_utf8_lossy(&raw).into_owned();
        let code = text.split_whitespace().nth(1).unwrap().parse().unwrap();
        let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
        (
            code,
            serde_json::from_str(body.trim()).unwrap_or(Value::Null),
        )
    }

    async fn post(&self, token: Option<&str>, body: &Value) -> (StatusCode, Value) {
        self.send(
            Method::POST,
            &path(NS, JOB),
            token,
            serde_json::to_vec(body).unwrap(),
            None,
        )
        .await
    }

    fn trainer_status(&self) -> Value {
        self.api
            .get("trainer.kubeflow.org/v1alpha1", "trainjobs", NS, JOB)
            .unwrap()["status"]["trainerStatus"]
            .clone()
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.served.await.unwrap();
    }
}

/// The body `kubeflow.trainer.update_trainjob_status(progress_percent=40, estimated_remaining_seconds=600,
/// metrics={"loss": 0.25, "step": 40})` sends.
fn sdk_body() -> Value {
    json!({"trainerStatus": {
        "lastUpdatedTime": "2026-12-01T14:38:32.123456+00:00",
        "progressPercentage": 40,
        "estimatedRemainingSeconds": 600,
        "metrics": [{"name": "loss", "value": "0.25"}, {"name": "step", "value": "40"}],
    }})
}

#[tokio::test]
async fn a_valid_update_is_written_as_upstream_writes_it_and_echoed() {
    let f = Fixture::start().await;
    let (status, answer) = f.post(Some(GOOD), &sdk_body()).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let written = json!({
        "progressPercentage": 40,
        "estimatedRemainingSeconds": 600,
        "metrics": [{"name": "loss", "value": "0.25"}, {"name": "step", "value": "40"}],
        "lastUpdatedTime": "2026-12-01T14:38:32Z",
    });
    assert_eq!(answer, json!({"trainerStatus": written}));
    assert_eq!(f.trainer_status(), written);
    // The controller's conditions are left alone.
    let job = f
        .api
        .get("trainer.kubeflow.org/v1alpha1", "trainjobs", NS, JOB)
        .unwrap();
    assert_eq!(job["status"]["conditions"][0]["reason"], "Resumed");

    // The next update replaces the whole trainerStatus: fields it leaves out are removed (as upstream's
    // server-side apply by one field manager).
    let (status, _) = f
        .post(
            Some(GOOD),
            &json!({"trainerStatus": {"progressPercentage": 41, "lastUpdatedTime": "2026-12-01T14:38:40Z"}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        f.trainer_status(),
        json!({"progressPercentage": 41, "lastUpdatedTime": "2026-12-01T14:38:40Z"})
    );
    assert_eq!(f.metrics.updates(StatusPostOutcome::Written), 2);
    // One TokenReview: the accepted token is cached.
    assert_eq!(f.api.stats().token_reviews, 1);
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_token_posted_2000_times_costs_a_bounded_number_of_token_reviews() {
    // Issue 39: only accepted tokens were cached, so each post of a forged token cost one TokenReview.
    let f = Fixture::start().await;
    let posts = 2000;
    let connections = 16;
    let mut senders = tokio::task::JoinSet::new();
    for _ in 0..connections {
        let tls = f.tls.connect(f.addr, PATIENCE).await;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                .await
                .unwrap();
        tokio::spawn(connection);
        let body = serde_json::to_vec(&sdk_body()).unwrap();
        senders.spawn(async move {
            for _ in 0..posts / connections {
                let request = Request::post(path(NS, JOB))
                    .header("host", "localhost")
                    .header("content-type", "application/json")
                    .header("authorization", "Bearer forged")
                    .body(Full::new(Bytes::from(body.clone())))
                    .unwrap();
                let response = sender.send_request(request).await.unwrap();
                assert_eq!(response.status(), StatusCode::FORBIDDEN);
                response.into_body().collect().await.unwrap();
            }
        });
    }
    while let Some(done) = senders.join_next().await {
        done.unwrap();
    }
    let reviews = f.api.stats().token_reviews;
    assert!(
        (1..=MAX_CONCURRENT_REVIEWS as u64).contains(&reviews),
        "{posts} posts of one forged token cost {reviews} TokenReviews"
    );
    // A valid token is still reviewed (and accepted) meanwhile.
    assert_eq!(f.post(Some(GOOD), &sdk_body()).await.0, StatusCode::OK);
    f.stop().await;
}

#[tokio::test]
async fn table_of_refusals() {
    let f = Fixture::start().await;
    let forbidden = json!({"metadata": {}, "status": "Failure", "message": "Forbidden", "reason": "Forbidden", "code": 403});
    let cases: Vec<(&str, Option<&str>, Value, StatusCode, Value)> = vec![
        (
            "no token",
            None,
            sdk_body(),
            StatusCode::FORBIDDEN,
            forbidden.clone(),
        ),
        (
            "unknown token",
            Some("forged"),
            sdk_body(),
            StatusCode::FORBIDDEN,
            forbidden.clone(),
        ),
        (
            "API audience",
            Some("api-audience"),
            sdk_body(),
            StatusCode::FORBIDDEN,
            forbidden.clone(),
        ),
        (
            "another TrainJob's audience",
            Some("other-job"),
            sdk_body(),
            StatusCode::FORBIDDEN,
            forbidden.clone(),
        ),
        (
            "expired",
            Some("expired"),
            sdk_body(),
            StatusCode::FORBIDDEN,
            forbidden.clone(),
        ),
        (
            "ServiceAccount of another namespace",
            Some("other-namespace"),
            sdk_body(),
            StatusCode::FORBIDDEN,
            forbidden.clone(),
        ),
        (
            "not a ServiceAccount",
            Some("not-a-service-account"),
            sdk_body(),
            StatusCode::FORBIDDEN,
            forbidden.clone(),
        ),
        (
            "not JSON",
            Some(GOOD),
            json!("not an object"),
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({"metadata": {}, "status": "Failure", "message": "Invalid payload", "reason": "Invalid", "code": 422}),
        ),
        (
            "fractional progress",
            Some(GOOD),
            json!({"trainerStatus": {"progressPercentage": 40.5, "lastUpdatedTime": "2026-12-01T14:38:32Z"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({"metadata": {}, "status": "Failure", "message": "Invalid payload", "reason": "Invalid", "code": 422}),
        ),
        (
            "progress over 100",
            Some(GOOD),
            json!({"trainerStatus": {"progressPercentage": 101, "lastUpdatedTime": "2026-12-01T14:38:32Z"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({"metadata": {}, "status": "Failure", "reason": "Invalid", "code": 422,
                   "message": "TrainJob.trainer.kubeflow.org \"mnist\" is invalid: status.trainerStatus.progressPercentage: Invalid value: 101: trainerStatus.progressPercentage in body should be less than or equal to 100"}),
        ),
        (
            "no lastUpdatedTime",
            Some(GOOD),
            json!({"trainerStatus": {"progressPercentage": 1}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({"metadata": {}, "status": "Failure", "reason": "Invalid", "code": 422,
                   "message": "TrainJob.trainer.kubeflow.org \"mnist\" is invalid: status.trainerStatus: Invalid value: lastUpdatedTime is required when trainerStatus is present"}),
        ),
        (
            "no trainerStatus: nothing to write",
            Some(GOOD),
            json!({}),
            StatusCode::OK,
            json!({}),
        ),
    ];
    for (what, token, body, code, answer) in cases {
        let (status, got) = f.post(token, &body).await;
        assert_eq!((status, &got), (code, &answer), "{what}");
    }
    assert_eq!(f.trainer_status(), Value::Null, "nothing was written");
    assert_eq!(f.api.stats().status_patches, 0);
    assert_eq!(f.metrics.updates(StatusPostOutcome::Forbidden), 7);
    assert_eq!(f.metrics.updates(StatusPostOutcome::Invalid), 4);
    assert_eq!(f.metrics.updates(StatusPostOutcome::Empty), 1);
    f.stop().await;
}

#[tokio::test]
async fn paths_sizes_and_missing_jobs() {
    let f = Fixture::start().await;
    let not_found = json!({"metadata": {}, "status": "Failure", "message": "Not found", "reason": "NotFound", "code": 404});
    let body = serde_json::to_vec(&sdk_body()).unwrap();
    for (method, p) in [
        (Method::GET, path(NS, JOB)),
        (Method::PUT, path(NS, JOB)),
        (Method::POST, format!("{}/", path(NS, JOB))),
        (
            Method::POST,
            "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/mnist".into(),
        ),
        (Method::POST, "/".into()),
        (
            Method::POST,
            "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/jobsets/mnist/status".into(),
        ),
    ] {
        let (status, answer) = f
            .send(method.clone(), &p, Some(GOOD), body.clone(), None)
            .await;
        assert_eq!(
            (status, &answer),
            (StatusCode::NOT_FOUND, &not_found),
            "{method} {p}"
        );
    }

    // Oversized: refused from Content-Length before routing or authentication, as upstream's middleware.
    let big = vec![b' '; MAX_BODY + 1];
    let (status, answer) = f.send(Method::POST, &path(NS, JOB), None, big, None).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(answer["reason"], "RequestEntityTooLarge");
    assert_eq!(answer["message"], "Payload too large");
    // Exactly at the limit is read (and is not a request).
    let mut at_limit = serde_json::to_vec(&sdk_body()).unwrap();
    at_limit.resize(MAX_BODY, b' ');
    let (status, _) = f
        .send(Method::POST, &path(NS, JOB), Some(GOOD), at_limit, None)
        .await;
    assert_eq!(status, StatusCode::OK);

    // Chunked, no Content-Length: cut off as soon as the body passes the limit (after authentication).
    let (status, answer) = f.send_chunked(Some(GOOD), MAX_BODY + 1).await;
    assert_eq!(status, 413);
    assert_eq!(answer["message"], "Payload too large");

    // Allowed, but no such TrainJob.
    let (status, answer) = f
        .send(
            Method::POST,
            &path(NS, "missing"),
            Some("missing-job"),
            serde_json::to_vec(&sdk_body()).unwrap(),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(answer["message"], "Train job not found");
    assert_eq!(f.metrics.updates(StatusPostOutcome::TooLarge), 2);
    assert_eq!(f.metrics.updates(StatusPostOutcome::NotFound), 7);
    f.stop().await;
}
