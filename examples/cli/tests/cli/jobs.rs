//! `kubetrain submit|get|list|logs|wait|delete|runtimes` against a fake API server on loopback, reached
//! through a real kubeconfig.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::common::{arg, command, quickstart, text};

const TRAINJOBS: &str = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs";

fn trainjob(name: &str) -> Value {
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "team-a", "creationTimestamp": "2026-01-02T03:04:05Z"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}}
    })
}

fn pod(index: u32) -> Value {
    json!({
        "metadata": {"name": format!("mnist-node-0-{index}-abcde"),
            "labels": {"jobset.sigs.k8s.io/jobset-name": "mnist", "jobset.sigs.k8s.io/replicatedjob-name": "node",
                       "batch.kubernetes.io/job-completion-index": index.to_string()}},
        "spec": {"containers": [{"name": "node"}]},
        "status": {"phase": "Running"}
    })
}

fn list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items})
}

/// Answers like the API server for one TrainJob `mnist` with two running pods.
fn route(method: &str, target: &str, body: &str) -> (u16, String) {
    let (path, _query) = target.split_once('?').unwrap_or((target, ""));
    let json = |v: Value| v.to_string();
    match (method, path) {
        ("GET", p) if p == format!("{TRAINJOBS}/mnist") => (200, json(trainjob("mnist"))),
        ("DELETE", p) if p == format!("{TRAINJOBS}/mnist") => (200, json(trainjob("mnist"))),
        ("GET", TRAINJOBS) => (200, json(list(vec![trainjob("mnist")]))),
        ("POST", TRAINJOBS) => (201, body.to_string()),
        ("GET", "/api/v1/namespaces/team-a/pods") => (200, json(list(vec![pod(0), pod(1)]))),
        ("GET", "/api/v1/namespaces/team-a/pods/mnist-node-0-0-abcde/log") => {
            (200, "hello\nworld\n".into())
        }
        ("GET", "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes") => {
            let yaml = kubetrain_jobset::builtin::source("torch-distributed").unwrap();
            let rt: Value = serde_saphyr::from_str(yaml).unwrap();
            (200, json(list(vec![rt])))
        }
        ("GET", "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainingruntimes") => {
            (200, json(list(vec![])))
        }
        _ => (
            404,
            json(
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                        "code": 404, "message": format!("{method} {target} not found")}),
            ),
        ),
    }
}

/// Serves `route` on a loopback port; returns the port and the log of "METHOD target body" lines.
fn fake_api_server() -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            let mut length = 0usize;
            loop {
                let mut header = String::new();
                if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
                    break;
                }
                if let Some((k, v)) = header.split_once(':')
                    && k.eq_ignore_ascii_case("content-length")
                {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let body = String::from_utf8_lossy(&body).into_owned();
            let mut parts = request_line.split_whitespace();
            let (method, target) = (
                parts.next().unwrap_or_default(),
                parts.next().unwrap_or_default(),
            );
            log.lock()
                .unwrap()
                .push(format!("{method} {target} {body}"));
            let (status, answer) = route(method, target, &body);
            let mut stream = stream;
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                answer.len()
            );
        }
    });
    (port, seen)
}

/// `kubetrain args` against a fresh fake API server, reached through a kubeconfig naming it: the output and
/// the requests the server saw.
fn kubetrain(args: &[&str]) -> (Output, Vec<String>) {
    let (port, seen) = fake_api_server();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("config");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: fake, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n\
             users: [{{name: u, user: {{token: t}}}}]\n\
             contexts: [{{name: c, context: {{cluster: fake, user: u, namespace: team-a}}}}]\ncurrent-context: c\n"
        ),
    )
    .unwrap();
    let out = command()
        .args(args)
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", dir.path())
        .output()
        .expect("kubetrain runs");
    let seen = seen.lock().unwrap().clone();
    (out, seen)
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
    let (port, _seen) = fake_api_server();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("two-contexts");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- {{name: fake, cluster: {{server: 'http://127.0.0.1:{port}'}}}}\n\
             - {{name: gone, cluster: {{server: 'https://127.0.0.1:1'}}}}\n\
             users: [{{name: u, user: {{token: t}}}}]\n\
             contexts:\n- {{name: a, context: {{cluster: fake, user: u, namespace: team-a}}}}\n\
             - {{name: b, context: {{cluster: gone, user: u, namespace: team-a}}}}\ncurrent-context: b\n"
        ),
    )
    .unwrap();
    let mut all = args.to_vec();
    all.extend(["--kubeconfig", arg(&kubeconfig)]);
    command()
        .args(all)
        .env_remove("KUBECONFIG")
        .env("HOME", dir.path())
        .output()
        .expect("kubetrain runs")
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
