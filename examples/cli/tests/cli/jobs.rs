//! `kubetrain submit|get|list|logs|wait|delete|runtimes` against the controller's fake API server served on
//! loopback, reached through a real kubeconfig.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kubetrain_controller::mock::{FakeApiServer, ServedApi};
use serde_json::{Value, json};

use crate::common::{arg, command, quickstart, text};

fn trainjob(name: &str) -> Value {
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "team-a", "creationTimestamp": "2026-01-02T03:04:05Z"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}}
    })
}

fn pod(index: u32) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("mnist-node-0-{index}-abcde"), "namespace": "team-a",
            "labels": {"jobset.sigs.k8s.io/jobset-name": "mnist", "jobset.sigs.k8s.io/replicatedjob-name": "node",
                       "batch.kubernetes.io/job-completion-index": index.to_string()}},
        "spec": {"containers": [{"name": "node"}]},
        "status": {"phase": "Running"}
    })
}

/// A cluster with one TrainJob `mnist` and its two running pods (the first with a log), and the built-in
/// `torch-distributed` ClusterTrainingRuntime; every request is recorded.
fn cluster() -> FakeApiServer {
    let server = FakeApiServer::start();
    server.record_requests();
    server.insert(trainjob("mnist"));
    server.insert(pod(0));
    server.insert(pod(1));
    server.set_log("team-a", "mnist-node-0-0-abcde", "node", "hello\nworld\n");
    let yaml = kubetrain_jobset::builtin::source("torch-distributed").unwrap();
    server.insert(serde_saphyr::from_str(yaml).unwrap());
    server
}

/// Runs the command `make` builds for [`cluster`] served on loopback; returns its output and the requests
/// the server saw, as `METHOD target body` lines.
fn against_cluster(make: impl FnOnce(&ServedApi) -> Command) -> (Output, Vec<String>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let server = cluster();
        let served = server.serve().unwrap();
        let mut command = make(&served);
        // The runtime answers the requests while the command runs on the blocking pool.
        let out = tokio::task::spawn_blocking(move || command.output().expect("kubetrain runs"))
            .await
            .unwrap();
        let seen = server
            .requests()
            .iter()
            .map(|r| format!("{} {} {}", r.method, r.uri, r.body))
            .collect();
        (out, seen)
    })
}

/// `kubetrain args` against a fresh [`cluster`], reached through a kubeconfig naming it (namespace team-a):
/// the output and the requests the server saw.
fn kubetrain(args: &[&str]) -> (Output, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("config");
    against_cluster(|served| {
        served.write_kubeconfig(&kubeconfig, "team-a").unwrap();
        let mut command = command();
        command
            .args(args)
            .env("KUBECONFIG", &kubeconfig)
            .env("HOME", dir.path());
        command
    })
}

fn stdout(out: &Output) -> String {
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn get_prints_the_job_and_its_steps() {
    let (out, seen) = kubetrain(&["get", "mnist"]);
    let text = stdout(&out);
    let lines: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0], ["NAME", "STATUS", "RUNTIME", "NODES", "CREATED"]);
    assert_eq!(
        lines[1],
        [
            "mnist",
            "Running",
            "torch-distributed",
            "2",
            "2026-01-02T03:04:05Z"
        ]
    );
    assert!(
        lines.contains(&vec![
            "node-1",
            "Running",
            "mnist-node-0-1-abcde",
            "Unknown",
            "Unknown"
        ]),
        "{text}"
    );
    assert!(seen[1].contains("labelSelector="), "{seen:?}");
}

#[test]
fn list_as_json() {
    let (out, _) = kubetrain(&["list", "-o", "json"]);
    let jobs: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(jobs[0]["name"], "mnist");
    assert_eq!(jobs[0]["status"], "Running");
    assert_eq!(jobs[0]["steps"].as_array().unwrap().len(), 2);
}

#[test]
fn submit_creates_the_trainjob_in_the_context_namespace() {
    let (out, seen) = kubetrain(&["submit", "-f", &quickstart(), "-n", "team-a"]);
    assert_eq!(
        stdout(&out),
        "trainjob.trainer.kubeflow.org/quickstart created\n"
    );
    let post = seen.iter().find(|s| s.starts_with("POST")).expect("a POST");
    let body: Value = serde_json::from_str(post.splitn(3, ' ').nth(2).unwrap()).unwrap();
    assert_eq!(body["metadata"]["name"], "quickstart");
    assert_eq!(body["metadata"]["namespace"], "team-a");
    assert_eq!(body["spec"]["trainer"]["numNodes"], 2);
}

#[test]
fn submit_takes_directories_and_repeats_and_creates_every_trainjob() {
    let dir = tempfile::tempdir().unwrap();
    let job = |name: &str| {
        format!(
            "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: {name}}}\nspec: {{runtimeRef: {{name: torch-distributed}}}}\n"
        )
    };
    std::fs::write(dir.path().join("b.yaml"), job("b")).unwrap();
    std::fs::write(
        dir.path().join("a.yaml"),
        format!("{}---\n{}", job("a1"), job("a2")),
    )
    .unwrap();
    let quickstart = quickstart();
    let (out, seen) = kubetrain(&["submit", "-f", arg(dir.path()), "--filename", &quickstart]);
    assert_eq!(
        stdout(&out),
        "trainjob.trainer.kubeflow.org/a1 created\ntrainjob.trainer.kubeflow.org/a2 created\n\
         trainjob.trainer.kubeflow.org/b created\ntrainjob.trainer.kubeflow.org/quickstart created\n"
    );
    assert_eq!(seen.iter().filter(|s| s.starts_with("POST")).count(), 4);

    // A file without a TrainJob creates nothing and says so.
    let empty = dir.path().join("empty.json");
    std::fs::write(&empty, "").unwrap();
    let (out, seen) = kubetrain(&["submit", "-f", arg(&empty)]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!("error: {} holds no TrainJob\n", empty.display())
    );
    assert!(!seen.iter().any(|s| s.starts_with("POST")), "{seen:?}");
}

#[test]
fn logs_wait_delete_and_runtimes() {
    let (out, seen) = kubetrain(&["logs", "mnist"]);
    assert_eq!(stdout(&out), "hello\nworld\n");
    assert!(seen.last().unwrap().contains("container=node"), "{seen:?}");

    let (out, _) = kubetrain(&["wait", "mnist", "--for", "Running", "--timeout", "5"]);
    assert_eq!(
        stdout(&out),
        "trainjob.trainer.kubeflow.org/mnist Running\n"
    );

    let (out, _) = kubetrain(&["delete", "mnist"]);
    assert_eq!(
        stdout(&out),
        "trainjob.trainer.kubeflow.org/mnist deleted\n"
    );

    let (out, _) = kubetrain(&["delete", "ghost"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("TrainJob \"ghost\" not found"));

    let (out, _) = kubetrain(&["runtimes"]);
    let text = stdout(&out);
    assert!(
        text.lines().any(|l| l.starts_with("torch-distributed")
            && l.contains("ClusterTrainingRuntime")
            && l.contains("torch")),
        "{text}"
    );
}

/// `kubetrain` with a kubeconfig of two contexts (`a`: namespace team-a on the fake server, `b`: a server
/// nobody listens on) and no `KUBECONFIG`: the file and context come from the flags only.
fn kubetrain_with_flags(args: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("two-contexts");
    against_cluster(|served| {
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- {{name: fake, cluster: {{server: '{}'}}}}\n\
                 - {{name: gone, cluster: {{server: 'https://127.0.0.1:1'}}}}\n\
                 users: [{{name: u, user: {{token: t}}}}]\n\
                 contexts:\n- {{name: a, context: {{cluster: fake, user: u, namespace: team-a}}}}\n\
                 - {{name: b, context: {{cluster: gone, user: u, namespace: team-a}}}}\ncurrent-context: b\n",
                served.url()
            ),
        )
        .unwrap();
        let mut all = args.to_vec();
        all.extend(["--kubeconfig", arg(&kubeconfig)]);
        let mut command = command();
        command
            .args(all)
            .env_remove("KUBECONFIG")
            .env("HOME", dir.path());
        command
    })
    .0
}

#[test]
fn kubeconfig_and_context_flags_choose_the_cluster_and_unreachable_servers_are_named_once() {
    let out = kubetrain_with_flags(&["get", "mnist", "--context", "a"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout(&out).starts_with("NAME"), "{}", stdout(&out));
    // The file's current context `b` points at a port nobody listens on.
    for args in [&["get", "mnist"][..], &["list"], &["runtimes"]] {
        let out = kubetrain_with_flags(args);
        assert!(!out.status.success());
        assert_eq!(
            text(&out.stderr),
            "error: cannot reach https://127.0.0.1:1: connection refused\n",
            "{args:?}"
        );
    }
    let out = kubetrain_with_flags(&["list", "--context", "nope"]);
    assert!(text(&out.stderr).contains("nope"), "{}", text(&out.stderr));
}

#[test]
fn runtimes_without_a_cluster_are_the_built_in_ones() {
    let home = tempfile::tempdir().unwrap();
    let out = command()
        .arg("runtimes")
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("HOME", home.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let listing = stdout(&out);
    assert!(listing.starts_with("NAME "), "{listing}");
    assert!(listing.contains("\ntorch-distributed "), "{listing}");
    assert!(text(&out.stderr).contains("no cluster configured"));
    let local = command().args(["runtimes", "--local"]).output().unwrap();
    assert_eq!(stdout(&local), listing);
}

/// `kubetrain` with `$TMPDIR` (where local runs are kept) at `tmp`.
fn local(tmp: &Path, args: &[&str]) -> Output {
    command()
        .args(args)
        .env("TMPDIR", tmp)
        .output()
        .expect("kubetrain runs")
}

/// A 2-node TrainJob `name` whose ranks print two lines around waiting for the file `gate`.
fn gated_job(dir: &Path, name: &str, gate: &Path) -> PathBuf {
    let file = dir.join(format!("{name}.yaml"));
    let script = format!(
        "echo rank $PET_NODE_RANK up; while [ ! -e {} ]; do sleep 0.05; done; echo rank $PET_NODE_RANK done",
        gate.display()
    );
    std::fs::write(
        &file,
        format!(
            "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: {name}}}\nspec:\n  \
             runtimeRef: {{name: torch-distributed}}\n  trainer: {{numNodes: 2, command: [sh, -c, {script:?}]}}\n"
        ),
    )
    .unwrap();
    file
}

#[test]
fn a_detached_run_can_be_watched_waited_for_and_listed() {
    let tmp = tempfile::tempdir().unwrap();
    let gate = tmp.path().join("go");
    let job = gated_job(tmp.path(), "bg", &gate);
    let out = local(
        tmp.path(),
        &["run", "-f", arg(&job), "--detach", "--ignore-capacity"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let first = stdout(&out).lines().next().unwrap().to_owned();
    assert!(
        first.starts_with("TrainJob default/bg runs in the background: run "),
        "{first}"
    );
    let dir = first.rsplit("run directory ").next().unwrap().to_owned();
    assert!(dir.starts_with(arg(tmp.path())), "{dir}");

    let out = local(
        tmp.path(),
        &[
            "wait",
            "bg",
            "--local",
            "--for",
            "Running",
            "--interval",
            "1",
        ],
    );
    assert_eq!(stdout(&out), "trainjob.trainer.kubeflow.org/bg Running\n");
    std::fs::write(&gate, "").unwrap();
    let out = local(
        tmp.path(),
        &[
            "wait",
            "bg",
            "--local",
            "--timeout",
            "60s",
            "--interval",
            "1",
        ],
    );
    assert_eq!(
        stdout(&out),
        "trainjob.trainer.kubeflow.org/bg Complete\n",
        "{}",
        text(&out.stderr)
    );

    // Kept logs per pod, as the pods wrote them.
    let out = local(tmp.path(), &["logs", "bg", "--local", "--step", "node-1"]);
    assert_eq!(stdout(&out), "rank 1 up\nrank 1 done\n");
    let out = local(tmp.path(), &["logs", "bg", "--local", "-f"]);
    assert_eq!(stdout(&out), "rank 0 up\nrank 0 done\n");
    assert!(Path::new(&dir).join("logs/bg-node-0-0.log").exists());

    let out = local(tmp.path(), &["get", "bg", "--local", "-o", "json"]);
    let view: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(view["status"], "Complete");
    assert_eq!(view["steps"][1]["status"], "Succeeded");
    let out = local(tmp.path(), &["get", "bg", "--local"]);
    assert!(
        stdout(&out).contains(&format!("in {dir}\n")),
        "{}",
        stdout(&out)
    );
    let out = local(tmp.path(), &["list", "--local"]);
    let rows: Vec<String> = stdout(&out).lines().map(String::from).collect();
    assert!(rows[0].starts_with("NAMESPACE   NAME   STATUS"), "{rows:?}");
    assert!(
        rows[1].starts_with("default     bg     Complete   torch-distributed   2"),
        "{rows:?}"
    );
    let out = local(tmp.path(), &["get", "other", "--local"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("TrainJob default/other has no run on this machine"));
}

#[test]
fn deleting_a_running_local_run_stops_it_and_removes_its_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let gate = tmp.path().join("never");
    let job = gated_job(tmp.path(), "stopme", &gate);
    let out = local(
        tmp.path(),
        &["run", "-f", arg(&job), "--detach", "--ignore-capacity"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = local(
        tmp.path(),
        &[
            "wait",
            "stopme",
            "--local",
            "--for",
            "Running",
            "--interval",
            "1",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = local(tmp.path(), &["get", "stopme", "--local", "-o", "json"]);
    assert_eq!(
        serde_json::from_str::<Value>(&stdout(&out)).unwrap()["status"],
        "Running"
    );
    let runs = tmp.path().join("kubetrain-runs/default/stopme");
    let record: Value = std::fs::read_dir(&runs)
        .unwrap()
        .flatten()
        .find_map(|e| std::fs::read(e.path().join("run.json")).ok())
        .map(|b| serde_json::from_slice(&b).unwrap())
        .unwrap();
    let pid = record["pid"].as_u64().unwrap();

    let out = local(tmp.path(), &["delete", "stopme", "--local"]);
    assert_eq!(
        stdout(&out),
        "trainjob.trainer.kubeflow.org/stopme deleted\n"
    );
    assert!(!runs.exists());
    // The run's process is gone (or a zombie waiting for whoever adopted it).
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(state.is_empty() || state.contains(") Z "), "{state}");
    let out = local(tmp.path(), &["delete", "stopme", "--local"]);
    assert!(!out.status.success());
}
