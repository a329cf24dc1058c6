//! A small, fast block-style YAML writer for rendered objects (what `kubetrain render` prints).
//!
//! Keys are sorted (as `kubectl` prints them), strings are left plain only when no YAML 1.1 or 1.2 reader can
//! take them for anything else, multi-line strings become literal blocks, and everything else is double-quoted
//! with JSON escapes (a valid YAML double-quoted scalar). A property test checks that the output reads back to
//! the same value.
//!
//! ```
//! let v = serde_json::json!({"kind": "ConfigMap", "data": {"hostfile": "a slots=1\n", "count": "1"}});
//! assert_eq!(kubetrain_jobset::yaml::to_string(&v),
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
    out.extend(std::iter::repeat_n(' ', n));
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
        Value::Number(n) => out.push_str(&n.to_string()),
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
        out.push_str(&Value::String(s.to_owned()).to_string());
    }
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
    if RESERVED.iter().any(|r| r.eq_ignore_ascii_case(s)) {
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
    if s.ends_with([' ', ':', '\t']) || s.contains(": ") || s.contains(" #") || s.contains(":\t") {
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
