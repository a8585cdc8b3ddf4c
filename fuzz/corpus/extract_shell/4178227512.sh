#!/usr/bin/env bash
# dw_comment_total and server:comment: in a comment
set -euo pipefail

METRIC="${DW_METRIC:-dw_perf_requests_total}"
KEY="server:soak:${RUN_KEY}:lock"
RAW='server:single:$NOT_EXPANDED'
echo dw_perf_bare_total 1   # bare word, then a comment with dw_after_total
echo "$# args, ${#METRIC} chars" a#b
printf '%s\n' "dw_perf_errors_total{kind=\"$(echo x)\"} 0"

cat > "${OUT_DIR}/prometheus.yml" <<EOF
global:
  external_labels:
    repository: "${GITHUB_REPOSITORY:-local}"
    runner: ${RUNNER_NAME}  # comment after a scalar
scrape_configs:
  - job_name: dw-perf
    static_configs:
      - targets: ["localhost:9400"]
        labels:
          workflow: perf-soak
          run_id: "${GITHUB_RUN_ID:-local}"
EOF

cat <<-'NOTE'
	server:quoted-heredoc:${NOT_EXPANDED}
	NOTE

cat <<EOF2 | tee /dev/null
dw_heredoc_text_total{queue="q"} 3
EOF2
