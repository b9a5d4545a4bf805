//! How far the store has come: comparing two resourceVersions by the rule Kubernetes defines
//! (docs/protocol.md §2.2), and what a store filled by several namespace watches reflects.

use std::cmp::Ordering;

/// Whether `rv` is a version the rule can compare: a positive decimal integer without leading
/// zeros, of any length (so `"0"`, `""`, `"007"` and `"12a"` are not).
pub(crate) fn is_canonical(rv: &str) -> bool {
    !rv.is_empty() && !rv.starts_with('0') && rv.bytes().all(|b| b.is_ascii_digit())
}

/// How `a` compares with `b`: `None` when either is not canonical ([`is_canonical`]), as the
/// rule says nothing then. Without a length limit: the longer number is the larger, and two
/// of one length compare digit by digit.
pub(crate) fn compare(a: &str, b: &str) -> Option<Ordering> {
    if !is_canonical(a) || !is_canonical(b) {
        return None;
    }
    Some(a.len().cmp(&b.len()).then_with(|| a.cmp(b)))
}

/// Where each writer of one store has come ([`Store::resource_version`](super::Store::resource_version)):
/// `None` until its first list is complete.
pub(crate) type Versions = [Option<String>];

/// The version the whole store reflects. One writer: its version as the server sent it. Several
/// (one per namespace): the oldest of theirs, as the store shows every change up to that one in
/// every namespace and no later one in all of them; `None` while one has none, or when two
/// cannot be compared.
pub(crate) fn reflected(versions: &Versions) -> Option<String> {
    if let [only] = versions {
        return only.clone();
    }
    let mut oldest: Option<&str> = None;
    for v in versions {
        let v = v.as_deref()?;
        oldest = match oldest {
            None => Some(v),
            Some(o) => match compare(v, o)? {
                Ordering::Less => Some(v),
                Ordering::Equal | Ordering::Greater => Some(o),
            },
        };
    }
    oldest.map(str::to_owned)
}

/// Whether every writer has reached `wanted` (that version or a later one): `Ok(false)` while
/// one has not, or has no version yet; `Err(version)` names a writer's version that cannot be
/// compared with `wanted`. Equal strings are always reached, comparable or not: equality is
/// the one comparison Kubernetes always allowed.
pub(crate) fn reached<'a>(versions: &'a Versions, wanted: &str) -> Result<bool, &'a str> {
    let mut all = true;
    for v in versions {
        match v.as_deref() {
            None => all = false,
            Some(v) if v == wanted => {}
            Some(v) => match compare(v, wanted) {
                Some(Ordering::Less) => all = false,
                Some(Ordering::Equal | Ordering::Greater) => {}
                None => return Err(v),
            },
        }
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn versions(v: &[Option<&str>]) -> Vec<Option<String>> {
        v.iter().map(|v| v.map(str::to_owned)).collect()
    }

    /// The cases of apimachinery's `pkg/util/resourceversion/resourceversion_test.go`.
    #[test]
    fn versions_compare_as_upstream_compares_them() {
        use Ordering::*;
        assert_eq!(compare("100", "200"), Some(Less));
        assert_eq!(compare("200", "100"), Some(Greater));
        assert_eq!(compare("1", "1"), Some(Equal));
        assert_eq!(compare("99", "100"), Some(Less));
        assert_eq!(compare("100", "99"), Some(Greater));
        let (small, big) = ("9".repeat(50), format!("1{}", "0".repeat(50)));
        assert_eq!(compare(&small, &big), Some(Less), "no length limit");
        assert_eq!(compare(&big, &big), Some(Equal));
        for bad in ["0", "", "0100", "100a", "+1", "-1", " 1", "1.0", "１"] {
            assert_eq!(compare(bad, "100"), None, "{bad:?}");
            assert_eq!(compare("100", bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_store_over_several_namespaces_reflects_the_oldest_of_their_versions() {
        assert_eq!(reflected(&versions(&[Some("12")])), Some("12".into()));
        assert_eq!(reflected(&versions(&[Some("opaque")])), Some("opaque".into()), "one writer: as sent");
        assert_eq!(reflected(&versions(&[None])), None);
        assert_eq!(reflected(&versions(&[Some("12"), Some("9"), Some("100")])), Some("9".into()));
        assert_eq!(reflected(&versions(&[Some("12"), None])), None, "one namespace not listed yet");
        assert_eq!(reflected(&versions(&[Some("12"), Some("x")])), None, "cannot tell which is older");
    }

    #[test]
    fn a_version_is_reached_when_every_writer_is_there_or_later() {
        assert_eq!(reached(&versions(&[Some("12")]), "12"), Ok(true));
        assert_eq!(reached(&versions(&[Some("12")]), "9"), Ok(true));
        assert_eq!(reached(&versions(&[Some("12")]), "100"), Ok(false));
        assert_eq!(reached(&versions(&[None]), "1"), Ok(false));
        assert_eq!(reached(&versions(&[Some("12"), Some("8")]), "10"), Ok(false));
        assert_eq!(reached(&versions(&[Some("12"), Some("10")]), "10"), Ok(true));
        assert_eq!(reached(&versions(&[Some("abc")]), "abc"), Ok(true), "equality always holds");
        assert_eq!(reached(&versions(&[Some("abc")]), "12"), Err("abc"));
        assert_eq!(reached(&versions(&[Some("12")]), "0012"), Err("12"));
        assert_eq!(reached(&versions(&[None, Some("12")]), "x"), Err("12"));
    }
}
