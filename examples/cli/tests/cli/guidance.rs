//! A CLI that guides (issue 18, items 7–9): hints for misspelled fields, invalid runtimes named as such,
//! `run` refusing what it cannot run with the reason, `-f` as kubectl reads it, quiet broken pipes, durations,
//! aligned tables. Outputs the issue spells out are asserted exactly.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;

use crate::common::{arg, command, kubetrain, text, write};

const HEADER: &str = "apiVersion: trainer.kubeflow.org/v1alpha1\n";

fn trainjob(name: &str, spec: &str) -> String {
    format!("{HEADER}kind: TrainJob\nmetadata: {{name: {name}}}\nspec:\n{spec}\n")
}

/// A ClusterTrainingRuntime `name` whose node container has `container` (YAML flow mapping entries).
fn runtime(name: &str, container: &str) -> String {
    format!(
        "{HEADER}kind: ClusterTrainingRuntime\nmetadata: {{name: {name}}}\nspec:\n  mlPolicy: {{numNodes: 1, torch: {{}}}}\n  template:\n    spec:\n      replicatedJobs:\n      - name: node\n        template:\n          metadata:\n            labels: {{trainer.kubeflow.org/trainjob-ancestor-step: trainer}}\n          spec:\n            template:\n              spec:\n                containers:\n                - {{name: node, image: busybox, {container}}}\n"
    )
}

#[test]
fn misspelled_fields_get_the_known_name() {
    let job = trainjob(
        "typo",
        "  runtimeRef: {name: torch-distributed}\n  trainer: {numNode: 2, comand: [python]}",
    );
    let out = kubetrain(&["validate", "-f", "-"], Some(&job));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "TrainJob/typo: spec.trainer.comand: unknown field \"comand\"; did you mean \"command\"?\n\
         TrainJob/typo: spec.trainer.numNode: unknown field \"numNode\"; did you mean \"numNodes\"?\n"
    );
}

#[test]
fn an_invalid_runtime_in_the_same_file_is_reported_as_invalid_not_missing() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "job.yaml",
        &format!(
            "{}---\n{}",
            runtime("my-torch", "comand: [python]"),
            trainjob("uses-it", "  runtimeRef: {name: my-torch}")
        ),
    );
    let expected = format!(
        "ClusterTrainingRuntime/my-torch: spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].comand: unknown field \"comand\"; did you mean \"command\"?\n\
         TrainJob/uses-it: spec.runtimeRef: ClusterTrainingRuntime \"my-torch\" of {0} is invalid (see its errors); fix it and the TrainJob is checked against it\n",
        file.display()
    );
    let validate = kubetrain(&["validate", "-f", arg(&file)], None);
    assert_eq!(validate.status.code(), Some(1));
    assert_eq!(text(&validate.stderr), expected);

    // `run` lists the same findings, then says nothing ran; no "not found".
    let run = kubetrain(&["run", "-f", arg(&file)], None);
    assert_eq!(run.status.code(), Some(1));
    assert_eq!(
        text(&run.stderr),
        format!(
            "{expected}error: {}: 2 errors above; nothing was run (`kubetrain validate` shows the same)\n",
            file.display()
        )
    );
    assert!(text(&run.stdout).is_empty(), "{}", text(&run.stdout));

    // `render` says the same about the TrainJob.
    let render = kubetrain(&["render", "-f", arg(&file)], None);
    assert_eq!(render.status.code(), Some(1));
    assert_eq!(text(&render.stderr), expected);

    // A runtime named like a built-in one is not silently replaced by the built-in.
    let shadow = write(
        dir.path(),
        "shadow.yaml",
        &format!(
            "{}---\n{}",
            runtime("torch-distributed", "comand: [python]"),
            trainjob("uses-it", "  runtimeRef: {name: torch-distributed}")
        ),
    );
    let out = kubetrain(&["validate", "-f", arg(&shadow)], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("ClusterTrainingRuntime \"torch-distributed\" of "),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn run_lists_every_field_error_as_validate_does() {
    let job = trainjob(
        "bad",
        "  runtimeRef: {name: torch-distributed}\n  trainer: {numNodes: -1, numProcPerNode: 0}",
    );
    let validate = kubetrain(&["validate", "-f", "-"], Some(&job));
    let run = kubetrain(&["run", "-f", "-"], Some(&job));
    assert_eq!(run.status.code(), Some(1));
    let findings = text(&validate.stderr);
    assert_eq!(findings.lines().count(), 2, "{findings}");
    assert_eq!(
        text(&run.stderr),
        format!(
            "{findings}error: <stdin>: 2 errors above; nothing was run (`kubetrain validate` shows the same)\n"
        )
    );
}

#[test]
fn run_of_a_runtime_file_names_the_file_and_what_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "runtime.yaml",
        &format!(
            "{}---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: team}}\n",
            runtime("mine", "command: [python]")
        ),
    );
    let out = kubetrain(&["run", "-f", arg(&file)], None);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!(
            "error: {} holds no TrainJob (found: ClusterTrainingRuntime/mine, Namespace/team); kubetrain run needs one: give the TrainJob with -f, and runtimes with -f or --runtime\n",
            file.display()
        )
    );
    let empty = write(dir.path(), "empty.yaml", "# nothing yet\n");
    let out = kubetrain(&["run", "-f", arg(&empty)], None);
    assert!(
        text(&out.stderr).contains("holds no TrainJob (found: no documents)"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_second_trainjob_in_a_run_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let spec = "  runtimeRef: {name: torch-distributed}\n  trainer: {command: [\"true\"]}";
    let file = write(
        dir.path(),
        "two.yaml",
        &format!(
            "{}---\n{}",
            trainjob("first", spec),
            trainjob("second", spec)
        ),
    );
    let out = kubetrain(&["run", "-f", arg(&file)], None);
    assert_eq!(out.status.code(), Some(1));
    let f = file.display();
    assert_eq!(
        text(&out.stderr),
        format!(
            "error: 2 TrainJobs given (first in {f}, second in {f}); kubetrain run runs one TrainJob per run: give each its own file\n"
        )
    );
}

#[test]
fn filename_takes_directories_and_repeats() {
    let dir = tempfile::tempdir().unwrap();
    let spec = "  runtimeRef: {name: torch-distributed}";
    write(dir.path(), "b.yaml", &trainjob("b", spec));
    write(dir.path(), "a.yml", &trainjob("a", spec));
    write(dir.path(), "notes.txt", "not a manifest");
    let extra = tempfile::tempdir().unwrap();
    let c = write(extra.path(), "c.json", &trainjob("c", spec));
    let out = kubetrain(&["validate", "-f", arg(dir.path()), "-f", arg(&c)], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "TrainJob/a valid\nTrainJob/b valid\nTrainJob/c valid\n"
    );

    // render reads them in the same order.
    let out = kubetrain(
        &[
            "render",
            "--filename",
            arg(dir.path()),
            "-f",
            arg(&c),
            "-o",
            "json",
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let objects: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = objects
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b", "c"]);

    let empty = tempfile::tempdir().unwrap();
    let out = kubetrain(&["validate", "-f", arg(empty.path())], None);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!(
            "error: {}: the directory holds no .yaml, .yml or .json files\n",
            empty.path().display()
        )
    );
}

#[test]
fn yaml_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "broken.yaml",
        &format!(
            "{}---\nspec: [unclosed\n",
            trainjob("ok", "  runtimeRef: {name: torch-distributed}")
        ),
    );
    let prefix = format!(
        "{}: invalid YAML: document 2 (from line 6): ",
        file.display()
    );
    for command in ["validate", "render", "run"] {
        let out = kubetrain(&[command, "-f", arg(&file)], None);
        assert_eq!(out.status.code(), Some(1), "{command}");
        let stderr = text(&out.stderr);
        assert!(
            stderr
                .lines()
                .next()
                .is_some_and(|l| l.starts_with(&prefix)),
            "{command}: {stderr}"
        );
        assert!(!stderr.contains("<input>"), "{command}: {stderr}");
    }
    let out = kubetrain(&["validate", "-f", "-"], Some("spec: [unclosed\n"));
    assert!(
        text(&out.stderr).starts_with("<stdin>: invalid YAML: document 1 (from line 1): "),
        "{}",
        text(&out.stderr)
    );
    let out = kubetrain(&["queue", "simulate", "-f", arg(&file)], None);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains(&file.display().to_string()), "{stderr}");
    assert!(!stderr.contains("<input>"), "{stderr}");
}

/// Reads one line of `args`' stdout, closes the pipe and waits: the process must end without a word.
fn stop_reading_after_one_line(args: &[&str], stdin: Option<String>) {
    let mut child = command()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubetrain runs");
    let mut input = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        if let Some(text) = stdin {
            // The process may stop reading once its stdout is closed; a write error here is fine.
            let _ = input.write_all(text.as_bytes());
        }
    });
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert!(!first.is_empty(), "{args:?} printed nothing");
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    assert_eq!(text(&out.stderr), "", "{args:?}");
    assert_eq!(out.status.code(), Some(141), "{args:?}");
}

#[test]
fn broken_pipes_exit_quietly() {
    stop_reading_after_one_line(&["crd"], None);
    stop_reading_after_one_line(&["crd", "-o", "json"], None);
    // `validate` prints with println!: 5,000 lines are more than a pipe holds.
    let jobs: Vec<String> = (0..5000)
        .map(|i| {
            trainjob(
                &format!("job-{i}"),
                "  runtimeRef: {name: torch-distributed}",
            )
        })
        .collect();
    stop_reading_after_one_line(&["validate", "-f", "-"], Some(jobs.join("---\n")));
    stop_reading_after_one_line(&["render", "-f", "-"], Some(jobs[..300].join("---\n")));
}

#[test]
fn help_lists_every_subcommand() {
    let out = kubetrain(&["--help"], None);
    assert!(out.status.success());
    let help = text(&out.stdout);
    assert!(
        help.starts_with("Kubeflow Trainer V2 in Rust: check, render and run TrainJobs, on this machine or on a cluster\n"),
        "{help}"
    );
    let listed: Vec<&str> = help
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for command in [
        "crd",
        "validate",
        "render",
        "queue",
        "collective",
        "init",
        "run",
        "submit",
        "get",
        "list",
        "logs",
        "wait",
        "delete",
        "runtimes",
        "help",
    ] {
        assert!(listed.contains(&command), "{command} missing from\n{help}");
    }
    // Every listed subcommand has its own help with a one-line summary.
    for command in listed.iter().filter(|c| **c != "help") {
        let out = kubetrain(&[command, "--help"], None);
        assert!(out.status.success(), "{command} --help");
        let summary = help
            .lines()
            .find(|l| l.split_whitespace().next() == Some(command))
            .unwrap();
        assert!(
            summary.split_whitespace().count() > 1,
            "{command} has no summary in --help: {summary:?}"
        );
    }
}

#[test]
fn durations_accept_units_everywhere() {
    // A bad duration is refused by the parser with the accepted forms, before anything connects or runs.
    for args in [
        &["wait", "job", "--timeout", "5d"][..],
        &["wait", "job", "--interval", "soon"][..],
        &["run", "-f", "x.yaml", "--queue-timeout", "5d"][..],
        &["run", "-f", "x.yaml", "--progress-every", "5d"][..],
        &["collective", "bench", "--timeout", "5d"][..],
        &["collective", "bench", "--timeout-secs", "forever"][..],
    ] {
        let out = kubetrain(args, None);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("(use ms, s, m or h, e.g. 30s, 5m, 1h30m)")
                || stderr.contains("is not a duration (use e.g. 30s, 5m, 1h30m or 500ms"),
            "{args:?}: {stderr}"
        );
    }
}

const QUEUES: &str = r#"apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default-flavor}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: a-cluster-queue-with-a-rather-long-name}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default-flavor
      resources: [{name: cpu, nominalQuota: 4}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team, namespace: ns}
spec: {clusterQueue: a-cluster-queue-with-a-rather-long-name}
"#;

fn workload(name: &str, arrival: &str, runtime: &str, cpu: u32) -> String {
    format!(
        "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata:\n  name: {name}\n  namespace: ns\n  annotations: {{kubetrain.dev/arrival: \"{arrival}\", kubetrain.dev/runtime: \"{runtime}\", kubetrain.dev/class: train}}\nspec:\n  queueName: team\n  podSets:\n  - name: main\n    count: 1\n    template:\n      spec:\n        containers:\n        - name: c\n          resources: {{requests: {{cpu: \"{cpu}\"}}}}\n"
    )
}

#[test]
fn queue_simulate_aligns_long_names_prints_durations_for_people_and_names_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = format!(
        "{QUEUES}{}{}{}",
        workload("first", "0s", "90m", 4),
        workload(
            "second-with-a-much-longer-name-than-the-column",
            "1m",
            "30m",
            4
        ),
        workload("never-fits", "2m", "1m", 8),
    );
    let file = write(dir.path(), "scenario.yaml", &scenario);
    // --file is the old spelling; it stays an alias of --filename.
    for flag in ["--filename", "--file", "-f"] {
        let out = kubetrain(&["queue", "simulate", flag, arg(&file)], None);
        assert!(out.status.success(), "{flag}: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        let lines: Vec<&str> = stdout.lines().collect();
        // Every column as wide as its widest cell; the pending workload shows the ClusterQueue it waits in.
        assert_eq!(
            lines[..4],
            [
                "WORKLOAD                                            STATE      CLUSTERQUEUE                              MESSAGE",
                "ns/first                                            Finished   a-cluster-queue-with-a-rather-long-name   Job finished successfully",
                "ns/second-with-a-much-longer-name-than-the-column   Finished   a-cluster-queue-with-a-rather-long-name   Job finished successfully",
                "ns/never-fits                                       Pending    a-cluster-queue-with-a-rather-long-name   couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default-flavor, previously considered podsets requests (0) + current podset request (8) > maximum capacity (4)",
            ],
            "{stdout}"
        );
        let row = |key: &str| {
            *lines
                .iter()
                .find(|l| l.starts_with(key))
                .unwrap_or_else(|| panic!("no {key} in\n{stdout}"))
        };
        let figures = row("cycles ");
        assert!(
            figures.contains("   simulated 2h 00m   preemptions 0"),
            "{figures}"
        );
        assert_eq!(
            row("CLASS "),
            "CLASS   WORKLOADS   ADMITTED   WAIT MEAN   P50   P90      MAX"
        );
        assert!(
            row("train ").ends_with("   44m 30s   0ms   0ms   1h 29m"),
            "waits are durations: {stdout}"
        );
        assert!(!stdout.contains("(ms)"), "{stdout}");
    }
}

#[test]
fn run_summary_aligns_long_pod_names() {
    let name = "a-trainjob-name-long-enough-to-overflow-forty-columns";
    let job = trainjob(
        name,
        "  runtimeRef: {name: torch-distributed}\n  trainer: {numNodes: 1, command: [\"true\"]}",
    );
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run");
    let out = kubetrain(
        &[
            "run",
            "-f",
            "-",
            "--ignore-capacity",
            "--run-dir",
            arg(&run_dir),
        ],
        Some(&job),
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let pod = format!("{name}-node-0-0");
    let header = stdout
        .lines()
        .find(|l| l.starts_with("POD "))
        .unwrap_or_else(|| panic!("no summary in\n{stdout}"));
    let row = stdout
        .lines()
        .skip_while(|l| !l.starts_with("POD "))
        .find(|l| l.starts_with(&format!("{pod} ")))
        .unwrap_or_else(|| panic!("no row of {pod} in\n{stdout}"));
    // Every column starts where its header starts, however long the pod name.
    assert_eq!(header.find("PHASE"), Some(pod.len() + 3), "{header}");
    assert_eq!(
        row.find("Succeeded"),
        header.find("PHASE"),
        "{header}\n{row}"
    );
    assert_eq!(
        row.find("exit code 0"),
        header.find("EXIT"),
        "{header}\n{row}"
    );
    let duration = header.find("DURATION").unwrap();
    assert!(row[duration..].ends_with('s'), "{header}\n{row}");
    assert_eq!(&row[duration - 3..duration], "   ", "{header}\n{row}");
}
