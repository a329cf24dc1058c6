//! Whether a typed object keeps every key of the JSON data it was read from, without building its JSON form.
//!
//! An unknown-field check (kubetrain-api's, for trainer objects) compares the input with
//! `serde_json::to_value(object)`; building that value costs more than reading the object. This serializer walks
//! the object's serialization next to the input instead and answers the one question the check needs on its fast
//! path: would the comparison find nothing? It answers `true` only when it is sure; anything unusual (enum variants
//! with data, non-string map keys, 128-bit integers, very wide objects) makes it answer `false`, and the caller
//! then runs the exact comparison, so the reported errors never depend on this module.
//!
//! ```
//! use kubetrain_yaml::kept_keys::{keeps_every_key, maps_from_maps};
//! #[derive(serde::Deserialize, serde::Serialize)]
//! struct Spec { replicas: u32 }
//!
//! let input = serde_json::json!({"replicas": 2, "replcas": 3});
//! let spec: Spec = serde_json::from_value(input.clone()).unwrap();
//! // `replcas` (a typo) was dropped by the typed read: the exact comparison must report it.
//! assert!(!keeps_every_key(&spec, &input));
//! assert!(keeps_every_key(&spec, &serde_json::json!({"replicas": 2, "empty": null})));
//! assert!(maps_from_maps(&spec, &input));
//! ```

use std::fmt;

use serde::Serialize;
use serde::ser::{self, Impossible};
use serde_json::{Map, Value};

/// Input objects wider than this are left to the exact comparison.
const MAX_KEYS: usize = 48;

/// `true` when `serde_json::to_value(object)` would succeed and keep every input key whose value is not null
/// or an empty list, at every depth (the rule of the unknown-field check); `false` when that is not certain.
pub fn keeps_every_key<T: Serialize + ?Sized>(object: &T, input: &Value) -> bool {
    matches!(
        object.serialize(Check {
            input,
            rule: Rule::KeepEveryKey
        }),
        Ok(true)
    )
}

/// `true` when no struct or map of `object` stands where the input has a list. serde_json reads a struct from a
/// list (field by field), serde-saphyr does not; with this, a typed read from JSON data is one serde-saphyr's
/// typed read of the same YAML would also make (the unchecked fast path relies on it).
pub fn maps_from_maps<T: Serialize + ?Sized>(object: &T, input: &Value) -> bool {
    matches!(
        object.serialize(Check {
            input,
            rule: Rule::MapsFromMaps
        }),
        Ok(true)
    )
}

/// What the walk proves.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// Every non-empty input key is written back (the unknown-field check's rule).
    KeepEveryKey,
    /// No map or struct is written where the input has a list.
    MapsFromMaps,
}

/// Null and empty lists carry no information; the unknown-field check lets the typed form drop them.
pub fn is_empty_value(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(items) => items.is_empty(),
        _ => false,
    }
}

/// "Not sure": the exact comparison decides.
#[derive(Debug)]
struct Unsure;

impl fmt::Display for Unsure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not sure")
    }
}

impl std::error::Error for Unsure {}

impl ser::Error for Unsure {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Unsure
    }
}

const NULL: Value = Value::Null;

/// Serializes one node next to the input node at the same path (`null` where the input has none).
struct Check<'v> {
    input: &'v Value,
    rule: Rule,
}

impl<'v> ser::Serializer for Check<'v> {
    type Ok = bool;
    type Error = Unsure;
    type SerializeSeq = SeqCheck<'v>;
    type SerializeTuple = SeqCheck<'v>;
    type SerializeTupleStruct = SeqCheck<'v>;
    type SerializeTupleVariant = Impossible<bool, Unsure>;
    type SerializeMap = MapCheck<'v>;
    type SerializeStruct = MapCheck<'v>;
    type SerializeStructVariant = Impossible<bool, Unsure>;

    fn serialize_bool(self, _: bool) -> Result<bool, Unsure> {
        Ok(true)
    }
    fn serialize_i8(self, _: i8) -> Result<bool, Unsure> {
        Ok(true)
    }
    fn serialize_i16(self, _: i16) -> Result<bool, Unsure> {
        Ok(true)
    }
    fn serialize_i32(self, _: i32) -> Result<bool, Unsure> {
        Ok(true)
    }
    fn serialize_i64(self, _: i64) -> Result<bool, Unsure> {
        Ok(true)
    }
    fn serialize_u8(self, _: u8) -> Result<bool, Unsure> {
        Ok(true)
    }
    fn serialize_u16(self, _: u16) -> Result<bool, Unsure> {
        Ok(true)
    }
    fn serialize_u32(self, _: u32) -> Result<bool, Unsure> {
        Ok(true)
    }
    fn serialize_u64(self, _: u64) -> Result<bool, Unsure> {
        Ok(true)
    }
    fn serialize_i128(self, _: i128) -> Result<bool, Unsure> {
        Err(Unsure)
    }
    fn serialize_u128(self, _: u128) -> Result<bool, Unsure> {
        Err(Unsure)
    }
    fn serialize_f32(self, _: f32) -> Result<bool, Unsure> {
        Ok(true)
    }
    fn serialize_f64(self, _: f64) -> Result<bool, Unsure> {
        Ok(true)
    }
    fn serialize_char(self, _: char) -> Result<bool, Unsure> {
        Ok(true)
    }
    fn serialize_str(self, _: &str) -> Result<bool, Unsure> {
        Ok(true)
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<bool, Unsure> {
        Err(Unsure)
    }
    fn serialize_none(self) -> Result<bool, Unsure> {
        Ok(true)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<bool, Unsure> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<bool, Unsure> {
        Ok(true)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<bool, Unsure> {
        Ok(true)
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
    ) -> Result<bool, Unsure> {
        Ok(true)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<bool, Unsure> {
        // serde_json gives its private token types (raw values, arbitrary-precision numbers) a meaning of their own.
        if name.starts_with("$serde_json") {
            return Err(Unsure);
        }
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<bool, Unsure> {
        Err(Unsure)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<SeqCheck<'v>, Unsure> {
        Ok(SeqCheck {
            input: match self.input {
                Value::Array(items) => items,
                _ => &[],
            },
            index: 0,
            rule: self.rule,
            keeps: true,
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<SeqCheck<'v>, Unsure> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<SeqCheck<'v>, Unsure> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Unsure> {
        Err(Unsure)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<MapCheck<'v>, Unsure> {
        if self.rule == Rule::MapsFromMaps && self.input.is_array() {
            return Err(Unsure);
        }
        Ok(MapCheck {
            rule: self.rule,
            input: self.input.as_object(),
            seen: [""; MAX_KEYS],
            seen_len: 0,
            pending: None,
            keeps: true,
        })
    }
    fn serialize_struct(self, name: &'static str, len: usize) -> Result<MapCheck<'v>, Unsure> {
        if name.starts_with("$serde_json") {
            return Err(Unsure);
        }
        self.serialize_map(Some(len))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Unsure> {
        Err(Unsure)
    }
}

/// A sequence next to the input list (empty when the input is not a list): item `i` is checked against input
/// item `i`, as the comparison zips them.
struct SeqCheck<'v> {
    input: &'v [Value],
    index: usize,
    rule: Rule,
    keeps: bool,
}

impl SeqCheck<'_> {
    fn item<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unsure> {
        let input = self.input.get(self.index).unwrap_or(&NULL);
        self.index += 1;
        self.keeps &= value.serialize(Check {
            input,
            rule: self.rule,
        })?;
        Ok(())
    }
}

impl ser::SerializeSeq for SeqCheck<'_> {
    type Ok = bool;
    type Error = Unsure;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unsure> {
        self.item(value)
    }
    fn end(self) -> Result<bool, Unsure> {
        Ok(self.keeps)
    }
}

impl ser::SerializeTuple for SeqCheck<'_> {
    type Ok = bool;
    type Error = Unsure;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unsure> {
        self.item(value)
    }
    fn end(self) -> Result<bool, Unsure> {
        Ok(self.keeps)
    }
}

impl ser::SerializeTupleStruct for SeqCheck<'_> {
    type Ok = bool;
    type Error = Unsure;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unsure> {
        self.item(value)
    }
    fn end(self) -> Result<bool, Unsure> {
        Ok(self.keeps)
    }
}

/// A map or struct next to the input object (none when the input is not an object).
struct MapCheck<'v> {
    rule: Rule,
    input: Option<&'v Map<String, Value>>,
    /// Input keys the object wrote (the input's own strings, compared by address).
    seen: [&'v str; MAX_KEYS],
    seen_len: usize,
    /// The input entry of the key just written by `serialize_key`.
    pending: Option<&'v Value>,
    keeps: bool,
}

impl<'v> MapCheck<'v> {
    fn entry<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<(), Unsure> {
        let input = self.lookup(key)?;
        self.keeps &= value.serialize(Check {
            input,
            rule: self.rule,
        })?;
        Ok(())
    }

    /// Records `key` as written and returns the input value under it (null when the input has none).
    fn lookup(&mut self, key: &str) -> Result<&'v Value, Unsure> {
        let Some((key, value)) = self.input.and_then(|map| map.get_key_value(key)) else {
            return Ok(&NULL);
        };
        if self.seen_len == MAX_KEYS {
            return Err(Unsure);
        }
        self.seen[self.seen_len] = key;
        self.seen_len += 1;
        Ok(value)
    }

    fn finish(self) -> Result<bool, Unsure> {
        let Some(input) = self.input.filter(|_| self.rule == Rule::KeepEveryKey) else {
            return Ok(self.keeps);
        };
        let seen = &self.seen[..self.seen_len];
        let all_kept = input.iter().all(|(key, value)| {
            is_empty_value(value) || seen.iter().any(|s| std::ptr::eq(*s, key.as_str()))
        });
        Ok(self.keeps && all_kept)
    }
}

impl ser::SerializeMap for MapCheck<'_> {
    type Ok = bool;
    type Error = Unsure;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Unsure> {
        let input = key.serialize(KeyLookup { map: self })?;
        self.pending = Some(input);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unsure> {
        let input = self.pending.take().ok_or(Unsure)?;
        self.keeps &= value.serialize(Check {
            input,
            rule: self.rule,
        })?;
        Ok(())
    }
    fn end(self) -> Result<bool, Unsure> {
        self.finish()
    }
}

impl ser::SerializeStruct for MapCheck<'_> {
    type Ok = bool;
    type Error = Unsure;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Unsure> {
        self.entry(key, value)
    }
    fn end(self) -> Result<bool, Unsure> {
        self.finish()
    }
}

/// A map key: strings (and chars) are looked up in the input; other key types are left to the exact check.
struct KeyLookup<'m, 'v> {
    map: &'m mut MapCheck<'v>,
}

macro_rules! unsure {
    ($($name:ident($ty:ty)),* $(,)?) => {
        $(fn $name(self, _: $ty) -> Result<&'v Value, Unsure> { Err(Unsure) })*
    };
}

impl<'v> ser::Serializer for KeyLookup<'_, 'v> {
    type Ok = &'v Value;
    type Error = Unsure;
    type SerializeSeq = Impossible<&'v Value, Unsure>;
    type SerializeTuple = Impossible<&'v Value, Unsure>;
    type SerializeTupleStruct = Impossible<&'v Value, Unsure>;
    type SerializeTupleVariant = Impossible<&'v Value, Unsure>;
    type SerializeMap = Impossible<&'v Value, Unsure>;
    type SerializeStruct = Impossible<&'v Value, Unsure>;
    type SerializeStructVariant = Impossible<&'v Value, Unsure>;

    fn serialize_str(self, key: &str) -> Result<&'v Value, Unsure> {
        self.map.lookup(key)
    }
    fn serialize_char(self, key: char) -> Result<&'v Value, Unsure> {
        self.map.lookup(key.encode_utf8(&mut [0; 4]))
    }
    unsure!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_f32(f32),
        serialize_f64(f64),
        serialize_bytes(&[u8]),
        serialize_unit_struct(&'static str),
    );
    fn serialize_none(self) -> Result<&'v Value, Unsure> {
        Err(Unsure)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<&'v Value, Unsure> {
        Err(Unsure)
    }
    fn serialize_unit(self) -> Result<&'v Value, Unsure> {
        Err(Unsure)
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
    ) -> Result<&'v Value, Unsure> {
        Err(Unsure)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: &T,
    ) -> Result<&'v Value, Unsure> {
        Err(Unsure)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<&'v Value, Unsure> {
        Err(Unsure)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Unsure> {
        Err(Unsure)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Unsure> {
        Err(Unsure)
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, Unsure> {
        Err(Unsure)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Unsure> {
        Err(Unsure)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Unsure> {
        Err(Unsure)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, Unsure> {
        Err(Unsure)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Unsure> {
        Err(Unsure)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_like_the_value_comparison() {
        // (typed form, input, every non-empty input key kept)
        let cases = [
            (
                json!({"a": 1, "b": {"c": 2}}),
                json!({"a": 1, "b": {"c": 2}}),
                true,
            ),
            (json!({"a": 1}), json!({"a": 1, "b": null, "c": []}), true),
            (json!({"a": 1}), json!({"a": 1, "b": {}}), false),
            (
                json!({"a": [{"x": 1}]}),
                json!({"a": [{"x": 1, "y": 2}]}),
                false,
            ),
            (
                json!({"a": [{"x": 1}]}),
                json!({"a": [{"x": 1}, {"y": 2}]}),
                true,
            ),
            (json!({"a": "text"}), json!({"a": {"deep": 1}}), true),
        ];
        for (kept, input, expected) in cases {
            assert_eq!(
                keeps_every_key(&kept, &input),
                expected,
                "{kept} vs {input}"
            );
        }
    }

    #[test]
    fn maps_must_come_from_maps() {
        let typed = json!({"trainer": {"numNodes": 2}});
        assert!(maps_from_maps(
            &typed,
            &json!({"trainer": {"numNodes": 2, "x": 1}})
        ));
        assert!(!maps_from_maps(&typed, &json!({"trainer": [2]})));
        assert!(maps_from_maps(&json!({"a": [1]}), &json!({"a": [1]})));
    }

    #[derive(Serialize)]
    enum WithData {
        Variant(u8),
    }

    #[test]
    fn unsure_on_variants_with_data_and_wide_keys() {
        assert!(!keeps_every_key(
            &WithData::Variant(1),
            &json!({"Variant": 1})
        ));
        let wide: Map<String, Value> = (0..60).map(|i| (format!("k{i}"), json!(i))).collect();
        let wide = Value::Object(wide);
        assert!(!keeps_every_key(&wide, &wide));
        let mut key_int = std::collections::BTreeMap::new();
        key_int.insert(1, 2);
        assert!(!keeps_every_key(&key_int, &json!({"1": 2})));
    }
}
