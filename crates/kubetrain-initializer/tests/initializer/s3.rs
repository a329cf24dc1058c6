//! The initializer against a real S3 server (s3s-fs) on loopback.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kubetrain_initializer::s3_server::S3Server;
use kubetrain_initializer::{
    InitConfig, InitError, Kind, PatternSet, ProgressMode, StorageUri, Summary, initialize,
};
use object_store::path::Path as StorePath;
use object_store::{ObjectStoreExt, PutPayload, WriteMultipart};

const AK: &str = "AKIAKUBETRAIN";
const SK: &str = "kubetrain-secret-key";
/// Three parts: 5 MiB, 5 MiB, 1 MiB (s3s-fs enforces the 5 MiB minimum).
const LARGE: usize = 11 << 20;

/// Never let a broken server hang the test run.
async fn within<T>(fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), fut)
        .await
        .expect("test timed out after 60 s")
}

fn content(key: &str, len: usize) -> Vec<u8> {
    // Different per key so that a file landing at the wrong path is caught.
    let seed = key
        .bytes()
        .fold(7u8, |a, b| a.wrapping_mul(31).wrapping_add(b));
    (0..len)
        .map(|i| seed.wrapping_add((i % 251) as u8))
        .collect()
}

struct Fixture {
    _root: tempfile::TempDir,
    server: S3Server,
    /// Keys below the `alpaca/` prefix with their content.
    objects: Vec<(String, Vec<u8>)>,
}

async fn fixture() -> Fixture {
    let root = tempfile::tempdir().unwrap();
    let server = S3Server::start(root.path(), AK, SK).unwrap();
    server.create_bucket("datasets").unwrap();
    let store = server.store("datasets").unwrap();
    let mut objects = Vec::new();
    for i in 0..40 {
        let key = format!("alpaca/shards/{:02}/part-{i:03}.jsonl", i % 4);
        objects.push((key.clone(), content(&key, 100 + i * 37)));
    }
    for key in [
        "alpaca/README.md",
        "alpaca/train.bin",
        "alpaca/deep/a/b/c/d.json",
    ] {
        objects.push((key.to_string(), content(key, 1000)));
    }
    objects.push(("alpaca/empty.txt".into(), Vec::new()));
    for (key, data) in &objects {
        store
            .put(
                &StorePath::from(key.as_str()),
                PutPayload::from(data.clone()),
            )
            .await
            .unwrap();
    }
    let large_key = "alpaca/large/model.safetensors".to_string();
    let large = content(&large_key, LARGE);
    let upload = store
        .put_multipart(&StorePath::from(large_key.as_str()))
        .await
        .unwrap();
    let mut writer = WriteMultipart::new_with_chunk_size(upload, 5 << 20);
    writer.write(&large);
    writer.finish().await.unwrap();
    objects.push((large_key, large));
    // Outside the prefix: must not be downloaded.
    store
        .put(
            &StorePath::from("other/x.txt"),
            PutPayload::from_static(b"no"),
        )
        .await
        .unwrap();
    store
        .put(
            &StorePath::from("alpaca-v2/x.txt"),
            PutPayload::from_static(b"no"),
        )
        .await
        .unwrap();
    Fixture {
        _root: root,
        server,
        objects,
    }
}

fn config(server: &S3Server, uri: &str, kind: Kind, dest: &Path) -> InitConfig {
    let mut config = InitConfig::new(kind, StorageUri::parse(uri, kind).unwrap());
    config.destination = dest.to_path_buf();
    config.s3.endpoint = Some(server.endpoint());
    config.s3.access_key_id = Some(server.access_key().into());
    config.s3.secret_access_key = Some(server.secret_key().into());
    config.progress = ProgressMode::Off;
    config.tuning.concurrency = 4;
    config.tuning.max_retries = 1;
    config.tuning.initial_backoff = Duration::from_millis(10);
    config.tuning.sync_files = false;
    config
}

/// Every file below `dir` (relative, `/`-separated), skipping the state directory.
fn files_below(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            if entry.file_name() == ".kubetrain-initializer" {
                continue;
            }
            if path.is_dir() {
                walk(base, &path, out);
            } else {
                let rel = path.strip_prefix(base).unwrap();
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let mut out = Vec::new();
    if dir.exists() {
        walk(dir, dir, &mut out);
    }
    out.sort();
    out
}

fn expected(objects: &[(String, Vec<u8>)], skip: impl Fn(&str) -> bool) -> Vec<(String, Vec<u8>)> {
    let mut want: Vec<(String, Vec<u8>)> = objects
        .iter()
        .filter(|(k, _)| !skip(k))
        .map(|(k, v)| (k.strip_prefix("alpaca/").unwrap().to_string(), v.clone()))
        .collect();
    want.sort();
    want
}

fn assert_tree(dest: &Path, want: &[(String, Vec<u8>)]) {
    let names: Vec<String> = want.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(files_below(dest), names);
    for (rel, data) in want {
        let got = std::fs::read(dest.join(rel)).unwrap();
        assert!(
            got == *data,
            "content of {rel} differs ({} vs {} bytes)",
            got.len(),
            data.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downloads_nested_small_and_multipart_objects_then_resumes() {
    within(async {
        let f = fixture().await;
        let dest_dir = tempfile::tempdir().unwrap();
        let dest = dest_dir.path().join("dataset");
        let config = config(&f.server, "s3://datasets/alpaca", Kind::Dataset, &dest);

        let summary: Summary = initialize(&config).await.unwrap();
        let want = expected(&f.objects, |_| false);
        assert_tree(&dest, &want);
        assert_eq!(summary.files_downloaded, want.len());
        assert_eq!(summary.files_already_present, 0);
        // s3s-fs lists no ETags: each is learned from its GET, and the multipart one is checked
        // with the part size learned then (issue 39).
        assert_eq!(summary.files_unverified, 0, "{summary:?}");
        let total: u64 = want.iter().map(|(_, d)| d.len() as u64).sum();
        assert_eq!(summary.bytes_downloaded, total);

        // A second run finds everything complete.
        let again = initialize(&config).await.unwrap();
        assert_eq!(again.files_downloaded, 0);
        assert_eq!(again.files_already_present, want.len());
        assert_eq!(again.bytes_downloaded, 0);

        // Interrupted run: one file missing, one corrupted with the same size, one stale partial,
        // the multipart object's recorded tag lost.
        std::fs::remove_file(dest.join("README.md")).unwrap();
        let corrupted = dest.join("shards/01/part-001.jsonl");
        let mut bytes = std::fs::read(&corrupted).unwrap();
        bytes[0] ^= 0xff;
        std::fs::write(&corrupted, &bytes).unwrap();
        std::fs::write(dest.join(".kubetrain-initializer/partial/7.part"), b"half").unwrap();
        // The multipart ETag is not an MD5: its version tag was recorded; losing the record
        // means the file cannot be trusted and is fetched again.
        let tag = dest.join(".kubetrain-initializer/tags/large/model.safetensors");
        assert!(
            std::fs::read_to_string(&tag)
                .unwrap()
                .trim()
                .ends_with("-3"),
            "multipart ETag recorded"
        );
        std::fs::remove_file(&tag).unwrap();

        let resumed = initialize(&config).await.unwrap();
        assert_eq!(resumed.files_downloaded, 3, "{resumed:?}");
        assert_eq!(resumed.files_already_present, want.len() - 3);
        assert_eq!(resumed.bytes_downloaded, 1000 + (100 + 37) + LARGE as u64);
        assert_tree(&dest, &want);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignore_patterns_follow_fnmatch_on_key_and_relative_path() {
    within(async {
        let f = fixture().await;
        let dest_dir = tempfile::tempdir().unwrap();
        let dest: PathBuf = dest_dir.path().join("model");
        // The model default skips *.bin.
        let mut config = config(&f.server, "s3://datasets/alpaca/", Kind::Model, &dest);
        let summary = initialize(&config).await.unwrap();
        assert_tree(&dest, &expected(&f.objects, |k| k.ends_with(".bin")));
        assert_eq!(summary.files_ignored, 1);

        // Relative-path globs and full-key globs both apply.
        let dest = dest_dir.path().join("filtered");
        config.destination = dest.clone();
        config.ignore_patterns = PatternSet::parse_list("shards/0[0-2]/*, alpaca/deep/*,*.md");
        let summary = initialize(&config).await.unwrap();
        let skip = |k: &str| {
            k.starts_with("alpaca/shards/00/")
                || k.starts_with("alpaca/shards/01/")
                || k.starts_with("alpaca/shards/02/")
                || k.starts_with("alpaca/deep/")
                || k.ends_with(".md")
        };
        let want = expected(&f.objects, skip);
        assert_tree(&dest, &want);
        assert_eq!(summary.files_ignored, f.objects.len() - want.len());

        // Everything ignored is an error, and nothing is created.
        let dest = dest_dir.path().join("nothing");
        config.destination = dest.clone();
        config.ignore_patterns = PatternSet::parse_list("*");
        let err = initialize(&config).await.unwrap_err();
        assert!(matches!(err, InitError::NothingToDownload { found, ignored, .. } if found == ignored && found > 0), "{err}");
        assert!(!dest.exists());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_object_uri_lands_under_its_file_name() {
    within(async {
        let f = fixture().await;
        let dest_dir = tempfile::tempdir().unwrap();
        let config = config(
            &f.server,
            "s3://datasets/alpaca/deep/a/b/c/d.json",
            Kind::Dataset,
            dest_dir.path(),
        );
        let summary = initialize(&config).await.unwrap();
        assert_eq!(summary.files_downloaded, 1);
        assert_eq!(files_below(dest_dir.path()), vec!["d.json".to_string()]);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_fails_with_one_clear_error_and_leaves_nothing() {
    within(async {
        let f = fixture().await;
        let dest_dir = tempfile::tempdir().unwrap();
        let dest = dest_dir.path().join("out");

        let mut wrong_secret = config(&f.server, "s3://datasets/alpaca", Kind::Dataset, &dest);
        wrong_secret.s3.secret_access_key = Some("wrong".into());
        let err = initialize(&wrong_secret).await.unwrap_err();
        assert!(matches!(err, InitError::AccessDenied { .. }), "{err:?}");
        assert!(err.to_string().contains("SECRET_ACCESS_KEY"), "{err}");

        let mut wrong_key = config(&f.server, "s3://datasets/alpaca", Kind::Dataset, &dest);
        wrong_key.s3.access_key_id = Some("NOBODY".into());
        let err = initialize(&wrong_key).await.unwrap_err();
        assert!(matches!(err, InitError::AccessDenied { .. }), "{err:?}");

        let missing = config(&f.server, "s3://no-such-bucket/x", Kind::Dataset, &dest);
        let err = initialize(&missing).await.unwrap_err();
        assert!(matches!(err, InitError::BucketNotFound { ref bucket, .. } if bucket == "no-such-bucket"), "{err:?}");

        let empty = config(&f.server, "s3://datasets/no/such/prefix", Kind::Dataset, &dest);
        let err = initialize(&empty).await.unwrap_err();
        assert!(matches!(err, InitError::NothingToDownload { found: 0, .. }), "{err:?}");

        // A port nobody listens on.
        let port = kubetrain_collective::rendezvous::free_port().unwrap();
        let mut unreachable = config(&f.server, "s3://datasets/alpaca", Kind::Dataset, &dest);
        unreachable.s3.endpoint = Some(format!("http://127.0.0.1:{port}"));
        let err = initialize(&unreachable).await.unwrap_err();
        assert!(matches!(err, InitError::Unreachable { attempts: 2, .. }), "{err:?}");

        let mut bad_endpoint = config(&f.server, "s3://datasets/alpaca", Kind::Dataset, &dest);
        bad_endpoint.s3.endpoint = Some("minio:9000".into());
        let err = initialize(&bad_endpoint).await.unwrap_err();
        assert!(matches!(err, InitError::InvalidSetting { setting: "ENDPOINT", .. }), "{err:?}");

        let mut half_credentials = config(&f.server, "s3://datasets/alpaca", Kind::Dataset, &dest);
        half_credentials.s3.secret_access_key = None;
        let err = initialize(&half_credentials).await.unwrap_err();
        assert!(matches!(err, InitError::InvalidSetting { .. }), "{err:?}");

        assert!(!dest.exists(), "a failed run must not create the destination");
        assert!(!err.to_string().contains('\n'), "one line: {err}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_server_used_by_the_throughput_bench_serves_the_same_protocol() {
    within(async {
        use kubetrain_test_support::MemoryS3Server;
        let objects: Vec<(String, bytes::Bytes)> = (0..3)
            .map(|i| {
                let key = format!("blob/{i:02}.bin");
                let data = bytes::Bytes::from(content(&key, (3 << 20) + i * 1000));
                (key, data)
            })
            .collect();
        let server = MemoryS3Server::start("bench", objects.clone(), AK, SK).unwrap();
        let dest_dir = tempfile::tempdir().unwrap();
        let mut config = InitConfig::new(
            Kind::Dataset,
            StorageUri::parse("s3://bench/blob", Kind::Dataset).unwrap(),
        );
        config.destination = dest_dir.path().to_path_buf();
        config.s3.endpoint = Some(server.endpoint());
        config.s3.access_key_id = Some(server.access_key().into());
        config.s3.secret_access_key = Some(server.secret_key().into());
        config.progress = ProgressMode::Off;
        config.tuning.sync_files = false;
        let summary = initialize(&config).await.unwrap();
        assert_eq!(summary.files_downloaded, 3);
        for (key, data) in &objects {
            let got =
                std::fs::read(dest_dir.path().join(key.strip_prefix("blob/").unwrap())).unwrap();
            assert!(got == data.as_ref(), "{key}");
        }
        // Listing ETags are MD5s: a rerun verifies content without a HEAD per file.
        let again = initialize(&config).await.unwrap();
        assert_eq!(again.files_already_present, 3);
        config.s3.secret_access_key = Some("nope".into());
        let err = initialize(&config).await.unwrap_err();
        assert!(matches!(err, InitError::AccessDenied { .. }), "{err:?}");
    })
    .await;
}
