//! The initializer against a loopback Hugging Face hub (`HF_ENDPOINT`).

use std::path::Path;
use std::time::Duration;

use kubetrain_initializer::{InitConfig, InitError, Kind, ProgressMode, initialize};
use kubetrain_test_support::{HubRepo, HubTestServer};

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

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

fn model_repo() -> HubRepo {
    HubRepo {
        kind: Kind::Model,
        id: "meta-llama/Tiny-1B".into(),
        sha: SHA.into(),
        files: vec![
            ("config.json".into(), b"{\"hidden_size\": 8}".to_vec()),
            ("model-00001-of-00002.safetensors".into(), bytes(1, 300_000)),
            ("model-00002-of-00002.safetensors".into(), bytes(2, 120_000)),
            ("original/tokenizer.model".into(), bytes(3, 5_000)),
            ("original/consolidated.00.pth".into(), bytes(4, 7_000)),
            ("pytorch_model.bin".into(), bytes(5, 9_000)),
            ("README.md".into(), b"# tiny".to_vec()),
            ("special tokens map.txt".into(), b"<s>".to_vec()),
            ("flax_model.msgpack".into(), bytes(6, 100)),
        ],
        lfs: vec![
            "model-00001-of-00002.safetensors".into(),
            "model-00002-of-00002.safetensors".into(),
            "original/tokenizer.model".into(),
        ],
        token: None,
    }
}

fn dataset_repo(token: Option<&str>) -> HubRepo {
    HubRepo {
        kind: Kind::Dataset,
        id: "tatsu-lab/alpaca".into(),
        sha: SHA.into(),
        files: vec![
            ("README.md".into(), b"# alpaca".to_vec()),
            (
                "data/train-00000-of-00001.parquet".into(),
                bytes(9, 200_000),
            ),
            (".gitattributes".into(), b"*.parquet filter=lfs".to_vec()),
        ],
        lfs: vec!["data/train-00000-of-00001.parquet".into()],
        token: token.map(str::to_string),
    }
}

/// The config a pod would get: the env contract, plus a destination and quick retries.
fn config_from_env(kind: Kind, env: &[(&str, &str)], dest: &Path) -> InitConfig {
    let lookup = |key: &str| {
        env.iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.to_string())
    };
    let mut config = InitConfig::from_lookup(kind, lookup).unwrap();
    config.destination = dest.to_path_buf();
    config.progress = ProgressMode::Off;
    config.tuning.max_retries = 2;
    config.tuning.initial_backoff = Duration::from_millis(10);
    config.tuning.sync_files = false;
    config
}

fn listing(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_download_keeps_upstream_allow_and_ignore_patterns() {
    within(async {
        let repo = model_repo();
        let hub = HubTestServer::start(vec![repo.clone()]).unwrap();
        let dest = tempfile::tempdir().unwrap();
        let endpoint = hub.endpoint();
        let env = [
            ("STORAGE_URI", "hf://meta-llama/Tiny-1B"),
            ("HF_ENDPOINT", endpoint.as_str()),
        ];
        let config = config_from_env(Kind::Model, &env, dest.path());
        let summary = initialize(&config).await.unwrap();

        // Allow list *.json,*.safetensors,*.model,*.txt,*.gguf; default ignore drops *.pth/*.bin.
        let want = [
            "config.json",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
            "original/tokenizer.model",
            "special tokens map.txt",
        ];
        assert_eq!(listing(dest.path()), want);
        for name in want {
            let (_, data) = repo.files.iter().find(|(p, _)| p == name).unwrap();
            assert_eq!(
                &std::fs::read(dest.path().join(name)).unwrap(),
                data,
                "{name}"
            );
        }
        assert_eq!(summary.files_downloaded, 5);
        assert_eq!(summary.files_ignored, 4);
        // Files come from the commit the listing pinned, not from a moving branch.
        let requests = hub.requests();
        assert!(
            requests[0].starts_with("GET /api/models/meta-llama/Tiny-1B/revision/main"),
            "{requests:?}"
        );
        assert!(
            requests.iter().any(|r| r.contains(&format!(
                "/meta-llama/Tiny-1B/resolve/{SHA}/special%20tokens%20map.txt"
            ))),
            "{requests:?}"
        );

        // Rerun: everything verified by SHA-256 (LFS) or git blob id, nothing fetched.
        let before = hub.requests().len();
        let again = initialize(&config).await.unwrap();
        assert_eq!(
            (again.files_downloaded, again.files_already_present),
            (0, 5)
        );
        assert_eq!(hub.requests().len(), before + 1, "only the info request");

        // A corrupted LFS file (same size) and a corrupted git file are fetched again.
        for name in ["model-00002-of-00002.safetensors", "config.json"] {
            let path = dest.path().join(name);
            let mut data = std::fs::read(&path).unwrap();
            data[3] ^= 0x55;
            std::fs::write(&path, data).unwrap();
        }
        let repaired = initialize(&config).await.unwrap();
        assert_eq!(
            (repaired.files_downloaded, repaired.files_already_present),
            (2, 3)
        );
        let (_, data) = &repo.files[1..3]
            .iter()
            .find(|(p, _)| p == "model-00002-of-00002.safetensors")
            .unwrap();
        assert_eq!(
            &std::fs::read(dest.path().join("model-00002-of-00002.safetensors")).unwrap(),
            data
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gated_dataset_needs_the_token_and_explicit_ignore_patterns_apply() {
    within(async {
        let hub = HubTestServer::start(vec![dataset_repo(Some("hf_good"))]).unwrap();
        let dest = tempfile::tempdir().unwrap();
        let out = dest.path().join("dataset");
        let endpoint = hub.endpoint();

        // No token: the hub answers 401 and the error says what to set.
        let env = [
            ("STORAGE_URI", "hf://tatsu-lab/alpaca"),
            ("HF_ENDPOINT", endpoint.as_str()),
        ];
        let err = initialize(&config_from_env(Kind::Dataset, &env, &out))
            .await
            .unwrap_err();
        assert!(matches!(err, InitError::RepoNotFound { .. }), "{err:?}");
        assert!(err.to_string().contains("ACCESS_TOKEN"), "{err}");
        assert!(!out.exists());

        // A wrong token is access denied.
        let env = [
            ("STORAGE_URI", "hf://tatsu-lab/alpaca"),
            ("HF_ENDPOINT", endpoint.as_str()),
            ("ACCESS_TOKEN", "hf_wrong"),
        ];
        let err = initialize(&config_from_env(Kind::Dataset, &env, &out))
            .await
            .unwrap_err();
        assert!(matches!(err, InitError::AccessDenied { .. }), "{err:?}");

        let env = [
            ("STORAGE_URI", "hf://tatsu-lab/alpaca/ignored/sub/path"),
            ("HF_ENDPOINT", endpoint.as_str()),
            ("ACCESS_TOKEN", "hf_good"),
            ("IGNORE_PATTERNS", ".git*, *.md"),
        ];
        let summary = initialize(&config_from_env(Kind::Dataset, &env, &out))
            .await
            .unwrap();
        assert_eq!(listing(&out), ["data/train-00000-of-00001.parquet"]);
        assert_eq!(summary.files_ignored, 2);
        assert!(
            hub.requests()
                .iter()
                .any(|r| r.starts_with("GET /api/datasets/tatsu-lab/alpaca/revision/main"))
        );
        assert!(
            hub.requests()
                .iter()
                .any(|r| r.contains(&format!("/datasets/tatsu-lab/alpaca/resolve/{SHA}/data/")))
        );

        // Unknown repository.
        let env = [
            ("STORAGE_URI", "hf://nobody/nothing"),
            ("HF_ENDPOINT", endpoint.as_str()),
        ];
        let err = initialize(&config_from_env(
            Kind::Dataset,
            &env,
            &dest.path().join("x"),
        ))
        .await
        .unwrap_err();
        assert!(matches!(err, InitError::RepoNotFound { .. }), "{err:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_failures_are_retried_and_broken_bodies_resume_with_a_range() {
    within(async {
        let repo = model_repo();
        let hub = HubTestServer::start(vec![repo.clone()]).unwrap();
        let big = "model-00001-of-00002.safetensors";
        hub.inject_faults(big, 1, 1);
        let dest = tempfile::tempdir().unwrap();
        let endpoint = hub.endpoint();
        let env = [
            ("STORAGE_URI", "hf://meta-llama/Tiny-1B"),
            ("HF_ENDPOINT", endpoint.as_str()),
        ];
        let config = config_from_env(Kind::Model, &env, dest.path());
        initialize(&config).await.unwrap();
        let (_, data) = repo.files.iter().find(|(p, _)| p == big).unwrap();
        assert_eq!(&std::fs::read(dest.path().join(big)).unwrap(), data);
        let tries: Vec<String> = hub
            .requests()
            .into_iter()
            .filter(|r| r.contains(big))
            .collect();
        assert_eq!(tries.len(), 3, "500, cut body, resumed: {tries:?}");
        assert!(
            tries[0].ends_with(" -") && tries[1].ends_with(" -"),
            "{tries:?}"
        );
        assert!(
            tries[2].contains("bytes="),
            "the third request resumes with a range: {tries:?}"
        );

        // More failures than retries: a clear error, no partial file left.
        let dest = tempfile::tempdir().unwrap();
        hub.inject_faults(big, 10, 0);
        let config = config_from_env(Kind::Model, &env, dest.path());
        let err = initialize(&config).await.unwrap_err();
        assert!(
            matches!(err, InitError::Transfer { attempts: 3, .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains(big), "{err}");
        let leftovers: Vec<String> = listing(dest.path())
            .into_iter()
            .filter(|p| p.contains("partial"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        assert!(!dest.path().join(big).exists());

        // An unreachable hub.
        let port = kubetrain_collective::rendezvous::free_port().unwrap();
        let endpoint = format!("http://127.0.0.1:{port}");
        let env = [
            ("STORAGE_URI", "hf://meta-llama/Tiny-1B"),
            ("HF_ENDPOINT", endpoint.as_str()),
        ];
        let err = initialize(&config_from_env(Kind::Model, &env, dest.path()))
            .await
            .unwrap_err();
        assert!(
            matches!(err, InitError::Unreachable { attempts: 3, .. }),
            "{err:?}"
        );
    })
    .await;
}
