//! The client's integration tests in one binary (one link instead of eight): the Kubernetes backend on the
//! in-memory API server, the local runner, its status endpoint and queue, the progress reporter, the SDK
//! builder, and parity with Kubeflow's Python SDK.

mod common;
mod kubernetes_mock;
mod local_plugins;
mod local_queue;
mod local_restarts;
mod local_runner;
mod local_status;
mod optimize_cluster;
mod progress_reporter;
mod python_sdk_parity;
mod sdk_builder;
