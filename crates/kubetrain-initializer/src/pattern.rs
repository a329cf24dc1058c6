//! `IGNORE_PATTERNS`: shell-style globs with the semantics of Python's `fnmatch`, which upstream's
//! initializers (and `huggingface_hub`) use, so the same patterns select the same files.
//!
//! `*` matches any run of characters *including* `/`, `?` one character, `[abc]` / `[a-z]` one
//! character of a set and `[!abc]` one character outside it. A `[` without a closing `]` is a
//! literal. Matching is case-sensitive. A pattern ending in `/` matches everything below that
//! directory (as in `huggingface_hub`).

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(char),
    AnyOne,
    AnyRun,
    Set { negated: bool, items: Vec<SetItem> },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum SetItem {
    One(char),
    Range(char, char),
}

/// One compiled glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    source: String,
    tokens: Vec<Token>,
}

impl Pattern {
    /// Compiles a glob; every string is a valid glob, as with `fnmatch`.
    ///
    /// ```
    /// use kubetrain_initializer::Pattern;
    /// let p = Pattern::new("*.bin");
    /// assert!(p.matches("pytorch_model.bin"));
    /// assert!(p.matches("original/consolidated.bin"));
    /// assert!(!p.matches("model.safetensors"));
    /// ```
    pub fn new(source: &str) -> Self {
        let mut text = source.to_string();
        if text.ends_with('/') {
            text.push('*');
        }
        Self {
            source: source.to_string(),
            tokens: compile(&text),
        }
    }

    /// The glob as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether `name` matches the whole glob.
    pub fn matches(&self, name: &str) -> bool {
        let name: Vec<char> = name.chars().collect();
        matches_tokens(&self.tokens, &name)
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

fn compile(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '*' => {
                // Runs of `*` are one `*`; keeps matching linear.
                if tokens.last() != Some(&Token::AnyRun) {
                    tokens.push(Token::AnyRun);
                }
                i += 1;
            }
            '?' => {
                tokens.push(Token::AnyOne);
                i += 1;
            }
            '[' => match compile_set(&chars, i + 1) {
                Some((token, next)) => {
                    tokens.push(token);
                    i = next;
                }
                None => {
                    tokens.push(Token::Literal('['));
                    i += 1;
                }
            },
            c => {
                tokens.push(Token::Literal(c));
                i += 1;
            }
        }
    }
    tokens
}

/// Parses a set starting just after `[`; `None` when there is no closing `]`.
fn compile_set(chars: &[char], start: usize) -> Option<(Token, usize)> {
    let mut i = start;
    let negated = chars.get(i) == Some(&'!');
    if negated {
        i += 1;
    }
    let mut items = Vec::new();
    let mut first = true;
    loop {
        let c = *chars.get(i)?;
        // A `]` right after `[` or `[!` is a member, not the end.
        if c == ']' && !first {
            return Some((Token::Set { negated, items }, i + 1));
        }
        first = false;
        if chars.get(i + 1) == Some(&'-') && chars.get(i + 2).is_some_and(|&e| e != ']') {
            items.push(SetItem::Range(c, chars[i + 2]));
            i += 3;
        } else {
            items.push(SetItem::One(c));
            i += 1;
        }
    }
}

fn set_contains(items: &[SetItem], c: char) -> bool {
    items.iter().any(|item| match *item {
        SetItem::One(x) => x == c,
        SetItem::Range(lo, hi) => lo <= c && c <= hi,
    })
}

fn token_matches_one(token: &Token, c: char) -> bool {
    match token {
        Token::Literal(x) => *x == c,
        Token::AnyOne => true,
        Token::Set { negated, items } => set_contains(items, c) != *negated,
        Token::AnyRun => false,
    }
}

/// Greedy matching that backtracks only to the last `*` (linear in practice, no recursion).
fn matches_tokens(tokens: &[Token], name: &[char]) -> bool {
    let (mut t, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if t < tokens.len() && tokens[t] == Token::AnyRun {
            star = Some((t, n));
            t += 1;
        } else if t < tokens.len() && token_matches_one(&tokens[t], name[n]) {
            t += 1;
            n += 1;
        } else if let Some((star_t, star_n)) = star {
            t = star_t + 1;
            n = star_n + 1;
            star = Some((star_t, star_n + 1));
        } else {
            return false;
        }
    }
    tokens[t..].iter().all(|tok| *tok == Token::AnyRun)
}

/// A list of globs; a name matches the set when it matches any of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PatternSet {
    patterns: Vec<Pattern>,
}

impl PatternSet {
    /// Parses the comma-separated `IGNORE_PATTERNS` form; blanks around items are trimmed and empty
    /// items dropped, as upstream does.
    ///
    /// ```
    /// use kubetrain_initializer::PatternSet;
    /// let set = PatternSet::parse_list(" *.h5 , ,checkpoints/ ");
    /// assert_eq!(set.len(), 2);
    /// assert!(set.matches("tf_model.h5"));
    /// assert!(set.matches("checkpoints/step-1/model.safetensors"));
    /// assert!(!set.matches("config.json"));
    /// ```
    pub fn parse_list(list: &str) -> Self {
        Self::from_globs(list.split(',').map(str::trim).filter(|s| !s.is_empty()))
    }

    /// Builds a set from individual globs.
    pub fn from_globs<'a>(globs: impl IntoIterator<Item = &'a str>) -> Self {
        Self {
            patterns: globs.into_iter().map(Pattern::new).collect(),
        }
    }

    /// Whether `name` matches any glob of the set.
    pub fn matches(&self, name: &str) -> bool {
        self.patterns.iter().any(|p| p.matches(name))
    }

    /// The first glob that matches `name`, for log lines.
    pub fn first_match(&self, name: &str) -> Option<&Pattern> {
        self.patterns.iter().find(|p| p.matches(name))
    }

    /// Number of globs.
    pub fn len(&self) -> usize {
        self.patterns.len()
    }

    /// Whether the set has no globs (matches nothing).
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// The globs in order.
    pub fn patterns(&self) -> &[Pattern] {
        &self.patterns
    }
}

impl fmt::Display for PatternSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list: Vec<&str> = self.patterns.iter().map(Pattern::as_str).collect();
        f.write_str(&list.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnmatch_table() {
        // (pattern, name, matches) — expectations follow Python's fnmatch.fnmatchcase.
        let table = [
            ("*.bin", "a.bin", true),
            ("*.bin", "dir/a.bin", true),
            ("*.bin", "a.bin.json", false),
            ("*.safetensors", "model-00001-of-00002.safetensors", true),
            ("?.txt", "a.txt", true),
            ("?.txt", "ab.txt", false),
            ("[ab].txt", "b.txt", true),
            ("[!ab].txt", "b.txt", false),
            ("[!ab].txt", "c.txt", true),
            ("[a-c]x", "bx", true),
            ("[a-c]x", "dx", false),
            ("[]]x", "]x", true),
            ("[!]]x", "]x", false),
            ("[a-]x", "-x", true),
            ("[abc", "[abc", true),
            ("[abc", "a", false),
            ("*", "", true),
            ("", "", true),
            ("", "a", false),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXbY", false),
            ("**/*.json", "x/config.json", true),
            ("original/", "original/params.json", true),
            ("original/", "originals", false),
            ("*.BIN", "a.bin", false),
            ("data/*/train-*.parquet", "data/en/train-0001.parquet", true),
        ];
        for (pattern, name, want) in table {
            assert_eq!(
                Pattern::new(pattern).matches(name),
                want,
                "{pattern:?} vs {name:?}"
            );
        }
    }

    #[test]
    fn set_display_round_trips() {
        let set = PatternSet::parse_list("*.msgpack, *.h5,,*.bin");
        assert_eq!(set.to_string(), "*.msgpack,*.h5,*.bin");
        assert_eq!(PatternSet::parse_list(&set.to_string()), set);
        assert_eq!(set.first_match("x.h5").map(Pattern::as_str), Some("*.h5"));
        assert!(PatternSet::parse_list(" , ").is_empty());
    }
}
