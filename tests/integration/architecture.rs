//! The rules of ARCHITECTURE.md that imports can break, read from `src/` itself: no layer
//! imports one it must never import (the codec never imports the wire, …), and no modules that
//! sit side by side import each other in a circle, in any folder.
//!
//! What counts is what the library is built from: comments, string literals and items only
//! compiled for tests (`#[cfg(test)]`, `#[cfg(all(test, …))]`) are left out, as ARCHITECTURE.md
//! lets doc links and test modules name any layer. A path through a re-export (`pub(crate) use
//! list::Item` in `decode/mod.rs`) is followed to the module that defines the name. A module
//! importing from a module it lies inside (`super::Fields` in `protobuf/de/value.rs`) is not an
//! arrow between sides: the outer module holds the inner one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A module's path below `crate`: `["codec", "decode", "list"]` for `src/codec/decode/list.rs`.
type Module = Vec<String>;

/// What a layer must never import (ARCHITECTURE.md, the "never imports" column). Paths are
/// modules below `crate`; `"*"` is every module outside the layer, and `except` lists what is
/// allowed all the same.
struct Rule {
    layer: &'static str,
    never: &'static [&'static str],
    except: &'static [&'static str],
    why: &'static str,
}

const RULES: &[Rule] = &[
    Rule {
        layer: "codec",
        never: &["wire", "engine", "cache", "machine", "auth", "lease", "watcher", "testing", "fuzzing"],
        except: &[],
        why: "the codec never imports the wire: bytes in, values out, no I/O",
    },
    Rule {
        layer: "wire",
        never: &["engine", "cache", "machine", "lease", "watcher", "testing", "fuzzing"],
        except: &[],
        why: "the wire knows nothing of stores, consumers or the state machine",
    },
    Rule {
        layer: "auth",
        never: &["wire", "codec", "engine", "cache", "machine", "lease", "watcher", "testing", "fuzzing"],
        except: &[],
        why: "auth is below the wire, beside the codec",
    },
    Rule {
        layer: "cache",
        never: &["engine", "machine", "wire", "codec", "lease", "watcher", "testing", "fuzzing"],
        except: &[],
        why: "the store is handed a decoder",
    },
    Rule {
        layer: "machine",
        never: &["engine", "cache", "wire", "codec", "auth", "lease", "watcher", "testing", "fuzzing"],
        except: &["wire::request"],
        why: "the state machine does no I/O (it names wire/request.rs's plain parameter types)",
    },
    Rule {
        layer: "engine",
        never: &["watcher", "lease", "testing", "fuzzing"],
        except: &[],
        why: "the engine is below the public face",
    },
    Rule {
        layer: "watcher",
        never: &["lease", "testing", "fuzzing"],
        except: &[],
        why: "leases are above the watcher",
    },
    Rule {
        layer: "lease",
        never: &["engine", "cache", "machine"],
        except: &[],
        why: "a lease uses a Watcher, not its parts",
    },
    Rule {
        layer: "testing",
        never: &["*"],
        except: &["codec::protobuf"],
        why: "the fake API server imports nothing from the crate but the protobuf schema table and encoder",
    },
];

/// The vocabulary: the files at the root of `src/` that every layer may import.
const VOCABULARY: &[&str] =
    &["config", "error", "event", "guard", "key", "notice", "predicates", "resource", "shard", "spelling", "stats"];

/// What no vocabulary file imports: every layer is above them.
const VOCABULARY_RULE: Rule = Rule {
    layer: "",
    never: &["lease", "watcher", "engine", "cache", "machine", "wire", "codec", "auth", "testing", "fuzzing"],
    except: &[],
    why: "the vocabulary is below every layer",
};

#[test]
fn no_layer_imports_one_it_must_never_import() {
    let crate_ = Crate::read(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src")));
    let mut broken = Vec::new();
    for rule in RULES {
        broken.extend(crate_.breaches(rule.layer, rule));
    }
    for file in VOCABULARY {
        broken.extend(crate_.breaches(file, &VOCABULARY_RULE));
    }
    // A new folder or root file is placed: a layer above, or the vocabulary.
    for m in crate_.modules.keys().filter(|m| m.len() == 1) {
        let name = m[0].as_str();
        if !RULES.iter().any(|r| r.layer == name) && !VOCABULARY.contains(&name) && name != "fuzzing" {
            broken.push(format!(
                "  src/{}: {name} is in no layer: place it in ARCHITECTURE.md and RULES",
                crate_.modules[m]
            ));
        }
    }
    assert!(broken.is_empty(), "imports that ARCHITECTURE.md forbids:\n{}", broken.join("\n"));
}

#[test]
fn no_modules_side_by_side_import_each_other_in_a_circle() {
    let crate_ = Crate::read(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src")));
    let circles = crate_.circles();
    assert!(circles.is_empty(), "import circles in src/:\n{}", circles.join("\n"));
}

#[test]
fn the_scanner_sees_the_imports_it_must_judge() {
    let crate_ = Crate::read(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src")));
    let seen = |from: &str, to: &str| crate_.arrows.iter().any(|a| a.from == module(from) && a.to == module(to));
    // Straight, grouped, through a re-export, and between siblings through `super::`.
    assert!(seen("wire::http", "wire::stream"), "use crate::wire::stream::{{…}}");
    assert!(seen("wire::http", "codec::decode::list"), "through decode/mod.rs's re-export of list::ListMeta");
    assert!(seen("engine::worker", "wire::api"));
    assert!(seen("codec::decode::proto", "codec::decode::watch"), "use super::watch::{{…}}");
    // Nothing from a test module: stream/tests.rs opens its streams through http.rs.
    assert!(!seen("wire::stream", "wire::http"), "an import of a #[cfg(test)] module was counted");
}

#[test]
fn a_circle_and_a_forbidden_import_are_found_in_a_made_up_crate() {
    let files = [
        ("lib.rs", "mod codec; mod wire;"),
        ("codec/mod.rs", "mod a; mod b;\npub(crate) use a::A;"),
        ("codec/a.rs", "use super::b::{self, B};\n// use crate::wire::X;\n"),
        ("codec/b.rs", "use crate::codec::A;\nfn f() -> &'static str { \"crate::wire::Y\" }\n"),
        ("wire/mod.rs", "pub(crate) struct W;"),
        ("codec/c.rs", "#[cfg(test)]\nmod tests { use crate::wire::W; }\nfn g(_: crate::wire::W) {}\n"),
        ("codec/d.rs", "#[cfg(all(test, feature = \"x\"))]\nmod tests;\n"),
        ("codec/d/tests.rs", "use crate::wire::W;\n"),
    ];
    let crate_ = Crate::from_sources(files.iter().map(|(p, s)| ((*p).to_owned(), (*s).to_owned())).collect());
    let circles = crate_.circles();
    assert_eq!(circles.len(), 1, "{circles:?}");
    assert!(circles[0].contains("codec::a") && circles[0].contains("codec::b"), "{}", circles[0]);
    let broken = crate_.breaches("codec", &RULES[0]);
    assert_eq!(broken.len(), 1, "only c.rs's non-test import: {broken:?}");
    assert!(broken[0].contains("codec/c.rs"), "{}", broken[0]);
}

fn module(path: &str) -> Module {
    path.split("::").filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

fn within(m: &[String], prefix: &str) -> bool {
    let p = module(prefix);
    m.len() >= p.len() && m[..p.len()] == p[..]
}

/// One import, resolved: `from`'s file names a path defined in `to`.
#[derive(Debug)]
struct Arrow {
    from: Module,
    to: Module,
    file: String,
    line: usize,
    path: String,
}

struct Crate {
    /// Every module with a file, by its path; the value is the file (relative to `src/`).
    modules: BTreeMap<Module, String>,
    arrows: Vec<Arrow>,
}

impl Crate {
    fn read(src: &Path) -> Crate {
        let mut sources = BTreeMap::new();
        let mut stack = vec![src.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let rel = path.strip_prefix(src).unwrap().to_string_lossy().replace('\\', "/");
                    sources.insert(rel, std::fs::read_to_string(&path).unwrap());
                }
            }
        }
        assert!(sources.len() > 50, "src/ not found at {}", src.display());
        Crate::from_sources(sources)
    }

    /// `sources`: file path relative to `src/` → its text.
    fn from_sources(sources: BTreeMap<String, String>) -> Crate {
        let mut code: BTreeMap<&String, String> = BTreeMap::new();
        // Modules in files of their own that are compiled for tests only (`#[cfg(test)] mod tests;`).
        let mut test_only: Vec<Module> = Vec::new();
        for (file, text) in &sources {
            let (kept, tests) = without_tests(&strip(text));
            for name in tests {
                let mut m = module_of(file);
                m.push(name);
                test_only.push(m);
            }
            code.insert(file, kept);
        }
        code.retain(|file, _| !test_only.iter().any(|t| module_of(file).starts_with(t)));
        let modules: BTreeMap<Module, String> = code.keys().map(|f| (module_of(f), (*f).clone())).collect();
        // Names each module re-exports: name → the path it stands for.
        let mut exports: BTreeMap<Module, BTreeMap<String, Module>> = BTreeMap::new();
        for (file, text) in &code {
            let here = module_of(file);
            for (at, _) in text.match_indices("use ") {
                let before = text[..at].trim_end();
                let word =
                    at == 0 || !text.as_bytes()[at - 1].is_ascii_alphanumeric() && text.as_bytes()[at - 1] != b'_';
                if !word || !is_pub_prefix(before) {
                    continue;
                }
                let mut i = at + 4;
                for (path, alias) in tree(text.as_bytes(), &mut i) {
                    let Some(absolute) = absolute(&here, &path, &modules) else { continue };
                    let Some(name) = alias.or_else(|| path.last().cloned()) else { continue };
                    if name != "self" && name != "*" {
                        exports.entry(here.clone()).or_default().insert(name, absolute);
                    }
                }
            }
        }
        let mut arrows = Vec::new();
        for (file, text) in &code {
            let here = module_of(file);
            let bytes = text.as_bytes();
            let mut at = 0;
            while at < bytes.len() {
                let starts = ["crate::", "super::", "self::"].iter().find(|k| bytes[at..].starts_with(k.as_bytes()));
                let fresh =
                    at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || matches!(bytes[at - 1], b'_' | b':' | b'$'));
                if let (Some(_), true) = (starts, fresh) {
                    let mut i = at;
                    for (path, _) in tree(bytes, &mut i) {
                        let Some(absolute) = absolute(&here, &path, &modules) else { continue };
                        let to = resolve(&absolute, &modules, &exports, 0);
                        if to != here {
                            let line = text[..at].matches('\n').count() + 1;
                            arrows.push(Arrow {
                                from: here.clone(),
                                to,
                                file: file.to_string(),
                                line,
                                path: path.iter().filter(|s| *s != "self").cloned().collect::<Vec<_>>().join("::"),
                            });
                        }
                    }
                    at = i.max(at + 1);
                } else {
                    at += 1;
                }
            }
        }
        Crate { modules, arrows }
    }

    /// The imports from inside `layer` that `rule` forbids, one line each.
    fn breaches(&self, layer: &str, rule: &Rule) -> Vec<String> {
        assert!(self.modules.keys().any(|m| within(m, layer)), "no module {layer} in src/: mend the rules");
        self.arrows
            .iter()
            .filter(|a| within(&a.from, layer) && !within(&a.to, layer) && !a.to.is_empty())
            .filter(|a| rule.never.iter().any(|n| *n == "*" || within(&a.to, n)))
            .filter(|a| !rule.except.iter().any(|e| within(&a.to, e)))
            .map(|a| format!("  src/{}:{}: {} imports {} ({})", a.file, a.line, a.from.join("::"), a.path, rule.why))
            .collect()
    }

    /// Every circle among modules that sit side by side (the children of one module), with the
    /// imports that tie it.
    fn circles(&self) -> Vec<String> {
        // Parent module → (child → children it imports, with the evidence).
        let mut graphs: BTreeMap<Module, BTreeMap<String, BTreeMap<String, Vec<&Arrow>>>> = BTreeMap::new();
        for a in &self.arrows {
            let common = a.from.iter().zip(&a.to).take_while(|(x, y)| x == y).count();
            if common == a.from.len() || common == a.to.len() {
                // One holds the other.
                continue;
            }
            let parent = a.from[..common].to_vec();
            let edges = graphs.entry(parent).or_default();
            edges.entry(a.from[common].clone()).or_default().entry(a.to[common].clone()).or_default().push(a);
        }
        let mut out = Vec::new();
        for (parent, edges) in &graphs {
            for scc in strongly_connected(edges) {
                let name = |c: &str| {
                    let mut m = parent.clone();
                    m.push(c.to_owned());
                    m.join("::")
                };
                let mut text = format!("  {}:", scc.iter().map(|c| name(c)).collect::<Vec<_>>().join(", "));
                for from in &scc {
                    for (to, why) in &edges[from] {
                        if scc.contains(to) {
                            let a = why[0];
                            text += &format!(
                                "\n    {} -> {}: src/{}:{} names {}",
                                name(from),
                                name(to),
                                a.file,
                                a.line,
                                a.path
                            );
                        }
                    }
                }
                out.push(text);
            }
        }
        out
    }
}

/// Whether the code before a `use` ends in `pub`, `pub(crate)`, `pub(super)` or `pub(in …)`.
fn is_pub_prefix(before: &str) -> bool {
    let word_ends = |rest: &str| !rest.ends_with(|c: char| c.is_alphanumeric() || c == '_');
    if let Some(rest) = before.strip_suffix("pub") {
        return word_ends(rest);
    }
    before.ends_with(')')
        && before.rfind("pub(").is_some_and(|i| word_ends(&before[..i]) && !before[i..].contains([';', '{', '}']))
}

/// Tarjan's strongly connected components of more than one node.
fn strongly_connected<T>(edges: &BTreeMap<String, BTreeMap<String, T>>) -> Vec<Vec<String>> {
    struct State<'a, T> {
        edges: &'a BTreeMap<String, BTreeMap<String, T>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a, T>(s: &mut State<'a, T>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on.insert(v);
        if let Some(next) = s.edges.get(v) {
            for w in next.keys() {
                if !s.index.contains_key(w.as_str()) {
                    visit(s, w);
                    let low = s.low[w.as_str()].min(s.low[v]);
                    s.low.insert(v, low);
                } else if s.on.contains(w.as_str()) {
                    let low = s.index[w.as_str()].min(s.low[v]);
                    s.low.insert(v, low);
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                scc.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                scc.sort();
                s.out.push(scc);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// `codec/decode/mod.rs` → `["codec", "decode"]`; `lib.rs` → `[]`.
fn module_of(file: &str) -> Module {
    let stem = file.strip_suffix(".rs").unwrap_or(file);
    let mut m = module(&stem.replace('/', "::"));
    if matches!(m.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        m.pop();
    }
    m
}

/// A path as written in `here` made absolute (below `crate`); `None` for another crate's.
fn absolute(here: &Module, path: &[String], modules: &BTreeMap<Module, String>) -> Option<Module> {
    let mut base = here.clone();
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &path[1..];
        }
        Some("self") => rest = &path[1..],
        Some("super") => {
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        // A child module's name (or another crate's).
        Some(first) => {
            let mut child = here.clone();
            child.push(first.to_owned());
            if !modules.contains_key(&child) {
                return None;
            }
        }
        None => return None,
    }
    base.extend(rest.iter().filter(|s| *s != "self").cloned());
    Some(base)
}

/// The module that defines what `path` names: its longest prefix that is a module, followed
/// through that module's re-exports.
fn resolve(
    path: &Module,
    modules: &BTreeMap<Module, String>,
    exports: &BTreeMap<Module, BTreeMap<String, Module>>,
    depth: u32,
) -> Module {
    let len = (0..=path.len()).rev().find(|&n| modules.contains_key(&path[..n])).unwrap_or(0);
    let found = path[..len].to_vec();
    if depth < 8
        && let Some(name) = path.get(len)
        && let Some(target) = exports.get(&found).and_then(|e| e.get(name))
    {
        let mut next = target.clone();
        next.extend(path[len + 1..].iter().cloned());
        if &next != path {
            return resolve(&next, modules, exports, depth + 1);
        }
    }
    found
}

/// The paths of one use tree (or one path in code) starting at `*i`: each with its alias.
/// `crate::{a::b, c::{self as d, e}}` → `crate::a::b`, `crate::c` as `d`, `crate::c::e`.
fn tree(s: &[u8], i: &mut usize) -> Vec<(Vec<String>, Option<String>)> {
    let mut prefix = Vec::new();
    loop {
        skip_space(s, i);
        if s.get(*i) == Some(&b'{') {
            *i += 1;
            let mut out = Vec::new();
            loop {
                skip_space(s, i);
                match s.get(*i) {
                    Some(b'}') => {
                        *i += 1;
                        break;
                    }
                    Some(b',') => *i += 1,
                    None => break,
                    _ => {
                        let before = *i;
                        for (mut p, alias) in tree(s, i) {
                            let mut full = prefix.clone();
                            full.append(&mut p);
                            out.push((full, alias));
                        }
                        if *i == before {
                            *i += 1;
                        }
                    }
                }
            }
            return out;
        }
        if s.get(*i) == Some(&b'*') {
            *i += 1;
            prefix.push("*".to_owned());
            return vec![(prefix, None)];
        }
        let start = *i;
        while s.get(*i).is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_') {
            *i += 1;
        }
        if start == *i {
            return if prefix.is_empty() { Vec::new() } else { vec![(prefix, None)] };
        }
        prefix.push(String::from_utf8_lossy(&s[start..*i]).into_owned());
        let save = *i;
        skip_space(s, i);
        if s[*i..].starts_with(b"::") {
            *i += 2;
            continue;
        }
        if s[*i..].starts_with(b"as") && s.get(*i + 2).is_some_and(u8::is_ascii_whitespace) {
            *i += 2;
            skip_space(s, i);
            let start = *i;
            while s.get(*i).is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_') {
                *i += 1;
            }
            let alias = String::from_utf8_lossy(&s[start..*i]).into_owned();
            return vec![(prefix, Some(alias))];
        }
        *i = save;
        return vec![(prefix, None)];
    }
}

fn skip_space(s: &[u8], i: &mut usize) {
    while s.get(*i).is_some_and(u8::is_ascii_whitespace) {
        *i += 1;
    }
}

/// The code with comments and the insides of string and char literals blanked (newlines kept,
/// so lines still count).
fn strip(src: &str) -> String {
    let s: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        let next = s.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < s.len() && s[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < s.len() {
                if s[i] == '/' && s.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if s[i] == '*' && s.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(s[i]));
                    i += 1;
                }
            }
        } else if (c == 'r' || (c == 'b' && next == Some('r'))) && (i == 0 || !ident(s[i - 1])) && {
            let mut j = i + if c == 'b' { 2 } else { 1 };
            while s.get(j) == Some(&'#') {
                j += 1;
            }
            s.get(j) == Some(&'"')
        } {
            // A raw string: r"…", r#"…"#, br"…".
            let mut j = i + if c == 'b' { 2 } else { 1 };
            let mut hashes = 0;
            while s[j] == '#' {
                hashes += 1;
                j += 1;
            }
            out.extend(std::iter::repeat_n(' ', j + 1 - i));
            i = j + 1;
            while i < s.len() {
                if s[i] == '"' && (0..hashes).all(|k| s.get(i + 1 + k) == Some(&'#')) {
                    out.extend(std::iter::repeat_n(' ', 1 + hashes));
                    i += 1 + hashes;
                    break;
                }
                out.push(blank(s[i]));
                i += 1;
            }
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < s.len() && s[i] != '"' {
                if s[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < s.len() {
                    out.push(blank(s[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && (next == Some('\\') || s.get(i + 2) == Some(&'\'')) {
            // A char literal ('x', '\n', '\u{..}', '\''); otherwise a lifetime.
            out.push(' ');
            i += 1;
            if s.get(i) == Some(&'\\') {
                out.push_str("  ");
                i += 2;
            }
            while i < s.len() && s[i] != '\'' {
                out.push(' ');
                i += 1;
            }
            out.push(' ');
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The code without the items compiled for tests only (`#[cfg(test)]`, `#[cfg(all(test, …))]`),
/// blanked as [`strip`] blanks; and the names of such modules whose code is in a file of its own.
fn without_tests(code: &str) -> (String, Vec<String>) {
    let mut s: Vec<char> = code.chars().collect();
    let mut files = Vec::new();
    let mut i = 0;
    while i < s.len() {
        if s[i] == '#' && s.get(i + 1) == Some(&'[') {
            let end = matching(&s, i + 1, '[', ']');
            let attr: String = s[i + 2..end].iter().filter(|c| !c.is_whitespace()).collect();
            if attr == "cfg(test)" || (attr.starts_with("cfg(all(") && attr[8..].split([',', ')']).any(|a| a == "test"))
            {
                // The item: up to its `;`, or its `{ … }` block.
                let mut j = end + 1;
                while j < s.len() && s[j] != ';' && s[j] != '{' {
                    if s[j] == '#' && s.get(j + 1) == Some(&'[') {
                        j = matching(&s, j + 1, '[', ']');
                    }
                    j += 1;
                }
                let stop = if s.get(j) == Some(&'{') { matching(&s, j, '{', '}') } else { j };
                let item: String = s[end + 1..stop.min(s.len())].iter().collect();
                if let (Some(';'), [.., "mod", name]) = (s.get(stop), &item.split_whitespace().collect::<Vec<_>>()[..])
                {
                    files.push((*name).to_owned());
                }
                let last = stop.min(s.len() - 1);
                for c in &mut s[i..=last] {
                    if *c != '\n' {
                        *c = ' ';
                    }
                }
                i = stop + 1;
                continue;
            }
        }
        i += 1;
    }
    (s.into_iter().collect(), files)
}

/// The index of the bracket that closes the one at `open`.
fn matching(s: &[char], open: usize, left: char, right: char) -> usize {
    let mut depth = 0;
    for (j, &c) in s.iter().enumerate().skip(open) {
        if c == left {
            depth += 1;
        } else if c == right {
            depth -= 1;
            if depth == 0 {
                return j;
            }
        }
    }
    s.len() - 1
}
