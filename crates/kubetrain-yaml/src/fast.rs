//! A fast reader for the plain YAML subset that TrainJob manifests are written in.
//!
//! [`parse`] handles block mappings and sequences, single-line flow `{}` / `[]` collections, plain, single- and
//! double-quoted single-line scalars and comments. It **declines** (returns `None`) on everything else and on
//! every scalar whose meaning it does not know for certain: anchors, aliases, tags, block scalars, multi-line
//! scalars, directives, tabs, floats, odd number forms (`0x1F`, `012`, `1_000`, `.inf`), duplicate keys,
//! non-string keys. The law (checked by a property test and a differential fuzz target): whenever it returns
//! `Some(v)`, serde-saphyr reads the same text as the same `v`. [`from_str`] tries it first and falls back to
//! serde-saphyr, so callers see serde-saphyr's result and errors either way.
//!
//! ```
//! let text = "kind: TrainJob\nmetadata: {name: a}\nspec:\n  trainer:\n    numNodes: 2\n    command: [torchrun, train.py]\n";
//! let fast = kubetrain_yaml::fast::parse(text).expect("in the subset");
//! assert_eq!(fast, serde_saphyr::from_str::<serde_json::Value>(text).unwrap());
//! assert_eq!(fast["spec"]["trainer"]["numNodes"], 2);
//! // An anchor is outside the subset: the fast path declines, the full reader takes it.
//! assert!(kubetrain_yaml::fast::parse("a: &x 1\nb: *x\n").is_none());
//! ```

use serde_json::{Map, Number, Value};

/// Nesting deeper than this is left to serde-saphyr (and its budget).
const MAX_DEPTH: usize = 64;
/// YAML limits implicit keys to 1024 characters as written; longer ones are left to serde-saphyr.
const MAX_KEY_LEN: usize = 1000;

/// Reads `text` (one YAML document) as JSON data: the fast path when the document is in the subset, serde-saphyr
/// otherwise; the result (value or error) is serde-saphyr's in both cases.
pub fn from_str(text: &str) -> Result<Value, serde_saphyr::Error> {
    match parse(text) {
        Some(value) => Ok(value),
        None => serde_saphyr::from_str(text),
    }
}

/// The typed object serde-saphyr's typed read (`serde_saphyr::from_str::<T>`) gives for `text`, when the fast
/// path can vouch for it: the document is in the subset, `T` reads from its JSON data, and no struct or map was
/// read from a list (which serde_json allows and serde-saphyr does not). `None` otherwise; the caller then asks
/// serde-saphyr.
///
/// ```
/// use kubetrain_yaml::fast;
/// #[derive(Debug, PartialEq, serde::Deserialize, serde::Serialize)]
/// struct Job { spec: Spec }
/// #[derive(Debug, PartialEq, serde::Deserialize, serde::Serialize)]
/// struct Spec { #[serde(rename = "numNodes")] num_nodes: Option<u32>, trainer: Option<Trainer> }
/// #[derive(Debug, PartialEq, serde::Deserialize, serde::Serialize)]
/// struct Trainer { image: Option<String> }
///
/// let text = "spec:\n  numNodes: 2\n";
/// let job: Job = fast::from_str_typed(text).expect("in the subset");
/// assert_eq!(job, serde_saphyr::from_str::<Job>(text).unwrap());
/// // serde_json would read `trainer` field by field from this list; serde-saphyr refuses, so the fast path declines.
/// assert!(fast::from_str_typed::<Job>("spec:\n  trainer: [~]\n").is_none());
/// ```
pub fn from_str_typed<T: serde::de::DeserializeOwned + serde::Serialize>(text: &str) -> Option<T> {
    let value = parse(text)?;
    let object = T::deserialize(&value).ok()?;
    crate::kept_keys::maps_from_maps(&object, &value).then_some(object)
}

/// Reads `text` with the fast path alone; `None` when the document is outside the subset (or empty).
pub fn parse(text: &str) -> Option<Value> {
    if !characters_in_subset(text) {
        return None;
    }
    let mut lines = Vec::with_capacity(32);
    for raw in text.split('\n') {
        let content = raw.trim_start_matches(' ');
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        lines.push(Line {
            indent: raw.len() - content.len(),
            text: content.trim_end_matches(' '),
        });
    }
    let first = lines.first()?.indent;
    let mut parser = Parser {
        lines,
        pos: 0,
        depth: 0,
    };
    let value = parser.block_node(first)?;
    (parser.pos == parser.lines.len()).then_some(value)
}

/// serde-saphyr stops after 32 comment lines in a row while looking ahead for a value (its parser buffers at
/// most so many); documents with more `#` than this are left to it.
const MAX_COMMENTS: usize = 16;

/// Printable YAML characters without tabs, carriage returns, BOMs or Unicode line breaks, and few comments.
fn characters_in_subset(text: &str) -> bool {
    let bytes = text.as_bytes();
    if bytes.iter().filter(|&&b| b == b'#').count() > MAX_COMMENTS {
        return false;
    }
    if bytes
        .iter()
        .all(|&b| b == b'\n' || (0x20..0x7f).contains(&b))
    {
        return true;
    }
    text.chars().all(|c| {
        c == '\n'
            || (' '..='~').contains(&c)
            || (c >= '\u{a0}'
                && !matches!(
                    c,
                    '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}'
                ))
    })
}

#[derive(Clone, Copy)]
struct Line<'a> {
    /// Leading spaces.
    indent: usize,
    /// The rest, without trailing spaces; never empty, never a comment line.
    text: &'a str,
}

struct Parser<'a> {
    lines: Vec<Line<'a>>,
    pos: usize,
    depth: usize,
}

/// A scalar as written, before resolution.
#[derive(Clone, Copy)]
enum Scalar<'a> {
    Plain(&'a str),
    /// The text between the quotes.
    Single(&'a str),
    /// The text between the quotes.
    Double(&'a str),
}

fn is_seq_entry(text: &str) -> bool {
    text == "-" || text.starts_with("- ")
}

/// Whether what follows a scalar or collection on its line is nothing or a comment.
fn only_comment(rest: &str) -> bool {
    let trimmed = rest.trim_start_matches(' ');
    trimmed.is_empty() || (trimmed.len() < rest.len() && trimmed.starts_with('#'))
}

impl<'a> Parser<'a> {
    fn enter(&mut self) -> Option<()> {
        self.depth += 1;
        (self.depth <= MAX_DEPTH).then_some(())
    }

    /// The block node whose first line is the current one, at `indent`.
    fn block_node(&mut self, indent: usize) -> Option<Value> {
        self.enter()?;
        let value = if is_seq_entry(self.lines[self.pos].text) {
            self.block_seq(indent)
        } else {
            self.block_map(indent)
        };
        self.depth -= 1;
        value
    }

    fn block_map(&mut self, indent: usize) -> Option<Value> {
        let mut map = Map::new();
        while let Some(&line) = self.lines.get(self.pos) {
            if line.indent < indent || (line.indent == indent && is_seq_entry(line.text)) {
                break;
            }
            if line.indent > indent {
                return None;
            }
            let (key, rest) = split_key(line.text)?;
            let key = key_string(key)?;
            self.pos += 1;
            let value = self.value_after_key(indent, rest)?;
            if map.insert(key, value).is_some() {
                return None;
            }
        }
        (!map.is_empty()).then_some(Value::Object(map))
    }

    /// The value of a block mapping entry at `indent` whose text after `key:` is `rest`.
    fn value_after_key(&mut self, indent: usize, rest: &'a str) -> Option<Value> {
        if !only_comment(rest) {
            return inline_value(rest.trim_start_matches(' '), self.depth);
        }
        if let Some(&next) = self.lines.get(self.pos) {
            if next.indent > indent {
                return self.block_node(next.indent);
            }
            if next.indent == indent && is_seq_entry(next.text) {
                self.enter()?;
                let value = self.block_seq(indent);
                self.depth -= 1;
                return value;
            }
        }
        Some(Value::Null)
    }

    fn block_seq(&mut self, indent: usize) -> Option<Value> {
        let mut items = Vec::new();
        while let Some(&line) = self.lines.get(self.pos) {
            if line.indent != indent || !is_seq_entry(line.text) {
                break;
            }
            let rest = line.text[1..].trim_start_matches(' ');
            if rest.is_empty() || (rest.starts_with('#') && line.text.len() > 1) {
                self.pos += 1;
                match self.lines.get(self.pos) {
                    Some(&next) if next.indent > indent => {
                        items.push(self.block_node(next.indent)?)
                    }
                    _ => items.push(Value::Null),
                }
                continue;
            }
            if is_seq_entry(rest) {
                return None;
            }
            if split_key(rest).is_some() {
                // `- key: value`: a mapping whose first line starts after the dash.
                let column = indent + (line.text.len() - rest.len());
                self.lines[self.pos] = Line {
                    indent: column,
                    text: rest,
                };
                self.enter()?;
                let map = self.block_map(column);
                self.depth -= 1;
                items.push(map?);
            } else {
                self.pos += 1;
                items.push(inline_value(rest, self.depth)?);
            }
        }
        (!items.is_empty()).then_some(Value::Array(items))
    }
}

/// `key: rest` or `key:` on one line; `None` when the text is not a simple mapping entry.
fn split_key(text: &str) -> Option<(Scalar<'_>, &str)> {
    let (key, rest) = scan_scalar(text, false)?;
    let after = rest.strip_prefix(':')?;
    if !(after.is_empty() || after.starts_with(' ')) {
        return None;
    }
    Some((key, after))
}

/// A value written on the same line as its key or dash: a flow collection or a scalar, then maybe a comment.
fn inline_value(text: &str, depth: usize) -> Option<Value> {
    let mut rest = text;
    let value = if text.starts_with(['{', '[']) {
        flow_node(&mut rest, depth)?
    } else {
        let (scalar, after) = scan_scalar(text, false)?;
        rest = after;
        resolve(scalar)?
    };
    only_comment(rest).then_some(value)
}

fn skip_spaces(s: &mut &str) {
    *s = s.trim_start_matches(' ');
}

/// A node in a single-line flow collection; advances `s` past it.
fn flow_node(s: &mut &str, depth: usize) -> Option<Value> {
    if depth + 1 > MAX_DEPTH {
        return None;
    }
    skip_spaces(s);
    if let Some(body) = s.strip_prefix('{') {
        *s = body;
        let mut map = Map::new();
        skip_spaces(s);
        if let Some(after) = s.strip_prefix('}') {
            *s = after;
            return Some(Value::Object(map));
        }
        loop {
            skip_spaces(s);
            let (key, after) = scan_scalar(s, true)?;
            let key = key_string(key)?;
            *s = after.strip_prefix(": ")?;
            let value = flow_node(s, depth + 1)?;
            if map.insert(key, value).is_some() {
                return None;
            }
            skip_spaces(s);
            if let Some(after) = s.strip_prefix('}') {
                *s = after;
                return Some(Value::Object(map));
            }
            *s = s.strip_prefix(',')?;
            skip_spaces(s);
            if s.starts_with(['}', ',']) {
                return None;
            }
        }
    }
    if let Some(body) = s.strip_prefix('[') {
        *s = body;
        let mut items = Vec::new();
        skip_spaces(s);
        if let Some(after) = s.strip_prefix(']') {
            *s = after;
            return Some(Value::Array(items));
        }
        loop {
            items.push(flow_node(s, depth + 1)?);
            skip_spaces(s);
            if let Some(after) = s.strip_prefix(']') {
                *s = after;
                return Some(Value::Array(items));
            }
            *s = s.strip_prefix(',')?;
            skip_spaces(s);
            if s.starts_with([']', ',']) {
                return None;
            }
        }
    }
    let (scalar, after) = scan_scalar(s, true)?;
    if after.trim_start_matches(' ').starts_with(':') {
        // `[a: b]` is a single-pair mapping.
        return None;
    }
    *s = after;
    resolve(scalar)
}

/// The scalar at the start of `text` and what follows it; `None` when it is not a scalar of the subset.
fn scan_scalar(text: &str, flow: bool) -> Option<(Scalar<'_>, &str)> {
    let bytes = text.as_bytes();
    match bytes.first()? {
        b'\'' => {
            let mut i = 1;
            loop {
                match bytes.get(i)? {
                    b'\'' if bytes.get(i + 1) == Some(&b'\'') => i += 2,
                    b'\'' => return Some((Scalar::Single(&text[1..i]), &text[i + 1..])),
                    _ => i += 1,
                }
            }
        }
        b'"' => {
            let mut i = 1;
            loop {
                match bytes.get(i)? {
                    b'\\' => i += 2,
                    b'"' => return Some((Scalar::Double(&text[1..i]), &text[i + 1..])),
                    _ => i += 1,
                }
            }
        }
        _ => {
            if !plain_start(text) {
                return None;
            }
            let mut end = bytes.len();
            for (i, &b) in bytes.iter().enumerate() {
                let next = bytes.get(i + 1).copied();
                let stop = match b {
                    b':' => match next {
                        None | Some(b' ') => true,
                        Some(b',' | b'[' | b']' | b'{' | b'}') => flow,
                        _ => false,
                    },
                    b'#' => i > 0 && bytes[i - 1] == b' ',
                    b',' | b'[' | b']' | b'{' | b'}' => flow,
                    _ => false,
                };
                if stop {
                    end = i;
                    break;
                }
            }
            let plain = text[..end].trim_end_matches(' ');
            (!plain.is_empty()).then_some((Scalar::Plain(plain), &text[plain.len()..]))
        }
    }
}

/// Plain scalars of the subset start with a letter, a digit, `/`, `_`, `$`, `./`, `-x`, `--x`, or are `~`.
fn plain_start(text: &str) -> bool {
    let b = text.as_bytes();
    match b[0] {
        b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'/' | b'_' | b'$' => true,
        b'.' => b.get(1) == Some(&b'/'),
        b'~' => b.len() == 1 || matches!(b[1], b' ' | b',' | b']' | b'}' | b':'),
        b'-' => match b.get(1) {
            Some(c) if c.is_ascii_alphabetic() => true,
            Some(b'-') => b.get(2).is_some_and(u8::is_ascii_alphabetic),
            Some(c) if c.is_ascii_digit() => true,
            _ => false,
        },
        _ => false,
    }
}

/// A mapping key as a string; keys that would read as anything but a string are declined.
fn key_string(key: Scalar<'_>) -> Option<String> {
    // The limit is on the key as written (quotes and escapes included), as the YAML reader counts it.
    let written = match key {
        Scalar::Plain(text) => text.len(),
        Scalar::Single(inner) | Scalar::Double(inner) => inner.len() + 2,
    };
    if written > MAX_KEY_LEN {
        return None;
    }
    let text = match key {
        Scalar::Plain(text) => match resolve_plain(text)? {
            Value::String(s) => s,
            _ => return None,
        },
        other => match resolve(other)? {
            Value::String(s) => s,
            _ => return None,
        },
    };
    Some(text)
}

fn resolve(scalar: Scalar<'_>) -> Option<Value> {
    match scalar {
        Scalar::Plain(text) => resolve_plain(text),
        Scalar::Single(inner) => Some(Value::String(inner.replace("''", "'"))),
        Scalar::Double(inner) => unescape_double(inner).map(Value::String),
    }
}

/// serde-saphyr's resolution of a plain scalar for the cases it is sure of: null, YAML 1.1 booleans, decimal
/// integers in `u64`/`i64` without a leading zero, and text that no number, boolean or null can be.
fn resolve_plain(text: &str) -> Option<Value> {
    match text {
        "~" | "null" | "Null" | "NULL" => return Some(Value::Null),
        _ => {}
    }
    const TRUE: [&str; 4] = ["true", "yes", "y", "on"];
    const FALSE: [&str; 4] = ["false", "no", "n", "off"];
    if TRUE.iter().any(|w| w.eq_ignore_ascii_case(text)) {
        return Some(Value::Bool(true));
    }
    if FALSE.iter().any(|w| w.eq_ignore_ascii_case(text)) {
        return Some(Value::Bool(false));
    }
    let bytes = text.as_bytes();
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, bytes),
    };
    if !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) {
        // 18 digits always fit in i64 and u64; longer ones are left to serde-saphyr.
        if digits.len() > 18 || (digits[0] == b'0' && (digits.len() > 1 || negative)) {
            return None;
        }
        let n: u64 = text[usize::from(negative)..].parse().ok()?;
        return Some(Value::Number(if negative {
            // n ≤ 10^18 − 1 < i64::MAX.
            Number::from(-i64::try_from(n).ok()?)
        } else {
            Number::from(n)
        }));
    }
    match bytes[0] {
        b'a'..=b'z' | b'A'..=b'Z' => {
            const FLOAT_WORDS: [&str; 3] = ["nan", "inf", "infinity"];
            if FLOAT_WORDS.iter().any(|w| w.eq_ignore_ascii_case(text)) {
                return None;
            }
        }
        b'0'..=b'9' => {
            // Starts like a number: a string only with a letter no number form (radix prefix, exponent,
            // inf/nan, date) uses. Hex digits only count after `0x`: serde-saphyr reads other digit-led
            // text with Rust's float parser, which takes no hex (so a UID like `5f0c1d2e-01` is text).
            let hex = matches!(bytes, [b'0', b'x' | b'X', ..]);
            let number_letters: &[u8] = if hex {
                b"abcdefABCDEFxX"
            } else {
                b"xXoObBeEiInNtTyYzZ"
            };
            if !bytes
                .iter()
                .any(|b| b.is_ascii_alphabetic() && !number_letters.contains(b))
            {
                return None;
            }
        }
        b'-' => {
            // `-c` and `--flag` are text; any other dash form may be a number or an indicator.
            let dash_word = match bytes.get(1) {
                Some(b'-') => bytes.get(2).is_some_and(u8::is_ascii_alphabetic),
                second => second.is_some_and(u8::is_ascii_alphabetic),
            };
            if !dash_word {
                return None;
            }
        }
        b'/' | b'_' | b'$' | b'.' => {}
        _ => return None,
    }
    Some(Value::String(text.to_owned()))
}

/// The content of a double-quoted scalar with the common escapes; `None` for any other escape.
fn unescape_double(inner: &str) -> Option<String> {
    if !inner.contains('\\') {
        return Some(inner.to_owned());
    }
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        out.push(match chars.next()? {
            '\\' => '\\',
            '"' => '"',
            '/' => '/',
            'n' => '\n',
            't' => '\t',
            'r' => '\r',
            'b' => '\u{8}',
            'f' => '\u{c}',
            '0' => '\0',
            'u' => {
                let hex: String = chars.by_ref().take(4).collect();
                if hex.len() != 4 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return None;
                }
                char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?
            }
            _ => return None,
        });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn saphyr(text: &str) -> Option<Value> {
        serde_saphyr::from_str(text).ok()
    }

    const TRAINJOB: &str = "apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: job-1, namespace: team-1}   # flow mapping
spec:
  runtimeRef: {name: torch-distributed}
  trainer:
    numNodes: 2
    image: example.com/train:1
    command: [torchrun, train.py]
    args:
    - --epochs=3
    - './run.sh'
    env: [{name: EPOCHS, value: \"4\"}]
    resourcesPerNode: {limits: {cpu: \"8\", memory: 32Gi, nvidia.com/gpu: \"1\"}}
  suspend: false
";

    #[test]
    fn reads_a_trainjob_like_serde_saphyr() {
        let fast = parse(TRAINJOB).expect("a TrainJob manifest is in the subset");
        assert_eq!(Some(fast), saphyr(TRAINJOB));
    }

    #[test]
    fn declines_what_it_does_not_know() {
        for text in [
            "a: &x 1\nb: *x\n",
            "a: !!str 1\n",
            "a: |\n  text\n",
            "a: >-\n  text\n",
            "a: plain\n  continued\n",
            "a: \"two\n  lines\"\n",
            "a: 0x1F\n",
            "a: 012\n",
            "a: 1_000\n",
            "a: .inf\n",
            "a: 1.5\n",
            "a: 12:30\n",
            "a: 99999999999999999999\n",
            "a: nan\n",
            "a: 1\na: 2\n",
            "1: a\n",
            "yes: a\n",
            "<<: {a: 1}\n",
            "? a\n: b\n",
            "a:\tb\n",
            "a: b\r\n",
            "%YAML 1.2\na: b\n",
            "a: [b, ]\n",
            "a: {b: 1,\n  c: 2}\n",
            "a: [b: c]\n",
            "- - a\n",
            "plain scalar\n",
            "",
            "# only a comment\n",
        ] {
            assert_eq!(parse(text), None, "{text:?}");
        }
        // A key over 1,024 characters as written (here 600 escaped quotes) is not a simple key for YAML.
        let long_key = format!("'{}': 1\n", "''".repeat(600));
        assert!(saphyr(&long_key).is_none());
        assert_eq!(parse(&long_key), None);
        // Past 32 comment lines in a row after `a:`, serde-saphyr gives up; the fast path must not answer.
        let many_comments = format!("a:\n{}  b: 1\n", "# c\n".repeat(40));
        assert!(saphyr(&many_comments).is_none());
        assert_eq!(parse(&many_comments), None);
    }

    #[test]
    fn resolves_scalars_like_serde_saphyr() {
        for scalar in [
            "yes",
            "No",
            "ON",
            "off",
            "y",
            "N",
            "true",
            "FALSE",
            "~",
            "null",
            "NULL",
            "0",
            "7",
            "-7",
            "32Gi",
            "500m",
            "1Ti",
            "-c",
            "--flag",
            "./run.sh",
            "/data",
            "$HOME",
            "_x",
            "a b",
            "a:b",
            "it's",
            "'q'",
            "\"a\\tb\\u00e9\"",
            "'it''s'",
            "\"\"",
            "''",
            "x#y",
            "é",
        ] {
            let text = format!("k: {scalar}\nl: [{scalar}]\n");
            if let Some(fast) = parse(&text) {
                assert_eq!(Some(fast), saphyr(&text), "{text:?}");
            }
        }
        // Digit-led text: hex letters make a string unless the scalar starts with `0x`.
        for (scalar, string) in [
            ("5f0c1d2e-00001", true),
            ("1a", true),
            ("0c", true),
            ("9d", true),
            ("1f", true),
            ("2fe", true),
            ("3ad9-4c1f", true),
            ("0x1f", false),
            ("1e5", false),
            ("7E3", false),
            ("0b1", false),
            ("0o7", false),
        ] {
            let text = format!("k: {scalar}\n");
            let expected = saphyr(&text).expect("serde-saphyr reads every case");
            assert_eq!(
                expected["k"].is_string(),
                string,
                "serde-saphyr on {scalar:?}"
            );
            match parse(&text) {
                Some(fast) => assert_eq!(fast, expected, "{scalar:?}"),
                None => assert!(!string, "the fast path should read {scalar:?} as text"),
            }
        }
        assert_eq!(parse("k: yes\n"), Some(serde_json::json!({"k": true})));
        assert_eq!(parse("k: 32Gi\n"), Some(serde_json::json!({"k": "32Gi"})));
        assert_eq!(parse("k: -7\n"), Some(serde_json::json!({"k": -7})));
    }

    /// A TrainJob's shape in plain serde types: optional structs, lists of structs, maps, numbers and booleans.
    mod typed {
        use std::collections::BTreeMap;

        use serde::{Deserialize, Serialize};

        #[derive(Debug, PartialEq, Deserialize, Serialize)]
        #[serde(rename_all = "camelCase")]
        pub struct Job {
            pub api_version: Option<String>,
            pub kind: Option<String>,
            pub metadata: Option<Meta>,
            pub spec: Option<Spec>,
        }

        #[derive(Debug, PartialEq, Deserialize, Serialize)]
        pub struct Meta {
            pub name: Option<String>,
            pub namespace: Option<String>,
        }

        #[derive(Debug, PartialEq, Deserialize, Serialize)]
        #[serde(rename_all = "camelCase")]
        pub struct Spec {
            pub runtime_ref: Option<Ref>,
            pub trainer: Option<Trainer>,
            pub suspend: Option<bool>,
        }

        #[derive(Debug, PartialEq, Deserialize, Serialize)]
        pub struct Ref {
            pub name: String,
        }

        #[derive(Debug, PartialEq, Deserialize, Serialize)]
        #[serde(rename_all = "camelCase")]
        pub struct Trainer {
            pub num_nodes: Option<i32>,
            pub image: Option<String>,
            pub command: Option<Vec<String>>,
            pub env: Option<Vec<Env>>,
            pub resources_per_node: Option<Resources>,
        }

        #[derive(Debug, PartialEq, Deserialize, Serialize)]
        pub struct Env {
            pub name: String,
            pub value: Option<String>,
        }

        #[derive(Debug, PartialEq, Deserialize, Serialize)]
        pub struct Resources {
            pub limits: Option<BTreeMap<String, String>>,
        }
    }

    /// A generated node: scalars are written as they appear in the text.
    #[derive(Clone, Debug)]
    enum Node {
        Scalar(String),
        Map(Vec<(String, Node)>, bool),
        Seq(Vec<Node>, bool),
    }

    fn scalar_text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-zA-Z][a-zA-Z0-9./_:-]{0,8}",
            "[0-9]{1,20}",
            "-?[0-9][0-9a-zA-Z._:+-]{0,6}",
            "[ -~]{0,6}",
            "'[ -~]{0,6}'",
            "\"[ -~]{0,6}\"",
            "\\PC{0,4}",
            prop::sample::select(vec![
                "yes",
                "No",
                "ON",
                "y",
                "n",
                "~",
                "null",
                "Null",
                "0x1F",
                "0o17",
                "012",
                "1_000",
                ".inf",
                "-.5",
                "1e3",
                "1.5",
                "+1",
                "-0",
                "0",
                "12:30",
                "2024-01-01",
                "nan",
                "Infinity",
                "- a",
                "a: b",
                "a #b",
                "#x",
                "&a x",
                "*a",
                "!x y",
                "|",
                "> x",
                "'it''s'",
                "\"a\\tb\"",
                "\"\\x41\"",
                "\"\\u00e9\"",
                "\"\\ud800\"",
                "-c",
                "--flag",
                "./run.sh",
                "32Gi",
                "1Ti",
                "500m",
                "-8",
                "a:b",
                "[x]",
                "{x: 1}",
                "{}",
                "[]",
                "é",
                "\u{85}",
                "a\tb",
                "-",
                "---",
                "...",
                "?",
                "<<",
                "@x",
                "`x",
                "%x",
                "x,y",
                "x]",
                "~x",
            ])
            .prop_map(str::to_owned),
        ]
    }

    fn node() -> impl Strategy<Value = Node> {
        scalar_text()
            .prop_map(Node::Scalar)
            .prop_recursive(4, 24, 4, |inner| {
                let key = prop_oneof![
                    "[a-zA-Z][a-zA-Z0-9./_-]{0,6}".boxed(),
                    scalar_text().boxed()
                ];
                prop_oneof![
                    (
                        prop::collection::vec((key, inner.clone()), 0..4),
                        any::<bool>()
                    )
                        .prop_map(|(entries, flow)| Node::Map(entries, flow)),
                    (prop::collection::vec(inner, 0..4), any::<bool>())
                        .prop_map(|(items, flow)| Node::Seq(items, flow)),
                ]
            })
    }

    fn flow(node: &Node, out: &mut String) {
        match node {
            Node::Scalar(s) => out.push_str(s),
            Node::Map(entries, _) => {
                out.push('{');
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(k);
                    out.push_str(": ");
                    flow(v, out);
                }
                out.push('}');
            }
            Node::Seq(items, _) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    flow(v, out);
                }
                out.push(']');
            }
        }
    }

    fn is_block(node: &Node) -> bool {
        match node {
            Node::Map(entries, flow) => !flow && !entries.is_empty(),
            Node::Seq(items, flow) => !flow && !items.is_empty(),
            Node::Scalar(_) => false,
        }
    }

    /// Writes a block node at `indent`; `first` is what starts its first line (`- ` of a parent item).
    fn block(node: &Node, indent: usize, out: &mut String) {
        let pad = " ".repeat(indent);
        match node {
            Node::Map(entries, _) => {
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 || !out.ends_with("- ") {
                        out.push_str(&pad);
                    }
                    out.push_str(k);
                    out.push(':');
                    value_after(v, indent, out);
                }
            }
            Node::Seq(items, _) => {
                for (i, v) in items.iter().enumerate() {
                    if i > 0 || !out.ends_with("- ") {
                        out.push_str(&pad);
                    }
                    out.push_str("- ");
                    if is_block(v) {
                        match v {
                            Node::Map(..) => block(v, indent + 2, out),
                            _ => {
                                out.push('\n');
                                block(v, indent + 2, out);
                            }
                        }
                    } else {
                        flow(v, out);
                        out.push_str(if i % 2 == 0 { "\n" } else { "  # c\n" });
                    }
                }
            }
            Node::Scalar(_) => {}
        }
    }

    fn value_after(v: &Node, indent: usize, out: &mut String) {
        if is_block(v) {
            out.push('\n');
            // Sequences under a key may sit at the key's own indentation.
            let child = match v {
                Node::Seq(items, _) if items.len() % 2 == 1 => indent,
                _ => indent + 2,
            };
            block(v, child, out);
        } else {
            out.push(' ');
            flow(v, out);
            out.push('\n');
        }
    }

    fn document() -> impl Strategy<Value = String> {
        (node(), "[a-z]{1,5}").prop_map(|(n, key)| {
            let mut out = String::new();
            if is_block(&n) {
                block(&n, 0, &mut out);
            } else {
                out.push_str(&key);
                out.push(':');
                value_after(&n, 0, &mut out);
            }
            out
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// The law: the fast path never disagrees with serde-saphyr; it may only decline.
        #[test]
        fn fast_path_agrees_with_serde_saphyr(doc in document()) {
            if let Some(fast) = parse(&doc) {
                prop_assert_eq!(saphyr(&doc), Some(fast), "{}", doc);
            }
        }

        /// Digit-led plain scalars (UIDs, versions, sizes, number forms) resolve as serde-saphyr resolves them.
        #[test]
        fn digit_led_scalars_agree_with_serde_saphyr(scalar in "-?[0-9][0-9a-fA-FxXoObBeE._+:-]{0,10}") {
            let doc = format!("k: {scalar}\n");
            if let Some(fast) = parse(&doc) {
                prop_assert_eq!(saphyr(&doc), Some(fast), "{}", doc);
            }
        }

        /// A typed read from the fast value is the typed read serde-saphyr makes, on documents shaped like the
        /// manifests `kubetrain render --no-validate` reads (kubetrain-api runs the same law on its TrainJob).
        #[test]
        fn typed_read_from_the_fast_value_is_serde_saphyrs(
            s in prop::collection::vec(
                prop_oneof![
                    3 => "[a-z][a-z0-9-]{0,6}|[1-9][0-9]{0,2}|\"[0-9]{1,2}\"|'[0-9]Gi'|true|false",
                    1 => scalar_text(),
                ],
                12,
            ),
            flow_trainer in any::<bool>(),
        ) {
            let trainer = if flow_trainer {
                format!(
                    "  trainer: {{numNodes: {}, image: {}, command: [{}, x], env: [{{name: {}, value: {}}}], resourcesPerNode: {{limits: {{cpu: {}, memory: {}}}}}}}\n",
                    s[4], s[5], s[6], s[7], s[8], s[9], s[10]
                )
            } else {
                format!(
                    "  trainer:\n    numNodes: {}\n    image: {}\n    command:\n    - {}\n    env: [{{name: {}, value: {}}}]\n    resourcesPerNode: {{limits: {{cpu: {}, memory: {}}}}}\n",
                    s[4], s[5], s[6], s[7], s[8], s[9], s[10]
                )
            };
            let doc = format!(
                "apiVersion: {}\nkind: TrainJob\nmetadata: {{name: {}, namespace: {}}}\nspec:\n  runtimeRef: {{name: {}}}\n{trainer}  suspend: {}\n",
                s[0], s[1], s[2], s[3], s[11]
            );
            if let Some(fast) = parse(&doc) {
                prop_assert_eq!(saphyr(&doc), Some(fast.clone()), "{}", doc);
                if let Some(job) = from_str_typed::<typed::Job>(&doc) {
                    let direct = serde_saphyr::from_str::<typed::Job>(&doc);
                    prop_assert!(direct.is_ok(), "{}", doc);
                    prop_assert_eq!(direct.unwrap(), job, "{}", doc);
                }
            }
        }

        /// Documents of plain words are in the subset.
        #[test]
        fn plain_documents_are_in_the_subset(
            entries in prop::collection::btree_map("k[a-z0-9-]{0,6}", "v[a-z0-9./-]{0,8}|[1-9][0-9]{0,5}", 1..6),
            nested in any::<bool>(),
        ) {
            let mut doc = String::from("top:\n");
            for (k, v) in &entries {
                doc.push_str(&format!("  {k}: {v}\n"));
            }
            if nested {
                doc.push_str("list:\n");
                for (k, v) in &entries {
                    doc.push_str(&format!("- {{{k}: {v}}}\n"));
                }
            }
            let fast = parse(&doc);
            prop_assert!(fast.is_some(), "{}", doc);
            prop_assert_eq!(fast, saphyr(&doc));
        }
    }
}
