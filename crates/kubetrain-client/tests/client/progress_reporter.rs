//! The progress reporter on the wire: a loopback HTTP server records what it receives and answers as the
//! status server would; the request, the token handling and the SDK's throttle are checked, and (issue 38)
//! that a stalled endpoint does not hold up the caller.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use kubetrain_client::progress::{Progress, ReportError, Reporter, Sent};

/// Generous: deliveries on loopback take milliseconds; this only bounds a failing test.
const GUARD: Duration = Duration::from_secs(20);

/// Answers each connection with the next `(status, body)` and sends the raw request it read to the test.
fn server(answers: Vec<(u16, &'static str)>) -> (String, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for (status, body) in answers {
            let (mut stream, _) = listener.accept().unwrap();
            let mut raw = Vec::new();
            let mut chunk = [0u8; 4096];
            // Read the head, then the body its Content-Length announces.
            loop {
                let n = stream.read(&mut chunk).unwrap();
                raw.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&raw).into_owned();
                if let Some(end) = text.find("\r\n\r\n") {
                    let len: usize = text
                        .lines()
                        .find_map(|l| l.strip_prefix("Content-Length: "))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    if raw.len() >= end + 4 + len {
                        break;
                    }
                }
            }
            let answer = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(answer.as_bytes()).unwrap();
            tx.send(String::from_utf8(raw).unwrap()).unwrap();
        }
    });
    (
        format!(
            "http://{addr}/apis/trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs/mnist/status"
        ),
        rx,
    )
}

#[test]
fn posts_the_sdks_request_then_throttles_and_a_refusal_does_not_start_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "projected-token\n").unwrap();
    let (url, requests) = server(vec![
        (
            403,
            r#"{"metadata":{},"status":"Failure","message":"Forbidden","reason":"Forbidden","code":403}"#,
        ),
        (200, "{}"),
    ]);
    let reporter = Reporter::new(&url, None, Some(token)).unwrap();
    let update = Progress::new()
        .percent(40)
        .remaining_seconds(600)
        .metric("loss", 0.25)
        .metric("step", 40);

    // Queued at once; the background sender delivers it and gets the 403.
    assert_eq!(reporter.report(&update).unwrap(), Sent::Queued);
    assert!(reporter.flush(GUARD));
    let raw = requests.recv().unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    assert!(
        head.starts_with("POST /apis/trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs/mnist/status HTTP/1.1\r\n"),
        "{head}"
    );
    assert!(
        head.contains("\r\nAuthorization: Bearer projected-token\r\n"),
        "{head}"
    );
    assert!(
        head.contains("\r\nContent-Type: application/json\r\n"),
        "{head}"
    );
    let body: serde_json::Value = serde_json::from_str(body).unwrap();
    let status = &body["trainerStatus"];
    assert_eq!(status["progressPercentage"], 40);
    assert_eq!(status["estimatedRemainingSeconds"], 600);
    assert_eq!(
        status["metrics"],
        serde_json::json!([{"name": "loss", "value": "0.25"}, {"name": "step", "value": "40"}])
    );
    assert!(
        status["lastUpdatedTime"]
            .as_str()
            .unwrap()
            .ends_with("+00:00")
    );

    // The refusal did not start the 5 s window: the next update is queued, and the caller learns of the
    // refusal then (once).
    match reporter.report(&update) {
        Err(ReportError::Earlier(error)) => match *error {
            ReportError::Http { status: 403, body } => {
                assert!(body.contains("Forbidden"), "{body}")
            }
            other => panic!("expected the 403, got {other:?}"),
        },
        other => panic!("expected the earlier 403, got {other:?}"),
    }
    assert!(reporter.flush(GUARD));
    requests.recv().unwrap();
    // Within the window nothing is sent (the server would not answer a third connection).
    assert_eq!(reporter.report(&update).unwrap(), Sent::Throttled);
    assert!(requests.try_recv().is_err());
}

#[test]
fn no_token_no_request_and_bad_configuration_is_reported() {
    let (url, requests) = server(vec![]);
    let reporter = Reporter::new(&url, None, Some("/nonexistent/token".into())).unwrap();
    assert!(matches!(
        reporter.report(&Progress::new().percent(1)),
        Err(ReportError::NoToken(Some(_)))
    ));
    assert!(requests.try_recv().is_err());
    assert!(matches!(
        Reporter::new("ftp://host/path", None, None),
        Err(ReportError::Config(_))
    ));
    let dir = tempfile::tempdir().unwrap();
    let not_a_cert = dir.path().join("ca.crt");
    std::fs::write(&not_a_cert, "not a certificate").unwrap();
    assert!(matches!(
        Reporter::new("https://127.0.0.1:1/p", Some(not_a_cert), None),
        Err(ReportError::Config(_))
    ));
}

#[test]
fn a_stalled_endpoint_does_not_hold_up_the_training_loop() {
    // Issue 38: the reporter posted on the caller's thread, so every step waited for the 5 s timeout.
    // This endpoint accepts connections and never reads or answers them.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://{}/apis/trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs/mnist/status",
        listener.local_addr().unwrap()
    );
    let (accepted, connections) = mpsc::channel();
    thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            let Ok(stream) = stream else { break };
            held.push(stream);
            if accepted.send(held.len()).is_err() {
                break;
            }
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "projected-token\n").unwrap();
    let reporter = Reporter::new(&url, None, Some(token)).unwrap();

    let began = Instant::now();
    assert_eq!(
        reporter.report(&Progress::new().percent(1)).unwrap(),
        Sent::Queued
    );
    // The update is on the wire, its answer never coming.
    connections
        .recv_timeout(GUARD)
        .expect("the update was never sent");
    let mut calls = vec![began.elapsed()];
    // The training loop goes on: each call only replaces the update waiting behind the stalled one.
    for step in 2..=20 {
        let call = Instant::now();
        assert_eq!(
            reporter.report(&Progress::new().percent(step)).unwrap(),
            Sent::Queued
        );
        calls.push(call.elapsed());
    }
    let total: Duration = calls.iter().sum();
    // A blocking post takes the 5 s timeout; a queued one, microseconds (50 ms each on average bounds a
    // loaded machine).
    assert!(
        total < Duration::from_secs(1) && calls.iter().all(|c| *c < Duration::from_millis(500)),
        "report() calls took {calls:?}"
    );
    // Still one connection: a queue of one, not one request per call.
    assert!(connections.try_recv().is_err());
}
