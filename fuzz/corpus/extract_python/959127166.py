#!/usr/bin/env python3
"""Soak harness. Mentions dw_docstring_total and server:docstring: as prose."""

import os

# dw_comment_total and 'server:comment:' live in a comment

PREFIX = 'server:poll:'  # trailing comment with "server:trailing:"
JOINED = ("server:" "joined:"
          "tail")
PLUS = 'server:' + 'plus:'
RAW = r'server:raw:\d+'
BYTES = b"server:bytes:"
TRIPLE = '''dw_triple_total 1
dw_triple_other_total{kind="a"} 2
'''


class Harness:
    """Class docstring naming dw_class_docstring_total."""

    def sample(self, status, policy, value):
        """Method docstring, dw_method_docstring_total."""
        line = f'dw_perf_redis_server_keys_by_policy{{status="{status}",policy="{policy}"}} {value}'
        nested = f"dw_perf_requests_total{{status=\"{self.codes['ok']}\"}} {value:.2f}"
        key = f"server:poll:{policy}:{{literal}}"
        labels = f'dw_perf_dynamic{{{self.labels}}} {value}'
        "a bare string statement later in a body is code-ish but harmless"
        return line, nested, key, labels


async def drain():
    """Async function docstring: dw_async_docstring_total."""
    return F"dw_perf_errors_total {0}", rb'server:rb:'


def broken_braces():
    return f'dw_perf_open{{status="{unterminated'
