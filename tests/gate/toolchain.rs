//! The declared `rust-version` is what the locked dependencies really need:
//! the highest `rust-version` any package in Cargo.lock declares. Lower,
//! and a user on the declared toolchain gets a build error instead of
//! cargo's clear "requires rustc X" message; higher, and the promise is
//! stricter than it needs to be.

use std::process::Command;

use serde_json::Value;

/// `1.88` and `1.88.0` compare equal; missing parts count as 0.
fn version(text: &str) -> (u64, u64, u64) {
    let mut parts = text.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
    let mut next = || parts.next().unwrap_or(0);
    (next(), next(), next())
}

/// `cargo metadata` of the workspace, every platform's packages included.
/// Offline first (CI fetched them all, `cargo fetch --locked`); when a
/// package is missing, as on a fresh clone whose first `cargo test`
/// downloaded only this platform's, cargo is let fetch the rest.
fn metadata() -> std::process::Output {
    let run = |offline: bool| {
        let mut args = vec!["metadata", "--format-version", "1", "--locked"];
        if offline {
            args.push("--offline");
        }
        Command::new(env!("CARGO"))
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("run cargo metadata")
    };
    let out = run(true);
    if out.status.success() {
        return out;
    }
    run(false)
}

#[test]
fn rust_version_is_what_the_lockfile_needs() {
    let out = metadata();
    assert!(
        out.status.success(),
        "cargo metadata reads every package in Cargo.lock, for every platform, and failed \
         (without a network, run `cargo fetch --locked` where there is one): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    let members: Vec<&str> = metadata["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    let packages = metadata["packages"].as_array().unwrap();
    let (members, dependencies): (Vec<&Value>, Vec<&Value>) = packages
        .iter()
        .partition(|p| members.contains(&p["id"].as_str().unwrap()));
    let (needed, by) = dependencies
        .iter()
        .filter_map(|p| {
            let declared = p["rust_version"].as_str()?;
            Some((version(declared), format!("{} {}", p["name"], p["version"])))
        })
        .max()
        .expect("some dependency declares a rust-version");
    for member in members {
        let declared = member["rust_version"].as_str().unwrap_or("none");
        assert_eq!(
            version(declared),
            needed,
            "{} declares rust-version {declared}, but {by} needs {}.{}.{}: set [workspace.package] rust-version",
            member["name"],
            needed.0,
            needed.1,
            needed.2
        );
    }
}
