//! Sharded lists and watches (the `ShardedListAndWatch` feature gate): the `shardSelector`
//! parameter, parsed with the real server's refusals, and the hash test. Its own code, not the
//! client's (`src/shard.rs`), so that the client is checked against the protocol.

use serde_json::Value;

/// 2^64, the exclusive end of the hash space.
const END: u128 = 1 << 64;

/// A parsed `shardSelector`: ranges of FNV-1a 64 hashes of one metadata field.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ShardSelector {
    /// `object.metadata.uid` or `object.metadata.namespace`.
    field: &'static str,
    /// `[start, end)`, as given (they may overlap: the server ORs them).
    ranges: Vec<(u128, u128)>,
}

impl ShardSelector {
    /// Parses `shardRange(field, 'start', 'end') || …`. `Err` is the server's message after
    /// "invalid shard selector: ".
    pub(crate) fn parse(text: &str) -> Result<ShardSelector, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("empty shard selector is not allowed; omit the parameter for unfiltered lists".into());
        }
        let mut field = None;
        let mut ranges = Vec::new();
        for term in text.split("||") {
            let term = term.trim();
            let Some(args) = term.strip_prefix("shardRange(").and_then(|t| t.strip_suffix(')')) else {
                return Err(format!("unsupported expression {term:?}; only shardRange() and || are allowed"));
            };
            let args: Vec<&str> = args.split(',').map(str::trim).collect();
            if args.len() != 3 {
                return Err(format!("shardRange() requires exactly 3 arguments, got {}", args.len()));
            }
            let f = match args[0] {
                "object.metadata.uid" => "object.metadata.uid",
                "object.metadata.namespace" => "object.metadata.namespace",
                other => {
                    return Err(format!(
                        "unsupported field path {other:?}; supported: object.metadata.uid, object.metadata.namespace"
                    ));
                }
            };
            if field.is_some_and(|first| first != f) {
                return Err(format!(
                    "all shard ranges must use the same field, got {:?} and {f:?}",
                    field.unwrap_or("")
                ));
            }
            field = Some(f);
            let start = hex(args[1], "hexStart")?;
            let end = hex(args[2], "hexEnd")?;
            if start >= end {
                return Err(format!("shard range start {} must be less than end {}", args[1], args[2]));
            }
            ranges.push((start, end));
        }
        Ok(ShardSelector { field: field.unwrap_or("object.metadata.uid"), ranges })
    }

    /// Whether `obj` is in one of the ranges (a missing field hashes as "").
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        let key = self.field.trim_start_matches("object.metadata.");
        let value = obj.get("metadata").and_then(|m| m.get(key)).and_then(Value::as_str).unwrap_or_default();
        let h = u128::from(fnv1a(value));
        self.ranges.iter().any(|&(s, e)| s <= h && h < e)
    }

    /// The selector as the server writes it back in `metadata.shardInfo.selector`.
    pub(crate) fn echo(&self) -> String {
        let terms: Vec<String> = self
            .ranges
            .iter()
            .map(|(s, e)| format!("shardRange({}, '0x{s:016x}', '0x{e:016x}')", self.field))
            .collect();
        terms.join(" || ")
    }
}

/// A quoted bound: `'0x'` and 16 lower-case hex digits, or `'0x10000000000000000'`.
fn hex(arg: &str, name: &str) -> Result<u128, String> {
    let Some(s) = arg.strip_prefix('\'').and_then(|a| a.strip_suffix('\'')) else {
        return Err(format!("{name} must be a string literal (e.g. '0xff'), got {arg}"));
    };
    let Some(digits) = s.strip_prefix("0x") else { return Err(format!("{name} must have '0x' prefix, got {s:?}")) };
    if digits.is_empty() {
        return Err(format!("{name}: hex value is required after '0x'"));
    }
    if let Some(c) = digits.chars().find(|c| !matches!(c, '0'..='9' | 'a'..='f')) {
        return Err(format!("{name}: invalid hex character {c:?} in {s:?}"));
    }
    match digits.len() {
        16 => Ok(u128::from_str_radix(digits, 16).unwrap_or_default()),
        17 if digits == "10000000000000000" => Ok(END),
        17 => Err(format!("{name}: 17-digit hex value must be '0x10000000000000000' (2^64), got {s:?}")),
        n if n > 17 => Err(format!("{name}: hex value too long ({n} chars, max 17): {digits:?}")),
        _ => Err(format!("{name} must be a 0x-prefixed 16-digit hex value, got {s:?}")),
    }
}

/// FNV-1a, 64 bits, over the bytes of `s`.
fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn halves_split_every_uid_once() {
        let a = ShardSelector::parse("shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')")
            .unwrap();
        let b = ShardSelector::parse("shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')")
            .unwrap();
        for n in 0..200 {
            let pod = json!({"metadata": {"uid": format!("u{n}")}});
            assert!(a.matches(&pod) != b.matches(&pod));
        }
        assert_eq!(a.echo(), "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')");
    }

    #[test]
    fn malformed_selectors_are_refused_with_the_servers_reasons() {
        let err = |s: &str| ShardSelector::parse(s).unwrap_err();
        assert!(err("").contains("empty shard selector"));
        assert!(err("shardRange(object.metadata.uid, '0x0', '0x8000000000000000')").contains("16-digit"));
        assert!(
            err("shardRange(object.metadata.name, '0x0000000000000000', '0x8000000000000000')")
                .contains("unsupported field path")
        );
        assert!(
            err("shardRange(object.metadata.uid, '0x8000000000000000', '0x0000000000000000')")
                .contains("must be less than")
        );
        assert!(
            err("shardRange(object.metadata.uid, '0x000000000000000G', '0x8000000000000000')")
                .contains("invalid hex character")
        );
        assert!(err("labels(x)").contains("only shardRange()"));
    }
}
