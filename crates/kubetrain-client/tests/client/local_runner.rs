//! The local runner end to end: real processes, real env, real process groups.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kubetrain_client::local::PlanError;
use kubetrain_client::local::{self, LocalOptions, PodPhase, RunEvent, RunSummary};
use kubetrain_client::{ClientError, JobStatus};
use tokio::sync::mpsc;

use crate::common::{options, trainjob, trainjob_spec, wait_for};

/// Runs `yaml` and returns the summary and every pod's log lines.
async fn run(
    yaml: &str,
    options: &LocalOptions,
    cancel_after: Option<Duration>,
) -> (RunSummary, BTreeMap<String, Vec<String>>, Vec<RunEvent>) {
    let cancel = async move {
        match cancel_after {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    run_until(yaml, options, cancel).await
}

/// Runs `yaml` until it ends or `cancel` resolves; the summary, every pod's log lines, every event.
async fn run_until(
    yaml: &str,
    options: &LocalOptions,
    cancel: impl std::future::Future<Output = ()>,
) -> (RunSummary, BTreeMap<String, Vec<String>>, Vec<RunEvent>) {
    let plan = local::prepare(yaml, &kubetrain_jobset::builtin::catalog(), options).expect("plan");
    let (summary, events) = execute_collecting(&plan, cancel).await;
    let mut logs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in &events {
        if let RunEvent::Log(l) = e {
            logs.entry(l.pod.clone()).or_default().push(l.line.clone());
        }
    }
    (summary, logs, events)
}

/// Executes `plan`, taking every event while it runs (the channel is bounded).
async fn execute_collecting(
    plan: &local::JobPlan,
    cancel: impl std::future::Future<Output = ()>,
) -> (RunSummary, Vec<RunEvent>) {
    let (tx, mut rx) = mpsc::channel(local::EVENT_BUFFER);
    let collect = tokio::spawn(async move {
        let mut events = Vec::new();
        while let Some(e) = rx.recv().await {
            events.push(e);
        }
        events
    });
    let summary = local::execute(plan, &tx, cancel).await;
    drop(tx);
    (summary, collect.await.unwrap())
}

/// Runs `yaml` in `dir` with `echo` standing in for `kubetrain`, so a pod prints its kubetrain arguments.
async fn run_with_echo_as_kubetrain(
    yaml: &str,
    dir: &std::path::Path,
) -> (RunSummary, BTreeMap<String, Vec<String>>) {
    let opts = LocalOptions {
        kubetrain_exe: Some("echo".into()),
        ..options(dir)
    };
    let (summary, logs, _) = run(yaml, &opts, None).await;
    (summary, logs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rank_sees_the_pet_env_of_its_pod() {
    let dir = tempfile::tempdir().unwrap();
    let script = "echo $PET_NNODES $PET_NPROC_PER_NODE $PET_NODE_RANK $JOB_COMPLETION_INDEX $HOSTNAME $PET_MASTER_ADDR $PET_MASTER_PORT";
    let (summary, logs, events) =
        run(&trainjob("envjob", 3, script), &options(dir.path()), None).await;
    assert_eq!(summary.status, JobStatus::Complete, "{summary:?}");
    assert_eq!(logs.len(), 3);
    let mut ports = Vec::new();
    for rank in 0..3 {
        let pod = format!("envjob-node-0-{rank}");
        let line = &logs[&pod][0];
        let fields: Vec<&str> = line.split(' ').collect();
        assert_eq!(
            &fields[..6],
            [
                "3",
                "1",
                &rank.to_string(),
                &rank.to_string(),
                &pod,
                "127.0.0.1"
            ],
            "{line}"
        );
        ports.push(fields[6].to_string());
    }
    // The declared trainer port 29500 is replaced by one free local port, the same for every rank.
    assert!(ports.iter().all(|p| p == &ports[0]), "{ports:?}");
    assert_ne!(ports[0], "29500");
    assert!(
        events.iter().any(
            |e| matches!(e, RunEvent::Notice(n) if n.contains("image") && n.contains("ignored"))
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ports_are_kept_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let opts = LocalOptions {
        remap_ports: false,
        ..options(dir.path())
    };
    let (summary, logs, _) = run(&trainjob("keep", 1, "echo $PET_MASTER_PORT"), &opts, None).await;
    assert_eq!(summary.status, JobStatus::Complete);
    assert_eq!(logs["keep-node-0-0"], ["29500"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_rank_fails_the_job_within_seconds_and_stops_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let script = "if [ $PET_NODE_RANK = 1 ]; then echo boom-$PET_NODE_RANK; exit 3; fi; sleep 60";
    // Rank 0 sleeps for a minute: "stopped by the runner" below shows it was not waited for.
    let (summary, _, _) = run(&trainjob("failjob", 2, script), &options(dir.path()), None).await;
    assert_eq!(summary.status, JobStatus::Failed);
    assert!(!summary.cancelled);
    let failed = summary.failed_pod().expect("a failed pod");
    assert_eq!(failed.name, "failjob-node-0-1");
    assert_eq!(failed.detail.as_deref(), Some("exit code 3"));
    assert_eq!(failed.log_tail, ["boom-1"]);
    assert!(
        summary.message.contains("failjob-node-0-1"),
        "{}",
        summary.message
    );
    let other = summary
        .pods
        .iter()
        .find(|p| p.name == "failjob-node-0-0")
        .unwrap();
    assert_eq!(other.phase, PodPhase::Failed);
    assert_eq!(other.detail.as_deref(), Some("stopped by the runner"));
}

/// Waits (polling, up to a minute) until `path` exists.
async fn until_exists(path: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The pid written to `path` by a process of the test.
fn pid_in(path: &std::path::Path) -> i32 {
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Whether `pid` has ended (gone, or a zombie nobody collected yet).
fn ended(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

/// Waits until `pid` has ended: the runner killed it, the kernel may take a moment. Gives up after 30 s,
/// well before the grandchildren's `sleep 600` would end by itself.
async fn until_ended(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ended(pid) {
        assert!(Instant::now() < deadline, "process {pid} outlived the run");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A script that starts a grandchild in the pod's process group and another in a session of its own (as
/// `setsid` daemons do), writes their pids to `<dir>/<rank>.group` and `<dir>/<rank>.escaped`, then runs
/// `rest`. (`$$$$` is the shell's `$$`: the command's `$$` escapes a `$`, as the kubelet's expansion.)
fn escaping(dir: &std::path::Path, rest: &str) -> String {
    let d = dir.display();
    format!(
        "sh -c 'echo $$$$ > {d}/$PET_NODE_RANK.group.tmp; mv {d}/$PET_NODE_RANK.group.tmp {d}/$PET_NODE_RANK.group; exec sleep 600' & \
         setsid sh -c 'echo $$$$ > {d}/$PET_NODE_RANK.escaped.tmp; mv {d}/$PET_NODE_RANK.escaped.tmp {d}/$PET_NODE_RANK.escaped; exec sleep 600' & \
         while [ ! -e {d}/$PET_NODE_RANK.group ] || [ ! -e {d}/$PET_NODE_RANK.escaped ]; do sleep 0.01; done; {rest}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_the_whole_process_tree_even_what_left_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let pids = tempfile::tempdir().unwrap();
    let script = escaping(pids.path(), "sleep 60");
    // Cancelled once every rank has started both grandchildren (an event, not a delay).
    let files: Vec<_> = (0..2)
        .flat_map(|r| ["group", "escaped"].map(|k| pids.path().join(format!("{r}.{k}"))))
        .collect();
    let cancel = {
        let files = files.clone();
        async move {
            for f in &files {
                until_exists(f).await;
            }
        }
    };
    let (summary, _, _) = run_until(
        &trainjob("cancel", 2, &script),
        &options(dir.path()),
        cancel,
    )
    .await;
    assert!(summary.cancelled);
    assert_eq!(summary.status, JobStatus::Failed);
    assert!(summary.pods.iter().all(|p| p.phase == PodPhase::Failed));
    for f in &files {
        until_ended(pid_in(f)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_succeeds_takes_its_setsid_children_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let pids = tempfile::tempdir().unwrap();
    // The container exits at once, leaving a grandchild in its group and one in its own session that
    // would sleep for ten minutes, holding the pod's output pipes open.
    let script = escaping(pids.path(), "echo leaving");
    let (summary, logs, _) = run(&trainjob("escape", 1, &script), &options(dir.path()), None).await;
    assert_eq!(summary.status, JobStatus::Complete, "{summary:?}");
    assert_eq!(logs["escape-node-0-0"], ["leaving"]);
    // The run is over: so is everything the pod started (the escaped sleep would run for ten minutes).
    for kind in ["group", "escaped"] {
        until_ended(pid_in(&pids.path().join(format!("0.{kind}")))).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_of_the_same_job_is_refused_while_the_first_is_planned_or_running() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = trainjob("twice", 1, "true");
    let catalog = kubetrain_jobset::builtin::catalog();
    let first = local::prepare(&yaml, &catalog, &options(dir.path())).expect("first");
    let second = local::prepare(&yaml, &catalog, &options(dir.path())).expect_err("second");
    let message = second.to_string();
    assert!(
        message.contains("TrainJob default/twice is already running on this machine")
            && message.contains(&format!("pid {}", std::process::id()))
            && message.contains("refused, not queued"),
        "{message}"
    );
    assert!(matches!(
        second,
        ClientError::Plan(PlanError::AlreadyRunning { .. })
    ));
    drop(first);
    local::prepare(&yaml, &catalog, &options(dir.path())).expect("once the first is over");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_run_gets_its_own_directory_by_default() {
    // A name of its own: default run directories live under $TMPDIR/kubetrain-runs-<uid>/default/<name>.
    let name = format!("own-dir-{}", std::process::id());
    let yaml = trainjob(&name, 1, "echo $PWD > /workspace/where");
    let catalog = kubetrain_jobset::builtin::catalog();
    let runs = local::plan::job_runs_dir("default", &name);
    let mut dirs = Vec::new();
    for _ in 0..2 {
        let plan = local::prepare(&yaml, &catalog, &LocalOptions::default()).expect("plan");
        assert!(
            plan.run_dir.starts_with(&runs),
            "{}",
            plan.run_dir.display()
        );
        assert!(plan.run_dir.ends_with(&plan.run_id));
        let (summary, _) = execute_collecting(&plan, std::future::pending()).await;
        assert_eq!(summary.status, JobStatus::Complete, "{summary:?}");
        assert!(plan.run_dir.join("workspace/where").exists());
        dirs.push(plan.run_dir.clone());
    }
    assert_ne!(dirs[0], dirs[1], "two runs shared a directory");
    let _ = std::fs::remove_dir_all(&runs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remapped_port_stays_taken_until_the_pods_start() {
    let dir = tempfile::tempdir().unwrap();
    let plan = local::prepare(
        &trainjob("ports", 2, "echo $PET_MASTER_PORT"),
        &kubetrain_jobset::builtin::catalog(),
        &options(dir.path()),
    )
    .expect("plan");
    let port = plan.ports.first().expect("a remapped port").port();
    // Below the kernel's ephemeral range: no outgoing connection can take it as its local port.
    let ephemeral_start: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768);
    if ephemeral_start >= 21_024 {
        assert!(port < ephemeral_start, "{port} is in the ephemeral range");
    }
    // Nobody else can be handed the port while the run waits to start ...
    assert!(std::net::TcpListener::bind(("127.0.0.1", port)).is_err());
    // ... and another run's reservations never include it.
    let other = kubetrain_client::local::reserve_port().unwrap();
    assert_ne!(other.port(), port);
    // The pods get it.
    let (summary, events) = execute_collecting(&plan, std::future::pending()).await;
    assert_eq!(summary.status, JobStatus::Complete, "{summary:?}");
    let mut printed = Vec::new();
    for e in events {
        if let RunEvent::Log(l) = e {
            printed.push(l.line);
        }
    }
    assert_eq!(printed, [port.to_string(), port.to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initializers_run_first_and_workspace_maps_to_the_run_dir() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: with-init, labels: {trainer.kubeflow.org/framework: torch}}
spec:
  mlPolicy: {numNodes: 1, torch: {}}
  template:
    spec:
      replicatedJobs:
        - name: dataset-initializer
          template:
            metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: dataset-initializer}}
            spec:
              template:
                spec:
                  containers:
                    - name: dataset-initializer
                      image: busybox
                      command: [sh, -c, "sleep 0.3; mkdir -p /workspace/dataset && echo ready > /workspace/dataset/marker"]
        - name: node
          dependsOn: [{name: dataset-initializer, status: Complete}]
          template:
            metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
            spec:
              template:
                spec:
                  containers:
                    - name: node
                      image: busybox
                      env:
                        - {name: DATA, value: /workspace/dataset/marker}
                        - name: JOBSET
                          valueFrom: {fieldRef: {fieldPath: "metadata.labels['jobset.sigs.k8s.io/jobset-name']"}}
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: initjob, namespace: default}
spec:
  runtimeRef: {name: with-init}
  trainer:
    numNodes: 2
    command: [sh, -c, "cat $DATA; echo $JOBSET"]
"#;
    let (summary, logs, _) = run(yaml, &options(dir.path()), None).await;
    assert_eq!(summary.status, JobStatus::Complete, "{summary:?}");
    for rank in 0..2 {
        assert_eq!(
            logs[&format!("initjob-node-0-{rank}")],
            ["ready", "initjob"]
        );
    }
    assert!(dir.path().join("workspace/dataset/marker").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubetrain_in_the_command_runs_the_given_executable() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: exejob}
spec:
  runtimeRef: {name: torch-distributed}
  trainer: {command: [kubetrain, hello, "$(PET_NODE_RANK)"]}
"#;
    let (summary, logs) = run_with_echo_as_kubetrain(yaml, dir.path()).await;
    assert_eq!(summary.status, JobStatus::Complete);
    assert_eq!(logs["exejob-node-0-0"], ["hello 0"]);
}

#[test]
fn plan_errors_name_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = kubetrain_jobset::builtin::catalog();
    let no_command = r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: nocmd}
spec: {runtimeRef: {name: torch-distributed}}
"#;
    match local::prepare(no_command, &catalog, &options(dir.path())) {
        Err(ClientError::Plan(PlanError::NoCommand { path })) => {
            assert_eq!(
                path,
                "spec.replicatedJobs[0].template.spec.template.spec.containers[0]"
            )
        }
        other => panic!("{other:?}"),
    }
    let bad_runtime = no_command.replace("torch-distributed", "no-such-runtime");
    let err = local::prepare(&bad_runtime, &catalog, &options(dir.path()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("no-such-runtime"), "{err}");
    let err = local::prepare("kind: Nothing", &catalog, &options(dir.path())).unwrap_err();
    assert!(matches!(err, ClientError::InvalidArgument(_)), "{err:?}");
}

#[test]
fn unknown_field_refs_and_dependency_cycles_are_refused_with_their_path() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = kubetrain_jobset::builtin::catalog();
    let runtime = |node_extra: &str, init_extra: &str| {
        format!(
            r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {{name: custom, labels: {{trainer.kubeflow.org/framework: torch}}}}
spec:
  mlPolicy: {{numNodes: 1, torch: {{}}}}
  template:
    spec:
      replicatedJobs:
        - name: dataset-initializer
          {init_extra}
          template:
            metadata: {{labels: {{trainer.kubeflow.org/trainjob-ancestor-step: dataset-initializer}}}}
            spec: {{template: {{spec: {{containers: [{{name: dataset-initializer, command: ["true"]}}]}}}}}}
        - name: node
          dependsOn: [{{name: dataset-initializer, status: Complete}}]
          template:
            metadata: {{labels: {{trainer.kubeflow.org/trainjob-ancestor-step: trainer}}}}
            spec:
              template:
                spec:
                  containers:
                    - name: node
                      command: ["true"]
                      {node_extra}
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {{name: custom-job}}
spec: {{runtimeRef: {{name: custom}}}}
"#
        )
    };
    let field = runtime(
        "env: [{name: X, valueFrom: {fieldRef: {fieldPath: status.phase}}}]",
        "",
    );
    match local::prepare(&field, &catalog, &options(dir.path())) {
        Err(ClientError::Plan(PlanError::Env { path, reason })) => {
            assert_eq!(
                path,
                "spec.replicatedJobs[1].template.spec.template.spec.containers[0].env[0]"
            );
            assert!(reason.contains("status.phase"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let cycle = runtime("", "dependsOn: [{name: node, status: Ready}]");
    match local::prepare(&cycle, &catalog, &options(dir.path())) {
        Err(ClientError::Plan(PlanError::DependsOn { reason, .. })) => {
            assert!(reason.contains("cycle"), "{reason}")
        }
        Err(ClientError::Invalid(errors)) => {
            assert!(errors.iter().any(|e| e.contains("dependsOn")), "{errors:?}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backend_follows_logs_lists_events_and_deletes() {
    use futures_util::StreamExt;
    use kubetrain_client::{LocalProcessBackend, LogOptions, TrainOptions, Trainer, TrainerClient};

    let dir = tempfile::tempdir().unwrap();
    let client = TrainerClient::new(LocalProcessBackend::new().with_runs_under(dir.path()));
    let slow = Trainer::command(["sh", "-c", "echo one; sleep 0.3; echo two"]);
    let options = TrainOptions {
        name: Some("slow".into()),
        ..TrainOptions::default()
    };
    let name = client
        .train_with(None, Some(&slow), None, &options)
        .await
        .unwrap();
    let again = client
        .train_with(None, Some(&slow), None, &options)
        .await
        .unwrap_err();
    assert!(matches!(again, ClientError::AlreadyExists(_)), "{again:?}");
    let follow = LogOptions {
        step: "node-0".into(),
        follow: true,
    };
    let lines: Vec<String> = client
        .get_job_logs(&name, &follow)
        .await
        .unwrap()
        .map(|l| l.unwrap())
        .collect()
        .await;
    assert_eq!(lines, ["one", "two"]);
    let job = wait_for(&client, &name, &[JobStatus::Complete]).await;
    assert_eq!(job.steps[0].status, "Succeeded");
    let reasons: Vec<String> = client
        .get_job_events(&name)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.reason)
        .collect();
    assert!(
        reasons.contains(&"Started".to_string()) && reasons.contains(&"Complete".to_string()),
        "{reasons:?}"
    );
    assert_eq!(
        client
            .list_jobs(Some("torch-distributed"))
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(client.list_jobs(Some("other")).await.unwrap().len(), 0);

    // Deleting a running job stops its processes.
    let forever = Trainer::command(["sleep", "60"]);
    let long = client
        .train_with(None, Some(&forever), None, &TrainOptions::default())
        .await
        .unwrap();
    wait_for(&client, &long, &[JobStatus::Running]).await;
    client.delete_job(&long).await.unwrap();
    assert!(matches!(
        client.get_job(&long).await,
        Err(ClientError::NotFound(_))
    ));
}

#[tokio::test]
async fn initializer_containers_without_a_command_run_kubetrain_init() {
    let dir = tempfile::tempdir().unwrap();
    // The built-in torchtune runtime's initializers, like upstream's, rely on their image's entrypoint.
    let yaml = r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: tune}
spec:
  runtimeRef: {name: torchtune-llama3.2-1b}
  initializer:
    dataset: {storageUri: "hf://tatsu-lab/alpaca"}
  trainer: {command: [kubetrain, train]}
"#;
    let (summary, logs) = run_with_echo_as_kubetrain(yaml, dir.path()).await;
    assert_eq!(summary.status, JobStatus::Complete, "{logs:#?}");
    assert_eq!(logs["tune-dataset-initializer-0-0"], ["init dataset"]);
    assert_eq!(logs["tune-model-initializer-0-0"], ["init model"]);
    assert_eq!(logs["tune-node-0-0"], ["train"]);
}

/// A line longer than [`local::LOG_PIECE_BYTES`] comes as pieces of at most that size, in order, all but
/// the last `continued`, cut between characters: joined, they give the line back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_line_comes_in_bounded_pieces_that_join_into_it() {
    let dir = tempfile::tempdir().unwrap();
    // One 'a', then 200,000 'é' (2 bytes each): every piece boundary of 64 KiB falls inside a character.
    let script = "printf a; yes é | head -n 200000 | tr -d '\\n'; echo; echo short";
    let yaml = trainjob("long-line", 1, script);
    let (summary, _, events) = run(&yaml, &options(dir.path()), None).await;
    assert_eq!(summary.status, JobStatus::Complete, "{summary:?}");
    let pieces: Vec<&local::LogLine> = events
        .iter()
        .filter_map(|e| match e {
            RunEvent::Log(l) if !l.stderr => Some(l),
            _ => None,
        })
        .collect();
    assert!(pieces.len() > 2, "{} pieces", pieces.len());
    let (last, first) = pieces.split_last().unwrap();
    assert_eq!(last.line, "short");
    assert!(!last.continued);
    let (end, middle) = first.split_last().unwrap();
    assert!(!end.continued);
    for p in middle {
        assert!(p.continued);
        assert!(p.line.len() <= local::LOG_PIECE_BYTES, "{}", p.line.len());
        assert!(!p.line.contains('\u{fffd}'), "a character was cut in two");
    }
    let joined: String = first.iter().map(|p| p.line.as_str()).collect();
    assert!(joined.starts_with('a'));
    assert_eq!(joined.len(), 1 + 400_000, "{}", &joined[..40]);
    assert!(joined[1..].chars().all(|c| c == 'é'));
}

/// A stop that comes while many pods are still to be started takes effect between two of them: no pod starts
/// after it (before, every pod of the replicated job was started first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_a_large_spawn_starts_no_more_pods() {
    let dir = tempfile::tempdir().unwrap();
    let plan = local::prepare(
        &trainjob("many", 300, "sleep 60"),
        &kubetrain_jobset::builtin::catalog(),
        &options(dir.path()),
    )
    .expect("plan");
    let start = Instant::now();
    // Already stopped when the run begins.
    let (summary, events) = execute_collecting(&plan, std::future::ready(())).await;
    assert!(summary.cancelled, "{summary:?}");
    let started = events
        .iter()
        .filter(|e| matches!(e, RunEvent::PodStarted { .. }))
        .count();
    assert_eq!(started, 0, "pods started after the stop");
    assert!(
        summary.pods.iter().all(|p| p.phase != PodPhase::Running),
        "{summary:?}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
}

/// KEP-2899's `activeDeadlineSeconds`, as the operator applies it: the run fails with upstream's message and
/// every pod is stopped; no cancel came, so the run is not `cancelled`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_active_deadline_stops_every_pod_and_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = trainjob_spec(
        "deadline",
        2,
        "sleep 60",
        serde_json::json!({"activeDeadlineSeconds": 1}),
    );
    let started = Instant::now();
    let (summary, _, _) = run(&yaml, &options(dir.path()), None).await;
    assert_eq!(summary.status, JobStatus::Failed, "{summary:?}");
    assert!(!summary.cancelled, "{summary:?}");
    assert!(
        summary
            .message
            .starts_with(local::DEADLINE_EXCEEDED_MESSAGE),
        "{}",
        summary.message
    );
    assert!(summary.pods.iter().all(|p| p.phase == PodPhase::Failed));
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "stopped at the deadline, not when the pods ended"
    );
}
