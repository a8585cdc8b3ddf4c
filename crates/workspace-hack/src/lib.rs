//! No code: this crate exists for its `Cargo.toml`, which asks for the
//! features the whole workspace's build turns on, so that building one
//! binary package (`cargo run -p dwengine --bin dwserver`) after `cargo test
//! --workspace` reuses that build instead of compiling its dependencies
//! again with fewer features. See the comment in `Cargo.toml`.

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;
    use std::process::Command;

    /// Each package `cargo tree` lists (`name vX.Y.Z`) with its features.
    fn features(args: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
        let out = Command::new(cargo)
            .args(["tree", "--offline", "--locked", "--prefix", "none"])
            .args(["--format", "{p}|{f}", "--manifest-path"])
            .arg(&manifest)
            .args(args)
            .output()
            .expect("run cargo tree");
        assert!(out.status.success(), "{out:?}");
        let mut packages: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            let Some((package, features)) = line.split_once('|') else {
                continue;
            };
            // `name vX.Y.Z (path) (*)`: the name and version identify it.
            let id: Vec<&str> = package.split_whitespace().take(2).collect();
            let features = features.trim_end_matches(" (*)");
            packages.entry(id.join(" ")).or_default().extend(
                features
                    .split(',')
                    .filter(|f| !f.is_empty())
                    .map(str::to_owned),
            );
        }
        packages
    }

    /// Crates built for the host (proc macros and what they use) get their
    /// features apart from the target's; `cargo tree` shows both as one
    /// package, so these are left to the build itself (running `cargo build
    /// -p dwengine --bin dwserver` after `cargo test --workspace --no-run`
    /// compiles nothing).
    const HOST_SIDE: [&str; 4] = ["proc-macro2", "quote", "syn", "unicode-ident"];

    #[test]
    fn each_binary_package_resolves_the_workspace_test_builds_features() {
        let workspace = features(&["--workspace", "--edges", "normal,dev"]);
        let mut missing = Vec::new();
        for package in ["dwlint", "dwengine", "dwsoak"] {
            for (id, alone) in features(&["--package", package, "--edges", "normal"]) {
                if HOST_SIDE.contains(&id.split(' ').next().unwrap()) {
                    continue;
                }
                let unified = &workspace[&id];
                if alone != *unified {
                    let lacking: Vec<_> = unified.difference(&alone).collect();
                    missing.push(format!("{package}: {id} lacks {lacking:?}"));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "add these features to crates/workspace-hack/Cargo.toml:\n{}",
            missing.join("\n")
        );
    }
}
