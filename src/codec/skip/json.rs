//! JSON without the skipped fields, copied span by span before any decoder sees it: what the
//! JSON decoders (simd-json and serde_json) read when a watcher skips fields.
//!
//! The walk follows the tree of skipped paths ([`Node`]): a member whose key a path names is
//! left out, one a path goes through is walked the same way, and every other member is copied
//! as it is. A path through an array applies to each of its elements (arrays in arrays too).
//! The decoder then reads an object without those keys, so the type keeps its default for each
//! field, exactly as if the value had been stepped over while decoding. Doing it here, not in
//! a deserializer adapter, keeps the decoders as they are: a type's `Deserialize` impl is
//! compiled once for each decoder instead of twice, which for the Kubernetes types (a `Pod`
//! reaches hundreds of them) is much of a program's build.
//!
//! Every byte passed, copied or left out, is checked by the rules of `syntax::is_valid`: a walk
//! that succeeds has checked the whole input, so the decoder of the copy needs no check of its
//! own. A walk that fails leaves the input to the plain decoders, whose error then names the
//! problem in their usual words. (The check is stricter than serde_json in two places, see
//! `syntax.rs`: an input only serde_json accepts is decoded whole, with the skipped fields.)
//! An object that the copy shows to be no `K` (a field of the wrong type, or a required one
//! skipped) is refused as the copy's decoder words it: its line and column count in the copy.
//! Nesting is bounded by the check's limit, so no input recurses deeper than that.
//! UTF-8 is the caller's to check.

use std::ops::Range;

use super::{Child, Node};
use crate::codec::syntax::{Cursor, MAX_DEPTH};

/// Copies `input`, one JSON value with whitespace around it, into `out` (cleared first)
/// without the members of `node`. `None` when `input` fails the syntax check.
pub(crate) fn pruned(input: &[u8], node: &Node, out: &mut Vec<u8>) -> Option<()> {
    out.clear();
    let mut walk = Walk { b: input, c: Cursor::new(input), out };
    walk.c.ws();
    walk.value(node, 0)?;
    walk.end()
}

/// What [`watch_line`] did with a watch event.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// The event changes an object (`ADDED`, `MODIFIED`, `DELETED`): the output is the line with
    /// the object pruned; the range is where the whole object lies in the input.
    Pruned(Range<usize>),
    /// A bookmark, an error, or an event without a type or an object: nothing of it is skipped
    /// (a bookmark's annotations and a Status's fields are the watcher's, not the type's), and
    /// the output means nothing.
    Whole,
}

/// A watch line (`{"type": …, "object": …}`) into `out` (cleared first), its object without
/// the members of `node` when the event changes an object. `None` when the line fails the
/// syntax check (or is not an object).
pub(crate) fn watch_line(input: &[u8], node: &Node, out: &mut Vec<u8>) -> Option<Line> {
    out.clear();
    let mut walk = Walk { b: input, c: Cursor::new(input), out };
    walk.c.ws();
    let mut kind: Option<Range<usize>> = None;
    let mut object: Option<Range<usize>> = None;
    walk.members(1, |walk, key| {
        let start = walk.c.at();
        if key == b"\"object\"" {
            walk.value(node, 1)?;
            object = Some(start..walk.c.at());
        } else {
            walk.copy(1)?;
            if key == b"\"type\"" {
                kind = Some(start..walk.c.at());
            }
        }
        Some(true)
    })?;
    walk.end()?;
    let change = kind.is_some_and(|k| matches!(&input[k], b"\"ADDED\"" | b"\"MODIFIED\"" | b"\"DELETED\""));
    Some(match object {
        Some(object) if change => Line::Pruned(object),
        _ => Line::Whole,
    })
}

/// The input, where the walk is in it, and the copy.
struct Walk<'a, 'o> {
    b: &'a [u8],
    c: Cursor<'a>,
    out: &'o mut Vec<u8>,
}

impl Walk<'_, '_> {
    /// One value at the cursor, inside `depth` open containers, without the members of `node`.
    fn value(&mut self, node: &Node, depth: usize) -> Option<()> {
        match self.c.peek()? {
            b'{' => self.members(depth + 1, |walk, key| {
                match child(node, key) {
                    Some(Child::Skip) => {
                        walk.c.value(depth + 1)?;
                        return Some(false);
                    }
                    Some(Child::Into(below)) => walk.value(below, depth + 1)?,
                    None => walk.copy(depth + 1)?,
                }
                Some(true)
            }),
            b'[' => self.elements(node, depth + 1),
            _ => self.copy(depth),
        }
    }

    /// An object at the cursor, the `depth`th open container. For each member, `member` is
    /// given its key (with its quotes; the key and its colon are written already) and walks its
    /// value: `true` when it wrote it, `false` when it only checked it and the member is left
    /// out.
    fn members(&mut self, depth: usize, mut member: impl FnMut(&mut Self, &[u8]) -> Option<bool>) -> Option<()> {
        if self.open(b'{', b'}', depth)? {
            return Some(());
        }
        let mut first = true;
        loop {
            let start = self.c.at();
            self.c.string()?;
            let key = &self.b[start..self.c.at()];
            self.c.ws();
            if self.c.peek()? != b':' {
                return None;
            }
            self.c.bump();
            self.c.ws();
            // The separator, key and colon go out first; a member left out takes them back.
            let mark = self.out.len();
            if !first {
                self.out.push(b',');
            }
            self.out.extend_from_slice(key);
            self.out.push(b':');
            if member(self, key)? {
                first = false;
            } else {
                self.out.truncate(mark);
            }
            self.c.ws();
            match self.c.peek()? {
                b',' => {
                    self.c.bump();
                    self.c.ws();
                }
                b'}' => {
                    self.c.bump();
                    self.out.push(b'}');
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An array at the cursor, the `depth`th open container: each element walked with `node`.
    fn elements(&mut self, node: &Node, depth: usize) -> Option<()> {
        if self.open(b'[', b']', depth)? {
            return Some(());
        }
        loop {
            self.value(node, depth)?;
            self.c.ws();
            match self.c.peek()? {
                b',' => {
                    self.c.bump();
                    self.c.ws();
                    self.out.push(b',');
                }
                b']' => {
                    self.c.bump();
                    self.out.push(b']');
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// The opening bracket of the `depth`th open container, which must be next, and whitespace
    /// after it: `true` when the container is empty (and closed), `false` when a first member or
    /// element follows.
    fn open(&mut self, open: u8, close: u8, depth: usize) -> Option<bool> {
        if self.c.peek()? != open {
            return None;
        }
        self.c.bump();
        self.out.push(open);
        self.c.ws();
        if self.c.peek()? == close {
            self.c.bump();
            self.out.push(close);
            return Some(true);
        }
        // An empty container does not count, as in the syntax check.
        (depth <= MAX_DEPTH).then_some(false)
    }

    /// One value at the cursor, checked and copied as it is.
    fn copy(&mut self, depth: usize) -> Option<()> {
        let start = self.c.at();
        self.c.value(depth)?;
        self.out.extend_from_slice(&self.b[start..self.c.at()]);
        Some(())
    }

    /// After the value: only whitespace to the end.
    fn end(&mut self) -> Option<()> {
        self.c.ws();
        (self.c.at() == self.b.len()).then_some(())
    }
}

/// What the tree says of the member whose key (with its quotes) is `quoted`. A key with an
/// escape is compared unescaped, as a decoder would read it.
fn child<'n>(node: &'n Node, quoted: &[u8]) -> Option<&'n Child> {
    let inner = &quoted[1..quoted.len() - 1];
    if memchr::memchr(b'\\', inner).is_none() {
        return node.child(std::str::from_utf8(inner).ok()?);
    }
    let key: String = serde_json::from_slice(quoted).ok()?;
    node.child(&key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::skip::{Paths, clear};

    fn node(paths: &[&str]) -> Node {
        let paths = Paths::new::<serde_json::Value>(&paths.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        paths.root().unwrap().clone()
    }

    fn prune(input: &str, paths: &[&str]) -> Option<String> {
        let mut out = Vec::new();
        pruned(input.as_bytes(), &node(paths), &mut out)?;
        Some(String::from_utf8(out).unwrap())
    }

    #[test]
    fn members_on_a_path_are_left_out_and_the_rest_copied_as_it_is() {
        let input = r#" {"metadata": {"name": "a", "managedFields": [{"manager": "m", "x": {"y": [1, 2]}}],
            "annotations": {"keep": "1", "big": "{\"a\":1}"}}, "spec": {"c": [ {"env": [1], "n": "x"}, {"n": "y", "env": null} ]}} "#;
        let out = prune(input, &["metadata.managedFields", "metadata.annotations[big]", "spec.c.env"]).unwrap();
        assert_eq!(out, r#"{"metadata":{"name":"a","annotations":{"keep":"1"}},"spec":{"c":[{"n":"x"},{"n":"y"}]}}"#);
        // The copy is the value `clear` makes of the input.
        let mut want: serde_json::Value = serde_json::from_str(input).unwrap();
        clear(&mut want, &node(&["metadata.managedFields", "metadata.annotations[big]", "spec.c.env"]));
        assert_eq!(serde_json::from_str::<serde_json::Value>(&out).unwrap(), want);
    }

    #[test]
    fn every_member_left_out_leaves_an_empty_object_and_paths_go_through_arrays_in_arrays() {
        assert_eq!(prune(r#"{"a":{"b":1}}"#, &["a.b"]).unwrap(), r#"{"a":{}}"#);
        assert_eq!(prune(r#"{"b":1,"c":2}"#, &["b", "c"]).unwrap(), "{}");
        assert_eq!(prune(r#"{"a":[[{"b":1,"c":2}],[]],"b":0}"#, &["a.b"]).unwrap(), r#"{"a":[[{"c":2}],[]],"b":0}"#);
        // A path into a scalar, or an object without the key: copied as it is.
        assert_eq!(prune(r#"{"a":"s","x":{}}"#, &["a.b", "x.y"]).unwrap(), r#"{"a":"s","x":{}}"#);
        assert_eq!(prune("[1, {\"b\": 2}]", &["b"]).unwrap(), "[1,{}]");
    }

    #[test]
    fn keys_are_compared_unescaped() {
        assert_eq!(prune(r#"{"m\u0061nagedFields":1,"k\"":2}"#, &["managedFields"]).unwrap(), r#"{"k\"":2}"#);
    }

    #[test]
    fn what_the_syntax_check_refuses_is_refused_skipped_or_not() {
        for bad in [
            r#"{"b": tru, "c": 1}"#,
            r#"{"b": 1 "c": 1}"#,
            r#"{"b": [1,], "c": 1}"#,
            r#"{"b": "\x01", "c": 1}"#,
            r#"{"b": -0, "c": 1}"#,
            r#"{"c": 1,}"#,
            r#"{"c": 1} x"#,
            r#"{"c" 1}"#,
            r#"{"b": "\ud800"}"#,
            r#"{"c": {"b": 1}"#,
            "",
        ] {
            let bad = bad.replace("\\x01", "\u{1}");
            assert_eq!(prune(&bad, &["b"]), None, "{bad:?}");
            assert!(!crate::codec::syntax::is_valid(bad.as_bytes()), "{bad:?}");
        }
    }

    #[test]
    fn nesting_is_bounded_as_the_syntax_check_bounds_it() {
        let paths = ["a"];
        // The innermost array is empty, which the check does not count as a level.
        for depth in [MAX_DEPTH, MAX_DEPTH + 1, MAX_DEPTH + 2, 10_000] {
            // Arrays in arrays on the path (walked), and objects off it (checked).
            let walked = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            let checked = format!("{{\"x\":{}{}}}", "[".repeat(depth - 1), "]".repeat(depth - 1));
            for input in [walked, checked] {
                let valid = crate::codec::syntax::is_valid(input.as_bytes());
                assert_eq!(valid, depth <= MAX_DEPTH + 1, "depth {depth}: {}", &input[..8]);
                assert_eq!(prune(&input, &paths).is_some(), valid, "depth {depth}");
            }
        }
    }

    #[test]
    fn a_watch_line_is_pruned_only_for_a_change_to_an_object() {
        let node = node(&["metadata.annotations"]);
        let mut out = Vec::new();
        let object = r#"{"metadata":{"name":"a","annotations":{"x":"1"}}}"#;
        for kind in ["ADDED", "MODIFIED", "DELETED"] {
            for line in [
                format!(r#"{{"type":"{kind}","object":{object}}}"#),
                format!(r#"{{ "object" : {object} , "type" : "{kind}" }}"#),
            ] {
                let Some(Line::Pruned(span)) = watch_line(line.as_bytes(), &node, &mut out) else { panic!("{line}") };
                assert_eq!(&line[span], object);
                let got: serde_json::Value = serde_json::from_slice(&out).unwrap();
                assert_eq!(got["object"], serde_json::json!({"metadata": {"name": "a"}}));
                assert_eq!(got["type"], kind);
            }
        }
        // A bookmark keeps its annotations (k8s.io/initial-events-end); an error its Status.
        for line in [
            format!(r#"{{"type":"BOOKMARK","object":{object}}}"#),
            r#"{"type":"ERROR","object":{"kind":"Status","metadata":{"annotations":{}}}}"#.to_owned(),
            format!(r#"{{"object":{object}}}"#),
            r#"{"type":"ADDED"}"#.to_owned(),
        ] {
            assert_eq!(watch_line(line.as_bytes(), &node, &mut out), Some(Line::Whole), "{line}");
        }
        assert_eq!(watch_line(br#"{"type":"ADDED","object":{"a":}}"#, &node, &mut out), None);
        assert_eq!(watch_line(br#"["type"]"#, &node, &mut out), None);
    }
}
