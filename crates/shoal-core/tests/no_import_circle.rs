//! shoal-core reads top to bottom: no module reaches, through the paths it
//! names (`crate::...`, `super::...`), back to itself. A circle makes every
//! module in it depend on all the others, so none can be read, tested or
//! moved alone (issue 26); this test keeps one from coming back.
//!
//! The check reads the sources, not the compiler: every file under `src/`
//! is a node, and a path `crate::a::b::...` or `super::x` outside comments
//! and `#[cfg(test)]` modules (tests may reach anywhere) is an edge to the
//! file that defines that module.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Module path (e.g. `["trace", "clock"]`) of each source file.
fn modules(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            out.insert(parts, path);
        }
    }
    out
}

/// The code of a file that the library itself compiles: comments and the
/// `#[cfg(test)]` module (by this crate's convention, at the end) removed.
fn library_code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or("");
    text.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The identifiers of the paths in `code` that start with `prefix`
/// (`crate::` or `super::`), e.g. `["trace", "clock", "ClockOffset"]`.
fn paths_after<'a>(code: &'a str, prefix: &'a str) -> impl Iterator<Item = Vec<&'a str>> + 'a {
    code.match_indices(prefix).filter_map(move |(at, _)| {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            return None; // `foo::crate::` or `my_super::`: not a path root
        }
        let rest = &code[at + prefix.len()..];
        let mut parts = Vec::new();
        let mut rest = rest;
        loop {
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            if end == 0 {
                break;
            }
            parts.push(&rest[..end]);
            match rest[end..].strip_prefix("::") {
                Some(more) => rest = more,
                None => break,
            }
        }
        Some(parts)
    })
}

/// The longest module of `known` that `path` starts with.
fn module_of(path: &[String], known: &BTreeMap<Vec<String>, PathBuf>) -> Option<Vec<String>> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|m| known.contains_key(m))
}

/// Each module's edges to the other modules it names.
fn graph(src: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let known = modules(src);
    let mut edges = BTreeMap::new();
    for (module, file) in &known {
        let code = library_code(&fs::read_to_string(file).unwrap());
        // `super::` is the module's parent: the folder a file is in, or a
        // folder's (its mod.rs's) own parent.
        let parent = module[..module.len().saturating_sub(1)].to_vec();
        let mut to = BTreeSet::new();
        let named = paths_after(&code, "crate::")
            .map(|p| p.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .chain(paths_after(&code, "super::").map(|p| {
                let mut full = parent.clone();
                full.extend(p.iter().map(|s| s.to_string()));
                full
            }));
        for path in named {
            if let Some(target) = module_of(&path, &known) {
                if &target != module && !target.is_empty() {
                    to.insert(target);
                }
            }
        }
        edges.insert(module.clone(), to);
    }
    edges
}

/// One circle in `edges`, as the modules around it, if there is any.
fn a_circle(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    let mut mark: BTreeMap<&Vec<String>, Mark> = edges.keys().map(|k| (k, Mark::New)).collect();
    fn visit<'a>(
        node: &'a Vec<String>,
        edges: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        mark: &mut BTreeMap<&'a Vec<String>, Mark>,
        path: &mut Vec<&'a Vec<String>>,
    ) -> Option<Vec<String>> {
        mark.insert(node, Mark::OnPath);
        path.push(node);
        for next in edges.get(node).into_iter().flatten() {
            match mark.get(next).copied().unwrap_or(Mark::Done) {
                Mark::OnPath => {
                    let start = path.iter().position(|n| *n == next).unwrap();
                    let mut circle: Vec<String> =
                        path[start..].iter().map(|m| m.join("::")).collect();
                    circle.push(next.join("::"));
                    return Some(circle);
                }
                Mark::New => {
                    if let Some(c) = visit(next, edges, mark, path) {
                        return Some(c);
                    }
                }
                Mark::Done => {}
            }
        }
        path.pop();
        mark.insert(node, Mark::Done);
        None
    }
    for node in edges.keys() {
        if mark[node] == Mark::New {
            if let Some(c) = visit(node, edges, &mut mark, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn shoal_core_has_no_import_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = graph(&src);
    assert!(
        edges.len() > 20,
        "found only {} modules in {src:?}",
        edges.len()
    );
    if let Some(circle) = a_circle(&edges) {
        panic!(
            "shoal-core has an import circle: {}\n(a lower module must not name a higher one; \
             move what both need into a leaf module)",
            circle.join(" -> ")
        );
    }
}

#[test]
fn the_check_finds_a_circle_it_is_shown() {
    let dir = std::env::temp_dir().join(format!("shoal-circle-{}", std::process::id()));
    fs::create_dir_all(dir.join("trace")).unwrap();
    fs::write(dir.join("lib.rs"), "pub mod a;\npub mod trace;\n").unwrap();
    fs::write(dir.join("a.rs"), "use crate::trace::clock::Offset;\n").unwrap();
    fs::write(dir.join("trace/mod.rs"), "pub mod clock;\n").unwrap();
    fs::write(
        dir.join("trace/clock.rs"),
        "// use crate::nothing;\nuse super::super::a::X;\nfn f() { crate::a::g() }\n#[cfg(test)]\nmod tests { use crate::lib; }\n",
    )
    .unwrap();
    let edges = graph(&dir);
    let circle = a_circle(&edges);
    fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        circle,
        Some(vec!["a".into(), "trace::clock".into(), "a".into()])
    );
}
