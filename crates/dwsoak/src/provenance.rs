//! Where a run came from: GitHub and runner variables, the checkout, the
//! policy digest, and the server image beside the image the run pinned.
//!
//! Per-run values (run id, runner name, commit) belong here, in the
//! artifact, and never in a Prometheus label: a label that changes every run
//! creates new series every run.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use dwevidence::profile::GITHUB_VARS;
use dwevidence::summary::{Provenance, Runner, ServerImage};

/// The variable that pins the server image (`<name>[:<tag>]@sha256:<hex>`).
pub const PIN_VAR: &str = "DW_SERVER_IMAGE";

/// Provenance from `lookup` (the environment), `git` run in `checkout` and,
/// when the harness started the server, that server's executable.
pub fn collect(
    lookup: impl Fn(&str) -> Option<String>,
    checkout: &Path,
    base_url: &str,
    policy_path: &Path,
    policy_sha256: &str,
    server_bin: Option<&Path>,
) -> Provenance {
    let set = |name: &str| lookup(name).filter(|v| !v.is_empty());
    let github: BTreeMap<String, String> = GITHUB_VARS
        .iter()
        .filter_map(|name| Some((name.to_string(), set(name)?)))
        .collect();
    Provenance {
        github,
        runner: Runner {
            name: set("RUNNER_NAME"),
            os: set("RUNNER_OS").or_else(|| Some(std::env::consts::OS.to_owned())),
            arch: set("RUNNER_ARCH").or_else(|| Some(std::env::consts::ARCH.to_owned())),
            environment: set("RUNNER_ENVIRONMENT"),
        },
        compose_project: set("COMPOSE_PROJECT_NAME"),
        base_url: Some(base_url.to_owned()),
        git_sha: git(checkout, &["rev-parse", "HEAD"]).map(|s| s.trim().to_owned()),
        tracked_working_tree_clean: git(
            checkout,
            &["status", "--porcelain", "--untracked-files=no"],
        )
        .map(|s| s.trim().is_empty()),
        policy_path: policy_path.to_string_lossy().into_owned(),
        policy_sha256: policy_sha256.to_owned(),
        server_image: Some(server_image(
            set(PIN_VAR).map(|p| p.trim().to_owned()),
            server_bin,
        )),
    }
}

/// The pin, the `dw_server_image` that `bin evidence` reports under that
/// pin (the conformance evidence of the executable the harness started),
/// and the harness's own SHA-256 of `bin`. Without `bin` (a server somebody
/// else started) only the pin is known.
pub fn server_image(pinned: Option<String>, bin: Option<&Path>) -> ServerImage {
    let mut image = ServerImage {
        pinned,
        dw_server_image: None,
        executable_sha256: None,
        error: None,
    };
    let Some(bin) = bin else { return image };
    match std::fs::read(bin) {
        Ok(bytes) => image.executable_sha256 = Some(dwevidence::digest::sha256_hex(&bytes)),
        Err(e) => {
            image.error = Some(format!("cannot read {}: {e}", bin.display()));
            return image;
        }
    }
    let mut command = Command::new(bin);
    command.arg("evidence");
    match &image.pinned {
        Some(pin) => command.env(PIN_VAR, pin),
        None => command.env_remove(PIN_VAR),
    };
    match reported_image(&mut command) {
        Ok(reported) => image.dw_server_image = Some(reported),
        Err(e) => image.error = Some(format!("`{} evidence`: {e}", bin.display())),
    }
    image
}

/// `dw_server_image` of the first `published_artifact_worker_execution`
/// entry that `command` prints.
fn reported_image(command: &mut Command) -> Result<String, String> {
    let out = command.output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!("{} ({})", out.status, stderr.trim()));
    }
    let payload: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("the evidence is not JSON: {e}"))?;
    payload["published_artifact_worker_execution"][0]["dw_server_image"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| {
            "the evidence names no published_artifact_worker_execution[0].dw_server_image"
                .to_owned()
        })
}

/// Output of a successful git command; `None` outside a checkout.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_set_variables_are_recorded_and_git_is_read() {
        let env = |name: &str| match name {
            "GITHUB_SHA" => Some("abc".to_owned()),
            "GITHUB_REF" => Some(String::new()),
            "RUNNER_ENVIRONMENT" => Some("github-hosted".to_owned()),
            _ => None,
        };
        let dir = tempfile::tempdir().unwrap();
        let p = collect(env, dir.path(), "http://x", Path::new("p.toml"), "00", None);
        assert_eq!(
            p.github,
            BTreeMap::from([("GITHUB_SHA".into(), "abc".into())])
        );
        assert_eq!(p.runner.environment.as_deref(), Some("github-hosted"));
        assert_eq!(p.git_sha, None, "not a checkout");
        assert_eq!(p.tracked_working_tree_clean, None);
        let repo = env!("CARGO_MANIFEST_DIR");
        let p = collect(
            |_| None,
            Path::new(repo),
            "http://x",
            Path::new("p.toml"),
            "00",
            None,
        );
        assert_eq!(p.git_sha.map(|s| s.len()), Some(40));
        assert!(p.tracked_working_tree_clean.is_some());
        let image = p.server_image.unwrap();
        assert_eq!((image.pinned, image.executable_sha256), (None, None));
    }

    /// A stand-in dwserver: `evidence` prints the payload shape with
    /// `DW_SERVER_IMAGE` as its image, or fails when asked to.
    fn fake_server(dir: &Path, script: &str) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let bin = dir.join("dwserver");
        std::fs::write(&bin, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        bin
    }

    /// `server_image`, again while another thread's fork still holds the
    /// freshly written script open (ETXTBSY); a generous deadline, no sleep.
    fn image_of(pinned: Option<String>, bin: &Path) -> ServerImage {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let image = server_image(pinned.clone(), Some(bin));
            let busy = image
                .error
                .as_deref()
                .is_some_and(|e| e.contains("os error 26"));
            if !busy || std::time::Instant::now() > deadline {
                return image;
            }
            std::thread::yield_now();
        }
    }

    #[test]
    fn the_started_servers_image_is_read_beside_the_pin() {
        let dir = tempfile::tempdir().unwrap();
        let bin = fake_server(
            dir.path(),
            r#"[ "$1" = evidence ] || exit 2
printf '{"published_artifact_worker_execution":[{"dw_server_image":"%s"}]}' "${DW_SERVER_IMAGE:-unpinned}""#,
        );
        let digest = dwevidence::digest::sha256_hex(&std::fs::read(&bin).unwrap());
        let pin = format!("dwserver:0.1.0@sha256:{digest}");
        let image = image_of(Some(pin.clone()), &bin);
        assert_eq!(image.pinned.as_deref(), Some(pin.as_str()));
        assert_eq!(image.dw_server_image.as_deref(), Some(pin.as_str()));
        assert_eq!(image.executable_sha256.as_deref(), Some(digest.as_str()));
        assert_eq!(image.error, None);
        assert_eq!(ServerImage::pinned_digest(&pin), Some(digest.as_str()));
        // Unpinned: the server reports what it reports, and nothing is pinned.
        let image = image_of(None, &bin);
        assert_eq!(image.dw_server_image.as_deref(), Some("unpinned"));
        // An external server: only the pin is known.
        let image = server_image(Some(pin.clone()), None);
        assert_eq!(
            (image.dw_server_image, image.executable_sha256),
            (None, None)
        );
    }

    #[test]
    fn a_server_that_cannot_give_its_evidence_is_an_error_not_an_image() {
        let dir = tempfile::tempdir().unwrap();
        let bin = fake_server(dir.path(), "echo 'no policy' >&2; exit 1");
        let image = image_of(Some("x@sha256:00".into()), &bin);
        assert_eq!(image.dw_server_image, None);
        let error = image.error.unwrap();
        assert!(
            error.contains("evidence") && error.contains("no policy"),
            "{error}"
        );
        let bin = fake_server(dir.path(), "echo '{}'");
        let error = image_of(None, &bin).error.unwrap();
        assert!(error.contains("names no"), "{error}");
        let missing = dir.path().join("absent");
        let error = server_image(None, Some(&missing)).error.unwrap();
        assert!(error.contains("cannot read"), "{error}");
    }
}
