use super::*;
use serde_json::json;

fn smp(original: Value, patch: Value, schema: Schema) -> Value {
    strategic_merge_patch(&original, &patch, schema).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn maps_merge_and_null_deletes() {
    let got = smp(
        json!({"nodeSelector": {"a": "1", "b": "2"}, "hostNetwork": true}),
        json!({"nodeSelector": {"b": null, "c": "3"}, "hostNetwork": null}),
        Schema::PodSpec,
    );
    assert_eq!(got, json!({"nodeSelector": {"a": "1", "c": "3"}}));
}

#[test]
fn keyed_lists_merge_in_upstream_order() {
    // Table of (original env names, patch env names, expected order), as normalizeElementOrder yields.
    let cases: &[(&[&str], &[&str], &[&str])] = &[
        (&["A", "B", "C"], &["C", "D"], &["A", "B", "C", "D"]),
        (&["A", "B", "C"], &["D", "A"], &["D", "A", "B", "C"]),
        (&["A", "B"], &[], &["A", "B"]),
        (&[], &["X", "Y"], &["X", "Y"]),
        (&["A", "B", "C"], &["B"], &["A", "B", "C"]),
        (&["A", "B", "C"], &["C", "A"], &["B", "C", "A"]),
        // Without $setElementOrder a new item goes before the original-only items it is compared with.
        (&["a", "b"], &["c"], &["c", "a", "b"]),
        (&["b"], &["c"], &["c", "b"]),
    ];
    for (orig, patch, want) in cases {
        let env = |names: &[&str], v: &str| -> Value {
            Value::Array(
                names
                    .iter()
                    .map(|n| json!({"name": n, "value": v}))
                    .collect(),
            )
        };
        let got = smp(
            json!({"env": env(orig, "o")}),
            json!({"env": env(patch, "p")}),
            Schema::Container,
        );
        let names: Vec<&str> = got["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(&names, want, "orig {orig:?} patch {patch:?}");
        for e in got["env"].as_array().unwrap() {
            let from_patch = patch.contains(&e["name"].as_str().unwrap());
            assert_eq!(e["value"], if from_patch { "p" } else { "o" });
        }
    }
}

#[test]
fn volume_mounts_merge_by_mount_path_and_ports_by_container_port() {
    let got = smp(
        json!({"volumeMounts": [{"name": "a", "mountPath": "/x"}], "ports": [{"containerPort": 80, "name": "http"}]}),
        json!({"volumeMounts": [{"name": "b", "mountPath": "/x"}], "ports": [{"containerPort": 80.0, "protocol": "TCP"}]}),
        Schema::Container,
    );
    assert_eq!(
        got["volumeMounts"],
        json!([{"name": "b", "mountPath": "/x"}])
    );
    // Numbers compare as Go's float64 do: 80.0 is the same port as 80.
    assert_eq!(got["ports"].as_array().unwrap().len(), 1);
    assert_eq!(got["ports"][0]["name"], "http");
    assert_eq!(got["ports"][0]["protocol"], "TCP");
}

#[test]
fn tolerations_and_args_are_replaced() {
    let got = smp(
        json!({"tolerations": [{"key": "a"}], "containers": [{"name": "n", "args": ["1", "2"]}]}),
        json!({"tolerations": [{"key": "b"}], "containers": [{"name": "n", "args": ["3"]}]}),
        Schema::PodSpec,
    );
    assert_eq!(got["tolerations"], json!([{"key": "b"}]));
    assert_eq!(got["containers"][0]["args"], json!(["3"]));
}

#[test]
fn replicated_jobs_merge_deep_into_the_pod_spec() {
    let original = json!({"replicatedJobs": [
        {"name": "launcher", "template": {"spec": {"template": {"spec": {"containers": [{"name": "node", "image": "a"}]}}}}},
        {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [{"name": "node", "image": "b"}]}}}}}
    ]});
    let patch = json!({"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": {
            "nodeSelector": {"gpu": "h100"},
            "containers": [{"name": "node", "env": [{"name": "X", "value": "1"}]}]}}}}}
    ]});
    let got = smp(original, patch, Schema::JobSetSpec);
    let jobs = got["replicatedJobs"].as_array().unwrap();
    assert_eq!(jobs[0]["name"], "launcher");
    let pod = &jobs[1]["template"]["spec"]["template"]["spec"];
    assert_eq!(pod["nodeSelector"], json!({"gpu": "h100"}));
    assert_eq!(
        pod["containers"],
        json!([{"name": "node", "image": "b", "env": [{"name": "X", "value": "1"}]}])
    );
}

#[test]
fn patch_directives() {
    // $patch: replace on an object.
    let got = smp(
        json!({"securityContext": {"runAsUser": 1, "fsGroup": 2}}),
        json!({"securityContext": {"$patch": "replace", "runAsUser": 5}}),
        Schema::PodSpec,
    );
    assert_eq!(got, json!({"securityContext": {"runAsUser": 5}}));
    // $patch: delete on an object empties it.
    let got = smp(
        json!({"affinity": {"nodeAffinity": {}}}),
        json!({"affinity": {"$patch": "delete"}}),
        Schema::PodSpec,
    );
    assert_eq!(got, json!({"affinity": {}}));
    // $patch: delete on a list item.
    let got = smp(
        json!({"volumes": [{"name": "a"}, {"name": "b"}]}),
        json!({"volumes": [{"name": "a", "$patch": "delete"}, {"name": "c"}]}),
        Schema::PodSpec,
    );
    // A new patch item goes before the remaining original-only items, as upstream's mergeSortedSlice does.
    assert_eq!(got, json!({"volumes": [{"name": "c"}, {"name": "b"}]}));
    // $patch: replace in a list.
    let got = smp(
        json!({"volumes": [{"name": "a"}, {"name": "b"}]}),
        json!({"volumes": [{"$patch": "replace"}, {"name": "c"}]}),
        Schema::PodSpec,
    );
    assert_eq!(got, json!({"volumes": [{"name": "c"}]}));
    // $patch: replace at the top.
    let got = smp(
        json!({"a": 1, "b": 2}),
        json!({"$patch": "replace", "c": 3}),
        Schema::Opaque,
    );
    assert_eq!(got, json!({"c": 3}));
}

#[test]
fn bad_directives_are_errors_with_paths() {
    let cases = [
        (
            json!({"securityContext": {"$patch": "merge"}}),
            "securityContext",
        ),
        (
            json!({"volumes": [{"name": "a", "$patch": "merge"}]}),
            "volumes[0]",
        ),
        (json!({"volumes": [{"$patch": "delete"}]}), "volumes[0]"),
        (json!({"volumes": [{"emptyDir": {}}]}), "volumes[0]"),
        (json!({"volumes": [{"name": "a"}, "b"]}), "volumes"),
        (json!({"volumes": [["a"]]}), "volumes"),
    ];
    for (patch, path) in cases {
        let err = strategic_merge_patch(
            &json!({"volumes": [{"name": "x"}]}),
            &patch,
            Schema::PodSpec,
        )
        .unwrap_err();
        assert!(
            err.to_string().starts_with(path),
            "{err} should start with {path}"
        );
    }
    let err = strategic_merge_patch(&json!({}), &json!([1]), Schema::PodSpec).unwrap_err();
    assert!(matches!(err, SmpError::NotAnObject { .. }));
}

#[test]
fn retain_keys_clears_unlisted_fields() {
    let got = smp(
        json!({"volumes": [{"name": "v", "emptyDir": {}}]}),
        json!({"volumes": [{"name": "v", "$retainKeys": ["name", "configMap"], "configMap": {"name": "cm"}}]}),
        Schema::PodSpec,
    );
    assert_eq!(
        got,
        json!({"volumes": [{"name": "v", "configMap": {"name": "cm"}}]})
    );
    let err = strategic_merge_patch(
        &json!({}),
        &json!({"$retainKeys": ["a"], "b": 1}),
        Schema::Opaque,
    )
    .unwrap_err();
    assert!(matches!(err, SmpError::BadRetainKeys { .. }), "{err}");
}

#[test]
fn set_element_order_and_delete_from_primitive_list() {
    let got = smp(
        json!({"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}),
        json!({"$setElementOrder/containers": [{"name": "c"}, {"name": "b"}, {"name": "a"}], "containers": [{"name": "b", "image": "x"}]}),
        Schema::PodSpec,
    );
    let names: Vec<&str> = got["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c", "b", "a"]);
    assert_eq!(got["containers"][1]["image"], "x");

    let got = smp(
        json!({"finalizers": ["a", "b", "c"]}),
        json!({"$deleteFromPrimitiveList/finalizers": ["b"], "finalizers": ["d"]}),
        Schema::ObjectMeta,
    );
    assert_eq!(got, json!({"finalizers": ["d", "a", "c"]}));

    let err = strategic_merge_patch(
        &json!({"containers": [{"name": "a"}, {"name": "b"}]}),
        &json!({"$setElementOrder/containers": [{"name": "a"}, {"name": "b"}], "containers": [{"name": "b"}, {"name": "a"}]}),
        Schema::PodSpec,
    )
    .unwrap_err();
    assert!(matches!(err, SmpError::BadSetElementOrder { .. }), "{err}");
}

#[test]
fn directives_inside_new_subtrees_are_honoured() {
    let got = smp(
        json!({}),
        json!({"volumes": [{"name": "a", "$patch": "delete"}, {"name": "b", "emptyDir": null}]}),
        Schema::PodSpec,
    );
    assert_eq!(got, json!({"volumes": [{"name": "b"}]}));
}

#[test]
fn scalar_merge_lists_are_sets() {
    let got = smp(
        json!({"finalizers": ["a", "b"]}),
        json!({"finalizers": ["b", "c"]}),
        Schema::ObjectMeta,
    );
    assert_eq!(got, json!({"finalizers": ["a", "b", "c"]}));
}
