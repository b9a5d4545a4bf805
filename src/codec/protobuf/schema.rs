//! The protobuf schema of the Kubernetes built-in types: `table.txt`, generated from the upstream
//! `generated.proto` files and Go structs by `scripts/gen-proto-table.py` (its header says how to
//! re-run it and from which commits it was made).
//!
//! Parsed once, on first use, into messages whose fields are found by number with one index.

use std::collections::HashMap;
use std::sync::OnceLock;

/// The type of one field, as the table names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Type {
    String,
    Bool,
    /// int32 or int64: both are varints, int32 negatives sign-extended to 64 bits.
    Int,
    /// Base64 in JSON.
    Bytes,
    /// `meta.v1.Time`: seconds (nanos are not sent), RFC 3339 in JSON.
    Time,
    /// `meta.v1.MicroTime`: seconds and nanos, RFC 3339 with microseconds in JSON.
    MicroTime,
    /// `meta.v1.Duration`: nanoseconds, Go's duration string in JSON.
    Duration,
    /// `resource.Quantity`: a message holding the string JSON shows.
    Quantity,
    IntOrString,
    /// `runtime.RawExtension` and `meta.v1.FieldsV1`: a message whose field 1 holds JSON.
    Raw,
    /// Index of another message in [`Schema::messages`].
    Message(usize),
    Repeated(Box<Type>),
    /// A map from strings to the inner type.
    Map(Box<Type>),
    /// A message holding `repeated T items = 1` that JSON shows as a plain array (`ExtraValue`).
    Wrapped(Box<Type>),
}

#[derive(Debug)]
pub(crate) struct Field {
    pub(crate) number: u32,
    /// The JSON name; `None` for a message inlined into its parent (Go's embedded structs).
    pub(crate) name: Option<&'static str>,
    pub(crate) ty: Type,
    /// A zero scalar is left out, as Go's `omitempty` does for a field that is not a pointer.
    pub(crate) omit_zero: bool,
}

#[derive(Debug)]
pub(crate) struct Message {
    /// `package.Name`, e.g. `core.v1.Pod`.
    pub(crate) name: &'static str,
    pub(crate) fields: Vec<Field>,
    /// Field number → index into `fields` (`u16::MAX`: no such field).
    by_number: Vec<u16>,
}

impl Message {
    pub(crate) fn field(&self, number: u64) -> Option<&Field> {
        let i = *self.by_number.get(usize::try_from(number).ok()?)?;
        self.fields.get(usize::from(i))
    }
}

#[derive(Debug)]
pub(crate) struct Schema {
    pub(crate) messages: Vec<Message>,
    /// Messages by name (`core.v1.Pod`), for tests.
    #[cfg(test)]
    by_name: HashMap<&'static str, usize>,
    /// `apiVersion` → kind → message (`apps/v1` → `Deployment` → `apps.v1.Deployment`), so that
    /// finding the message of an object allocates nothing.
    kinds: HashMap<&'static str, HashMap<&'static str, usize>>,
    /// The other way: message → its `apiVersion` and kind (each package of the table is one
    /// group version), to write an object's envelope.
    type_metas: Vec<Option<(&'static str, &'static str)>>,
}

impl Schema {
    #[cfg(test)]
    pub(crate) fn message(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// The message of a kind in an API group version (`apps/v1`, `Deployment`). The kinds of
    /// `meta.k8s.io/v1` that every group version serves (`Status` above all: errors come as
    /// apiVersion `v1`, kind `Status`) are found under any known apiVersion.
    pub(crate) fn kind(&self, api_version: &str, kind: &str) -> Option<usize> {
        let kinds = self.kinds.get(api_version)?;
        kinds.get(kind).copied().or_else(|| match kind {
            "Status" | "WatchEvent" | "PartialObjectMetadata" | "PartialObjectMetadataList" => {
                self.kinds.get("meta.k8s.io/v1")?.get(kind).copied()
            }
            _ => None,
        })
    }

    /// The `apiVersion` and kind of message `index` (`core.v1.Pod` → `v1`, `Pod`): what its
    /// `runtime.Unknown` envelope says.
    pub(crate) fn type_meta(&self, index: usize) -> Option<(&'static str, &'static str)> {
        self.type_metas.get(index).copied().flatten()
    }
}

/// The largest field number the table may use (an index is kept per number).
const MAX_FIELD_NUMBER: u32 = 1024;

fn parse_type(text: &'static str, names: &HashMap<&'static str, usize>) -> Result<Type, String> {
    Ok(match text {
        "string" => Type::String,
        "bool" => Type::Bool,
        "int" => Type::Int,
        "bytes" => Type::Bytes,
        "time" => Type::Time,
        "microtime" => Type::MicroTime,
        "duration" => Type::Duration,
        "quantity" => Type::Quantity,
        "intorstr" => Type::IntOrString,
        "raw" => Type::Raw,
        _ => {
            let inner = |open: char, close: char| text.strip_prefix(open).and_then(|t| t.strip_suffix(close));
            if let Some(inner) = inner('[', ']') {
                Type::Repeated(Box::new(parse_type(inner, names)?))
            } else if let Some(inner) = inner('{', '}') {
                Type::Map(Box::new(parse_type(inner, names)?))
            } else if let Some(inner) = inner('<', '>') {
                Type::Wrapped(Box::new(parse_type(inner, names)?))
            } else if let Some(&index) = names.get(text) {
                Type::Message(index)
            } else {
                return Err(format!("unknown type {text:?}"));
            }
        }
    })
}

pub(crate) fn parse(text: &'static str) -> Result<Schema, String> {
    let mut packages = HashMap::new();
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix('@') {
            let (package, api_version) = rest.split_once(' ').ok_or_else(|| format!("bad package line {line:?}"))?;
            packages.insert(api_version, package);
            continue;
        }
        let (name, rest) = line.split_once(": ").ok_or_else(|| format!("no ': ' in {line:?}"))?;
        lines.push((name, rest));
    }
    let names: HashMap<&'static str, usize> = lines.iter().enumerate().map(|(i, (name, _))| (*name, i)).collect();
    let mut messages = Vec::with_capacity(lines.len());
    for (name, rest) in lines {
        let mut fields = Vec::new();
        for part in rest.split(", ").filter(|p| !p.is_empty()) {
            let words: Vec<&'static str> = part.split(' ').collect();
            let [number, field, ty] = words[..] else {
                return Err(format!("{name}: field {part:?} is not `number name type`"));
            };
            let number: u32 = number.parse().map_err(|_| format!("{name}: bad field number in {part:?}"))?;
            if number == 0 || number > MAX_FIELD_NUMBER {
                return Err(format!("{name}: field number {number} out of range"));
            }
            let (ty, omit_zero) = match ty.strip_suffix('?') {
                Some(ty) => (ty, true),
                None => (ty, false),
            };
            let ty = parse_type(ty, &names).map_err(|e| format!("{name}.{field}: {e}"))?;
            // The decoder marks repeated and map fields it has handed out in a 64-bit set.
            if matches!(ty, Type::Repeated(_) | Type::Map(_)) && number >= 64 {
                return Err(format!("{name}.{field}: a repeated field numbered 64 or above"));
            }
            let inline = field == "..";
            if inline && !matches!(ty, Type::Message(_)) {
                return Err(format!("{name}: an inlined field must be a message"));
            }
            fields.push(Field { number, name: (!inline).then_some(field), ty, omit_zero });
        }
        // Ascending numbers: the order Go's generated marshallers write fields in, which the
        // encoder follows (the fake's bytes are the real server's: tests/real/differential.rs).
        fields.sort_by_key(|f| f.number);
        let max = fields.iter().map(|f| f.number).max().unwrap_or(0);
        let mut by_number = vec![u16::MAX; max as usize + 1];
        for (i, f) in fields.iter().enumerate() {
            by_number[f.number as usize] = u16::try_from(i).map_err(|_| format!("{name}: too many fields"))?;
        }
        messages.push(Message { name, fields, by_number });
    }
    let mut kinds: HashMap<&'static str, HashMap<&'static str, usize>> = HashMap::new();
    let mut type_metas = vec![None; messages.len()];
    for (api_version, package) in packages {
        let in_package = kinds.entry(api_version).or_default();
        for (i, message) in messages.iter().enumerate() {
            if let Some(kind) = message.name.strip_prefix(package).and_then(|k| k.strip_prefix('.')) {
                in_package.insert(kind, i);
                type_metas[i].get_or_insert((api_version, kind));
            }
        }
    }
    Ok(Schema {
        messages,
        #[cfg(test)]
        by_name: names,
        kinds,
        type_metas,
    })
}

/// The table of the Kubernetes version the crate was generated for (`table.txt`).
pub(crate) fn schema() -> &'static Schema {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        #[allow(clippy::expect_used)]
        parse(include_str!("table.txt")).expect("OK: table.txt is checked by a unit test")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_parses_and_knows_the_common_kinds() {
        let schema = parse(include_str!("table.txt")).unwrap();
        for (api_version, kind) in [
            ("v1", "Pod"),
            ("v1", "PodList"),
            ("v1", "ConfigMap"),
            ("v1", "Secret"),
            ("v1", "Service"),
            ("v1", "Node"),
            ("v1", "Namespace"),
            ("v1", "Event"),
            ("apps/v1", "Deployment"),
            ("events.k8s.io/v1", "Event"),
            ("batch/v1", "Job"),
            ("meta.k8s.io/v1", "PartialObjectMetadata"),
            ("v1", "Status"),
            ("apps/v1", "Status"),
        ] {
            assert!(schema.kind(api_version, kind).is_some(), "{api_version} {kind}");
        }
        assert_eq!(schema.kind("v1", "Widget"), None);
        assert_eq!(schema.kind("example.com/v1", "Pod"), None);
        let pod = &schema.messages[schema.kind("v1", "Pod").unwrap()];
        assert_eq!(pod.field(1).unwrap().name, Some("metadata"));
        assert!(pod.field(99).is_none() && pod.field(u64::MAX).is_none());
    }
}
