#!/usr/bin/env python3
"""One-activity workflows, one at a time, over one keep-alive connection.

For counting what a workflow costs dwserver (callgrind's instructions per
thread, mallocs): each workflow is a start, a workflow task that schedules
an activity, the activity task and its completion, and a second workflow
task (three history events) that completes the workflow: seven requests,
three of them polls. Run it twice, with N and then 3N workflows, and divide
the difference of the two counts by 2N (docs/performance.md, "A workflow
task's answer without copies").

    docs/bench-one-workflow.py PORT N [PREFIX]
"""
import http.client
import json
import sys

port, count = int(sys.argv[1]), int(sys.argv[2])
prefix = sys.argv[3] if len(sys.argv) > 3 else "wf"
HEADERS = {"content-type": "application/json", "X-Durable-Workflow-Protocol-Version": "1.20"}
conn = http.client.HTTPConnection("127.0.0.1", port)
polls = 0


def post(path, body):
    conn.request("POST", path, json.dumps(body), HEADERS)
    response = conn.getresponse()
    data = response.read()
    if response.status >= 300:
        raise SystemExit(f"{path}: {response.status} {data[:300]!r}")
    return json.loads(data)


def poll(kind):
    global polls
    while True:
        polls += 1
        answer = post(f"/api/worker/{kind}-tasks/poll", {
            "task_queue": "q", "worker_id": "w1",
            "poll_request_id": f"{prefix}-p{polls}", "timeout_seconds": 5})
        if answer.get("task"):
            return answer["task"]


for i in range(count):
    post("/api/workflows", {"workflow_id": f"{prefix}{i}", "workflow_type": "t",
                            "task_queue": "q", "input": {"codec": "json", "blob": "[1]"}})
    task = poll("workflow")
    post(f"/api/worker/workflow-tasks/{task['task_id']}/complete", {
        "lease_owner": task["lease_owner"], "workflow_task_attempt": task["workflow_task_attempt"],
        "commands": [{"type": "schedule_activity", "activity_type": "a", "queue": "q",
                      "arguments": {"codec": "json", "blob": "[2]"}}]})
    activity = poll("activity")
    post(f"/api/worker/activity-tasks/{activity['task_id']}/complete", {
        "lease_owner": activity["lease_owner"],
        "activity_attempt_id": activity["activity_attempt_id"],
        "result": {"codec": "json", "blob": "\"r\""}})
    task = poll("workflow")
    if len(task["history_events"]) != 3:
        raise SystemExit(f"expected three events: {task}")
    post(f"/api/worker/workflow-tasks/{task['task_id']}/complete", {
        "lease_owner": task["lease_owner"], "workflow_task_attempt": task["workflow_task_attempt"],
        "commands": [{"type": "complete_workflow", "result": {"codec": "json", "blob": "\"d\""}}]})
