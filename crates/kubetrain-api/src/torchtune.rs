//! TorchTune facts, the one home of them: validation's rules and the torch plugin's command rewrite
//! (kubetrain-merge) both use these (upstream `plugins/torch/torchtune.go`).
//!
//! A TrainJob whose trainer command is exactly `["tune", "run"]` on a torchtune runtime gets its recipe and
//! config chosen from the node count, processes per node, GPUs and the LoRA/QLoRA arguments.

/// The trainer command that switches the torch plugin into torchtune mode.
pub const ENTRYPOINT: [&str; 2] = ["tune", "run"];
/// Models the shipped torchtune runtimes support.
pub const SUPPORTED_MODELS: [&str; 4] = [LLAMA3_2_1B, LLAMA3_2_3B, LLAMA3_3_70B, QWEN2_5_1_5B];
/// Llama 3.2 1B Instruct.
pub const LLAMA3_2_1B: &str = "llama3_2/1B";
/// Llama 3.2 3B Instruct.
pub const LLAMA3_2_3B: &str = "llama3_2/3B";
/// Llama 3.3 70B Instruct, the only model that may run on more than one node.
pub const LLAMA3_3_70B: &str = "llama3_3/70B";
/// Qwen 2.5 1.5B Instruct.
pub const QWEN2_5_1_5B: &str = "qwen2_5/1.5B";
/// Config keys the runtime manages; users may not set them in args.
pub const IMMUTABLE_CONFIGS: [&str; 4] = [
    "output_dir",
    "tokenizer.path",
    "checkpointer.checkpoint_dir",
    "tokenizer.merges_file",
];
/// Config suffix of distributed QLoRA.
pub const QLORA_DISTRIBUTED_SUFFIX: &str = "_qlora";
/// Config suffix of single-device QLoRA.
pub const QLORA_SINGLE_DEVICE_SUFFIX: &str = "_qlora_single_device";

/// Whether a trainer command selects torchtune.
pub fn is_torchtune_command(command: Option<&[String]>) -> bool {
    command.is_some_and(|c| c.len() == 2 && c[0] == ENTRYPOINT[0] && c[1] == ENTRYPOINT[1])
}

/// The model a runtime name stands for: `torchtune-llama3.2-1b` → `llama3_2/1B`; `""` when the name does not
/// have exactly three dash-separated fields.
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

/// Processes per node (`PET_NPROC_PER_NODE`), as the torch plugin and torchtune's recipe choice see it: a
/// number or `auto` (left to torchrun, which counts GPUs). Displays as the env value: `4` or `auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcsPerNode {
    /// A fixed number of processes.
    Count(i64),
    /// `auto`: let torchrun decide.
    Auto,
}

impl std::fmt::Display for ProcsPerNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProcsPerNode::Count(n) => write!(f, "{n}"),
            ProcsPerNode::Auto => f.write_str("auto"),
        }
    }
}

/// Whether any arg enables LoRA (`model.lora_attn_modules`).
pub fn is_lora(args: &[String]) -> bool {
    args.iter().any(|a| a.contains("model.lora_attn_modules"))
}

fn bool_arg_enabled(args: &[String], item: &str) -> bool {
    args.iter().any(|arg| {
        arg.split_once('=').is_some_and(|(name, value)| {
            name.contains(item) && value.trim().eq_ignore_ascii_case("true")
        })
    })
}

/// Whether the args ask for QLoRA (`model.quantize_base=true`, unless DoRA is on).
pub fn is_qlora(args: &[String]) -> bool {
    !bool_arg_enabled(args, "model.use_dora") && bool_arg_enabled(args, "model.quantize_base")
}

/// Recipe and config for a torchtune job, as upstream's `getRecipeAndConfig`.
pub fn recipe_and_config(
    num_nodes: i32,
    proc_per_node: ProcsPerNode,
    gpus: i64,
    runtime_name: &str,
    args: &[String],
) -> (&'static str, String) {
    let single_device = num_nodes == 1 && (proc_per_node == ProcsPerNode::Count(1) || gpus == 1);
    let (recipe, suffix) = if single_device {
        if is_qlora(args) {
            ("lora_finetune_single_device", QLORA_SINGLE_DEVICE_SUFFIX)
        } else if is_lora(args) {
            ("lora_finetune_single_device", "_lora_single_device")
        } else {
            ("full_finetune_single_device", "_full_single_device")
        }
    } else if num_nodes == 1 && is_qlora(args) {
        ("lora_finetune_distributed", QLORA_DISTRIBUTED_SUFFIX)
    } else if num_nodes == 1 && is_lora(args) {
        ("lora_finetune_distributed", "_lora")
    } else if num_nodes > 1 {
        ("full_finetune_distributed", "_full_multinode")
    } else {
        ("full_finetune_distributed", "_full")
    };
    (
        recipe,
        format!("{}{suffix}", model_from_runtime_name(runtime_name)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn model_names_follow_upstream() {
        assert_eq!(
            model_from_runtime_name("torchtune-llama3.2-1b"),
            "llama3_2/1B"
        );
        assert_eq!(
            model_from_runtime_name("torchtune-qwen2.5-1.5b"),
            "qwen2_5/1.5B"
        );
        assert_eq!(model_from_runtime_name("torch-distributed"), "");
    }

    #[test]
    fn recipes_follow_upstream_table() {
        let name = "torchtune-llama3.2-1b";
        let lora = args(&["model.lora_attn_modules=[q_proj,v_proj]"]);
        let qlora = args(&[
            "model.quantize_base=True",
            "model.lora_attn_modules=[q_proj]",
        ]);
        let dora = args(&["model.quantize_base=true", "model.use_dora=true"]);
        type Case<'a> = (i32, ProcsPerNode, i64, &'a [String], &'a str, &'a str);
        let cases: [Case<'_>; 8] = [
            (
                1,
                ProcsPerNode::Count(1),
                0,
                &[],
                "full_finetune_single_device",
                "llama3_2/1B_full_single_device",
            ),
            (
                1,
                ProcsPerNode::Auto,
                1,
                &lora,
                "lora_finetune_single_device",
                "llama3_2/1B_lora_single_device",
            ),
            (
                1,
                ProcsPerNode::Auto,
                1,
                &qlora,
                "lora_finetune_single_device",
                "llama3_2/1B_qlora_single_device",
            ),
            (
                1,
                ProcsPerNode::Auto,
                2,
                &qlora,
                "lora_finetune_distributed",
                "llama3_2/1B_qlora",
            ),
            (
                1,
                ProcsPerNode::Auto,
                2,
                &lora,
                "lora_finetune_distributed",
                "llama3_2/1B_lora",
            ),
            (
                2,
                ProcsPerNode::Auto,
                2,
                &lora,
                "full_finetune_distributed",
                "llama3_2/1B_full_multinode",
            ),
            (
                1,
                ProcsPerNode::Auto,
                2,
                &[],
                "full_finetune_distributed",
                "llama3_2/1B_full",
            ),
            (
                1,
                ProcsPerNode::Auto,
                2,
                &dora,
                "full_finetune_distributed",
                "llama3_2/1B_full",
            ),
        ];
        for (nodes, procs, gpus, a, recipe, config) in cases {
            assert_eq!(
                recipe_and_config(nodes, procs, gpus, name, a),
                (recipe, config.to_owned())
            );
        }
    }
}
