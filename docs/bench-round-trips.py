# One-activity workflows driven one step at a time over HTTP, for
# docs/bench-round-trips.sh (no describes: the steps alone): start, workflow
# poll and completion (schedule_activity), activity poll and completion,
# workflow poll and completion (complete_workflow). Usage: BASE_URL N
import json, sys, time, urllib.request, uuid
base, n = sys.argv[1], int(sys.argv[2])
def post(path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read() or b"null")
env = lambda s: {"codec": "json", "blob": s}
post("/api/worker/register", {"worker_id": "w", "task_queue": "trips"})
def poll(kind):
    a = post(f"/api/worker/{kind}-tasks/poll", {"worker_id": "w", "task_queue": "trips",
             "poll_request_id": uuid.uuid4().hex, "timeout_seconds": 5})
    assert a["task"], a
    return a["task"]
def complete_wf(t, commands):
    post(f"/api/worker/workflow-tasks/{t['task_id']}/complete", {"lease_owner": t["lease_owner"],
         "workflow_task_attempt": t["workflow_task_attempt"], "commands": commands})
t0 = time.time()
for i in range(n):
    post("/api/workflows", {"workflow_id": f"trip-{uuid.uuid4().hex}", "workflow_type": "T",
         "task_queue": "trips", "input": env("[1]")})
    complete_wf(poll("workflow"), [{"type": "schedule_activity", "activity_type": "a",
                                    "task_queue": "trips", "arguments": env("[1]")}])
    a = poll("activity")
    post(f"/api/worker/activity-tasks/{a['task_id']}/complete", {"activity_attempt_id": a["activity_attempt_id"],
         "lease_owner": a["lease_owner"], "result": env("1")})
    complete_wf(poll("workflow"), [{"type": "complete_workflow", "result": env("1")}])
print(json.dumps({"workflows": n, "ms_per_workflow": round(1000 * (time.time() - t0) / n, 2)}))
