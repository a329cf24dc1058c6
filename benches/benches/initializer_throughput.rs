//! Download throughput of `kubetrain-initializer` against `curl` on loopback: 1 GiB in 64 MiB
//! objects from the same in-memory S3 server (SigV4-signed requests on both sides), in the same
//! run, written to the same scratch directory (`/dev/shm` when present).
//!
//! `cargo bench -p kubetrain-benches --bench initializer_throughput`; `benches/initializer-vs-curl.sh`
//! runs it and prints the ratios. The curl cases are skipped with a message when `curl` is missing
//! or cannot sign requests (`--aws-sigv4` needs curl 7.75+).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use kubetrain_initializer::{InitConfig, Kind, ProgressMode, StorageUri, initialize};
use kubetrain_test_support::MemoryS3Server;

const OBJECT_BYTES: usize = 64 << 20;
const OBJECTS: usize = 16;
const BUCKET: &str = "bench";
const AK: &str = "AKIABENCH";
const SK: &str = "bench-secret";

/// Incompressible-looking content, different per object.
fn object(index: usize) -> Bytes {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64 ^ (index as u64);
    let mut data = Vec::with_capacity(OBJECT_BYTES);
    while data.len() < OBJECT_BYTES {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        data.extend_from_slice(&state.to_le_bytes());
    }
    Bytes::from(data)
}

fn keys() -> Vec<String> {
    (0..OBJECTS).map(|i| format!("blob/{i:02}.bin")).collect()
}

fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::tempdir_in(shm)
    {
        return dir;
    }
    tempfile::tempdir().expect("temporary directory")
}

fn reset(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("create scratch directory");
}

fn assert_complete(dir: &Path) {
    for key in keys() {
        let name = key.trim_start_matches("blob/");
        let len = std::fs::metadata(dir.join(name))
            .map(|m| m.len())
            .unwrap_or(0);
        assert_eq!(len, OBJECT_BYTES as u64, "{name} incomplete");
    }
}

/// One curl process fetching every object, `parallel` at a time.
fn curl_command(server: &MemoryS3Server, dir: &Path, parallel: usize) -> Command {
    let mut cmd = Command::new("curl");
    cmd.args(["--silent", "--show-error", "--fail", "--no-progress-meter"])
        .args(["--aws-sigv4", "aws:amz:us-east-1:s3"])
        // S3 servers require the payload hash header; curl signs it when given.
        .args(["--header", "x-amz-content-sha256: UNSIGNED-PAYLOAD"])
        .args([
            "--user",
            &format!("{}:{}", server.access_key(), server.secret_key()),
        ]);
    if parallel > 1 {
        cmd.args(["--parallel", "--parallel-max", &parallel.to_string()]);
    }
    for key in keys() {
        let name = key.trim_start_matches("blob/");
        cmd.arg("--output")
            .arg(dir.join(name))
            .arg(format!("{}/{BUCKET}/{key}", server.endpoint()));
    }
    cmd
}

fn curl_works(server: &MemoryS3Server, dir: &Path) -> Result<(), String> {
    reset(dir);
    let output = curl_command(server, dir, 8)
        .output()
        .map_err(|e| format!("curl: {e}"))?;
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    assert_complete(dir);
    Ok(())
}

fn initializer_config(server: &MemoryS3Server, dir: &Path, jobs: usize) -> InitConfig {
    let uri = StorageUri::parse(&format!("s3://{BUCKET}/blob"), Kind::Dataset).expect("uri");
    let mut config = InitConfig::new(Kind::Dataset, uri);
    config.destination = dir.to_path_buf();
    config.s3.endpoint = Some(server.endpoint());
    config.s3.access_key_id = Some(server.access_key().into());
    config.s3.secret_access_key = Some(server.secret_key().into());
    config.progress = ProgressMode::Off;
    config.tuning.concurrency = jobs;
    config
}

fn throughput(c: &mut Criterion) {
    let objects = keys()
        .into_iter()
        .enumerate()
        .map(|(i, k)| (k, object(i)))
        .collect();
    let server = MemoryS3Server::start(BUCKET, objects, AK, SK).expect("start the S3 server");
    let scratch = scratch();
    let dir: PathBuf = scratch.path().join("out");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let curl = curl_works(&server, &dir);
    if let Err(why) = &curl {
        eprintln!("skipping the curl cases: {why}");
    }

    let mut group = c.benchmark_group("initializer_vs_curl_1GiB");
    group
        .throughput(Throughput::Bytes((OBJECT_BYTES * OBJECTS) as u64))
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(10));
    for jobs in [1, 8] {
        let config = initializer_config(&server, &dir, jobs);
        group.bench_function(format!("initializer/jobs_{jobs}"), |b| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    reset(&dir);
                    let start = Instant::now();
                    runtime.block_on(initialize(&config)).expect("download");
                    spent += start.elapsed();
                    assert_complete(&dir);
                }
                spent
            });
        });
        if curl.is_ok() {
            group.bench_function(format!("curl/parallel_{jobs}"), |b| {
                b.iter_custom(|iters| {
                    let mut spent = Duration::ZERO;
                    for _ in 0..iters {
                        reset(&dir);
                        let mut cmd = curl_command(&server, &dir, jobs);
                        let start = Instant::now();
                        let status = cmd.status().expect("run curl");
                        spent += start.elapsed();
                        assert!(status.success(), "curl failed: {status}");
                        assert_complete(&dir);
                    }
                    spent
                });
            });
        }
    }
    group.finish();
}

criterion_group!(benches, throughput);
criterion_main!(benches);
