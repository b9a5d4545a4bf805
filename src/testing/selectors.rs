//! Label and field selectors: parsing (with the real server's 400 cases) and matching.

use serde_json::Value;

/// One parsed label requirement.
#[derive(Debug, Clone, PartialEq)]
enum LabelOp {
    /// `key=value`, `key==value`, `key in (a,b)`.
    In(Vec<String>),
    /// `key!=value`, `key notin (a,b)`.
    NotIn(Vec<String>),
    /// `key`.
    Exists,
    /// `!key`.
    DoesNotExist,
    /// `key>N` (integer comparison, as the real parser allows).
    Gt(i64),
    /// `key<N`.
    Lt(i64),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LabelSelector {
    requirements: Vec<(String, LabelOp)>,
}

/// A parsed field selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct FieldSelector {
    /// `(field path, wanted value, equal?)`.
    terms: Vec<(String, String, bool)>,
}

struct Lexer<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Lexer<'a> {
    fn skip_ws(&mut self) {
        while self.text[self.pos..].starts_with([' ', '\t']) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn eat(&mut self, s: &str) -> bool {
        if self.text[self.pos..].starts_with(s) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    /// Reads an identifier-ish word: anything up to whitespace or an operator/separator.
    fn word(&mut self) -> &'a str {
        let rest = &self.text[self.pos..];
        let len = rest.find([' ', '\t', ',', '=', '!', '(', ')', '<', '>']).unwrap_or(rest.len());
        self.pos += len;
        &rest[..len]
    }
}

fn valid_name_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

fn valid_key(key: &str) -> bool {
    match key.split_once('/') {
        Some((prefix, name)) => {
            !prefix.is_empty()
                && prefix.len() <= 253
                && prefix.split('.').all(|l| valid_name_part(l) && !l.contains('_'))
                && valid_name_part(name)
        }
        None => valid_name_part(key),
    }
}

fn valid_value(v: &str) -> bool {
    v.is_empty() || valid_name_part(v)
}

impl LabelSelector {
    /// Parses a selector in the real server's syntax; `Err` carries the 400 message.
    pub(crate) fn parse(text: &str) -> Result<LabelSelector, String> {
        let mut lx = Lexer { text, pos: 0 };
        let mut requirements = Vec::new();
        lx.skip_ws();
        if lx.peek().is_none() {
            return Ok(LabelSelector::default());
        }
        loop {
            lx.skip_ws();
            let negated = lx.eat("!");
            lx.skip_ws();
            let key = lx.word().to_string();
            if !valid_key(&key) {
                return Err(format!(
                    "unable to parse requirement: invalid label key {}: must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
                    super::util::quote_capped(&key)
                ));
            }
            lx.skip_ws();
            let op = if negated {
                LabelOp::DoesNotExist
            } else if lx.peek().is_none() || lx.peek() == Some(',') {
                LabelOp::Exists
            } else if lx.eat("==") || lx.eat("=") {
                LabelOp::In(vec![Self::value(&mut lx)?])
            } else if lx.eat("!=") {
                LabelOp::NotIn(vec![Self::value(&mut lx)?])
            } else if lx.eat(">") || lx.eat("<") {
                let gt = lx.text[..lx.pos].ends_with('>');
                let v = Self::value(&mut lx)?;
                let n: i64 = v.parse().map_err(|_| {
                    format!(
                        "unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer, got {}",
                        super::util::quote_capped(&v)
                    )
                })?;
                if gt { LabelOp::Gt(n) } else { LabelOp::Lt(n) }
            } else {
                let word = lx.word();
                match word {
                    "in" => LabelOp::In(Self::set(&mut lx)?),
                    "notin" => LabelOp::NotIn(Self::set(&mut lx)?),
                    other => {
                        return Err(format!(
                            "unable to parse requirement: found {}, expected: in, notin, =, ==, !=, gt, lt",
                            super::util::quote_capped(other)
                        ));
                    }
                }
            };
            requirements.push((key, op));
            lx.skip_ws();
            match lx.peek() {
                None => break,
                Some(',') => {
                    lx.pos += 1;
                }
                Some(c) => {
                    return Err(format!("found '{c}', expected: ',' or 'end of string'"));
                }
            }
        }
        Ok(LabelSelector { requirements })
    }

    fn value(lx: &mut Lexer<'_>) -> Result<String, String> {
        lx.skip_ws();
        let v = lx.word().to_string();
        if !valid_value(&v) {
            return Err(format!("unable to parse requirement: invalid label value: {}", super::util::quote_capped(&v)));
        }
        Ok(v)
    }

    fn set(lx: &mut Lexer<'_>) -> Result<Vec<String>, String> {
        lx.skip_ws();
        if !lx.eat("(") {
            return Err("found end of string or other token, expected: '('".to_string());
        }
        let mut values = Vec::new();
        loop {
            lx.skip_ws();
            if lx.eat(")") {
                break;
            }
            let v = Self::value(lx)?;
            values.push(v);
            lx.skip_ws();
            if lx.eat(",") {
                continue;
            }
            if lx.eat(")") {
                break;
            }
            return Err("found end of string or other token, expected: ',' or ')'".to_string());
        }
        if values.is_empty() {
            return Err(
                "unable to parse requirement: for 'in', 'notin' operators, values set can't be empty".to_string()
            );
        }
        Ok(values)
    }

    /// Whether the selector has no requirements.
    pub(crate) fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object's `metadata.labels` satisfy every requirement.
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        self.requirements.iter().all(|(key, op)| {
            let value = labels.and_then(|l| l.get(key)).and_then(Value::as_str);
            match op {
                LabelOp::In(set) => value.is_some_and(|v| set.iter().any(|s| s == v)),
                LabelOp::NotIn(set) => value.is_none_or(|v| set.iter().all(|s| s != v)),
                LabelOp::Exists => value.is_some(),
                LabelOp::DoesNotExist => value.is_none(),
                LabelOp::Gt(n) => value.and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v > *n),
                LabelOp::Lt(n) => value.and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v < *n),
            }
        })
    }
}

/// Splits on an unescaped separator, keeping escapes in the pieces.
fn split_unescaped(text: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            parts.push(&text[start..i]);
            start = i + c.len_utf8();
        }
    }
    parts.push(&text[start..]);
    parts
}

fn unescape_field_value(v: &str) -> Result<String, String> {
    let mut out = String::with_capacity(v.len());
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                Some(e) => return Err(format!("invalid escape sequence: \\{e}")),
                None => return Err("unterminated escape sequence".to_string()),
            }
        } else if c == ',' || c == '=' {
            return Err(format!("invalid field selector value: unescaped {c:?}"));
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

impl FieldSelector {
    /// Parses a field selector and checks each field against `supported`; `Err` carries the
    /// 400 message.
    pub(crate) fn parse(text: &str, supported: &[&str]) -> Result<FieldSelector, String> {
        let mut terms = Vec::new();
        if text.trim().is_empty() {
            return Ok(FieldSelector::default());
        }
        for term in split_unescaped(text, ',') {
            let mut found = None;
            let mut escaped = false;
            for (i, c) in term.char_indices() {
                if escaped {
                    escaped = false;
                    continue;
                }
                if c == '\\' {
                    escaped = true;
                } else if term[i..].starts_with("!=") {
                    found = Some((i, 2, false));
                    break;
                } else if term[i..].starts_with("==") {
                    found = Some((i, 2, true));
                    break;
                } else if c == '=' {
                    found = Some((i, 1, true));
                    break;
                }
            }
            let Some((at, len, equal)) = found else {
                return Err(format!("invalid selector: '{text}'; can't understand '{term}'"));
            };
            let field = term[..at].trim().to_string();
            let value = unescape_field_value(term[at + len..].trim())?;
            if !supported.contains(&field.as_str()) {
                // kube-apiserver words it by type: one with field labels of its own (pods:
                // spec.nodeName, status.phase, ...) converts them and refuses the rest as "not
                // supported"; one with only the metadata fields (configmaps) lists what it takes
                // (tests/real/differential.rs saw both).
                if supported.iter().all(|f| *f == "metadata.name" || *f == "metadata.namespace") {
                    let only: Vec<String> = supported.iter().map(|f| format!("{f:?}")).collect();
                    return Err(format!("{field:?} is not a known field selector: only {}", only.join(", ")));
                }
                return Err(format!("field label not supported: {field}"));
            }
            terms.push((field, value, equal));
        }
        Ok(FieldSelector { terms })
    }

    /// Whether the selector has no terms.
    pub(crate) fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Whether an object satisfies every term.
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        self.terms.iter().all(|(field, want, equal)| {
            let got = field_value(obj, field);
            (got == *want) == *equal
        })
    }
}

/// Reads a dotted field path as the real server renders it for field selectors.
pub(crate) fn field_value(obj: &Value, path: &str) -> String {
    let mut cur = obj;
    for part in path.split('.') {
        match cur.get(part) {
            Some(v) => cur = v,
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}})
    }

    #[test]
    fn label_selectors_support_all_six_forms() {
        let o = obj(json!({"app": "web", "tier": "front"}));
        for (sel, want) in [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app in (web,api)", true),
            ("tier notin (front)", false),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("missing!=x", true),
            ("app=web,tier in (front, edge)", true),
            ("", true),
        ] {
            let s = LabelSelector::parse(sel).unwrap();
            assert_eq!(s.matches(&o), want, "{sel}");
        }
    }

    #[test]
    fn malformed_label_selectors_are_rejected() {
        for sel in ["app=", "=x", "app in web", "app in (a", "app ~ b", "a b", "app in ()"] {
            if sel == "app=" {
                assert!(LabelSelector::parse(sel).is_ok(), "empty value is legal");
                continue;
            }
            assert!(LabelSelector::parse(sel).is_err(), "{sel}");
        }
    }

    #[test]
    fn field_selectors_match_and_reject_unknown_fields() {
        let o = obj(json!({}));
        let supported = ["metadata.name", "metadata.namespace"];
        let s = FieldSelector::parse("metadata.name=a,metadata.namespace!=x", &supported).unwrap();
        assert!(s.matches(&o));
        assert!(FieldSelector::parse("spec.foo=a", &supported).is_err());
        let esc = FieldSelector::parse(r"metadata.name=a\,b", &supported).unwrap();
        assert!(!esc.matches(&o));
    }
}
