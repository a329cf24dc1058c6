//! The `--local` commands act on this user's runs only, and on a run's own processes only: a planted or stale
//! record never gets an unrelated process signalled, and names never become paths outside the runs tree
//! (issue 38). The two-user cases plant as `nobody` (uid 65534), so they need root, which CI has.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};

use kubetrain_client::local::ProcessIdentity;
use serde_json::{Value, json};

use crate::common::{arg, command, text};

const NOBODY: u32 = 65534;

/// `kubetrain args` with the runs tree at `root` and `$TMPDIR` at `tmp`.
fn kubetrain_in(tmp: &Path, root: Option<&Path>, args: &[&str]) -> Output {
    let mut cmd = command();
    cmd.args(args).env("TMPDIR", tmp);
    match root {
        Some(root) => cmd.env("KUBETRAIN_RUNS_DIR", root),
        None => cmd.env_remove("KUBETRAIN_RUNS_DIR"),
    };
    cmd.output().expect("kubetrain runs")
}

/// A process of this test the planted records point at: it must survive every command below.
struct Victim(Child);

impl Victim {
    fn start() -> Self {
        Victim(
            Command::new("sleep")
                .arg("300")
                .spawn()
                .expect("sleep starts"),
        )
    }

    fn identity(&self) -> ProcessIdentity {
        ProcessIdentity::of(self.0.id()).expect("the victim runs")
    }

    fn assert_alive(&mut self, after: &str) {
        assert!(
            self.0.try_wait().unwrap().is_none(),
            "{after} signalled an unrelated process"
        );
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits for `child` to exit by itself; kills it and fails when it is still running after a generous bound
/// (the bound only turns a hang into a failure; nothing waits for it when the command works).
fn assert_ends(mut child: Child, what: &str) {
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not end: it waits on a run that is over");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A `run.json` that says `name` is Running in process `runner` (and, when given, that `runner` is the
/// process identity of it).
fn record(name: &str, run_dir: &Path, pid: u32, runner: Option<&ProcessIdentity>) -> String {
    let mut record = json!({
        "namespace": "default", "name": name, "runId": "20260101T000000Z-1",
        "runDir": run_dir, "pid": pid, "runtime": "torch-distributed", "numNodes": 1,
        "created": "2026-01-01T00:00:00Z", "status": "Running", "pods": [],
        "token": "0123456789abcdef",
    });
    if let Some(r) = runner {
        record["runner"] = serde_json::to_value(r).unwrap();
    }
    serde_json::to_string(&record).unwrap()
}

/// `<root>/default/<name>/20260101T000000Z-1`.
fn run_dir(root: &Path, name: &str) -> PathBuf {
    root.join("default").join(name).join("20260101T000000Z-1")
}

fn private_root(tmp: &Path) -> PathBuf {
    let root = tmp.join("runs");
    std::fs::create_dir(&root).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).unwrap();
    root
}

fn plant_own(root: &Path, name: &str, body: &str) {
    let dir = run_dir(root, name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("run.json"), body).unwrap();
}

#[test]
fn a_reused_pid_is_never_signalled_and_reads_as_gone() {
    let tmp = tempfile::tempdir().unwrap();
    let root = private_root(tmp.path());
    let mut victim = Victim::start();
    let real = victim.identity();
    // The runner that wrote this record had the victim's pid, but started at another time: the pid was reused.
    let stale = ProcessIdentity {
        start_ticks: real.start_ticks.saturating_sub(1),
        ..real.clone()
    };
    plant_own(
        &root,
        "reused",
        &record("reused", &run_dir(&root, "reused"), real.pid, Some(&stale)),
    );
    // An older record with a bare pid: never trusted either.
    plant_own(
        &root,
        "bare",
        &record("bare", &run_dir(&root, "bare"), real.pid, None),
    );
    for name in ["reused", "bare"] {
        let out = kubetrain_in(
            tmp.path(),
            Some(&root),
            &["get", name, "--local", "-o", "json"],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        let view: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(view["status"], "Failed", "{name}: {view}");
        // wait returns at once instead of waiting for ever on a process that is not the run's.
        let out = kubetrain_in(
            tmp.path(),
            Some(&root),
            &[
                "wait",
                name,
                "--local",
                "--timeout",
                "60s",
                "--interval",
                "1",
            ],
        );
        assert!(!out.status.success());
        assert!(
            text(&out.stderr).contains("is gone")
                || text(&out.stderr).contains("cannot be verified"),
            "{}",
            text(&out.stderr)
        );
        // logs -f ends too: the run it would follow is over.
        assert_ends(
            command()
                .args(["logs", name, "--local", "-f"])
                .env("TMPDIR", tmp.path())
                .env("KUBETRAIN_RUNS_DIR", &root)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
            &format!("logs {name} --local -f"),
        );
        let out = kubetrain_in(tmp.path(), Some(&root), &["delete", name, "--local"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        victim.assert_alive(&format!("delete {name} --local"));
        assert!(!root.join("default").join(name).exists());
    }
}

#[test]
fn names_and_namespaces_never_become_paths_outside_the_runs_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let root = private_root(tmp.path());
    let outside = tmp.path().join("precious");
    std::fs::create_dir_all(outside.join("default")).unwrap();
    std::fs::write(outside.join("default/keep"), "data").unwrap();
    for args in [
        vec!["delete", "../precious", "--local"],
        vec!["delete", "x", "--local", "-n", "../precious"],
        vec!["delete", arg(&outside), "--local"],
        vec!["get", "../precious", "--local"],
        vec!["logs", "x", "--local", "-n", "/etc"],
    ] {
        let out = kubetrain_in(tmp.path(), Some(&root), &args);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            text(&out.stderr).contains("is not a DNS label"),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    assert_eq!(
        std::fs::read_to_string(outside.join("default/keep")).unwrap(),
        "data"
    );
    // A TrainJob whose namespace is a path is refused before any directory is made, with its field path.
    let job = tmp.path().join("job.yaml");
    std::fs::write(
        &job,
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\n\
         metadata: {name: escape, namespace: ../../precious}\n\
         spec: {runtimeRef: {name: torch-distributed}, trainer: {numNodes: 1, command: [\"true\"]}}\n",
    )
    .unwrap();
    let out = kubetrain_in(
        tmp.path(),
        Some(&root),
        &["run", "-f", arg(&job), "--ignore-capacity"],
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("metadata.namespace"),
        "{}",
        text(&out.stderr)
    );
    assert!(!tmp.path().join("precious/escape").exists());
    assert!(
        !root
            .join("..")
            .join("..")
            .join("precious")
            .join("escape")
            .exists()
    );
}

#[test]
fn the_runs_tree_and_its_files_are_private() {
    let tmp = tempfile::tempdir().unwrap();
    let job = tmp.path().join("job.yaml");
    std::fs::write(
        &job,
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: private}\n\
         spec:\n  runtimeRef: {name: torch-distributed}\n  trainer:\n    numNodes: 1\n    command: [sh, -c, echo hi]\n    \
         env: [{name: TOKEN, value: s3cr3t}]\n",
    )
    .unwrap();
    // The default tree: $TMPDIR/kubetrain-runs-<uid>.
    let out = kubetrain_in(
        tmp.path(),
        None,
        &["run", "-f", arg(&job), "--ignore-capacity"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let uid = ProcessIdentity::current().unwrap().uid;
    let root = tmp.path().join(format!("kubetrain-runs-{uid}"));
    let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().mode() & 0o777;
    assert_eq!(mode(&root), 0o700);
    let job_dir = root.join("default/private");
    let run = std::fs::read_dir(&job_dir)
        .unwrap()
        .flatten()
        .find(|e| e.file_type().unwrap().is_dir())
        .expect("a run directory")
        .path();
    assert_eq!(mode(&job_dir), 0o700);
    assert_eq!(mode(&run), 0o700);
    assert_eq!(mode(&run.join("run.json")), 0o600);
    for log in std::fs::read_dir(run.join("logs")).unwrap().flatten() {
        assert_eq!(mode(&log.path()) & 0o007, 0, "{}", log.path().display());
    }
    let record: Value =
        serde_json::from_slice(&std::fs::read(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(record["runner"]["uid"], uid);
    assert!(
        record["runner"]["startTicks"].as_u64().is_some(),
        "{record}"
    );
    assert_eq!(record["token"].as_str().map(str::len), Some(32), "{record}");

    // What --detach writes for its background run (the TrainJob, with its env) is private too.
    let out = kubetrain_in(
        tmp.path(),
        None,
        &["run", "-f", arg(&job), "--ignore-capacity", "--detach"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = kubetrain_in(
        tmp.path(),
        None,
        &[
            "wait",
            "private",
            "--local",
            "--timeout",
            "60s",
            "--interval",
            "1",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let detached = std::fs::read_dir(&job_dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("trainjob.yaml").exists())
        .expect("the detached run's directory");
    assert_eq!(mode(&detached.join("trainjob.yaml")), 0o600);
    assert_eq!(mode(&detached.join("run.log")), 0o600);
}

/// Whether this test process can act as another user; outside CI a non-root run says why it checks nothing.
fn can_switch_users(test: &str) -> bool {
    if ProcessIdentity::current().unwrap().uid == 0 {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test} needs root (to plant records as uid {NOBODY}); CI runs as root"
    );
    eprintln!("{test}: not root, so the two-user case was not run");
    false
}

/// Runs `script` with `sh -c` as `nobody`.
fn as_nobody(script: &str) {
    let status = Command::new("sh")
        .args(["-c", script])
        .uid(NOBODY)
        .gid(NOBODY)
        .status()
        .expect("sh runs as nobody");
    assert!(status.success(), "as nobody: {script}");
}

/// A directory everybody may write in (as /tmp is), inside this test's temporary directory.
fn shared_dir(tmp: &Path, name: &str) -> PathBuf {
    std::fs::set_permissions(tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = tmp.join(name);
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    dir
}

#[test]
fn a_record_planted_by_another_user_never_gets_a_process_signalled() {
    if !can_switch_users("a_record_planted_by_another_user_never_gets_a_process_signalled") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut victim = Victim::start();
    let real = victim.identity();

    // 1. The old layout: one tree every user writes in. nobody plants a record naming root's process, with
    //    its true identity (anyone may read a start time in /proc).
    let shared = shared_dir(tmp.path(), "shared-runs");
    let body = record("evil", &run_dir(&shared, "evil"), real.pid, Some(&real));
    as_nobody(&format!(
        "mkdir -p {dir} && printf '%s' '{body}' > {dir}/run.json",
        dir = run_dir(&shared, "evil").display()
    ));
    for args in [
        vec!["delete", "evil", "--local"],
        vec!["get", "evil", "--local"],
        vec!["list", "--local"],
    ] {
        let out = kubetrain_in(tmp.path(), Some(&shared), &args);
        assert!(!out.status.success(), "{args:?}: {}", text(&out.stdout));
        assert!(
            text(&out.stderr).contains("can be written by other users"),
            "{args:?}: {}",
            text(&out.stderr)
        );
        victim.assert_alive(&format!("{args:?}"));
    }

    // 2. The new layout: nobody makes root's default tree ($TMPDIR/kubetrain-runs-0) before root does.
    let tmpdir = shared_dir(tmp.path(), "tmp");
    let squatted = tmpdir.join("kubetrain-runs-0");
    let body = record("evil", &run_dir(&squatted, "evil"), real.pid, Some(&real));
    as_nobody(&format!(
        "mkdir -m 700 {root} && mkdir -p {dir} && printf '%s' '{body}' > {dir}/run.json",
        root = squatted.display(),
        dir = run_dir(&squatted, "evil").display()
    ));
    let out = kubetrain_in(&tmpdir, None, &["delete", "evil", "--local"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("belongs to uid 65534"),
        "{}",
        text(&out.stderr)
    );
    victim.assert_alive("delete --local in a squatted tree");

    // 3. Root's own tree with a run directory of nobody's in it (made for nobody, then planted by nobody).
    let root = private_root(tmp.path());
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o711)).unwrap();
    let job_dir = root.join("default/evil");
    std::fs::create_dir_all(&job_dir).unwrap();
    std::fs::set_permissions(root.join("default"), std::fs::Permissions::from_mode(0o711)).unwrap();
    std::os::unix::fs::chown(&job_dir, Some(NOBODY), Some(NOBODY)).unwrap();
    let body = record("evil", &run_dir(&root, "evil"), real.pid, Some(&real));
    as_nobody(&format!(
        "mkdir {dir} && printf '%s' '{body}' > {dir}/run.json",
        dir = run_dir(&root, "evil").display()
    ));
    let out = kubetrain_in(tmp.path(), Some(&root), &["delete", "evil", "--local"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("belongs to uid 65534, not to you"),
        "{}",
        text(&out.stderr)
    );
    victim.assert_alive("delete --local of a planted run directory");
    assert!(
        run_dir(&root, "evil").join("run.json").exists(),
        "another user's files are left where they are"
    );
}
