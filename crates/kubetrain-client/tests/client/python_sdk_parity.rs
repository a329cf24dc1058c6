//! Equivalence with Kubeflow's Python SDK (`kubeflow==0.5.0`): the SDK itself builds the TrainJobs of
//! `python_sdk/parity.py` (function trainers, TorchTune configs, initializers, options) against our built-in
//! runtimes, and this test builds the same cases with `kubetrain_client` and compares them field by field.
//!
//! The SDK lives in the e2e harness's venv (`e2e/build.sh venv`, in `$KUBETRAIN_E2E_CACHE` or
//! `~/.cache/kubetrain-e2e`). Without it the test is skipped with a message, except under `CI`, where it fails.

use std::path::{Path, PathBuf};
use std::process::Command;

use kubetrain_client::initializers::*;
use kubetrain_client::trainer::*;
use kubetrain_client::types::runtime_view;
use kubetrain_client::{Runtime, TrainOptions, build::build_trainjob};
use serde_json::{Value, json};

fn venv_python() -> Option<PathBuf> {
    let cache = std::env::var_os("KUBETRAIN_E2E_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME").map(|c| PathBuf::from(c).join("kubetrain-e2e"))
        })
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/kubetrain-e2e"))
        })?;
    let python = cache.join("venv-kubeflow-0.5.0/bin/python");
    python.exists().then_some(python)
}

fn here() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python_sdk")
}

/// What the SDK built, or `None` (skip) when the venv is missing outside CI.
fn sdk_output() -> Option<Value> {
    let Some(python) = venv_python() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but the Python SDK venv is missing: run `e2e/build.sh venv` before the tests"
        );
        eprintln!("skipped: no kubeflow==0.5.0 venv (build it with `e2e/build.sh venv`)");
        return None;
    };
    let runtimes = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kubetrain-jobset/runtimes");
    let values = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(values.path(), serde_json::to_vec(&repr_values()).unwrap()).unwrap();
    let out = Command::new(python)
        .arg("-B")
        .arg(here().join("parity.py"))
        .arg(runtimes)
        .arg(here())
        .arg(values.path())
        .output()
        .expect("running the Python SDK");
    assert!(
        out.status.success(),
        "parity.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).expect("parity.py prints JSON"))
}

/// Values whose Python `repr` we must write exactly: 3,000 floats from random bit patterns and decimal
/// magnitudes, every ASCII character, some Unicode, nested lists and dicts.
fn repr_values() -> Vec<Value> {
    let mut values = Vec::new();
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        // xorshift64*: deterministic, no dependency.
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    while values.len() < 2000 {
        let x = f64::from_bits(next());
        if x.is_finite() {
            values.push(json!(x));
        }
    }
    for i in 0..1000 {
        let exp = (next() % 45) as i32 - 22;
        let mantissa = (next() % 100_000) as f64 / 1000.0;
        values.push(json!(
            mantissa * 10f64.powi(exp) * if i % 2 == 0 { 1.0 } else { -1.0 }
        ));
    }
    for x in [
        0.0,
        1.0,
        0.1,
        1e-4,
        1e-5,
        1e15,
        1e16,
        123456789012345678.0,
        5e-324,
        f64::MAX,
    ] {
        values.push(json!(x));
    }
    let ascii: String = (0u8..128).map(char::from).collect();
    values.push(json!(ascii));
    for s in [
        "it's",
        "say \"hi\"",
        "both ' and \"",
        "naïve 中文 😀",
        "tab\tnew\nline\\",
        "",
    ] {
        values.push(json!(s));
    }
    values.push(json!({"a": [1, 2.5, "x", null, true, false], "b": {"c": [], "d": {}}}));
    values
}

fn to_py(v: &Value) -> PyValue {
    match v {
        Value::Null => PyValue::None,
        Value::Bool(b) => PyValue::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => PyValue::Int(i),
            None => PyValue::Float(n.as_f64().unwrap()),
        },
        Value::String(s) => PyValue::Str(s.clone()),
        Value::Array(items) => PyValue::List(items.iter().map(to_py).collect()),
        Value::Object(map) => {
            PyValue::Dict(map.iter().map(|(k, v)| (k.clone(), to_py(v))).collect())
        }
    }
}

fn runtime(name: &str) -> Runtime {
    let rt = kubetrain_jobset::builtin::runtimes()
        .into_iter()
        .find(|r| r.name() == name)
        .unwrap_or_else(|| panic!("no built-in runtime {name}"));
    runtime_view("ClusterTrainingRuntime", &rt.metadata, &rt.spec).unwrap()
}

fn func(name: &str) -> FunctionTrainer {
    FunctionTrainer::from_file(here().join("functions.py"), name).unwrap()
}

fn named(name: &str) -> TrainOptions {
    TrainOptions {
        name: Some(name.into()),
        ..TrainOptions::default()
    }
}

/// The Rust side of every case of parity.py.
#[allow(
    clippy::too_many_lines,
    reason = "a table test: one case per row, read top to bottom"
)]
fn cases() -> Vec<(
    &'static str,
    &'static str,
    TrainerSpec,
    Option<Initializer>,
    TrainOptions,
)> {
    let patch: kubetrain_api::TrainingRuntimeSpecPatch = serde_json::from_value(json!({
        "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
            "nodeSelector": {"pool": "gpu"}, "serviceAccountName": "trainer"}}}}}]}}
    }))
    .unwrap();
    vec![
        (
            "func-simple",
            "torch-distributed",
            func("train_simple").into(),
            None,
            named("func-simple"),
        ),
        (
            "func-args-packages",
            "torch-distributed",
            func("train_with_args")
                .with_func_args([
                    ("lr", PyValue::from(1e-05)),
                    ("epochs", 3.into()),
                    ("name", "it's a \"test\"".into()),
                    ("eps", (0.1 + 0.2).into()),
                    ("big", 1e16.into()),
                ])
                .with_packages(["torch==2.7.1", "transformers[torch]"])
                .with_num_nodes(2)
                .with_resources(
                    resources([("GPU", "2"), ("cpu", "8"), ("memory", "32Gi")]).unwrap(),
                )
                .with_env("A", "1")
                .with_env("B", "two")
                .into(),
            None,
            named("func-args-packages"),
        ),
        (
            "func-decorated-index-urls",
            "xgboost-distributed",
            func("train_decorated")
                .with_func_args([
                    (
                        "config",
                        PyValue::dict([
                            ("dropout", PyValue::from(0.1)),
                            ("use_gpu", false.into()),
                            ("opt", PyValue::None),
                            ("tags", vec!["a", "naïve"].into()),
                        ]),
                    ),
                    ("layers", PyValue::Tuple(vec![128.into()])),
                ])
                .with_packages(["numpy", "it's-odd"])
                .with_pip_index_urls([
                    "https://my.index/simple",
                    "https://extra.index/simple?x=1&y=2",
                ])
                .with_image("ghcr.io/example/train:1")
                .into(),
            None,
            named("func-decorated-index-urls"),
        ),
        (
            "func-tricky-mpi",
            "deepspeed-distributed",
            func("train_tricky")
                .with_func_args([("path", "/data/$RUN".into())])
                .with_packages(["deepspeed"])
                .into(),
            None,
            named("func-tricky-mpi"),
        ),
        (
            "func-nested",
            "xgboost-distributed",
            func("train_nested")
                .with_func_args([("x", PyValue::from(-2.5)), ("y", 100.0.into())])
                .into(),
            None,
            named("func-nested"),
        ),
        (
            "func-async",
            "torch-distributed",
            func("train_async")
                .with_func_args(Vec::<(String, PyValue)>::new())
                .into(),
            None,
            named("func-async"),
        ),
        (
            "torchtune-full",
            "torchtune-llama3.2-1b",
            TorchTuneConfig {
                dtype: Some(DataType::Bf16),
                batch_size: Some(8),
                epochs: Some(2),
                loss: Some(Loss::CeWithChunkedOutputLoss),
                num_nodes: Some(2),
                resources_per_node: Some(resources([("gpu", 2)]).unwrap()),
                ..TorchTuneConfig::default()
            }
            .into(),
            Some(
                Initializer::new()
                    .with_dataset(HuggingFaceDatasetInitializer::new(
                        "hf://tatsu-lab/alpaca/data",
                    ))
                    .with_model(HuggingFaceModelInitializer {
                        access_token: Some("hf_x".into()),
                        ..HuggingFaceModelInitializer::new("hf://meta-llama/Llama-3.2-1B-Instruct")
                    }),
            ),
            named("torchtune-full"),
        ),
        (
            "torchtune-lora-instruct",
            "torchtune-llama3.2-1b",
            TorchTuneConfig {
                peft_config: Some(LoraConfig {
                    apply_lora_to_mlp: Some(true),
                    lora_attn_modules: vec!["q_proj".into(), "k_proj".into()],
                    lora_rank: Some(8),
                    lora_alpha: Some(16),
                    lora_dropout: Some(0.05),
                    quantize_base: Some(false),
                    use_dora: Some(true),
                    ..LoraConfig::default()
                }),
                dataset_preprocess_config: Some(TorchTuneInstructDataset {
                    source: Some(DataFormat::Json),
                    split: Some("train[:10%]".into()),
                    train_on_input: Some(true),
                    new_system_prompt: Some("You are helpful.".into()),
                    column_map: vec![
                        ("input".into(), "question".into()),
                        ("output".into(), "answer".into()),
                    ],
                }),
                ..TorchTuneConfig::default()
            }
            .into(),
            Some(
                Initializer::new().with_dataset(HuggingFaceDatasetInitializer {
                    ignore_patterns: Some(vec!["*.md".into(), "*.txt".into()]),
                    ..HuggingFaceDatasetInitializer::new("tatsu-lab/alpaca/train.json")
                }),
            ),
            named("torchtune-lora-instruct"),
        ),
        (
            "torchtune-qlora-s3",
            "torchtune-llama3.2-1b",
            TorchTuneConfig {
                epochs: Some(1),
                batch_size: Some(0),
                dtype: Some(DataType::Fp32),
                peft_config: Some(LoraConfig {
                    quantize_base: Some(true),
                    ..LoraConfig::default()
                }),
                ..TorchTuneConfig::default()
            }
            .into(),
            Some(
                Initializer::new()
                    .with_dataset(S3DatasetInitializer {
                        endpoint: Some("http://minio:9000".into()),
                        region: Some("eu".into()),
                        access_key_id: Some("k".into()),
                        secret_access_key: Some("s".into()),
                        ..S3DatasetInitializer::new("s3://bucket/data")
                    })
                    .with_model(S3ModelInitializer {
                        role_arn: Some("arn:aws:iam::1:role/r".into()),
                        ..S3ModelInitializer::new("s3://bucket/model")
                    }),
            ),
            TrainOptions {
                labels: [("team".to_string(), "llm".to_string())].into(),
                annotations: [("note".to_string(), "qlora".to_string())].into(),
                active_deadline_seconds: Some(3600),
                ..named("torchtune-qlora-s3")
            },
        ),
        (
            "container-options",
            "torch-distributed",
            Trainer {
                image: Some("ghcr.io/example/train:2".into()),
                num_nodes: Some(3),
                resources_per_node: Some(
                    resources([
                        ("mig-1g.5gb", "1"),
                        ("Memory", "8Gi"),
                        ("example.com/Custom-NPU", "1"),
                    ])
                    .unwrap(),
                ),
                ..Trainer::default()
            }
            .into(),
            Some(Initializer::new().with_dataset(DataCacheInitializer {
                head_mem: Some("1Gi".into()),
                iam_role: Some("r".into()),
                ..DataCacheInitializer::new("cache://schema/table", "s3://b/meta.json", 3)
            })),
            TrainOptions {
                trainer_command: Some(vec!["python".into(), "-m".into(), "train".into()]),
                trainer_args: Some(vec!["--epochs".into(), "3".into()]),
                runtime_patch: Some(patch),
                ..named("container-options")
            },
        ),
    ]
}

/// Quantities as text (the SDK sends `2.0` for `{"gpu": 2}`, we send `"2"`: the same quantity), and no
/// empty `env` lists (the SDK sends `env: []` for an initializer without options, we leave it out: the API
/// server stores neither).
fn normalize(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|k, child| !(k == "env" && child.as_array().is_some_and(Vec::is_empty)));
            for (k, child) in map.iter_mut() {
                if k == "limits" || k == "requests" {
                    if let Value::Object(q) = child {
                        for value in q.values_mut() {
                            if let Some(f) = value.as_f64() {
                                *value = Value::String(if f.fract() == 0.0 {
                                    format!("{}", f as i64)
                                } else {
                                    f.to_string()
                                });
                            }
                        }
                    }
                } else {
                    normalize(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize),
        _ => {}
    }
}

#[test]
fn function_and_torchtune_trainers_build_what_the_python_sdk_builds() {
    let Some(sdk) = sdk_output() else { return };
    let cases = cases();
    let sdk_jobs = sdk["jobs"].as_object().unwrap();
    assert_eq!(
        sdk_jobs.len(),
        cases.len(),
        "every case of parity.py has a Rust twin"
    );
    let functions = cases.iter().filter(|c| c.0.starts_with("func-")).count();
    let torchtune = cases
        .iter()
        .filter(|c| c.0.starts_with("torchtune-"))
        .count();
    assert!(
        functions >= 5 && torchtune >= 3,
        "{functions} functions, {torchtune} TorchTune configs"
    );
    for (case, rt, trainer, initializer, options) in cases {
        let job = build_trainjob(
            &runtime(rt),
            Some(&trainer),
            initializer.as_ref(),
            &options,
            "default",
        )
        .unwrap_or_else(|e| panic!("{case}: {e}"));
        let mut ours = serde_json::to_value(&job).unwrap();
        // The SDK's body has no namespace (it is in the URL) and no status.
        ours["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("namespace");
        ours.as_object_mut().unwrap().remove("status");
        let mut theirs = sdk_jobs[case].clone();
        normalize(&mut ours);
        normalize(&mut theirs);
        // Field by field first, so a failure names the field (the command text is long).
        for key in [
            "command",
            "args",
            "env",
            "numNodes",
            "image",
            "resourcesPerNode",
        ] {
            assert_eq!(
                ours["spec"]["trainer"][key], theirs["spec"]["trainer"][key],
                "{case}: spec.trainer.{key}"
            );
        }
        assert_eq!(ours, theirs, "{case}: the whole TrainJob");
    }
}

#[test]
fn runtimes_read_as_the_python_sdk_reads_them() {
    let Some(sdk) = sdk_output() else { return };
    for (name, theirs) in sdk["runtimes"].as_object().unwrap() {
        let ours = runtime(name);
        let t = &ours.trainer;
        assert_eq!(theirs["kind"], ours.kind, "{name}");
        assert_eq!(theirs["trainer_type"], t.trainer_type, "{name}");
        assert_eq!(theirs["framework"], t.framework, "{name}");
        assert_eq!(theirs["image"].as_str(), t.image.as_deref(), "{name}");
        assert_eq!(theirs["num_nodes"], t.num_nodes, "{name}");
        assert_eq!(theirs["device"], t.device, "{name}");
        assert_eq!(theirs["command"], json!(t.command), "{name}");
        // The SDK reads a YAML `2` as the quantity 2.0 and prints "2.0" (then cannot multiply it by the
        // nodes); we print "2". Compare the numbers.
        let count = |s: &str| s.parse::<f64>().ok();
        let theirs_count = theirs["device_count"].as_str().unwrap();
        match (count(theirs_count), count(&t.device_count)) {
            (Some(a), Some(b)) => assert_eq!(a, b, "{name}: device_count"),
            _ => assert_eq!(theirs_count, t.device_count, "{name}: device_count"),
        }
    }
}

#[test]
fn func_args_are_written_as_python_repr_writes_them() {
    let Some(sdk) = sdk_output() else { return };
    let theirs = sdk["reprs"].as_array().unwrap();
    let values = repr_values();
    assert_eq!(theirs.len(), values.len());
    for (v, want) in values.iter().zip(theirs) {
        assert_eq!(to_py(v).to_string(), want.as_str().unwrap(), "repr of {v}");
    }
}
