//! One replica type's pod template made into a runtime's, and the TrainJob's trainer taken out of it.

use k8s_openapi::api::batch::v1::{
    PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement, PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec, PodTemplateSpec};
use kubetrain_api::Trainer;
use kubetrain_api::constants::NODE;

use crate::MigrateError;
use crate::kinds::{self, World};
use crate::report::MigrationReport;
use crate::v1::{ReplicaSpec, RestartPolicy, V1Job, V1Kind};

/// One replica type's pod template, made into a runtime's: the main container named `node`, the restart
/// policy on the pod, the retryable exit codes of `ExitCode` as a pod failure policy.
pub(super) struct Role {
    /// The v1 path of the replica spec, for the report.
    pub(super) path: String,
    /// The pod template, the main container named `node`.
    pub(super) template: PodTemplateSpec,
    /// The main container's index.
    main: usize,
    /// `ExitCode`'s permanent exit codes, for the Job.
    pub(super) pod_failure_policy: Option<PodFailurePolicy>,
}

impl Role {
    pub(super) fn build(
        kind: V1Kind,
        spec: &ReplicaSpec,
        path: &str,
        main_name: Option<&str>,
        fail: &dyn Fn(&str, &str) -> MigrateError,
        report: &mut MigrationReport,
    ) -> Result<Role, MigrateError> {
        let mut template = spec.template.clone();
        let pod = template.spec.get_or_insert_with(PodSpec::default);
        if pod.containers.is_empty() {
            return Err(fail(
                &format!("{path}.template.spec.containers"),
                "a replica needs at least one container",
            ));
        }
        let wanted = main_name.unwrap_or(kind.default_container());
        let main = pod
            .containers
            .iter()
            .position(|c| c.name == wanted)
            .unwrap_or(0);
        let container = &mut pod.containers[main];
        let container_path = format!("{path}.template.spec.containers[{main}]");
        if container.image.as_deref().unwrap_or("").is_empty() {
            return Err(fail(
                &format!("{container_path}.image"),
                "the main container needs an image",
            ));
        }
        if container.name != NODE {
            report.changed(
                format!("{container_path}.name"),
                format!(
                    "container {:?} is named \"node\": the runtime's trainer container (TrainJob overrides apply to it)",
                    container.name
                ),
            );
            container.name = NODE.to_owned();
        }
        if pod.containers.iter().filter(|c| c.name == NODE).count() > 1 {
            return Err(fail(
                &format!("{path}.template.spec.containers"),
                "another container is named \"node\", the name the trainer container takes; rename it",
            ));
        }
        let policy = spec.restart_policy.unwrap_or(kind.default_restart_policy());
        let pod_failure_policy =
            restart_policy(policy, spec.restart_policy.is_some(), path, pod, report);
        Ok(Role {
            path: path.to_owned(),
            template,
            main,
            pod_failure_policy,
        })
    }

    pub(super) fn pod(&mut self) -> &mut PodSpec {
        self.template.spec.get_or_insert_with(PodSpec::default)
    }

    /// The main container (always there once built).
    pub(super) fn main(&self) -> Option<&Container> {
        self.template.spec.as_ref()?.containers.get(self.main)
    }

    fn main_mut(&mut self) -> Option<&mut Container> {
        let main = self.main;
        self.pod().containers.get_mut(main)
    }

    /// Appends `vars` to the main container's env (after the user's, as the v1 operator appended its own).
    pub(super) fn append_env(&mut self, vars: Vec<EnvVar>) {
        if let Some(container) = self.main_mut() {
            container.env.get_or_insert_with(Vec::new).extend(vars);
        }
    }
}

/// Sets the pod's restart policy from v1's; `ExitCode` also gives the pod failure policy that fails the job
/// on permanent exit codes (1-127), as v1 did, and retries the rest.
fn restart_policy(
    policy: RestartPolicy,
    explicit: bool,
    path: &str,
    pod: &mut PodSpec,
    report: &mut MigrationReport,
) -> Option<PodFailurePolicy> {
    let (pod_policy, note) = match policy {
        RestartPolicy::OnFailure | RestartPolicy::Never => (policy.as_str(), None),
        RestartPolicy::Always => (
            "OnFailure",
            Some("Always -> the pod's OnFailure: Kubernetes Jobs do not allow Always; a container that exits 0 is done".to_owned()),
        ),
        RestartPolicy::ExitCode => (
            "Never",
            Some(
                "ExitCode -> the pod's Never plus a Job podFailurePolicy: exit codes 1-127 of container node fail the \
                 job at once, others recreate the pod (within the Job's backoffLimit), as v1 did"
                    .to_owned(),
            ),
        ),
    };
    let template_policy = pod.restart_policy.replace(pod_policy.to_owned());
    if template_policy.as_deref().is_some_and(|p| p != pod_policy) {
        report.changed(
            format!("{path}.template.spec.restartPolicy"),
            format!("v1 replaced it with the replica's restart policy; the runtime's pod has {pod_policy}"),
        );
    }
    let path = format!("{path}.restartPolicy");
    match note {
        Some(note) => report.changed(path, note),
        None if explicit => report.exact(
            path,
            format!("the runtime's pod restartPolicy {pod_policy}"),
        ),
        None => {}
    }
    (policy == RestartPolicy::ExitCode).then(|| PodFailurePolicy {
        rules: vec![PodFailurePolicyRule {
            action: "FailJob".to_owned(),
            on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                container_name: Some(NODE.to_owned()),
                operator: "In".to_owned(),
                values: (1..=127).collect(),
            }),
            on_pod_conditions: None,
        }],
    })
}

/// The TrainJob's trainer: the image, command, args, env and resources of the trainer role's main container
/// (moved out of the runtime so that jobs of the same shape share it), plus v1's rendezvous env.
pub(super) fn trainer(
    kind: V1Kind,
    role: &mut Role,
    world: &World<'_>,
    report: &mut MigrationReport,
) -> Trainer {
    let path = format!("{}.template.spec.containers[{}]", role.path, role.main);
    let Some(container) = role.main_mut() else {
        return Trainer::default();
    };
    let mut trainer = Trainer {
        image: container.image.clone(),
        command: container.command.take(),
        args: container.args.take(),
        ..Trainer::default()
    };
    report.exact(format!("{path}.image"), "spec.trainer.image");
    let gpus = container
        .resources
        .as_ref()
        .map_or(0, kubetrain_merge::resources::gpus);
    let inserted = world
        .torch_nproc
        .as_deref()
        .filter(|v1| *v1 != "auto" || gpus == 0)
        .and_then(|v1| insert_nproc_flag(&mut trainer, v1).map(|field| (field, v1)));
    for (field, present) in [
        ("command", trainer.command.is_some()),
        ("args", trainer.args.is_some()),
    ] {
        match inserted {
            Some((at, v1)) if at == field => report.changed(
                format!("{path}.{field}"),
                format!(
                    "spec.trainer.{field}, with --nproc-per-node={v1} inserted after torchrun: v1 told torchrun \
                     PET_NPROC_PER_NODE={v1}, which a TrainJob cannot set (the torch policy sets the pod's CPU \
                     count on a pod without GPUs); torchrun takes the flag over the env, so it starts as many \
                     processes per node as under v1"
                ),
            ),
            _ if present => report.exact(format!("{path}.{field}"), format!("spec.trainer.{field}")),
            _ => {}
        }
    }
    // MPI: the launcher's resources stay on the launcher (TrainJob resources would apply to the workers too).
    if kind != V1Kind::MPIJob {
        trainer.resources_per_node = container.resources.take();
        if trainer.resources_per_node.is_some() {
            report.exact(format!("{path}.resources"), "spec.trainer.resourcesPerNode");
        }
    }
    let reserved = kinds::reserved_env(kind, world.elastic);
    let (aliases, note) = world.env();
    let mut env: Vec<EnvVar> = Vec::new();
    for var in container.env.take().unwrap_or_default() {
        if reserved.contains(&var.name.as_str()) {
            report.changed(
                format!("{path}.env[{}]", var.name),
                format!(
                    "{} is set by the {kind} runtime's ML policy for the same world; dropped",
                    var.name
                ),
            );
        } else {
            env.push(var);
        }
    }
    if !env.is_empty() {
        report.exact(format!("{path}.env"), "spec.trainer.env");
    }
    if !note.is_empty() {
        report.changed("(v1 operator env)", note);
    }
    for alias in aliases {
        // A name the user set wins, as it came first in v1's env list.
        if !env.iter().any(|e| e.name == alias.name) {
            env.push(alias);
        }
    }
    trainer.env = env;
    trainer
}

pub(super) fn procs_per_node(job: &V1Job) -> i32 {
    match job {
        V1Job::PyTorch(j) => j
            .spec
            .nproc_per_node
            .as_deref()
            .and_then(|n| n.parse().ok())
            .filter(|n: &i32| *n >= 1)
            .unwrap_or(1),
        _ => 1,
    }
}

/// PyTorchJob's `nprocPerNode`: an integer is carried; anything else is left to V2's auto. Unset is v1's
/// `auto` too: v1.8.1's defaulting sets it, so v1 gave torchrun `PET_NPROC_PER_NODE=auto` (one process per
/// GPU, else per CPU) and `WORLD_SIZE` as if one process ran per node. An elastic job's deprecated
/// `elasticPolicy.nProcPerNode` (which v1's webhook forbids beside `nprocPerNode`, and which stops v1's
/// defaulting) gives the count instead.
pub(super) fn num_proc_per_node(job: &V1Job, report: &mut MigrationReport) -> Option<i32> {
    let V1Job::PyTorch(j) = job else {
        return None;
    };
    let elastic = j
        .spec
        .elastic_policy
        .as_ref()
        .and_then(|e| e.n_proc_per_node);
    if let (None, Some(n)) = (j.spec.nproc_per_node.as_deref(), elastic) {
        return (n >= 1).then_some(n);
    }
    match j.spec.nproc_per_node.as_deref() {
        None => {
            report.changed(
                "spec.nprocPerNode",
                "unset, which v1 defaults to \"auto\": spec.trainer.numProcPerNode is left unset, V2's auto: with \
                 GPUs torchrun gets PET_NPROC_PER_NODE=auto as in v1; without, V2 gives the pod's CPU request (at \
                 least 1) where v1's torchrun counted the node's CPUs, so a command that starts torchrun gets \
                 --nproc-per-node=auto (set nprocPerNode to choose)",
            );
            None
        }
        Some(text) => match text.parse::<i32>() {
            Ok(n) if n >= 1 => {
                report.exact("spec.nprocPerNode", "spec.trainer.numProcPerNode");
                Some(n)
            }
            _ => {
                report.changed(
                    "spec.nprocPerNode",
                    format!(
                        "{text:?}: spec.trainer.numProcPerNode is left unset, V2's auto: one process per GPU, else per \
                         CPU (v1 gave WORLD_SIZE as if one process ran per node); a command that starts torchrun \
                         gets --nproc-per-node={text} where V2's value would differ"
                    ),
                );
                None
            }
        },
    }
}

/// PyTorchJob: v1's `PET_NPROC_PER_NODE` when it is not an integer (`nprocPerNode` `auto`, v1's default, `cpu`
/// or `gpu`), which a TrainJob cannot give torchrun. `None` otherwise (an integer is `numProcPerNode`).
pub(super) fn v1_torch_nproc(job: &V1Job) -> Option<String> {
    let V1Job::PyTorch(j) = job else {
        return None;
    };
    let elastic = j
        .spec
        .elastic_policy
        .as_ref()
        .and_then(|e| e.n_proc_per_node);
    match (j.spec.nproc_per_node.as_deref(), elastic) {
        (None, Some(_)) => None,
        (None, None) => Some("auto".to_owned()),
        (Some(text), _) if text.parse::<i32>().is_ok_and(|n| n >= 1) => None,
        (Some(text), _) => Some(text.to_owned()),
    }
}

/// Where a command starts torchrun: the word `torchrun` (any directory), or `torch.distributed.run` /
/// `torch.distributed.launch` after `-m`.
fn torchrun_at(words: &[&str]) -> Option<usize> {
    (0..words.len()).find(|&i| {
        words[i].rsplit('/').next() == Some("torchrun")
            || (matches!(
                words[i],
                "torch.distributed.run" | "torch.distributed.launch"
            ) && i > 0
                && words[i - 1] == "-m")
    })
}

/// Inserts `--nproc-per-node=<value>` right after the word that starts torchrun in the trainer's command or
/// args, unless torchrun already gets `--nproc-per-node`/`--nproc_per_node` there. Returns the field changed
/// (`command` or `args`); `None` when no torchrun is started directly (a shell line, a script) or the flag is
/// there.
fn insert_nproc_flag(trainer: &mut Trainer, value: &str) -> Option<&'static str> {
    let command = trainer.command.clone().unwrap_or_default();
    let args = trainer.args.clone().unwrap_or_default();
    let words: Vec<&str> = command.iter().chain(&args).map(String::as_str).collect();
    let at = torchrun_at(&words)?;
    let has_flag = words[at + 1..].iter().any(|w| {
        let flag = w.split('=').next().unwrap_or_default();
        matches!(flag, "--nproc-per-node" | "--nproc_per_node")
    });
    if has_flag {
        return None;
    }
    let flag = format!("--nproc-per-node={value}");
    if at < command.len() {
        trainer
            .command
            .get_or_insert_with(Vec::new)
            .insert(at + 1, flag);
        Some("command")
    } else {
        trainer
            .args
            .get_or_insert_with(Vec::new)
            .insert(at + 1 - command.len(), flag);
        Some("args")
    }
}
