//! The store's answer to one request, one function per verb and resource kind.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use http::{Method, Request, StatusCode};
use serde_json::{Value, json};

use super::{
    Key, Route, SERVED, State, lock, merge, query, resource, route, selects, status_reply,
    token_review, version,
};

/// A reply: the HTTP status and the JSON body.
type Reply = (StatusCode, Value);

/// What a list reads of its request: the label selector and the page asked for.
struct Page {
    selector: String,
    limit: Option<usize>,
    start: usize,
}

/// Routes a (non-watch, non-log) request to the handler of its verb and resource.
pub(super) fn answer(request: Request<Vec<u8>>, state: &State) -> Reply {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let page = Page {
        selector: query(&request, "labelSelector").unwrap_or_default(),
        limit: query(&request, "limit").and_then(|l| l.parse::<usize>().ok()),
        start: query(&request, "continue")
            .and_then(|c| c.parse::<usize>().ok())
            .unwrap_or(0),
    };
    let content_type = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body: Value = serde_json::from_slice(request.body()).unwrap_or(Value::Null);

    if method == Method::GET && path == "/version" {
        return (StatusCode::OK, version());
    }
    match (method, route(&path)) {
        (Method::GET, Some(Route::Discovery(api_version))) => discovery(state, &api_version),
        (
            Method::GET,
            Some(Route::Collection {
                api_version,
                plural,
                namespace,
            }),
        ) => list(state, &api_version, &plural, namespace.as_deref(), &page),
        (Method::POST, Some(Route::Collection { plural, .. })) if plural == "tokenreviews" => {
            state.counters.token_reviews.fetch_add(1, Ordering::Relaxed);
            (
                StatusCode::CREATED,
                token_review(&lock(&state.tokens), body),
            )
        }
        (Method::POST, Some(Route::Collection { plural, .. })) if plural == "events" => {
            state.counters.events.fetch_add(1, Ordering::Relaxed);
            (StatusCode::CREATED, body)
        }
        (
            Method::POST,
            Some(Route::Collection {
                api_version,
                plural,
                namespace,
            }),
        ) if SERVED
            .iter()
            .any(|(v, p, ..)| *v == api_version && *p == plural) =>
        {
            create(state, api_version, plural, namespace, body)
        }
        (Method::GET, Some(Route::Object { key, .. })) => get(state, &key),
        (Method::PATCH, Some(Route::Object { key, status: false }))
            if content_type.starts_with("application/apply-patch") =>
        {
            apply(state, key, body)
        }
        (Method::PATCH, Some(Route::Object { key, status: false }))
            if content_type.starts_with("application/merge-patch+json") =>
        {
            merge_patch(state, key, &body)
        }
        (Method::PATCH, Some(Route::Object { key, status: true })) => {
            patch_status(state, key, &body)
        }
        (Method::PUT, Some(Route::Object { key, status: false })) => replace(state, key, body),
        (Method::DELETE, Some(Route::Object { key, .. })) => delete(state, &key),
        (method, _) => status_reply(
            405,
            "MethodNotAllowed",
            format!("the fake API server does not serve {method} {path}"),
        ),
    }
}

/// The API server's NotFound, naming the resource with its group: `jobsets.jobset.x-k8s.io "x" not found`.
fn missing(key: &Key) -> Reply {
    status_reply(
        404,
        "NotFound",
        format!("{} {:?} not found", resource(&key.0, &key.1), key.3),
    )
}

/// The API server's answer to a write with a stale `resourceVersion`.
fn conflict(key: &Key) -> Reply {
    status_reply(
        409,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on {} {:?}: the object has been modified; please apply your changes to the latest version and try again",
            resource(&key.0, &key.1),
            key.3
        ),
    )
}

/// The stored object `key`, parsed.
fn stored(objects: &BTreeMap<Key, Vec<u8>>, key: &Key) -> Option<Value> {
    objects
        .get(key)
        .and_then(|b| serde_json::from_slice(b).ok())
}

/// Stamps `object` (uid and creationTimestamp when `create`, a new resourceVersion always), stores it under
/// `key` and answers it with `status`.
fn store(
    state: &State,
    objects: &mut BTreeMap<Key, Vec<u8>>,
    key: Key,
    mut object: Value,
    create: bool,
    status: StatusCode,
) -> Reply {
    state.stamp(&mut object, create);
    objects.insert(key, serde_json::to_vec(&object).unwrap_or_default());
    (status, object)
}

/// `GET /apis/<group>/<version>`: the served resources of the group version, 404 for one not served.
fn discovery(state: &State, api_version: &str) -> Reply {
    state.counters.discovery.fetch_add(1, Ordering::Relaxed);
    let resources: Vec<Value> = SERVED
        .iter()
        .filter(|(v, ..)| *v == api_version)
        .map(|(_, plural, kind, namespaced)| {
            json!({"name": plural, "singularName": "", "namespaced": namespaced, "kind": kind,
                   "verbs": ["create", "delete", "get", "list", "patch", "watch"]})
        })
        .collect();
    if resources.is_empty() {
        // What the API server says for a group it does not serve.
        return status_reply(
            404,
            "NotFound",
            "the server could not find the requested resource".into(),
        );
    }
    (
        StatusCode::OK,
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": api_version,
               "resources": resources}),
    )
}

/// `GET` of a collection: the objects the label selector matches, one page at a time (`limit`, `continue`).
fn list(
    state: &State,
    api_version: &str,
    plural: &str,
    namespace: Option<&str>,
    page: &Page,
) -> Reply {
    state.counters.lists.fetch_add(1, Ordering::Relaxed);
    let empty = serde_json::Map::new();
    let selector = &page.selector;
    if selects(selector, &empty).is_none() {
        return status_reply(
            400,
            "BadRequest",
            format!("unable to parse requirement: {selector:?}"),
        );
    }
    let objects = lock(&state.objects);
    let matching: Vec<Value> = objects
        .iter()
        .filter(|((v, p, ns, _), _)| {
            *v == api_version && *p == plural && namespace.is_none_or(|n| n == ns)
        })
        .filter_map(|(_, b)| serde_json::from_slice::<Value>(b).ok())
        .filter(|o| {
            let labels = o["metadata"]["labels"].as_object().unwrap_or(&empty);
            selects(selector, labels) == Some(true)
        })
        .collect();
    let total = matching.len();
    let items: Vec<Value> = matching
        .into_iter()
        .skip(page.start)
        .take(page.limit.unwrap_or(usize::MAX))
        .collect();
    let next = page.start + items.len();
    let mut metadata =
        json!({"resourceVersion": state.revision.load(Ordering::Relaxed).max(1).to_string()});
    if next < total {
        metadata["continue"] = json!(next.to_string());
    }
    let kind = SERVED
        .iter()
        .find(|(v, p, ..)| *v == api_version && *p == plural)
        .map_or("List", |(_, _, k, _)| k);
    (
        StatusCode::OK,
        json!({"kind": format!("{kind}List"), "apiVersion": api_version,
               "metadata": metadata, "items": items}),
    )
}

/// `POST` to a served collection: stores a new object, 409 when one of the name exists.
fn create(
    state: &State,
    api_version: String,
    plural: String,
    namespace: Option<String>,
    mut object: Value,
) -> Reply {
    state.counters.creates.fetch_add(1, Ordering::Relaxed);
    let Some(name) = object["metadata"]["name"].as_str().map(str::to_owned) else {
        return status_reply(
            422,
            "Invalid",
            format!("{plural}: metadata.name: Required value: name is required"),
        );
    };
    let key = (api_version, plural, namespace.unwrap_or_default(), name);
    let mut objects = lock(&state.objects);
    if objects.contains_key(&key) {
        return status_reply(
            409,
            "AlreadyExists",
            format!("{} {:?} already exists", resource(&key.0, &key.1), key.3),
        );
    }
    if !key.2.is_empty() {
        object["metadata"]["namespace"] = json!(key.2);
    }
    store(state, &mut objects, key, object, true, StatusCode::CREATED)
}

/// `GET` of one object.
fn get(state: &State, key: &Key) -> Reply {
    state.counters.gets.fetch_add(1, Ordering::Relaxed);
    stored(&lock(&state.objects), key).map_or_else(|| missing(key), |v| (StatusCode::OK, v))
}

/// Server-side apply: the body replaces spec and metadata; the status and uid stay the server's.
fn apply(state: &State, key: Key, mut object: Value) -> Reply {
    state.counters.applies.fetch_add(1, Ordering::Relaxed);
    let mut objects = lock(&state.objects);
    let existing = stored(&objects, &key);
    if let Some(old) = &existing {
        if let Some(status) = old.get("status") {
            object["status"] = status.clone();
        }
        if let Some(uid) = old["metadata"].get("uid") {
            object["metadata"]["uid"] = uid.clone();
        }
    }
    let create = existing.is_none();
    store(state, &mut objects, key, object, create, StatusCode::OK)
}

/// A JSON merge patch of an existing object, 409 when it names a stale `resourceVersion`.
fn merge_patch(state: &State, key: Key, patch: &Value) -> Reply {
    state.counters.merge_patches.fetch_add(1, Ordering::Relaxed);
    let mut objects = lock(&state.objects);
    let Some(mut object) = stored(&objects, &key) else {
        return missing(&key);
    };
    let expected = patch["metadata"].get("resourceVersion");
    if expected.is_some_and(|v| *v != object["metadata"]["resourceVersion"]) {
        return conflict(&key);
    }
    merge(&mut object, patch);
    store(state, &mut objects, key, object, false, StatusCode::OK)
}

/// A merge patch of the `status` subresource: only the patch's `status` is merged.
fn patch_status(state: &State, key: Key, patch: &Value) -> Reply {
    state
        .counters
        .status_patches
        .fetch_add(1, Ordering::Relaxed);
    let mut objects = lock(&state.objects);
    let Some(mut object) = stored(&objects, &key) else {
        return missing(&key);
    };
    if let Some(status) = patch.get("status") {
        merge(
            object
                .as_object_mut()
                .map(|o| o.entry("status").or_insert(json!({})))
                .unwrap_or(&mut Value::Null),
            status,
        );
    }
    store(state, &mut objects, key, object, false, StatusCode::OK)
}

/// `PUT` of an existing object, with optimistic concurrency as on the API server: a stale
/// `resourceVersion` loses.
fn replace(state: &State, key: Key, mut object: Value) -> Reply {
    state.counters.replaces.fetch_add(1, Ordering::Relaxed);
    let mut objects = lock(&state.objects);
    let Some(old) = stored(&objects, &key) else {
        return missing(&key);
    };
    let expected = object["metadata"].get("resourceVersion");
    if expected.is_some_and(|v| *v != old["metadata"]["resourceVersion"]) {
        return conflict(&key);
    }
    if let Some(uid) = old["metadata"].get("uid") {
        object["metadata"]["uid"] = uid.clone();
    }
    store(state, &mut objects, key, object, false, StatusCode::OK)
}

/// `DELETE` of one object.
fn delete(state: &State, key: &Key) -> Reply {
    state.counters.deletes.fetch_add(1, Ordering::Relaxed);
    match lock(&state.objects).remove(key) {
        Some(_) => (
            StatusCode::OK,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
        ),
        None => missing(key),
    }
}
