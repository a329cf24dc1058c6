//! Trainers as the Python SDK has them: a container command ([`Trainer`], `CustomTrainerContainer`),
//! Python code ([`FunctionTrainer`], `CustomTrainer(func=...)`) and TorchTune ([`BuiltinTrainer`],
//! `BuiltinTrainer(TorchTuneConfig)`), plus the resource shorthand ([`resources`]).

mod function;
mod python;
mod resources;
mod torchtune;

pub use function::{
    DEFAULT_MPI_USER_HOME, DEFAULT_PIP_INDEX_URL, FunctionTrainer, pip_install_script,
    sdk_entrypoint,
};
pub use python::{PyValue, dedent, function_source, shlex_quote};
pub use resources::resources;
pub use torchtune::{
    BuiltinTrainer, DATASET_PATH, DataFormat, DataType, LoraConfig, Loss,
    TORCH_TUNE_INSTRUCT_DATASET, TorchTuneConfig, TorchTuneInstructDataset, hf_data_arg,
};

pub use crate::types::Trainer;

/// Any of the three trainers `train` takes.
#[derive(Clone, Debug, PartialEq)]
pub enum TrainerSpec {
    /// A container command (`CustomTrainerContainer`).
    Container(Trainer),
    /// Python code (`CustomTrainer`).
    Function(FunctionTrainer),
    /// TorchTune (`BuiltinTrainer`).
    Builtin(BuiltinTrainer),
}

impl From<Trainer> for TrainerSpec {
    fn from(t: Trainer) -> Self {
        TrainerSpec::Container(t)
    }
}

impl From<FunctionTrainer> for TrainerSpec {
    fn from(t: FunctionTrainer) -> Self {
        TrainerSpec::Function(t)
    }
}

impl From<BuiltinTrainer> for TrainerSpec {
    fn from(t: BuiltinTrainer) -> Self {
        TrainerSpec::Builtin(t)
    }
}

impl From<TorchTuneConfig> for TrainerSpec {
    fn from(c: TorchTuneConfig) -> Self {
        TrainerSpec::Builtin(BuiltinTrainer::new(c))
    }
}

impl TrainerSpec {
    /// The SDK's class name, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            TrainerSpec::Container(_) => "CustomTrainerContainer",
            TrainerSpec::Function(_) => "CustomTrainer",
            TrainerSpec::Builtin(_) => "BuiltinTrainer",
        }
    }
}
