//! `kubetrain submit|get|list|logs|wait|delete|runtimes` against the controller's fake API server served on
//! loopback, reached through a real kubeconfig.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kubetrain_test_support::{FakeApiServer, ServedApi, fixtures};
use serde_json::{Value, json};

use crate::common::{arg, command, quickstart, text};

fn trainjob(name: &str) -> Value {
    fixtures::trainjob(name)
        .namespace("team-a")
        .created("2026-01-02T03:04:05Z")
        .num_nodes(2)
        .json()
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
    assert_eq!(lines[0], ["NAME", "STATUS", "RUNTIME", "NODES", "AGE"]);
    assert_eq!(
        lines[1][..4],
        ["mnist", "Running", "torch-distributed", "2"]
    );
    // An age as kubectl writes one (the fixture is from 2026-01-02), not the timestamp.
    let age = lines[1][4];
    assert!(
        age.chars()
            .all(|c| c.is_ascii_digit() || "smhdy".contains(c)),
        "{age}"
    );
    // No GPU anywhere: no DEVICE column (the SDK's `Unknown` stays in JSON and -o wide).
    assert_eq!(lines[3], ["STEP", "STATUS", "POD"]);
    assert!(
        lines.contains(&vec!["node-1", "Running", "mnist-node-0-1-abcde"]),
        "{text}"
    );
    assert!(seen[1].contains("labelSelector="), "{seen:?}");

    let (out, _) = kubetrain(&["get", "mnist", "-o", "wide"]);
    let text = stdout(&out);
    let lines: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0][4..], ["AGE", "CREATED"]);
    assert_eq!(lines[1][5], "2026-01-02T03:04:05Z");
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
    let job = |name: &str| fixtures::trainjob(name).without_namespace().yaml();
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
    let job = fixtures::trainjob(name)
        .without_namespace()
        .num_nodes(2)
        .command(&["sh", "-c", &script]);
    std::fs::write(&file, job.yaml()).unwrap();
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
    // The directory ends the line or the clause (`...; it already ended: ...` when the run was quick).
    let dir = first
        .rsplit("run directory ")
        .next()
        .and_then(|rest| rest.split(';').next())
        .unwrap()
        .to_owned();
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
    let uid = kubetrain_client::local::ProcessIdentity::current()
        .unwrap()
        .uid;
    let runs = tmp
        .path()
        .join(format!("kubetrain-runs-{uid}/default/stopme"));
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

/// A private runs tree for `--local` commands on planted runs: `<tmp>/kubetrain-runs`, mode 0700, named by
/// `KUBETRAIN_RUNS_DIR` (and found there too by a kubetrain that reads `$TMPDIR/kubetrain-runs`).
struct Runs {
    tmp: tempfile::TempDir,
    root: PathBuf,
}

impl Runs {
    fn new() -> Self {
        use std::os::unix::fs::DirBuilderExt;
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("kubetrain-runs");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&root)
            .unwrap();
        Runs { tmp, root }
    }

    /// `kubetrain` on this tree, with no cluster configured and no `COLUMNS`.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = command();
        command
            .args(args)
            .env("TMPDIR", self.tmp.path())
            .env("KUBETRAIN_RUNS_DIR", &self.root)
            .env("HOME", self.tmp.path())
            .env_remove("KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("COLUMNS");
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("kubetrain runs")
    }

    /// Plants a finished run as `kubetrain run` records one: `run.json` of a one-node TrainJob `planted` in
    /// `default` (Complete, its process long gone), its fields replaced by those of `fields`, and an empty
    /// `logs/`. Returns the run directory. (The one place that knows the record's format.)
    fn plant(&self, fields: Value) -> PathBuf {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let mut record = json!({
            "namespace": "default", "name": "planted", "runId": "20261201T142530Z-4242",
            "pid": 4_194_305, "runtime": "torch-distributed", "numNodes": 1,
            "created": "2026-12-01T14:25:30.123456789Z", "status": "Complete",
            "message": "jobset completed successfully", "finished": "2026-12-01T14:26:01.987654321Z",
            "pods": [{"name": "planted-node-0-0", "step": "node-0", "phase": "Succeeded",
                      "detail": "exit code 0", "device": "Unknown", "deviceCount": "Unknown"}]
        });
        for (key, value) in fields.as_object().unwrap() {
            record[key] = value.clone();
        }
        let dir = self
            .root
            .join(record["namespace"].as_str().unwrap())
            .join(record["name"].as_str().unwrap())
            .join(record["runId"].as_str().unwrap());
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir.join("logs"))
            .unwrap();
        record["runDir"] = json!(dir);
        let mut file = std::fs::OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(0o600)
            .open(dir.join("run.json"))
            .unwrap();
        std::io::Write::write_all(&mut file, record.to_string().as_bytes()).unwrap();
        dir
    }
}

/// Lines split into their whitespace-separated cells.
fn cells(text: &str) -> Vec<Vec<&str>> {
    text.lines()
        .map(|l| l.split_whitespace().collect())
        .collect()
}

#[test]
fn list_and_get_without_a_cluster_show_the_local_runs_with_a_note() {
    let runs = Runs::new();
    runs.plant(json!({}));
    let reason = format!(
        "{}/.kube/config does not exist and KUBECONFIG is not set",
        runs.tmp.path().display()
    );
    let note = format!(
        "note: no cluster configured: {reason}; these are the runs of `kubetrain run` on this machine (as \
         with --local)\n"
    );
    let out = runs.run(&["list"]);
    assert_eq!(text(&out.stderr), note);
    let listed = stdout(&out);
    assert_eq!(listed, stdout(&runs.run(&["list", "--local"])));
    assert_eq!(cells(&listed)[1][..3], ["default", "planted", "Complete"]);

    let out = runs.run(&["get", "planted"]);
    assert_eq!(text(&out.stderr), note);
    assert_eq!(
        stdout(&out),
        stdout(&runs.run(&["get", "planted", "--local"]))
    );

    let out = runs.run(&["runtimes"]);
    assert_eq!(
        text(&out.stderr),
        format!(
            "note: no cluster configured: {reason}; these are the built-in runtimes `kubetrain run` uses (as \
             with --local)\n"
        )
    );
    // A KUBECONFIG that names no file is no cluster either, and the note names it.
    let missing = runs.tmp.path().join("missing-config");
    let out = runs
        .command(&["list", "-o", "json"])
        .env("KUBECONFIG", &missing)
        .output()
        .unwrap();
    assert!(
        text(&out.stderr).starts_with(&format!(
            "note: no cluster configured: KUBECONFIG names {}, which does not exist;",
            missing.display()
        )),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        serde_json::from_str::<Value>(&stdout(&out)).unwrap()[0]["name"],
        "planted"
    );

    // What would act on a cluster is refused in one clean line, not run locally.
    for args in [
        &["logs", "planted"][..],
        &["delete", "planted"],
        &["wait", "planted"],
    ] {
        let out = runs.run(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(
            text(&out.stderr),
            format!(
                "error: no cluster configured: {reason}; give --kubeconfig, or use --local for the runs of \
                 `kubetrain run` on this machine\n"
            ),
            "{args:?}"
        );
    }
    assert!(runs.root.join("default/planted").exists());

    // A kubeconfig that exists but cannot be used is an error, said once and without kube's doubled quotes.
    let broken = runs.tmp.path().join("broken-config");
    std::fs::write(&broken, "apiVersion: v1\nkind: Config\n").unwrap();
    let out = runs
        .command(&["list"])
        .env("KUBECONFIG", &broken)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let error = text(&out.stderr);
    assert_eq!(error.lines().count(), 1, "{error}");
    assert!(
        error.starts_with("error: cannot use the cluster configuration: kubeconfig: ")
            && error.ends_with("(or use --local for the runs on this machine)\n")
            && !error.contains("in-cluster")
            && !error.contains("'\""),
        "{error}"
    );
}

#[test]
fn local_tables_show_age_and_wide_and_json_keep_the_timestamps() {
    use k8s_openapi::jiff::{Timestamp, ToSpan};
    let runs = Runs::new();
    // Two days and four hours ago (and a little more: the age must not round down to 2d3h), with
    // nanoseconds as `kubetrain run` records them.
    let created = Timestamp::now()
        .checked_sub(52.hours())
        .unwrap()
        .checked_sub(123_456_789.nanoseconds())
        .unwrap()
        .to_string();
    runs.plant(json!({"created": created}));
    let to_the_second = Timestamp::from_second(created.parse::<Timestamp>().unwrap().as_second())
        .unwrap()
        .to_string();

    let out = runs.run(&["list", "--local"]);
    let table = stdout(&out);
    let rows = cells(&table);
    assert_eq!(
        rows[0],
        [
            "NAMESPACE",
            "NAME",
            "STATUS",
            "RUNTIME",
            "NODES",
            "AGE",
            "RUN"
        ]
    );
    assert_eq!(
        rows[1],
        [
            "default",
            "planted",
            "Complete",
            "torch-distributed",
            "1",
            "2d4h",
            "20261201T142530Z-4242"
        ]
    );
    let out = runs.run(&["list", "--local", "-o", "wide"]);
    let rows: Vec<String> = stdout(&out)
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        rows,
        [
            "NAMESPACE NAME STATUS RUNTIME NODES AGE CREATED RUN".to_owned(),
            format!(
                "default planted Complete torch-distributed 1 2d4h {to_the_second} 20261201T142530Z-4242"
            )
        ]
    );
    let table = stdout(&runs.run(&["get", "planted", "--local"]));
    let rows = cells(&table);
    assert_eq!(rows[0], ["NAME", "STATUS", "RUNTIME", "NODES", "AGE"]);
    assert_eq!(rows[1][4], "2d4h");
    for format in ["json", "yaml"] {
        let out = runs.run(&["get", "planted", "--local", "-o", format]);
        let view: Value = serde_saphyr::from_str(&stdout(&out)).unwrap();
        assert_eq!(view["creation_timestamp"], created.as_str(), "{format}");
    }
}

#[test]
fn cpu_runs_have_no_device_column_and_gpu_runs_read_cpu_for_their_other_steps() {
    let runs = Runs::new();
    runs.plant(json!({}));
    let table = stdout(&runs.run(&["get", "planted", "--local"]));
    let rows = cells(&table);
    assert_eq!(rows[3], ["STEP", "STATUS", "POD"]);
    assert_eq!(rows[4], ["node-0", "Succeeded", "planted-node-0-0"]);
    let table = stdout(&runs.run(&["get", "planted", "--local", "-o", "wide"]));
    let rows = cells(&table);
    assert_eq!(rows[3], ["STEP", "STATUS", "POD", "DEVICE", "COUNT"]);
    assert_eq!(
        rows[4],
        [
            "node-0",
            "Succeeded",
            "planted-node-0-0",
            "Unknown",
            "Unknown"
        ]
    );

    runs.plant(json!({"name": "gpus", "pods": [
        {"name": "gpus-dataset-initializer-0-0", "step": "dataset-initializer", "phase": "Succeeded",
         "device": "Unknown", "deviceCount": "Unknown"},
        {"name": "gpus-node-0-0", "step": "node-0", "phase": "Succeeded", "device": "gpu", "deviceCount": "1"}
    ]}));
    let table = stdout(&runs.run(&["get", "gpus", "--local"]));
    let rows = cells(&table);
    assert_eq!(rows[3], ["STEP", "STATUS", "POD", "DEVICE", "COUNT"]);
    assert_eq!(
        rows[4],
        [
            "dataset-initializer",
            "Succeeded",
            "gpus-dataset-initializer-0-0",
            "cpu",
            "-"
        ]
    );
    assert_eq!(
        rows[5],
        ["node-0", "Succeeded", "gpus-node-0-0", "gpu", "1"]
    );
    // The SDK's values stay in JSON.
    let out = runs.run(&["get", "gpus", "--local", "-o", "json"]);
    let view: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(view["steps"][0]["device"], "Unknown");
}

#[test]
fn get_local_as_json_names_the_run_and_its_directory() {
    let runs = Runs::new();
    let dir = runs.plant(json!({}));
    let out = runs.run(&["get", "planted", "--local", "-o", "json"]);
    let view: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(view["name"], "planted");
    assert_eq!(view["namespace"], "default");
    assert_eq!(view["run_id"], "20261201T142530Z-4242");
    assert_eq!(view["run_dir"], arg(&dir));
    assert_eq!(view["finished_timestamp"], "2026-12-01T14:26:01.987654321Z");
    let out = runs.run(&["list", "--local", "-o", "yaml"]);
    let listed: Value = serde_saphyr::from_str(&stdout(&out)).unwrap();
    assert_eq!(listed[0]["run_dir"], arg(&dir));
    assert_eq!(listed[0]["run_id"], "20261201T142530Z-4242");
}

/// `trainerStatus` as recorded: `percent`% done, reported `2026-12-01T14:26:00Z`, with `metrics` metrics.
fn reported(percent: i32, metrics: usize) -> Value {
    let metrics: Vec<Value> = (0..metrics)
        .map(|i| {
            json!([
                format!("metric_number_{i}"),
                format!("{}", 0.123_456_7 * i as f64)
            ])
        })
        .collect();
    json!({"progressPercentage": percent, "estimatedRemainingSeconds": 3,
           "metrics": metrics, "lastUpdatedTime": "2026-12-01T14:26:00Z"})
}

/// The `progress:` line of `get` output.
fn progress_of(out: &Output) -> String {
    let text = stdout(out);
    text.lines()
        .find(|l| l.starts_with("progress: "))
        .unwrap_or_else(|| panic!("no progress line in {text}"))
        .to_owned()
}

#[test]
fn a_finished_run_shows_its_final_state_not_its_last_percentage() {
    let runs = Runs::new();
    runs.plant(json!({"trainerStatus": reported(91, 2)}));
    let out = runs.run(&["get", "planted", "--local"]);
    let line = progress_of(&out);
    assert!(
        line.starts_with("progress: Complete (last report ")
            && line.ends_with(" ago: 91% done); metric_number_0=0 metric_number_1=0.1234567"),
        "{line}"
    );
    assert!(!line.contains("left"), "{line}");
    // The raw last report stays in JSON.
    let out = runs.run(&["get", "planted", "--local", "-o", "json"]);
    let view: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(view["status"], "Complete");
    assert_eq!(view["trainer_status"]["progress_percentage"], 91);
    assert_eq!(view["trainer_status"]["estimated_remaining_seconds"], 3);
}

#[test]
fn progress_lines_fit_120_columns_when_piped_and_columns_when_set() {
    let runs = Runs::new();
    // The probe's run: 100 metrics made a 1,445-character line.
    runs.plant(json!({"status": "Failed", "trainerStatus": reported(40, 100)}));
    let line = progress_of(&runs.run(&["get", "planted", "--local"]));
    assert!(line.chars().count() <= 120, "{} {line}", line.len());
    assert!(
        line.starts_with("progress: Failed (last report ") && line.ends_with(" …"),
        "{line}"
    );
    let out = runs
        .command(&["get", "planted", "--local"])
        .env("COLUMNS", "70")
        .output()
        .unwrap();
    let narrow = progress_of(&out);
    assert!(narrow.chars().count() <= 70, "{narrow}");
    assert!(narrow.ends_with(" …"), "{narrow}");
    // JSON keeps every metric.
    let out = runs.run(&["get", "planted", "--local", "-o", "json"]);
    let view: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        view["trainer_status"]["metrics"].as_array().unwrap().len(),
        100
    );
}

/// Plants a run whose node-0 log is `size` bytes: `first line`, then a hole the file system keeps sparse
/// (read back as zero bytes, so a gigabyte costs no disk), then `last line`. Returns the log's path.
fn plant_log(runs: &Runs, name: &str, size: u64) -> PathBuf {
    use std::io::{Seek, SeekFrom, Write};
    let pod = format!("{name}-node-0-0");
    let dir = runs.plant(json!({"name": name, "pods": [
        {"name": pod, "step": "node-0", "phase": "Succeeded", "device": "Unknown", "deviceCount": "Unknown"}
    ]}));
    let path = dir.join("logs").join(format!("{pod}.log"));
    let mut file = std::fs::File::create(&path).unwrap();
    file.write_all(b"first line\n").unwrap();
    file.set_len(size).unwrap();
    file.seek(SeekFrom::Start(size - 10)).unwrap();
    file.write_all(b"last line\n").unwrap();
    path
}

/// Runs `kubetrain args` (which prints `size` bytes) and returns its peak resident memory in KiB (VmHWM):
/// read while the command still has `size - 8 MiB` or more printed and is blocked on the rest (a pipe holds
/// far less than 8 MiB), so it is alive and its peak is final but for its last writes.
fn peak_rss_kib(runs: &Runs, args: &[&str], size: u64) -> u64 {
    use std::io::Read;
    const LEFT: u64 = 8 << 20;
    let mut child = runs
        .command(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdout.take().unwrap();
    let mut buffer = vec![0u8; 1 << 20];
    let mut total = 0u64;
    let mut tail = Vec::new();
    let mut peak = None;
    loop {
        if peak.is_none() && total + LEFT >= size {
            let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
            let line = status
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .unwrap_or_else(|| panic!("no VmHWM: the command ended early?\n{status}"));
            peak = Some(
                line.split_whitespace()
                    .nth(1)
                    .unwrap()
                    .parse::<u64>()
                    .unwrap(),
            );
        }
        let n = pipe.read(&mut buffer).unwrap();
        if n == 0 {
            break;
        }
        total += n as u64;
        tail.extend_from_slice(&buffer[..n]);
        let keep = tail.len().saturating_sub(16);
        tail.drain(..keep);
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(total, size, "{args:?} printed the whole log");
    assert!(tail.ends_with(b"\0last line\n"), "{args:?}");
    peak.unwrap()
}

#[test]
fn local_logs_stream_a_gigabyte_in_the_memory_of_a_few_megabytes() {
    const GIB: u64 = 1 << 30;
    const SMALL: u64 = 16 << 20;
    let runs = Runs::new();
    plant_log(&runs, "small", SMALL);
    plant_log(&runs, "large", GIB);
    let small = peak_rss_kib(&runs, &["logs", "small", "--local"], SMALL);
    let large = peak_rss_kib(&runs, &["logs", "large", "--local"], GIB);
    let followed = peak_rss_kib(&runs, &["logs", "large", "--local", "-f"], GIB);
    eprintln!(
        "peak RSS of `kubetrain logs --local`: {small} KiB for 16 MiB, {large} KiB for 1 GiB, {followed} KiB for \
         1 GiB with -f"
    );
    for peak in [large, followed] {
        assert!(peak < 64 << 10, "{peak} KiB for a 1 GiB log");
        // As much as for a small log, give or take what allocators round.
        assert!(
            peak <= small + (4 << 10),
            "{peak} KiB for 1 GiB, {small} KiB for 16 MiB"
        );
    }
}

#[test]
fn local_logs_print_the_log_exactly_and_end_as_cat_does_when_the_reader_goes() {
    use std::io::Read;
    let runs = Runs::new();
    let path = plant_log(&runs, "exact", 64);
    let out = runs.run(&["logs", "exact", "--local"]);
    assert_eq!(out.stdout, std::fs::read(&path).unwrap());
    // `kubetrain logs NAME --local | head -c 5`: the reader leaves; the command ends quietly with the exit
    // status of a process killed by SIGPIPE, as `cat` would.
    plant_log(&runs, "headed", 4 << 20);
    for args in [
        &["logs", "headed", "--local"][..],
        &["logs", "headed", "--local", "-f"],
    ] {
        let mut child = runs
            .command(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut pipe = child.stdout.take().unwrap();
        let mut first = [0u8; 5];
        pipe.read_exact(&mut first).unwrap();
        assert_eq!(&first, b"first");
        drop(pipe);
        let out = child.wait_with_output().unwrap();
        assert_eq!(text(&out.stderr), "", "{args:?}");
        assert_eq!(out.status.code(), Some(141), "{args:?}");
    }
}
