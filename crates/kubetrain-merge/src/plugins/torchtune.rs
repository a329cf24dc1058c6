//! TorchTune (`trainer.command == ["tune", "run"]`): recipe and config selection and the command rewrite.
//!
//! The model comes from the runtime name (`torchtune-llama3.2-1b` → `llama3_2/1B`); LoRA, QLoRA and DoRA from
//! the TrainJob args; runtime `node` command items that set immutable keys are appended.

use kubetrain_api::TrainJob;
use kubetrain_api::constants::{ANCESTOR_TRAINER, NODE, TRAINER_PORT};

use super::master_host;
use crate::info::Info;

// The rules live in kubetrain-api (validation uses them too); re-exported where the plugin always had them.
pub use kubetrain_api::torchtune::{
    ENTRYPOINT, IMMUTABLE_CONFIGS, ProcsPerNode, is_lora, is_qlora, is_torchtune_command,
    model_from_runtime_name, recipe_and_config,
};

/// The rewritten trainer command: `tune run` + rendezvous endpoint (distributed only) + recipe + `--config` +
/// config + the runtime's immutable overrides.
pub fn command(
    info: &Info,
    job: &TrainJob,
    num_nodes: i32,
    procs: ProcsPerNode,
    gpus: i64,
) -> Vec<String> {
    let mut cmd: Vec<String> = job
        .spec
        .trainer
        .as_ref()
        .and_then(|t| t.command.clone())
        .unwrap_or_default();
    let distributed = num_nodes > 1
        || matches!(procs, ProcsPerNode::Count(n) if n > 1)
        || (procs == ProcsPerNode::Auto && gpus > 1);
    if distributed {
        cmd.push(format!(
            "--rdzv_endpoint={}:{TRAINER_PORT}",
            master_host(job)
        ));
    }
    let args = job
        .spec
        .trainer
        .as_ref()
        .and_then(|t| t.args.as_deref())
        .unwrap_or_default();
    let (recipe, config) =
        recipe_and_config(num_nodes, procs, gpus, &job.spec.runtime_ref.name, args);
    cmd.extend([recipe.to_owned(), "--config".to_owned(), config]);
    for rjob in &info.spec.replicated_jobs {
        if rjob.ancestor() != Some(ANCESTOR_TRAINER) {
            continue;
        }
        for c in rjob
            .pod_spec()
            .into_iter()
            .flat_map(|p| &p.containers)
            .filter(|c| c.name == NODE)
        {
            for item in c.command.iter().flatten() {
                let key = item.split('=').next().unwrap_or_default();
                if IMMUTABLE_CONFIGS.contains(&key) {
                    cmd.push(item.clone());
                }
            }
        }
    }
    cmd
}
