//! The agent's layering (docs/ARCHITECTURE.md, "Layers"): every file under `agent/src` belongs to
//! the top-level module it sits in, and a module may import only from its own layer or the
//! layers below it. Also: no path attribute (`path = "..."` on a `mod`) anywhere in `agent/` (a
//! file that outgrows its place becomes a folder instead).
//!
//! The check reads the sources: every `crate::<top>` in code (comments are skipped), including
//! each name of a `crate::{a, b}` group, and `super::` chains that climb to the crate root.

use std::fs;
use std::path::{Path, PathBuf};

/// The agent's layers, top to bottom. `lib.rs` and `main.rs` sit above all of them; items of
/// `lib.rs` itself (such as `now_ms`) below all of them.
const ORDER: &[&str] = &[
    "bridge",
    "daemon",
    "upgrade",
    "state",
    "config",
    "pty",
    "output",
    "log",
    "lease",
    "lifecycle",
    "limits",
    "paths",
    "runtime",
    "pause",
    "fault",
    "sys",
];

/// The attribute that includes a file from elsewhere, spelled in halves so that searching the
/// repository for it finds nothing.
const PATH_ATTR: &str = concat!("#[", "path");

#[test]
fn agent_modules_import_only_from_their_own_layer_or_below() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    let sources: Vec<(String, String)> = files
        .iter()
        .map(|f| {
            let rel = f.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
            (rel, fs::read_to_string(f).unwrap())
        })
        .collect();
    let mut problems = unplaced_modules(&src);
    problems.extend(violations(&sources));
    assert!(
        problems.is_empty(),
        "layering broken (order, top to bottom: {}):\n{}",
        ORDER.join(" > "),
        problems.join("\n")
    );
}

#[test]
fn no_path_attributes_in_the_agent() {
    let agent = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "tests", "benches", "examples"] {
        rs_files(&agent.join(dir), &mut files);
    }
    let mut found = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.contains(PATH_ATTR) {
                let rel = file.strip_prefix(agent).unwrap().display();
                found.push(format!("agent/{rel}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "`{PATH_ATTR}]` attributes (make the file a module in a folder instead):\n{}",
        found.join("\n")
    );
}

/// The checker itself: an upward import is reported, in a plain path, a group or via `super`;
/// downward and same-layer ones are not.
#[test]
fn the_layer_check_reports_upward_imports_and_only_those() {
    let sources = vec![
        (
            "output/ring.rs".to_string(),
            "//! Docs may name [`crate::daemon`].\n\
             use crate::lease::Lease;\n\
             use crate::output::credit;\n\
             use crate::{limits,\n    pty::io};\n\
             fn f() { crate::state::State::open(); }\n"
                .to_string(),
        ),
        (
            "output/screen/model/tests.rs".to_string(),
            "use super::super::super::super::daemon::x;\nuse super::super::Model;\n".to_string(),
        ),
        (
            "daemon/mod.rs".to_string(),
            "use crate::lease::journal; use crate::now_ms;\n".to_string(),
        ),
    ];
    let found = violations(&sources);
    assert_eq!(
        found,
        [
            "agent/src/output/ring.rs:5: `output` imports `pty` (a higher layer)",
            "agent/src/output/ring.rs:6: `output` imports `state` (a higher layer)",
            "agent/src/output/screen/model/tests.rs:1: `output` imports `daemon` (a higher layer)",
        ]
    );
}

/// Every `.rs` file under `dir`, recursively.
fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rs_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Top-level modules of `src` that have no place in [`ORDER`], and places with no module.
fn unplaced_modules(src: &Path) -> Vec<String> {
    let mut tops = Vec::new();
    for entry in fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() || path.extension().is_some_and(|e| e == "rs") {
            tops.push(name);
        }
    }
    let mut problems = Vec::new();
    for top in &tops {
        if top != "lib" && top != "main" && !ORDER.contains(&top.as_str()) {
            problems.push(format!(
                "agent/src: module `{top}` is not in the layer order (add it to ORDER here and \
                 to docs/ARCHITECTURE.md)"
            ));
        }
    }
    for layer in ORDER {
        if !tops.iter().any(|t| t == layer) {
            problems.push(format!("agent/src: layer `{layer}` has no module"));
        }
    }
    problems
}

/// The module path of a file under `src` (`output/screen/mod.rs` → `[output, screen]`).
fn module_path(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_string)
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The layer index of a top-level name; `None` for the crate root's own items.
fn rank(top: &str) -> Option<usize> {
    ORDER.iter().position(|l| *l == top)
}

/// Every upward import in `sources` (`(path under src, text)`), as `file:line: edge`.
fn violations(sources: &[(String, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (rel, text) in sources {
        let module = module_path(rel);
        let Some(from) = module.first() else {
            continue; // lib.rs and main.rs sit above every layer.
        };
        let Some(from_rank) = rank(from) else {
            continue; // Reported by `unplaced_modules`.
        };
        for (line, target) in references(text, &module) {
            if let Some(to_rank) = rank(&target) {
                if to_rank < from_rank {
                    found.push(format!(
                        "agent/src/{rel}:{line}: `{from}` imports `{target}` (a higher layer)"
                    ));
                }
            }
        }
    }
    found
}

/// The top-level modules `text` (the file of module `module`) names, with their line numbers:
/// `crate::x`, each name of `crate::{x, y::z}`, and `super::…::x` chains that reach the root.
fn references(text: &str, module: &[String]) -> Vec<(usize, String)> {
    // Code only, with each byte's line number.
    let mut code = String::new();
    let mut lines = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        code.push_str(line);
        code.push('\n');
        lines.extend(std::iter::repeat_n(n + 1, line.len() + 1));
    }
    let bytes = code.as_bytes();
    let ident_at = |mut i: usize| {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let start = i;
        while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
            i += 1;
        }
        (code[start..i].to_string(), start, i)
    };
    let boundary =
        |i: usize| i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        if rest.starts_with(b"crate::") && boundary(i) {
            let after = i + "crate::".len();
            if bytes.get(after) == Some(&b'{') {
                // A group: the first name of each item at depth 1.
                let mut depth = 0;
                let mut j = after;
                let mut expect_name = true;
                while j < bytes.len() {
                    match bytes[j] {
                        b'{' => {
                            depth += 1;
                            if depth == 1 {
                                expect_name = true;
                            }
                        }
                        b'}' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        b',' if depth == 1 => expect_name = true,
                        c if depth == 1 && expect_name && !c.is_ascii_whitespace() => {
                            let (name, start, end) = ident_at(j);
                            if !name.is_empty() && name != "self" {
                                out.push((lines[start], name));
                            }
                            expect_name = false;
                            j = end.max(j + 1);
                            continue;
                        }
                        _ => {}
                    }
                    j += 1;
                }
                i = j;
                continue;
            }
            let (name, start, end) = ident_at(after);
            if !name.is_empty() {
                out.push((lines[start], name));
            }
            i = end.max(after);
            continue;
        }
        if rest.starts_with(b"super::") && boundary(i) {
            let mut ups = 0;
            let mut j = i;
            while bytes[j..].starts_with(b"super::") {
                ups += 1;
                j += "super::".len();
            }
            if ups >= module.len() {
                let (name, start, end) = ident_at(j);
                if !name.is_empty() {
                    out.push((lines[start], name));
                }
                j = end.max(j);
            }
            i = j;
            continue;
        }
        i += 1;
    }
    out
}
