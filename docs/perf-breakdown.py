#!/usr/bin/env python3
"""Splits a perf profile of dwserver under the SDK benchmark by what the
samples were doing: the thread (writer, syncer, poll lane, async runtime)
and, inside it, the request kind or step their call stack names.

    PERF=1 SHAPES=activity docs/bench-sdk-throughput.sh 15 2
    perf script -i perf-activity.data -F comm,ip,sym --no-inline > stacks.txt
    docs/perf-breakdown.py stacks.txt [CPU_MS_PER_WORKFLOW]

With the run's dwserver CPU per workflow it also prints each share in ms
per workflow. A sample is counted once, in the first bucket its stack
matches (docs/performance.md, session 16).
"""
import re
import sys

BUCKETS = [
    ("dwstore-writer", "writer: workflow-task completions", r"WorkflowCompletion::transaction"),
    ("dwstore-writer", "writer: claims", r"lease_task_for|worker::.*pass::\{\{closure"),
    ("dwstore-writer", "writer: activity completions", r"activity_report|report_activity"),
    ("dwstore-writer", "writer: starts", r"StartTransaction|start_workflow"),
    ("dwstore-writer", "writer: transaction control, commits, other", r""),
    ("dwstore-syncer", "syncer (WAL fsync, answers)", r""),
    ("dwserver-poll", "poll lane: wait slots", r"wait_slots"),
    ("dwserver-poll", "poll lane: request-id keys, diagnostics", r"PollRequests|WorkerPollDiagnostics"),
    ("dwserver-poll", "poll lane: rendering the task", r"render_task"),
    ("dwserver-poll", "poll lane: waiting for the writer's claim", r"Engine::claim|SharedStore::claim"),
    ("dwserver-poll", "poll lane: store reads", r"SharedStore::read"),
    ("dwserver-poll", "poll lane: other (lane runtime, thread switches)", r""),
    ("", "async: describe", r"describe"),
    ("", "async: polls' request-id keys, diagnostics", r"PollRequests|WorkerPollDiagnostics"),
    ("", "async: polls' rendering of the task", r"render_task"),
    ("", "async: polls' store reads (first look, recovery scans)", r"first_look|recovery_scan"),
    ("", "async: polls, other (validation, claims awaited, wake-ups)", r"worker_tasks::"),
    ("", "async: HTTP, routing, completions' and starts' async parts", r"hyper::|serve::serve"),
    ("", "async: runtime (park, wake, timers)", r""),
]


def samples(path):
    comm, frames = None, []
    for line in open(path, errors="replace"):
        if not line.strip():
            if comm is not None:
                yield comm, frames
            comm, frames = None, []
        elif line[0] in "\t ":
            parts = line.strip().split(" ", 1)
            frames.append(parts[1] if len(parts) > 1 else "")
        else:
            comm = line.strip()
    if comm is not None:
        yield comm, frames


counts = {label: 0 for _, label, _ in BUCKETS}
total = 0
for comm, frames in samples(sys.argv[1]):
    total += 1
    for thread, label, pattern in BUCKETS:
        if thread and not comm.startswith(thread):
            continue
        if not thread and comm.startswith(("dwstore-", "dwserver-poll")):
            continue
        if not pattern or any(re.search(pattern, f) for f in frames):
            counts[label] += 1
            break
per_workflow = float(sys.argv[2]) if len(sys.argv) > 2 else None
print(f"{total} samples")
for _, label, _ in BUCKETS:
    share = counts[label] / max(total, 1)
    ms = f"  {share * per_workflow:.3f} ms/workflow" if per_workflow else ""
    print(f"{100 * share:5.1f} %{ms}  {label}")
