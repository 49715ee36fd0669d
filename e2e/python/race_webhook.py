"""A validating admission webhook that plays "another manager": when the real (not dry-run)
create of a ConfigMap named as a trigger is admitted, it first creates that trigger's victim
itself with kubectl (data owner=someone-else), so the next write of a plan that also creates
the victim meets an object that did not exist when the plan was checked. Dry runs are left
alone (sideEffects: NoneOnDryRun). Standard library only.

Usage: race_webhook.py PORT CERT KEY KUBECONFIG NAMESPACE TRIGGER=VICTIM[,TRIGGER=VICTIM...]
Prints "ready" once it listens; each side effect is printed as "created VICTIM".
"""

import json
import ssl
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, CERT, KEY, KUBECONFIG, NAMESPACE, PAIRS = sys.argv[1:7]
VICTIMS = dict(pair.split("=", 1) for pair in PAIRS.split(","))


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        request = review["request"]
        victim = VICTIMS.get(request.get("name"))
        if victim and not request.get("dryRun"):
            subprocess.run(
                ["kubectl", "--kubeconfig", KUBECONFIG, "-n", NAMESPACE, "create", "configmap",
                 victim, "--from-literal=owner=someone-else"],
                check=True, capture_output=True)
            print(f"created {victim}", flush=True)
        body = json.dumps({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": request["uid"], "allowed": True},
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", int(PORT)), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(CERT, KEY)
server.socket = context.wrap_socket(server.socket, server_side=True)
print("ready", flush=True)
server.serve_forever()
