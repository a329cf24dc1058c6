//! Step 2 in local mode: the dataset and model initializers (the code of `kubetrain init`) download into
//! the job's `/workspace`; a loopback source is served first by a loopback S3 endpoint
//! (`kubetrain_initializer::s3_server`).

use std::path::Path;
use std::time::Duration;

use kubetrain_initializer::s3_server::S3Server;
use kubetrain_initializer::{InitConfig, Kind, ProgressMode, StorageUri};
use serde_json::json;

use crate::plan::{LoopbackSpec, Plan, StorageSpec};
use crate::report::StagingPoint;
use crate::runner::Staged;

/// The S3 endpoint that serves a loopback source: a server on 127.0.0.1 over the directory `root`,
/// with the run's own credentials. The one place the local mode starts it.
fn start_s3_endpoint(root: &Path) -> Result<S3Server, String> {
    S3Server::start(root, "acceptance", "acceptance-secret")
        .map_err(|e| format!("starting the loopback S3 server: {e}"))
}

/// Deterministic file content for a loopback source.
fn generated(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Starts the endpoint for a loopback source named `name` under `scratch`, with the source's bucket
/// and prefix filled with generated files, and points `config` at it.
fn serve_loopback(
    name: &str,
    spec: &StorageSpec,
    lb: &LoopbackSpec,
    scratch: &Path,
    config: &mut InitConfig,
) -> Result<S3Server, String> {
    let root = scratch.join(name);
    std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    let s = start_s3_endpoint(&root)?;
    let rest = spec.uri.trim_start_matches("s3://");
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    s.create_bucket(bucket)
        .map_err(|e| format!("loopback bucket: {e}"))?;
    let dir = root.join(bucket).join(prefix);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for i in 0..lb.files {
        let file = dir.join(format!("part-{i:05}.bin"));
        std::fs::write(&file, generated(u64::from(i) + 1, lb.file_size.0 as usize))
            .map_err(|e| format!("{}: {e}", file.display()))?;
    }
    config.s3.endpoint = Some(s.endpoint());
    config.s3.access_key_id = Some(s.access_key().into());
    config.s3.secret_access_key = Some(s.secret_key().into());
    Ok(s)
}

/// The initializer's settings for one source: one retry, short timeouts, no progress output.
fn init_config(
    name: &str,
    kind: Kind,
    spec: &StorageSpec,
    dest: &Path,
) -> Result<InitConfig, String> {
    let uri = StorageUri::parse(&spec.uri, kind).map_err(|e| format!("spec.{name}.uri: {e}"))?;
    let mut config = InitConfig::new(kind, uri);
    config.destination = dest.to_path_buf();
    config.progress = ProgressMode::Off;
    config.ignore_patterns = Default::default();
    config.tuning.max_retries = 1;
    config.tuning.connect_timeout = Duration::from_secs(3);
    config.tuning.initial_backoff = Duration::from_millis(200);
    config.s3.endpoint = spec.endpoint.clone();
    Ok(config)
}

/// Stages one source with the initializer; a loopback source's server lives until it is staged.
async fn stage(
    name: &str,
    kind: Kind,
    spec: &StorageSpec,
    dest: &Path,
    scratch: &Path,
) -> Result<StagingPoint, String> {
    let mut config = init_config(name, kind, spec, dest)?;
    let _server = match &spec.loopback {
        Some(lb) => Some(serve_loopback(name, spec, lb, scratch, &mut config)?),
        None => None,
    };
    let summary = kubetrain_initializer::initialize(&config)
        .await
        .map_err(|e| format!("{name} from {}: {e}", spec.uri))?;
    let seconds = summary.elapsed.as_secs_f64().max(1e-6);
    let bytes = summary.bytes_downloaded + summary.bytes_already_present;
    Ok(StagingPoint {
        name: name.into(),
        bytes,
        files: (summary.files_downloaded + summary.files_already_present) as u64,
        seconds,
        mbps: bytes as f64 / 1e6 / seconds,
    })
}

/// Stages the dataset, then the model, into `workspace`; the first failure stops it.
pub(super) async fn stage_all(plan: &Plan, workspace: &Path, scratch: &Path) -> Staged {
    let spec = &plan.spec;
    let mut staged = Vec::new();
    let mut failure = None;
    for (name, kind, s) in [
        ("dataset", Kind::Dataset, &spec.dataset),
        ("model", Kind::Model, &spec.model),
    ] {
        match stage(name, kind, s, &workspace.join(name), scratch).await {
            Ok(point) => staged.push(point),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let total_bytes: u64 = staged.iter().map(|s| s.bytes).sum();
    let total_secs: f64 = staged.iter().map(|s| s.seconds).sum();
    let mbps = if total_secs > 0.0 {
        total_bytes as f64 / 1e6 / total_secs
    } else {
        0.0
    };
    let measurements =
        json!({"sources": staged, "bytes": total_bytes, "seconds": total_secs, "mbps": mbps});
    let message = match &failure {
        Some(e) => format!("storage unreachable or refused: {e}"),
        None => format!(
            "{} in {} files at {} into the job's /workspace",
            crate::units::bytes(total_bytes),
            staged.iter().map(|s| s.files).sum::<u64>(),
            crate::units::mbps(mbps)
        ),
    };
    Staged {
        points: staged,
        mbps: Some(mbps),
        message,
        measurements,
        failed: failure.is_some(),
    }
}
