# What the Python SDK (kubeflow==0.5.0) builds for the parity cases of tests/python_sdk_parity.rs, as JSON:
# {"runtimes": {name: Runtime view}, "jobs": {case: TrainJob body sent to the API server}}.
# {"reprs": [...]} holds Python's repr() of every value in VALUES_JSON (func_args are written with repr).
# Usage: python parity.py RUNTIMES_DIR FUNCTIONS_DIR VALUES_JSON
import dataclasses
import importlib
import json
import os
import sys

import yaml
from kubeflow_trainer_api import models

from kubeflow.trainer.backends.kubernetes.backend import KubernetesBackend
from kubeflow.trainer.types import types
from kubeflow.trainer import options as o

runtimes_dir, functions_dir = sys.argv[1], sys.argv[2]
sys.path.insert(0, functions_dir)
fns = importlib.import_module("functions")


class CapturingApi:
    """Stands in for the Kubernetes API: keeps the TrainJob the SDK creates."""

    def create_namespaced_custom_object(self, group, version, namespace, plural, body):
        self.body = body


backend = KubernetesBackend.__new__(KubernetesBackend)
backend.custom_api = CapturingApi()
backend.namespace = "default"

runtimes = {}
for name in ["torch-distributed", "deepspeed-distributed", "xgboost-distributed", "torchtune-llama3.2-1b"]:
    with open(os.path.join(runtimes_dir, name + ".yaml")) as f:
        cr = models.TrainerV1alpha1ClusterTrainingRuntime.from_dict(yaml.safe_load(f))
    runtimes[name] = backend._KubernetesBackend__get_runtime_from_cr(cr)


def view(rt):
    t = rt.trainer
    return {
        "name": rt.name,
        "kind": rt.kind.value,
        "trainer_type": "builtin" if t.trainer_type == types.TrainerType.BUILTIN_TRAINER else "custom",
        "framework": t.framework,
        "image": t.image,
        "num_nodes": t.num_nodes,
        "device": t.device,
        "device_count": t.device_count,
        "command": list(t.command),
    }


jobs = {}


def case(name, runtime, **kwargs):
    backend.train(runtime=runtimes[runtime], options=[o.Name(name)] + kwargs.pop("options", []), **kwargs)
    jobs[name] = backend.custom_api.body


case("func-simple", "torch-distributed", trainer=types.CustomTrainer(func=fns.train_simple))
case(
    "func-args-packages",
    "torch-distributed",
    trainer=types.CustomTrainer(
        func=fns.train_with_args,
        func_args={"lr": 1e-05, "epochs": 3, "name": "it's a \"test\"", "eps": 0.1 + 0.2, "big": 1e16},
        packages_to_install=["torch==2.7.1", "transformers[torch]"],
        num_nodes=2,
        resources_per_node={"GPU": 2, "cpu": "8", "memory": "32Gi"},
        env={"A": "1", "B": "two"},
    ),
)
case(
    "func-decorated-index-urls",
    "xgboost-distributed",
    trainer=types.CustomTrainer(
        func=fns.train_decorated,
        func_args={"config": {"dropout": 0.1, "use_gpu": False, "opt": None, "tags": ["a", "naïve"]}, "layers": (128,)},
        packages_to_install=["numpy", "it's-odd"],
        pip_index_urls=["https://my.index/simple", "https://extra.index/simple?x=1&y=2"],
        image="ghcr.io/example/train:1",
    ),
)
case(
    "func-tricky-mpi",
    "deepspeed-distributed",
    trainer=types.CustomTrainer(func=fns.train_tricky, func_args={"path": "/data/$RUN"}, packages_to_install=["deepspeed"]),
)
case("func-nested", "xgboost-distributed", trainer=types.CustomTrainer(func=fns.outer(), func_args={"x": -2.5, "y": 100.0}))
case("func-async", "torch-distributed", trainer=types.CustomTrainer(func=fns.train_async, func_args={}))

case(
    "torchtune-full",
    "torchtune-llama3.2-1b",
    trainer=types.BuiltinTrainer(
        config=types.TorchTuneConfig(
            dtype=types.DataType.BF16,
            batch_size=8,
            epochs=2,
            loss=types.Loss.CEWithChunkedOutputLoss,
            num_nodes=2,
            resources_per_node={"gpu": 2},
        )
    ),
    initializer=types.Initializer(
        dataset=types.HuggingFaceDatasetInitializer(storage_uri="hf://tatsu-lab/alpaca/data"),
        model=types.HuggingFaceModelInitializer(storage_uri="hf://meta-llama/Llama-3.2-1B-Instruct", access_token="hf_x"),
    ),
)
case(
    "torchtune-lora-instruct",
    "torchtune-llama3.2-1b",
    trainer=types.BuiltinTrainer(
        config=types.TorchTuneConfig(
            peft_config=types.LoraConfig(
                apply_lora_to_mlp=True,
                lora_attn_modules=["q_proj", "k_proj"],
                lora_rank=8,
                lora_alpha=16,
                lora_dropout=0.05,
                quantize_base=False,
                use_dora=True,
            ),
            dataset_preprocess_config=types.TorchTuneInstructDataset(
                source=types.DataFormat.JSON,
                split="train[:10%]",
                train_on_input=True,
                new_system_prompt="You are helpful.",
                column_map={"input": "question", "output": "answer"},
            ),
        )
    ),
    initializer=types.Initializer(dataset=types.HuggingFaceDatasetInitializer(storage_uri="tatsu-lab/alpaca/train.json", ignore_patterns=["*.md", "*.txt"])),
)
case(
    "torchtune-qlora-s3",
    "torchtune-llama3.2-1b",
    trainer=types.BuiltinTrainer(
        config=types.TorchTuneConfig(epochs=1, batch_size=0, dtype=types.DataType.FP32, peft_config=types.LoraConfig(quantize_base=True))
    ),
    initializer=types.Initializer(
        dataset=types.S3DatasetInitializer(storage_uri="s3://bucket/data", endpoint="http://minio:9000", region="eu", access_key_id="k", secret_access_key="s"),
        model=types.S3ModelInitializer(storage_uri="s3://bucket/model", role_arn="arn:aws:iam::1:role/r"),
    ),
    options=[o.Labels({"team": "llm"}), o.Annotations({"note": "qlora"}), o.ActiveDeadlineSeconds(3600)],
)
case(
    "container-options",
    "torch-distributed",
    trainer=types.CustomTrainerContainer(image="ghcr.io/example/train:2", num_nodes=3, resources_per_node={"mig-1g.5gb": 1, "Memory": "8Gi", "example.com/Custom-NPU": 1}),
    initializer=types.Initializer(dataset=types.DataCacheInitializer(storage_uri="cache://schema/table", metadata_loc="s3://b/meta.json", num_data_nodes=3, head_mem="1Gi", iam_role="r")),
    options=[
        o.TrainerCommand(["python", "-m", "train"]),
        o.TrainerArgs(["--epochs", "3"]),
        o.RuntimePatch(
            training_runtime_spec=o.TrainingRuntimeSpecPatch(
                template=o.JobSetTemplatePatch(
                    spec=o.JobSetSpecPatch(
                        replicated_jobs=[
                            o.ReplicatedJobPatch(
                                name="node",
                                template=o.JobTemplatePatch(
                                    spec=o.JobSpecPatch(
                                        template=o.PodTemplatePatch(
                                            spec=o.PodSpecPatch(node_selector={"pool": "gpu"}, service_account_name="trainer")
                                        )
                                    )
                                ),
                            )
                        ]
                    )
                )
            )
        ),
    ],
)

with open(sys.argv[3]) as f:
    reprs = [repr(v) for v in json.load(f)]

print(json.dumps({"runtimes": {k: view(v) for k, v in runtimes.items()}, "jobs": jobs, "reprs": reprs}, indent=1, sort_keys=True, default=str))
