//! A guard against module cycles inside `framework/`: reads the sources of `src/framework/**`,
//! collects which module names which (`use` trees and inline `crate::`/`super::`/`self::` paths),
//! and checks that among the sibling modules of every folder the "uses" graph is acyclic.
//!
//! Only production code counts: test-only modules (`#[cfg(test)] mod x;`) and `#[cfg(test)]`
//! items are skipped, since a module's tests may use the builders that build its own types.
//! A path that reaches a module through a parent's re-export counts as a use of the parent only;
//! so siblings import each other by their own path (`super::pod_info::PodInfo`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub(crate) type ModPath = Vec<String>;

/// One source file: its module path and its production text.
pub(crate) struct Source {
    pub(crate) module: ModPath,
    pub(crate) text: String,
}

/// The module path of `file` (relative to `src/`): `framework/types/mod.rs` is
/// `framework::types`.
fn module_path(src: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(src).unwrap_or(file).with_extension("");
    let mut parts: ModPath = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The production lines of a file, and the names of its test-only child modules. Comments are
/// dropped; a `#[cfg(test)]` item is skipped up to its `;` or to its closing `}` in column 0.
pub(crate) fn production_text(source: &str) -> (String, BTreeSet<String>) {
    let mut text = String::new();
    let mut test_children = BTreeSet::new();
    let mut lines = source.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim();
        if trimmed.starts_with("//") {
            continue;
        }
        if trimmed == "#[cfg(test)]" {
            let Some(item) = lines.next() else { break };
            let item = item.trim();
            if item.ends_with(';') {
                let decl = item.trim_start_matches("pub ").trim_start_matches("mod ");
                if item.contains("mod ") {
                    test_children.insert(decl.trim_end_matches(';').trim().to_string());
                }
            } else {
                for inner in lines.by_ref() {
                    if inner == "}" {
                        break;
                    }
                }
            }
            continue;
        }
        let code = line.split(" //").next().unwrap_or(line);
        text.push_str(code);
        text.push('\n');
    }
    (text, test_children)
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Expands a `use` tree (`crate::a::{b::C, d}`) into full paths (`crate::a::b::C`, `crate::a::d`).
pub(crate) fn expand_use_tree(tree: &str) -> Vec<String> {
    // Drop renames (`X as Y`), then the whitespace.
    let mut words: Vec<&str> = Vec::new();
    let mut tokens = tree.split_whitespace();
    while let Some(token) = tokens.next() {
        if token == "as" {
            let renamed = tokens.next().unwrap_or_default();
            // Keep what follows the new name (`Y,` or `Y}`).
            words.push(renamed.trim_start_matches(is_ident));
        } else {
            words.push(token);
        }
    }
    let tree = words.concat();
    let mut out = Vec::new();
    expand_into("", &tree, &mut out);
    out
}

fn expand_into(prefix: &str, tree: &str, out: &mut Vec<String>) {
    let Some(open) = tree.find('{') else {
        out.push(format!("{prefix}{tree}"));
        return;
    };
    let head = format!("{prefix}{}", &tree[..open]);
    let inner = tree[open + 1..]
        .strip_suffix('}')
        .unwrap_or(&tree[open + 1..]);
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                expand_into(&head, &inner[start..i], out);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < inner.len() {
        expand_into(&head, &inner[start..], out);
    }
}

/// Every path in `text` that starts with `crate::`, `super::` or `self::`: the expanded `use`
/// trees and the inline paths of the code.
pub(crate) fn referenced_paths(text: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest = text;
    // `use` trees (they may span lines and hold braces).
    while let Some(at) = rest.find("use ") {
        let before_ok = at == 0 || !is_ident(rest[..at].chars().next_back().unwrap_or(' '));
        let after = &rest[at + 4..];
        let Some(end) = after.find(';') else { break };
        if before_ok {
            paths.extend(expand_use_tree(&after[..end]));
        }
        rest = &after[end..];
    }
    // Inline paths.
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(at) = text[from..].find(start) {
            let begin = from + at;
            from = begin + start.len();
            if begin > 0 && is_ident(text[..begin].chars().next_back().unwrap_or(' ')) {
                continue;
            }
            let chain: String = text[begin..]
                .chars()
                .take_while(|&c| is_ident(c) || c == ':')
                .collect();
            paths.push(chain);
        }
    }
    paths
}

/// The absolute module-or-item path `path` names from `module`; `None` for other crates.
fn resolve(module: &[String], path: &str) -> Option<ModPath> {
    let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let (first, rest) = segments.split_first()?;
    let mut base: ModPath = match *first {
        "crate" => Vec::new(),
        "self" => module.to_vec(),
        "super" => module[..module.len().saturating_sub(1)].to_vec(),
        _ => return None,
    };
    let mut rest = rest;
    while let Some((&"super", tail)) = rest.split_first() {
        base.pop();
        rest = tail;
    }
    base.extend(rest.iter().map(|s| s.to_string()));
    Some(base)
}

/// Sibling edges per parent module: `parent -> (from child -> to children)`.
type Graphs = BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>>;

fn sibling_graphs(sources: &[Source]) -> Graphs {
    let modules: BTreeSet<&ModPath> = sources.iter().map(|s| &s.module).collect();
    let mut graphs = Graphs::new();
    for source in sources {
        for path in referenced_paths(&source.text) {
            let Some(abs) = resolve(&source.module, &path) else {
                continue;
            };
            let Some(target) = (1..=abs.len())
                .rev()
                .map(|n| abs[..n].to_vec())
                .find(|p| modules.contains(p))
            else {
                continue;
            };
            let from = &source.module;
            let common = from.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == target.len() {
                continue; // an ancestor or a descendant, not a sibling
            }
            graphs
                .entry(from[..common].to_vec())
                .or_default()
                .entry(from[common].clone())
                .or_default()
                .insert(target[common].clone());
        }
    }
    graphs
}

/// The groups of modules that depend on each other (strongly connected components of more than
/// one module), each sorted; empty when the graph is acyclic.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let reachable = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(node) = todo.pop() {
            for next in graph.get(&node).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|n| (n, reachable(n))).collect();
    let mut groups: Vec<Vec<String>> = Vec::new();
    for (node, from_node) in &reach {
        if groups.iter().any(|g| g.contains(node)) || !from_node.contains(*node) {
            continue;
        }
        let group: Vec<String> = from_node
            .iter()
            .filter(|other| reach.get(other).is_some_and(|r| r.contains(*node)))
            .cloned()
            .collect();
        groups.push(group);
    }
    groups
}

/// The production code of every file under `src/framework/` (test-only modules left out).
pub(crate) fn framework_sources() -> Vec<Source> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src.join("framework"), &mut files);
    let mut sources = Vec::new();
    let mut test_only: BTreeSet<ModPath> = BTreeSet::new();
    for file in files {
        let module = module_path(&src, &file);
        let raw = std::fs::read_to_string(&file).unwrap_or_default();
        let (text, test_children) = production_text(&raw);
        for child in test_children {
            let mut path = module.clone();
            path.push(child);
            test_only.insert(path);
        }
        sources.push(Source { module, text });
    }
    sources.retain(|s| !test_only.iter().any(|t| s.module.starts_with(t)));
    sources
}

#[test]
fn framework_modules_form_a_dag() {
    let sources = framework_sources();
    assert!(
        sources.len() > 50,
        "read only {} framework files",
        sources.len()
    );
    let found: Vec<String> = sibling_graphs(&sources)
        .iter()
        .filter_map(|(parent, graph)| {
            let groups = cycles(graph);
            let described: Vec<String> = groups.iter().map(|g| g.join(" <-> ")).collect();
            (!groups.is_empty())
                .then(|| format!("in {}: {}", parent.join("::"), described.join("; ")))
        })
        .collect();
    assert!(found.is_empty(), "module cycles:\n{}", found.join("\n"));
}

#[test]
fn the_checker_sees_a_cycle_between_siblings() {
    let source = |module: &[&str], text: &str| Source {
        module: module.iter().map(|s| s.to_string()).collect(),
        text: production_text(text).0,
    };
    let sources = vec![
        source(&["framework"], "pub mod a;\npub mod b;\n"),
        source(&["framework", "a"], "use super::b::{B, other::C};\n"),
        source(
            &["framework", "b"],
            "fn f(x: &crate::framework::a::A) {}\n#[cfg(test)]\nmod tests {\n    use super::super::c;\n}\n",
        ),
        source(&["framework", "c"], "// use super::a::A;\n"),
    ];
    let graphs = sibling_graphs(&sources);
    let top = &graphs[&vec!["framework".to_string()]];
    assert_eq!(top["a"], BTreeSet::from(["b".to_string()]));
    assert_eq!(top["b"], BTreeSet::from(["a".to_string()]));
    assert!(!top.contains_key("c"), "comments do not count");
    assert_eq!(cycles(top), vec![vec!["a".to_string(), "b".to_string()]]);
}

#[test]
fn use_trees_expand_to_full_paths() {
    assert_eq!(
        expand_use_tree("crate::framework::{interface::{Code, Status}, types::PodInfo as P}"),
        vec![
            "crate::framework::interface::Code",
            "crate::framework::interface::Status",
            "crate::framework::types::PodInfo",
        ]
    );
    assert_eq!(
        resolve(
            &["framework".into(), "types".into(), "node_info".into()],
            "super::super::interface::Status"
        ),
        Some(vec![
            "framework".to_string(),
            "interface".to_string(),
            "Status".to_string()
        ])
    );
}
