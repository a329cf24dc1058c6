//! The probe and metrics endpoint on loopback, with the controller's real metrics registered.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use kubetrain_controller::ControllerMetrics;
use kubetrain_controller::http::{Endpoints, Health};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use tokio::net::TcpStream;

async fn get(addr: SocketAddr, method: Method, path: &str) -> (StatusCode, String, String) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(connection);
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        content_type,
        String::from_utf8(body.to_vec()).unwrap(),
    )
}

#[tokio::test]
async fn probes_and_metrics_are_served_and_readiness_follows_the_checks() {
    let mut registry = Registry::default();
    let _metrics = ControllerMetrics::register(&mut registry);
    let scrapes = Counter::<u64>::default();
    registry.register(
        "test_scrapes",
        "A counter owned by the test",
        scrapes.clone(),
    );
    scrapes.inc_by(3);

    let health = Health::new();
    let webhook = health.check("webhook");
    let election = health.check("leader-election");
    let endpoints = Endpoints::bind("127.0.0.1:0".parse().unwrap(), Arc::new(registry), health)
        .await
        .unwrap();
    let addr = endpoints.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(endpoints.serve(async {
        let _ = stopped.await;
    }));

    let (status, _, body) = get(addr, Method::GET, "/healthz").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ok\n"));

    let (status, _, body) = get(addr, Method::GET, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body, "not ready: webhook, leader-election\n");
    webhook.set(true);
    let (status, _, body) = get(addr, Method::GET, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body, "not ready: leader-election\n");
    election.set(true);
    let (status, _, _) = get(addr, Method::GET, "/readyz").await;
    assert_eq!(status, StatusCode::OK);
    webhook.set(false);
    let (status, _, _) = get(addr, Method::GET, "/readyz").await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "readiness can be lost again"
    );

    let (status, content_type, body) = get(addr, Method::GET, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    assert!(body.contains("test_scrapes_total 3"), "{body}");
    assert!(body.contains("kubetrain_trainjob_reconcile"), "{body}");
    assert!(body.trim_end().ends_with("# EOF"), "{body}");

    let (status, _, body) = get(addr, Method::GET, "/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.contains("/metrics"));
    let (status, _, _) = get(addr, Method::POST, "/healthz").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);

    stop.send(()).unwrap();
    served.await.unwrap();
    assert!(TcpStream::connect(addr).await.is_err(), "stopped listening");
}

#[tokio::test]
async fn a_taken_port_is_an_error_naming_the_address() {
    let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = taken.local_addr().unwrap();
    let error = match Endpoints::bind(addr, Arc::new(Registry::default()), Health::new()).await {
        Ok(_) => panic!("bound a taken port"),
        Err(error) => error,
    };
    assert!(error.to_string().contains(&addr.to_string()), "{error}");
}
