//! The OpenAPI value constraints of a CRD schema (lengths, ranges, item counts, enums, list-map keys), checked
//! the way the API server checks them before CEL runs.
//!
//! The schema is compiled once into a tree of [`Constraints`] that holds only what can fail; subtrees without
//! any constraint are dropped, so the walk touches only the parts of a value that can produce an error, and the
//! field path is formatted only when one does.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::error::FieldError;

/// The checks of one schema node, and of the nodes below it that have any.
#[derive(Debug, Default)]
pub(crate) struct Constraints {
    required: Vec<String>,
    min_properties: Option<u64>,
    /// Declared properties; `None` marks a declared property without constraints (it must not fall through to
    /// `additional`).
    properties: BTreeMap<String, Option<Constraints>>,
    additional: Option<Box<Constraints>>,
    items: Option<Box<Constraints>>,
    max_items: Option<u64>,
    min_items: Option<u64>,
    list: ListType,
    max_length: Option<u64>,
    min_length: Option<u64>,
    minimum: Option<f64>,
    maximum: Option<f64>,
    allowed: Option<Vec<Value>>,
}

/// `x-kubernetes-list-type` uniqueness.
#[derive(Debug, Default)]
enum ListType {
    #[default]
    Atomic,
    Map(Vec<String>),
    Set,
}

/// Compiles `schema`; `None` when nothing in it can fail.
pub(crate) fn compile(schema: &Value) -> Option<Constraints> {
    let required = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let declared = schema.get("properties").and_then(Value::as_object);
    let additional = schema
        .get("additionalProperties")
        .filter(|a| a.is_object())
        .and_then(compile)
        .map(Box::new);
    // A declared property without constraints matters only to keep its key from `additionalProperties`.
    let properties = declared
        .into_iter()
        .flatten()
        .map(|(key, child)| (key.clone(), compile(child)))
        .filter(|(_, child)| child.is_some() || additional.is_some())
        .collect();
    let list = match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("map") => ListType::Map(
            schema
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|k| {
                    k.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
        ),
        Some("set") => ListType::Set,
        _ => ListType::Atomic,
    };
    let constraints = Constraints {
        required,
        min_properties: schema.get("minProperties").and_then(Value::as_u64),
        properties,
        additional,
        items: schema.get("items").and_then(compile).map(Box::new),
        max_items: schema.get("maxItems").and_then(Value::as_u64),
        min_items: schema.get("minItems").and_then(Value::as_u64),
        list,
        max_length: schema.get("maxLength").and_then(Value::as_u64),
        min_length: schema.get("minLength").and_then(Value::as_u64),
        minimum: schema.get("minimum").and_then(Value::as_f64),
        maximum: schema.get("maximum").and_then(Value::as_f64),
        allowed: schema.get("enum").and_then(Value::as_array).cloned(),
    };
    constraints.can_fail().then_some(constraints)
}

impl Constraints {
    fn can_fail(&self) -> bool {
        !self.required.is_empty()
            || self.min_properties.is_some()
            || self.properties.values().any(Option::is_some)
            || self.additional.is_some()
            || self.items.is_some()
            || self.max_items.is_some()
            || self.min_items.is_some()
            || !matches!(self.list, ListType::Atomic)
            || self.max_length.is_some()
            || self.min_length.is_some()
            || self.minimum.is_some()
            || self.maximum.is_some()
            || self.allowed.is_some()
    }
}

/// One step of a field path, formatted only when a check fails.
#[derive(Clone, Copy)]
enum Step<'v> {
    Field(&'v str),
    Key(&'v str),
    Index(usize),
}

/// Checks `value` against `schema`, appending one error per violated constraint (in the order of the value's
/// keys, as the API server reports them).
pub(crate) fn check(schema: &Constraints, value: &Value, out: &mut Vec<FieldError>) {
    let mut walk = Walk {
        steps: Vec::new(),
        out,
    };
    walk.node(schema, value);
}

struct Walk<'v, 'o> {
    steps: Vec<Step<'v>>,
    out: &'o mut Vec<FieldError>,
}

impl<'v> Walk<'v, '_> {
    fn path(&self) -> String {
        let mut path = String::new();
        for step in &self.steps {
            match step {
                Step::Field(key) => {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(key);
                }
                Step::Key(key) => {
                    path.push('[');
                    path.push_str(key);
                    path.push(']');
                }
                Step::Index(i) => {
                    path.push('[');
                    path.push_str(&i.to_string());
                    path.push(']');
                }
            }
        }
        path
    }

    fn error(&mut self, message: String) {
        let path = self.path();
        self.out.push(FieldError::error(path, message));
    }

    fn node(&mut self, schema: &Constraints, value: &'v Value) {
        match value {
            Value::Object(map) => self.object(schema, map),
            Value::Array(items) => self.array(schema, items),
            Value::String(text) => {
                if schema.max_length.is_some() || schema.min_length.is_some() {
                    let chars = text.chars().count() as u64;
                    if let Some(max) = schema.max_length
                        && chars > max
                    {
                        self.error(format!("Too long: may not be more than {max} bytes"));
                    }
                    if let Some(min) = schema.min_length
                        && chars < min
                    {
                        self.error(format!(
                            "Invalid value: {text:?}: should be at least {min} chars long"
                        ));
                    }
                }
                self.check_enum(schema, value);
            }
            Value::Number(number) => {
                if let (Some(min), Some(n)) = (schema.minimum, number.as_f64())
                    && n < min
                {
                    self.error(format!(
                        "Invalid value: {number}: should be greater than or equal to {min}"
                    ));
                }
                if let (Some(max), Some(n)) = (schema.maximum, number.as_f64())
                    && n > max
                {
                    self.error(format!(
                        "Invalid value: {number}: should be less than or equal to {max}"
                    ));
                }
                self.check_enum(schema, value);
            }
            Value::Bool(_) | Value::Null => {}
        }
    }

    fn object(&mut self, schema: &Constraints, map: &'v Map<String, Value>) {
        for key in &schema.required {
            if !map.contains_key(key) {
                let mut path = self.path();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                self.out.push(FieldError::error(path, "Required value"));
            }
        }
        if let Some(min) = schema.min_properties
            && (map.len() as u64) < min
        {
            self.error(format!(
                "Invalid value: should have at least {min} properties"
            ));
        }
        if schema.properties.is_empty() && schema.additional.is_none() {
            return;
        }
        for (key, child) in map {
            let (child_schema, step) = match schema.properties.get(key) {
                Some(declared) => (declared.as_ref(), Step::Field(key)),
                None => (schema.additional.as_deref(), Step::Key(key)),
            };
            if let Some(child_schema) = child_schema {
                self.steps.push(step);
                self.node(child_schema, child);
                self.steps.pop();
            }
        }
    }

    fn array(&mut self, schema: &Constraints, items: &'v [Value]) {
        let count = items.len();
        if let Some(max) = schema.max_items
            && count as u64 > max
        {
            self.error(format!("Too many: {count}: must have at most {max} items"));
        }
        if let Some(min) = schema.min_items
            && (count as u64) < min
        {
            self.error(format!(
                "Invalid value: {count}: should have at least {min} items"
            ));
        }
        self.check_list_uniqueness(schema, items);
        if let Some(item_schema) = schema.items.as_deref() {
            for (i, item) in items.iter().enumerate() {
                self.steps.push(Step::Index(i));
                self.node(item_schema, item);
                self.steps.pop();
            }
        }
    }

    /// `x-kubernetes-list-type: map` keys and `set` items must be unique, compared by their JSON texts.
    fn check_list_uniqueness(&mut self, schema: &Constraints, items: &[Value]) {
        match &schema.list {
            ListType::Map(keys) => {
                let shown = |item: &Value| -> Vec<String> {
                    keys.iter()
                        .map(|k| item.get(k).map(Value::to_string).unwrap_or_default())
                        .collect()
                };
                let duplicates = duplicates(
                    items,
                    |a, b| {
                        keys.iter().all(|k| match (a.get(k), b.get(k)) {
                            (Some(x), Some(y)) => same_text(x, y),
                            (None, None) => true,
                            _ => false,
                        })
                    },
                    |item| shown(item).join("\0"),
                );
                for i in duplicates {
                    let item = &items[i];
                    let shown: Vec<String> = keys
                        .iter()
                        .zip(shown(item))
                        .map(|(k, v)| format!("{k:?}:{v}"))
                        .collect();
                    let path = format!("{}[{i}]", self.path());
                    self.out.push(FieldError::error(
                        path,
                        format!("Duplicate value: {{{}}}", shown.join(",")),
                    ));
                }
            }
            ListType::Set => {
                for i in duplicates(items, same_text, Value::to_string) {
                    let path = format!("{}[{i}]", self.path());
                    self.out.push(FieldError::error(
                        path,
                        format!("Duplicate value: {}", items[i]),
                    ));
                }
            }
            ListType::Atomic => {}
        }
    }

    fn check_enum(&mut self, schema: &Constraints, value: &Value) {
        if let Some(allowed) = &schema.allowed
            && !allowed.contains(value)
        {
            let shown: Vec<String> = allowed.iter().map(Value::to_string).collect();
            self.error(format!(
                "Unsupported value: {value}: supported values: {}",
                shown.join(", ")
            ));
        }
    }
}

/// The positions of items equal (by `same`) to an earlier item. Short lists compare pairwise without allocating;
/// long ones go through a set of texts (`text` must agree with `same`).
fn duplicates(
    items: &[Value],
    same: impl Fn(&Value, &Value) -> bool,
    text: impl Fn(&Value) -> String,
) -> Vec<usize> {
    if items.len() <= 32 {
        (0..items.len())
            .filter(|&i| items[..i].iter().any(|earlier| same(earlier, &items[i])))
            .collect()
    } else {
        let mut seen = BTreeSet::new();
        (0..items.len())
            .filter(|&i| !seen.insert(text(&items[i])))
            .collect()
    }
}

/// Whether two values have the same JSON text: JSON equality, except that `0.0` and `-0.0` differ.
fn same_text(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(fx), Some(fy)) if x.is_f64() || y.is_f64() => {
                x.is_f64() == y.is_f64() && fx.to_bits() == fy.to_bits()
            }
            _ => x == y,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_text(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((ka, va), (kb, vb))| ka == kb && same_text(va, vb))
        }
        _ => a == b,
    }
}
