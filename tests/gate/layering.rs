//! The workspace's source has no import circle between files, and `src/`
//! (and every other tree `docs/architecture.md` draws) imports only
//! downward through its declared layers.
//!
//! The layers are declared in `docs/architecture.md`, in fenced blocks with
//! the info string `layers`: a `root: <folder>` line, then one line per layer
//! from the top down, each naming folders or file stems under the root. The
//! test reads every `.rs` file under `src/` and `crates/*/src/`, follows the
//! `mod` declarations from each crate root to know which module each file
//! is, and resolves the crate-internal paths each file names (`use
//! crate::…`, `crate::…` in code, `super::…`, `self::…`, `use` groups) to the
//! files that define them. A `mod x;` line is not an arrow: a parent that
//! declares a child does not use it.
//!
//! Test code is left out: a `#[cfg(test)]` module, inline or in a file of
//! its own, is compiled only into the test binary and may reach into
//! whatever layer builds its cases (a tokenizer test renders through the
//! inventory's key normalization, an engine test reads the store it checks),
//! so its paths are arrows of neither the circle nor the layer check. The
//! structure held here is the one the shipped code has.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// One source file, by its path from the workspace root (`/`-separated).
#[derive(Debug, Clone)]
struct SourceFile {
    path: String,
    text: String,
}

/// `from` names something `to` defines, first on line `line` of `from`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Arrow {
    from: usize,
    to: usize,
    line: usize,
}

/// What the workspace's files import from each other.
struct Graph {
    files: Vec<SourceFile>,
    arrows: Vec<Arrow>,
    /// Files declared as `#[cfg(test)] mod x;` (test code in a file of its
    /// own), whose paths are left out.
    test_modules: BTreeSet<usize>,
}

// ---------------------------------------------------------------- lexing

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    Str(String),
    /// `::`
    PathSep,
    Punct(char),
}

/// The tokens of a Rust file that matter for paths and modules, each with
/// its line: comments, lifetimes, char literals and numbers' meaning are
/// dropped; a string literal is kept (`#[path = "x.rs"]`) but its contents
/// never read as code.
fn lex(text: &str) -> Vec<(Tok, usize)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line = 1;
    let count_lines = |from: usize, to: usize| b[from..to].iter().filter(|&&c| c == b'\n').count();
    while i < b.len() {
        let c = b[i];
        match c {
            b'\n' => {
                line += 1;
                i += 1;
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let start = i;
                let mut depth = 0usize;
                while i < b.len() {
                    if b[i..].starts_with(b"/*") {
                        depth += 1;
                        i += 2;
                    } else if b[i..].starts_with(b"*/") {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
                line += count_lines(start, i.min(b.len()));
            }
            b'"' => {
                let start = i;
                let (value, end) = quoted(b, i + 1);
                out.push((Tok::Str(value), line));
                i = end;
                line += count_lines(start, i);
            }
            b'r' | b'b' | b'c' if raw_or_byte_string(b, i).is_some() => {
                let start = i;
                let (value, end) = raw_or_byte_string(b, i).unwrap_or_default();
                out.push((Tok::Str(value), line));
                i = end;
                line += count_lines(start, i);
            }
            b'\'' => i = char_or_lifetime_end(text, i),
            _ if c == b'_' || c.is_ascii_alphanumeric() || c >= 0x80 => {
                let start = i;
                if b[i..].starts_with(b"r#") {
                    i += 2;
                }
                let word_start = i;
                while i < b.len() && (b[i] == b'_' || b[i].is_ascii_alphanumeric() || b[i] >= 0x80)
                {
                    i += 1;
                }
                if i == word_start {
                    i = start + 1;
                    continue;
                }
                out.push((Tok::Ident(text[word_start..i].to_owned()), line));
            }
            b':' if b.get(i + 1) == Some(&b':') => {
                out.push((Tok::PathSep, line));
                i += 2;
            }
            _ if c.is_ascii_whitespace() => i += 1,
            _ => {
                out.push((Tok::Punct(c as char), line));
                i += 1;
            }
        }
    }
    out
}

/// A `"…"` body from `i` (just past the quote): its text and the index past
/// the closing quote.
fn quoted(b: &[u8], mut i: usize) -> (String, usize) {
    let start = i;
    while i < b.len() && b[i] != b'"' {
        i += if b[i] == b'\\' { 2 } else { 1 };
    }
    let end = i.min(b.len());
    (
        String::from_utf8_lossy(&b[start..end]).into_owned(),
        (i + 1).min(b.len()),
    )
}

/// `r"…"`, `r#"…"#`, `b"…"`, `br"…"`, `c"…"` starting at `i`, if one does.
fn raw_or_byte_string(b: &[u8], i: usize) -> Option<(String, usize)> {
    let prefix_end = match (b.get(i), b.get(i + 1)) {
        (Some(b'b' | b'c'), Some(b'r')) => i + 2,
        (Some(b'b' | b'c'), Some(b'"')) => return Some(quoted(b, i + 2)),
        (Some(b'r'), _) => i + 1,
        _ => return None,
    };
    // Not part of an identifier that merely starts with these letters.
    if i > 0 && (b[i - 1] == b'_' || b[i - 1].is_ascii_alphanumeric()) {
        return None;
    }
    let hashes = b[prefix_end..].iter().take_while(|&&c| c == b'#').count();
    if b.get(prefix_end + hashes) != Some(&b'"') {
        return None;
    }
    let body = prefix_end + hashes + 1;
    let mut close = vec![b'"'];
    close.extend(std::iter::repeat_n(b'#', hashes));
    let len = b[body..]
        .windows(close.len())
        .position(|w| w == close.as_slice())?;
    Some((
        String::from_utf8_lossy(&b[body..body + len]).into_owned(),
        body + len + close.len(),
    ))
}

/// Past a char literal (`'a'`, `'\n'`, `'ї'`) or a lifetime (`'a`) at `i`.
fn char_or_lifetime_end(text: &str, i: usize) -> usize {
    let rest = &text[i + 1..];
    let mut chars = rest.char_indices();
    match chars.next() {
        Some((_, '\\')) => {
            // An escape (`'\''`, `'\u{…}'`): past the escaped character, up to the quote.
            rest.get(2..)
                .and_then(|r| r.find('\''))
                .map_or(text.len(), |p| i + 1 + 2 + p + 1)
        }
        Some((_, _)) => match chars.next() {
            Some((p, '\'')) => i + 1 + p + 1,
            // A lifetime or label: past its name.
            _ => {
                let name = rest
                    .find(|c: char| !(c == '_' || c.is_alphanumeric()))
                    .unwrap_or(rest.len());
                i + 1 + name.max(1)
            }
        },
        None => text.len(),
    }
}

// ------------------------------------------------------- module structure

/// What one file says about modules and paths, from its tokens.
#[derive(Debug, Default)]
struct Parsed {
    /// `mod name;` declarations: the inline module path they sit in, the
    /// name, a `#[path]` value, and whether they are `#[cfg(test)]`.
    mod_decls: Vec<ModDecl>,
    /// Inline modules (`mod name { … }`), by their path inside the file.
    inline_mods: Vec<Vec<String>>,
    /// Paths starting with `crate`, `super` or `self`, each with the inline
    /// module path it is written in and its line (none from test code).
    paths: Vec<(Vec<String>, Vec<String>, usize)>,
}

#[derive(Debug, Clone)]
struct ModDecl {
    inline: Vec<String>,
    name: String,
    path_attr: Option<String>,
    cfg_test: bool,
}

fn ident(tok: Option<&(Tok, usize)>) -> Option<&str> {
    match tok {
        Some((Tok::Ident(s), _)) => Some(s),
        _ => None,
    }
}

fn parse(text: &str) -> Parsed {
    let toks = lex(text);
    let mut parsed = Parsed::default();
    // Open braces: `Some(name)` for an inline module's body, and whether
    // it is test code (`#[cfg(test)]` on it or on a module around it).
    let mut scopes: Vec<(Option<String>, bool)> = Vec::new();
    let inline = |scopes: &[(Option<String>, bool)]| -> Vec<String> {
        scopes.iter().filter_map(|s| s.0.clone()).collect()
    };
    let in_test = |scopes: &[(Option<String>, bool)]| scopes.last().is_some_and(|s| s.1);
    let is_cfg_test = |attrs: &[Vec<Tok>]| {
        attrs.iter().any(|a| {
            matches!(a.as_slice(), [Tok::Ident(c), Tok::Punct('('), Tok::Ident(t), Tok::Punct(')')] if c == "cfg" && t == "test")
        })
    };
    // Attributes since the last item boundary.
    let mut attrs: Vec<Vec<Tok>> = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        match &toks[i].0 {
            Tok::Punct('#') => {
                let mut j = i + 1;
                if matches!(toks.get(j), Some((Tok::Punct('!'), _))) {
                    j += 1;
                }
                if matches!(toks.get(j), Some((Tok::Punct('['), _))) {
                    let mut depth = 0;
                    let start = j + 1;
                    while j < toks.len() {
                        match toks[j].0 {
                            Tok::Punct('[') => depth += 1,
                            Tok::Punct(']') => {
                                depth -= 1;
                                if depth == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        j += 1;
                    }
                    attrs.push(
                        toks[start..j.min(toks.len())]
                            .iter()
                            .map(|t| t.0.clone())
                            .collect(),
                    );
                    i = j + 1;
                    continue;
                }
                i += 1;
            }
            Tok::Punct('{') => {
                scopes.push((None, in_test(&scopes)));
                attrs.clear();
                i += 1;
            }
            Tok::Punct('}') => {
                scopes.pop();
                attrs.clear();
                i += 1;
            }
            Tok::Punct(';') => {
                attrs.clear();
                i += 1;
            }
            Tok::Ident(word) if word == "mod" => {
                if let Some(name) = ident(toks.get(i + 1)) {
                    match toks.get(i + 2) {
                        Some((Tok::Punct(';'), _)) => {
                            let path_attr = attrs.iter().find_map(|a| match a.as_slice() {
                                [Tok::Ident(p), Tok::Punct('='), Tok::Str(v)] if p == "path" => {
                                    Some(v.clone())
                                }
                                _ => None,
                            });
                            let cfg_test = is_cfg_test(&attrs) || in_test(&scopes);
                            parsed.mod_decls.push(ModDecl {
                                inline: inline(&scopes),
                                name: name.to_owned(),
                                path_attr,
                                cfg_test,
                            });
                            attrs.clear();
                            i += 3;
                            continue;
                        }
                        Some((Tok::Punct('{'), _)) => {
                            scopes.push((
                                Some(name.to_owned()),
                                is_cfg_test(&attrs) || in_test(&scopes),
                            ));
                            parsed.inline_mods.push(inline(&scopes));
                            attrs.clear();
                            i += 3;
                            continue;
                        }
                        _ => {}
                    }
                }
                i += 1;
            }
            Tok::Ident(word) if word == "use" => {
                let line = toks[i].1;
                let mut j = i + 1;
                let mut prefixes = Vec::new();
                use_tree(&toks, &mut j, Vec::new(), &mut prefixes);
                let here = inline(&scopes);
                for path in prefixes {
                    if !in_test(&scopes)
                        && matches!(
                            path.first().map(String::as_str),
                            Some("crate" | "super" | "self")
                        )
                    {
                        parsed.paths.push((here.clone(), path, line));
                    }
                }
                attrs.clear();
                i = j;
            }
            Tok::Ident(word)
                if matches!(word.as_str(), "crate" | "super" | "self")
                    && matches!(toks.get(i + 1), Some((Tok::PathSep, _))) =>
            {
                let line = toks[i].1;
                let mut path = vec![word.clone()];
                let mut j = i + 1;
                while matches!(toks.get(j), Some((Tok::PathSep, _))) {
                    match ident(toks.get(j + 1)) {
                        Some(seg) => {
                            path.push(seg.to_owned());
                            j += 2;
                        }
                        None => break,
                    }
                }
                if !in_test(&scopes) {
                    parsed.paths.push((inline(&scopes), path, line));
                }
                i = j;
            }
            _ => i += 1,
        }
    }
    parsed
}

/// Reads one use tree at `*j` under `prefix`, pushing every full path it
/// names (a group's `self` names the prefix; a glob names the prefix too).
fn use_tree(
    toks: &[(Tok, usize)],
    j: &mut usize,
    mut prefix: Vec<String>,
    out: &mut Vec<Vec<String>>,
) {
    if matches!(toks.get(*j), Some((Tok::PathSep, _))) {
        *j += 1;
    }
    loop {
        match toks.get(*j) {
            Some((Tok::Ident(seg), _)) if seg == "self" && !prefix.is_empty() => {
                *j += 1;
                out.push(prefix.clone());
            }
            Some((Tok::Ident(seg), _)) if seg == "as" => {
                *j += 2;
            }
            Some((Tok::Ident(seg), _)) => {
                prefix.push(seg.clone());
                *j += 1;
                if matches!(toks.get(*j), Some((Tok::PathSep, _))) {
                    *j += 1;
                    continue;
                }
                out.push(prefix.clone());
            }
            Some((Tok::Punct('*'), _)) => {
                *j += 1;
                out.push(prefix.clone());
            }
            Some((Tok::Punct('{'), _)) => {
                *j += 1;
                loop {
                    use_tree(toks, j, prefix.clone(), out);
                    match toks.get(*j) {
                        Some((Tok::Punct(','), _)) => *j += 1,
                        Some((Tok::Punct('}'), _)) => {
                            *j += 1;
                            break;
                        }
                        None => return,
                        _ => *j += 1,
                    }
                    if matches!(toks.get(*j), Some((Tok::Punct('}'), _))) {
                        *j += 1;
                        break;
                    }
                }
            }
            _ => {}
        }
        break;
    }
    // `as name` after a leaf, and whatever ends the statement.
    while let Some((tok, _)) = toks.get(*j) {
        match tok {
            Tok::Ident(s) if s == "as" => *j += 2,
            Tok::Punct(';') => {
                *j += 1;
                return;
            }
            _ => return,
        }
    }
}

// ------------------------------------------------------------- the graph

/// A module: its crate root's file index and its path inside the crate.
type ModPath = (usize, Vec<String>);

fn parent_dir(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(d, _)| d)
}

fn stem(path: &str) -> &str {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.strip_suffix(".rs").unwrap_or(name)
}

fn join(dir: &str, rest: &str) -> String {
    let mut parts: Vec<&str> = dir.split('/').filter(|s| !s.is_empty()).collect();
    for part in rest.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

/// Whether a file is a crate root: `lib.rs`, `main.rs` or a binary under
/// `bin/`, directly in a crate's `src/`.
fn is_crate_root(path: &str) -> bool {
    let is_src = |dir: &str| dir == "src" || dir.ends_with("/src");
    let is_bin = |dir: &str| dir.ends_with("/bin") && is_src(parent_dir(dir));
    let dir = parent_dir(path);
    is_src(dir) && matches!(stem(path), "lib" | "main")
        || is_bin(dir)
        || is_bin(parent_dir(dir)) && stem(path) == "main"
}

impl Graph {
    fn build(files: Vec<SourceFile>) -> Graph {
        let index: BTreeMap<&str, usize> = files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.path.as_str(), i))
            .collect();
        let parsed: Vec<Parsed> = files.iter().map(|f| parse(&f.text)).collect();
        // Which module each file is, found from the crate roots down.
        let mut module_of: BTreeMap<usize, ModPath> = BTreeMap::new();
        let mut modules: BTreeMap<ModPath, usize> = BTreeMap::new();
        let mut test_modules = BTreeSet::new();
        let mut queue: Vec<(usize, ModPath)> = files
            .iter()
            .enumerate()
            .filter(|(_, f)| is_crate_root(&f.path))
            .map(|(i, _)| (i, (i, Vec::new())))
            .collect();
        while let Some((file, module)) = queue.pop() {
            if module_of.contains_key(&file) {
                continue;
            }
            module_of.insert(file, module.clone());
            modules.insert(module.clone(), file);
            let path = &files[file].path;
            let dir = parent_dir(path);
            let owns_dir = stem(path) == "mod" || is_crate_root(path);
            let child_dir = if owns_dir {
                dir.to_owned()
            } else {
                join(dir, stem(path))
            };
            for decl in &parsed[file].mod_decls {
                let inline_dir = join(&child_dir, &decl.inline.join("/"));
                let candidates = match &decl.path_attr {
                    Some(p) if decl.inline.is_empty() => vec![join(dir, p)],
                    Some(p) => vec![join(&inline_dir, p)],
                    None => vec![
                        join(&inline_dir, &format!("{}.rs", decl.name)),
                        join(&inline_dir, &format!("{}/mod.rs", decl.name)),
                    ],
                };
                if let Some(&child) = candidates.iter().find_map(|c| index.get(c.as_str())) {
                    let mut path = module.1.clone();
                    path.extend(decl.inline.iter().cloned());
                    path.push(decl.name.clone());
                    // A file declared by test code is test code too.
                    if decl.cfg_test || test_modules.contains(&file) {
                        test_modules.insert(child);
                    }
                    queue.push((child, (module.0, path)));
                }
            }
            // An inline module is part of the file it is written in.
            for inline in &parsed[file].inline_mods {
                let mut inner = module.1.clone();
                inner.extend(inline.iter().cloned());
                modules.entry((module.0, inner)).or_insert(file);
            }
        }
        let mut arrows = BTreeSet::new();
        for (&file, module) in &module_of {
            if test_modules.contains(&file) {
                continue;
            }
            for (inline, path, line) in &parsed[file].paths {
                let mut here = module.1.clone();
                here.extend(inline.iter().cloned());
                if let Some(to) = resolve(&modules, module.0, &here, path) {
                    if to != file {
                        arrows.insert(Arrow {
                            from: file,
                            to,
                            line: *line,
                        });
                    }
                }
            }
        }
        Graph {
            files,
            arrows: arrows.into_iter().collect(),
            test_modules,
        }
    }

    /// Every set of files that import each other in a loop (strongly
    /// connected, more than one file), each as sorted paths.
    fn circles(&self) -> Vec<Vec<String>> {
        let n = self.files.len();
        let mut next: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n];
        for a in &self.arrows {
            next[a.from].insert(a.to);
        }
        // Tarjan's algorithm, iteratively.
        let mut index = vec![usize::MAX; n];
        let mut low = vec![0; n];
        let mut on_stack = vec![false; n];
        let mut stack = Vec::new();
        let mut counter = 0;
        let mut found = Vec::new();
        for start in 0..n {
            if index[start] != usize::MAX {
                continue;
            }
            let mut work: Vec<(usize, Vec<usize>)> =
                vec![(start, next[start].iter().copied().collect())];
            index[start] = counter;
            low[start] = counter;
            counter += 1;
            stack.push(start);
            on_stack[start] = true;
            while let Some((v, pending)) = work.last_mut() {
                let v = *v;
                if let Some(w) = pending.pop() {
                    if index[w] == usize::MAX {
                        index[w] = counter;
                        low[w] = counter;
                        counter += 1;
                        stack.push(w);
                        on_stack[w] = true;
                        work.push((w, next[w].iter().copied().collect()));
                    } else if on_stack[w] {
                        low[v] = low[v].min(index[w]);
                    }
                    continue;
                }
                work.pop();
                if let Some((parent, _)) = work.last() {
                    low[*parent] = low[*parent].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut component = Vec::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        component.push(self.files[w].path.clone());
                        if w == v {
                            break;
                        }
                    }
                    if component.len() > 1 {
                        component.sort();
                        found.push(component);
                    }
                }
            }
        }
        found.sort();
        found
    }

    /// The arrows between the files of `circle`, as `a.rs:LINE -> b.rs`.
    fn describe(&self, circle: &[String]) -> Vec<String> {
        self.arrows
            .iter()
            .filter(|a| {
                circle.contains(&self.files[a.from].path) && circle.contains(&self.files[a.to].path)
            })
            .map(|a| {
                format!(
                    "{}:{} -> {}",
                    self.files[a.from].path, a.line, self.files[a.to].path
                )
            })
            .collect()
    }
}

/// The file that defines what `path` (written in module `here` of crate
/// `krate`) names: the deepest module the path walks through.
fn resolve(
    modules: &BTreeMap<ModPath, usize>,
    krate: usize,
    here: &[String],
    path: &[String],
) -> Option<usize> {
    let mut segments = path.iter().peekable();
    let mut current: Vec<String> = match segments.peek().map(|s| s.as_str()) {
        Some("crate") => {
            segments.next();
            Vec::new()
        }
        Some("self") => {
            segments.next();
            here.to_vec()
        }
        Some("super") => {
            let mut up = here.to_vec();
            while segments.peek().map(|s| s.as_str()) == Some("super") {
                segments.next();
                up.pop()?;
            }
            up
        }
        _ => return None,
    };
    for segment in segments {
        let mut deeper = current.clone();
        deeper.push(segment.clone());
        if !modules.contains_key(&(krate, deeper.clone())) {
            break;
        }
        current = deeper;
    }
    modules.get(&(krate, current)).copied()
}

// ---------------------------------------------------------------- layers

/// One `layers` block: a root folder and its layers, top first.
#[derive(Debug)]
struct Layers {
    root: String,
    layers: Vec<Vec<String>>,
}

fn parse_layers(markdown: &str) -> Result<Vec<Layers>, String> {
    let mut blocks = Vec::new();
    let mut lines = markdown.lines().enumerate();
    while let Some((_, line)) = lines.next() {
        if line.trim_start().strip_prefix("```").map(str::trim) != Some("layers") {
            continue;
        }
        let mut body = Vec::new();
        for (number, line) in lines.by_ref() {
            if line.trim_start().starts_with("```") {
                break;
            }
            if !line.trim().is_empty() {
                body.push((number + 1, line.trim()));
            }
        }
        let Some(((number, first), rest)) = body.split_first() else {
            return Err("an empty `layers` block".into());
        };
        let root = first
            .strip_prefix("root:")
            .ok_or_else(|| format!("docs/architecture.md:{number}: a `layers` block starts with `root: <folder>`, not `{first}`"))?
            .trim()
            .trim_end_matches('/')
            .to_owned();
        let layers = rest
            .iter()
            .map(|(_, l)| {
                l.split_whitespace()
                    .map(|e| e.trim_end_matches('/').to_owned())
                    .collect()
            })
            .collect();
        blocks.push(Layers { root, layers });
    }
    Ok(blocks)
}

impl Layers {
    /// The layer (0 = top) of each entry `rel` (a path below the root) matches.
    fn matches(&self, rel: &str) -> Vec<(usize, &str)> {
        let mut found = Vec::new();
        for (layer, entries) in self.layers.iter().enumerate() {
            for entry in entries {
                let file = rel.strip_suffix(".rs").unwrap_or(rel);
                if file == entry || rel.starts_with(&format!("{entry}/")) {
                    found.push((layer, entry.as_str()));
                }
            }
        }
        found
    }

    fn name(&self, layer: usize) -> String {
        format!("`{}`", self.layers[layer].join(" "))
    }
}

/// Every way the graph breaks the blocks' layering: files no entry (or
/// several) holds, entries that hold no file, and imports of a higher layer.
fn layer_problems(graph: &Graph, blocks: &[Layers]) -> Vec<String> {
    let mut problems = Vec::new();
    for block in blocks {
        let prefix = format!("{}/", block.root);
        let mut layer_of = BTreeMap::new();
        let mut used = BTreeSet::new();
        for (i, file) in graph.files.iter().enumerate() {
            let Some(rel) = file.path.strip_prefix(&prefix) else {
                continue;
            };
            match block.matches(rel).as_slice() {
                [] => problems.push(format!(
                    "{}: in no layer of `root: {}` in docs/architecture.md; add it (or its folder) to the layer it belongs to",
                    file.path, block.root
                )),
                [(layer, entry)] => {
                    layer_of.insert(i, *layer);
                    used.insert(entry.to_string());
                }
                several => problems.push(format!(
                    "{}: in several entries of `root: {}` ({}); give each file one",
                    file.path,
                    block.root,
                    several.iter().map(|(_, e)| format!("`{e}`")).collect::<Vec<_>>().join(", ")
                )),
            }
        }
        for entry in block.layers.iter().flatten() {
            if !used.contains(entry) {
                problems.push(format!(
                    "`{entry}` in the layers of `root: {}` names no file under {}",
                    block.root, block.root
                ));
            }
        }
        for arrow in &graph.arrows {
            let (Some(&from), Some(&to)) = (layer_of.get(&arrow.from), layer_of.get(&arrow.to))
            else {
                continue;
            };
            if to < from {
                problems.push(format!(
                    "{}:{}: imports {}: layer {} may not use the higher layer {}",
                    graph.files[arrow.from].path,
                    arrow.line,
                    graph.files[arrow.to].path,
                    block.name(from),
                    block.name(to)
                ));
            }
        }
    }
    problems
}

// ------------------------------------------------------- the workspace

fn read_tree(root: &Path, dir: &Path, out: &mut Vec<SourceFile>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            read_tree(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root).unwrap_or(&path);
            out.push(SourceFile {
                path: rel.to_string_lossy().replace('\\', "/"),
                text: std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("read {}: {e}", path.display())),
            });
        }
    }
}

fn workspace() -> (std::path::PathBuf, Graph) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf();
    let mut files = Vec::new();
    read_tree(&root, &root.join("src"), &mut files);
    let mut crates: Vec<_> = std::fs::read_dir(root.join("crates"))
        .expect("crates/")
        .flatten()
        .map(|e| e.path().join("src"))
        .collect();
    crates.sort();
    for src in crates {
        read_tree(&root, &src, &mut files);
    }
    (root, Graph::build(files))
}

#[test]
fn no_file_of_the_workspace_imports_itself_through_others() {
    let (_, graph) = workspace();
    assert!(
        graph.files.len() > 100,
        "read only {} files",
        graph.files.len()
    );
    assert!(
        graph.arrows.len() > 100,
        "found only {} arrows",
        graph.arrows.len()
    );
    let circles = graph.circles();
    let mut text = String::new();
    for circle in &circles {
        text.push_str(&format!(
            "\ncircle of {} files: {}\n",
            circle.len(),
            circle.join(", ")
        ));
        for arrow in graph.describe(circle) {
            text.push_str(&format!("  {arrow}\n"));
        }
    }
    assert!(circles.is_empty(), "import circles between files:{text}");
}

#[test]
fn every_layered_tree_imports_only_downward() {
    let (root, graph) = workspace();
    let doc =
        std::fs::read_to_string(root.join("docs/architecture.md")).expect("docs/architecture.md");
    let blocks = parse_layers(&doc).unwrap_or_else(|e| panic!("{e}"));
    for held in ["src", "crates/dwengine/src/store"] {
        assert!(
            blocks.iter().any(|b| b.root == held),
            "docs/architecture.md declares no `layers` block with `root: {held}`"
        );
    }
    let problems = layer_problems(&graph, &blocks);
    assert!(
        problems.is_empty(),
        "the layers in docs/architecture.md do not hold:\n{}",
        problems.join("\n")
    );
}

// ------------------------------------------- the checker on small examples

fn graph_of(files: &[(&str, &str)]) -> Graph {
    Graph::build(
        files
            .iter()
            .map(|(path, text)| SourceFile {
                path: path.to_string(),
                text: text.to_string(),
            })
            .collect(),
    )
}

fn arrows_of(graph: &Graph) -> Vec<(String, usize, String)> {
    graph
        .arrows
        .iter()
        .map(|a| {
            (
                graph.files[a.from].path.clone(),
                a.line,
                graph.files[a.to].path.clone(),
            )
        })
        .collect()
}

#[test]
fn paths_resolve_to_the_files_that_define_them() {
    let graph = graph_of(&[
        ("src/lib.rs", "pub mod a;\npub mod b;\n#[cfg(test)]\n#[path = \"t_tests.rs\"]\nmod t;\n"),
        ("src/a/mod.rs", "//! use crate::b; (a comment)\npub mod x;\npub mod y;\nmod inner { use super::super::b::Z; }\n"),
        (
            "src/a/x.rs",
            "use super::y::{self, Y as W};\nfn f() { let s = \"crate::b::Q\"; crate::b::run(); }\n",
        ),
        (
            "src/a/y.rs",
            "pub struct Y;\nuse crate::{a::x, b::{self}};\n#[cfg(test)]\nmod tests { use crate::b::Z; fn f() { crate::a::x::f() } }\n",
        ),
        ("src/b.rs", "pub fn run() {}\npub struct Z;\nmod c;\n"),
        ("src/b/c.rs", "use self::inner::K;\nmod inner {}\nuse super::run;\nfn g(x: &'static str) -> char { 'a' }\n"),
        ("src/t_tests.rs", "use crate::a::x::*;\n"),
        ("src/orphan.rs", "use crate::b;\n"),
    ]);
    assert_eq!(
        arrows_of(&graph),
        [
            ("src/a/mod.rs".into(), 4, "src/b.rs".into()),
            ("src/a/x.rs".into(), 1, "src/a/y.rs".into()),
            ("src/a/x.rs".into(), 2, "src/b.rs".into()),
            ("src/a/y.rs".into(), 2, "src/a/x.rs".into()),
            ("src/a/y.rs".into(), 2, "src/b.rs".into()),
            ("src/b/c.rs".into(), 3, "src/b.rs".into()),
        ],
        "nothing from test code (y.rs's inline tests, t_tests.rs)"
    );
    assert_eq!(
        graph.circles(),
        [vec!["src/a/x.rs".to_owned(), "src/a/y.rs".to_owned()]]
    );
    let tests: Vec<&str> = graph
        .test_modules
        .iter()
        .map(|&i| graph.files[i].path.as_str())
        .collect();
    assert_eq!(tests, ["src/t_tests.rs"]);
}

#[test]
fn a_circle_through_three_files_is_named_with_its_arrows() {
    let graph = graph_of(&[
        ("crates/k/src/lib.rs", "mod p;\nmod q;\nmod r;\nmod s;\n"),
        ("crates/k/src/p.rs", "use crate::q::Q;\n"),
        (
            "crates/k/src/q.rs",
            "pub struct Q;\nfn f() { super::r::go() }\n",
        ),
        ("crates/k/src/r.rs", "pub fn go() {}\nuse crate::p;\n"),
        ("crates/k/src/s.rs", "use crate::p;\n"),
    ]);
    assert_eq!(
        graph.circles(),
        [vec![
            "crates/k/src/p.rs".to_owned(),
            "crates/k/src/q.rs".to_owned(),
            "crates/k/src/r.rs".to_owned()
        ]]
    );
    let circle = &graph.circles()[0];
    assert_eq!(
        graph.describe(circle),
        [
            "crates/k/src/p.rs:1 -> crates/k/src/q.rs",
            "crates/k/src/q.rs:2 -> crates/k/src/r.rs",
            "crates/k/src/r.rs:2 -> crates/k/src/p.rs",
        ]
    );
    // The same files in two crates are two different modules.
    let apart = graph_of(&[
        ("src/lib.rs", "mod p;\n"),
        ("src/main.rs", "mod q;\n"),
        ("src/p.rs", "use crate::q;\n"),
        ("src/q.rs", "use crate::p;\n"),
    ]);
    assert!(apart.circles().is_empty(), "{:?}", arrows_of(&apart));
}

const DOC: &str = "\
# Architecture

```layers
root: src
main lib
cli
rules report
policy
```

```rust
not: a layers block
```

```layers
root: crates/k/src/store
top
bottom
```
";

#[test]
fn layers_blocks_are_read_with_their_roots() {
    let blocks = parse_layers(DOC).unwrap();
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0].root, "src");
    assert_eq!(
        blocks[0].layers,
        [
            vec!["main", "lib"],
            vec!["cli"],
            vec!["rules", "report"],
            vec!["policy"]
        ]
    );
    assert_eq!(blocks[1].root, "crates/k/src/store");
    assert_eq!(blocks[1].layers, [vec!["top"], vec!["bottom"]]);
    assert!(parse_layers("```layers\nmain\n```\n").is_err());
}

#[test]
fn an_upward_import_names_the_file_its_line_and_both_layers() {
    let graph = graph_of(&[
        (
            "src/lib.rs",
            "pub mod cli;\npub mod rules;\npub mod report;\npub mod policy;\n",
        ),
        ("src/main.rs", "fn main() {}\n"),
        ("src/cli.rs", "use crate::report::write;\n"),
        (
            "src/rules/mod.rs",
            "pub mod one;\nuse crate::report::Format;\n",
        ),
        (
            "src/rules/one.rs",
            "use super::Context;\nuse crate::policy::Policy;\n",
        ),
        ("src/report.rs", "pub fn write() {}\n"),
        ("src/policy.rs", "\n\nfn load() { crate::cli::run() }\n"),
    ]);
    let blocks = parse_layers(DOC).unwrap();
    let problems = layer_problems(&graph, &blocks[..1]);
    assert_eq!(
        problems,
        ["src/policy.rs:3: imports src/cli.rs: layer `policy` may not use the higher layer `cli`"],
        "imports within a layer (rules -> report) and downward are allowed"
    );
}

#[test]
fn a_file_in_no_layer_and_an_entry_with_no_file_are_named() {
    let graph = graph_of(&[
        ("src/lib.rs", "pub mod cli;\npub mod extra;\n"),
        ("src/main.rs", "fn main() {}\n"),
        ("src/cli.rs", "\n"),
        ("src/rules.rs", "\n"),
        ("src/report/mod.rs", "\n"),
        ("src/extra.rs", "\n"),
        ("crates/k/src/lib.rs", "\n"),
    ]);
    let blocks = parse_layers(DOC).unwrap();
    let problems = layer_problems(&graph, &blocks[..1]);
    assert_eq!(
        problems,
        [
            "src/extra.rs: in no layer of `root: src` in docs/architecture.md; add it (or its folder) to the layer it belongs to",
            "`policy` in the layers of `root: src` names no file under src",
        ]
    );
}

#[test]
fn test_code_may_reach_anywhere() {
    let graph = graph_of(&[
        ("src/lib.rs", "pub mod cli;\npub mod policy;\n"),
        ("src/main.rs", "fn main() {}\n"),
        ("src/cli.rs", "use crate::policy::load;\n"),
        (
            "src/policy.rs",
            "pub fn load() {}\n#[cfg(test)]\nmod policy_tests;\n",
        ),
        ("src/policy/policy_tests.rs", "use crate::cli;\n"),
        ("src/rules.rs", "\n"),
        ("src/report.rs", "\n"),
    ]);
    let blocks = parse_layers(DOC).unwrap();
    let problems = layer_problems(&graph, &blocks[..1]);
    assert!(problems.is_empty(), "{problems:?}");
    assert!(graph.circles().is_empty());
    let inline = graph_of(&[
        ("src/lib.rs", "pub mod p;\npub mod q;\n"),
        ("src/p.rs", "use crate::q::Q;\n"),
        ("src/q.rs", "pub struct Q;\n#[cfg(test)]\nmod tests {\n    mod deeper { fn f() { crate::p::g() } }\n}\nfn h() { crate::p::g() }\n"),
    ]);
    assert_eq!(
        arrows_of(&inline),
        [
            ("src/p.rs".into(), 1, "src/q.rs".into()),
            ("src/q.rs".into(), 6, "src/p.rs".into()),
        ],
        "code after a test module counts again"
    );
}

#[test]
fn strings_comments_and_lifetimes_hide_no_path_and_invent_none() {
    let toks = lex("a /* b /* nested */ crate::x */ r#\"crate::y\"# 'c' 'static b\"z\" crate::w\n// self::q\n super");
    let idents: Vec<&Tok> = toks.iter().map(|(t, _)| t).collect();
    assert_eq!(
        idents,
        [
            &Tok::Ident("a".into()),
            &Tok::Str("crate::y".into()),
            &Tok::Str("z".into()),
            &Tok::Ident("crate".into()),
            &Tok::PathSep,
            &Tok::Ident("w".into()),
            &Tok::Ident("super".into()),
        ]
    );
    assert_eq!(toks.last().map(|t| t.1), Some(3));
}
