//! Ranks as separate processes: every collective on 1..=8 processes, rendezvous through each environment
//! flavour, a killed rank failing the others, and an elastic group re-forming without a killed node.
//!
//! `harness = false`: the same binary is the driver and, with `KUBETRAIN_TEST_WORKER` set, one rank.

#[path = "collective/common.rs"]
mod common;

use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use kubetrain_collective::cpu::{CpuCommunicator, CpuOptions, Transport};
use kubetrain_collective::rendezvous::{ElasticAgent, ElasticSettings, RankEnv, free_port};
use kubetrain_collective::{CollectiveError, Communicator, ReduceOp};

const WORKER: &str = "KUBETRAIN_TEST_WORKER";
const RENDEZVOUS_VARS: [&str; 22] = [
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
    "JAX_NUM_PROCESSES",
    "JAX_PROCESS_ID",
    "JAX_COORDINATOR_ADDRESS",
    "WORLD_SIZE",
    "RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "TORCHELASTIC_RUN_ID",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "OMPI_MCA_orte_default_hostfile",
];

fn main() -> ExitCode {
    if let Ok(scenario) = std::env::var(WORKER) {
        return worker(&scenario);
    }
    // libtest's command line (`--list`, `--exact`, `--ignored`, filters), so nextest and IDEs can drive it.
    let mut args = libtest_mimic::Arguments::from_args();
    // Every test starts up to 8 rank processes with timeouts: one test at a time unless asked otherwise.
    args.test_threads.get_or_insert(1);
    let mpirun = mpirun_found();
    let tests: [(&str, fn(), bool); 6] = [
        (
            "every_op_and_type_on_1_to_8_processes",
            every_op_and_type_on_1_to_8_processes,
            false,
        ),
        (
            "rendezvous_through_each_env_flavour",
            rendezvous_through_each_env_flavour,
            false,
        ),
        (
            "killed_rank_fails_the_others_within_the_timeout",
            killed_rank_fails_the_others,
            false,
        ),
        (
            "an_elastic_group_shrinks_when_a_node_is_killed_and_finishes",
            elastic_group_shrinks,
            false,
        ),
        (
            "inconsistent_env_is_refused",
            inconsistent_env_is_refused,
            false,
        ),
        // Ignored (not passed vacuously) without Open MPI; `--ignored` runs it and then it fails.
        (
            "ranks_started_by_mpirun_meet_at_the_hostfile_host",
            ranks_started_by_mpirun,
            !mpirun,
        ),
    ];
    let trials = tests
        .into_iter()
        .map(|(name, test, ignored)| {
            libtest_mimic::Trial::test(name, move || {
                std::panic::catch_unwind(test).map_err(|panic| {
                    let message = panic
                        .downcast_ref::<String>()
                        .map(String::as_str)
                        .or_else(|| panic.downcast_ref::<&str>().copied())
                        .unwrap_or("panicked");
                    message.into()
                })
            })
            .with_ignored_flag(ignored)
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}

fn mpirun_found() -> bool {
    Command::new("mpirun")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn worker_options() -> CpuOptions {
    let timeout_ms = std::env::var("TEST_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    CpuOptions {
        timeout: Duration::from_millis(timeout_ms),
        ..common::test_options(Transport::Auto)
    }
}

/// One rank: forms the communicator from the environment and runs the scenario.
fn worker(scenario: &str) -> ExitCode {
    if scenario == "elastic" {
        return elastic_worker();
    }
    let env = match RankEnv::from_env() {
        Ok(env) => env,
        Err(e) => {
            println!("env-error: {e}");
            return ExitCode::from(3);
        }
    };
    let mut comm = match CpuCommunicator::init(&env, None, worker_options()) {
        Ok(c) => c,
        Err(e) => {
            println!("init-error: {e}");
            return ExitCode::from(4);
        }
    };
    match scenario {
        "all" => {
            common::check_all_types(&mut comm);
            println!("ok rank={} world={}", comm.rank(), comm.world_size());
        }
        "sum" => {
            let mut v = [comm.rank() as i64 + 1];
            comm.all_reduce_in_place(&mut v, ReduceOp::Sum).unwrap();
            println!(
                "ok rank={} world={} sum={} local={}",
                env.rank, env.world_size, v[0], env.local_rank
            );
        }
        "stall" => {
            let mut v = [1u8];
            comm.barrier().unwrap();
            if comm.rank() == 1 {
                // Tells the driver it passed the barrier, then waits to be killed.
                println!("stalling");
                let _ = std::io::Write::flush(&mut std::io::stdout());
                std::thread::sleep(Duration::from_secs(60));
            }
            let start = Instant::now();
            let err = comm.all_reduce_in_place(&mut v, ReduceOp::Sum).unwrap_err();
            let kind = match err {
                CollectiveError::PeerLost { .. } => "lost",
                CollectiveError::Aborted { .. } => "aborted",
                CollectiveError::Timeout { .. } => "timeout",
                _ => "other",
            };
            println!(
                "failed kind={kind} ms={} err={err}",
                start.elapsed().as_millis()
            );
        }
        other => panic!("unknown scenario {other}"),
    }
    ExitCode::SUCCESS
}

/// One node of an elastic job: meets the others at the elastic rendezvous and trains the demo with
/// checkpoints in `TEST_CKPT_DIR`, round after round, until it is done.
fn elastic_worker() -> ExitCode {
    use kubetrain_collective::checkpoint::DirStore;
    use kubetrain_collective::demo::{self, CheckpointOptions, DemoConfig, DemoOptions};
    let settings = ElasticSettings::from_env()
        .unwrap()
        .expect("an elastic environment");
    let store = DirStore::new(std::env::var("TEST_CKPT_DIR").unwrap());
    let mut agent = ElasticAgent::start(settings, None).unwrap();
    let say = |line: String| {
        println!("{line}");
        let _ = std::io::Write::flush(&mut std::io::stdout());
    };
    loop {
        let Some(mut round) = agent.next_round().unwrap() else {
            say("finished by the others".into());
            return ExitCode::SUCCESS;
        };
        say(format!(
            "round {} rank {} of {}",
            round.generation, round.node_rank, round.nnodes
        ));
        let env = round.rank_env();
        let mut comm = match CpuCommunicator::init(&env, round.store.take(), worker_options()) {
            Ok(c) => c,
            Err(e) => {
                say(format!("init-error {e}"));
                continue;
            }
        };
        let changed = || agent.membership_changed();
        let options = DemoOptions {
            checkpoint: Some(CheckpointOptions {
                store: &store,
                every: 5,
                keep: 0,
            }),
            step_delay: Duration::from_millis(10),
            interrupt: Some(&changed),
            ..DemoOptions::default()
        };
        let cfg = DemoConfig {
            samples: 1200,
            steps: 80,
            ..DemoConfig::default()
        };
        match demo::train(&mut comm, &cfg, &options, |_| {}) {
            Ok(report) if !report.interrupted => {
                drop(comm);
                agent.finish().unwrap();
                say(format!(
                    "done round={} world={} first_step={}",
                    round.generation, round.nnodes, report.first_step
                ));
                return ExitCode::SUCCESS;
            }
            Ok(_) => say("interrupted".into()),
            Err(e) => say(format!("left the round: {e}")),
        }
    }
}

fn spawn(scenario: &str, vars: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    for v in RENDEZVOUS_VARS {
        cmd.env_remove(v);
    }
    cmd.env(WORKER, scenario)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

fn finish(child: Child) -> (bool, String) {
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn generic_vars(rank: usize, n: usize, port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("WORLD_SIZE", n.to_string()),
        ("RANK", rank.to_string()),
        ("MASTER_ADDR", "127.0.0.1".into()),
        ("MASTER_PORT", port.to_string()),
    ]
}

fn every_op_and_type_on_1_to_8_processes() {
    for n in 1..=8 {
        let port = free_port().unwrap();
        let children: Vec<Child> = (0..n)
            .map(|r| spawn("all", &generic_vars(r, n, port)))
            .collect();
        for (r, child) in children.into_iter().enumerate() {
            let (ok, text) = finish(child);
            assert!(
                ok && text.contains(&format!("ok rank={r} world={n}")),
                "n={n} rank {r}:\n{text}"
            );
        }
    }
}

fn rendezvous_through_each_env_flavour() {
    // torch: 2 nodes × 2 processes, ranks node_rank × 2 + LOCAL_RANK.
    let port = free_port().unwrap();
    let mut children = Vec::new();
    for node in 0..2 {
        for local in 0..2 {
            let vars = vec![
                ("PET_NNODES", "2".to_string()),
                ("PET_NPROC_PER_NODE", "2".into()),
                ("PET_NODE_RANK", node.to_string()),
                ("PET_MASTER_ADDR", "localhost".into()),
                ("PET_MASTER_PORT", port.to_string()),
                ("LOCAL_RANK", local.to_string()),
            ];
            children.push((node * 2 + local, local, spawn("sum", &vars)));
        }
    }
    for (rank, local, child) in children {
        let (ok, text) = finish(child);
        assert!(
            ok && text.contains(&format!("ok rank={rank} world=4 sum=10 local={local}")),
            "torch rank {rank}:\n{text}"
        );
    }
    // jax: 3 processes.
    let port = free_port().unwrap();
    let children: Vec<Child> = (0..3)
        .map(|r| {
            spawn(
                "sum",
                &[
                    ("JAX_NUM_PROCESSES", "3".to_string()),
                    ("JAX_PROCESS_ID", r.to_string()),
                    ("JAX_COORDINATOR_ADDRESS", format!("127.0.0.1:{port}")),
                ],
            )
        })
        .collect();
    for (r, child) in children.into_iter().enumerate() {
        let (ok, text) = finish(child);
        assert!(
            ok && text.contains(&format!("ok rank={r} world=3 sum=6")),
            "jax rank {r}:\n{text}"
        );
    }
    // generic: 2 processes.
    let port = free_port().unwrap();
    let children: Vec<Child> = (0..2)
        .map(|r| spawn("sum", &generic_vars(r, 2, port)))
        .collect();
    for (r, child) in children.into_iter().enumerate() {
        let (ok, text) = finish(child);
        assert!(
            ok && text.contains(&format!("ok rank={r} world=2 sum=3")),
            "generic rank {r}:\n{text}"
        );
    }
}

/// Open MPI's `mpirun` starts the ranks (as the MPI runtime's launcher does) with a hostfile shaped like the
/// renderer's; the ranks read `OMPI_COMM_WORLD_*` and meet at the hostfile's first host. Ignored without
/// `mpirun` (Debian: `apt-get install openmpi-bin`).
fn ranks_started_by_mpirun() {
    assert!(
        mpirun_found(),
        "mpirun not found: install Open MPI (apt-get install openmpi-bin) to run this test"
    );
    let dir = std::env::temp_dir().join(format!("kubetrain-mpi-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let hostfile = dir.join("hostfile");
    std::fs::write(&hostfile, "# like <job>-mpi-hostfile\nlocalhost slots=3\n").unwrap();
    let mut cmd = Command::new("mpirun");
    for v in RENDEZVOUS_VARS {
        cmd.env_remove(v);
    }
    // mpirun forwards OMPI_MCA_* to the ranks and uses the hostfile itself; -x exports the rest.
    cmd.args([
        "--allow-run-as-root",
        "-n",
        "3",
        "-x",
        WORKER,
        "-x",
        "MASTER_PORT",
    ])
    .arg(std::env::current_exe().unwrap())
    .env("OMPI_MCA_orte_default_hostfile", &hostfile)
    .env(WORKER, "sum")
    .env("MASTER_PORT", free_port().unwrap().to_string())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let (ok, text) = finish(cmd.spawn().unwrap());
    let _ = std::fs::remove_dir_all(&dir);
    for r in 0..3 {
        assert!(
            ok && text.contains(&format!("ok rank={r} world=3 sum=6 local={r}")),
            "mpirun rank {r}:\n{text}"
        );
    }
}

fn killed_rank_fails_the_others() {
    let n = 3;
    let port = free_port().unwrap();
    let timeout_ms = 1500u64;
    let mut children: Vec<Child> = (0..n)
        .map(|r| {
            let mut vars = generic_vars(r, n, port);
            vars.push(("TEST_TIMEOUT_MS", timeout_ms.to_string()));
            spawn("stall", &vars)
        })
        .collect();
    // Once rank 1 has passed the barrier (it says so), the others are in or entering the all-reduce:
    // kill rank 1 then.
    let stdout = children[1].stdout.take().unwrap();
    let passed = std::io::BufRead::lines(std::io::BufReader::new(stdout))
        .map_while(Result::ok)
        .any(|line| line == "stalling");
    assert!(passed, "rank 1 never passed the barrier");
    children[1].kill().unwrap();
    let _ = children[1].wait();
    for (r, child) in children.into_iter().enumerate() {
        if r == 1 {
            continue;
        }
        let (ok, text) = finish(child);
        assert!(ok && text.contains("failed kind="), "rank {r}:\n{text}");
        let ms: u64 = text
            .split("ms=")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .unwrap()
            .parse()
            .unwrap();
        // The killed peer is noticed through its pid (shm) or the closed connection, not by waiting out
        // the timeout: the error says so whatever the machine's load (a wall-clock bound would not).
        assert!(
            text.contains("kind=lost") || text.contains("kind=aborted"),
            "rank {r} timed out instead of noticing the kill:\n{text}"
        );
        println!("  rank {r} noticed after {ms} ms (timeout {timeout_ms} ms)");
        println!("  rank {r}: {}", text.trim());
    }
}

fn elastic_group_shrinks() {
    let port = free_port().unwrap();
    let ckpt = tempfile::tempdir().unwrap();
    let mut children: Vec<Child> = (0..3)
        .map(|r| {
            let vars = [
                ("PET_NNODES", "2:3".to_string()),
                ("PET_NPROC_PER_NODE", "1".into()),
                ("PET_NODE_RANK", r.to_string()),
                ("PET_MASTER_ADDR", "127.0.0.1".into()),
                ("PET_MASTER_PORT", port.to_string()),
                ("PET_RDZV_ID", "elastic-test".into()),
                (
                    "PET_RDZV_CONF",
                    "join_timeout=60,last_call_timeout=0.3,keep_alive_interval=0.1".into(),
                ),
                ("TEST_CKPT_DIR", ckpt.path().display().to_string()),
                ("TEST_TIMEOUT_MS", "10000".into()),
            ];
            spawn("elastic", &vars)
        })
        .collect();
    // Node 2 (not the store's host, node 0) is lost once the group of 3 has formed and trained: after the
    // first checkpoint is written.
    let stdout = children[2].stdout.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok);
    assert!(
        lines.any(|l| l.starts_with("round 1 ") && l.ends_with(" of 3")),
        "node 2 never joined a round of 3"
    );
    let first = ckpt.path().join("ckpt-0000000005.ktckpt");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !first.exists() {
        assert!(Instant::now() < deadline, "no checkpoint was written");
        std::thread::sleep(Duration::from_millis(10));
    }
    children[2].kill().unwrap();
    let _ = children[2].wait();
    for (r, child) in children.into_iter().enumerate().take(2) {
        let (ok, text) = finish(child);
        assert!(ok, "node {r}:\n{text}");
        let done = text
            .lines()
            .find(|l| l.starts_with("done "))
            .unwrap_or_else(|| panic!("node {r} never finished:\n{text}"));
        // The survivors re-formed at 2 nodes (>= min) and resumed from a checkpoint.
        assert!(done.contains(" world=2 "), "node {r}: {done}\n{text}");
        let first_step: u64 = done.rsplit("first_step=").next().unwrap().parse().unwrap();
        assert!(first_step >= 5, "node {r} did not resume: {done}");
        println!(
            "  node {r}: {}",
            text.lines()
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(" | ")
        );
    }
}

fn inconsistent_env_is_refused() {
    let mut vars = generic_vars(0, 2, free_port().unwrap());
    vars.push(("JAX_NUM_PROCESSES", "2".into()));
    vars.push(("JAX_PROCESS_ID", "1".into()));
    vars.push(("JAX_COORDINATOR_ADDRESS", "127.0.0.1:1".into()));
    let (ok, text) = finish(spawn("sum", &vars));
    assert!(
        !ok && text.contains("env-error: inconsistent rendezvous environment: RANK=0"),
        "{text}"
    );
    let (ok, text) = finish(spawn("sum", &[("PET_NNODES", "2".into())]));
    assert!(
        !ok && text.contains("PET_NPROC_PER_NODE is not set"),
        "{text}"
    );
}
