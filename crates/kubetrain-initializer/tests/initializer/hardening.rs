//! Issue 13, items 1-5: a lying hub or bucket, folder markers, odd keys, links inside the
//! destination and file modes.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use kubetrain_initializer::{
    InitConfig, InitError, Kind, ProgressMode, StorageUri, Summary, initialize,
};
use kubetrain_test_support::{HubRepo, HubTestServer, MemoryS3Server};
use md5::Digest as _;

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
const AK: &str = "AKIAKUBETRAIN";
const SK: &str = "kubetrain-secret-key";

async fn within<T>(fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), fut)
        .await
        .expect("test timed out after 60 s")
}

fn bytes(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_add((i % 253) as u8))
        .collect()
}

fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

fn md5_hex(data: &[u8]) -> String {
    hex(&md5::Md5::digest(data))
}

/// Every file below `dir`, relative, sorted (partial files included).
fn files_below(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
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

fn repo(files: Vec<(&str, Vec<u8>)>, lfs: &[&str]) -> HubRepo {
    HubRepo {
        kind: Kind::Model,
        id: "org/tiny".into(),
        sha: SHA.into(),
        files: files
            .into_iter()
            .map(|(path, data)| (path.to_string(), data))
            .collect(),
        lfs: lfs.iter().map(|p| p.to_string()).collect(),
        token: None,
    }
}

fn hub_config(hub: &HubTestServer, dest: &Path) -> InitConfig {
    let mut config = InitConfig::new(
        Kind::Model,
        StorageUri::parse("hf://org/tiny", Kind::Model).unwrap(),
    );
    config.hub.endpoint = hub.endpoint();
    config.destination = dest.to_path_buf();
    config.progress = ProgressMode::Off;
    config.tuning.max_retries = 1;
    config.tuning.initial_backoff = Duration::from_millis(10);
    config.tuning.sync_files = false;
    config
}

fn s3_config(server: &MemoryS3Server, uri: &str, dest: &Path) -> InitConfig {
    let mut config = InitConfig::new(
        Kind::Dataset,
        StorageUri::parse(uri, Kind::Dataset).unwrap(),
    );
    config.destination = dest.to_path_buf();
    config.s3.endpoint = Some(server.endpoint());
    config.s3.access_key_id = Some(server.access_key().into());
    config.s3.secret_access_key = Some(server.secret_key().into());
    config.progress = ProgressMode::Off;
    config.tuning.max_retries = 1;
    config.tuning.initial_backoff = Duration::from_millis(10);
    config.tuning.sync_files = false;
    config
}

fn mismatch_key(err: &InitError) -> &str {
    match err {
        InitError::ChecksumMismatch { key, .. } => key,
        other => panic!("expected a checksum mismatch, got {other:?}"),
    }
}

/// Item 1: content B served for a listing of content A (same size) is refused, on every run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hub_content_other_than_listed_is_refused_and_nothing_is_kept() {
    within(async {
        let weights = bytes(1, 200_000);
        let config_json = b"{\"hidden_size\": 8}".to_vec();
        let hub = HubTestServer::start(vec![repo(
            vec![
                ("model.safetensors", weights.clone()),
                ("config.json", config_json.clone()),
            ],
            &["model.safetensors"],
        )])
        .unwrap();
        let mut forged = weights.clone();
        forged[100_000] ^= 0xff;
        hub.serve_instead("model.safetensors", forged);
        let dest = tempfile::tempdir().unwrap();
        for _ in 0..2 {
            let err = initialize(&hub_config(&hub, dest.path()))
                .await
                .unwrap_err();
            assert_eq!(mismatch_key(&err), "model.safetensors");
            assert!(
                err.to_string().contains("model.safetensors") && err.to_string().contains("sha256"),
                "{err}"
            );
            assert!(
                !files_below(dest.path())
                    .iter()
                    .any(|f| f.contains("model.safetensors")),
                "{:?}",
                files_below(dest.path())
            );
        }

        // A small (git blob) file: its blob id is checked too.
        let hub = HubTestServer::start(vec![repo(vec![("config.json", config_json.clone())], &[])])
            .unwrap();
        hub.serve_instead("config.json", b"{\"hidden_size\": 9}".to_vec());
        let dest = tempfile::tempdir().unwrap();
        let err = initialize(&hub_config(&hub, dest.path()))
            .await
            .unwrap_err();
        assert_eq!(mismatch_key(&err), "config.json");
        assert!(err.to_string().contains("git blob sha1"), "{err}");
        assert!(files_below(dest.path()).is_empty());

        // The honest content downloads and counts as verified.
        hub.serve_instead("config.json", config_json.clone());
        let summary = initialize(&hub_config(&hub, dest.path())).await.unwrap();
        assert_eq!((summary.files_downloaded, summary.files_unverified), (1, 0));
        assert_eq!(
            std::fs::read(dest.path().join("config.json")).unwrap(),
            config_json
        );
    })
    .await;
}

/// Item 1: with no size in the listing, a body that ends cleanly after 10 of 28 bytes is not
/// accepted as complete: the checksum decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_body_without_a_listed_size_is_refused() {
    within(async {
        let tokenizer = b"0123456789abcdefghijklmnopqr".to_vec();
        let small = b"{\"a\": 1, \"b\": 2, \"c\": 3, \"d\": 4}".to_vec();
        let hub = HubTestServer::start(vec![repo(
            vec![
                ("tokenizer.model", tokenizer.clone()),
                ("config.json", small.clone()),
            ],
            &["tokenizer.model"],
        )])
        .unwrap();
        hub.hide_sizes();
        hub.serve_instead("tokenizer.model", tokenizer[..10].to_vec());
        let dest = tempfile::tempdir().unwrap();
        let err = initialize(&hub_config(&hub, dest.path()))
            .await
            .unwrap_err();
        assert_eq!(mismatch_key(&err), "tokenizer.model");
        assert!(!dest.path().join("tokenizer.model").exists());

        // A git blob without a listed size: hashed once the body ends.
        hub.serve_instead("tokenizer.model", tokenizer.clone());
        hub.serve_instead("config.json", small[..10].to_vec());
        let dest = tempfile::tempdir().unwrap();
        let err = initialize(&hub_config(&hub, dest.path()))
            .await
            .unwrap_err();
        assert_eq!(mismatch_key(&err), "config.json");
        hub.serve_instead("config.json", small.clone());
        let summary = initialize(&hub_config(&hub, dest.path())).await.unwrap();
        assert_eq!((summary.files_downloaded, summary.files_unverified), (2, 0));
        assert_eq!(
            std::fs::read(dest.path().join("config.json")).unwrap(),
            small
        );
    })
    .await;
}

/// Item 1, S3: a single-part object whose content does not match its MD5 ETag is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_content_that_does_not_match_its_md5_etag_is_refused() {
    within(async {
        let good = bytes(3, 4000);
        let served = bytes(4, 4000);
        let server = MemoryS3Server::start_with_etags(
            "data",
            vec![
                (
                    "set/ok.bin".into(),
                    Bytes::from(good.clone()),
                    md5_hex(&good),
                ),
                ("set/forged.bin".into(), Bytes::from(served), md5_hex(&good)),
            ],
            AK,
            SK,
        )
        .unwrap();
        let dest = tempfile::tempdir().unwrap();
        let err = initialize(&s3_config(&server, "s3://data/set", dest.path()))
            .await
            .unwrap_err();
        assert_eq!(mismatch_key(&err), "set/forged.bin");
        assert!(err.to_string().contains("md5"), "{err}");
        assert!(
            !files_below(dest.path())
                .iter()
                .any(|f| f.contains("forged"))
        );
    })
    .await;
}

fn multipart_etag(data: &[u8], part: usize) -> String {
    let mut all = md5::Md5::new();
    let parts: Vec<&[u8]> = data.chunks(part).collect();
    for chunk in &parts {
        all.update(md5::Md5::digest(chunk));
    }
    format!("{}-{}", hex(&all.finalize()), parts.len())
}

/// Item 1, S3: a multipart ETag is checked when a common part size explains it. When none
/// does (and the server reports no part count), or no part size can be guessed at all, the
/// download is refused and nothing is kept (issue 39), unless unverified multipart objects are
/// accepted: then it is kept and counted unverified.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_multipart_etags_are_checked_with_the_inferred_part_size() {
    within(async {
        let large = bytes(5, (11 << 20) + 123);
        let tag = multipart_etag(&large, 5 << 20);
        let mut odd = large.clone();
        odd[7 << 20] ^= 1;
        let server = MemoryS3Server::start_with_etags(
            "data",
            vec![
                (
                    "mp/large.bin".into(),
                    Bytes::from(large.clone()),
                    tag.clone(),
                ),
                ("mp2/large.bin".into(), Bytes::from(odd), tag),
                (
                    "mp3/small.bin".into(),
                    Bytes::from(bytes(6, 100)),
                    format!("{}-3", "ab".repeat(16)),
                ),
            ],
            AK,
            SK,
        )
        .unwrap();
        let dest = tempfile::tempdir().unwrap();
        let summary = initialize(&s3_config(&server, "s3://data/mp", dest.path()))
            .await
            .unwrap();
        assert_eq!((summary.files_downloaded, summary.files_unverified), (1, 0));
        for (prefix, key) in [("mp2", "mp2/large.bin"), ("mp3", "mp3/small.bin")] {
            let dest = tempfile::tempdir().unwrap();
            let mut config = s3_config(&server, &format!("s3://data/{prefix}"), dest.path());
            let err = initialize(&config).await.unwrap_err();
            assert!(
                matches!(&err, InitError::UnverifiedMultipart { key: k, .. } if k == key),
                "{err:?}"
            );
            assert!(
                err.to_string().contains("--accept-unverified-multipart"),
                "{err}"
            );
            assert!(files_below(dest.path()).is_empty(), "nothing kept");
            config.tuning.accept_unverified_multipart = true;
            let summary = initialize(&config).await.unwrap();
            assert_eq!((summary.files_downloaded, summary.files_unverified), (1, 1));
        }
    })
    .await;
}

/// Items 2 and 3: folder markers are skipped; odd keys are refused one by one with a warning
/// while the rest downloads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn folder_markers_and_odd_keys_are_skipped_and_the_rest_downloads() {
    within(async {
        let object =
            |key: &str, data: &[u8]| (key.to_string(), Bytes::from(data.to_vec()), md5_hex(data));
        let server = MemoryS3Server::start_with_etags(
            "data",
            vec![
                object("p/", b""),
                object("p/dir/", b""),
                object("p/dir/a.txt", b"a"),
                object("p/b.txt", b"bb"),
                object("p/..", b"up"),
                object("p/a//b", b"double"),
                object("p/../../etc/x", b"escape"),
                object("p/./c", b"dot"),
                object("/abs", b"absolute"),
                object("top.txt", b"top"),
            ],
            AK,
            SK,
        )
        .unwrap();
        let dest = tempfile::tempdir().unwrap();
        let summary: Summary = initialize(&s3_config(&server, "s3://data/p", dest.path()))
            .await
            .unwrap();
        assert_eq!(files_below(dest.path()), ["b.txt", "dir/a.txt"]);
        assert_eq!(summary.files_downloaded, 2);
        assert_eq!(summary.files_refused, 4, "{summary:?}");
        assert_eq!(std::fs::read(dest.path().join("dir/a.txt")).unwrap(), b"a");
        // The whole bucket: the absolute key is refused too.
        let dest = tempfile::tempdir().unwrap();
        let summary = initialize(&s3_config(&server, "s3://data", dest.path()))
            .await
            .unwrap();
        assert_eq!(
            files_below(dest.path()),
            ["p/b.txt", "p/dir/a.txt", "top.txt"]
        );
        assert_eq!(summary.files_refused, 5, "{summary:?}");

        // The hub: names that would leave the destination are skipped the same way.
        let hub = HubTestServer::start(vec![repo(
            vec![
                ("../escape.json", b"{}".to_vec()),
                ("/abs.json", b"{}".to_vec()),
                ("a//b.json", b"{}".to_vec()),
                ("config.json", b"{}".to_vec()),
            ],
            &[],
        )])
        .unwrap();
        let dest = tempfile::tempdir().unwrap();
        let summary = initialize(&hub_config(&hub, dest.path())).await.unwrap();
        assert_eq!(files_below(dest.path()), ["config.json"]);
        assert_eq!(summary.files_refused, 3);
    })
    .await;
}

/// Item 4: a symbolic link inside the destination is never written through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_inside_the_destination_are_not_followed() {
    within(async {
        let hub = HubTestServer::start(vec![repo(
            vec![
                ("original/tokenizer.model", bytes(7, 3000)),
                ("config.json", b"{}".to_vec()),
            ],
            &["original/tokenizer.model"],
        )])
        .unwrap();
        let dest = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dest.path().join("original")).unwrap();
        let err = initialize(&hub_config(&hub, dest.path()))
            .await
            .unwrap_err();
        assert!(
            matches!(err, InitError::UnsafeDestination { .. })
                && err.to_string().contains("original"),
            "{err:?}"
        );
        assert!(
            files_below(outside.path()).is_empty(),
            "{:?}",
            files_below(outside.path())
        );

        // A link at the file's own name is replaced by the download, and its target untouched.
        let dest = tempfile::tempdir().unwrap();
        let target = outside.path().join("victim.json");
        std::fs::write(&target, b"keep").unwrap();
        std::os::unix::fs::symlink(&target, dest.path().join("config.json")).unwrap();
        std::fs::create_dir(dest.path().join("original")).unwrap();
        initialize(&hub_config(&hub, dest.path())).await.unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        let meta = std::fs::symlink_metadata(dest.path().join("config.json")).unwrap();
        assert!(meta.is_file(), "the link was replaced by the file");
    })
    .await;
}

/// Item 5: downloaded files are 0640 whatever the umask would have given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downloaded_files_are_not_world_readable() {
    within(async {
        let hub = HubTestServer::start(vec![repo(
            vec![
                ("original/tokenizer.model", bytes(8, 3000)),
                ("config.json", b"{}".to_vec()),
            ],
            &["original/tokenizer.model"],
        )])
        .unwrap();
        let dest = tempfile::tempdir().unwrap();
        initialize(&hub_config(&hub, dest.path())).await.unwrap();
        for file in ["config.json", "original/tokenizer.model"] {
            let mode = std::fs::metadata(dest.path().join(file))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o640, "{file}: {mode:o}");
        }
        let dir_mode = std::fs::metadata(dest.path().join("original"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o007, 0, "{dir_mode:o}");
        // A documented override.
        let dest = tempfile::tempdir().unwrap();
        let mut config = hub_config(&hub, dest.path());
        config.tuning.file_mode = 0o600;
        initialize(&config).await.unwrap();
        let mode = std::fs::metadata(dest.path().join("config.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    })
    .await;
}
