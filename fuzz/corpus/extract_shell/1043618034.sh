#!/usr/bin/env bash
# Runs the soak and remote-writes the harness metrics. Per-run values such
# as ${GITHUB_RUN_ID} go to summary.json, never into labels.
# dw_perf_shell_comment_total and server:shell-comment: are comments only.
set -euo pipefail

OUT_DIR="${OUT_DIR:-build/perf}"
mkdir -p "$OUT_DIR"

cat > "$OUT_DIR/prometheus.yml" <<EOF
global:
  scrape_interval: 15s
  external_labels:
    repository: "${GITHUB_REPOSITORY:-local}"
scrape_configs:
  - job_name: dw-perf
    static_configs:
      - targets: ["localhost:9400"]
        labels:
          workflow: "${GITHUB_WORKFLOW:-soak}"   # dw_perf_yaml_comment_total
remote_write:
  - url: "${DW_PERF_REMOTE_WRITE_URL:-http://localhost:9090/api/v1/write}"
EOF

python3 scripts/perf/harness.py --out "$OUT_DIR"
