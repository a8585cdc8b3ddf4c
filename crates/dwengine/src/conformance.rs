//! The conformance evidence of the running build, with `dw_server_image`.
//!
//! A conformance run (the activities suite's
//! `published_artifact_worker_execution` entry) must say which server
//! artifact executed it, and the value is matched against the pinned server
//! image. `dwserver evidence` prints that payload for the binary that runs
//! it: `dw_server_image` is the pinned image reference when the deployment
//! names one (`DW_SERVER_IMAGE`), else the build's own reference
//! `dwserver:<version>@sha256:<digest of this executable>`, so two builds
//! can never share a value. It is a single unlabelled evidence field: it
//! lives only in this payload, never on a metric surface, and the payload is
//! disclosed against the policy (fail closed) before it is printed.

use std::io::Read;
use std::path::Path;

use dwpolicy::{DisclosureError, MetricGuard};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::server::wire::{CONTROL_PLANE_VERSION, WORKER_PROTOCOL_VERSIONS};

/// Builds the conformance evidence payload.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConformanceEvidence;

/// Why the evidence could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum EvidenceError {
    /// The executable could not be read to digest it.
    #[error("cannot read the running executable {path}: {source}")]
    Executable {
        /// The path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The policy does not declare the field.
    #[error(transparent)]
    Disclosure(#[from] DisclosureError),
}

impl ConformanceEvidence {
    /// The evidence field this type owns.
    pub const FIELD: &'static str = "dw_server_image";

    /// The evidence payload's schema name.
    pub const SCHEMA: &'static str = "durable-workflow.server.conformance-evidence.v1";

    /// The payload for the executable at `exe`, with `pinned_image` (the
    /// deployment's `DW_SERVER_IMAGE`) when set.
    pub fn payload(
        guard: &MetricGuard,
        exe: &Path,
        pinned_image: Option<&str>,
    ) -> Result<Value, EvidenceError> {
        // No dimensions: disclosing none proves the policy declares the
        // field with no labels, or refuses.
        let disclosure = guard.disclose(Self::FIELD, std::iter::empty::<(&str, ())>())?;
        let digest = sha256_file(exe).map_err(|source| EvidenceError::Executable {
            path: exe.display().to_string(),
            source,
        })?;
        let version = env!("CARGO_PKG_VERSION");
        let build_image = format!("dwserver:{version}@sha256:{digest}");
        let (image, source) = match pinned_image.map(str::trim).filter(|s| !s.is_empty()) {
            Some(pinned) => (pinned.to_owned(), "DW_SERVER_IMAGE"),
            None => (build_image.clone(), "build"),
        };
        Ok(json!({
            "schema": Self::SCHEMA,
            "published_artifact_worker_execution": [{
                (Self::FIELD): image,
                "image_source": source,
                "build": {
                    "name": "dwserver",
                    "version": version,
                    "executable_sha256": digest,
                    "image": build_image,
                },
                "control_plane_version": CONTROL_PLANE_VERSION,
                "worker_protocol_versions": WORKER_PROTOCOL_VERSIONS,
            }],
            "cardinality": { (Self::FIELD): serde_json::to_value(&disclosure).unwrap_or(Value::Null) },
        }))
    }
}

fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_image_is_the_pinned_one_or_the_builds_own_digest() {
        let guard = MetricGuard::new(crate::policy::embedded().unwrap());
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), b"abc").unwrap();
        let built = ConformanceEvidence::payload(&guard, file.path(), None).unwrap();
        let entry = &built["published_artifact_worker_execution"][0];
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(
            entry["dw_server_image"],
            format!("dwserver:{}@sha256:{abc}", env!("CARGO_PKG_VERSION"))
        );
        assert_eq!(entry["image_source"], "build");
        let pinned =
            ConformanceEvidence::payload(&guard, file.path(), Some("durableworkflow/server:0.2"))
                .unwrap();
        let entry = &pinned["published_artifact_worker_execution"][0];
        assert_eq!(entry["dw_server_image"], "durableworkflow/server:0.2");
        assert_eq!(entry["build"]["executable_sha256"], abc);
        let undeclared = MetricGuard::from_toml_str("schema_version = 1\n").unwrap();
        assert!(matches!(
            ConformanceEvidence::payload(&undeclared, file.path(), None),
            Err(EvidenceError::Disclosure(_))
        ));
    }
}
