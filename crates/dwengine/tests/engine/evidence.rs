//! `dwserver evidence`: the conformance evidence payload of the running build.

use std::process::Command;

use sha2::{Digest, Sha256};

fn evidence(image: Option<&str>) -> serde_json::Value {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dwserver"));
    command.arg("evidence").env_remove("DW_SERVER_IMAGE");
    if let Some(image) = image {
        command.env("DW_SERVER_IMAGE", image);
    }
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn dw_server_image_names_this_executable_unless_an_image_is_pinned() {
    let binary = std::fs::read(env!("CARGO_BIN_EXE_dwserver")).unwrap();
    let digest: String = Sha256::digest(&binary)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let payload = evidence(None);
    assert_eq!(
        payload["schema"],
        "durable-workflow.server.conformance-evidence.v1"
    );
    let entries = payload["published_artifact_worker_execution"]
        .as_array()
        .unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(
        entries[0]["dw_server_image"],
        format!("dwserver:{}@sha256:{digest}", env!("CARGO_PKG_VERSION"))
    );
    let pinned = evidence(Some("durableworkflow/server:0.2"));
    let entry = &pinned["published_artifact_worker_execution"][0];
    assert_eq!(entry["dw_server_image"], "durableworkflow/server:0.2");
    assert_eq!(entry["image_source"], "DW_SERVER_IMAGE");
    assert_eq!(entry["build"]["executable_sha256"], digest);

    let out = Command::new(env!("CARGO_BIN_EXE_dwserver"))
        .args(["evidence", "--bogus"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
