//! Lease election against the in-memory API server (client-go's rules, one round at a time, then the loop
//! with virtual time): the Lease lives in the fake's store, which answers reads, writes and their
//! resourceVersion conflicts as the API server does; the request log shows each round's exact requests.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kubetrain_controller::Leadership;
use kubetrain_controller::election::{ElectionConfig, LeaderElector, Round};
use kubetrain_test_support::{FakeApiServer, api_status};
use serde_json::{Value, json};

const LEASE: &str =
    "/apis/coordination.k8s.io/v1/namespaces/kubeflow-system/leases/trainer.kubeflow.org";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kubeflow-system/leases";
const ME: &str = "pod-a_1";

fn setup() -> (LeaderElector, FakeApiServer) {
    let server = FakeApiServer::start();
    server.record_requests();
    let config = ElectionConfig::new("kubeflow-system", "trainer.kubeflow.org", ME);
    (LeaderElector::new(server.client(), config), server)
}

/// The requests since the last call, as `METHOD path` lines, and their JSON bodies.
fn taken(server: &FakeApiServer) -> (Vec<String>, Vec<Value>) {
    server
        .take_requests()
        .into_iter()
        .map(|r| {
            let path = r.uri.split('?').next().unwrap_or_default().to_owned();
            (format!("{} {path}", r.method), r.body)
        })
        .unzip()
}

fn get() -> String {
    format!("GET {LEASE}")
}

fn put() -> String {
    format!("PUT {LEASE}")
}

fn post() -> String {
    format!("POST {LEASES}")
}

/// The Lease as stored now.
fn stored(server: &FakeApiServer) -> Value {
    server
        .get(
            "coordination.k8s.io/v1",
            "leases",
            "kubeflow-system",
            "trainer.kubeflow.org",
        )
        .expect("the Lease is stored")
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
        "metadata": {"name": "trainer.kubeflow.org", "namespace": "kubeflow-system"},
        "spec": {
            "holderIdentity": holder, "leaseDurationSeconds": 15,
            "acquireTime": ago(100), "renewTime": ago(renewed_secs_ago),
            "leaseTransitions": transitions
        }
    })
}

#[tokio::test]
async fn a_missing_lease_is_created_and_held() {
    let (elector, server) = setup();
    let round = elector.try_acquire_or_renew().await.unwrap();
    let (calls, bodies) = taken(&server);
    assert_eq!(calls, [get(), post()]);
    let created = &bodies[1];
    assert_eq!(created["metadata"]["name"], "trainer.kubeflow.org");
    assert_eq!(created["spec"]["holderIdentity"], ME);
    assert_eq!(created["spec"]["leaseDurationSeconds"], 15);
    assert_eq!(created["spec"]["leaseTransitions"], 0);
    assert_eq!(created["spec"]["acquireTime"], created["spec"]["renewTime"]);
    assert_eq!(round, Round::Acquired { transitions: 0 });
    assert_eq!(stored(&server)["spec"]["holderIdentity"], ME);
}

#[tokio::test]
async fn a_fresh_lease_of_another_replica_is_left_alone() {
    let (elector, server) = setup();
    server.insert(lease("pod-b_9", 3, 5));
    let before = stored(&server);
    assert_eq!(
        elector.try_acquire_or_renew().await.unwrap(),
        Round::HeldBy {
            holder: "pod-b_9".into()
        }
    );
    assert_eq!(taken(&server).0, [get()]);
    assert_eq!(stored(&server), before);
}

#[tokio::test]
async fn an_expired_lease_is_taken_over_with_one_more_transition() {
    let (elector, server) = setup();
    server.insert(lease("pod-b_9", 60, 3));
    let read = stored(&server)["metadata"]["resourceVersion"].clone();
    let round = elector.try_acquire_or_renew().await.unwrap();
    let (calls, bodies) = taken(&server);
    assert_eq!(calls, [get(), put()]);
    let put = &bodies[1];
    assert_eq!(
        put["metadata"]["resourceVersion"], read,
        "optimistic concurrency"
    );
    assert_eq!(put["spec"]["holderIdentity"], ME);
    assert_eq!(put["spec"]["leaseTransitions"], 4);
    assert_eq!(put["spec"]["acquireTime"], put["spec"]["renewTime"]);
    assert_eq!(round, Round::Acquired { transitions: 4 });
}

#[tokio::test]
async fn a_released_lease_is_taken_at_once() {
    let (elector, server) = setup();
    let mut released = lease("", 1, 2);
    released["spec"]["leaseDurationSeconds"] = json!(1);
    server.insert(released);
    let round = elector.try_acquire_or_renew().await.unwrap();
    let (calls, bodies) = taken(&server);
    assert_eq!(calls, [get(), put()]);
    assert_eq!(bodies[1]["spec"]["holderIdentity"], ME);
    assert_eq!(round, Round::Acquired { transitions: 3 });
}

#[tokio::test]
async fn the_holder_renews_without_a_new_acquire_time() {
    let (elector, server) = setup();
    server.insert(lease(ME, 2, 7));
    let held = stored(&server);
    let round = elector.try_acquire_or_renew().await.unwrap();
    let (calls, bodies) = taken(&server);
    assert_eq!(calls, [get(), put()]);
    let put = &bodies[1];
    assert_eq!(put["spec"]["acquireTime"], held["spec"]["acquireTime"]);
    assert_ne!(put["spec"]["renewTime"], held["spec"]["renewTime"]);
    assert_eq!(put["spec"]["leaseTransitions"], 7);
    assert_eq!(
        put["metadata"]["resourceVersion"],
        held["metadata"]["resourceVersion"]
    );
    assert_eq!(round, Round::Renewed);
}

#[tokio::test]
async fn after_its_own_write_the_holder_renews_with_one_request() {
    let (elector, server) = setup();
    assert_eq!(
        elector.try_acquire_or_renew().await.unwrap(),
        Round::Acquired { transitions: 0 }
    );
    assert_eq!(taken(&server).0, [get(), post()]);
    let created = stored(&server)["metadata"]["resourceVersion"].clone();

    // No GET: the renewal writes over the stored Lease, with the stored resourceVersion.
    assert_eq!(
        elector.try_acquire_or_renew().await.unwrap(),
        Round::Renewed
    );
    let (calls, bodies) = taken(&server);
    assert_eq!(calls, [put()]);
    assert_eq!(bodies[0]["metadata"]["resourceVersion"], created);
    assert_eq!(bodies[0]["spec"]["holderIdentity"], ME);
    assert_eq!(bodies[0]["spec"]["leaseTransitions"], 0);
    let renewed = stored(&server)["metadata"]["resourceVersion"].clone();
    assert_ne!(renewed, created);

    assert_eq!(
        elector.try_acquire_or_renew().await.unwrap(),
        Round::Renewed
    );
    let (calls, bodies) = taken(&server);
    assert_eq!(calls, [put()]);
    assert_eq!(
        bodies[0]["metadata"]["resourceVersion"], renewed,
        "each renewal carries the resourceVersion of the previous answer"
    );
}

#[tokio::test]
async fn a_conflicting_renewal_falls_back_to_reading_the_lease() {
    let (elector, server) = setup();
    server.insert(lease(ME, 2, 7));
    assert_eq!(
        elector.try_acquire_or_renew().await.unwrap(),
        Round::Renewed
    );
    assert_eq!(taken(&server).0, [get(), put()]);
    let ours = stored(&server)["metadata"]["resourceVersion"].clone();

    // Another replica took the Lease over meanwhile: the one-request renewal gets 409 (its resourceVersion
    // is stale), the round reads the Lease, finds it held and fresh, and leaves it alone.
    server.insert(lease("pod-b_9", 0, 8));
    assert_eq!(
        elector.try_acquire_or_renew().await.unwrap(),
        Round::HeldBy {
            holder: "pod-b_9".into()
        }
    );
    let (calls, bodies) = taken(&server);
    assert_eq!(calls, [put(), get()]);
    assert_eq!(bodies[0]["metadata"]["resourceVersion"], ours);
    assert_eq!(stored(&server)["spec"]["holderIdentity"], "pod-b_9");
}

#[tokio::test]
async fn losing_a_write_race_is_a_conflict_not_an_error() {
    let (elector, server) = setup();
    let elector = Arc::new(elector);
    let round = |elector: &Arc<LeaderElector>| {
        let elector = elector.clone();
        tokio::spawn(async move { elector.try_acquire_or_renew().await.unwrap() })
    };

    // Another replica writes the expired Lease while our takeover is in flight: ours gets 409.
    server.insert(lease("pod-b_9", 60, 3));
    let mut held = server.hold(|r| r.method == "PUT");
    let first = round(&elector);
    let takeover = held.next().await.unwrap();
    server.insert(lease("pod-c_2", 0, 4));
    takeover.release();
    assert_eq!(first.await.unwrap(), Round::Conflict);
    assert_eq!(taken(&server).0, [get(), put()]);

    // The same for a create: the Lease appears while our POST is in flight (409 AlreadyExists).
    server.remove(
        "coordination.k8s.io/v1",
        "leases",
        "kubeflow-system",
        "trainer.kubeflow.org",
    );
    let mut held = server.hold(|r| r.method == "POST");
    let second = round(&elector);
    let create = held.next().await.unwrap();
    server.insert(lease("pod-c_2", 0, 4));
    create.release();
    assert_eq!(second.await.unwrap(), Round::Conflict);
    assert_eq!(taken(&server).0, [get(), post()]);
    assert_eq!(stored(&server)["spec"]["holderIdentity"], "pod-c_2");
}

#[tokio::test]
async fn other_api_errors_are_reported_with_the_lease() {
    let (elector, server) = setup();
    server.intercept(|_| {
        Some(api_status(
            403,
            "Forbidden",
            "leases.coordination.k8s.io \"trainer.kubeflow.org\" is forbidden",
        ))
    });
    let error = elector
        .try_acquire_or_renew()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("kubeflow-system/trainer.kubeflow.org"),
        "{error}"
    );
    assert_eq!(taken(&server).0, [get()]);
}

#[tokio::test]
async fn release_clears_only_our_own_hold() {
    let (elector, server) = setup();
    server.insert(lease(ME, 1, 2));
    assert!(elector.release().await.unwrap());
    let (calls, bodies) = taken(&server);
    assert_eq!(calls, [get(), put()]);
    let put = &bodies[1];
    assert!(
        put["spec"].get("holderIdentity").is_none_or(Value::is_null),
        "{put}"
    );
    assert_eq!(put["spec"]["leaseDurationSeconds"], 1);
    assert_eq!(put["spec"]["leaseTransitions"], 2);

    server.insert(lease("pod-b_9", 1, 2));
    let theirs = stored(&server);
    assert!(
        !elector.release().await.unwrap(),
        "someone else's lease is not touched"
    );
    assert_eq!(taken(&server).0, [get()]);
    assert_eq!(stored(&server), theirs);
}

#[tokio::test(start_paused = true)]
async fn the_loop_leads_steps_down_after_the_renew_deadline_and_reacquires() {
    let (elector, server) = setup();
    let (tx, mut leadership) = Leadership::channel();
    let mut changes = tx.subscribe();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(elector.run(tx, async {
        let _ = stopped.await;
    }));

    assert!(leadership.acquired().await);
    let led_at = tokio::time::Instant::now();
    assert_eq!(taken(&server).0, [get(), post()]);

    // The API server fails every request: still leader until the renew deadline (10 s) has passed.
    server.intercept(|_| {
        Some(api_status(
            500,
            "InternalError",
            "etcdserver: request timed out",
        ))
    });
    changes.wait_for(|leader| !*leader).await.unwrap();
    let led_for = led_at.elapsed();
    assert!(led_for >= Duration::from_secs(10), "stepped down too early");
    assert!(led_for < Duration::from_secs(13), "stepped down too late");
    // The first failure is the one-request renewal over our own write; after it the elector reads first.
    let (failed, _) = taken(&server);
    assert_eq!(failed[0], put(), "{failed:?}");
    assert!(
        failed.len() > 1 && failed[1..].iter().all(|call| *call == get()),
        "{failed:?}"
    );

    // The API server is back and the lease is still ours: leading again.
    server.insert(lease(ME, 12, 0));
    server.intercept(|_| None);
    assert!(leadership.acquired().await);
    assert_eq!(taken(&server).0, [get(), put()]);

    // Graceful shutdown: leadership ends first, then the lease is released.
    let mut held = server.hold(|r| r.method == "PUT");
    stop.send(()).unwrap();
    let release = held.next().await.unwrap();
    assert!(!leadership.is_leader(), "no longer leader once releasing");
    assert!(
        release.request.body["spec"]
            .get("holderIdentity")
            .is_none_or(Value::is_null)
    );
    release.release();
    running.await.unwrap().unwrap();
    assert!(!leadership.is_leader());
    assert_eq!(taken(&server).0, [get(), put()]);
    assert!(
        stored(&server)["spec"]
            .get("holderIdentity")
            .is_none_or(Value::is_null)
    );
}

#[tokio::test(start_paused = true)]
async fn a_follower_never_leads_while_another_replica_renews() {
    let (elector, server) = setup();
    server.insert(lease("pod-b_9", 1, 1));
    let mut held = server.hold(|r| r.method == "GET");
    let (tx, leadership) = Leadership::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(elector.run(tx, async {
        let _ = stopped.await;
    }));
    for _ in 0..5 {
        let read = held.next().await.unwrap();
        assert!(!leadership.is_leader());
        // The other replica renews before each of our reads is answered.
        server.insert(lease("pod-b_9", 1, 1));
        read.release();
    }
    // Answers whatever read is still held, so the round in flight ends and the loop sees the stop.
    drop(held);
    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
    assert!(!leadership.is_leader());
    let (calls, _) = taken(&server);
    assert!(
        calls.len() >= 5 && calls.iter().all(|call| *call == get()),
        "only reads: {calls:?}"
    );
}
