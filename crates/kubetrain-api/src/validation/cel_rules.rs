//! Recognition of the CEL rule shapes our CRDs use (`self == oldSelf`, `self >= 1`, `self in [...]`,
//! `has(self.x)`, `x.matches('re')`, `size(x) <= n`, joined with `||`, `&&` and `!`) into a small expression
//! tree that [`super::cel_native`] evaluates without building CEL values.
//!
//! Anything outside this subset (macros such as `exists`/`all`/`filter`, arithmetic, escapes in string
//! literals, identifiers that kube-cel would escape) is refused, and the whole schema then stays on kube-cel.

use regex::Regex;

/// A parsed rule expression.
#[derive(Debug)]
pub(crate) enum Expr {
    /// `self`.
    SelfValue,
    /// `oldSelf`.
    OldSelf,
    /// `x.field`.
    Select(Box<Expr>, String),
    /// `has(x.field)`.
    Has(Box<Expr>, String),
    /// `size(x)` or `x.size()`.
    Size(Box<Expr>),
    /// `x.matches('re')`, the regex compiled once.
    Matches(Box<Expr>, Regex),
    /// An integer literal.
    Int(i64),
    /// A string literal.
    Str(String),
    /// `true` or `false`.
    Bool(bool),
    /// `null`.
    Null,
    /// `x in ['a', 'b']` with string literals only.
    InStrings(Box<Expr>, Vec<String>),
    /// `a == b` (`negated`: `a != b`).
    Equal {
        left: Box<Expr>,
        right: Box<Expr>,
        negated: bool,
    },
    /// `a < b`, `a <= b`, `a > b`, `a >= b`.
    Compare(Box<Expr>, Ordering, Box<Expr>),
    /// `!x`.
    Not(Box<Expr>),
    /// `a && b`.
    And(Box<Expr>, Box<Expr>),
    /// `a || b`.
    Or(Box<Expr>, Box<Expr>),
}

/// The relational operators other than equality.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ordering {
    Less,
    LessEqual,
    Greater,
    GreaterEqual,
}

impl Ordering {
    /// Whether `left <op> right` holds.
    pub(crate) fn holds(self, left: i64, right: i64) -> bool {
        match self {
            Ordering::Less => left < right,
            Ordering::LessEqual => left <= right,
            Ordering::Greater => left > right,
            Ordering::GreaterEqual => left >= right,
        }
    }
}

impl Expr {
    /// Whether the expression reads `oldSelf` (kube-cel's test for a transition rule).
    pub(crate) fn reads_old_self(&self) -> bool {
        match self {
            Expr::OldSelf => true,
            Expr::SelfValue | Expr::Int(_) | Expr::Str(_) | Expr::Bool(_) | Expr::Null => false,
            Expr::Select(inner, _)
            | Expr::Has(inner, _)
            | Expr::Size(inner)
            | Expr::Matches(inner, _)
            | Expr::InStrings(inner, _)
            | Expr::Not(inner) => inner.reads_old_self(),
            Expr::Equal { left, right, .. }
            | Expr::Compare(left, _, right)
            | Expr::And(left, right)
            | Expr::Or(left, right) => left.reads_old_self() || right.reads_old_self(),
        }
    }
}

/// CEL words kube-cel escapes as field names (`__in__`), and literal words that are not identifiers.
pub(super) const RESERVED: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// The longest rule recognised, in tokens (keeps the recursive descent shallow).
const MAX_TOKENS: usize = 256;

/// Parses `rule`, or `None` when it is outside the recognised subset.
pub(crate) fn parse(rule: &str) -> Option<Expr> {
    let tokens = tokenize(rule)?;
    // Nesting is bounded by the token count; real rules are far shorter, long ones stay with kube-cel.
    if tokens.len() > MAX_TOKENS {
        return None;
    }
    let mut parser = Parser { tokens, at: 0 };
    let expr = parser.or()?;
    (parser.at == parser.tokens.len()).then_some(expr)
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Ident(String),
    Int(i64),
    Str(String),
    Op(&'static str),
}

fn tokenize(text: &str) -> Option<Vec<Token>> {
    const OPERATORS: [&str; 15] = [
        "==", "!=", ">=", "<=", "||", "&&", ">", "<", "!", "(", ")", "[", "]", ",", ".",
    ];
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            tokens.push(Token::Ident(text[start..i].to_owned()));
        } else if c.is_ascii_digit() {
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            // Hex, unsigned (`1u`), floats and exponents are left to kube-cel.
            if i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'.') {
                return None;
            }
            tokens.push(Token::Int(text[start..i].parse().ok()?));
        } else if c == b'\'' || c == b'"' {
            let end = text[i + 1..].find(c as char)? + i + 1;
            let content = &text[i + 1..end];
            // Escapes and line breaks have CEL-specific meanings; leave such literals to kube-cel.
            if content.contains('\\') || content.contains('\n') {
                return None;
            }
            tokens.push(Token::Str(content.to_owned()));
            i = end + 1;
        } else {
            let op = OPERATORS.iter().find(|op| text[i..].starts_with(**op))?;
            tokens.push(Token::Op(op));
            i += op.len();
        }
    }
    Some(tokens)
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn eat(&mut self, op: &str) -> bool {
        let found = matches!(self.peek(), Some(Token::Op(o)) if *o == op);
        if found {
            self.at += 1;
        }
        found
    }

    fn expect(&mut self, op: &str) -> Option<()> {
        self.eat(op).then_some(())
    }

    fn ident(&mut self) -> Option<String> {
        match self.peek() {
            Some(Token::Ident(name)) => {
                let name = name.clone();
                self.at += 1;
                Some(name)
            }
            _ => None,
        }
    }

    fn or(&mut self) -> Option<Expr> {
        let mut left = self.and()?;
        while self.eat("||") {
            left = Expr::Or(Box::new(left), Box::new(self.and()?));
        }
        Some(left)
    }

    fn and(&mut self) -> Option<Expr> {
        let mut left = self.relation()?;
        while self.eat("&&") {
            left = Expr::And(Box::new(left), Box::new(self.relation()?));
        }
        Some(left)
    }

    fn relation(&mut self) -> Option<Expr> {
        let left = self.unary()?;
        let op = match self.peek() {
            Some(Token::Op(op @ ("==" | "!=" | ">=" | "<=" | ">" | "<"))) => *op,
            Some(Token::Ident(word)) if word == "in" => "in",
            _ => return Some(left),
        };
        self.at += 1;
        let expr = if op == "in" {
            Expr::InStrings(Box::new(left), self.string_list()?)
        } else {
            let right = Box::new(self.unary()?);
            let left = Box::new(left);
            match op {
                "==" => Expr::Equal {
                    left,
                    right,
                    negated: false,
                },
                "!=" => Expr::Equal {
                    left,
                    right,
                    negated: true,
                },
                ">=" => Expr::Compare(left, Ordering::GreaterEqual, right),
                "<=" => Expr::Compare(left, Ordering::LessEqual, right),
                ">" => Expr::Compare(left, Ordering::Greater, right),
                _ => Expr::Compare(left, Ordering::Less, right),
            }
        };
        // CEL relations do not chain in the shapes we recognise (`a < b < c`).
        match self.peek() {
            Some(Token::Op("==" | "!=" | ">=" | "<=" | ">" | "<")) => None,
            Some(Token::Ident(word)) if word == "in" => None,
            _ => Some(expr),
        }
    }

    fn string_list(&mut self) -> Option<Vec<String>> {
        self.expect("[")?;
        let mut items = Vec::new();
        if self.eat("]") {
            return Some(items);
        }
        loop {
            match self.peek() {
                Some(Token::Str(s)) => {
                    items.push(s.clone());
                    self.at += 1;
                }
                _ => return None,
            }
            if self.eat("]") {
                return Some(items);
            }
            self.expect(",")?;
        }
    }

    fn unary(&mut self) -> Option<Expr> {
        if self.eat("!") {
            return Some(Expr::Not(Box::new(self.unary()?)));
        }
        self.member()
    }

    fn member(&mut self) -> Option<Expr> {
        let mut expr = self.primary()?;
        while self.eat(".") {
            let name = self.ident()?;
            if self.eat("(") {
                expr = match name.as_str() {
                    "matches" => {
                        let pattern = match self.peek() {
                            Some(Token::Str(s)) => s.clone(),
                            _ => return None,
                        };
                        self.at += 1;
                        self.expect(")")?;
                        Expr::Matches(Box::new(expr), Regex::new(&pattern).ok()?)
                    }
                    "size" => {
                        self.expect(")")?;
                        Expr::Size(Box::new(expr))
                    }
                    _ => return None,
                };
            } else {
                expr = Expr::Select(Box::new(expr), field_name(name)?);
            }
        }
        Some(expr)
    }

    fn primary(&mut self) -> Option<Expr> {
        let token = self.peek()?.clone();
        self.at += 1;
        match token {
            Token::Int(n) => Some(Expr::Int(n)),
            Token::Str(s) => Some(Expr::Str(s)),
            Token::Op("(") => {
                let inner = self.or()?;
                self.expect(")")?;
                Some(inner)
            }
            Token::Ident(word) => match word.as_str() {
                "self" => Some(Expr::SelfValue),
                "oldSelf" => Some(Expr::OldSelf),
                "true" => Some(Expr::Bool(true)),
                "false" => Some(Expr::Bool(false)),
                "null" => Some(Expr::Null),
                "has" => {
                    self.expect("(")?;
                    let Expr::Select(target, field) = self.member()? else {
                        return None;
                    };
                    self.expect(")")?;
                    Some(Expr::Has(target, field))
                }
                "size" => {
                    self.expect("(")?;
                    let inner = self.or()?;
                    self.expect(")")?;
                    Some(Expr::Size(Box::new(inner)))
                }
                _ => None,
            },
            Token::Op(_) => None,
        }
    }
}

/// A selected field name that is its own CEL name: kube-cel escapes names with `_`, `.`, `-`, `/` and reserved
/// words, and no other JSON key escapes to a name without `_`, so such a name selects exactly that key.
fn field_name(name: String) -> Option<String> {
    (!name.contains('_') && !RESERVED.contains(&name.as_str())).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_the_crd_rule_shapes() {
        let recognised = [
            "self == oldSelf",
            "self >= 1",
            "self in ['trainer.kubeflow.org/trainjob-controller', 'kueue.x-k8s.io/multikueue']",
            "has(self.lastUpdatedTime)",
            "self == '' || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')",
            "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
            "size(self.metadata.name) <= 63",
            "!(has(self.a) && self.a.b == 'InOrder')",
            "self.items.size() < 3",
        ];
        for rule in recognised {
            assert!(parse(rule).is_some(), "{rule} should be recognised");
        }
    }

    #[test]
    fn refuses_everything_else() {
        let refused = [
            "[has(self.torch), has(self.mpi)].filter(x, x).size() <= 1",
            "!self.exists(c, c == 'node')",
            "self.templates.all(t, !has(t.metadata.namespace))",
            "self + 1 > 2",
            "self >= 1u",
            "self >= -1",
            "self.matches('\\\\d+')",
            "self.my_field == 1",
            "self.x.startsWith('a')",
            "self == 1 == true",
            "self.matches('(')",
            "has(self)",
            "self ==",
            "",
        ];
        for rule in refused {
            assert!(parse(rule).is_none(), "{rule} should be refused");
        }
    }

    #[test]
    fn deep_or_long_rules_are_left_to_kube_cel() {
        let deep = format!("{}self >= 1{}", "(".repeat(10_000), ")".repeat(10_000));
        assert!(parse(&deep).is_none());
        let nested = format!("{}self >= 1{}", "(".repeat(20), ")".repeat(20));
        assert!(parse(&nested).is_some());
    }

    proptest::proptest! {
        #[test]
        fn parsing_any_text_never_panics(rule in "\\PC{0,64}") {
            let _ = parse(&rule);
        }

        #[test]
        fn parsing_rule_like_text_never_panics(
            parts in proptest::collection::vec(proptest::sample::select(vec![
                "self", "oldSelf", ".", "metadata", "name", "matches", "(", ")", "'^a$'", "'é'", "==", "!=", ">=",
                "<", "||", "&&", "!", "has", "size", "[", "]", ",", "in", "1", "99999999999999999999", "é", "\"",
            ]), 0..24)
        ) {
            let _ = parse(&parts.join(" "));
            let _ = parse(&parts.concat());
        }
    }

    #[test]
    fn transition_rules_are_those_reading_old_self() {
        assert!(parse("self == oldSelf").unwrap().reads_old_self());
        assert!(parse("!(oldSelf.a == 'x')").unwrap().reads_old_self());
        assert!(!parse("self >= 1").unwrap().reads_old_self());
    }
}
