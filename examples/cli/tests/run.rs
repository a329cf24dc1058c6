//! `kubetrain run` as a user runs it: the quick start on this machine, and a failing rank.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn kubetrain(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubetrain"))
        .args(args)
        .output()
        .expect("kubetrain runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn quickstart_runs_every_rank_and_the_loss_goes_down() {
    let dir = tempfile::tempdir().unwrap();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/quickstart.yaml");
    let run_dir = dir.path().to_str().unwrap();
    let out = kubetrain(&["run", "-f", path, "--run-dir", run_dir]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    for rank in 0..2 {
        assert!(
            stdout.contains(&format!("quickstart-node-0-{rank} | started")),
            "{stdout}"
        );
        assert!(
            stdout.contains(&format!(
                "quickstart-node-0-{rank} | Succeeded (exit code 0)"
            )),
            "{stdout}"
        );
    }
    // Rank 0 reports the averaged loss of both ranks at every step; it must fall.
    let losses: Vec<f64> = stdout
        .lines()
        .filter_map(|l| l.split_once(" loss ").map(|(_, v)| v.trim()))
        .filter_map(|v| v.parse().ok())
        .collect();
    assert!(losses.len() >= 2, "{stdout}");
    assert!(losses.last().unwrap() < &(losses[0] / 10.0), "{losses:?}");
    assert!(stdout.contains("2 ranks"), "{stdout}");
    assert!(stdout.contains("TrainJob quickstart Complete"), "{stdout}");
    assert!(
        text(&out.stderr).contains("is ignored"),
        "the image notice is shown"
    );
}

#[test]
fn a_failing_rank_fails_the_run_with_its_log_tail() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("failing.yaml");
    std::fs::write(
        &job,
        r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: failing}
spec:
  runtimeRef: {name: torch-distributed}
  trainer:
    numNodes: 2
    command: [sh, -c, "if [ $PET_NODE_RANK = 1 ]; then echo fatal: rank 1 lost its data; exit 7; fi; sleep 60"]
"#,
    )
    .unwrap();
    let start = Instant::now();
    let out = kubetrain(&[
        "run",
        "-f",
        job.to_str().unwrap(),
        "--run-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "took {:?}",
        start.elapsed()
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("last 1 log lines of failing-node-0-1:\n  fatal: rank 1 lost its data"),
        "{stdout}"
    );
    assert!(stdout.contains("TrainJob failing Failed"), "{stdout}");
    assert!(
        stdout.contains("pod failing-node-0-1 failed (exit code 7)"),
        "{stdout}"
    );
}

#[test]
fn an_invalid_trainjob_is_refused_with_its_field_path() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("bad.yaml");
    std::fs::write(
        &job,
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: bad}\nspec:\n  runtimeRef: {name: torch-distributed}\n  trainer: {command: [\"true\"], env: [{name: PET_NODE_RANK, value: '0'}]}\n",
    )
    .unwrap();
    let out = kubetrain(&[
        "run",
        "-f",
        job.to_str().unwrap(),
        "--run-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("spec.trainer.env"), "{stderr}");
    assert!(stderr.contains("PET_NODE_RANK"), "{stderr}");
}

#[test]
fn a_job_needing_gpus_this_machine_lacks_is_refused_with_kueues_reason() {
    let has_gpu = std::fs::read_dir("/dev").is_ok_and(|d| {
        d.filter_map(Result::ok).any(|e| {
            e.file_name()
                .to_string_lossy()
                .strip_prefix("nvidia")
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
    });
    if has_gpu {
        eprintln!("skipped: this machine has NVIDIA GPUs");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("gpu.yaml");
    std::fs::write(
        &job,
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: gpu}\nspec:\n  runtimeRef: {name: torch-distributed}\n  trainer: {numNodes: 2, command: [\"true\"], resourcesPerNode: {limits: {nvidia.com/gpu: 1}}}\n",
    )
    .unwrap();
    let out = kubetrain(&[
        "run",
        "-f",
        job.to_str().unwrap(),
        "--run-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("cannot run on this machine"), "{stderr}");
    assert!(
        stderr.contains("insufficient quota for nvidia.com/gpu"),
        "{stderr}"
    );
    assert!(text(&out.stdout).is_empty(), "nothing started");
}

#[test]
fn kubetrain_inside_a_shell_command_is_this_binary() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("shell.yaml");
    std::fs::write(
        &job,
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: shell}\nspec:\n  runtimeRef: {name: torch-distributed}\n  trainer: {numNodes: 2, command: [sh, -c, \"kubetrain collective train-demo --steps 3\"]}\n",
    )
    .unwrap();
    let out = kubetrain(&[
        "run",
        "-f",
        job.to_str().unwrap(),
        "--run-dir",
        dir.path().to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("shell-node-0-0 | done: final loss"),
        "{stdout}"
    );
}
