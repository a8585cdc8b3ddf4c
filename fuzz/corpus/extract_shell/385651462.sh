#!/usr/bin/env bash
# Starts a Prometheus agent that remote-writes the harness metrics.
set -euo pipefail

cat > "${OUT_DIR:-build/perf}/prometheus.yml" <<EOF
global:
  external_labels:
    repository: "${GITHUB_REPOSITORY:-local}"
    workflow: "${GITHUB_WORKFLOW:-soak}"
scrape_configs:
  - job_name: dw-perf
    static_configs:
      - targets: ["localhost:9400"]
        labels:
          run_id: "${GITHUB_RUN_ID:-local}"
EOF

prometheus --config.file="${OUT_DIR:-build/perf}/prometheus.yml" --enable-feature=agent
