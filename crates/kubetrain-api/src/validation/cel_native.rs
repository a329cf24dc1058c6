//! A native evaluator for the CRD's CEL rules: the schema is compiled once into a tree that mirrors how kube-cel
//! sees a value (defaults, formats, field-name escaping, map nodes), each rule recognised by
//! [`super::cel_rules`], and the walk visits only the paths that lead to rules and are present in the value.
//!
//! The results are kube-cel's: the same field paths, the same messages. Where kube-cel would do something this
//! evaluator does not model exactly (a rule erroring on an unexpected type, numbers of mixed kinds, formatted
//! strings, colliding escaped keys), evaluation stops with [`Unsure`] and the caller runs kube-cel instead.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::cel_rules::{self, Expr};
use crate::error::FieldError;

/// kube-cel's depth limit: deeper schemas are reported as errors by kube-cel, so they stay there.
const MAX_SCHEMA_DEPTH: usize = 64;

/// The native evaluator met a case it does not model; the caller must ask kube-cel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unsure;

/// How kube-cel turns a string at this node into a CEL value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// A CEL string.
    Plain,
    /// `date-time`, `duration` or `byte`: parsed into a timestamp, duration or bytes (not modelled).
    Converted,
}

/// One `x-kubernetes-validations` entry, as kube-cel reads it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawRule {
    rule: String,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    message_expression: Option<String>,
    #[serde(default)]
    field_path: Option<String>,
    #[serde(default)]
    optional_old_self: Option<bool>,
}

/// A recognised rule.
#[derive(Debug)]
struct Rule {
    expr: Expr,
    /// Reads `oldSelf`: skipped without an old object.
    transition: bool,
    /// The message kube-cel reports when the rule is false.
    message: String,
    /// The rule's `fieldPath`, appended to the node's path.
    field_path: Option<String>,
}

/// One schema node: what kube-cel's value conversion, defaulting and walk need, plus the recognised rules.
#[derive(Debug)]
pub(crate) struct Shape {
    properties: BTreeMap<String, Shape>,
    items: Option<Box<Shape>>,
    additional: Option<Box<Shape>>,
    is_map: bool,
    format: Format,
    preserve_unknown: bool,
    embedded: bool,
    default: Option<Value>,
    branches: Vec<Shape>,
    rules: Vec<Rule>,
    /// `x-kubernetes-list-map-keys` of a `listType: map` array: the API server hands an item's transition rules
    /// the old item with the same keys (none for a new item), not the old item at the same index.
    map_keys: Vec<String>,
    /// Some rule at or below this node runs on create (without an old object).
    rules_on_create: bool,
    /// Some rule at or below this node exists at all (updates run transition rules too).
    rules_on_update: bool,
}

/// A value without a schema: kube-cel converts it plainly (escaped keys, no formats, no defaults).
static PLAIN: Shape = Shape {
    properties: BTreeMap::new(),
    items: None,
    additional: None,
    is_map: false,
    format: Format::Plain,
    preserve_unknown: false,
    embedded: false,
    default: None,
    branches: Vec::new(),
    rules: Vec::new(),
    map_keys: Vec::new(),
    rules_on_create: false,
    rules_on_update: false,
};

/// Compiles `schema`, or `None` when some rule (or the schema's depth) is outside what the evaluator models.
pub(crate) fn compile(schema: &Value) -> Option<Shape> {
    compile_node(schema, 0)
}

fn compile_node(schema: &Value, depth: usize) -> Option<Shape> {
    if depth > MAX_SCHEMA_DEPTH {
        return None;
    }
    let rules = match schema.get("x-kubernetes-validations") {
        Some(Value::Array(rules)) => rules.iter().map(compile_rule).collect::<Option<Vec<_>>>()?,
        _ => Vec::new(),
    };
    let mut properties = BTreeMap::new();
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, child) in props {
            properties.insert(name.clone(), compile_node(child, depth + 1)?);
        }
    }
    let items = match schema.get("items") {
        Some(items) => Some(Box::new(compile_node(items, depth + 1)?)),
        None => None,
    };
    let additional_value = schema.get("additionalProperties");
    let additional = match additional_value.filter(|a| a.is_object()) {
        Some(additional) => Some(Box::new(compile_node(additional, depth + 1)?)),
        None => None,
    };
    let mut branches = Vec::new();
    for keyword in ["allOf", "oneOf", "anyOf"] {
        for branch in schema
            .get(keyword)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            branches.push(compile_node(branch, depth + 1)?);
        }
    }
    let int_or_string = schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true);
    let format = match schema.get("format").and_then(Value::as_str) {
        Some("date-time" | "duration" | "byte") if !int_or_string => Format::Converted,
        _ => Format::Plain,
    };
    let flag = |key: &str| schema.get(key).and_then(Value::as_bool) == Some(true);
    let preserve_unknown = flag("x-kubernetes-preserve-unknown-fields");
    let map_keys = if schema.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map") {
        schema
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|k| k.as_str().map(str::to_owned))
            .collect()
    } else {
        Vec::new()
    };
    let mut shape = Shape {
        map_keys,
        is_map: !matches!(additional_value, None | Some(Value::Bool(false))),
        format,
        preserve_unknown,
        embedded: flag("x-kubernetes-embedded-resource"),
        default: schema.get("default").cloned(),
        rules_on_create: rules.iter().any(|r| !r.transition),
        rules_on_update: !rules.is_empty(),
        properties,
        items,
        additional,
        branches,
        rules,
    };
    let walked_additional = if preserve_unknown {
        None
    } else {
        shape.additional.as_deref()
    };
    let children = shape
        .properties
        .values()
        .chain(shape.items.as_deref())
        .chain(walked_additional)
        .chain(&shape.branches);
    let (create, update) = children.fold((false, false), |(c, u), child| {
        (c || child.rules_on_create, u || child.rules_on_update)
    });
    shape.rules_on_create |= create;
    shape.rules_on_update |= update;
    Some(shape)
}

fn compile_rule(raw: &Value) -> Option<Rule> {
    let raw = RawRule::deserialize(raw).ok()?;
    // Dynamic messages and `optionalOldSelf` are not modelled.
    if raw.message_expression.is_some() || raw.optional_old_self == Some(true) {
        return None;
    }
    let expr = cel_rules::parse(&raw.rule)?;
    Some(Rule {
        transition: expr.reads_old_self(),
        message: raw
            .message
            .unwrap_or_else(|| format!("failed rule: {}", raw.rule)),
        field_path: raw.field_path,
        expr,
    })
}

impl Shape {
    /// Whether kube-cel's defaulting fills missing properties of an object at this node.
    fn defaults_apply(&self) -> bool {
        !self.properties.is_empty() || (!self.preserve_unknown && self.additional.is_some())
    }

    /// The child `key` of `object` (a value at this node) as kube-cel sees it after defaulting.
    fn child<'v>(
        &'v self,
        object: Slot<'v>,
        map: &'v Map<String, Value>,
        key: &str,
    ) -> Option<(Slot<'v>, &'v Shape)> {
        if let Some(property) = self.properties.get(key) {
            return match map.get(key) {
                Some(value) => Some((
                    Slot {
                        value,
                        defaulting: object.defaulting,
                    },
                    property,
                )),
                None if object.defaulting && self.defaults_apply() => {
                    property.default.as_ref().map(|value| {
                        (
                            Slot {
                                value,
                                defaulting: false,
                            },
                            property,
                        )
                    })
                }
                None => None,
            };
        }
        let value = map.get(key)?;
        match self.additional.as_deref() {
            Some(additional) => Some((
                Slot {
                    value,
                    defaulting: object.defaulting && !self.preserve_unknown,
                },
                additional,
            )),
            None => Some((
                Slot {
                    value,
                    defaulting: false,
                },
                &PLAIN,
            )),
        }
    }

    /// The old item that item `index` of a new array at this node is checked against: the one with the same
    /// map keys in a `listType: map` list (as the API server correlates them), else the one at the same index.
    fn correlated<'o>(&self, old: &'o [Value], index: usize, item: &Value) -> Option<&'o Value> {
        if self.map_keys.is_empty() {
            return old.get(index);
        }
        old.iter()
            .find(|o| self.map_keys.iter().all(|k| o.get(k) == item.get(k)))
    }

    /// The schema of the array items at this node.
    fn item(&self, array: Slot<'_>) -> (bool, &Shape) {
        match self.items.as_deref() {
            Some(items) => (array.defaulting, items),
            None => (false, &PLAIN),
        }
    }
}

/// A JSON value and whether kube-cel's defaulting pass reaches into it (an inserted default is not itself
/// defaulted).
#[derive(Clone, Copy, Debug)]
struct Slot<'v> {
    value: &'v Value,
    defaulting: bool,
}

/// One step of a field path, formatted only when a rule fails.
#[derive(Clone, Copy)]
enum Step<'v> {
    Key(&'v str),
    Index(usize),
}

fn render_path(steps: &[Step<'_>]) -> String {
    let mut path = String::new();
    for step in steps {
        match step {
            Step::Key(key) => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
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

/// kube-cel's `effective_path`: a rule's `fieldPath` is relative to the node.
fn effective_path(base: String, field_path: Option<&str>) -> String {
    match field_path {
        Some(fp) if fp.starts_with('.') => base + fp,
        Some(fp) if !base.is_empty() => format!("{base}.{fp}"),
        Some(fp) => fp.to_owned(),
        None => base,
    }
}

/// Evaluates every rule of `shape` on `object` (and transition rules against `old`), like kube-cel's
/// `validate_compiled`, in a fixed order (kube-cel's order follows its hash maps).
pub(crate) fn check(
    shape: &Shape,
    object: &Value,
    old: Option<&Value>,
) -> Result<Vec<FieldError>, Unsure> {
    let mut walk = Walk {
        update: old.is_some(),
        steps: Vec::new(),
        errors: Vec::new(),
    };
    let root = Slot {
        value: object,
        defaulting: true,
    };
    let old = old.map(|value| Slot {
        value,
        defaulting: true,
    });
    walk.node(shape, root, old)?;
    Ok(walk.errors)
}

struct Walk<'v> {
    update: bool,
    steps: Vec<Step<'v>>,
    errors: Vec<FieldError>,
}

impl<'v> Walk<'v> {
    fn wanted(&self, shape: &Shape) -> bool {
        if self.update {
            shape.rules_on_update
        } else {
            shape.rules_on_create
        }
    }

    fn node(
        &mut self,
        shape: &'v Shape,
        value: Slot<'v>,
        old: Option<Slot<'v>>,
    ) -> Result<(), Unsure> {
        for rule in &shape.rules {
            if rule.transition && old.is_none() {
                continue;
            }
            let scope = Scope {
                shape,
                this: value,
                old,
            };
            match scope.eval(&rule.expr)? {
                Val::Bool(true) => {}
                Val::Bool(false) => {
                    let path = effective_path(render_path(&self.steps), rule.field_path.as_deref());
                    self.errors
                        .push(FieldError::error(path, rule.message.clone()));
                }
                // kube-cel reports a non-boolean result in its own words.
                _ => return Err(Unsure),
            }
        }
        if let Value::Object(map) = value.value {
            for (key, property) in &shape.properties {
                if !self.wanted(property) {
                    continue;
                }
                let Some((child, child_shape)) = shape.child(value, map, key) else {
                    continue;
                };
                let old_child = old.and_then(|o| match o.value {
                    Value::Object(old_map) => shape.child(o, old_map, key).map(|(slot, _)| slot),
                    _ => None,
                });
                self.steps.push(Step::Key(key));
                self.node(child_shape, child, old_child)?;
                self.steps.pop();
            }
            if let Some(additional) = shape.additional.as_deref()
                && !shape.preserve_unknown
                && self.wanted(additional)
            {
                for (key, child) in map {
                    if shape.properties.contains_key(key) {
                        continue;
                    }
                    let defaulting = value.defaulting;
                    let old_child = old.and_then(|o| o.value.get(key)).map(|v| Slot {
                        value: v,
                        defaulting: old.is_some_and(|o| o.defaulting),
                    });
                    self.steps.push(Step::Key(key));
                    self.node(
                        additional,
                        Slot {
                            value: child,
                            defaulting,
                        },
                        old_child,
                    )?;
                    self.steps.pop();
                }
            }
        }
        if let (Some(items), Value::Array(array)) = (shape.items.as_deref(), value.value)
            && self.wanted(items)
        {
            for (i, item) in array.iter().enumerate() {
                let old_item = old.and_then(|o| match o.value {
                    Value::Array(old_array) => shape.correlated(old_array, i, item).map(|v| Slot {
                        value: v,
                        defaulting: o.defaulting,
                    }),
                    _ => None,
                });
                self.steps.push(Step::Index(i));
                self.node(
                    items,
                    Slot {
                        value: item,
                        defaulting: value.defaulting,
                    },
                    old_item,
                )?;
                self.steps.pop();
            }
        }
        for branch in &shape.branches {
            if self.wanted(branch) {
                self.node(branch, value, old)?;
            }
        }
        Ok(())
    }
}

/// A CEL value as far as the recognised rules need one.
#[derive(Clone, Copy, Debug)]
enum Val<'v> {
    Bool(bool),
    Int(i64),
    Str(&'v str),
    Null,
    /// A map or list, compared and selected from lazily.
    Tree(Slot<'v>, &'v Shape),
}

/// Converts a JSON value at `shape` the way kube-cel does, for the kinds modelled here.
fn to_val<'v>(slot: Slot<'v>, shape: &'v Shape) -> Result<Val<'v>, Unsure> {
    match slot.value {
        Value::Null => Ok(Val::Null),
        Value::Bool(b) => Ok(Val::Bool(*b)),
        Value::Number(n) => n.as_i64().map(Val::Int).ok_or(Unsure),
        Value::String(s) if shape.format == Format::Plain => Ok(Val::Str(s)),
        Value::String(_) => Err(Unsure),
        Value::Array(_) | Value::Object(_) => Ok(Val::Tree(slot, shape)),
    }
}

/// The variables of one rule evaluation.
struct Scope<'v> {
    shape: &'v Shape,
    this: Slot<'v>,
    old: Option<Slot<'v>>,
}

impl<'v> Scope<'v> {
    fn eval(&self, expr: &'v Expr) -> Result<Val<'v>, Unsure> {
        match expr {
            Expr::SelfValue => to_val(self.this, self.shape),
            Expr::OldSelf => to_val(self.old.ok_or(Unsure)?, self.shape),
            Expr::Int(n) => Ok(Val::Int(*n)),
            Expr::Str(s) => Ok(Val::Str(s)),
            Expr::Bool(b) => Ok(Val::Bool(*b)),
            Expr::Null => Ok(Val::Null),
            Expr::Select(target, field) => {
                let (slot, shape) = self.field(target, field)?.ok_or(Unsure)?;
                to_val(slot, shape)
            }
            Expr::Has(target, field) => Ok(Val::Bool(self.field(target, field)?.is_some())),
            Expr::Size(inner) => match self.eval(inner)? {
                Val::Str(s) => i64::try_from(s.len()).map(Val::Int).map_err(|_| Unsure),
                Val::Tree(
                    Slot {
                        value: Value::Array(items),
                        ..
                    },
                    _,
                ) => i64::try_from(items.len()).map(Val::Int).map_err(|_| Unsure),
                _ => Err(Unsure),
            },
            Expr::Matches(inner, regex) => match self.eval(inner)? {
                Val::Str(s) => Ok(Val::Bool(regex.is_match(s))),
                _ => Err(Unsure),
            },
            Expr::InStrings(inner, list) => match self.eval(inner)? {
                Val::Str(s) => Ok(Val::Bool(list.iter().any(|item| item == s))),
                _ => Err(Unsure),
            },
            Expr::Equal {
                left,
                right,
                negated,
            } => {
                let equal = equal(self.eval(left)?, self.eval(right)?)?;
                Ok(Val::Bool(equal != *negated))
            }
            Expr::Compare(left, op, right) => match (self.eval(left)?, self.eval(right)?) {
                (Val::Int(a), Val::Int(b)) => Ok(Val::Bool(op.holds(a, b))),
                _ => Err(Unsure),
            },
            Expr::Not(inner) => match self.eval(inner)? {
                Val::Bool(b) => Ok(Val::Bool(!b)),
                _ => Err(Unsure),
            },
            // CEL's commutative `||` and `&&`: a decisive side wins even when the other side errs.
            Expr::Or(left, right) => self.logic(left, right, true),
            Expr::And(left, right) => self.logic(left, right, false),
        }
    }

    fn logic(&self, left: &'v Expr, right: &'v Expr, decisive: bool) -> Result<Val<'v>, Unsure> {
        let left = match self.eval(left) {
            Ok(Val::Bool(b)) if b == decisive => return Ok(Val::Bool(decisive)),
            Ok(Val::Bool(_)) => true,
            _ => false,
        };
        match self.eval(right)? {
            Val::Bool(b) if b == decisive => Ok(Val::Bool(decisive)),
            Val::Bool(b) if left => Ok(Val::Bool(b)),
            _ => Err(Unsure),
        }
    }

    /// `target.field` after defaulting: `Ok(None)` when the map lacks the key.
    fn field(
        &self,
        target: &'v Expr,
        field: &str,
    ) -> Result<Option<(Slot<'v>, &'v Shape)>, Unsure> {
        match self.eval(target)? {
            Val::Tree(
                slot @ Slot {
                    value: Value::Object(map),
                    ..
                },
                shape,
            ) => {
                // Injected `apiVersion`/`kind`/`metadata` of embedded resources are not modelled.
                if shape.embedded {
                    return Err(Unsure);
                }
                Ok(shape.child(slot, map, field))
            }
            _ => Err(Unsure),
        }
    }
}

/// CEL `==` on two values (different types are unequal).
fn equal(left: Val<'_>, right: Val<'_>) -> Result<bool, Unsure> {
    Ok(match (left, right) {
        (Val::Bool(a), Val::Bool(b)) => a == b,
        (Val::Int(a), Val::Int(b)) => a == b,
        (Val::Str(a), Val::Str(b)) => a == b,
        (Val::Null, Val::Null) => true,
        (Val::Tree(a, sa), Val::Tree(b, sb)) => return tree_equal(a, sa, b, sb),
        _ => false,
    })
}

/// CEL equality of two JSON values as kube-cel converts them (defaults, escaped keys, formats).
fn tree_equal(a: Slot<'_>, sa: &Shape, b: Slot<'_>, sb: &Shape) -> Result<bool, Unsure> {
    // Identical JSON converts to identical CEL values.
    if std::ptr::eq(sa, sb) && a.defaulting == b.defaulting && a.value == b.value {
        return Ok(true);
    }
    match (a.value, b.value) {
        (Value::Null, Value::Null) => Ok(true),
        (Value::Bool(x), Value::Bool(y)) => Ok(x == y),
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => Ok(x == y),
            // Unsigned and floating-point numbers compare across kinds in CEL; not modelled.
            _ => Err(Unsure),
        },
        (Value::String(x), Value::String(y)) => {
            if sa.format == Format::Plain && sb.format == Format::Plain {
                Ok(x == y)
            } else {
                Err(Unsure)
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            if x.len() != y.len() {
                return Ok(false);
            }
            let (da, ia) = sa.item(a);
            let (db, ib) = sb.item(b);
            let mut unsure = false;
            for (x, y) in x.iter().zip(y) {
                match tree_equal(
                    Slot {
                        value: x,
                        defaulting: da,
                    },
                    ia,
                    Slot {
                        value: y,
                        defaulting: db,
                    },
                    ib,
                ) {
                    Ok(true) => {}
                    Ok(false) => return Ok(false),
                    Err(Unsure) => unsure = true,
                }
            }
            if unsure { Err(Unsure) } else { Ok(true) }
        }
        (Value::Object(x), Value::Object(y)) => map_equal(a, x, sa, b, y, sb),
        // A formatted string may become a timestamp, duration or bytes; other kinds differ.
        (Value::String(_), _) if sa.format != Format::Plain => Err(Unsure),
        (_, Value::String(_)) if sb.format != Format::Plain => Err(Unsure),
        _ => Ok(false),
    }
}

fn map_equal(
    a: Slot<'_>,
    x: &Map<String, Value>,
    sa: &Shape,
    b: Slot<'_>,
    y: &Map<String, Value>,
    sb: &Shape,
) -> Result<bool, Unsure> {
    if sa.embedded || sb.embedded || escape_collides(x, sa) || escape_collides(y, sb) {
        return Err(Unsure);
    }
    let keys_a = effective_keys(a, x, sa);
    let keys_b = effective_keys(b, y, sb);
    if keys_a.len() != keys_b.len() || keys_a.iter().any(|k| !keys_b.contains(k)) {
        // Different names can escape to one CEL name (`a.b` and `a_dot_b`); only names with `_` can.
        let escaped = !(sa.is_map && sb.is_map);
        if escaped && keys_a.iter().chain(&keys_b).any(|k| k.contains('_')) {
            return Err(Unsure);
        }
        return Ok(false);
    }
    let mut unsure = false;
    for key in keys_a {
        let (Some((ca, csa)), Some((cb, csb))) = (sa.child(a, x, key), sb.child(b, y, key)) else {
            return Ok(false);
        };
        match tree_equal(ca, csa, cb, csb) {
            Ok(true) => {}
            Ok(false) => return Ok(false),
            Err(Unsure) => unsure = true,
        }
    }
    if unsure { Err(Unsure) } else { Ok(true) }
}

/// The keys of a map after defaulting.
fn effective_keys<'v>(
    slot: Slot<'v>,
    map: &'v Map<String, Value>,
    shape: &'v Shape,
) -> Vec<&'v str> {
    let mut keys: Vec<&str> = map.keys().map(String::as_str).collect();
    if slot.defaulting && shape.defaults_apply() {
        for (name, property) in &shape.properties {
            if property.default.is_some() && !map.contains_key(name) {
                keys.push(name);
            }
        }
    }
    keys
}

/// Whether two keys of this object escape to the same CEL field name (kube-cel keeps only one of them).
/// Only names with `_` can collide, so the check is skipped without one.
fn escape_collides(map: &Map<String, Value>, shape: &Shape) -> bool {
    if shape.is_map || !map.keys().any(|k| k.contains('_')) {
        return false;
    }
    let mut escaped: Vec<String> = map.keys().map(|k| escape_field_name(k)).collect();
    escaped.sort_unstable();
    escaped.windows(2).any(|w| w[0] == w[1])
}

/// kube-cel's field-name escaping (apiserver `model.Escape`).
fn escape_field_name(name: &str) -> String {
    if cel_rules::RESERVED.contains(&name) {
        return format!("__{name}__");
    }
    let mut escaped = String::with_capacity(name.len() * 2);
    for ch in name.chars() {
        match ch {
            '_' => escaped.push_str("__"),
            '.' => escaped.push_str("__dot__"),
            '-' => escaped.push_str("__dash__"),
            '/' => escaped.push_str("__slash__"),
            _ => escaped.push(ch),
        }
    }
    escaped
}
