//! Guards against module cycles in the crate: reads the sources of `src/**` (the library; not
//! `main.rs`), collects which module names which (`use` trees and inline `crate::`/`super::`/
//! `self::` paths), and checks that among the sibling modules of every folder, `src/` itself
//! included, the "uses" graph is acyclic; and that `infra/` reaches no layer above it.
//!
//! Only production code counts: test-only modules (`#[cfg(test)] mod x;`) and `#[cfg(test)]`
//! items are skipped, since a module's tests may use the builders that build its own types.
//! A path that reaches a module through a parent's re-export counts as a use of the parent only;
//! so siblings import each other by their own path (`super::pod_info::PodInfo`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

pub(crate) type ModPath = Vec<String>;

/// One source file: its module path, its path from the crate's folder, and its production text.
pub(crate) struct Source {
    pub(crate) module: ModPath,
    pub(crate) file: String,
    pub(crate) text: String,
}

/// The module path of `file` (relative to `src/`): `framework/types/mod.rs` is
/// `framework::types`, `lib.rs` the crate root (empty).
fn module_path(src: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(src).unwrap_or(file).with_extension("");
    let mut parts: ModPath = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") || parts == ["lib"] {
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

/// A test-only child module a file declares: `#[cfg(test)] mod x;`, or with `#[path = "f.rs"]`
/// the file it names (relative to the declaring file's folder).
#[derive(Debug, PartialEq)]
pub(crate) enum TestChild {
    Named(String),
    File(String),
}

/// The production lines of a file, and its test-only child modules. Comments are dropped; a
/// `#[cfg(test)]` item is skipped up to its `;`, or to the `}` at the attribute's indentation.
pub(crate) fn production_text(source: &str) -> (String, Vec<TestChild>) {
    let mut text = String::new();
    let mut test_children = Vec::new();
    let mut lines = source.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim();
        if trimmed.starts_with("//") {
            continue;
        }
        if trimmed == "#[cfg(test)]" {
            let indent = &line[..line.len() - line.trim_start().len()];
            let mut path_attr = None;
            let mut item = None;
            for next in lines.by_ref() {
                let next = next.trim();
                if let Some(file) = next
                    .strip_prefix("#[path = \"")
                    .and_then(|rest| rest.strip_suffix("\"]"))
                {
                    path_attr = Some(file.to_string());
                } else if !next.starts_with("#[") && !next.starts_with("//") {
                    item = Some(next);
                    break;
                }
            }
            let Some(item) = item else { break };
            if let Some(decl) = item.strip_suffix(';') {
                if decl.starts_with("mod ") || decl.contains(" mod ") {
                    let name = decl.rsplit("mod ").next().unwrap_or_default().trim();
                    test_children.push(match path_attr {
                        Some(file) => TestChild::File(file),
                        None => TestChild::Named(name.to_string()),
                    });
                }
            } else if !item.ends_with('}') {
                for inner in lines.by_ref() {
                    if inner
                        .strip_prefix(indent)
                        .is_some_and(|rest| rest.starts_with('}'))
                    {
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

/// Which modules each module names (the deepest module each of its paths reaches).
fn uses(sources: &[Source]) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let modules: BTreeSet<&ModPath> = sources.iter().map(|s| &s.module).collect();
    let mut uses: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for source in sources {
        let named = uses.entry(source.module.clone()).or_default();
        for path in referenced_paths(&source.text) {
            let Some(abs) = resolve(&source.module, &path) else {
                continue;
            };
            if let Some(target) = (1..=abs.len())
                .rev()
                .map(|n| abs[..n].to_vec())
                .find(|p| modules.contains(p) && *p != source.module)
            {
                named.insert(target);
            }
        }
    }
    uses
}

fn sibling_graphs(sources: &[Source]) -> Graphs {
    let mut graphs = Graphs::new();
    for (from, targets) in uses(sources) {
        for target in targets {
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

/// The cycles among the siblings of every folder, one line per folder (`src` for the top).
fn describe_cycles(sources: &[Source]) -> Vec<String> {
    sibling_graphs(sources)
        .iter()
        .filter_map(|(parent, graph)| {
            let groups = cycles(graph);
            let described: Vec<String> = groups.iter().map(|g| g.join(" <-> ")).collect();
            let parent = if parent.is_empty() {
                "src".to_string()
            } else {
                parent.join("::")
            };
            (!groups.is_empty()).then(|| format!("in {parent}: {}", described.join("; ")))
        })
        .collect()
}

/// What `infra/` may reach, directly or through what it names: its own layer (`infra/`,
/// `quantity.rs`, `allocator.rs`) and the one below it (`emulation/`); ARCHITECTURE.md, "Layers".
/// Anything else at the top (`api`, `config`, `framework`, `scheduler`, `simulate`, `operator`,
/// `prelude`, or a module added later) is a layer above.
const INFRA_MAY_REACH: &[&str] = &["infra", "quantity", "allocator", "emulation"];

/// Every module outside [`INFRA_MAY_REACH`] that an `infra` module reaches, each with the
/// shortest path to it and the file of the step that leaves the allowed modules.
fn infra_escapes(sources: &[Source]) -> Vec<String> {
    let uses = uses(sources);
    let allowed = |m: &ModPath| {
        m.first()
            .is_some_and(|top| INFRA_MAY_REACH.contains(&top.as_str()))
    };
    let mut came_from: BTreeMap<&ModPath, Option<&ModPath>> = BTreeMap::new();
    let mut todo: VecDeque<&ModPath> = VecDeque::new();
    for module in uses
        .keys()
        .filter(|m| m.first().is_some_and(|t| t == "infra"))
    {
        came_from.insert(module, None);
        todo.push_back(module);
    }
    let mut escapes = Vec::new();
    while let Some(module) = todo.pop_front() {
        if !allowed(module) {
            let mut path = vec![module];
            while let Some(Some(prev)) = came_from.get(path[path.len() - 1]) {
                path.push(prev);
            }
            path.reverse();
            let step = path[path.len() - 2];
            let file = sources
                .iter()
                .find(|s| &s.module == step)
                .map_or("?", |s| &s.file);
            let path: Vec<String> = path.iter().map(|m| m.join("::")).collect();
            escapes.push(format!("{file}: {}", path.join(" -> ")));
            continue;
        }
        for next in uses.get(module).into_iter().flatten() {
            if !came_from.contains_key(next) {
                came_from.insert(next, Some(module));
                todo.push_back(next);
            }
        }
    }
    escapes
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

/// The production code of every file of the library (`src/**` but `main.rs`, the binary's root;
/// test-only modules left out).
pub(crate) fn crate_sources() -> Vec<Source> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.retain(|f| f != &src.join("main.rs"));
    let mut sources = Vec::new();
    let mut test_only: BTreeSet<ModPath> = BTreeSet::new();
    for file in files {
        let module = module_path(&src, &file);
        let raw = std::fs::read_to_string(&file).unwrap_or_default();
        let (text, test_children) = production_text(&raw);
        for child in test_children {
            test_only.insert(match child {
                TestChild::Named(name) => [module.clone(), vec![name]].concat(),
                TestChild::File(path) => {
                    module_path(&src, &file.parent().unwrap_or(&src).join(path))
                }
            });
        }
        let file = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .display()
            .to_string();
        sources.push(Source { module, file, text });
    }
    sources.retain(|s| !test_only.iter().any(|t| s.module.starts_with(t)));
    sources
}

#[test]
fn crate_modules_form_a_dag() {
    let sources = crate_sources();
    let tops: BTreeSet<&str> = sources
        .iter()
        .filter_map(|s| s.module.first().map(String::as_str))
        .collect();
    for top in [
        "api",
        "config",
        "emulation",
        "framework",
        "infra",
        "operator",
        "scheduler",
        "simulate",
    ] {
        assert!(tops.contains(top), "read no file of {top}/");
    }
    let framework = sources
        .iter()
        .filter(|s| s.module.first().is_some_and(|t| t == "framework"));
    assert!(
        framework.count() > 50 && sources.len() > 150,
        "read only {} files",
        sources.len()
    );
    let found = describe_cycles(&sources);
    assert!(found.is_empty(), "module cycles:\n{}", found.join("\n"));
}

#[test]
fn infra_names_no_layer_above_it() {
    let sources = crate_sources();
    assert!(
        sources
            .iter()
            .filter(|s| s.module.first().is_some_and(|t| t == "infra"))
            .count()
            > 10,
        "read too few infra files"
    );
    let found = infra_escapes(&sources);
    assert!(
        found.is_empty(),
        "infra/ may reach only {INFRA_MAY_REACH:?}; it reaches a layer above (path from infra):\n{}",
        found.join("\n")
    );
}

fn source(module: &[&str], text: &str) -> Source {
    Source {
        module: module.iter().map(|s| s.to_string()).collect(),
        file: format!("src/{}.rs", module.join("/")),
        text: production_text(text).0,
    }
}

#[test]
fn the_checker_sees_a_cycle_between_siblings() {
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
fn the_checker_sees_a_cycle_at_the_top_and_infra_reaching_up() {
    let sources = vec![
        source(&[], "pub mod config;\npub mod infra;\npub mod quantity;\n"),
        source(
            &["infra", "client"],
            "use crate::quantity::Q;\nfn f() { super::metrics::m(); }\n",
        ),
        source(&["infra", "metrics"], "pub fn m() {}\n"),
        source(&["quantity"], "fn q(_: crate::config::types::Args) {}\n"),
        source(
            &["config", "types"],
            "use crate::infra::client;\n\n#[cfg(test)]\nmod tests;\n",
        ),
    ];
    assert_eq!(
        describe_cycles(&sources),
        ["in src: config <-> infra <-> quantity"]
    );
    assert_eq!(
        infra_escapes(&sources),
        ["src/quantity.rs: infra::client -> quantity -> config::types"]
    );
}

#[test]
fn test_only_code_is_left_out() {
    let (text, children) = production_text(
        "impl A {\n    #[cfg(test)]\n    fn t() {\n        crate::a::b();\n    }\n\n    fn p() {}\n}\n\
         #[cfg(test)]\n#[path = \"a_tests.rs\"]\nmod tests;\n#[cfg(test)]\npub(crate) mod testing;\n",
    );
    assert_eq!(text, "impl A {\n\n    fn p() {}\n}\n");
    assert_eq!(
        children,
        [
            TestChild::File("a_tests.rs".into()),
            TestChild::Named("testing".into())
        ]
    );
    let src = Path::new("/k/src");
    assert!(module_path(src, &src.join("lib.rs")).is_empty());
    assert_eq!(module_path(src, &src.join("infra/mod.rs")), ["infra"]);
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
