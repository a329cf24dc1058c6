//! `kubetrain run` of an elastic job (issue 32): three train-demo nodes meet at the elastic (c10d)
//! rendezvous; one node's process is killed (by its identity, never a bare pid) after the first checkpoint;
//! the run goes on with two nodes, which re-form the group, resume from the checkpoint and complete.
//!
//! The runtime spells out the env the torch plugin renders for `mlPolicy.torch.elasticPolicy`
//! (`PET_NNODES=2:3`, `PET_RDZV_*`, no `PET_NODE_RANK`) in a plain runtime, so the test does not depend on
//! the renderer.

use std::io::BufRead;
use std::process::Stdio;

use kubetrain_client::local::ProcessIdentity;

use crate::common::{command, write};

fn job(dir: &std::path::Path) -> String {
    let d = dir.display();
    format!(
        r#"apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata: {{name: elastic-plain, namespace: default}}
spec:
  mlPolicy: {{numNodes: 3}}
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            metadata:
              labels: {{trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
            spec:
              template:
                spec:
                  containers:
                    - name: node
                      image: busybox
                      ports: [{{containerPort: 29500}}]
                      env:
                        - {{name: PET_NNODES, value: "2:3"}}
                        - {{name: PET_NPROC_PER_NODE, value: "1"}}
                        - {{name: PET_RDZV_BACKEND, value: c10d}}
                        - {{name: PET_RDZV_ENDPOINT, value: "el-node-0-0.el:29500"}}
                        - {{name: PET_RDZV_ID, value: el}}
                        - {{name: PET_RDZV_CONF, value: "last_call_timeout=1,keep_alive_interval=0.2"}}
                        - {{name: PET_MASTER_ADDR, value: el-node-0-0.el}}
                        - {{name: PET_MASTER_PORT, value: "29500"}}
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {{name: el, namespace: default}}
spec:
  runtimeRef: {{name: elastic-plain, kind: TrainingRuntime, apiGroup: trainer.kubeflow.org}}
  trainer:
    command:
      - sh
      - -c
      - >-
        echo $$$$ > {d}/pid-$JOB_COMPLETION_INDEX.tmp && mv {d}/pid-$JOB_COMPLETION_INDEX.tmp {d}/pid-$JOB_COMPLETION_INDEX;
        exec kubetrain collective train-demo --steps 200 --samples 1200 --checkpoint-dir {d}/ck
        --checkpoint-every 10 --step-delay-ms 20 --timeout 30
"#
    )
}

#[test]
fn killing_one_node_of_an_elastic_run_shrinks_it_and_it_completes() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "job.yaml", &job(dir.path()));
    let mut child = command()
        .args(["run", "-f", file.to_str().unwrap()])
        .env("KUBETRAIN_RUNS_DIR", dir.path().join("runs"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let errors = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut std::io::BufReader::new(stderr), &mut s);
        s
    });
    let mut out = String::new();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    // The group of three has trained and written its first checkpoint: node 1 is lost now (node 0, the
    // Indexed Job's pod 0, hosts the rendezvous store).
    for line in lines.by_ref().map_while(Result::ok) {
        out.push_str(&line);
        out.push('\n');
        // Whichever node is rank 0 of the round writes it.
        if line.contains(" | checkpoint: wrote") {
            break;
        }
    }
    assert!(out.contains("node rank"), "the nodes never met:\n{out}");
    let pid: u32 = std::fs::read_to_string(dir.path().join("pid-1"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let node1 = ProcessIdentity::of(pid).expect("node 1 runs");
    assert!(node1.kill(), "node 1's process was still the one started");
    for line in lines.map_while(Result::ok) {
        out.push_str(&line);
        out.push('\n');
    }
    let status = child.wait().unwrap();
    let err = errors.join().unwrap();
    let all = format!("{out}{err}");
    assert!(status.success(), "{all}");
    assert!(all.contains("TrainJob el Complete"), "{all}");
    assert!(
        all.contains(
            "restart 1: disruption: pod el-node-0-1 was killed by signal 9 (not by the runner: a lost node or an \
             evicted pod); the elastic job goes on with 2 node(s), the failure budget is not consumed"
        ),
        "{all}"
    );
    // The survivors met again at two nodes and resumed from a checkpoint.
    assert!(all.contains("node rank 1 of 2 nodes (restart 1)"), "{all}");
    assert!(all.contains(" | resumed from checkpoint"), "{all}");
    assert!(
        all.contains("kubetrain.dev/resumed-from-step="),
        "the resumed step was reported:\n{all}"
    );
}
