//! Laws of the strategic-merge-patch engine: the empty patch is the identity, and a patch is idempotent.

use kubetrain_merge::smp::{Schema, strategic_merge_patch};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// A small pool of names so that patch items often hit original items.
fn name() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "c", "d", "e"]).prop_map(str::to_owned)
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<bool>().prop_map(Value::Bool),
        (0i64..100).prop_map(|n| json!(n)),
        "[a-z]{0,4}".prop_map(Value::String),
    ]
}

/// Lists keyed by `key` with unique keys, as the API server guarantees for map lists.
fn keyed_list(
    key: &'static str,
    item: impl Strategy<Value = Map<String, Value>>,
) -> impl Strategy<Value = Value> {
    prop::collection::btree_map(name(), item, 0..4).prop_map(move |m| {
        Value::Array(
            m.into_iter()
                .map(|(k, mut v)| {
                    v.insert(key.to_owned(), Value::String(k));
                    Value::Object(v)
                })
                .collect(),
        )
    })
}

fn small_map() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map(name(), scalar(), 0..3).prop_map(|m| m.into_iter().collect())
}

fn container(patch: bool) -> impl Strategy<Value = Map<String, Value>> {
    let value = if patch {
        prop_oneof![3 => scalar(), 1 => Just(Value::Null)].boxed()
    } else {
        scalar().boxed()
    };
    (
        keyed_list("name", small_map()),
        keyed_list("mountPath", small_map()),
        prop::option::of(value),
        prop::option::of(prop::collection::vec("[a-z]{1,3}", 0..3)),
    )
        .prop_map(|(env, mounts, image, args)| {
            let mut m = Map::new();
            m.insert("env".into(), env);
            m.insert("volumeMounts".into(), mounts);
            if let Some(image) = image {
                m.insert("image".into(), image);
            }
            if let Some(args) = args {
                m.insert("args".into(), json!(args));
            }
            m
        })
}

fn pod_spec(patch: bool) -> impl Strategy<Value = Value> {
    (
        keyed_list("name", container(patch)),
        keyed_list("name", small_map()),
        prop::option::of(small_map()),
        prop::option::of(prop::collection::vec(small_map(), 0..3)),
    )
        .prop_map(|(containers, volumes, selector, tolerations)| {
            let mut m = Map::new();
            m.insert("containers".into(), containers);
            m.insert("volumes".into(), volumes);
            if let Some(s) = selector {
                m.insert("nodeSelector".into(), Value::Object(s));
            }
            if let Some(t) = tolerations {
                m.insert(
                    "tolerations".into(),
                    Value::Array(t.into_iter().map(Value::Object).collect()),
                );
            }
            Value::Object(m)
        })
}

fn jobset_spec(patch: bool) -> impl Strategy<Value = Value> {
    prop::collection::btree_map(name(), pod_spec(patch), 0..3).prop_map(|jobs| {
        json!({"replicatedJobs": jobs.into_iter().map(|(name, pod)| json!({
            "name": name,
            "template": {"spec": {"template": {"spec": pod}}}
        })).collect::<Vec<_>>()})
    })
}

proptest! {
    #[test]
    fn empty_patch_is_identity(original in jobset_spec(false)) {
        let got = strategic_merge_patch(&original, &json!({}), Schema::JobSetSpec).unwrap();
        prop_assert_eq!(got, original);
    }

    #[test]
    fn patch_is_idempotent(original in jobset_spec(false), patch in jobset_spec(true)) {
        let once = strategic_merge_patch(&original, &patch, Schema::JobSetSpec).unwrap();
        let twice = strategic_merge_patch(&once, &patch, Schema::JobSetSpec).unwrap();
        prop_assert_eq!(twice, once);
    }

    #[test]
    fn patch_keys_win(original in jobset_spec(false), patch in jobset_spec(false)) {
        // A patch without nulls or directives leaves every patched replicatedJob name present.
        let got = strategic_merge_patch(&original, &patch, Schema::JobSetSpec).unwrap();
        let names = |v: &Value| -> Vec<String> {
            v["replicatedJobs"].as_array().unwrap().iter().map(|j| j["name"].as_str().unwrap().to_owned()).collect()
        };
        let got_names = names(&got);
        for n in names(&patch).iter().chain(names(&original).iter()) {
            prop_assert!(got_names.contains(n));
        }
    }
}
