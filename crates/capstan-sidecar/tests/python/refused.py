"""Refused requests as Python's http.client sends them: the headers first, the body a moment
later. Prints one JSON line per request: the status and body read, or the error met.

Usage: refused.py SOCKET
"""

import http.client
import json
import socket
import sys
import time


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost")
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


BODY = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "refused", "version": "1"}}}).encode()

# Each refused before the sidecar needs the body: a project that is not a project name, no
# project, a malformed Authorization header, another Host.
CASES = [
    ("Not_A_Project", None, "localhost"),
    ("a/b", None, "localhost"),
    ("..", None, "localhost"),
    ("UPPER", None, "localhost"),
    ("x" * 300, None, "localhost"),
    (None, None, "localhost"),
    ("demo-project", "Basic dXNlcg==", "localhost"),
    ("demo-project", "Bearer", "localhost"),
    ("demo-project", None, "evil.example"),
    ("a..b", None, "localhost"),
]

for project, authorization, host in CASES:
    connection = UnixConnection(sys.argv[1])
    try:
        connection.putrequest("POST", "/mcp", skip_host=True)
        connection.putheader("Host", host)
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Accept", "application/json, text/event-stream")
        connection.putheader("Content-Length", str(len(BODY)))
        if project is not None:
            connection.putheader("X-Capstan-Project", project)
        if authorization is not None:
            connection.putheader("Authorization", authorization)
        connection.endheaders()
        # The body follows the headers after a moment, as it does from a busy client.
        time.sleep(0.2)
        connection.send(BODY)
        response = connection.getresponse()
        print(json.dumps({"status": response.status, "body": response.read().decode()}))
    except OSError as error:
        print(json.dumps({"error": type(error).__name__ + ": " + str(error)}))
    finally:
        connection.close()
    sys.stdout.flush()
