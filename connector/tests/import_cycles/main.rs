//! The connector and its CLI import in one direction: no file imports a file that imports it
//! back (directly or around a longer circle), and no folder does so with a sibling folder. And no
//! module is included by path: the file tree is the module tree.
//!
//! The check reads the sources, not the compiler's view: starting from each crate root it follows
//! `mod x;` declarations to files, then resolves every `use` tree and every path that starts with
//! `crate::`, `super::`, `self::` or a child module's name to the module it names (following
//! `use` re-exports, so `crate::Error` is `error.rs`, not `lib.rs`). Comments and string literals
//! are skipped; test modules count like any other code.
//!
//! One kind of edge is not an import between peers and is left out: a module naming one of its
//! own ancestors (`super::Host` in `host/panes.rs`, `crate::Outcome` in a binary). A folder's
//! `mod.rs` (or `lib.rs`, `main.rs`) is the folder's face: its children may use what it defines.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

mod tokens;
use tokens::{tokens, Tok};

/// Fails naming every import circle in the connector and the CLI.
#[test]
fn the_connector_and_the_cli_have_no_import_cycles() {
    let connector = Path::new(env!("CARGO_MANIFEST_DIR"));
    let roots = [
        connector.join("src/lib.rs"),
        connector.join("cli/src/lib.rs"),
        connector.join("cli/src/bin/relay/main.rs"),
        connector.join("cli/src/bin/relayctl/main.rs"),
    ];
    let tree = Tree::read(&roots);
    let mut problems = Vec::new();
    for dir in [connector.join("src"), connector.join("cli/src")] {
        for file in rust_files(&dir) {
            if !tree.files.contains(&file) {
                problems.push(format!(
                    "{} is in no crate's module tree (declare it with `mod`)",
                    file.display()
                ));
            }
        }
    }
    problems.extend(tree.cycles(connector.parent().unwrap_or(connector)));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// No `path` attribute on a module anywhere in the connector (its sources, tests and examples, the CLI).
#[test]
fn no_module_is_included_by_path() {
    let connector = Path::new(env!("CARGO_MANIFEST_DIR"));
    let needle = concat!("#[", "path");
    let found: Vec<String> = rust_files(connector)
        .into_iter()
        .filter(|file| read(file).contains(needle))
        .map(|file| file.display().to_string())
        .collect();
    assert!(
        found.is_empty(),
        "{needle} found in {found:?}: name the file after its module instead"
    );
}

/// The check can fail: a two-file circle and a circle between two sibling folders (whose files
/// form no circle) are both reported; a child using its folder's `mod.rs` is not.
#[test]
fn the_check_reports_file_and_folder_circles() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("lib.rs", "mod a;\nmod b;\nmod p;\nmod q;\n");
    write("a.rs", "use crate::b::X;\npub struct Y;\n");
    write(
        "b.rs",
        "// use crate::a::Y; in a comment is not an import\npub struct X;\n",
    );
    write(
        "p/mod.rs",
        "mod w;\nmod x;\npub use w::W;\nfn f() { x::g() }\n",
    );
    write("p/w.rs", "pub struct W;\n");
    write("p/x.rs", "use super::f;\npub fn g() { crate::q::y::h() }\n");
    write("q/mod.rs", "pub mod y;\nmod z;\n");
    write("q/y.rs", "pub fn h() {}\n");
    write("q/z.rs", "pub struct Z;\n");
    let tree = Tree::read(&[dir.path().join("lib.rs")]);
    assert_eq!(tree.cycles(dir.path()), Vec::<String>::new());

    write("b.rs", "use super::a::Y;\npub struct X;\n");
    write("q/z.rs", "use crate::p::W;\n");
    let tree = Tree::read(&[dir.path().join("lib.rs")]);
    let cycles = tree.cycles(dir.path());
    assert_eq!(cycles.len(), 2, "{cycles:#?}");
    assert!(cycles[0].contains("a.rs") && cycles[0].contains("b.rs"));
    assert!(cycles[0].starts_with("file cycle"), "{}", cycles[0]);
    assert!(cycles[1].starts_with("folder cycle") && cycles[1].contains("p → q → p"));
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "target") {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn read(file: &Path) -> String {
    std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// One module: a file, or an inline `mod x { .. }` inside one.
#[derive(Debug)]
struct Module {
    parent: Option<usize>,
    file: PathBuf,
    /// Where the files of its `mod x;` children are.
    child_dir: PathBuf,
    children: BTreeMap<String, usize>,
    /// Names brought in by `use` (re-exports included): name → path.
    uses: BTreeMap<String, Vec<String>>,
}

/// A path named in a module's code, and the line.
#[derive(Debug)]
struct Ref {
    module: usize,
    path: Vec<String>,
    line: usize,
}

/// The module trees of some crates and every path their code names.
#[derive(Debug, Default)]
struct Tree {
    modules: Vec<Module>,
    refs: Vec<Ref>,
    files: BTreeSet<PathBuf>,
}

/// A folder and the file that is its face (`mod.rs`, `x.rs` next to `x/`, a crate root).
type Folder = (PathBuf, PathBuf);

impl Tree {
    fn read(roots: &[PathBuf]) -> Tree {
        let mut tree = Tree::default();
        for root in roots {
            let dir = root.parent().unwrap().to_path_buf();
            tree.add_file(None, root.clone(), dir);
        }
        tree
    }

    fn add_module(&mut self, parent: Option<usize>, file: PathBuf, child_dir: PathBuf) -> usize {
        self.modules.push(Module {
            parent,
            file,
            child_dir,
            children: BTreeMap::new(),
            uses: BTreeMap::new(),
        });
        self.modules.len() - 1
    }

    /// Reads `file` as a module (and, through its `mod` declarations, its children).
    fn add_file(&mut self, parent: Option<usize>, file: PathBuf, child_dir: PathBuf) -> usize {
        self.files.insert(file.clone());
        let toks = tokens(&read(&file));
        let top = self.add_module(parent, file.clone(), child_dir);
        // The inline modules open at this point, with the brace depth each opened at.
        let mut stack = vec![(top, 0)];
        let mut depth = 0;
        let mut i = 0;
        let ident = |i: usize| match toks.get(i) {
            Some((Tok::Ident(s), _)) => Some(s.as_str()),
            _ => None,
        };
        let tok = |i: usize| toks.get(i).map(|t| &t.0);
        while i < toks.len() {
            let current = stack.last().unwrap().0;
            let line = toks[i].1;
            match (&toks[i].0, ident(i + 1)) {
                (Tok::Ident(kw), Some(name)) if kw == "mod" => {
                    let dir = self.modules[current].child_dir.join(name);
                    let child = if tok(i + 2) == Some(&Tok::Punct('{')) {
                        depth += 1;
                        let child = self.add_module(Some(current), file.clone(), dir);
                        stack.push((child, depth));
                        child
                    } else {
                        let flat = self.modules[current].child_dir.join(format!("{name}.rs"));
                        let path = if flat.is_file() {
                            flat
                        } else {
                            dir.join("mod.rs")
                        };
                        self.add_file(Some(current), path, dir)
                    };
                    self.modules[current]
                        .children
                        .insert(name.to_string(), child);
                    i += 3;
                    continue;
                }
                (Tok::Ident(kw), _) if kw == "use" => {
                    let mut items = Vec::new();
                    i += 1;
                    use_tree(&toks, &mut i, Vec::new(), &mut items);
                    for (path, name) in items {
                        if let Some(name) = name {
                            self.modules[current].uses.insert(name, path.clone());
                        }
                        self.refs.push(Ref {
                            module: current,
                            path,
                            line,
                        });
                    }
                    continue;
                }
                (Tok::Ident(first), _)
                    if tok(i + 1) == Some(&Tok::PathSep)
                        && (i == 0 || toks[i - 1].0 != Tok::PathSep) =>
                {
                    let mut path = vec![first.clone()];
                    i += 1;
                    while tok(i) == Some(&Tok::PathSep) {
                        match ident(i + 1) {
                            Some(seg) => path.push(seg.to_string()),
                            None => break,
                        }
                        i += 2;
                    }
                    self.refs.push(Ref {
                        module: current,
                        path,
                        line,
                    });
                    continue;
                }
                (Tok::Punct('{'), _) => depth += 1,
                (Tok::Punct('}'), _) => {
                    if stack.len() > 1 && stack.last().unwrap().1 == depth {
                        stack.pop();
                    }
                    depth -= 1;
                }
                _ => {}
            }
            i += 1;
        }
        top
    }

    /// The module `path` names from `module`, as deep as it goes through modules (an item's
    /// module for an item), following `use` re-exports; `None` for other crates.
    fn resolve(&self, module: usize, path: &[String], hops: usize) -> Option<usize> {
        if hops > 16 || path.is_empty() {
            return None;
        }
        let mut cur = module;
        let mut rest = path;
        match path[0].as_str() {
            "crate" | "$crate" => {
                while let Some(p) = self.modules[cur].parent {
                    cur = p;
                }
                rest = &path[1..];
            }
            "self" => rest = &path[1..],
            "super" => {
                while rest.first().is_some_and(|s| s == "super") {
                    cur = self.modules[cur].parent?;
                    rest = &rest[1..];
                }
            }
            first if self.modules[cur].children.contains_key(first) => {}
            first => {
                let via = self.modules[cur].uses.get(first)?;
                let whole: Vec<String> = via.iter().chain(&path[1..]).cloned().collect();
                return self.resolve(cur, &whole, hops + 1);
            }
        }
        for (k, seg) in rest.iter().enumerate() {
            if let Some(&child) = self.modules[cur].children.get(seg) {
                cur = child;
            } else if let Some(via) = self.modules[cur].uses.get(seg) {
                let whole: Vec<String> = via.iter().chain(&rest[k + 1..]).cloned().collect();
                return self.resolve(cur, &whole, hops + 1).or(Some(cur));
            } else {
                break;
            }
        }
        Some(cur)
    }

    fn is_ancestor(&self, ancestor: usize, mut module: usize) -> bool {
        while let Some(p) = self.modules[module].parent {
            if p == ancestor {
                return true;
            }
            module = p;
        }
        false
    }

    /// File → file edges, each with one place that makes it.
    fn edges(&self) -> BTreeMap<PathBuf, BTreeMap<PathBuf, String>> {
        let mut edges: BTreeMap<PathBuf, BTreeMap<PathBuf, String>> = BTreeMap::new();
        for r in &self.refs {
            let Some(target) = self.resolve(r.module, &r.path, 0) else {
                continue;
            };
            let (from, to) = (&self.modules[r.module].file, &self.modules[target].file);
            if from == to || self.is_ancestor(target, r.module) {
                continue;
            }
            let why = format!("line {}: {}", r.line, r.path.join("::"));
            edges
                .entry(from.clone())
                .or_default()
                .entry(to.clone())
                .or_insert(why);
        }
        edges
    }

    /// Every folder with its face.
    fn folders(&self) -> BTreeSet<Folder> {
        let mut folders = BTreeSet::new();
        for m in &self.modules {
            let inline = m.parent.is_some_and(|p| self.modules[p].file == m.file);
            if !inline {
                folders.insert((m.child_dir.clone(), m.file.clone()));
            }
        }
        folders
    }

    /// One line per circle: between files, then between the entries of each folder.
    fn cycles(&self, base: &Path) -> Vec<String> {
        let show = |p: &Path| p.strip_prefix(base).unwrap_or(p).display().to_string();
        let edges = self.edges();
        let mut out = Vec::new();
        for cycle in find_cycles(&edges) {
            let hops: Vec<String> = cycle
                .windows(2)
                .map(|w| {
                    format!(
                        "{} → {} ({})",
                        show(&w[0]),
                        show(&w[1]),
                        edges[&w[0]][&w[1]]
                    )
                })
                .collect();
            out.push(format!("file cycle: {}", hops.join("; ")));
        }
        for (dir, face) in self.folders() {
            // The file or folder directly in `dir` that holds `file`.
            let entry = |file: &Path| -> Option<String> {
                let rel = file.strip_prefix(&dir).ok().filter(|_| file != face)?;
                let first = rel.components().next()?.as_os_str().to_string_lossy();
                Some(first.trim_end_matches(".rs").to_string())
            };
            let mut folder_edges: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
            for (from, tos) in &edges {
                for (to, why) in tos {
                    if let (Some(a), Some(b)) = (entry(from), entry(to)) {
                        if a != b {
                            let why = format!("{} → {} ({why})", show(from), show(to));
                            folder_edges.entry(a).or_default().entry(b).or_insert(why);
                        }
                    }
                }
            }
            for cycle in find_cycles(&folder_edges) {
                // A circle of plain files is one of the file cycles above.
                if !cycle.iter().any(|e| dir.join(e).is_dir()) {
                    continue;
                }
                let why: Vec<&str> = cycle
                    .windows(2)
                    .map(|w| folder_edges[&w[0]][&w[1]].as_str())
                    .collect();
                out.push(format!(
                    "folder cycle in {}: {} [{}]",
                    show(&dir),
                    cycle.join(" → "),
                    why.join("; ")
                ));
            }
        }
        out
    }
}

/// Parses a `use` tree from `i` (after `use`) to its end, collecting each imported path and the
/// name it binds (`None` for a glob).
fn use_tree(
    toks: &[(Tok, usize)],
    i: &mut usize,
    prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) {
    let mut path = prefix;
    loop {
        match toks.get(*i).map(|t| &t.0) {
            Some(Tok::Ident(s)) if s != "as" => {
                path.push(s.clone());
                *i += 1;
            }
            Some(Tok::PathSep) => *i += 1,
            Some(Tok::Punct('{')) => {
                *i += 1;
                while !matches!(toks.get(*i).map(|t| &t.0), Some(Tok::Punct('}')) | None) {
                    use_tree(toks, i, path.clone(), out);
                    if toks.get(*i).map(|t| &t.0) == Some(&Tok::Punct(',')) {
                        *i += 1;
                    }
                }
                *i += 1;
                break;
            }
            Some(Tok::Punct('*')) => {
                *i += 1;
                out.push((path, None));
                break;
            }
            _ => {
                if path.last().is_some_and(|s| s == "self") {
                    path.pop();
                }
                let mut name = path.last().cloned();
                if let Some((Tok::Ident(kw), _)) = toks.get(*i) {
                    if kw == "as" {
                        name = match toks.get(*i + 1) {
                            Some((Tok::Ident(alias), _)) if alias != "_" => Some(alias.clone()),
                            _ => None,
                        };
                        *i += 2;
                    }
                }
                if !path.is_empty() {
                    out.push((path, name));
                }
                break;
            }
        }
    }
    if toks.get(*i).map(|t| &t.0) == Some(&Tok::Punct(';')) {
        *i += 1;
    }
}

/// One circle (first node repeated at the end) per strongly connected group of `edges`.
fn find_cycles<N: Ord + Clone, W>(edges: &BTreeMap<N, BTreeMap<N, W>>) -> Vec<Vec<N>> {
    let next = |n: &N| edges.get(n).into_iter().flat_map(|m| m.keys());
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for start in edges.keys() {
        if seen.contains(start) {
            continue;
        }
        // Shortest way back to `start` (breadth first), if any.
        let mut from: BTreeMap<N, N> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start.clone()]);
        let mut found = false;
        while let Some(n) = queue.pop_front() {
            for m in next(&n) {
                if m == start {
                    from.insert(start.clone(), n.clone());
                    found = true;
                    break;
                }
                if !from.contains_key(m) {
                    from.insert(m.clone(), n.clone());
                    queue.push_back(m.clone());
                }
            }
            if found {
                break;
            }
        }
        if !found {
            continue;
        }
        let mut cycle = vec![start.clone()];
        let mut n = from[start].clone();
        while &n != start {
            cycle.push(n.clone());
            n = from[&n].clone();
        }
        cycle.push(start.clone());
        cycle.reverse();
        seen.extend(cycle.iter().cloned());
        out.push(cycle);
    }
    out
}
