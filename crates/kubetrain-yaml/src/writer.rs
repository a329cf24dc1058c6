//! A small, fast block-style YAML writer for rendered objects (what `kubetrain render` prints).
//!
//! Keys are sorted (as `kubectl` prints them), strings are left plain only when no YAML 1.1 or 1.2 reader can
//! take them for anything else, multi-line strings become literal blocks, and everything else is double-quoted
//! with JSON escapes (a valid YAML double-quoted scalar). A property test checks that the output reads back to
//! the same value.
//!
//! ```
//! let v = serde_json::json!({"kind": "ConfigMap", "data": {"hostfile": "a slots=1\n", "count": "1"}});
//! assert_eq!(kubetrain_yaml::writer::to_string(&v),
//!     "data:\n  count: \"1\"\n  hostfile: |\n    a slots=1\nkind: ConfigMap\n");
//! ```

use serde_json::{Map, Value};

/// The YAML document for `value` (no leading `---`).
pub fn to_string(value: &Value) -> String {
    let mut out = String::with_capacity(2048);
    write(&mut out, value);
    out
}

/// Appends the YAML document for `value` to `out`.
pub fn write(out: &mut String, value: &Value) {
    match value {
        Value::Object(map) if !map.is_empty() => write_map(out, map, 0),
        Value::Array(items) if !items.is_empty() => write_seq(out, items, 0),
        other => {
            write_inline(out, other, 0);
            out.push('\n');
        }
    }
}

fn indent(out: &mut String, n: usize) {
    const SPACES: &str = "                                                                ";
    let mut n = n;
    while n > SPACES.len() {
        out.push_str(SPACES);
        n -= SPACES.len();
    }
    out.push_str(&SPACES[..n]);
}

fn write_map(out: &mut String, map: &Map<String, Value>, level: usize) {
    for (i, (key, value)) in map.iter().enumerate() {
        // The first key of a map inside a sequence item follows "- " directly.
        if i > 0 || level == 0 || !out.ends_with("- ") {
            indent(out, level);
        }
        write_str(out, key, level, false);
        out.push(':');
        write_value_after_key(out, value, level);
    }
}

fn write_value_after_key(out: &mut String, value: &Value, level: usize) {
    match value {
        Value::Object(m) if !m.is_empty() => {
            out.push('\n');
            write_map(out, m, level + 2);
        }
        Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            write_seq(out, items, level);
        }
        other => {
            out.push(' ');
            write_inline(out, other, level + 2);
            out.push('\n');
        }
    }
}

fn write_seq(out: &mut String, items: &[Value], level: usize) {
    for item in items {
        indent(out, level);
        out.push_str("- ");
        match item {
            Value::Object(m) if !m.is_empty() => write_map(out, m, level + 2),
            Value::Array(inner) if !inner.is_empty() => {
                // Nested lists do not occur in Kubernetes objects; flow style keeps them correct.
                out.push_str(&Value::Array(inner.clone()).to_string());
                out.push('\n');
            }
            other => {
                write_inline(out, other, level + 2);
                out.push('\n');
            }
        }
    }
}

/// Scalars and empty collections on the current line; `level` is the indentation of a block scalar's body.
fn write_inline(out: &mut String, value: &Value, level: usize) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => push_display(out, n),
        Value::String(s) => write_str(out, s, level, true),
        Value::Array(_) => out.push_str("[]"),
        Value::Object(_) => out.push_str("{}"),
    }
}

fn write_str(out: &mut String, s: &str, level: usize, allow_block: bool) {
    if is_plain_safe(s) {
        out.push_str(s);
    } else if allow_block && block_safe(s) {
        let body = s.trim_end_matches('\n');
        let trailing = s.len() - body.len();
        out.push_str(match trailing {
            0 => "|-",
            1 => "|",
            _ => "|+",
        });
        for line in s[..s.len() - trailing.min(1)].split('\n') {
            out.push('\n');
            if !line.is_empty() {
                indent(out, level);
                out.push_str(line);
            }
        }
    } else {
        // JSON string syntax is valid YAML double-quoted syntax.
        write_json_string(out, s);
    }
}

fn push_display(out: &mut String, value: impl std::fmt::Display) {
    use std::fmt::Write as _;
    // Writing to a String cannot fail.
    let _ = write!(out, "{value}");
}

/// `s` as a JSON string literal, escaped exactly as serde_json escapes it.
fn write_json_string(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape: &str = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0x00..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[start..i]);
        if escape.is_empty() {
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        } else {
            out.push_str(escape);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Whether a multi-line string can be written as a literal block and read back unchanged.
fn block_safe(s: &str) -> bool {
    s.contains('\n')
        && !s
            .chars()
            .any(|c| (c.is_control() && c != '\n' && c != '\t') || c == '\u{feff}' || c == '\u{85}')
        && s.split('\n')
            .find(|l| !l.is_empty())
            .is_some_and(|l| !l.starts_with([' ', '\t']))
        && !s
            .split('\n')
            .any(|l| !l.is_empty() && l.trim_matches([' ', '\t']).is_empty())
}

/// Words that YAML 1.1 or 1.2 readers turn into booleans or null.
const RESERVED: [&str; 11] = [
    "true", "false", "yes", "no", "on", "off", "y", "n", "null", "~", "",
];

/// Whether `s` reads back as the same string when written plain, for YAML 1.1 and 1.2 readers alike.
fn is_plain_safe(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    // The longest reserved word has 5 letters.
    if s.len() <= 5 && RESERVED.iter().any(|r| r.eq_ignore_ascii_case(s)) {
        return false;
    }
    if "-?:,[]{}#&*!|>'\"%@`.<= ".contains(first) {
        // "-x" stays plain when x cannot start a number, a document marker or an indicator ("-De", "-c").
        let rest = &s[first.len_utf8()..];
        let dash_word = first == '-'
            && !rest.is_empty()
            && !rest.starts_with([' ', '-', '.', '\t'])
            && !looks_numeric(rest);
        if !dash_word {
            return false;
        }
    }
    if s.ends_with([' ', ':', '\t']) {
        return false;
    }
    // One pass for ": ", ":\t", " #" and ASCII control characters (short strings: no substring search).
    let bytes = s.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        let unsafe_here = match b {
            b':' => matches!(bytes.get(i + 1), Some(b' ' | b'\t')),
            b' ' => bytes.get(i + 1) == Some(&b'#'),
            0x00..=0x1f | 0x7f => true,
            _ => false,
        };
        if unsafe_here {
            return false;
        }
    }
    if !s.is_ascii()
        && s.chars().any(|c| {
            c.is_control() || c == '\u{feff}' || c == '\u{85}' || c == '\u{2028}' || c == '\u{2029}'
        })
    {
        return false;
    }
    if first == '+' || first.is_ascii_digit() {
        return !looks_numeric(s);
    }
    true
}

/// Conservative: a string that starts like a number and has no letter that rules out every number, date,
/// hex, octal, binary or sexagesimal form.
fn looks_numeric(s: &str) -> bool {
    let starts = s
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_digit() || c == '+' || c == '.');
    starts
        && !s
            .chars()
            .any(|c| c.is_ascii_alphabetic() && !"abcdefABCDEFxXoObBtTzZ".contains(c))
}

/// Writes serializable objects as YAML without building a `serde_json::Value` first, reusing its buffers between
/// objects. The bytes are exactly those of [`write()`] on `serde_json::to_value(object)` (sorted keys, the last of
/// duplicate keys, the same scalars); a construct it does not take (128-bit integers, `f32`, enum variants with
/// tuple or struct data, non-string map keys, lists nested directly in lists) goes through `to_value` instead.
///
/// ```
/// use std::collections::BTreeMap;
/// #[derive(serde::Serialize)]
/// struct Pod { name: &'static str, labels: BTreeMap<&'static str, &'static str>, count: u32 }
/// let pod = Pod { name: "a", labels: BTreeMap::from([("team", "ml")]), count: 2 };
/// let mut writer = kubetrain_yaml::writer::Writer::default();
/// let mut out = String::new();
/// writer.write(&mut out, &pod).unwrap();
/// assert_eq!(out, kubetrain_yaml::writer::to_string(&serde_json::to_value(&pod).unwrap()));
/// assert_eq!(out, "count: 2\nlabels:\n  team: ml\nname: a\n");
/// ```
#[derive(Debug, Default)]
pub struct Writer {
    tape: tape::Tape,
    /// Map entries being written, a stack shared by all nesting levels: (key token, value token).
    entries: Vec<(usize, usize)>,
}

impl Writer {
    /// Appends the YAML document for `object` to `out`.
    pub fn write<T: serde::Serialize + ?Sized>(
        &mut self,
        out: &mut String,
        object: &T,
    ) -> Result<(), serde_json::Error> {
        let start = out.len();
        if self.tape.record(object) {
            self.entries.clear();
            if self.document(out).is_some() {
                return Ok(());
            }
            out.truncate(start);
        }
        write(out, &serde_json::to_value(object)?);
        Ok(())
    }

    fn document(&mut self, out: &mut String) -> Option<()> {
        if self.tape.is_block(0) {
            match self.tape.token(0) {
                tape::Token::Map { .. } => self.map(out, 0, 0),
                _ => self.seq(out, 0, 0),
            }
        } else {
            self.inline(out, 0, 0);
            out.push('\n');
            Some(())
        }
    }

    /// See [`write_map`]; the entries are sorted by key, and the last of equal keys is kept (as a map insert does).
    fn map(&mut self, out: &mut String, at: usize, level: usize) -> Option<()> {
        let tape = &self.tape;
        let base = self.entries.len();
        let mut i = at + 1;
        while i < tape.end(at) {
            self.entries.push((i, i + 1));
            i = tape.end(i + 1);
        }
        // Stable, so that the last of equal keys is the last of its run.
        self.entries[base..].sort_by(|a, b| tape.str(a.0).cmp(tape.str(b.0)));
        let end = self.entries.len();
        let mut first = true;
        for n in base..end {
            let (key, value) = self.entries[n];
            if n + 1 < end && self.tape.str(key) == self.tape.str(self.entries[n + 1].0) {
                continue;
            }
            if !first || level == 0 || !out.ends_with("- ") {
                indent(out, level);
            }
            first = false;
            write_str(out, self.tape.str(key), level, false);
            out.push(':');
            self.value_after_key(out, value, level)?;
        }
        self.entries.truncate(base);
        Some(())
    }

    /// See [`write_value_after_key`].
    fn value_after_key(&mut self, out: &mut String, at: usize, level: usize) -> Option<()> {
        if self.tape.is_block(at) {
            out.push('\n');
            match self.tape.token(at) {
                tape::Token::Map { .. } => self.map(out, at, level + 2),
                _ => self.seq(out, at, level),
            }
        } else {
            out.push(' ');
            self.inline(out, at, level + 2);
            out.push('\n');
            Some(())
        }
    }

    /// See [`write_seq`].
    fn seq(&mut self, out: &mut String, at: usize, level: usize) -> Option<()> {
        let mut i = at + 1;
        while i < self.tape.end(at) {
            indent(out, level);
            out.push_str("- ");
            match self.tape.token(i) {
                tape::Token::Map { .. } if self.tape.is_block(i) => self.map(out, i, level + 2)?,
                // Lists in lists (flow style in `write_seq`) are left to the `Value` path.
                tape::Token::Seq { .. } if self.tape.is_block(i) => return None,
                _ => {
                    self.inline(out, i, level + 2);
                    out.push('\n');
                }
            }
            i = self.tape.end(i);
        }
        Some(())
    }

    /// See [`write_inline`].
    fn inline(&self, out: &mut String, at: usize, level: usize) {
        match self.tape.token(at) {
            tape::Token::Null => out.push_str("null"),
            tape::Token::Bool(b) => out.push_str(if b { "true" } else { "false" }),
            tape::Token::U64(n) => push_display(out, n),
            tape::Token::I64(n) => push_display(out, n),
            tape::Token::F64(f) => match serde_json::Number::from_f64(f) {
                Some(n) => push_display(out, n),
                None => out.push_str("null"),
            },
            tape::Token::Str { .. } => write_str(out, self.tape.str(at), level, true),
            tape::Token::Seq { .. } => out.push_str("[]"),
            tape::Token::Map { .. } => out.push_str("{}"),
        }
    }
}

/// A serialized object as a flat list of tokens, with all its text in one buffer.
mod tape {
    use serde::Serialize;
    use serde::ser::{self, Impossible};
    use std::fmt;

    /// One node of the tape; containers know where they end, so that siblings can be skipped.
    #[derive(Clone, Copy, Debug)]
    pub(super) enum Token {
        Null,
        Bool(bool),
        U64(u64),
        I64(i64),
        F64(f64),
        /// A string (or a map key), as a range of `Tape::text`.
        Str {
            start: usize,
            end: usize,
        },
        /// A list; its items follow, up to token `end` (exclusive).
        Seq {
            end: usize,
        },
        /// A map; (key, value) pairs follow, each key a `Str`, up to token `end` (exclusive).
        Map {
            end: usize,
        },
    }

    #[derive(Debug, Default)]
    pub(super) struct Tape {
        tokens: Vec<Token>,
        text: String,
        /// Open containers (their token index).
        open: Vec<usize>,
    }

    /// Something the tape does not record; the caller takes the `Value` path.
    #[derive(Debug)]
    pub(super) struct Unsupported;

    impl fmt::Display for Unsupported {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("not recorded")
        }
    }

    impl std::error::Error for Unsupported {}

    impl ser::Error for Unsupported {
        fn custom<T: fmt::Display>(_: T) -> Self {
            Unsupported
        }
    }

    type Result<T = ()> = std::result::Result<T, Unsupported>;

    impl Tape {
        /// Records `object`; `false` when it holds something the tape does not take.
        pub(super) fn record<T: Serialize + ?Sized>(&mut self, object: &T) -> bool {
            self.tokens.clear();
            self.text.clear();
            self.open.clear();
            object.serialize(&mut *self).is_ok() && self.open.is_empty() && !self.tokens.is_empty()
        }

        pub(super) fn token(&self, at: usize) -> Token {
            self.tokens[at]
        }

        /// One past the last token of the node at `at`.
        pub(super) fn end(&self, at: usize) -> usize {
            match self.tokens[at] {
                Token::Seq { end } | Token::Map { end } => end,
                _ => at + 1,
            }
        }

        /// A non-empty list or map (written as a block).
        pub(super) fn is_block(&self, at: usize) -> bool {
            match self.tokens[at] {
                Token::Seq { end } | Token::Map { end } => end > at + 1,
                _ => false,
            }
        }

        pub(super) fn str(&self, at: usize) -> &str {
            match self.tokens[at] {
                Token::Str { start, end } => &self.text[start..end],
                _ => "",
            }
        }

        fn push(&mut self, token: Token) -> Result {
            self.tokens.push(token);
            Ok(())
        }

        fn push_str(&mut self, s: &str) -> Result {
            let start = self.text.len();
            self.text.push_str(s);
            self.push(Token::Str {
                start,
                end: self.text.len(),
            })
        }

        fn open(&mut self, token: Token) -> Result<&mut Self> {
            self.open.push(self.tokens.len());
            self.tokens.push(token);
            Ok(self)
        }

        fn close(&mut self) -> Result {
            let at = self.open.pop().ok_or(Unsupported)?;
            let end = self.tokens.len();
            match &mut self.tokens[at] {
                Token::Seq { end: e } | Token::Map { end: e } => *e = end,
                _ => return Err(Unsupported),
            }
            Ok(())
        }
    }

    impl ser::Serializer for &mut Tape {
        type Ok = ();
        type Error = Unsupported;
        type SerializeSeq = Self;
        type SerializeTuple = Self;
        type SerializeTupleStruct = Self;
        type SerializeTupleVariant = Impossible<(), Unsupported>;
        type SerializeMap = Self;
        type SerializeStruct = Self;
        type SerializeStructVariant = Impossible<(), Unsupported>;

        fn serialize_bool(self, v: bool) -> Result {
            self.push(Token::Bool(v))
        }
        fn serialize_i8(self, v: i8) -> Result {
            self.serialize_i64(v.into())
        }
        fn serialize_i16(self, v: i16) -> Result {
            self.serialize_i64(v.into())
        }
        fn serialize_i32(self, v: i32) -> Result {
            self.serialize_i64(v.into())
        }
        fn serialize_i64(self, v: i64) -> Result {
            self.push(Token::I64(v))
        }
        fn serialize_u8(self, v: u8) -> Result {
            self.serialize_u64(v.into())
        }
        fn serialize_u16(self, v: u16) -> Result {
            self.serialize_u64(v.into())
        }
        fn serialize_u32(self, v: u32) -> Result {
            self.serialize_u64(v.into())
        }
        fn serialize_u64(self, v: u64) -> Result {
            self.push(Token::U64(v))
        }
        fn serialize_i128(self, _: i128) -> Result {
            Err(Unsupported)
        }
        fn serialize_u128(self, _: u128) -> Result {
            Err(Unsupported)
        }
        fn serialize_f32(self, _: f32) -> Result {
            Err(Unsupported)
        }
        fn serialize_f64(self, v: f64) -> Result {
            self.push(Token::F64(v))
        }
        fn serialize_char(self, v: char) -> Result {
            self.push_str(v.encode_utf8(&mut [0; 4]))
        }
        fn serialize_str(self, v: &str) -> Result {
            self.push_str(v)
        }
        fn serialize_bytes(self, v: &[u8]) -> Result {
            self.open(Token::Seq { end: 0 })?;
            for b in v {
                self.push(Token::U64((*b).into()))?;
            }
            self.close()
        }
        fn serialize_none(self) -> Result {
            self.push(Token::Null)
        }
        fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result {
            value.serialize(self)
        }
        fn serialize_unit(self) -> Result {
            self.push(Token::Null)
        }
        fn serialize_unit_struct(self, _: &'static str) -> Result {
            self.push(Token::Null)
        }
        fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result {
            self.push_str(variant)
        }
        fn serialize_newtype_struct<T: Serialize + ?Sized>(
            self,
            name: &'static str,
            value: &T,
        ) -> Result {
            // serde_json's private token types (raw values, arbitrary-precision numbers) mean something else.
            if name.starts_with("$serde_json") {
                return Err(Unsupported);
            }
            value.serialize(self)
        }
        fn serialize_newtype_variant<T: Serialize + ?Sized>(
            self,
            _: &'static str,
            _: u32,
            variant: &'static str,
            value: &T,
        ) -> Result {
            self.open(Token::Map { end: 0 })?;
            self.push_str(variant)?;
            value.serialize(&mut *self)?;
            self.close()
        }
        fn serialize_seq(self, _: Option<usize>) -> Result<Self> {
            self.open(Token::Seq { end: 0 })
        }
        fn serialize_tuple(self, _: usize) -> Result<Self> {
            self.open(Token::Seq { end: 0 })
        }
        fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self> {
            self.open(Token::Seq { end: 0 })
        }
        fn serialize_tuple_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeTupleVariant> {
            Err(Unsupported)
        }
        fn serialize_map(self, _: Option<usize>) -> Result<Self> {
            self.open(Token::Map { end: 0 })
        }
        fn serialize_struct(self, name: &'static str, _: usize) -> Result<Self> {
            // serde_json's private token types (raw values, arbitrary-precision numbers) mean something else.
            if name.starts_with("$serde_json") {
                return Err(Unsupported);
            }
            self.open(Token::Map { end: 0 })
        }
        fn serialize_struct_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeStructVariant> {
            Err(Unsupported)
        }
    }

    impl ser::SerializeSeq for &mut Tape {
        type Ok = ();
        type Error = Unsupported;
        fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result {
            value.serialize(&mut **self)
        }
        fn end(self) -> Result {
            self.close()
        }
    }

    impl ser::SerializeTuple for &mut Tape {
        type Ok = ();
        type Error = Unsupported;
        fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result {
            value.serialize(&mut **self)
        }
        fn end(self) -> Result {
            self.close()
        }
    }

    impl ser::SerializeTupleStruct for &mut Tape {
        type Ok = ();
        type Error = Unsupported;
        fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result {
            value.serialize(&mut **self)
        }
        fn end(self) -> Result {
            self.close()
        }
    }

    impl ser::SerializeMap for &mut Tape {
        type Ok = ();
        type Error = Unsupported;
        fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result {
            key.serialize(KeyRecorder { tape: self })
        }
        fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result {
            value.serialize(&mut **self)
        }
        fn end(self) -> Result {
            self.close()
        }
    }

    impl ser::SerializeStruct for &mut Tape {
        type Ok = ();
        type Error = Unsupported;
        fn serialize_field<T: Serialize + ?Sized>(
            &mut self,
            key: &'static str,
            value: &T,
        ) -> Result {
            self.push_str(key)?;
            value.serialize(&mut **self)
        }
        fn end(self) -> Result {
            self.close()
        }
    }

    /// Map keys: strings and chars (as serde_json takes them); other key types are left to the `Value` path.
    struct KeyRecorder<'a> {
        tape: &'a mut Tape,
    }

    macro_rules! unsupported {
        ($($name:ident($($ty:ty),*)),* $(,)?) => {
            $(fn $name(self, $(_: $ty),*) -> Result { Err(Unsupported) })*
        };
    }

    impl ser::Serializer for KeyRecorder<'_> {
        type Ok = ();
        type Error = Unsupported;
        type SerializeSeq = Impossible<(), Unsupported>;
        type SerializeTuple = Impossible<(), Unsupported>;
        type SerializeTupleStruct = Impossible<(), Unsupported>;
        type SerializeTupleVariant = Impossible<(), Unsupported>;
        type SerializeMap = Impossible<(), Unsupported>;
        type SerializeStruct = Impossible<(), Unsupported>;
        type SerializeStructVariant = Impossible<(), Unsupported>;

        fn serialize_str(self, v: &str) -> Result {
            self.tape.push_str(v)
        }
        fn serialize_char(self, v: char) -> Result {
            self.tape.push_str(v.encode_utf8(&mut [0; 4]))
        }
        unsupported!(
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
            serialize_none(),
            serialize_unit(),
            serialize_unit_struct(&'static str),
            serialize_unit_variant(&'static str, u32, &'static str),
        );
        fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result {
            Err(Unsupported)
        }
        fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, _: &T) -> Result {
            Err(Unsupported)
        }
        fn serialize_newtype_variant<T: Serialize + ?Sized>(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: &T,
        ) -> Result {
            Err(Unsupported)
        }
        fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq> {
            Err(Unsupported)
        }
        fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple> {
            Err(Unsupported)
        }
        fn serialize_tuple_struct(
            self,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeTupleStruct> {
            Err(Unsupported)
        }
        fn serialize_tuple_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeTupleVariant> {
            Err(Unsupported)
        }
        fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap> {
            Err(Unsupported)
        }
        fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct> {
            Err(Unsupported)
        }
        fn serialize_struct_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeStructVariant> {
            Err(Unsupported)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn read(text: &str) -> Value {
        serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    #[test]
    fn plain_and_quoted_scalars() {
        let cases = [
            ("8Gi", true),
            ("500m", true),
            ("2", false),
            ("2.13.0", false),
            ("1e3", false),
            ("0x1F", false),
            ("true", false),
            ("Yes", false),
            ("y", false),
            ("", false),
            ("hf://tatsu-lab/alpaca", true),
            ("pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime", true),
            ("-De", true),
            ("-1", false),
            ("--no-python", false),
            ("a: b", false),
            ("a #b", false),
            (".inf", false),
            (
                "metadata.annotations['batch.kubernetes.io/job-completion-index']",
                true,
            ),
            ("-o ConnectionAttempts=10", true),
            ("12:30", false),
            ("2024-01-01", false),
        ];
        for (s, plain) in cases {
            assert_eq!(is_plain_safe(s), plain, "{s:?}");
            let doc = to_string(&json!({ "k": s }));
            assert_eq!(read(&doc), json!({ "k": s }), "{doc}");
        }
    }

    #[test]
    fn block_literals_keep_their_newlines() {
        for s in [
            "a\nb\n",
            "a\nb",
            "a\n\nb\n\n",
            "import os\n  x = 1\n",
            "\nlead\n",
        ] {
            let v = json!({"cmd": ["-c", s]});
            assert_eq!(read(&to_string(&v)), v, "{s:?}:\n{}", to_string(&v));
        }
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            "\\PC{0,12}".prop_map(Value::String),
            "[a-z0-9 :#\\-\\n.]{0,16}".prop_map(Value::String),
            prop::sample::select(vec![
                "true", "no", "~", "1.5", "0o17", "-", "- x", "a\n b", "x\n"
            ])
            .prop_map(|s| json!(s)),
        ];
        leaf.prop_recursive(4, 32, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-zA-Z0-9./:-]{1,10}|\\PC{1,4}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// `is_plain_safe` as first written (substring searches); the one-pass version must agree with it.
    fn is_plain_safe_reference(s: &str) -> bool {
        let Some(first) = s.chars().next() else {
            return false;
        };
        if RESERVED.iter().any(|r| r.eq_ignore_ascii_case(s)) {
            return false;
        }
        if "-?:,[]{}#&*!|>'\"%@`.<= ".contains(first) {
            let rest = &s[first.len_utf8()..];
            let dash_word = first == '-'
                && !rest.is_empty()
                && !rest.starts_with([' ', '-', '.', '\t'])
                && !looks_numeric(rest);
            if !dash_word {
                return false;
            }
        }
        if s.ends_with([' ', ':', '\t'])
            || s.contains(": ")
            || s.contains(" #")
            || s.contains(":\t")
        {
            return false;
        }
        if s.chars().any(|c| {
            c.is_control() || c == '\u{feff}' || c == '\u{85}' || c == '\u{2028}' || c == '\u{2029}'
        }) {
            return false;
        }
        if first == '+' || first.is_ascii_digit() {
            return !looks_numeric(s);
        }
        true
    }

    fn via_writer<T: serde::Serialize>(object: &T) -> String {
        let mut out = String::from("- ");
        Writer::default().write(&mut out, object).unwrap();
        out
    }

    fn via_value<T: serde::Serialize>(object: &T) -> String {
        let mut out = String::from("- ");
        write(&mut out, &serde_json::to_value(object).unwrap());
        out
    }

    /// Map entries in any order, with duplicates, serialized as one map (as a `#[serde(flatten)]` can).
    struct Entries(Vec<(String, Value)>);

    impl serde::Serialize for Entries {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
        }
    }

    #[derive(serde::Serialize)]
    enum Shape {
        Unit,
        Wrapped(u8),
        Pair(u8, u8),
    }

    #[derive(serde::Serialize)]
    struct Odd {
        zeta: Option<String>,
        alpha: Vec<Vec<u8>>,
        bytes: serde_bytes_like::Bytes,
        shapes: Vec<Shape>,
        float: f64,
        nan: f64,
        small: f32,
        big: u128,
        ch: char,
        unit: (),
    }

    mod serde_bytes_like {
        /// Serialized with `serialize_bytes`.
        pub struct Bytes(pub Vec<u8>);
        impl serde::Serialize for Bytes {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(&self.0)
            }
        }
    }

    #[test]
    fn writer_matches_the_value_path_on_odd_shapes() {
        let odd = |alpha: Vec<Vec<u8>>, shapes, small, big| Odd {
            zeta: None,
            alpha,
            bytes: serde_bytes_like::Bytes(vec![1, 2]),
            shapes,
            float: 1.5e300,
            nan: f64::NAN,
            small,
            big,
            ch: 'é',
            unit: (),
        };
        let cases = [
            odd(vec![], vec![Shape::Unit, Shape::Wrapped(3)], 0.5, 1),
            odd(vec![vec![1], vec![]], vec![], 0.1, 1),
            odd(vec![], vec![Shape::Pair(1, 2)], 0.1, 7),
        ];
        for case in &cases {
            assert_eq!(via_writer(case), via_value(case));
        }
    }

    fn entries() -> impl Strategy<Value = Vec<(String, Value)>> {
        prop::collection::vec(("[a-c]{1,2}|\\PC{1,3}", value()), 0..6)
    }

    proptest! {
        #[test]
        fn writer_matches_the_value_path(v in value(), e in entries()) {
            prop_assert_eq!(via_writer(&v), via_value(&v));
            let e = Entries(e);
            prop_assert_eq!(via_writer(&e), via_value(&e));
            let nested = json!({"list": [serde_json::to_value(&e).unwrap(), v]});
            prop_assert_eq!(via_writer(&nested), via_value(&nested));
        }

        #[test]
        fn plain_check_matches_its_first_version(s in "[-:# ?a-z0-9\t.+]{0,8}|\\PC{0,6}|[\\x00-\\x7f]{0,6}") {
            prop_assert_eq!(is_plain_safe(&s), is_plain_safe_reference(&s), "{:?}", s);
        }

        #[test]
        fn json_strings_are_escaped_like_serde_json(s in "\\PC{0,12}|[\\x00-\\x7f]{0,12}") {
            let mut out = String::new();
            write_json_string(&mut out, &s);
            prop_assert_eq!(out, Value::String(s).to_string());
        }
    }

    proptest! {
        #[test]
        fn output_reads_back_to_the_same_value(v in value()) {
            let doc = match &v {
                Value::Object(_) => v.clone(),
                other => json!({ "root": other }),
            };
            let text = to_string(&doc);
            prop_assert_eq!(read(&text), doc, "{}", text);
        }
    }
}
