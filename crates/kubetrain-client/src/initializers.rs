//! Typed dataset and model initializers, as the Python SDK's `HuggingFaceDatasetInitializer`,
//! `S3DatasetInitializer`, `DataCacheInitializer`, `HuggingFaceModelInitializer` and
//! `S3ModelInitializer`: `storageUri` plus every optional field set as an UPPER_CASE env var (lists
//! comma-joined), in the SDK's field order.

use k8s_openapi::api::core::v1::EnvVar;

use crate::error::{ClientError, Result};

/// Files the model initializers skip unless told otherwise (`INITIALIZER_DEFAULT_IGNORE_PATTERNS`).
pub const DEFAULT_IGNORE_PATTERNS: [&str; 5] = ["*.msgpack", "*.h5", "*.bin", "*.pt", "*.pth"];

fn default_ignore() -> Option<Vec<String>> {
    Some(DEFAULT_IGNORE_PATTERNS.map(String::from).to_vec())
}

/// A dataset from the Hugging Face Hub (`hf://org/name[/path]`, or `org/name`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HuggingFaceDatasetInitializer {
    /// The dataset.
    pub storage_uri: String,
    /// Files to skip (`IGNORE_PATTERNS`).
    pub ignore_patterns: Option<Vec<String>>,
    /// Token for private datasets (`ACCESS_TOKEN`).
    pub access_token: Option<String>,
}

/// A dataset in S3-compatible storage (`s3://bucket/path`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct S3DatasetInitializer {
    /// The dataset, `s3://...`.
    pub storage_uri: String,
    /// Files to skip (`IGNORE_PATTERNS`).
    pub ignore_patterns: Option<Vec<String>>,
    /// Endpoint URL (`ENDPOINT`).
    pub endpoint: Option<String>,
    /// `ACCESS_KEY_ID`.
    pub access_key_id: Option<String>,
    /// `SECRET_ACCESS_KEY`.
    pub secret_access_key: Option<String>,
    /// `REGION`.
    pub region: Option<String>,
    /// Role to assume (`ROLE_ARN`).
    pub role_arn: Option<String>,
}

/// The distributed data cache (`cache://<schema>/<table>`, an Iceberg table's metadata).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DataCacheInitializer {
    /// `cache://<schema>/<table>`.
    pub storage_uri: String,
    /// The Iceberg table's metadata file (`METADATA_LOC`).
    pub metadata_loc: String,
    /// Data nodes, more than 1 (`CLUSTER_SIZE` = this + 1).
    pub num_data_nodes: i32,
    /// `HEAD_CPU`.
    pub head_cpu: Option<String>,
    /// `HEAD_MEM`.
    pub head_mem: Option<String>,
    /// `WORKER_CPU`.
    pub worker_cpu: Option<String>,
    /// `WORKER_MEM`.
    pub worker_mem: Option<String>,
    /// `IAM_ROLE`.
    pub iam_role: Option<String>,
}

/// A model from the Hugging Face Hub.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HuggingFaceModelInitializer {
    /// The model, e.g. `hf://meta-llama/Llama-3.2-1B-Instruct`.
    pub storage_uri: String,
    /// Files to skip (default [`DEFAULT_IGNORE_PATTERNS`]).
    pub ignore_patterns: Option<Vec<String>>,
    /// `ACCESS_TOKEN`.
    pub access_token: Option<String>,
}

/// A model in S3-compatible storage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3ModelInitializer {
    /// The model, `s3://...`.
    pub storage_uri: String,
    /// Files to skip (default [`DEFAULT_IGNORE_PATTERNS`]).
    pub ignore_patterns: Option<Vec<String>>,
    /// `ENDPOINT`.
    pub endpoint: Option<String>,
    /// `ACCESS_KEY_ID`.
    pub access_key_id: Option<String>,
    /// `SECRET_ACCESS_KEY`.
    pub secret_access_key: Option<String>,
    /// `REGION`.
    pub region: Option<String>,
    /// `ROLE_ARN`.
    pub role_arn: Option<String>,
}

impl HuggingFaceDatasetInitializer {
    /// A dataset with no options.
    pub fn new(storage_uri: impl Into<String>) -> Self {
        Self {
            storage_uri: storage_uri.into(),
            ..Self::default()
        }
    }
}

impl S3DatasetInitializer {
    /// A dataset with no options.
    pub fn new(storage_uri: impl Into<String>) -> Self {
        Self {
            storage_uri: storage_uri.into(),
            ..Self::default()
        }
    }
}

impl DataCacheInitializer {
    /// A cache of `num_data_nodes` data nodes.
    pub fn new(
        storage_uri: impl Into<String>,
        metadata_loc: impl Into<String>,
        num_data_nodes: i32,
    ) -> Self {
        Self {
            storage_uri: storage_uri.into(),
            metadata_loc: metadata_loc.into(),
            num_data_nodes,
            ..Self::default()
        }
    }
}

impl HuggingFaceModelInitializer {
    /// A model with the default ignore patterns.
    pub fn new(storage_uri: impl Into<String>) -> Self {
        Self {
            storage_uri: storage_uri.into(),
            ignore_patterns: default_ignore(),
            access_token: None,
        }
    }
}

impl S3ModelInitializer {
    /// A model with the default ignore patterns.
    pub fn new(storage_uri: impl Into<String>) -> Self {
        Self {
            storage_uri: storage_uri.into(),
            ignore_patterns: default_ignore(),
            endpoint: None,
            access_key_id: None,
            secret_access_key: None,
            region: None,
            role_arn: None,
        }
    }
}

/// One of the dataset initializers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DatasetInitializer {
    /// Hugging Face Hub.
    HuggingFace(HuggingFaceDatasetInitializer),
    /// S3.
    S3(S3DatasetInitializer),
    /// The data cache.
    DataCache(DataCacheInitializer),
    /// Any other initializer: a storage URI and env as given.
    Custom {
        /// `storageUri`.
        storage_uri: String,
        /// Env, in order.
        env: Vec<(String, String)>,
    },
}

/// One of the model initializers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelInitializer {
    /// Hugging Face Hub.
    HuggingFace(HuggingFaceModelInitializer),
    /// S3.
    S3(S3ModelInitializer),
    /// Any other initializer: a storage URI and env as given.
    Custom {
        /// `storageUri`.
        storage_uri: String,
        /// Env, in order.
        env: Vec<(String, String)>,
    },
}

macro_rules! into_enum {
    ($($t:ty => $e:ident :: $v:ident),*) => {$(
        impl From<$t> for $e {
            fn from(i: $t) -> Self {
                $e::$v(i)
            }
        }
    )*};
}
into_enum!(
    HuggingFaceDatasetInitializer => DatasetInitializer::HuggingFace,
    S3DatasetInitializer => DatasetInitializer::S3,
    DataCacheInitializer => DatasetInitializer::DataCache,
    HuggingFaceModelInitializer => ModelInitializer::HuggingFace,
    S3ModelInitializer => ModelInitializer::S3
);

/// Dataset and model initializers (the SDK's `Initializer`).
///
/// ```
/// use kubetrain_client::initializers::*;
/// let init = Initializer::new()
///     .with_dataset(HuggingFaceDatasetInitializer::new("hf://tatsu-lab/alpaca"))
///     .with_model(HuggingFaceModelInitializer { access_token: Some("t".into()), ..HuggingFaceModelInitializer::new("hf://meta-llama/Llama-3.2-1B-Instruct") });
/// let api = init.to_api().unwrap().unwrap();
/// let model = api.model.unwrap();
/// let env: Vec<_> = model.env.iter().map(|e| (e.name.as_str(), e.value.as_deref().unwrap())).collect();
/// assert_eq!(env, [("IGNORE_PATTERNS", "*.msgpack,*.h5,*.bin,*.pt,*.pth"), ("ACCESS_TOKEN", "t")]);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Initializer {
    /// The dataset initializer.
    pub dataset: Option<DatasetInitializer>,
    /// The model initializer.
    pub model: Option<ModelInitializer>,
}

fn env(pairs: Vec<(&str, Option<String>)>) -> Vec<EnvVar> {
    pairs
        .into_iter()
        .filter_map(|(name, value)| {
            value.map(|v| EnvVar {
                name: name.to_string(),
                value: Some(v),
                value_from: None,
            })
        })
        .collect()
}

fn joined(list: &Option<Vec<String>>) -> Option<String> {
    list.as_ref().map(|l| l.join(","))
}

fn require_prefix(path: &str, uri: &str, prefix: &str) -> Result<()> {
    if uri.starts_with(prefix) {
        Ok(())
    } else {
        Err(ClientError::InvalidArgument(format!(
            "{path}.storage_uri: must start with '{prefix}', got {uri:?}"
        )))
    }
}

impl DatasetInitializer {
    /// The TrainJob's `spec.initializer.dataset`, or why the settings are invalid.
    pub fn to_api(&self) -> Result<kubetrain_api::DatasetInitializer> {
        const PATH: &str = "initializer.dataset";
        let (uri, env) = match self {
            DatasetInitializer::HuggingFace(d) => (
                d.storage_uri.clone(),
                env(vec![
                    ("IGNORE_PATTERNS", joined(&d.ignore_patterns)),
                    ("ACCESS_TOKEN", d.access_token.clone()),
                ]),
            ),
            DatasetInitializer::S3(d) => {
                require_prefix(PATH, &d.storage_uri, "s3://")?;
                (
                    d.storage_uri.clone(),
                    env(vec![
                        ("IGNORE_PATTERNS", joined(&d.ignore_patterns)),
                        ("ENDPOINT", d.endpoint.clone()),
                        ("ACCESS_KEY_ID", d.access_key_id.clone()),
                        ("SECRET_ACCESS_KEY", d.secret_access_key.clone()),
                        ("REGION", d.region.clone()),
                        ("ROLE_ARN", d.role_arn.clone()),
                    ]),
                )
            }
            DatasetInitializer::DataCache(d) => {
                if d.num_data_nodes <= 1 {
                    return Err(ClientError::InvalidArgument(format!(
                        "{PATH}.num_data_nodes: must be greater than 1, got {}",
                        d.num_data_nodes
                    )));
                }
                require_prefix(PATH, &d.storage_uri, "cache://")?;
                if d.storage_uri["cache://".len()..].split('/').count() != 2 {
                    return Err(ClientError::InvalidArgument(format!(
                        "{PATH}.storage_uri: must be in format 'cache://<SCHEMA_NAME>/<TABLE_NAME>', got {:?}",
                        d.storage_uri
                    )));
                }
                (
                    d.storage_uri.clone(),
                    env(vec![
                        ("CLUSTER_SIZE", Some((d.num_data_nodes + 1).to_string())),
                        ("METADATA_LOC", Some(d.metadata_loc.clone())),
                        ("HEAD_CPU", d.head_cpu.clone()),
                        ("HEAD_MEM", d.head_mem.clone()),
                        ("WORKER_CPU", d.worker_cpu.clone()),
                        ("WORKER_MEM", d.worker_mem.clone()),
                        ("IAM_ROLE", d.iam_role.clone()),
                    ]),
                )
            }
            DatasetInitializer::Custom {
                storage_uri,
                env: e,
            } => (
                storage_uri.clone(),
                env(e
                    .iter()
                    .map(|(k, v)| (k.as_str(), Some(v.clone())))
                    .collect()),
            ),
        };
        Ok(kubetrain_api::DatasetInitializer {
            storage_uri: Some(uri),
            env,
            ..Default::default()
        })
    }
}

impl ModelInitializer {
    /// The TrainJob's `spec.initializer.model`, or why the settings are invalid.
    pub fn to_api(&self) -> Result<kubetrain_api::ModelInitializer> {
        let (uri, env) = match self {
            ModelInitializer::HuggingFace(m) => (
                m.storage_uri.clone(),
                env(vec![
                    ("IGNORE_PATTERNS", joined(&m.ignore_patterns)),
                    ("ACCESS_TOKEN", m.access_token.clone()),
                ]),
            ),
            ModelInitializer::S3(m) => {
                require_prefix("initializer.model", &m.storage_uri, "s3://")?;
                (
                    m.storage_uri.clone(),
                    env(vec![
                        ("IGNORE_PATTERNS", joined(&m.ignore_patterns)),
                        ("ENDPOINT", m.endpoint.clone()),
                        ("ACCESS_KEY_ID", m.access_key_id.clone()),
                        ("SECRET_ACCESS_KEY", m.secret_access_key.clone()),
                        ("REGION", m.region.clone()),
                        ("ROLE_ARN", m.role_arn.clone()),
                    ]),
                )
            }
            ModelInitializer::Custom {
                storage_uri,
                env: e,
            } => (
                storage_uri.clone(),
                env(e
                    .iter()
                    .map(|(k, v)| (k.as_str(), Some(v.clone())))
                    .collect()),
            ),
        };
        Ok(kubetrain_api::ModelInitializer {
            storage_uri: Some(uri),
            env,
            ..Default::default()
        })
    }
}

impl Initializer {
    /// No initializers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the dataset initializer.
    pub fn with_dataset(mut self, d: impl Into<DatasetInitializer>) -> Self {
        self.dataset = Some(d.into());
        self
    }

    /// Sets the model initializer.
    pub fn with_model(mut self, m: impl Into<ModelInitializer>) -> Self {
        self.model = Some(m.into());
        self
    }

    /// The TrainJob's `spec.initializer` (`None` when neither is set, as the SDK leaves it out).
    pub fn to_api(&self) -> Result<Option<kubetrain_api::Initializer>> {
        if self.dataset.is_none() && self.model.is_none() {
            return Ok(None);
        }
        Ok(Some(kubetrain_api::Initializer {
            dataset: self.dataset.as_ref().map(|d| d.to_api()).transpose()?,
            model: self.model.as_ref().map(|m| m.to_api()).transpose()?,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_settings_name_the_field() {
        let cases: Vec<(DatasetInitializer, &str)> = vec![
            (
                S3DatasetInitializer::new("bucket/x").into(),
                "initializer.dataset.storage_uri: must start with 's3://', got \"bucket/x\"",
            ),
            (
                DataCacheInitializer::new("cache://s/t", "s3://m", 1).into(),
                "initializer.dataset.num_data_nodes: must be greater than 1, got 1",
            ),
            (
                DataCacheInitializer::new("cache://s", "s3://m", 2).into(),
                "initializer.dataset.storage_uri: must be in format 'cache://<SCHEMA_NAME>/<TABLE_NAME>', got \"cache://s\"",
            ),
        ];
        for (d, want) in cases {
            assert_eq!(d.to_api().unwrap_err().to_string(), want);
        }
        let m: ModelInitializer = S3ModelInitializer::new("hf://x").into();
        assert_eq!(
            m.to_api().unwrap_err().to_string(),
            "initializer.model.storage_uri: must start with 's3://', got \"hf://x\""
        );
    }

    #[test]
    fn data_cache_env() {
        let d = DatasetInitializer::from(DataCacheInitializer {
            head_mem: Some("1Gi".into()),
            ..DataCacheInitializer::new("cache://s/t", "s3://b/meta.json", 3)
        });
        let api = d.to_api().unwrap();
        let env: Vec<_> = api
            .env
            .iter()
            .map(|e| format!("{}={}", e.name, e.value.as_deref().unwrap()))
            .collect();
        assert_eq!(
            env,
            [
                "CLUSTER_SIZE=4",
                "METADATA_LOC=s3://b/meta.json",
                "HEAD_MEM=1Gi"
            ]
        );
    }
}
