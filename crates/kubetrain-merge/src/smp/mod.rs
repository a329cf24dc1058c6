//! Strategic merge patch (Kubernetes `apimachinery/pkg/util/strategicpatch`) over [`serde_json::Value`].
//!
//! Semantics, as the API server applies a patch:
//! - objects merge key by key; a `null` value deletes the key;
//! - lists whose field has a merge key (see [`Schema::field`]) merge item by item: items with the same key
//!   merge recursively, new items are added; all other lists are replaced;
//! - `$patch: replace` in an object replaces the whole object, `$patch: delete` empties it; in a merged
//!   list an item `{"$patch": "delete", <key>: v}` removes the items with that key, and an item
//!   `{"$patch": "replace"}` makes the other patch items replace the list;
//! - `$retainKeys: [..]` clears the original keys not listed; `$setElementOrder/<list>` fixes the order of
//!   a merged list; `$deleteFromPrimitiveList/<list>` removes scalars from a merged scalar list;
//! - merged lists keep the relative order of the patch items and of the original-only items, interleaved
//!   by their original positions, exactly like `normalizeElementOrder` upstream.
//!
//! Deliberate differences from Go (listed in `docs/merge-and-render.md`): directives are honoured at every
//! depth, also inside subtrees the original lacks (Go copies such subtrees verbatim, directives included);
//! fields unknown to the schema merge leniently instead of failing; `$deleteFromPrimitiveList` runs before
//! the additions of the same list (Go's order depends on map iteration).
//!
//! ```
//! use kubetrain_merge::smp::{strategic_merge_patch, Schema};
//! use serde_json::json;
//!
//! let original = json!({"containers": [{"name": "node", "env": [{"name": "A", "value": "1"}]}]});
//! let patch = json!({"containers": [{"name": "node", "env": [{"name": "B", "value": "2"}]}]});
//! let merged = strategic_merge_patch(&original, &patch, Schema::PodSpec).unwrap();
//! // As upstream: without `$setElementOrder`, a new item lands before the original-only items.
//! assert_eq!(merged, json!({"containers": [{"name": "node",
//!     "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}]}]}));
//! ```

mod error;
mod schema;

pub use error::SmpError;
pub use schema::{Field, ListStrategy, Schema};

use error::Path;
use serde_json::{Map, Value};

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";

/// Applies `patch` to `original` and returns the result. Both must be JSON objects.
pub fn strategic_merge_patch(
    original: &Value,
    patch: &Value,
    schema: Schema,
) -> Result<Value, SmpError> {
    let mut out = original.clone();
    apply_in_place(&mut out, patch, schema)?;
    Ok(out)
}

/// Applies `patch` to `target` in place. Both must be JSON objects. On error `target` may be partly patched.
pub fn apply_in_place(target: &mut Value, patch: &Value, schema: Schema) -> Result<(), SmpError> {
    let root = Path::Root;
    let Value::Object(patch) = patch else {
        return Err(not_object(&root, patch));
    };
    let Value::Object(original) = target else {
        return Err(not_object(&root, target));
    };
    let merged = merge_map(std::mem::take(original), patch, schema, &root)?;
    *original = merged;
    Ok(())
}

fn not_object(path: &Path<'_>, v: &Value) -> SmpError {
    SmpError::NotAnObject {
        path: path.to_string(),
        found: type_name(v),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Equality as Go's `==` on decoded JSON: every number is a float64.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn merge_map(
    mut original: Map<String, Value>,
    patch: &Map<String, Value>,
    schema: Schema,
    path: &Path<'_>,
) -> Result<Map<String, Value>, SmpError> {
    if let Some(directive) = patch.get(DIRECTIVE) {
        return match directive.as_str() {
            Some("replace") => {
                let mut rest = patch.clone();
                rest.remove(DIRECTIVE);
                merge_map(Map::new(), &rest, schema, path)
            }
            Some("delete") => Ok(Map::new()),
            _ => Err(SmpError::BadDirective {
                path: path.to_string(),
                value: directive.to_string(),
            }),
        };
    }

    if let Some(retain) = patch.get(RETAIN_KEYS) {
        apply_retain_keys(&mut original, patch, retain, path)?;
    }

    // Lists named by `$setElementOrder/` are merged and ordered first; they are skipped below.
    let mut ordered: Vec<&str> = Vec::new();
    for (key, order) in patch {
        if let Some(list_key) = key.strip_prefix(SET_ELEMENT_ORDER) {
            let field = schema.field(list_key);
            let list_path = path.key(list_key);
            let merged = merge_with_element_order(
                original.get(list_key),
                patch.get(list_key),
                order,
                field,
                &list_path,
            )?;
            if let Some(merged) = merged {
                original.insert(list_key.to_owned(), Value::Array(merged));
            }
            ordered.push(list_key);
        }
    }

    for (key, deletions) in patch {
        if let Some(list_key) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            let Value::Array(deletions) = deletions else {
                return Err(SmpError::BadDeleteList {
                    path: path.key(list_key).to_string(),
                });
            };
            if let Some(Value::Array(items)) = original.get_mut(list_key) {
                items.retain(|item| !deletions.iter().any(|d| json_eq(d, item)));
            }
        }
    }

    for (key, patch_value) in patch {
        if key == RETAIN_KEYS
            || key.starts_with(DELETE_FROM_PRIMITIVE_LIST)
            || key.starts_with(SET_ELEMENT_ORDER)
        {
            continue;
        }
        if ordered.contains(&key.as_str()) {
            continue;
        }
        if patch_value.is_null() {
            original.remove(key);
            continue;
        }
        let field = schema.field(key);
        let child = path.key(key);
        let merged = match (original.remove(key), patch_value) {
            (Some(Value::Object(o)), Value::Object(p)) => {
                Value::Object(merge_map(o, p, field.schema, &child)?)
            }
            (Some(Value::Array(o)), Value::Array(p)) => {
                Value::Array(merge_list(o, p, field, &child)?)
            }
            (_, p) => fresh(p, field, &child)?,
        };
        original.insert(key.clone(), merged);
    }
    Ok(original)
}

/// The value a patch yields where the original has nothing comparable: the patch merged onto emptiness,
/// so directives and nulls inside it are honoured rather than copied.
fn fresh(patch: &Value, field: Field, path: &Path<'_>) -> Result<Value, SmpError> {
    Ok(match patch {
        Value::Object(p) => Value::Object(merge_map(Map::new(), p, field.schema, path)?),
        Value::Array(p) => Value::Array(merge_list(Vec::new(), p, field, path)?),
        other => other.clone(),
    })
}

fn apply_retain_keys(
    original: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    retain: &Value,
    path: &Path<'_>,
) -> Result<(), SmpError> {
    let bad = |reason: String| SmpError::BadRetainKeys {
        path: path.to_string(),
        reason,
    };
    let Value::Array(list) = retain else {
        return Err(bad(format!(
            "expected a list of field names, found {}",
            type_name(retain)
        )));
    };
    let retained = |k: &str| list.iter().any(|v| v.as_str() == Some(k));
    for (k, v) in patch {
        if v.is_null()
            || k == RETAIN_KEYS
            || k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
            || k.starts_with(SET_ELEMENT_ORDER)
        {
            continue;
        }
        if !retained(k) {
            return Err(bad(format!(
                "the patch sets {k:?}, which $retainKeys does not list"
            )));
        }
    }
    original.retain(|k, _| retained(k));
    Ok(())
}

/// What kind of items a list holds; all items of a list (original and patch together) must agree.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ItemKind {
    Object,
    Scalar(u8),
}

fn item_kind(v: &Value) -> Option<ItemKind> {
    match v {
        Value::Object(_) => Some(ItemKind::Object),
        Value::Null => Some(ItemKind::Scalar(0)),
        Value::Bool(_) => Some(ItemKind::Scalar(1)),
        Value::Number(_) => Some(ItemKind::Scalar(2)),
        Value::String(_) => Some(ItemKind::Scalar(3)),
        Value::Array(_) => None,
    }
}

fn list_kind(lists: &[&[Value]], path: &Path<'_>) -> Result<Option<ItemKind>, SmpError> {
    let mut kind = None;
    for item in lists.iter().flat_map(|l| l.iter()) {
        let k = item_kind(item).ok_or_else(|| SmpError::MixedList {
            path: path.to_string(),
        })?;
        match kind {
            None => kind = Some(k),
            Some(prev) if prev != k => {
                return Err(SmpError::MixedList {
                    path: path.to_string(),
                });
            }
            Some(_) => {}
        }
    }
    Ok(kind)
}

fn merge_list(
    original: Vec<Value>,
    patch: &[Value],
    field: Field,
    path: &Path<'_>,
) -> Result<Vec<Value>, SmpError> {
    let key = match field.list {
        ListStrategy::Replace => return patch.iter().map(|p| fresh_item(p, field, path)).collect(),
        ListStrategy::MergeByKey(k) => Some(k),
        ListStrategy::MergeScalars => None,
    };
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    match list_kind(&[&original, patch], path)? {
        Some(ItemKind::Object) => {
            let key = key.ok_or_else(|| SmpError::NoMergeKey {
                path: path.to_string(),
            })?;
            merge_object_list(original, patch, key, field.schema, path)
        }
        _ => Ok(merge_scalar_list(original, patch)),
    }
}

/// Items of a replaced list: objects are cleaned of directives like any new subtree.
fn fresh_item(item: &Value, field: Field, path: &Path<'_>) -> Result<Value, SmpError> {
    match item {
        Value::Object(p) => Ok(Value::Object(merge_map(Map::new(), p, field.schema, path)?)),
        other => Ok(other.clone()),
    }
}

fn merge_key_of<'v>(
    item: &'v Value,
    key: &'static str,
    path: &Path<'_>,
) -> Result<&'v Value, SmpError> {
    item.get(key).ok_or_else(|| SmpError::MissingMergeKey {
        path: path.to_string(),
        key,
    })
}

fn position_by_key(list: &[Value], key: &'static str, value: &Value) -> Option<usize> {
    list.iter()
        .position(|item| item.get(key).is_some_and(|v| json_eq(v, value)))
}

fn merge_object_list(
    mut original: Vec<Value>,
    patch: &[Value],
    key: &'static str,
    schema: Schema,
    path: &Path<'_>,
) -> Result<Vec<Value>, SmpError> {
    // Directive items first: deletions, and whether the list is replaced.
    let mut plain: Vec<&Value> = Vec::with_capacity(patch.len());
    let mut replace = false;
    for (i, item) in patch.iter().enumerate() {
        match item.get(DIRECTIVE) {
            None => plain.push(item),
            Some(d) => match d.as_str() {
                Some("delete") => {
                    let value = merge_key_of(item, key, &path.index(i))?;
                    original.retain(|o| !o.get(key).is_some_and(|v| json_eq(v, value)));
                }
                Some("replace") => replace = true,
                _ => {
                    return Err(SmpError::BadDirective {
                        path: path.index(i).to_string(),
                        value: d.to_string(),
                    });
                }
            },
        }
    }
    let field = Field {
        schema,
        list: ListStrategy::MergeByKey(key),
    };
    if replace {
        return plain
            .iter()
            .enumerate()
            .map(|(i, p)| fresh_item(p, field, &path.index(i)))
            .collect();
    }
    for (i, item) in original.iter().enumerate() {
        merge_key_of(item, key, &path.index(i))?;
    }

    let server_order: Vec<Value> = original.iter().map(|o| o[key].clone()).collect();
    let mut merged = original;
    for (i, item) in plain.iter().enumerate() {
        let item_path = path.index(i);
        let value = merge_key_of(item, key, &item_path)?;
        let Value::Object(p) = item else {
            unreachable_object()
        };
        match position_by_key(&merged, key, value) {
            Some(at) => {
                let Value::Object(o) = std::mem::take(&mut merged[at]) else {
                    unreachable_object()
                };
                merged[at] = Value::Object(merge_map(o, p, schema, &item_path)?);
            }
            None => merged.push(Value::Object(merge_map(Map::new(), p, schema, &item_path)?)),
        }
    }

    let patch_order: Vec<&Value> = plain.iter().map(|p| &p[key]).collect();
    Ok(normalize_order(
        merged,
        &patch_order,
        &server_order,
        Some(key),
    ))
}

#[track_caller]
fn unreachable_object() -> ! {
    // list_kind() has checked that every item is an object.
    unreachable!("list items were checked to be objects")
}

fn merge_scalar_list(original: Vec<Value>, patch: &[Value]) -> Vec<Value> {
    let server_order = original.clone();
    let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
    for v in original.into_iter().chain(patch.iter().cloned()) {
        if !merged.iter().any(|m| json_eq(m, &v)) {
            merged.push(v);
        }
    }
    let patch_order: Vec<&Value> = patch.iter().collect();
    normalize_order(merged, &patch_order, &server_order, None)
}

/// Upstream's `normalizeElementOrder`: patch items in patch order, original-only items in original order,
/// interleaved by original position where both are known (a patch item unknown to the original goes first).
fn normalize_order(
    merged: Vec<Value>,
    patch_order: &[&Value],
    server_order: &[Value],
    key: Option<&'static str>,
) -> Vec<Value> {
    let id = |item: &Value| -> Option<Value> {
        match key {
            Some(k) => item.get(k).cloned(),
            None => Some(item.clone()),
        }
    };
    let in_patch = |item: &Value| -> Option<usize> {
        let v = id(item)?;
        patch_order.iter().position(|o| json_eq(o, &v))
    };
    let in_server = |item: &Value| -> Option<usize> {
        let v = id(item)?;
        server_order.iter().position(|o| json_eq(o, &v))
    };
    let mut from_patch: Vec<(usize, Value)> = Vec::new();
    let mut server_only: Vec<(usize, Value)> = Vec::new();
    for item in merged {
        match in_patch(&item) {
            Some(i) => from_patch.push((i, item)),
            None => server_only.push((in_server(&item).unwrap_or(usize::MAX), item)),
        }
    }
    from_patch.sort_by_key(|(i, _)| *i);
    server_only.sort_by_key(|(i, _)| *i);

    let mut out = Vec::with_capacity(from_patch.len() + server_only.len());
    let mut left = server_only.into_iter().map(|(_, v)| v).peekable();
    let mut right = from_patch.into_iter().map(|(_, v)| v).peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => {
                matches!((in_server(l), in_server(r)), (Some(li), Some(ri)) if li < ri)
            }
        };
        out.extend(if take_left { left.next() } else { right.next() });
    }
    out
}

fn merge_with_element_order(
    original: Option<&Value>,
    patch: Option<&Value>,
    order: &Value,
    field: Field,
    path: &Path<'_>,
) -> Result<Option<Vec<Value>>, SmpError> {
    let bad = |reason: &str| SmpError::BadSetElementOrder {
        path: path.to_string(),
        reason: reason.to_owned(),
    };
    let Value::Array(order) = order else {
        return Err(bad("expected a list"));
    };
    let original = match original {
        None => None,
        Some(Value::Array(o)) => Some(o),
        Some(_) => return Err(bad("the original field is not a list")),
    };
    let patch = match patch {
        None => None,
        Some(Value::Array(p)) => Some(p),
        Some(_) => return Err(bad("the patch field is not a list")),
    };
    let key = match field.list {
        ListStrategy::MergeByKey(k) => Some(k),
        _ => None,
    };
    if let Some(patch) = patch {
        validate_against_order(patch, order, key, path)?;
    }
    let merged = match (original, patch) {
        (None, None) => return Ok(None),
        (Some(o), None) => o.clone(),
        (None, Some(p)) => merge_list(Vec::new(), p, field, path)?,
        (Some(o), Some(p)) => merge_list(o.clone(), p, field, path)?,
    };
    let server_order: Vec<Value> = match (original, key) {
        (Some(o), Some(k)) => o.iter().filter_map(|i| i.get(k).cloned()).collect(),
        (Some(o), None) => o.clone(),
        (None, _) => Vec::new(),
    };
    let patch_order: Vec<&Value> = match key {
        Some(k) => order.iter().filter_map(|i| i.get(k)).collect(),
        None => order.iter().collect(),
    };
    Ok(Some(normalize_order(
        merged,
        &patch_order,
        &server_order,
        key,
    )))
}

/// Upstream's `validatePatchWithSetOrderList`: the patch items must appear in the order list, in order.
fn validate_against_order(
    patch: &[Value],
    order: &[Value],
    key: Option<&'static str>,
    path: &Path<'_>,
) -> Result<(), SmpError> {
    let id = |v: &'_ Value| -> Option<Value> {
        match key {
            Some(k) => v.get(k).cloned(),
            None => Some(v.clone()),
        }
    };
    let items: Vec<&Value> = patch
        .iter()
        .filter(|p| p.get(DIRECTIVE).is_none())
        .collect();
    let (mut pi, mut oi) = (0, 0);
    while pi < items.len() && oi < order.len() {
        let (Some(a), Some(b)) = (id(items[pi]), id(&order[oi])) else {
            return Err(SmpError::BadSetElementOrder {
                path: path.to_string(),
                reason: "an item lacks the merge key".to_owned(),
            });
        };
        if json_eq(&a, &b) {
            pi += 1;
        }
        oi += 1;
    }
    if pi < items.len() {
        return Err(SmpError::BadSetElementOrder {
            path: path.to_string(),
            reason: "the patch list is not in the order the directive gives".to_owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
