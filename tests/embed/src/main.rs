//! Renders the quick-start TrainJob through the `kubetrain` facade and prints the JobSet's name and its
//! `PET_NNODES`, using the Kubernetes types the facade re-exports.

use kubetrain::api::{Document, parse_documents};
use kubetrain::jobset::{Observed, builtin, render, resolve, ssh::seeded_rng};
use kubetrain::k8s_openapi::api::core::v1::EnvVar;

fn main() {
    let docs = parse_documents(
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: embed, namespace: default}\n\
         spec: {runtimeRef: {name: torch-distributed}, trainer: {numNodes: 2}}\n",
    )
    .expect("a TrainJob");
    let Document::TrainJob(job) = &docs[0].document else {
        panic!("expected a TrainJob");
    };
    let catalog = builtin::catalog();
    let runtime = resolve(&catalog, job).expect("the built-in runtime");
    let rendered = render(job, runtime, &Observed::default(), &mut seeded_rng(0)).expect("render");
    let jobset = rendered.objects[0].as_jobset().expect("a JobSet first");
    let pod = jobset.spec.replicated_jobs[0]
        .template
        .spec
        .as_ref()
        .and_then(|j| j.template.spec.as_ref());
    let env: &[EnvVar] = pod
        .and_then(|p| p.containers[0].env.as_deref())
        .unwrap_or_default();
    let nnodes = env
        .iter()
        .find(|e| e.name == "PET_NNODES")
        .and_then(|e| e.value.as_deref());
    println!(
        "jobset {} PET_NNODES={}",
        jobset.metadata.name.as_deref().unwrap_or("?"),
        nnodes.unwrap_or("?")
    );
}
