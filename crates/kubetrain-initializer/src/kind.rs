//! Which initializer runs (dataset or model) and upstream's defaults for each: what both the configuration
//! and the storage URI's checks depend on.

use std::fmt;
use std::path::PathBuf;

use crate::pattern::PatternSet;

/// Which initializer runs: it picks the default destination and ignore patterns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `dataset-initializer`: downloads to `/workspace/dataset`.
    Dataset,
    /// `model-initializer`: downloads to `/workspace/model`, skipping non-safetensors weights.
    Model,
}

impl Kind {
    /// Where upstream's initializers write (`pkg/initializers/utils/utils.py`).
    pub fn default_destination(self) -> PathBuf {
        match self {
            Kind::Dataset => PathBuf::from(DATASET_PATH),
            Kind::Model => PathBuf::from(MODEL_PATH),
        }
    }

    /// Upstream's default `IGNORE_PATTERNS`: none for datasets, non-safetensors weight formats for
    /// models.
    pub fn default_ignore_patterns(self) -> PatternSet {
        match self {
            Kind::Dataset => PatternSet::default(),
            Kind::Model => PatternSet::parse_list(MODEL_IGNORE_PATTERNS),
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Dataset => "dataset",
            Kind::Model => "model",
        })
    }
}

/// Upstream's dataset path in the shared workspace volume.
pub const DATASET_PATH: &str = "/workspace/dataset";
/// Upstream's model path in the shared workspace volume.
pub const MODEL_PATH: &str = "/workspace/model";
/// Upstream's default `IGNORE_PATTERNS` for models.
pub const MODEL_IGNORE_PATTERNS: &str = "*.msgpack,*.h5,*.bin,*.pt,*.pth";
