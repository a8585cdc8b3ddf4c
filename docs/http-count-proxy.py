#!/usr/bin/env python3
"""Counts a client's HTTP/1.1 requests to a server by method and route.

A TCP proxy: it listens on 127.0.0.1:PORT, forwards every connection to
TARGET (host:port) unchanged, and counts the request lines it sees go to
the server (method and path, ids replaced by {id}) and the status lines
coming back. On SIGTERM or SIGINT it writes the counts as JSON to OUT and
exits. docs/bench-sdk-throughput.sh runs it with COUNT_REQUESTS=1 to say
how many requests of each kind a workflow costs the server
(docs/performance.md).

    docs/http-count-proxy.py PORT TARGET OUT
"""
import collections
import json
import re
import signal
import socket
import sys
import threading

port, target, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
host, target_port = target.rsplit(":", 1)
REQUEST = re.compile(rb"(GET|POST|PUT|PATCH|DELETE) (/[^ ?]*)[^ ]* HTTP/1\.1\r\n")
STATUS = re.compile(rb"HTTP/1\.1 (\d\d\d) ")
counts = collections.Counter()
lock = threading.Lock()


def route(path):
    """The path with its ids replaced (workflow, task, run, worker ids)."""
    p = path.decode(errors="replace")
    p = re.sub(r"^/api/workflows/[^/]+", "/api/workflows/{id}", p)
    p = re.sub(r"^(/api/worker/[a-z-]+-tasks)/(?!poll$)[^/]+", r"\1/{id}", p)
    p = re.sub(r"^/api/worker/registrations/[^/]+", "/api/worker/registrations/{id}", p)
    p = re.sub(r"/runs/[^/]+", "/runs/{run}", p)
    return p


def pump(source, sink, pattern, name):
    # Counts the matches in what it forwards; a short tail after the last
    # match is kept so a line split across two reads is still counted once.
    tail = b""
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
            seen = tail + data
            found, last = [], 0
            for m in pattern.finditer(seen):
                found.append(name(m))
                last = m.end()
            tail = seen[max(last, len(seen) - 256):]
            if found:
                with lock:
                    counts.update(found)
    except OSError:
        pass
    finally:
        try:
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def serve(client):
    server = socket.create_connection((host, int(target_port)))
    for s in (client, server):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    request = lambda m: f"{m.group(1).decode()} {route(m.group(2))}"
    status = lambda m: f"status {m.group(1).decode()}"
    threading.Thread(target=pump, args=(client, server, REQUEST, request), daemon=True).start()
    threading.Thread(target=pump, args=(server, client, STATUS, status), daemon=True).start()


def finish(*_):
    with lock:
        with open(out, "w") as f:
            json.dump(dict(counts), f, indent=1, sort_keys=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, finish)
signal.signal(signal.SIGINT, finish)
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(512)
print(f"counting on 127.0.0.1:{port}", flush=True)
while True:
    serve(listener.accept()[0])
