"""Soak harness: prints the perf metrics in Prometheus text format."""


def render(status_counts, errors, keys_by_policy):
    lines = []
    for status, count in status_counts.items():
        lines.append('dw_perf_requests_total{status="%s"} %d' % (status, count))
    lines.append('dw_perf_errors_total %d' % errors)
    for policy, keys in keys_by_policy.items():
        lines.append('dw_perf_redis_server_keys_by_policy{policy="%s"} %d' % (policy, keys))
    return "\n".join(lines)
