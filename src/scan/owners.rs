//! Module paths from the file layout, for resolving policy `owner`s.
//!
//! A Rust owner such as `dwengine::polling::LongPollSignalStore` names an item
//! by the path a user would `use`. The crate name comes from the nearest
//! `Cargo.toml` and the module path from where the file sits under `src/`.

use foldhash::HashMap;
use std::path::Path;
use std::sync::Mutex;

/// Computes module paths, remembering each directory's crate name (keyed
/// by the directory relative to the root: every Rust file asks, and
/// joining and hashing whole paths cost more than reading the tokens of a
/// small file).
#[derive(Default)]
pub struct ModulePaths {
    crate_names: Mutex<HashMap<String, Option<String>>>,
}

impl ModulePaths {
    /// The module path of the Rust file at `rel` (relative to `root`).
    pub fn module_path(&self, root: &Path, rel: &str) -> Vec<String> {
        let parts: Vec<&str> = rel.split('/').collect();
        // Find the innermost directory holding a Cargo.toml with a package name.
        for depth in (0..parts.len()).rev() {
            // The directory's part of `rel`: its first `depth` components.
            let dir_len = parts[..depth].iter().map(|p| p.len() + 1).sum::<usize>();
            let dir = &rel[..dir_len.saturating_sub(1)];
            if let Some(name) = self.crate_name(root, dir) {
                return module_path_in_crate(&name, &parts[depth..]);
            }
        }
        let mut path: Vec<String> = parts.iter().map(|s| s.to_string()).collect();
        if let Some(last) = path.last_mut() {
            *last = file_stem(last).to_owned();
        }
        path
    }

    /// The crate name declared in `root/dir/Cargo.toml`, if any.
    fn crate_name(&self, root: &Path, dir: &str) -> Option<String> {
        let mut cache = self.crate_names.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(name) = cache.get(dir) {
            return name.clone();
        }
        let name = read_crate_name(&root.join(dir).join("Cargo.toml"));
        cache.insert(dir.to_owned(), name.clone());
        name
    }
}

fn read_crate_name(manifest: &Path) -> Option<String> {
    let text = std::fs::read_to_string(manifest).ok()?;
    let doc: toml::Table = toml::from_str(&text).ok()?;
    let lib_name = doc
        .get("lib")
        .and_then(|lib| lib.get("name"))
        .and_then(|n| n.as_str());
    let package_name = doc
        .get("package")
        .and_then(|p| p.get("name"))
        .and_then(|n| n.as_str());
    lib_name.or(package_name).map(|n| n.replace('-', "_"))
}

fn file_stem(name: &str) -> &str {
    name.rsplit_once('.').map_or(name, |(stem, _)| stem)
}

/// `parts` is the file path below the crate directory.
fn module_path_in_crate(crate_name: &str, parts: &[&str]) -> Vec<String> {
    let mut path = vec![crate_name.to_owned()];
    match parts {
        ["src", "lib.rs"] | ["src", "main.rs"] => {}
        ["src", "bin", file] => return vec![file_stem(file).to_owned()],
        ["src", dirs @ .., file] => {
            path.extend(dirs.iter().map(|d| d.to_string()));
            if *file != "mod.rs" {
                path.push(file_stem(file).to_owned());
            }
        }
        [_, .., file] => return vec![file_stem(file).to_owned()],
        _ => {}
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_paths_follow_the_cargo_layout() {
        let dir = tempfile::tempdir().unwrap();
        let krate = dir.path().join("crates/dw-engine");
        std::fs::create_dir_all(krate.join("src/polling")).unwrap();
        std::fs::write(
            krate.join("Cargo.toml"),
            "[package]\nname = \"dw-engine\"\n",
        )
        .unwrap();
        let paths = ModulePaths::default();
        let of = |rel: &str| paths.module_path(dir.path(), rel).join("::");
        assert_eq!(of("crates/dw-engine/src/lib.rs"), "dw_engine");
        assert_eq!(of("crates/dw-engine/src/polling.rs"), "dw_engine::polling");
        assert_eq!(
            of("crates/dw-engine/src/polling/mod.rs"),
            "dw_engine::polling"
        );
        assert_eq!(
            of("crates/dw-engine/src/polling/store.rs"),
            "dw_engine::polling::store"
        );
        assert_eq!(of("crates/dw-engine/src/bin/server.rs"), "server");
        assert_eq!(of("crates/dw-engine/tests/it.rs"), "it");
        assert_eq!(of("scripts/tool.rs"), "scripts::tool");
    }
}
