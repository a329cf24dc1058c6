//! The OpenAPI value constraints of a CRD schema (lengths, ranges, item counts, enums, list-map keys), checked
//! the way the API server checks them before CEL runs.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::error::FieldError;

/// Checks `value` against `schema`, appending one error per violated constraint.
pub(crate) fn check(schema: &Value, value: &Value, path: &mut String, out: &mut Vec<FieldError>) {
    match value {
        Value::Object(map) => {
            if let Some(required) = schema.get("required").and_then(Value::as_array) {
                for key in required.iter().filter_map(Value::as_str) {
                    if !map.contains_key(key) {
                        out.push(FieldError::error(join(path, key), "Required value"));
                    }
                }
            }
            if let Some(min) = schema.get("minProperties").and_then(Value::as_u64)
                && (map.len() as u64) < min
            {
                out.push(FieldError::error(
                    path.clone(),
                    format!("Invalid value: should have at least {min} properties"),
                ));
            }
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (key, child) in map {
                let child_schema = properties.and_then(|p| p.get(key)).or(additional);
                if let Some(child_schema) = child_schema {
                    let len = path.len();
                    if properties.is_some_and(|p| p.contains_key(key)) {
                        push_field(path, key);
                    } else {
                        path.push_str(&format!("[{key}]"));
                    }
                    check(child_schema, child, path, out);
                    path.truncate(len);
                }
            }
        }
        Value::Array(items) => {
            check_count(schema, items.len(), path, out);
            check_list_uniqueness(schema, items, path, out);
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    check(item_schema, item, path, out);
                    path.truncate(len);
                }
            }
        }
        Value::String(text) => {
            let chars = text.chars().count() as u64;
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                && chars > max
            {
                out.push(FieldError::error(
                    path.clone(),
                    format!("Too long: may not be more than {max} bytes"),
                ));
            }
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
                && chars < min
            {
                out.push(FieldError::error(
                    path.clone(),
                    format!("Invalid value: {text:?}: should be at least {min} chars long"),
                ));
            }
            check_enum(schema, value, path, out);
        }
        Value::Number(number) => {
            if let (Some(min), Some(n)) = (
                schema.get("minimum").and_then(Value::as_f64),
                number.as_f64(),
            ) && n < min
            {
                out.push(FieldError::error(
                    path.clone(),
                    format!("Invalid value: {number}: should be greater than or equal to {min}"),
                ));
            }
            if let (Some(max), Some(n)) = (
                schema.get("maximum").and_then(Value::as_f64),
                number.as_f64(),
            ) && n > max
            {
                out.push(FieldError::error(
                    path.clone(),
                    format!("Invalid value: {number}: should be less than or equal to {max}"),
                ));
            }
            check_enum(schema, value, path, out);
        }
        Value::Bool(_) | Value::Null => {}
    }
}

fn check_count(schema: &Value, count: usize, path: &str, out: &mut Vec<FieldError>) {
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
        && count as u64 > max
    {
        out.push(FieldError::error(
            path,
            format!("Too many: {count}: must have at most {max} items"),
        ));
    }
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
        && (count as u64) < min
    {
        out.push(FieldError::error(
            path,
            format!("Invalid value: {count}: should have at least {min} items"),
        ));
    }
}

/// `x-kubernetes-list-type: map` keys and `set` items must be unique.
fn check_list_uniqueness(schema: &Value, items: &[Value], path: &str, out: &mut Vec<FieldError>) {
    match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("map") => {
            let keys: Vec<&str> = schema
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|k| k.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut seen = BTreeSet::new();
            for (i, item) in items.iter().enumerate() {
                let key: Vec<String> = keys
                    .iter()
                    .map(|k| item.get(*k).map(Value::to_string).unwrap_or_default())
                    .collect();
                if !seen.insert(key.clone()) {
                    let shown: Vec<String> = keys
                        .iter()
                        .zip(&key)
                        .map(|(k, v)| format!("{k:?}:{v}"))
                        .collect();
                    out.push(FieldError::error(
                        format!("{path}[{i}]"),
                        format!("Duplicate value: {{{}}}", shown.join(",")),
                    ));
                }
            }
        }
        Some("set") => {
            let mut seen = BTreeSet::new();
            for (i, item) in items.iter().enumerate() {
                if !seen.insert(item.to_string()) {
                    out.push(FieldError::error(
                        format!("{path}[{i}]"),
                        format!("Duplicate value: {item}"),
                    ));
                }
            }
        }
        _ => {}
    }
}

fn check_enum(schema: &Value, value: &Value, path: &str, out: &mut Vec<FieldError>) {
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let shown: Vec<String> = allowed.iter().map(Value::to_string).collect();
        out.push(FieldError::error(
            path,
            format!(
                "Unsupported value: {value}: supported values: {}",
                shown.join(", ")
            ),
        ));
    }
}

fn push_field(path: &mut String, key: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(key);
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}
