//! The few Python behaviours the SDK's builders depend on, reproduced exactly: `repr()` of the values a
//! function call is written with, `textwrap.dedent`, `shlex.quote` and `inspect.getsource` of a function.

use std::fmt::{self, Write as _};

/// A Python value for `func_args`: what `repr()` writes into `train(**{...})`.
///
/// ```
/// use kubetrain_client::trainer::PyValue;
/// let v = PyValue::dict([("lr", PyValue::from(0.00001)), ("name", "it's".into()), ("layers", vec![1, 2].into())]);
/// assert_eq!(v.to_string(), r#"{'lr': 1e-05, 'name': "it's", 'layers': [1, 2]}"#);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum PyValue {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An `int`.
    Int(i64),
    /// A `float`, written as Python's shortest round-trip `repr`.
    Float(f64),
    /// A `str`.
    Str(String),
    /// A `list`.
    List(Vec<PyValue>),
    /// A `tuple`.
    Tuple(Vec<PyValue>),
    /// A `dict` with string keys, in insertion order (as Python keeps it).
    Dict(Vec<(String, PyValue)>),
}

impl PyValue {
    /// A dict from `(key, value)` pairs, in order.
    pub fn dict<K: Into<String>, I: IntoIterator<Item = (K, PyValue)>>(items: I) -> Self {
        PyValue::Dict(items.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }
}

impl From<bool> for PyValue {
    fn from(v: bool) -> Self {
        PyValue::Bool(v)
    }
}
impl From<i64> for PyValue {
    fn from(v: i64) -> Self {
        PyValue::Int(v)
    }
}
impl From<i32> for PyValue {
    fn from(v: i32) -> Self {
        PyValue::Int(v.into())
    }
}
impl From<f64> for PyValue {
    fn from(v: f64) -> Self {
        PyValue::Float(v)
    }
}
impl From<&str> for PyValue {
    fn from(v: &str) -> Self {
        PyValue::Str(v.to_string())
    }
}
impl From<String> for PyValue {
    fn from(v: String) -> Self {
        PyValue::Str(v)
    }
}
impl<T: Into<PyValue>> From<Vec<T>> for PyValue {
    fn from(v: Vec<T>) -> Self {
        PyValue::List(v.into_iter().map(Into::into).collect())
    }
}
impl<T: Into<PyValue>> From<Option<T>> for PyValue {
    fn from(v: Option<T>) -> Self {
        v.map_or(PyValue::None, Into::into)
    }
}

impl fmt::Display for PyValue {
    /// Python's `repr()`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PyValue::None => f.write_str("None"),
            PyValue::Bool(true) => f.write_str("True"),
            PyValue::Bool(false) => f.write_str("False"),
            PyValue::Int(i) => write!(f, "{i}"),
            PyValue::Float(x) => f.write_str(&float_repr(*x)),
            PyValue::Str(s) => f.write_str(&str_repr(s)),
            PyValue::List(items) => {
                f.write_char('[')?;
                join(f, items)?;
                f.write_char(']')
            }
            PyValue::Tuple(items) => {
                f.write_char('(')?;
                join(f, items)?;
                if items.len() == 1 {
                    f.write_char(',')?;
                }
                f.write_char(')')
            }
            PyValue::Dict(items) => {
                f.write_char('{')?;
                for (i, (k, v)) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{}: {v}", str_repr(k))?;
                }
                f.write_char('}')
            }
        }
    }
}

fn join(f: &mut fmt::Formatter<'_>, items: &[PyValue]) -> fmt::Result {
    for (i, v) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{v}")?;
    }
    Ok(())
}

/// `repr(float)`: the shortest digits that round-trip, positional when the decimal exponent is in
/// -4..16, else scientific with a signed two-digit exponent (`1e-05`, `1e+16`).
pub(crate) fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    // Rust's `{:e}` gives the same shortest round-trip digits Python uses: `d.ddde±x`.
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let decpt = exp + 1;
    if !(-4 < decpt && decpt <= 16) {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{frac}e{esign}{:02}", exp.abs());
    }
    let n = digits.len() as i32;
    if decpt <= 0 {
        format!("{sign}0.{}{digits}", "0".repeat((-decpt) as usize))
    } else if decpt >= n {
        format!("{sign}{digits}{}.0", "0".repeat((decpt - n) as usize))
    } else {
        let (int, frac) = digits.split_at(decpt as usize);
        format!("{sign}{int}.{frac}")
    }
}

/// `repr(str)`: single quotes unless the text has `'` and no `"`; backslash escapes for the quote,
/// backslash, `\t \n \r` and other control characters.
pub(crate) fn str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            // Python escapes non-printable characters; control characters are the ones a
            // function argument realistically holds.
            c if (c as u32) < 0x20 || (0x7f..0xa0).contains(&(c as u32)) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// `shlex.quote`: the text as is when it only has `[A-Za-z0-9_@%+=:,./-]`, else in single quotes.
///
/// ```
/// use kubetrain_client::trainer::shlex_quote;
/// assert_eq!(shlex_quote("torch==2.7.1"), "torch==2.7.1");
/// assert_eq!(shlex_quote("transformers[torch]"), "'transformers[torch]'");
/// assert_eq!(shlex_quote("it's"), r#"'it'"'"'s'"#);
/// ```
pub fn shlex_quote(s: &str) -> String {
    if s.is_empty() {
        return "''".into();
    }
    let safe = s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_@%+=:,./-".contains(&b));
    if safe {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\"'\"'"))
    }
}

/// `textwrap.dedent`: whitespace-only lines become empty, then the longest common leading whitespace
/// of the other lines is removed.
///
/// ```
/// use kubetrain_client::trainer::dedent;
/// assert_eq!(dedent("    def f():\n        pass\n  \n"), "def f():\n    pass\n\n");
/// ```
pub fn dedent(text: &str) -> String {
    let lines: Vec<&str> = text.split('\n').collect();
    let cleaned: Vec<&str> = lines
        .iter()
        .map(|l| {
            if !l.is_empty() && l.bytes().all(|b| b == b' ' || b == b'\t') {
                ""
            } else {
                *l
            }
        })
        .collect();
    let mut margin: Option<&str> = None;
    for line in &cleaned {
        let indent_len = line
            .bytes()
            .take_while(|b| *b == b' ' || *b == b'\t')
            .count();
        if indent_len == line.len() {
            continue; // empty (a line of only whitespace was emptied above)
        }
        let indent = &line[..indent_len];
        margin = Some(match margin {
            None => indent,
            Some(m) if indent.starts_with(m) => m,
            Some(m) if m.starts_with(indent) => indent,
            Some(m) => {
                let common = m
                    .bytes()
                    .zip(indent.bytes())
                    .take_while(|(a, b)| a == b)
                    .count();
                &m[..common]
            }
        });
    }
    let margin = margin.unwrap_or("");
    cleaned
        .iter()
        .map(|l| l.strip_prefix(margin).unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Lexer state across lines: open brackets and an open triple-quoted string.
#[derive(Default)]
struct Scan {
    depth: i32,
    triple: Option<&'static str>,
}

impl Scan {
    /// Consumes one line; returns whether it holds a token (code outside comments).
    fn line(&mut self, line: &str) -> bool {
        let b = line.as_bytes();
        let mut i = 0;
        let mut token = false;
        while i < b.len() {
            if let Some(t) = self.triple {
                match line[i..].find(t) {
                    Some(p) if p == 0 || b[i + p - 1] != b'\\' => {
                        i += p + 3;
                        self.triple = None;
                    }
                    Some(p) => i += p + 1,
                    None => return true,
                }
                continue;
            }
            match b[i] {
                b'#' => break,
                b' ' | b'\t' | b'\r' | b'\x0c' => i += 1,
                b'(' | b'[' | b'{' => {
                    self.depth += 1;
                    token = true;
                    i += 1;
                }
                b')' | b']' | b'}' => {
                    self.depth -= 1;
                    token = true;
                    i += 1;
                }
                q @ (b'\'' | b'"') => {
                    token = true;
                    let triple: &'static str = if q == b'"' { "\"\"\"" } else { "'''" };
                    if line[i..].starts_with(triple) {
                        self.triple = Some(triple);
                        i += 3;
                        continue;
                    }
                    i += 1;
                    while i < b.len() && b[i] != q {
                        i += if b[i] == b'\\' { 2 } else { 1 };
                    }
                    i += 1;
                }
                _ => {
                    token = true;
                    i += 1;
                }
            }
        }
        token
    }

    fn continues(&self, line: &str) -> bool {
        self.triple.is_some() || self.depth > 0 || line.trim_end().ends_with('\\')
    }
}

fn indent_of(line: &str) -> usize {
    line.bytes()
        .take_while(|b| *b == b' ' || *b == b'\t')
        .count()
}

/// `inspect.getsource` of the function `name` defined in `source`: its decorators, header and body up to
/// the last line of code (trailing blank and comment lines are not part of it), each line ending in `\n`.
/// The first `def name(` (or `async def`) at any indentation is taken. `None` when there is none.
///
/// ```
/// use kubetrain_client::trainer::function_source;
/// let file = "import os\n\ndef train(lr):\n    print(lr)\n\n# done\nx = 1\n";
/// assert_eq!(function_source(file, "train").unwrap(), "def train(lr):\n    print(lr)\n");
/// ```
pub fn function_source(source: &str, name: &str) -> Option<String> {
    let lines: Vec<&str> = source.lines().collect();
    let is_def = |line: &str| {
        let t = line.trim_start();
        let t = t
            .strip_prefix("async")
            .filter(|r| r.starts_with([' ', '\t']))
            .map_or(t, str::trim_start);
        t.strip_prefix("def")
            .filter(|r| r.starts_with([' ', '\t']))
            .map(str::trim_start)
            .and_then(|r| r.strip_prefix(name))
            .is_some_and(|r| r.trim_start().starts_with('('))
    };
    // A `def` inside a multi-line string is not a definition: scan from the top.
    let mut scan = Scan::default();
    let mut def = None;
    for (i, line) in lines.iter().enumerate() {
        let in_code = scan.triple.is_none() && scan.depth == 0;
        if in_code && is_def(line) {
            def = Some(i);
            break;
        }
        scan.line(line);
    }
    let def = def?;
    let indent = indent_of(lines[def]);
    let mut start = def;
    while start > 0 && {
        let prev = lines[start - 1];
        indent_of(prev) == indent && prev.trim_start().starts_with('@')
    } {
        start -= 1;
    }
    let mut scan = Scan::default();
    let mut end = def;
    let mut i = def;
    let mut continuation = false;
    // The body's column (inspect: the INDENT after the header); comments indented at least as much
    // belong to the function even after its last statement, as in inspect.getsource.
    let mut body_col: Option<usize> = None;
    let mut header_done = false;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        let blank = trimmed.is_empty();
        let comment = trimmed.starts_with('#');
        if i > def && !continuation && !blank && !comment {
            if indent_of(line) <= indent {
                break;
            }
            if header_done && body_col.is_none() {
                body_col = Some(indent_of(line));
            }
        }
        if !continuation && comment && body_col.is_some_and(|c| indent_of(line) >= c) {
            end = i;
        }
        let was_continuation = continuation;
        if scan.line(line) {
            end = i;
        }
        continuation = scan.continues(line);
        if continuation || was_continuation {
            end = end.max(i);
        }
        if !continuation && !blank && !comment {
            header_done = true;
        }
        i += 1;
    }
    let mut out = String::new();
    for line in &lines[start..=end] {
        out.push_str(line);
        out.push('\n');
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_repr_matches_python() {
        let cases = [
            (0.01, "0.01"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (1.0, "1.0"),
            (-2.5, "-2.5"),
            (1e16, "1e+16"),
            (1234567890123456.0, "1234567890123456.0"),
            (123.456, "123.456"),
            (0.1 + 0.2, "0.30000000000000004"),
            (3e-7, "3e-07"),
            (1.5e300, "1.5e+300"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (100.0, "100.0"),
        ];
        for (x, want) in cases {
            assert_eq!(float_repr(x), want, "{x:?}");
        }
    }

    #[test]
    fn str_repr_matches_python() {
        let cases = [
            ("abc", "'abc'"),
            ("it's", "\"it's\""),
            ("say \"hi\"", "'say \"hi\"'"),
            ("both ' and \"", "'both \\' and \"'"),
            ("a\\b\n\t", "'a\\\\b\\n\\t'"),
            ("\x01", "'\\x01'"),
            ("héllo", "'héllo'"),
        ];
        for (s, want) in cases {
            assert_eq!(str_repr(s), want, "{s:?}");
        }
    }

    #[test]
    fn tuples_and_nesting() {
        let v = PyValue::Tuple(vec![PyValue::Int(1)]);
        assert_eq!(v.to_string(), "(1,)");
        let v = PyValue::dict([
            ("a", PyValue::None),
            ("b", PyValue::Bool(false)),
            ("c", PyValue::dict([("x", PyValue::List(vec![]))])),
        ]);
        assert_eq!(v.to_string(), "{'a': None, 'b': False, 'c': {'x': []}}");
    }

    #[test]
    fn getsource_cases() {
        let file = "\
import x

@decorator
def train(a,
          b=1):
    \"\"\"Doc
with a line at column 0.
\"\"\"
    if a:
        pass
# a comment inside
    return b
  # less indented: not part of it

def other(): pass
class K:
    def method(self):
        return 1
def one(): return 2
";
        assert_eq!(
            function_source(file, "train").unwrap(),
            "@decorator\ndef train(a,\n          b=1):\n    \"\"\"Doc\nwith a line at column 0.\n\"\"\"\n    if a:\n        pass\n# a comment inside\n    return b\n"
        );
        assert_eq!(
            function_source(file, "other").unwrap(),
            "def other(): pass\n"
        );
        assert_eq!(
            function_source(file, "method").unwrap(),
            "    def method(self):\n        return 1\n"
        );
        assert_eq!(
            function_source(file, "one").unwrap(),
            "def one(): return 2\n"
        );
        assert_eq!(
            function_source("def f():\n    x = 1\n    # tail\n\ny = 2\n", "f").unwrap(),
            "def f():\n    x = 1\n    # tail\n"
        );
        assert_eq!(function_source(file, "missing"), None);
        assert_eq!(function_source(file, "trai"), None);
    }
}
