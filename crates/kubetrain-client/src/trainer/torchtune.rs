//! The built-in trainer: TorchTune fine-tuning, configured as the Python SDK's
//! `BuiltinTrainer(config=TorchTuneConfig(...))` and rendered to the same `tune run` overrides.

use k8s_openapi::api::core::v1::ResourceRequirements;

use super::python::{float_repr, str_repr};
use crate::initializers::{DatasetInitializer, Initializer};

/// Where the dataset initializer puts the data (`DATASET_PATH`).
pub const DATASET_PATH: &str = "/workspace/dataset";

/// The instruct dataset class `dataset_preprocess_config` selects.
pub const TORCH_TUNE_INSTRUCT_DATASET: &str = "torchtune.datasets.instruct_dataset";

/// Model and optimizer data type (`DataType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataType {
    /// `bf16`.
    Bf16,
    /// `fp32`.
    Fp32,
}

impl DataType {
    /// The value TorchTune takes.
    pub fn as_str(self) -> &'static str {
        match self {
            DataType::Bf16 => "bf16",
            DataType::Fp32 => "fp32",
        }
    }
}

/// Loss function (`Loss`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loss {
    /// `torchtune.modules.loss.CEWithChunkedOutputLoss`.
    CeWithChunkedOutputLoss,
}

impl Loss {
    /// The class path TorchTune takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Loss::CeWithChunkedOutputLoss => "torchtune.modules.loss.CEWithChunkedOutputLoss",
        }
    }
}

/// Data file format of an instruct dataset (`DataFormat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataFormat {
    /// `json`.
    Json,
    /// `csv`.
    Csv,
    /// `parquet`.
    Parquet,
    /// `arrow`.
    Arrow,
    /// `text`.
    Text,
    /// `xml`.
    Xml,
}

impl DataFormat {
    /// The value TorchTune takes.
    pub fn as_str(self) -> &'static str {
        match self {
            DataFormat::Json => "json",
            DataFormat::Csv => "csv",
            DataFormat::Parquet => "parquet",
            DataFormat::Arrow => "arrow",
            DataFormat::Text => "text",
            DataFormat::Xml => "xml",
        }
    }
}

/// LoRA / QLoRA / DoRA settings (`LoraConfig`).
#[derive(Clone, Debug, PartialEq)]
pub struct LoraConfig {
    /// `model.apply_lora_to_mlp`.
    pub apply_lora_to_mlp: Option<bool>,
    /// `model.apply_lora_to_output`.
    pub apply_lora_to_output: Option<bool>,
    /// `model.lora_attn_modules` (default `q_proj, v_proj, output_proj`; empty: not set).
    pub lora_attn_modules: Vec<String>,
    /// `model.lora_rank`.
    pub lora_rank: Option<i64>,
    /// `model.lora_alpha`.
    pub lora_alpha: Option<i64>,
    /// `model.lora_dropout`.
    pub lora_dropout: Option<f64>,
    /// `model.quantize_base` (QLoRA).
    pub quantize_base: Option<bool>,
    /// `model.use_dora` (DoRA).
    pub use_dora: Option<bool>,
}

impl Default for LoraConfig {
    fn default() -> Self {
        LoraConfig {
            apply_lora_to_mlp: None,
            apply_lora_to_output: None,
            lora_attn_modules: vec!["q_proj".into(), "v_proj".into(), "output_proj".into()],
            lora_rank: None,
            lora_alpha: None,
            lora_dropout: None,
            quantize_base: None,
            use_dora: None,
        }
    }
}

/// Instruct dataset preprocessing (`TorchTuneInstructDataset`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TorchTuneInstructDataset {
    /// File format of the data.
    pub source: Option<DataFormat>,
    /// Split, e.g. `train[:10%]`.
    pub split: Option<String>,
    /// Train on the prompt too.
    pub train_on_input: Option<bool>,
    /// A system prompt to prepend.
    pub new_system_prompt: Option<String>,
    /// Column renames (`input`/`output` → the dataset's names), in order.
    pub column_map: Vec<(String, String)>,
}

/// TorchTune fine-tuning settings (`TorchTuneConfig`); unset fields keep the runtime's config.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TorchTuneConfig {
    /// Data type.
    pub dtype: Option<DataType>,
    /// Batch size (0: not set, as in the SDK).
    pub batch_size: Option<i64>,
    /// Epochs (0: not set, as in the SDK).
    pub epochs: Option<i64>,
    /// Loss.
    pub loss: Option<Loss>,
    /// Nodes.
    pub num_nodes: Option<i32>,
    /// Parameter-efficient fine-tuning.
    pub peft_config: Option<LoraConfig>,
    /// Dataset preprocessing.
    pub dataset_preprocess_config: Option<TorchTuneInstructDataset>,
    /// Resources of each node.
    pub resources_per_node: Option<ResourceRequirements>,
}

/// A trainer that is part of the runtime's image (`BuiltinTrainer`); only TorchTune today.
///
/// ```
/// use kubetrain_client::trainer::{BuiltinTrainer, DataType, LoraConfig, TorchTuneConfig};
/// let t = BuiltinTrainer::new(TorchTuneConfig {
///     dtype: Some(DataType::Bf16),
///     epochs: Some(2),
///     peft_config: Some(LoraConfig { lora_rank: Some(8), ..LoraConfig::default() }),
///     ..TorchTuneConfig::default()
/// });
/// assert_eq!(t.args(None), ["dtype=bf16", "epochs=2", "model.lora_rank=8", "model.lora_attn_modules=[q_proj,v_proj,output_proj]"]);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BuiltinTrainer {
    /// The TorchTune settings.
    pub config: TorchTuneConfig,
}

fn py_bool(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

impl BuiltinTrainer {
    /// A built-in trainer with `config`.
    pub fn new(config: TorchTuneConfig) -> Self {
        BuiltinTrainer { config }
    }

    /// The trainer args: `key=value` overrides of the runtime's TorchTune config, in the SDK's order.
    /// A Hugging Face dataset initializer adds `dataset.data_dir` (or `dataset.data_files` for a file).
    pub fn args(&self, initializer: Option<&Initializer>) -> Vec<String> {
        let c = &self.config;
        let mut args = Vec::new();
        if let Some(d) = c.dtype {
            args.push(format!("dtype={}", d.as_str()));
        }
        if let Some(b) = c.batch_size.filter(|b| *b != 0) {
            args.push(format!("batch_size={b}"));
        }
        if let Some(e) = c.epochs.filter(|e| *e != 0) {
            args.push(format!("epochs={e}"));
        }
        if let Some(l) = c.loss {
            args.push(format!("loss={}", l.as_str()));
        }
        if let Some(DatasetInitializer::HuggingFace(hf)) =
            initializer.and_then(|i| i.dataset.as_ref())
        {
            args.push(hf_data_arg(&hf.storage_uri));
        }
        if let Some(p) = &c.peft_config {
            let bools = [
                ("model.apply_lora_to_mlp", p.apply_lora_to_mlp),
                ("model.apply_lora_to_output", p.apply_lora_to_output),
            ];
            for (k, v) in bools {
                if let Some(v) = v {
                    args.push(format!("{k}={}", py_bool(v)));
                }
            }
            if let Some(v) = p.lora_rank {
                args.push(format!("model.lora_rank={v}"));
            }
            if let Some(v) = p.lora_alpha {
                args.push(format!("model.lora_alpha={v}"));
            }
            if let Some(v) = p.lora_dropout {
                args.push(format!("model.lora_dropout={}", float_repr(v)));
            }
            for (k, v) in [
                ("model.quantize_base", p.quantize_base),
                ("model.use_dora", p.use_dora),
            ] {
                if let Some(v) = v {
                    args.push(format!("{k}={}", py_bool(v)));
                }
            }
            if !p.lora_attn_modules.is_empty() {
                args.push(format!(
                    "model.lora_attn_modules=[{}]",
                    p.lora_attn_modules.join(",")
                ));
            }
        }
        if let Some(d) = &c.dataset_preprocess_config {
            args.push(format!("dataset={TORCH_TUNE_INSTRUCT_DATASET}"));
            if let Some(s) = d.source {
                args.push(format!("dataset.source={}", s.as_str()));
            }
            if let Some(s) = d.split.as_deref().filter(|s| !s.is_empty()) {
                args.push(format!("dataset.split={s}"));
            }
            if let Some(t) = d.train_on_input {
                args.push(format!("dataset.train_on_input={}", py_bool(t)));
            }
            if let Some(p) = d.new_system_prompt.as_deref().filter(|s| !s.is_empty()) {
                args.push(format!("dataset.new_system_prompt={p}"));
            }
            if !d.column_map.is_empty() {
                let items: Vec<String> = d
                    .column_map
                    .iter()
                    .map(|(k, v)| format!("{}: {}", str_repr(k), str_repr(v)))
                    .collect();
                args.push(format!("dataset.column_map={{{}}}", items.join(", ")));
            }
        }
        args
    }
}

/// `dataset.data_dir=/workspace/dataset/<path>` for `hf://<org>/<name>/<path>` (`.` without a path), or
/// `dataset.data_files=...` when the path names a file (has a dot).
///
/// ```
/// use kubetrain_client::trainer::hf_data_arg;
/// assert_eq!(hf_data_arg("hf://tatsu-lab/alpaca/data"), "dataset.data_dir=/workspace/dataset/data");
/// assert_eq!(hf_data_arg("tatsu-lab/alpaca"), "dataset.data_dir=/workspace/dataset/.");
/// assert_eq!(hf_data_arg("hf://org/ds/train/part.json"), "dataset.data_files=/workspace/dataset/train/part.json");
/// ```
pub fn hf_data_arg(storage_uri: &str) -> String {
    let uri = if storage_uri.starts_with("hf://") {
        storage_uri.to_string()
    } else {
        format!("hf://{storage_uri}")
    };
    // urlparse: the path starts after the host and ends before `?` or `#`.
    let rest = &uri["hf://".len()..];
    let rest = rest.split(['?', '#']).next().unwrap_or("");
    let path = rest.find('/').map_or("", |p| &rest[p..]);
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let relative = if parts.len() > 1 {
        parts[1..].join("/")
    } else {
        ".".to_string()
    };
    // os.path.join: an absolute second part replaces the first.
    let joined = if relative.starts_with('/') {
        relative.clone()
    } else {
        format!("{DATASET_PATH}/{relative}")
    };
    if relative != "." && relative.contains('.') {
        format!("dataset.data_files={joined}")
    } else {
        format!("dataset.data_dir={joined}")
    }
}
