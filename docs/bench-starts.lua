-- wrk script of docs/bench-starts.sh: each request starts a workflow with
-- an id of its own (thread number and counter) in namespace "bench".
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

local counter = 0
function request()
  counter = counter + 1
  local body = string.format(
    '{"workflow_id":"w-%d-%d","workflow_type":"Order","task_queue":"q","input":{"codec":"json","blob":"[]"}}',
    tid, counter)
  return wrk.format("POST", "/api/workflows",
    {["Content-Type"] = "application/json", ["X-Namespace"] = "bench"}, body)
end
