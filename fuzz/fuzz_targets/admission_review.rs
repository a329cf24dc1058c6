//! Arbitrary request bodies posted to every admission route: the webhook must answer (a review or a
//! "bad review" error) and never panic. Valid JSON is also tried as the object of a well-formed review,
//! so the decoders and rules behind each route see structured input. Cluster reads answer 404.
#![no_main]

use std::sync::OnceLock;

use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use kubetrain_controller::webhook::{Admission, Route};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    })
}

fn admission() -> Admission {
    let not_found = tower::service_fn(|_request: Request<Body>| async {
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "reason": "NotFound", "code": 404, "message": "not found"});
        Ok::<_, std::convert::Infallible>(
            Response::builder()
                .status(404)
                .body(Body::from(serde_json::to_vec(&status).unwrap()))
                .unwrap(),
        )
    });
    Admission::new(Client::new(not_found, "default"))
}

fn wrapped(object: &Value, operation: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "fuzz",
            "kind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"},
            "resource": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "resource": "trainjobs"},
            "operation": operation,
            "userInfo": {},
            "object": object,
            "oldObject": if operation == "UPDATE" { object.clone() } else { Value::Null },
        }
    }))
    .unwrap()
}

fuzz_target!(|data: &[u8]| {
    runtime().block_on(async {
        let admission = admission();
        for route in Route::ALL {
            let _ = admission.review(route, data).await;
            if let Ok(object) = serde_json::from_slice::<Value>(data) {
                for operation in ["CREATE", "UPDATE"] {
                    let _ = admission.review(route, &wrapped(&object, operation)).await;
                }
            }
        }
    });
});
