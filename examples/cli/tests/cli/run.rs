//! `kubetrain run` as a user runs it: the quick start on this machine, a failing rank, and concurrent runs
//! queueing for a small (declared) capacity.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{arg, command, kubetrain, quickstart, text};

/// A TrainJob `name` on torch-distributed whose trainer is `trainer` (a YAML flow mapping's content).
fn trainjob(name: &str, trainer: &str) -> String {
    format!(
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: {name}}}\nspec:\n  \
         runtimeRef: {{name: torch-distributed}}\n  trainer: {{{trainer}}}\n"
    )
}

/// Writes `yaml` to `dir/<file>` and returns the `kubetrain run` arguments for it, its run directory being
/// `dir/<file>.run`, followed by `extra`.
fn run_args(dir: &Path, file: &str, yaml: &str, extra: &[&str]) -> Vec<String> {
    let job = dir.join(file);
    std::fs::write(&job, yaml).unwrap();
    let run_dir = dir.join(format!("{file}.run"));
    let mut args: Vec<String> = ["run", "-f", arg(&job), "--run-dir", arg(&run_dir)]
        .map(String::from)
        .into();
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

/// Runs `yaml` with `kubetrain run` in a fresh temporary directory.
fn run_job(yaml: &str, extra: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let args = run_args(dir.path(), "job.yaml", yaml, extra);
    kubetrain(&args.iter().map(String::as_str).collect::<Vec<_>>(), None)
}

#[test]
fn quickstart_runs_every_rank_and_the_loss_goes_down() {
    let dir = tempfile::tempdir().unwrap();
    let out = kubetrain(
        &["run", "-f", &quickstart(), "--run-dir", arg(dir.path())],
        None,
    );
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
    let script =
        "if [ $PET_NODE_RANK = 1 ]; then echo fatal: rank 1 lost its data; exit 7; fi; sleep 60";
    let out = run_job(
        &trainjob(
            "failing",
            &format!("numNodes: 2, command: [sh, -c, {script:?}]"),
        ),
        &[],
    );
    let stdout = text(&out.stdout);
    // Rank 0 was stopped, not waited for (its sleep 60): an event in the output, not a wall-clock bound.
    assert!(
        stdout.contains("failing-node-0-0 | Failed (stopped by the runner)"),
        "{stdout}"
    );
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
    let out = run_job(
        &trainjob(
            "bad",
            "command: [\"true\"], env: [{name: PET_NODE_RANK, value: '0'}]",
        ),
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("spec.trainer.env"), "{stderr}");
    assert!(stderr.contains("PET_NODE_RANK"), "{stderr}");
}

#[test]
fn a_job_needing_gpus_this_machine_lacks_is_refused_with_kueues_reason() {
    // A declared capacity without GPUs, so the test holds on machines with GPUs too.
    let gpu = trainjob(
        "gpu",
        "numNodes: 2, command: [\"true\"], resourcesPerNode: {limits: {nvidia.com/gpu: 1}}",
    );
    let queue = tempfile::tempdir().unwrap();
    let out = run_job(
        &gpu,
        &["--capacity", "gpu=0", "--queue-dir", arg(queue.path())],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("cannot run on this machine"), "{stderr}");
    // The ML engineer's terms first, Kueue's reason second.
    assert!(
        stderr.contains(
            "cannot run on this machine: needs 2 GPUs (2 nodes × 1); this machine has 0 (Kueue: "
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("insufficient quota for nvidia.com/gpu"),
        "{stderr}"
    );
    assert!(text(&out.stdout).is_empty(), "nothing started");
}

#[test]
fn kubetrain_inside_a_shell_command_is_this_binary() {
    let out = run_job(
        &trainjob(
            "shell",
            "numNodes: 2, command: [sh, -c, \"kubetrain collective train-demo --steps 3\"]",
        ),
        &[],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("shell-node-0-0 | done: final loss"),
        "{stdout}"
    );
}

/// A one-pod job asking for 2 cores, running `script`, as `kubetrain run` arguments on a declared 2-core
/// machine whose queue ledger lives in `queue`.
fn two_core_run(dir: &Path, queue: &Path, name: &str, script: &str, extra: &[&str]) -> Vec<String> {
    let yaml = trainjob(
        name,
        &format!("command: [sh, -c, {script:?}], resourcesPerNode: {{requests: {{cpu: '2'}}}}"),
    );
    let mut more = vec!["--capacity", "cpu=2", "--queue-dir", arg(queue)];
    more.extend_from_slice(extra);
    run_args(dir, &format!("{name}.yaml"), &yaml, &more)
}

fn spawn(args: &[String]) -> Child {
    command()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubetrain starts")
}

/// Polls the files another process writes until `seen` holds, giving up after 120 s with "never saw `what`".
fn wait_until(what: &str, seen: impl Fn() -> bool) {
    let start = Instant::now();
    while !seen() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "never saw {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the queue ledger in `queue` satisfies `ready`.
fn wait_for_ledger(queue: &Path, what: &str, ready: impl Fn(&str) -> bool) {
    let ledger: PathBuf = queue.join("ledger.json");
    wait_until(what, || {
        std::fs::read_to_string(&ledger).is_ok_and(|l| ready(&l))
    });
}

#[test]
fn concurrent_runs_queue_for_the_declared_capacity() {
    let dir = tempfile::tempdir().unwrap();
    let queue = dir.path().join("queue");
    let release = dir.path().join("release");
    let marker = dir.path().join("first-done");
    // The first run holds the 2 cores until the test releases it.
    let hold = format!(
        "while [ ! -e {} ]; do sleep 0.05; done; touch {}",
        release.display(),
        marker.display()
    );
    let first = spawn(&two_core_run(dir.path(), &queue, "first", &hold, &[]));
    wait_for_ledger(&queue, "the first run admitted", |l| {
        l.contains("\"admitted\"")
    });

    // The second waits for the first, shows why, and starts once it is done.
    let check = format!("test -e {} && echo after-first", marker.display());
    let second = spawn(&two_core_run(dir.path(), &queue, "second", &check, &[]));
    wait_for_ledger(&queue, "the second run queued", |l| {
        l.contains("default/second")
    });
    // A third gives up quickly; a fourth is interrupted while waiting; a fifth skips the queue.
    let impatient = two_core_run(
        dir.path(),
        &queue,
        "impatient",
        "true",
        &["--queue-timeout", "300ms"],
    );
    let timed_out = kubetrain(
        &impatient.iter().map(String::as_str).collect::<Vec<_>>(),
        None,
    );
    let interrupted = spawn(&two_core_run(
        dir.path(),
        &queue,
        "interrupted",
        "true",
        &[],
    ));
    wait_for_ledger(&queue, "the interrupted run queued", |l| {
        l.contains("default/interrupted")
    });
    let sigint = Command::new("kill")
        .args(["-INT", &interrupted.id().to_string()])
        .status()
        .unwrap();
    assert!(sigint.success());
    let interrupted = interrupted.wait_with_output().unwrap();
    let unqueued = two_core_run(
        dir.path(),
        &queue,
        "unqueued",
        "echo started",
        &["--no-queue"],
    );
    let unqueued = kubetrain(
        &unqueued.iter().map(String::as_str).collect::<Vec<_>>(),
        None,
    );
    std::fs::write(&release, "").unwrap();

    let first = first.wait_with_output().unwrap();
    let second = second.wait_with_output().unwrap();
    assert!(first.status.success(), "{}", text(&first.stderr));
    let out = text(&second.stdout);
    assert!(second.status.success(), "{out}\n{}", text(&second.stderr));
    assert!(
        out.contains("Pending: couldn't assign flavors to pod set node: insufficient unused quota for cpu in flavor this-machine"),
        "{out}"
    );
    assert!(out.contains("(position 1 of "), "{out}");
    assert!(out.contains("admitted by the local queue after"), "{out}");
    assert!(out.contains("second-node-0-0 | after-first"), "{out}");
    assert!(out.find("Pending:") < out.find("running TrainJob"), "{out}");

    let (stdout, stderr) = (text(&timed_out.stdout), text(&timed_out.stderr));
    assert_eq!(timed_out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("TrainJob default/impatient was not admitted within"),
        "{stderr}"
    );
    assert!(stdout.contains("(position 2 of 2 waiting)"), "{stdout}");

    let stderr = text(&interrupted.stderr);
    assert_eq!(interrupted.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted while waiting in the local queue"));

    assert!(unqueued.status.success(), "{}", text(&unqueued.stderr));
    let stdout = text(&unqueued.stdout);
    assert!(stdout.contains("unqueued-node-0-0 | started") && !stdout.contains("Pending:"));

    // Every run ended: the ledger holds none of them.
    let ledger = std::fs::read_to_string(queue.join("ledger.json")).unwrap();
    assert!(!ledger.contains("default/"), "{ledger}");
}

#[test]
fn bad_queue_flags_are_refused_with_the_fix() {
    let table = [
        (vec!["--queue-timeout", "soon"], "not a duration"),
        (vec!["--queue-timeout", "5d"], "unknown unit"),
        (
            vec!["--capacity", "cpu=lots"],
            "not a whole number of cores",
        ),
        (vec!["--capacity", "disk=1"], "use cpu, memory or gpu"),
        (vec!["--capacity", "memory=12X"], "memory"),
        (vec!["--queueing-strategy", "LIFO"], "StrictFIFO"),
    ];
    for (flags, want) in table {
        let out = run_job(&trainjob("flags", "command: [\"true\"]"), &flags);
        assert_eq!(out.status.code(), Some(2), "{flags:?}");
        let err = text(&out.stderr);
        assert!(err.contains(want), "{flags:?}: {err}");
    }
}

#[test]
fn an_unusable_queue_directory_is_an_error_that_names_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_dir = dir.path().join("file");
    std::fs::write(&not_a_dir, "").unwrap();
    let yaml = trainjob("blocked", "command: [\"true\"]");
    let out = run_job(&yaml, &["--queue-dir", arg(&not_a_dir.join("queue"))]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("creating the queue directory"), "{err}");
    assert!(
        err.contains("--queue-dir") && err.contains("--no-queue"),
        "{err}"
    );
    assert!(text(&out.stdout).is_empty(), "nothing started");
}

#[test]
fn a_second_run_of_the_same_job_is_refused_and_the_first_says_where_its_files_are() {
    let dir = tempfile::tempdir().unwrap();
    let release = dir.path().join("release");
    let started = dir.path().join("started");
    let hold = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.05; done; echo released",
        started.display(),
        release.display()
    );
    let args = run_args(
        dir.path(),
        "job.yaml",
        &trainjob("busy", &format!("command: [sh, -c, {hold:?}]")),
        &["--ignore-capacity"],
    );
    let first = spawn(&args);
    // Wait for the first run's pod to be up (an event: the file it writes).
    wait_until("the first run's pod start", || started.exists());
    let second = kubetrain(&args.iter().map(String::as_str).collect::<Vec<_>>(), None);
    let stderr = text(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("TrainJob default/busy is already running on this machine")
            && stderr.contains(&format!("pid {}", first.id())),
        "{stderr}"
    );
    std::fs::write(&release, "").unwrap();
    let first = first.wait_with_output().unwrap();
    let stdout = text(&first.stdout);
    assert!(first.status.success(), "{stdout}");
    let run_dir = dir.path().join("job.yaml.run");
    assert!(
        stdout.contains(&format!("run directory {}", run_dir.display()))
            && stdout.contains(&format!(
                "the pods' /workspace is {}",
                run_dir.join("workspace").display()
            )),
        "{stdout}"
    );
}

#[test]
fn a_daemon_that_left_its_pod_does_not_keep_the_run_going() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("daemon.pid");
    // The container exits at once; its daemon (own session, stdout still the pod's pipe) would sleep 600 s.
    let script = format!(
        "setsid sh -c 'echo $$$$ > {p}.tmp; mv {p}.tmp {p}; exec sleep 600' & \
         while [ ! -e {p} ]; do sleep 0.01; done; echo parent-done",
        p = pid_file.display()
    );
    let out = run_job(
        &trainjob("daemon", &format!("command: [sh, -c, {script:?}]")),
        &["--ignore-capacity"],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("TrainJob daemon Complete"), "{stdout}");
    // `kubetrain run` has exited (the output is complete): the daemon did not outlive it.
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let alive = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
        .ok()
        .and_then(|stat| {
            stat.rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().next())
                .map(|state| state != "Z" && state != "X")
        })
        .unwrap_or(false);
    assert!(!alive, "the daemon (pid {}) outlived the run", pid.trim());
}

#[test]
fn zero_nodes_is_refused_with_validates_warning_first_and_nothing_created() {
    let dir = tempfile::tempdir().unwrap();
    let args = run_args(
        dir.path(),
        "job.yaml",
        &trainjob("empty", "numNodes: 0, command: [\"true\"]"),
        &[],
    );
    let out = kubetrain(&args.iter().map(String::as_str).collect::<Vec<_>>(), None);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    // `validate`'s warning first, then the refusal in the TrainJob's words (not Kueue's pod-set count).
    let warning = stderr
        .find("numNodes is 0: the job runs no trainer pods")
        .expect("validate's warning");
    let error = stderr
        .find("error: TrainJob empty: spec.trainer.numNodes is 0")
        .expect("the refusal");
    assert!(warning < error, "{stderr}");
    assert!(!stderr.contains("podSets"), "{stderr}");
    assert!(text(&out.stdout).is_empty(), "nothing else printed");
    assert!(!dir.path().join("job.yaml.run").exists(), "nothing created");
}

#[test]
fn a_trainjob_without_a_command_is_refused_by_its_own_field_and_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let job = tmp.path().join("job.yaml");
    std::fs::write(&job, trainjob("nocmd", "numNodes: 1")).unwrap();
    let out = command()
        .args(["run", "-f", arg(&job)])
        .env("TMPDIR", tmp.path())
        .env_remove("KUBETRAIN_RUNS_DIR")
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: TrainJob nocmd: spec.trainer.command: required to run locally"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("replicatedJobs"),
        "the JobSet's path: {stderr}"
    );
    // No runs tree entry: nothing that `delete --local` would have to remove.
    let left: Vec<PathBuf> = walk(tmp.path())
        .into_iter()
        .filter(|p| p.components().any(|c| c.as_os_str() == "nocmd"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Every path under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

#[test]
fn more_pods_than_the_machine_can_run_are_refused_at_once_with_the_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let args = run_args(
        dir.path(),
        "job.yaml",
        &trainjob("huge", "numNodes: 100000, command: [\"true\"]"),
        &["--capacity", "cpu=2,memory=4Gi"],
    );
    let start = Instant::now();
    let out = kubetrain(&args.iter().map(String::as_str).collect::<Vec<_>>(), None);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: TrainJob huge is too large to run on this machine: 100000 pods would need 100000 processes, more than 128 (64 per core, 2 cores)")
            && stderr.contains("more than the 4096 MiB this machine has")
            && stderr.contains("use --force"),
        "{stderr}"
    );
    assert!(text(&out.stdout).is_empty());
    assert!(!dir.path().join("job.yaml.run").exists(), "nothing created");
    // Refused before planning: a generous bound, far below what planning 100,000 pods takes.
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    // The limit counts the processes per pod too, and --force lets a job past it.
    let out = run_job(
        &trainjob(
            "wide",
            "numNodes: 2, numProcPerNode: 100, command: [\"true\"]",
        ),
        &["--capacity", "cpu=2", "--ignore-capacity"],
    );
    assert!(
        text(&out.stderr).contains("2 pods would need 200 processes, more than 128"),
        "{}",
        text(&out.stderr)
    );
    let out = run_job(
        &trainjob(
            "wide",
            "numNodes: 2, numProcPerNode: 100, command: [\"true\"]",
        ),
        &["--capacity", "cpu=2", "--ignore-capacity", "--force"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn processes_start_in_the_directory_run_was_started_from_or_workdir() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(project.join("train.sh"), "echo trained from $PWD\n").unwrap();
    let job = dir.path().join("job.yaml");
    std::fs::write(&job, trainjob("rel", "command: [sh, train.sh]")).unwrap();
    let run = |cwd: &Path, extra: &[&str]| {
        let run_dir = dir.path().join(format!("run{}", extra.len()));
        command()
            .args([
                "run",
                "-f",
                arg(&job),
                "--ignore-capacity",
                "--run-dir",
                arg(&run_dir),
            ])
            .args(extra)
            .current_dir(cwd)
            .output()
            .unwrap()
    };
    // From the project: ./train.sh is found, as in a shell there.
    let out = run(&project, &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains(&format!(
            "rel-node-0-0 | trained from {}",
            project.display()
        )),
        "{stdout}"
    );
    // --workdir says where instead.
    let out = run(dir.path(), &["--workdir", arg(&project)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // From elsewhere the pod fails, and the hint names where it ran and how to change it.
    let out = run(dir.path(), &["--workdir", arg(dir.path()), "--no-queue"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "hint: the processes of rel-node-0-0 started in {}. train.sh does not exist there.",
            dir.path().display()
        )) && stderr.contains("--workdir DIR"),
        "{stderr}"
    );
}

/// The `status` of the record in `run_dir`, if there is one yet.
fn recorded_status(run_dir: &Path) -> Option<String> {
    let bytes = std::fs::read(run_dir.join("run.json")).ok()?;
    let record: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    Some(record["status"].as_str()?.to_owned())
}

/// Waits (bounded, as a failure guard) for `child` to exit.
fn wait_exit(child: &mut Child, what: &str) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{what}: kubetrain run did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `signal` (`TERM`, `HUP`, ...) to `pid` with kill(1).
fn send(signal: &str, pid: u32) {
    let ok = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{signal} {pid}");
}

#[test]
fn a_reader_that_stops_early_ends_the_view_not_the_job() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    // Far more than a pipe holds, so most of it is written after the reader has gone.
    let args = run_args(
        dir.path(),
        "job.yaml",
        &trainjob("headed", "command: [sh, -c, \"seq 1 100000; echo last\"]"),
        &["--ignore-capacity"],
    );
    let mut child = command()
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // `kubetrain run ... | head -1`.
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(
        first.starts_with("running TrainJob default/headed"),
        "{first}"
    );
    let status = wait_exit(&mut child, "closed stdout");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let run_dir = dir.path().join("job.yaml.run");
    assert_eq!(recorded_status(&run_dir).as_deref(), Some("Complete"));
    // Every line is in the pod's log, also those the terminal never got.
    let log = std::fs::read_to_string(run_dir.join("logs/headed-node-0-0.log")).unwrap();
    assert_eq!(log.lines().count(), 100_001);
    assert!(log.ends_with("100000\nlast\n"));
}

#[test]
fn a_stdout_nobody_reads_neither_stalls_the_job_nor_a_stop() {
    let dir = tempfile::tempdir().unwrap();
    // 1. The job completes and is recorded Complete while nobody reads the output.
    let args = run_args(
        dir.path(),
        "done.yaml",
        &trainjob("unread", "command: [sh, -c, \"seq 1 200000; echo last\"]"),
        &["--ignore-capacity"],
    );
    let mut child = command()
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let run_dir = dir.path().join("done.yaml.run");
    wait_until("the unread run recorded Complete", || {
        recorded_status(&run_dir).as_deref() == Some("Complete")
    });
    let log = std::fs::read_to_string(run_dir.join("logs/unread-node-0-0.log")).unwrap();
    assert!(log.ends_with("200000\nlast\n"));
    // Only the output is left: SIGTERM ends the wait for a reader.
    send("TERM", child.id());
    let status = wait_exit(&mut child, "unread, completed");
    assert_eq!(status.code(), Some(0), "the job's status");
    drop(child);

    // 2. SIGTERM stops a running job whose output nobody reads, and the record says so.
    let args = run_args(
        dir.path(),
        "stop.yaml",
        &trainjob(
            "stalled",
            "command: [sh, -c, \"seq 1 200000; echo written; sleep 600\"]",
        ),
        &["--ignore-capacity"],
    );
    let mut child = command()
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let run_dir = dir.path().join("stop.yaml.run");
    let log = run_dir.join("logs/stalled-node-0-0.log");
    wait_until("every line in the stalled run's log", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.ends_with("written\n"))
    });
    send("TERM", child.id());
    let status = wait_exit(&mut child, "unread, stopped");
    assert_eq!(status.code(), Some(130));
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(record["status"], "Failed");
    assert_eq!(record["message"], "cancelled: every pod was stopped");
}

#[test]
fn a_hangup_ends_the_view_and_the_run_goes_on_to_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let release = dir.path().join("release");
    let script = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.05; done; echo after the hangup",
        started.display(),
        release.display()
    );
    let args = run_args(
        dir.path(),
        "job.yaml",
        &trainjob("hup", &format!("command: [sh, -c, {script:?}]")),
        &["--ignore-capacity"],
    );
    let mut child = spawn(&args);
    wait_until("the pod's start", || started.exists());
    // The terminal closes (SIGHUP to the foreground process group: the runner; the pods have their own).
    send("HUP", child.id());
    std::fs::write(&release, "").unwrap();
    let status = wait_exit(&mut child, "after SIGHUP");
    assert_eq!(
        status.code(),
        Some(0),
        "the job's status, not killed by SIGHUP"
    );
    let run_dir = dir.path().join("job.yaml.run");
    assert_eq!(recorded_status(&run_dir).as_deref(), Some("Complete"));
    let log = std::fs::read_to_string(run_dir.join("logs/hup-node-0-0.log")).unwrap();
    assert!(log.contains("after the hangup"), "{log}");

    // After a hangup, `kubetrain delete NAME --local` still stops the run cleanly (SIGTERM to the runner).
    let tmp = tempfile::tempdir().unwrap();
    let started = tmp.path().join("started");
    let script = format!("touch {}; sleep 600", started.display());
    let job = tmp.path().join("job.yaml");
    std::fs::write(
        &job,
        trainjob("hup2", &format!("command: [sh, -c, {script:?}]")),
    )
    .unwrap();
    let local = |cmd: &mut Command| {
        cmd.env("TMPDIR", tmp.path())
            .env_remove("KUBETRAIN_RUNS_DIR")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
    };
    let mut run = command();
    run.args(["run", "-f", arg(&job), "--ignore-capacity"]);
    local(&mut run);
    let mut child = run.spawn().unwrap();
    wait_until("the second pod's start", || started.exists());
    send("HUP", child.id());
    let mut delete = command();
    delete.args(["delete", "hup2", "--local"]);
    local(&mut delete);
    let deleted = delete.output().unwrap();
    assert!(deleted.status.success(), "{}", text(&deleted.stderr));
    assert_eq!(
        wait_exit(&mut child, "deleted after SIGHUP").code(),
        Some(130),
        "stopped as Ctrl-C stops it"
    );
}

#[test]
fn detach_returns_once_the_pods_run_and_a_second_detach_is_refused_with_the_holder() {
    let tmp = tempfile::tempdir().unwrap();
    let job = tmp.path().join("job.yaml");
    std::fs::write(
        &job,
        trainjob("twice", "command: [sh, -c, \"echo up; sleep 600\"]"),
    )
    .unwrap();
    let local = |args: &[&str]| {
        command()
            .args(args)
            .env("TMPDIR", tmp.path())
            .env_remove("KUBETRAIN_RUNS_DIR")
            .output()
            .unwrap()
    };
    let detach = ["run", "-f", arg(&job), "--detach", "--ignore-capacity"];
    let first = local(&detach);
    let stdout = text(&first.stdout);
    assert!(first.status.success(), "{stdout}\n{}", text(&first.stderr));
    assert!(stdout.contains("its pods started (1 of 1)"), "{stdout}");
    // What it said is so: the record reads Running right after it returned.
    let get = local(&["get", "twice", "--local", "-o", "json"]);
    let record: serde_json::Value = serde_json::from_slice(&get.stdout).unwrap();
    assert_eq!(record["status"], "Running", "{record}");
    let second = local(&detach);
    let stderr = text(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("TrainJob default/twice is already running on this machine"),
        "{stderr}"
    );
    let pid = stdout
        .split(", pid ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .unwrap();
    assert!(
        stderr.contains(&format!("pid {pid}")),
        "the holder: {stderr}"
    );
    let deleted = local(&["delete", "twice", "--local"]);
    assert!(deleted.status.success(), "{}", text(&deleted.stderr));
    let gone = !Path::new(&format!("/proc/{pid}")).exists()
        || std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        });
    assert!(gone, "the background run {pid} outlived delete");
}

#[test]
fn the_training_codes_progress_is_shown_and_the_run_is_kept() {
    // train-demo reports through the run's loopback status endpoint (KUBEFLOW_TRAINER_SERVER_*).
    let dir = tempfile::tempdir().unwrap();
    let out = kubetrain(
        &[
            "run",
            "-f",
            &quickstart(),
            "--run-dir",
            arg(dir.path()),
            "--ignore-capacity",
        ],
        None,
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    // Not a terminal: plain lines, the last report at 100% with no time left.
    let progress: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("progress: "))
        .collect();
    assert!(
        progress
            .last()
            .is_some_and(|l| l.starts_with("progress: [####################] 100%  ETA 0s  loss=")),
        "{progress:?}"
    );
    assert!(
        !stdout.contains('\r'),
        "no terminal control characters in a pipe"
    );
    assert!(
        stdout.contains("\nlast progress report: 100% done, about 0 s left; loss="),
        "{stdout}"
    );
    // The record and the logs per pod, for `kubetrain get|logs --local`.
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("run.json")).unwrap()).unwrap();
    assert_eq!(record["status"], "Complete");
    assert_eq!(record["trainerStatus"]["progressPercentage"], 100);
    let log = std::fs::read_to_string(dir.path().join("logs/quickstart-node-0-0.log")).unwrap();
    assert!(log.contains("train-demo: final progress reported"), "{log}");
}

/// The peak resident memory (`VmHWM`, KiB) of `kubetrain run` with one pod running `script`, read once every
/// log line is in the pod's log file (the pod then waits for a release file, so the runner is still there
/// to be read), with its stdout read as a terminal would; and the log file's size.
fn peak_rss_kib(name: &str, script: &str) -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let done = dir.path().join("done");
    let release = dir.path().join("release");
    let script = format!(
        "{script}; echo END-OF-LOG; touch {}; while [ ! -e {} ]; do sleep 0.05; done",
        done.display(),
        release.display()
    );
    let args = run_args(
        dir.path(),
        "job.yaml",
        &trainjob(name, &format!("command: [sh, -c, {script:?}]")),
        &["--ignore-capacity", "--progress-every", "3600"],
    );
    let mut child = spawn(&args);
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let log = dir
        .path()
        .join(format!("job.yaml.run/logs/{name}-node-0-0.log"));
    // The end marker is the last line the pod writes: once it is in the file, every byte before it is.
    let ends = |path: &Path| -> bool {
        use std::io::{Read, Seek, SeekFrom};
        let Ok(mut f) = std::fs::File::open(path) else {
            return false;
        };
        let mut tail = [0u8; 11];
        f.seek(SeekFrom::End(-11)).is_ok()
            && f.read_exact(&mut tail).is_ok()
            && &tail == b"END-OF-LOG\n"
    };
    let start = Instant::now();
    while !(done.exists() && ends(&log)) {
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "{name}: the log never ended"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmHWM");
    let size = std::fs::metadata(&log).unwrap().len();
    std::fs::write(&release, "").unwrap();
    assert!(wait_exit(&mut child, name).success());
    reader.join().unwrap().unwrap();
    (hwm, size)
}

/// The most a large log may add to the runner's peak memory over a small one.
const LOG_MEMORY_BOUND_KIB: u64 = 64 * 1024;

/// `kubetrain run`'s memory does not grow with the pods' log volume: lines of a 1 GB log, or one 300 MB
/// line, cost less than 64 MiB more than 1 MB of log (before: the whole backlog was held, 2.2 GB of RSS for
/// 1.2 GB of log, 1.2 GB for one 300 MB line). The file gets every byte, a long line kept whole. About 15 s
/// on 2 cores (debug build); `--nocapture` prints the figures.
#[test]
fn a_gigabyte_of_log_costs_no_more_memory_than_a_megabyte() {
    let lines = |bytes: u64| format!("head -c {bytes} /dev/zero | tr '\\0' x | fold -w 999");
    let (small, small_size) = peak_rss_kib("small", &lines(1_000_000));
    // fold ends the last, partial, line with no newline: END-OF-LOG joins it.
    assert_eq!(small_size, 1_000_000 + 1_000_000 / 999 + 11);
    let (large, large_size) = peak_rss_kib("large", &lines(1_000_000_000));
    assert_eq!(large_size, 1_000_000_000 + 1_000_000_000 / 999 + 11);
    let (long, long_size) = peak_rss_kib("long", "head -c 300000000 /dev/zero | tr '\\0' x; echo");
    eprintln!(
        "peak RSS of kubetrain run: 1 MB of log {small} KiB; 1 GB of log {large} KiB; one 300 MB line {long} KiB"
    );
    assert!(
        large < small + LOG_MEMORY_BOUND_KIB,
        "1 GB of log: peak {large} KiB, 1 MB: {small} KiB"
    );
    assert!(
        long < small + LOG_MEMORY_BOUND_KIB,
        "one 300 MB line: peak {long} KiB, 1 MB of lines: {small} KiB"
    );
    // One line in the file, as the pod wrote it.
    assert_eq!(long_size, 300_000_000 + 1 + 11);
}

#[test]
fn validates_warnings_come_first_and_once() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: ClusterTrainingRuntime\nmetadata:\n  name: old-rt\n  \
        labels: {trainer.kubeflow.org/support: deprecated}\nspec:\n  mlPolicy: {numNodes: 1, torch: {}}\n  template:\n    \
        spec:\n      replicatedJobs:\n      - name: node\n        template:\n          metadata: {labels: \
        {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}\n          spec:\n            template:\n              \
        spec:\n                containers:\n                - {name: node, image: x}\n---\n\
        apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: old}\nspec:\n  \
        runtimeRef: {name: old-rt}\n  trainer: {command: [echo, trained]}\n";
    let args = run_args(dir.path(), "job.yaml", yaml, &["--ignore-capacity"]);
    // stdout and stderr in one file, as a terminal shows them.
    let both = std::fs::File::create(dir.path().join("out")).unwrap();
    let status = command()
        .args(&args)
        .stdout(both.try_clone().unwrap())
        .stderr(both)
        .status()
        .unwrap();
    let out = std::fs::read_to_string(dir.path().join("out")).unwrap();
    assert!(status.success(), "{out}");
    // What `validate` says (the runtime's warning and the TrainJob's), before anything else, and only once.
    let leading: Vec<&str> = out
        .lines()
        .take_while(|l| l.starts_with("Warning: "))
        .collect();
    assert!(
        leading.iter().any(|l| l.starts_with(
            "Warning: TrainJob/old: spec.runtimeRef: Referenced ClusterTrainingRuntime \"old-rt\" is deprecated"
        )),
        "{out}"
    );
    assert_eq!(
        out.matches("Referenced ClusterTrainingRuntime").count(),
        1,
        "{out}"
    );
    assert!(out.contains("old-node-0-0 | trained"), "{out}");
}
