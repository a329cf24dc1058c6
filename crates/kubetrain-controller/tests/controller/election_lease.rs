//! Lease election as call sequences against a mock API server (client-go's rules, one round at a time, then
//! the loop with virtual time).

use std::time::Duration;

use http::{Request, Response};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::client::Body;
use kubetrain_controller::election::{ElectionConfig, LeaderElector, Round};
use kubetrain_controller::leadership::Leadership;
use serde_json::{Value, json};
use tower_test::mock::Handle;

const LEASE: &str =
    "/apis/coordination.k8s.io/v1/namespaces/kubeflow-system/leases/trainer.kubeflow.org";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kubeflow-system/leases";
const ME: &str = "pod-a_1";

struct ApiServer(Handle<Request<Body>, Response<Body>>);

impl ApiServer {
    /// Answers the next call after checking method and path; returns the request body as JSON (or Null).
    async fn expect(&mut self, method: &str, path: &str, status: u16, body: Value) -> Value {
        let (request, send) = tokio::time::timeout(Duration::from_secs(30), self.0.next_request())
            .await
            .unwrap_or_else(|_| panic!("expected {method} {path}; nothing came"))
            .expect("client alive");
        assert_eq!(request.method().as_str(), method, "{}", request.uri());
        assert_eq!(request.uri().path(), path);
        let bytes = http_body_util::BodyExt::collect(request.into_body())
            .await
            .unwrap()
            .to_bytes();
        send.send_response(
            Response::builder()
                .status(status)
                .body(Body::from(serde_json::to_vec(&body).unwrap()))
                .unwrap(),
        );
        serde_json::from_slice(&bytes).unwrap_or(Value::Null)
    }
}

fn setup() -> (LeaderElector, ApiServer) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let config = ElectionConfig::new("kubeflow-system", "trainer.kubeflow.org", ME);
    (LeaderElector::new(client, config), ApiServer(handle))
}

fn status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": reason, "reason": reason, "code": code})
}

fn ago(seconds: i64) -> String {
    // Microseconds, as the API server writes MicroTime.
    (Timestamp::now() - SignedDuration::from_secs(seconds))
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

fn lease(holder: &str, renewed_secs_ago: i64, transitions: i32) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "trainer.kubeflow.org", "namespace": "kubeflow-system", "resourceVersion": "42"},
        "spec": {
            "holderIdentity": holder, "leaseDurationSeconds": 15,
            "acquireTime": ago(100), "renewTime": ago(renewed_secs_ago),
            "leaseTransitions": transitions
        }
    })
}

#[tokio::test]
async fn a_missing_lease_is_created_and_held() {
    let (elector, mut api) = setup();
    let round = tokio::spawn(async move { elector.try_acquire_or_renew().await.unwrap() });
    api.expect("GET", LEASE, 404, status(404, "NotFound")).await;
    let created = api.expect("POST", LEASES, 201, lease(ME, 0, 0)).await;
    assert_eq!(created["metadata"]["name"], "trainer.kubeflow.org");
    assert_eq!(created["spec"]["holderIdentity"], ME);
    assert_eq!(created["spec"]["leaseDurationSeconds"], 15);
    assert_eq!(created["spec"]["leaseTransitions"], 0);
    assert_eq!(created["spec"]["acquireTime"], created["spec"]["renewTime"]);
    assert_eq!(round.await.unwrap(), Round::Acquired { transitions: 0 });
}

#[tokio::test]
async fn a_fresh_lease_of_another_replica_is_left_alone() {
    let (elector, mut api) = setup();
    let round = tokio::spawn(async move { elector.try_acquire_or_renew().await.unwrap() });
    api.expect("GET", LEASE, 200, lease("pod-b_9", 3, 5)).await;
    assert_eq!(
        round.await.unwrap(),
        Round::HeldBy {
            holder: "pod-b_9".into()
        }
    );
}

#[tokio::test]
async fn an_expired_lease_is_taken_over_with_one_more_transition() {
    let (elector, mut api) = setup();
    let round = tokio::spawn(async move { elector.try_acquire_or_renew().await.unwrap() });
    api.expect("GET", LEASE, 200, lease("pod-b_9", 60, 3)).await;
    let put = api.expect("PUT", LEASE, 200, lease(ME, 0, 4)).await;
    assert_eq!(
        put["metadata"]["resourceVersion"], "42",
        "optimistic concurrency"
    );
    assert_eq!(put["spec"]["holderIdentity"], ME);
    assert_eq!(put["spec"]["leaseTransitions"], 4);
    assert_eq!(put["spec"]["acquireTime"], put["spec"]["renewTime"]);
    assert_eq!(round.await.unwrap(), Round::Acquired { transitions: 4 });
}

#[tokio::test]
async fn a_released_lease_is_taken_at_once() {
    let (elector, mut api) = setup();
    let round = tokio::spawn(async move { elector.try_acquire_or_renew().await.unwrap() });
    let mut released = lease("", 1, 2);
    released["spec"]["leaseDurationSeconds"] = json!(1);
    api.expect("GET", LEASE, 200, released).await;
    let put = api.expect("PUT", LEASE, 200, lease(ME, 0, 3)).await;
    assert_eq!(put["spec"]["holderIdentity"], ME);
    assert_eq!(round.await.unwrap(), Round::Acquired { transitions: 3 });
}

#[tokio::test]
async fn the_holder_renews_without_a_new_acquire_time() {
    let (elector, mut api) = setup();
    let round = tokio::spawn(async move { elector.try_acquire_or_renew().await.unwrap() });
    let held = lease(ME, 2, 7);
    api.expect("GET", LEASE, 200, held.clone()).await;
    let put = api.expect("PUT", LEASE, 200, lease(ME, 0, 7)).await;
    assert_eq!(put["spec"]["acquireTime"], held["spec"]["acquireTime"]);
    assert_ne!(put["spec"]["renewTime"], held["spec"]["renewTime"]);
    assert_eq!(put["spec"]["leaseTransitions"], 7);
    assert_eq!(put["metadata"]["resourceVersion"], "42");
    assert_eq!(round.await.unwrap(), Round::Renewed);
}

/// A Lease as the API server answers a write: our body with a new resourceVersion.
fn stored(mut written: Value, resource_version: &str) -> Value {
    written["metadata"]["resourceVersion"] = json!(resource_version);
    written
}

#[tokio::test]
async fn after_its_own_write_the_holder_renews_with_one_request() {
    let (elector, mut api) = setup();
    let elector = std::sync::Arc::new(elector);
    let round = |elector: &std::sync::Arc<LeaderElector>| {
        let elector = elector.clone();
        tokio::spawn(async move { elector.try_acquire_or_renew().await.unwrap() })
    };

    let first = round(&elector);
    api.expect("GET", LEASE, 404, status(404, "NotFound")).await;
    api.expect("POST", LEASES, 201, stored(lease(ME, 0, 0), "100"))
        .await;
    assert_eq!(first.await.unwrap(), Round::Acquired { transitions: 0 });

    // No GET: the renewal writes over the stored Lease, with the stored resourceVersion.
    let second = round(&elector);
    let renewal = api
        .expect("PUT", LEASE, 200, stored(lease(ME, 0, 0), "101"))
        .await;
    assert_eq!(renewal["metadata"]["resourceVersion"], "100");
    assert_eq!(renewal["spec"]["holderIdentity"], ME);
    assert_eq!(renewal["spec"]["leaseTransitions"], 0);
    assert_eq!(second.await.unwrap(), Round::Renewed);

    let third = round(&elector);
    let renewal = api
        .expect("PUT", LEASE, 200, stored(lease(ME, 0, 0), "102"))
        .await;
    assert_eq!(
        renewal["metadata"]["resourceVersion"], "101",
        "each renewal carries the resourceVersion of the previous answer"
    );
    assert_eq!(third.await.unwrap(), Round::Renewed);
}

#[tokio::test]
async fn a_conflicting_renewal_falls_back_to_reading_the_lease() {
    let (elector, mut api) = setup();
    let elector = std::sync::Arc::new(elector);
    let first = {
        let elector = elector.clone();
        tokio::spawn(async move { elector.try_acquire_or_renew().await.unwrap() })
    };
    api.expect("GET", LEASE, 200, lease(ME, 2, 7)).await;
    api.expect("PUT", LEASE, 200, stored(lease(ME, 0, 7), "43"))
        .await;
    assert_eq!(first.await.unwrap(), Round::Renewed);

    // Another replica took the Lease over meanwhile: the one-request renewal gets 409, the round reads the
    // Lease, finds it held and fresh, and leaves it alone.
    let second = tokio::spawn(async move { elector.try_acquire_or_renew().await.unwrap() });
    let renewal = api.expect("PUT", LEASE, 409, status(409, "Conflict")).await;
    assert_eq!(renewal["metadata"]["resourceVersion"], "43");
    api.expect("GET", LEASE, 200, stored(lease("pod-b_9", 0, 8), "44"))
        .await;
    assert_eq!(
        second.await.unwrap(),
        Round::HeldBy {
            holder: "pod-b_9".into()
        }
    );
}

#[tokio::test]
async fn losing_a_write_race_is_a_conflict_not_an_error() {
    let (elector, mut api) = setup();
    let elector = std::sync::Arc::new(elector);
    let first = {
        let elector = elector.clone();
        tokio::spawn(async move { elector.try_acquire_or_renew().await.unwrap() })
    };
    api.expect("GET", LEASE, 200, lease("pod-b_9", 60, 3)).await;
    api.expect("PUT", LEASE, 409, status(409, "Conflict")).await;
    assert_eq!(first.await.unwrap(), Round::Conflict);

    let second = tokio::spawn(async move { elector.try_acquire_or_renew().await.unwrap() });
    api.expect("GET", LEASE, 404, status(404, "NotFound")).await;
    api.expect("POST", LEASES, 409, status(409, "AlreadyExists"))
        .await;
    assert_eq!(second.await.unwrap(), Round::Conflict);
}

#[tokio::test]
async fn other_api_errors_are_reported_with_the_lease() {
    let (elector, mut api) = setup();
    let round = tokio::spawn(async move { elector.try_acquire_or_renew().await });
    api.expect("GET", LEASE, 403, status(403, "Forbidden"))
        .await;
    let error = round.await.unwrap().unwrap_err().to_string();
    assert!(
        error.contains("kubeflow-system/trainer.kubeflow.org"),
        "{error}"
    );
}

#[tokio::test]
async fn release_clears_only_our_own_hold() {
    let (elector, mut api) = setup();
    let elector = std::sync::Arc::new(elector);
    let mine = {
        let elector = elector.clone();
        tokio::spawn(async move { elector.release().await.unwrap() })
    };
    api.expect("GET", LEASE, 200, lease(ME, 1, 2)).await;
    let put = api.expect("PUT", LEASE, 200, lease("", 0, 2)).await;
    assert!(
        put["spec"].get("holderIdentity").is_none_or(Value::is_null),
        "{put}"
    );
    assert_eq!(put["spec"]["leaseDurationSeconds"], 1);
    assert_eq!(put["spec"]["leaseTransitions"], 2);
    assert!(mine.await.unwrap());

    let theirs = tokio::spawn(async move { elector.release().await.unwrap() });
    api.expect("GET", LEASE, 200, lease("pod-b_9", 1, 2)).await;
    assert!(
        !theirs.await.unwrap(),
        "someone else's lease is not touched"
    );
}

#[tokio::test(start_paused = true)]
async fn the_loop_leads_steps_down_after_the_renew_deadline_and_reacquires() {
    let (elector, mut api) = setup();
    let (tx, mut leadership) = Leadership::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(elector.run(tx, async {
        let _ = stopped.await;
    }));

    api.expect("GET", LEASE, 404, status(404, "NotFound")).await;
    api.expect("POST", LEASES, 201, lease(ME, 0, 0)).await;
    assert!(leadership.acquired().await);
    let led_at = tokio::time::Instant::now();

    // The API server fails every renewal: still leader until the renew deadline (10 s) has passed. The first
    // failure is the one-request renewal over our own write; after it the elector reads first.
    api.expect("PUT", LEASE, 500, status(500, "InternalError"))
        .await;
    loop {
        api.expect("GET", LEASE, 500, status(500, "InternalError"))
            .await;
        tokio::task::yield_now().await;
        if !leadership.is_leader() {
            break;
        }
        assert!(
            led_at.elapsed() < Duration::from_secs(13),
            "stepped down too late"
        );
    }
    assert!(
        led_at.elapsed() >= Duration::from_secs(10),
        "stepped down too early"
    );

    // The API server is back and the lease is still ours: leading again.
    api.expect("GET", LEASE, 200, lease(ME, 12, 0)).await;
    api.expect("PUT", LEASE, 200, lease(ME, 0, 0)).await;
    assert!(leadership.acquired().await);

    // Graceful shutdown: leadership ends first, then the lease is released.
    stop.send(()).unwrap();
    api.expect("GET", LEASE, 200, lease(ME, 0, 0)).await;
    let put = api.expect("PUT", LEASE, 200, lease("", 0, 0)).await;
    assert!(put["spec"].get("holderIdentity").is_none_or(Value::is_null));
    running.await.unwrap().unwrap();
    assert!(!leadership.is_leader());
}

#[tokio::test(start_paused = true)]
async fn a_follower_never_leads_while_another_replica_renews() {
    let (elector, mut api) = setup();
    let (tx, leadership) = Leadership::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(elector.run(tx, async {
        let _ = stopped.await;
    }));
    for _ in 0..5 {
        api.expect("GET", LEASE, 200, lease("pod-b_9", 1, 1)).await;
        assert!(!leadership.is_leader());
    }
    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
    assert!(!leadership.is_leader());
}
