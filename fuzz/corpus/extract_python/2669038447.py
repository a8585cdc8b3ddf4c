#!/usr/bin/env python3
"""Bounded-growth soak harness.

Writes summary.json provenance and serves Prometheus text. Docstrings are
prose: dw_docstring_only_total and server:docstring-only: are not code.
"""

import json
import os

# dw_perf_commented_out_total was dropped; so was server:perf-scratch:.


class Harness:
    """Samples the server and renders the harness metrics."""

    def __init__(self, policies):
        self.policies = policies
        self.status_counts = {}
        self.errors = 0

    def metrics(self, redis_keys_by_policy):
        lines = []
        for status, count in sorted(self.status_counts.items()):
            lines.append(f'dw_perf_requests_total{{status="{status}"}} {count}')
        lines.append(f"dw_perf_errors_total {self.errors}")
        for policy in self.policies:
            keys = redis_keys_by_policy.get(policy, 0)
            lines.append(f'dw_perf_redis_server_keys_by_policy{{policy="{policy}"}} {keys}')
        return "\n".join(lines) + "\n"

    def summary(self):
        return json.dumps({
            "run_id": os.environ.get("GITHUB_RUN_ID", "local"),
            "runner": os.environ.get("RUNNER_NAME", "local"),
        })
