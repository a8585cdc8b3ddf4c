//! What a user copies from the CI guide (docs/ci.md) works as written: the
//! pinned `rev:` and `uses:` name this version's release tag, the pre-commit
//! hooks install from this repository alone (a `rust` hook built with
//! `cargo install --path .`, a `system` hook running the `dwlint` on PATH;
//! no package-index name of ours), the Actions example guards the SARIF
//! upload for fork pull requests as this repository's own workflow does,
//! and the other-CI command runs. The README's timing is the latest
//! measured figure. `.ci/run` builds the release wheel and runs every hook
//! through `pre-commit try-repo` for real.

use crate::support::{dwlint_in, fixture_copy, text};

use std::path::Path;

fn read(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The fenced blocks of `markdown` tagged `lang`.
fn blocks<'m>(markdown: &'m str, lang: &str) -> Vec<&'m str> {
    let fence = format!("```{lang}\n");
    markdown
        .split(fence.as_str())
        .skip(1)
        .filter_map(|rest| rest.split("\n```").next())
        .collect()
}

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The `language:` of each hook in `.pre-commit-hooks.yaml`, by id.
fn hook_languages(hooks: &str) -> Vec<(String, String)> {
    hooks
        .split("\n- id: ")
        .skip(1)
        .map(|block| {
            let id = block.lines().next().unwrap().trim().to_owned();
            let language = block
                .lines()
                .find_map(|l| l.trim().strip_prefix("language: "))
                .unwrap_or_else(|| panic!("hook {id} has no language"))
                .to_owned();
            (id, language)
        })
        .collect()
}

#[test]
fn the_hooks_install_from_this_repository_alone_and_the_ci_guide_pins_its_tag() {
    // No hook environment of ours is a Python package: a `language: python`
    // hook would install the root pyproject.toml, whose dependency on a
    // package-index name the project does not own is what this replaced.
    assert!(
        !Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("pyproject.toml")
            .exists(),
        "a root pyproject.toml makes the repository a Python hook package again"
    );
    let hooks = read(".pre-commit-hooks.yaml");
    assert_eq!(
        hook_languages(&hooks),
        [
            ("dwlint", "rust"),
            ("dwlint-changed", "rust"),
            ("dwlint-system", "system"),
            ("dwlint-changed-system", "system"),
        ]
        .map(|(id, language)| (id.to_owned(), language.to_owned())),
        "{hooks}"
    );
    for hook in hooks.split("\n- id: ").skip(1) {
        assert!(hook.contains("entry: dwlint check\n"), "{hook}");
    }
    // The release wheel is still built (a way to put dwlint on PATH).
    let wheel = read("python/dwlint/pyproject.toml");
    assert!(wheel.contains("build-backend = \"maturin\""), "{wheel}");
    assert!(wheel.contains("bindings = \"bin\""), "{wheel}");
    assert!(
        wheel.contains("manifest-path = \"../../Cargo.toml\""),
        "{wheel}"
    );
    assert!(wheel.contains("name = \"dwlint\""), "{wheel}");
    let guide = read("docs/ci.md");
    let pre_commit = blocks(&guide, "yaml")
        .into_iter()
        .find(|b| b.contains("repos:"))
        .expect("a pre-commit example");
    assert!(
        pre_commit.contains(&format!("rev: v{VERSION}\n")),
        "{pre_commit}"
    );
    for id in pre_commit
        .lines()
        .filter_map(|l| l.trim().trim_start_matches("# ").strip_prefix("- id: "))
    {
        let id = id.split_whitespace().next().unwrap();
        assert!(hooks.contains(&format!("- id: {id}\n")), "{id}");
    }
    let requirements = read(".ci/requirements-wheel.txt");
    for tool in ["maturin==", "pre-commit=="] {
        assert!(requirements.contains(tool), "{requirements}");
    }
    for stale in ["dwlint==", "PIP_FIND_LINKS=", "package index"] {
        let said = guide.lines().find(|l| l.contains(stale));
        let said = said.filter(|l| !l.contains("no package index"));
        assert!(said.is_none(), "docs/ci.md still says {said:?}");
    }
    let ci = read(".ci/run");
    assert!(
        ci.contains("requirements-wheel.txt") && ci.contains("try-repo"),
        "{ci}"
    );
    // Every hook is tried, none with a find-links of ours.
    assert!(ci.contains("env -u PIP_FIND_LINKS"), "{ci}");
    assert!(!ci.contains("PIP_FIND_LINKS="), "{ci}");
    let tried = ci
        .lines()
        .find_map(|l| l.trim().strip_prefix("for hook in "))
        .and_then(|l| l.split(';').next())
        .expect(".ci/run loops over the hooks");
    for (id, _) in hook_languages(&hooks) {
        assert!(
            tried.split_whitespace().any(|t| t == id),
            "{id} is not tried in .ci/run"
        );
    }
    let ignored = read(".gitignore");
    assert!(ignored.lines().any(|l| l == ".venv/"), "{ignored}");
}

#[test]
fn the_actions_example_guards_the_sarif_upload_like_this_repositorys_workflow() {
    let workflow = read(".github/workflows/ci.yml");
    let guard = workflow
        .lines()
        .find_map(|l| l.trim().strip_prefix("upload-sarif: "))
        .expect("the workflow uploads SARIF");
    assert!(
        guard.contains("head.repo.full_name == github.repository"),
        "{guard}"
    );
    let guide = read("docs/ci.md");
    let example = blocks(&guide, "yaml")
        .into_iter()
        .find(|b| b.contains("jobs:"))
        .expect("an Actions example");
    assert!(
        example.contains(&format!("upload-sarif: {guard}")),
        "{example}"
    );
    assert!(example.contains("security-events: write"), "{example}");
    assert!(
        example.contains(&format!("/dwlint@v{VERSION}")),
        "{example}"
    );
}

#[test]
fn the_ci_guides_other_ci_command_runs_as_written() {
    let guide = read("docs/ci.md");
    let command = blocks(&guide, "sh")
        .into_iter()
        .flat_map(str::lines)
        .find(|l| l.starts_with("dwlint check --format short --output junit="))
        .expect("the other-CI example");
    let args: Vec<&str> = command
        .split('#')
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .collect();
    let dir = fixture_copy("undeclared-cache-prefix");
    let out = dwlint_in(dir.path(), &args);
    // "exit 1 fails the job": the planted violation is found.
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("error[undeclared-cache-prefix]"));
    let junit = std::fs::read_to_string(dir.path().join("dwlint.xml")).unwrap();
    assert!(junit.contains("<testsuite"), "{junit}");
}

#[test]
fn the_readme_timing_is_the_latest_measured_figure() {
    let readme = read("README.md").replace('\n', " ");
    let figure = readme
        .split("20,000-file tree checks in ")
        .nth(1)
        .and_then(|rest| rest.split(" s ").next())
        .expect("the README states the synthetic tree's time");
    let performance = read("docs/performance.md");
    // The first figures table is the latest measurement.
    let latest = performance
        .lines()
        .find(|l| l.starts_with("| synthetic engine"))
        .expect("a synthetic-tree row");
    assert!(
        latest.contains(&format!("| {figure} s")),
        "README says {figure} s, docs/performance.md's latest row is {latest}"
    );
    assert!(performance.contains("cargo run --example synthetic_tree"));
}

/// The files a user reads or copies from: documentation, sources,
/// manifests, workflows and scripts, as git would list them (ignored
/// build output left out).
fn published_files() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for entry in ignore::WalkBuilder::new(root).hidden(false).build() {
        let entry = entry.unwrap();
        let path = entry.path();
        let rel = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let kept = ["md", "rs", "toml", "yml", "yaml", "json", "sh"]
            .iter()
            .any(|ext| rel.ends_with(&format!(".{ext}")))
            || rel == ".ci/run";
        if rel.starts_with(".git/") || !kept || !entry.file_type().unwrap().is_file() {
            continue;
        }
        if let Ok(text) = std::fs::read_to_string(path) {
            files.push((rel, text));
        }
    }
    assert!(files.len() > 100, "{} files", files.len());
    files
}

#[test]
fn the_project_has_one_home_url_and_no_placeholder_links() {
    let home = env!("CARGO_PKG_REPOSITORY");
    assert!(home.starts_with("https://github.com/"), "{home}");
    let slug = home.trim_start_matches("https://github.com/");
    // Spelled in two halves, so that this file does not match itself.
    let placeholders = [["example", ".invalid"].concat(), ["your", "-org/"].concat()];
    let mut wrong = Vec::new();
    for (rel, text) in published_files() {
        for (n, line) in text.lines().enumerate() {
            if placeholders.iter().any(|p| line.contains(p.as_str())) {
                wrong.push(format!("{rel}:{}: a placeholder: {line}", n + 1));
            }
            // Every link to a dwlint repository, and every `uses:` of the
            // action, is this project's home.
            for (at, _) in line.match_indices("github.com/") {
                let url = &line[at + "github.com/".len()..];
                let repo: String = url
                    .split(['/', ' ', '`', ')', '"', '>', '@'])
                    .take(2)
                    .collect::<Vec<_>>()
                    .join("/");
                if repo.ends_with("/dwlint") && repo != slug {
                    wrong.push(format!("{rel}:{}: not {home}: {line}", n + 1));
                }
            }
            if let Some(action) = line.trim().strip_prefix("- uses: ") {
                let action = action.split('@').next().unwrap();
                if action.ends_with("/dwlint") && action != slug {
                    wrong.push(format!("{rel}:{}: not {slug}: {line}", n + 1));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A version tag publishes what docs/install.md offers: the workflow first
/// checks that the tag names the packages' version (the check itself runs
/// here, both ways), then builds both binaries and the wheel from the
/// lock file and the pinned tools, and attaches them to the tag's release.
#[test]
fn a_version_tag_builds_and_publishes_the_binaries_and_the_wheel() {
    let workflow = read(".github/workflows/release.yml");
    for needed in [
        "tags: [\"v*\"]",
        ".ci/release-version \"$GITHUB_REF_NAME\"",
        "cargo build --release --locked --target ${{ matrix.target }} --bin dwlint",
        "cargo build --release --locked --target ${{ matrix.target }} -p dwengine --bin dwserver",
        ".ci/requirements-wheel.txt",
        "cd python/dwlint && ../../.venv/bin/maturin build --release --locked",
        "sha256sum",
        "gh release create \"$GITHUB_REF_NAME\" dist/*",
    ] {
        assert!(workflow.contains(needed), "release.yml lacks {needed:?}");
    }
    let check = |tag: &str| {
        std::process::Command::new(
            Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/release-version"),
        )
        .arg(tag)
        .output()
        .expect(".ci/release-version runs")
    };
    let right = check(&format!("v{VERSION}"));
    assert!(right.status.success(), "{right:?}");
    let wrong = check(&format!("v{VERSION}.1"));
    assert_eq!(wrong.status.code(), Some(1), "{wrong:?}");
    assert!(
        text(&wrong.stderr).contains(&format!(
            "does not name the version in Cargo.toml ({VERSION})"
        )),
        "{wrong:?}"
    );
}
