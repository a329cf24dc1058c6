//! The progress reporter on the wire: a loopback HTTP server records what it receives and answers as the
//! status server would; the request, the token handling and the SDK's throttle are checked.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::thread;

use kubetrain_client::progress::{Progress, ReportError, Reporter, Sent};

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

    match reporter.report(&update) {
        Err(ReportError::Http { status: 403, body }) => {
            assert!(body.contains("Forbidden"), "{body}")
        }
        other => panic!("expected the 403, got {other:?}"),
    }
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

    // The refusal did not start the 5 s window: the next update is sent, and accepted.
    assert_eq!(reporter.report(&update).unwrap(), Sent::Posted);
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
