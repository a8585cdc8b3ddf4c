//! The documentation's commands run as written.
//!
//! A fenced block tagged `sh doc-test` in the README or anywhere under
//! `docs/` is a script that runs here, offline: `bash -euo pipefail` with
//! the `dwlint` this test built first on PATH, a throw-away HOME, in a
//! fresh copy of `fixtures/clean` (a small tree with its policy, docs and
//! sources). Every command must exit 0; a failure names the file and line
//! of the block and shows its output. The `sh quickstart` blocks of
//! docs/quickstart-server.md need a network (the SDK from the package
//! index) and run in `.ci/run` instead; here they are held to name the
//! program they run.

use crate::support::{copy_tree, text};

use std::path::{Path, PathBuf};
use std::process::Command;

/// One fenced block: where it starts, and its text.
struct Block {
    file: String,
    line: usize,
    script: String,
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The blocks of `markdown` whose info string is `info`, with the line of
/// their opening fence.
fn blocks_in(file: &str, markdown: &str, info: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (n, line) in markdown.lines().enumerate() {
        match &mut open {
            None if line.trim_end() == format!("```{info}") => {
                open = Some(Block {
                    file: file.to_owned(),
                    line: n + 1,
                    script: String::new(),
                })
            }
            Some(_) if line.trim_end() == "```" => out.extend(open.take()),
            Some(block) => {
                block.script.push_str(line);
                block.script.push('\n');
            }
            None => {}
        }
    }
    assert!(open.is_none(), "{file}: an unclosed ```{info} block");
    out
}

/// Every `info` block of the README and of the Markdown files under docs/.
fn marked(info: &str) -> Vec<Block> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut files = vec![root().join("README.md")];
    walk(&root().join("docs"), &mut files);
    files.sort();
    files
        .iter()
        .flat_map(|path| {
            let rel = path.strip_prefix(root()).unwrap().display().to_string();
            blocks_in(&rel, &std::fs::read_to_string(path).unwrap(), info)
        })
        .collect()
}

/// Runs `block` in a fresh copy of fixtures/clean: Err with what to show
/// when a command fails.
fn run(block: &Block) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&root().join("fixtures/clean"), dir.path(), &|name| {
        name.ends_with(".snap")
    });
    let home = tempfile::tempdir().unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_dwlint")).parent().unwrap();
    let path = std::env::join_paths(std::iter::once(bin.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &block.script])
        .current_dir(dir.path())
        .env("PATH", path)
        .env("HOME", home.path())
        .env("NO_COLOR", "1")
        .env_remove("GITHUB_STEP_SUMMARY")
        .output()
        .expect("run bash");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}:{}: the block exits {:?}:\n{}\n--- stdout\n{}--- stderr\n{}",
            block.file,
            block.line,
            out.status.code(),
            block.script,
            text(&out.stdout),
            text(&out.stderr)
        ))
    }
}

#[test]
fn every_doc_test_block_runs_as_written() {
    let blocks = marked("sh doc-test");
    // The marker is in use: a renamed marker cannot pass by running nothing.
    assert!(blocks.len() >= 3, "only {} doc-test blocks", blocks.len());
    let failures: Vec<String> = blocks.iter().filter_map(|b| run(b).err()).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn a_failing_command_fails_its_block_and_names_where_it_is() {
    let markdown = "# t\n\n```sh doc-test\ndwlint --version\ndwlint check --no-such-flag\ndwlint --version\n```\n";
    let blocks = blocks_in("docs/t.md", markdown, "sh doc-test");
    assert_eq!(blocks.len(), 1);
    let failure = run(&blocks[0]).unwrap_err();
    assert!(
        failure.starts_with("docs/t.md:3: the block exits Some(2)"),
        "{failure}"
    );
    assert!(failure.contains("--no-such-flag"), "{failure}");
    // A block that runs: the same runner, so the failure above is the
    // command's and not the runner's.
    let good = blocks_in(
        "docs/t.md",
        "```sh doc-test\ndwlint check\n```\n",
        "sh doc-test",
    );
    run(&good[0]).unwrap();
}

#[test]
fn the_quickstart_runs_its_program_and_ci_runs_the_quickstart() {
    let blocks = marked("sh quickstart");
    assert!(
        blocks.iter().all(|b| b.file == "docs/quickstart-server.md"),
        "sh quickstart blocks outside the quickstart"
    );
    let script: String = blocks.iter().map(|b| b.script.as_str()).collect();
    for step in [
        "cargo build --locked -p dwengine --bin dwserver",
        "DW_AUTH_OPERATOR_TOKENS=",
        "DW_AUTH_WORKER_TOKENS=",
        "pip install -q -r conformance/requirements.txt",
        "docs/quickstart/first_workflow.py",
        "kill \"$DWSERVER_PID\"",
    ] {
        assert!(
            script.contains(step),
            "the quickstart lost {step:?}:\n{script}"
        );
    }
    let program =
        std::fs::read_to_string(root().join("docs/quickstart/first_workflow.py")).unwrap();
    for call in [
        "ctx.schedule_activity(",
        "ctx.start_timer(",
        "Worker(",
        "start_workflow(",
    ] {
        assert!(program.contains(call), "first_workflow.py has no {call}");
    }
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(
        ci.contains("```sh quickstart$") && ci.contains("docs/quickstart-server.md"),
        ".ci/run does not run the quickstart's blocks"
    );
}
