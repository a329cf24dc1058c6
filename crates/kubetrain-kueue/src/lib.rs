//! A pure model of Kueue admission: quota tree, scheduling cycle, preemption, fair sharing,
//! explanations and a simulator.
//!
//! Part of [kubetrain](https://github.com/kubetrain/kubetrain), Kubeflow Trainer V2 in Rust.
//! It follows kubernetes-sigs/kueue v0.20 (`kueue.x-k8s.io/v1beta2`, v1beta1 read too) as
//! described in the project's `kueue.md` notes: objects are read from real Kueue YAML, checked
//! with Kueue's webhook rules, and scheduled cycle by cycle with Kueue's messages.
//!
//! One call answers for one workload: [`admit_workload`] (a Workload and a setup → a typed
//! [`AdmissionVerdict`]); with the `trainjob` feature, `admit(&trainjob, &runtime_catalog, &setup)` builds the
//! Workload Kueue's TrainJob integration builds first (module `trainjob`).
//!
//! The entry points are re-exported here: [`Setup`] (read Kueue YAML), [`Model`] (validate and
//! resolve it), [`Scheduler`] (scheduling cycles; read a workload's state with its methods),
//! [`simulate`] (the discrete-event simulator, [`ScenarioSpec`] → [`SimOutcome`]), [`explain()`] and the
//! one-call [`admit_workload`]; the modules hold the rest.
//!
//! ```
//! use kubetrain_kueue::{Model, Scheduler, Setup};
//! let setup = Setup::from_yaml(r#"
//! apiVersion: kueue.x-k8s.io/v1beta2
//! kind: ResourceFlavor
//! metadata: {name: a100}
//! ---
//! apiVersion: kueue.x-k8s.io/v1beta2
//! kind: ClusterQueue
//! metadata: {name: team}
//! spec:
//!   namespaceSelector: {}
//!   resourceGroups:
//!   - coveredResources: [nvidia.com/gpu]
//!     flavors: [{name: a100, resources: [{name: nvidia.com/gpu, nominalQuota: 8}]}]
//! ---
//! apiVersion: kueue.x-k8s.io/v1beta2
//! kind: LocalQueue
//! metadata: {name: q, namespace: ml}
//! spec: {clusterQueue: team}
//! ---
//! apiVersion: kueue.x-k8s.io/v1beta2
//! kind: Workload
//! metadata: {name: big, namespace: ml}
//! spec:
//!   queueName: q
//!   podSets:
//!   - name: main
//!     count: 12
//!     template:
//!       spec:
//!         containers: [{name: c, resources: {requests: {nvidia.com/gpu: 1}}}]
//! "#).unwrap();
//! let mut s = Scheduler::new(Model::build(&setup).unwrap());
//! s.arrive_all();
//! s.cycle();
//! let big = s.workload_id("ml/big").unwrap();
//! let c = s.condition(big, "QuotaReserved").unwrap();
//! assert_eq!(c.reason, "ExceedsMaxQuota");
//! assert_eq!(c.message, "couldn't assign flavors to pod set main: insufficient quota for \
//!     nvidia.com/gpu in flavor a100, previously considered podsets requests (0) + current \
//!     podset request (12) > maximum capacity (8)");
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod admit;
pub mod api;
pub mod bridge;
pub mod error;
pub mod explain;
pub mod load;
pub mod model;
pub mod multikueue;
pub mod quantity;
pub mod quota;
pub mod recorded;
pub mod sched;
pub mod sim;
pub mod tas;
mod time;
#[cfg(feature = "trainjob")]
pub mod trainjob;
pub mod validate;

pub use admit::{AdmissionVerdict, admit_workload};
pub use error::{LoadError, SetupFieldError};
pub use explain::{Explanation, explain};
pub use load::Setup;
pub use model::Model;
pub use sched::Scheduler;
pub use sim::engine::{SimOutcome, simulate};
pub use sim::scenario::ScenarioSpec;
#[cfg(feature = "trainjob")]
pub use trainjob::{TrainJobError, admit};

// The README's example is compiled and run with the doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
