//! Criterion benchmarks for kubetrain; each file under `benches/` is one bench target.

/// The TrainJob of the in-process render and validation benches: torch-distributed, 8 nodes, an image, a
/// command, one env var and CPU/memory/GPU limits (the shape of the `kubetrain render` stream's documents).
pub const TORCH_8_NODES: &str = "
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: bench, namespace: default, uid: 5f0c1d2e}
spec:
  runtimeRef: {name: torch-distributed}
  trainer:
    numNodes: 8
    image: example.com/train:1
    command: [torchrun, train.py]
    env: [{name: EPOCHS, value: '3'}]
    resourcesPerNode: {limits: {cpu: '8', memory: 32Gi, nvidia.com/gpu: '8'}}
";
