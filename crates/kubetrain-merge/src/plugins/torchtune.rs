//! TorchTune (`trainer.command == ["tune", "run"]`): recipe and config selection and the command rewrite.
//!
//! The model comes from the runtime name (`torchtune-llama3.2-1b` → `llama3_2/1B`); LoRA, QLoRA and DoRA from
//! the TrainJob args; runtime `node` command items that set immutable keys are appended.

use kubetrain_api::TrainJob;
use kubetrain_api::constants::{ANCESTOR_TRAINER, NODE, TRAINER_PORT};

use super::master_host;
use super::torch::ProcsPerNode;
use crate::info::{Info, ancestor_of};

/// The entrypoint that turns on torchtune handling.
pub const ENTRYPOINT: [&str; 2] = ["tune", "run"];

/// Config keys the runtime owns; users may not set them in args.
pub const IMMUTABLE_CONFIGS: [&str; 4] = [
    "output_dir",
    "tokenizer.path",
    "checkpointer.checkpoint_dir",
    "tokenizer.merges_file",
];

/// Whether a command is exactly `tune run`.
pub fn is_torchtune_command(command: &[String]) -> bool {
    command.len() == 2 && command[0] == ENTRYPOINT[0] && command[1] == ENTRYPOINT[1]
}

/// `torchtune-llama3.2-1b` → `llama3_2/1B`; anything without exactly three dash-separated fields → "".
pub fn model_from_runtime_name(name: &str) -> String {
    let fields: Vec<&str> = name.split('-').collect();
    if fields.len() != 3 {
        return String::new();
    }
    format!(
        "{}/{}",
        fields[1].replace('.', "_"),
        fields[2].to_uppercase()
    )
}

/// Whether the args configure LoRA (`model.lora_attn_modules`).
pub fn is_lora(args: &[String]) -> bool {
    args.iter().any(|a| a.contains("model.lora_attn_modules"))
}

fn bool_arg(args: &[String], key: &str) -> bool {
    args.iter().any(|a| {
        a.split_once('=')
            .is_some_and(|(k, v)| k.contains(key) && v.trim().eq_ignore_ascii_case("true"))
    })
}

/// Whether the args configure QLoRA (`model.quantize_base=true` without `model.use_dora=true`).
pub fn is_qlora(args: &[String]) -> bool {
    !bool_arg(args, "model.use_dora") && bool_arg(args, "model.quantize_base")
}

/// The recipe and config (`<model><suffix>`) upstream picks.
pub fn recipe_and_config(
    num_nodes: i32,
    procs: ProcsPerNode,
    gpus: i64,
    job: &TrainJob,
) -> (&'static str, String) {
    let args = job
        .spec
        .trainer
        .as_ref()
        .and_then(|t| t.args.as_deref())
        .unwrap_or_default();
    let (recipe, suffix) = if num_nodes == 1 && (procs == ProcsPerNode::Count(1) || gpus == 1) {
        if is_qlora(args) {
            ("lora_finetune_single_device", "_qlora_single_device")
        } else if is_lora(args) {
            ("lora_finetune_single_device", "_lora_single_device")
        } else {
            ("full_finetune_single_device", "_full_single_device")
        }
    } else if num_nodes == 1 && is_qlora(args) {
        ("lora_finetune_distributed", "_qlora")
    } else if num_nodes == 1 && is_lora(args) {
        ("lora_finetune_distributed", "_lora")
    } else if num_nodes > 1 {
        ("full_finetune_distributed", "_full_multinode")
    } else {
        ("full_finetune_distributed", "_full")
    };
    (
        recipe,
        format!(
            "{}{suffix}",
            model_from_runtime_name(&job.spec.runtime_ref.name)
        ),
    )
}

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
    let (recipe, config) = recipe_and_config(num_nodes, procs, gpus, job);
    cmd.extend([recipe.to_owned(), "--config".to_owned(), config]);
    for rjob in &info.spec.replicated_jobs {
        if ancestor_of(rjob) != Some(ANCESTOR_TRAINER) {
            continue;
        }
        let pod = rjob
            .template
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref());
        for c in pod
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_from_runtime_names() {
        assert_eq!(
            model_from_runtime_name("torchtune-llama3.2-1b"),
            "llama3_2/1B"
        );
        assert_eq!(
            model_from_runtime_name("torchtune-qwen2.5-1.5b"),
            "qwen2_5/1.5B"
        );
        assert_eq!(
            model_from_runtime_name("torchtune-llama3.3-70b"),
            "llama3_3/70B"
        );
        assert_eq!(model_from_runtime_name("torch-distributed"), "");
    }

    #[test]
    fn lora_flags() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(is_lora(&s(&["model.lora_attn_modules=[q_proj,v_proj]"])));
        assert!(is_qlora(&s(&["model.quantize_base=True"])));
        assert!(!is_qlora(&s(&[
            "model.quantize_base=true",
            "model.use_dora=true"
        ])));
        assert!(!is_qlora(&s(&["model.quantize_base"])));
    }
}
