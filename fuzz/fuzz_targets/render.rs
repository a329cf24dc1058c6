//! Arbitrary bytes as a YAML stream of TrainJobs and runtimes: resolving and rendering every TrainJob (valid
//! or not, against its runtimes and the built-in ones, with and without the TrainJobStatus plugin) must never
//! panic. Flux TrainJobs take the script and CURVE-certificate paths.
#![no_main]

use kubetrain_api::{Document, RuntimeCatalog, parse_documents};
use kubetrain_jobset::{
    Observed, RenderOptions, StatusServer, TrainJobStatusOptions, builtin, render, render_with,
    resolve, ssh::seeded_rng,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(documents) = parse_documents(text) else {
        return;
    };
    let mut catalog = RuntimeCatalog::new();
    for document in &documents {
        catalog.add_document(&document.document);
    }
    for runtime in builtin::runtimes() {
        catalog.add_cluster_if_absent(runtime);
    }
    for document in &documents {
        let Document::TrainJob(job) = &document.document else {
            continue;
        };
        let Ok(runtime) = resolve(&catalog, job) else {
            continue;
        };
        let _ = render(job, runtime, &Observed::default(), &mut seeded_rng(0));
        let status = RenderOptions {
            trainjob_status: Some(TrainJobStatusOptions {
                server: StatusServer::default(),
                ca_cert: "ca".to_owned(),
            }),
        };
        let _ = render_with(job, runtime, &Observed::default(), &status, &mut seeded_rng(0));
    }
});
