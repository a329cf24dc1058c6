//! Issue 39, item 2: downloads never hang (connect, first-byte and idle timeouts, each retried
//! with a log line), partial files never collide with remote names, over-long names are skipped,
//! listed sizes are summed with checked arithmetic, and an unverifiable multipart object is an
//! error unless accepted.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kubetrain_initializer::{InitConfig, InitError, Kind, ProgressMode, StorageUri, initialize};
use kubetrain_test_support::MemoryS3Server;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

/// A failure guard only: every test here ends in well under a second once timeouts work.
async fn within<T>(fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), fut)
        .await
        .expect("test timed out after 30 s: a download waited for ever")
}

/// What the raw server does with a request.
#[derive(Clone)]
enum Reply {
    /// Reads the request and never answers (the connection stays open).
    Silent,
    /// Sends a 200 head announcing `len` bytes, then `body` (fewer), then nothing more.
    Stall { len: usize, body: Vec<u8> },
    /// A complete 200 answer.
    Ok(Vec<u8>),
}

/// An HTTP/1.1 server on 127.0.0.1 that answers by path prefix (first match), so a test can
/// make one request hang and another succeed.
struct RawServer {
    addr: std::net::SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl RawServer {
    async fn start(routes: Vec<(&'static str, Reply)>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let routes = Arc::new(routes);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, Arc::clone(&routes)));
            }
        });
        Self { addr, task }
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut stream: TcpStream, routes: Arc<Vec<(&'static str, Reply)>>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&head);
    let path = text.split(' ').nth(1).unwrap_or("/").to_string();
    let reply = routes
        .iter()
        .find(|(prefix, _)| path.starts_with(prefix))
        .map_or(Reply::Silent, |(_, reply)| reply.clone());
    let (len, body, complete) = match reply {
        Reply::Silent => {
            // Hold the connection open until the client gives up.
            let _ = stream.read(&mut buf).await;
            return;
        }
        Reply::Stall { len, body } => (len, body, false),
        Reply::Ok(body) => (body.len(), body, true),
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len}\r\n\r\n"
    );
    if stream.write_all(head.as_bytes()).await.is_err() || stream.write_all(&body).await.is_err() {
        return;
    }
    if !complete {
        let _ = stream.read(&mut buf).await;
    }
}

/// A config with short limits: every wait is at most a fraction of a second.
fn quick(uri: &str, kind: Kind, dest: &Path) -> InitConfig {
    let mut config = InitConfig::new(kind, StorageUri::parse(uri, kind).unwrap());
    config.destination = dest.to_path_buf();
    config.progress = ProgressMode::Off;
    config.tuning.max_retries = 1;
    config.tuning.initial_backoff = Duration::from_millis(10);
    config.tuning.connect_timeout = Duration::from_millis(500);
    config.tuning.first_byte_timeout = Duration::from_millis(300);
    config.tuning.read_timeout = Duration::from_millis(300);
    config.tuning.sync_files = false;
    config
}

fn hub_config(server: &RawServer, dest: &Path) -> InitConfig {
    let mut config = quick("hf://org/tiny", Kind::Model, dest);
    config.hub.endpoint = server.endpoint();
    config
}

fn s3_config(endpoint: String, uri: &str, dest: &Path) -> InitConfig {
    let mut config = quick(uri, Kind::Dataset, dest);
    config.s3.endpoint = Some(endpoint);
    config.s3.access_key_id = Some("AKIAKUBETRAIN".into());
    config.s3.secret_access_key = Some("kubetrain-secret-key".into());
    config
}

/// Every file below `dir`, relative, sorted.
fn files_below(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(
                    path.strip_prefix(dir)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    out.sort();
    out
}

/// The listing of `org/tiny` with these (path, size) siblings (git blob ids, never matched).
fn listing(files: &[(&str, u64)]) -> Vec<u8> {
    let siblings: Vec<String> = files
        .iter()
        .map(|(path, size)| {
            format!(
                r#"{{"rfilename":"{path}","size":{size},"blobId":"{}"}}"#,
                "ab".repeat(20)
            )
        })
        .collect();
    format!(
        r#"{{"id":"org/tiny","sha":"{SHA}","siblings":[{}]}}"#,
        siblings.join(",")
    )
    .into_bytes()
}

fn expect_timeout(err: &InitError, kind: &str) {
    let text = err.to_string();
    assert!(
        text.contains(kind) && text.contains("after 2 attempts"),
        "expected a {kind} after 2 attempts, got: {text}"
    );
}

thread_local! {
    /// Where this thread's log lines go while [`logged`] runs on it.
    static CAPTURE: std::cell::RefCell<Option<Arc<Mutex<Vec<u8>>>>> =
        const { std::cell::RefCell::new(None) };
}

/// The writer of the one global subscriber: the capture buffer of the writing thread, if any.
struct ThreadSink;

impl std::io::Write for ThreadSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        CAPTURE.with(|capture| {
            if let Some(sink) = &*capture.borrow() {
                sink.lock().unwrap().extend_from_slice(buf);
            }
        });
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Log lines written while `fut` runs on this thread (the tests run on current-thread runtimes, so the
/// retries log here). One global subscriber, not a scoped one per test: with scoped subscribers, a callsite
/// first reached on another test's thread, with none set, could be cached as uninteresting and its lines lost.
async fn logged<T>(fut: impl Future<Output = T>) -> (T, String) {
    static GLOBAL: std::sync::Once = std::sync::Once::new();
    GLOBAL.call_once(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_writer(|| ThreadSink)
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
    });
    let sink = Arc::new(Mutex::new(Vec::new()));
    CAPTURE.with(|capture| *capture.borrow_mut() = Some(sink.clone()));
    let out = fut.await;
    CAPTURE.with(|capture| *capture.borrow_mut() = None);
    let text = String::from_utf8_lossy(&sink.lock().unwrap()).into_owned();
    (out, text)
}

#[tokio::test(flavor = "current_thread")]
async fn a_hub_listing_that_never_answers_times_out_with_a_log_line_per_retry() {
    within(async {
        let server = RawServer::start(vec![]).await;
        let dest = tempfile::tempdir().unwrap();
        let (result, logs) = logged(initialize(&hub_config(&server, dest.path()))).await;
        let err = result.unwrap_err();
        assert!(matches!(err, InitError::Unreachable { .. }), "{err:?}");
        expect_timeout(&err, "first-byte timeout");
        assert_eq!(
            logs.matches("no answer to the repository listing").count(),
            1,
            "one warning for the one retry: {logs}"
        );
        assert!(logs.contains("WARN") && logs.contains("retry=1"), "{logs}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_listing_that_stops_halfway_times_out() {
    within(async {
        let full = listing(&[("config.json", 10)]);
        let server = RawServer::start(vec![(
            "/api/",
            Reply::Stall {
                len: full.len(),
                body: full[..full.len() / 2].to_vec(),
            },
        )])
        .await;
        let dest = tempfile::tempdir().unwrap();
        let err = initialize(&hub_config(&server, dest.path()))
            .await
            .unwrap_err();
        expect_timeout(&err, "idle timeout");
        assert!(files_below(dest.path()).is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_file_that_never_answers_times_out_and_leaves_no_partial_file() {
    within(async {
        let server = RawServer::start(vec![
            ("/api/", Reply::Ok(listing(&[("config.json", 10)]))),
            ("/org/tiny/resolve/", Reply::Silent),
        ])
        .await;
        let dest = tempfile::tempdir().unwrap();
        let err = initialize(&hub_config(&server, dest.path()))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, InitError::Transfer { key, .. } if key == "config.json"),
            "{err:?}"
        );
        expect_timeout(&err, "first-byte timeout");
        assert!(
            files_below(dest.path()).is_empty(),
            "{:?}",
            files_below(dest.path())
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_s3_listing_that_never_answers_times_out() {
    within(async {
        let server = RawServer::start(vec![]).await;
        let dest = tempfile::tempdir().unwrap();
        let err = initialize(&s3_config(server.endpoint(), "s3://data/p", dest.path()))
            .await
            .unwrap_err();
        assert!(matches!(err, InitError::Unreachable { .. }), "{err:?}");
        expect_timeout(&err, "first-byte timeout");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_s3_listing_that_stops_halfway_times_out() {
    within(async {
        let page = br#"<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Contents><Key>p/a</Key><Size>1</Size></Contents>"#;
        let server = RawServer::start(vec![(
            "/data",
            Reply::Stall {
                len: page.len() + 100,
                body: page.to_vec(),
            },
        )])
        .await;
        let dest = tempfile::tempdir().unwrap();
        let err = initialize(&s3_config(server.endpoint(), "s3://data/p", dest.path()))
            .await
            .unwrap_err();
        expect_timeout(&err, "idle timeout");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_sizes_that_overflow_are_refused_not_wrapped() {
    within(async {
        let huge = u64::MAX / 2 + 1;
        let server = RawServer::start(vec![(
            "/api/",
            Reply::Ok(listing(&[("a.json", huge), ("b.json", huge)])),
        )])
        .await;
        let dest = tempfile::tempdir().unwrap();
        let err = initialize(&hub_config(&server, dest.path()))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, InitError::Protocol { detail, .. } if detail.contains("sizes")),
            "{err:?}"
        );
        assert!(files_below(dest.path()).is_empty());
    })
    .await;
}

const AK: &str = "AKIAKUBETRAIN";
const SK: &str = "kubetrain-secret-key";

fn data(seed: u8, len: usize) -> Bytes {
    (0..len)
        .map(|i| seed.wrapping_add((i % 251) as u8))
        .collect::<Vec<u8>>()
        .into()
}

fn memory_s3(objects: Vec<(String, Bytes)>) -> MemoryS3Server {
    MemoryS3Server::start("data", objects, AK, SK).unwrap()
}

/// The files of the staging directory (files being written, or left by a crash).
fn staged(dest: &Path) -> Vec<String> {
    files_below(&dest.join(".kubetrain-initializer/partial"))
}

/// A remote file named like the old partial file of another (`.<X>.kubetrain-partial`) keeps
/// its own content, and a rerun neither deletes nor downloads it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_file_named_like_a_partial_file_keeps_its_own_content() {
    within(async {
        let (x, partial_like) = (data(1, 300_000), data(2, 300_000));
        let (y, y_partial_like) = (data(3, 5_000), data(4, 7_000));
        let server = memory_s3(vec![
            ("p/x.bin".into(), x.clone()),
            ("p/.x.bin.kubetrain-partial".into(), partial_like.clone()),
            ("p/d/y.json".into(), y.clone()),
            (
                "p/d/.y.json.kubetrain-partial".into(),
                y_partial_like.clone(),
            ),
        ]);
        for _ in 0..4 {
            let dest = tempfile::tempdir().unwrap();
            let config = s3_config(server.endpoint(), "s3://data/p", dest.path());
            let first = initialize(&config).await.unwrap();
            assert_eq!(first.files_downloaded, 4, "{first:?}");
            for (path, want) in [
                ("x.bin", &x),
                (".x.bin.kubetrain-partial", &partial_like),
                ("d/y.json", &y),
                ("d/.y.json.kubetrain-partial", &y_partial_like),
            ] {
                let got = std::fs::read(dest.path().join(path)).unwrap();
                assert!(got == want[..], "{path} holds another file's content");
            }
            let again = initialize(&config).await.unwrap();
            assert_eq!(
                (again.files_already_present, again.files_downloaded),
                (4, 0),
                "a rerun keeps every remote file: {again:?}"
            );
            assert!(staged(dest.path()).is_empty());
        }
    })
    .await;
}

/// The state directory is the initializer's: a remote file there could forge a version tag or
/// replace a file being written, so it is refused with a warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_files_in_the_state_directory_are_refused() {
    within(async {
        let server = memory_s3(vec![
            (
                "p/.kubetrain-initializer/partial/0.part".into(),
                data(5, 100),
            ),
            ("p/.kubetrain-initializer/tags/x.bin".into(), data(6, 10)),
            ("p/x.bin".into(), data(7, 1_000)),
            ("p/sub/.kubetrain-initializer/ok".into(), data(8, 10)),
        ]);
        let dest = tempfile::tempdir().unwrap();
        let summary = initialize(&s3_config(server.endpoint(), "s3://data/p", dest.path()))
            .await
            .unwrap();
        assert_eq!(
            (summary.files_downloaded, summary.files_refused),
            (2, 2),
            "{summary:?}"
        );
        assert_eq!(
            files_below(dest.path()),
            ["sub/.kubetrain-initializer/ok", "x.bin"],
            "nothing written into the state directory"
        );
    })
    .await;
}

/// A segment longer than a file name may be is skipped with a warning; a name that fits (even
/// one too long for the old `.<name>.kubetrain-partial`) downloads, and so does the rest.
#[tokio::test(flavor = "current_thread")]
async fn over_long_names_are_skipped_and_the_rest_downloads() {
    within(async {
        let (too_long, fits) = ("a".repeat(300), "b".repeat(250));
        let server = memory_s3(vec![
            (format!("p/{too_long}"), data(1, 100)),
            (format!("p/{too_long}/below.json"), data(2, 100)),
            (format!("p/{fits}"), data(3, 100)),
            ("p/ok.txt".into(), data(4, 100)),
        ]);
        let dest = tempfile::tempdir().unwrap();
        let (result, logs) = logged(initialize(&s3_config(
            server.endpoint(),
            "s3://data/p",
            dest.path(),
        )))
        .await;
        let summary = result.unwrap();
        assert_eq!(
            (summary.files_downloaded, summary.files_refused),
            (2, 2),
            "{summary:?}"
        );
        assert_eq!(files_below(dest.path()), [fits.as_str(), "ok.txt"]);
        assert!(
            logs.matches("is 300 bytes long, more than the 255 bytes")
                .count()
                == 2,
            "{logs}"
        );
    })
    .await;
}
