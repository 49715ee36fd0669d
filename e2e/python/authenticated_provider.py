"""A provider that authenticates every request the way a real one would, written with the
Python `mcp` SDK and serving Streamable HTTP on 127.0.0.1:<port>/mcp (docs/upstream-auth.md).

Usage: authenticated_provider.py PORT CONFIG_JSON

CONFIG_JSON names one way to verify the credential of a request:

- {"mode": "tokenreview", "apiserver": URL, "ca_file": PATH, "token_file": PATH,
   "audience": AUD}: the bearer token is a Kubernetes ServiceAccount token, verified with a
  TokenReview against the apiserver (as the provider's own account, from token_file) for
  the audience AUD; the subject is the username the review answers.
- {"mode": "keys", "keys_file": PATH, "header": NAME, "prefix": TEXT}: the header NAME
  (default authorization) must be TEXT (default "Bearer ") and one of the lines of PATH, read
  anew on every request (a rotated key is written there); the subject is "key-<line>".
- {"mode": "jwt", "jwks_url": URL, "issuer": ISS, "audience": AUD}: the bearer token is a JWT
  signed by a key of the JWKS at URL, issued by ISS for the audience AUD; the subject is its
  `sub`, and its `act` is reported.

A request that fails is answered 401 and never reaches the MCP server. The tool `whoami`
answers who the request that called it was. `GET /stats` (unauthenticated) answers
{"accepted": N, "refused": M, "calls": C, "reasons": [...], "tokens": [...]}: what the tests
count, and every bearer token accepted (so a test can look for them where they must not be).
"""

import json
import ssl
import sys
import urllib.request

import anyio
import jwt
import uvicorn

from mcp.server.mcpserver import Context, MCPServer

config = json.loads(sys.argv[2])
stats = {"accepted": 0, "refused": 0, "calls": 0, "reasons": [], "tokens": []}
# Who each credential seen was, by the header's value: what `whoami` reads back.
verified: dict[str, dict] = {}

server = MCPServer("authenticated-provider")


def _credential(headers: dict[str, str]) -> str:
    name = config.get("header", "authorization").lower()
    return headers.get(name, "")


@server.tool()
def whoami(ctx: Context) -> dict:
    """Who the request that called this tool was, as this provider verified it."""
    stats["calls"] += 1
    request = ctx.request_context.request
    headers = {k.lower(): v for k, v in request.headers.items()} if request else {}
    return verified.get(_credential(headers), {"subject": None})


@server.tool()
def streams_list() -> dict:
    """List the streams of this project."""
    stats["calls"] += 1
    return {"streams": [{"name": "orders", "state": "Healthy"}]}


def _bearer(value: str) -> str | None:
    if value[:7].lower() != "bearer ":
        return None
    return value[7:].strip() or None


def _tokenreview(value: str) -> tuple[dict | None, str]:
    token = _bearer(value)
    if token is None:
        return None, "no bearer token"
    with open(config["token_file"]) as f:
        own = f.read().strip()
    review = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token, "audiences": [config["audience"]]},
    }
    request = urllib.request.Request(
        config["apiserver"] + "/apis/authentication.k8s.io/v1/tokenreviews",
        data=json.dumps(review).encode(),
        headers={"Authorization": "Bearer " + own, "Content-Type": "application/json"},
        method="POST",
    )
    context = ssl.create_default_context(cafile=config["ca_file"])
    with urllib.request.urlopen(request, context=context, timeout=5) as answer:
        status = json.load(answer).get("status", {})
    if not status.get("authenticated"):
        return None, "tokenreview: " + status.get("error", "not authenticated")
    if config["audience"] not in status.get("audiences", []):
        return None, "tokenreview: not for this audience"
    user = status.get("user", {})
    return {"subject": user.get("username"), "audiences": status.get("audiences")}, ""


def _keys(value: str) -> tuple[dict | None, str]:
    prefix = config.get("prefix", "Bearer ")
    if not value.startswith(prefix):
        return None, "no key"
    with open(config["keys_file"]) as f:
        keys = [line.strip() for line in f if line.strip()]
    key = value[len(prefix):]
    if key not in keys:
        return None, "unknown key"
    return {"subject": f"key-{keys.index(key)}"}, ""


_jwks = None


def _jwt(value: str) -> tuple[dict | None, str]:
    global _jwks
    token = _bearer(value)
    if token is None:
        return None, "no bearer token"
    if _jwks is None:
        _jwks = jwt.PyJWKClient(config["jwks_url"])
    try:
        key = _jwks.get_signing_key_from_jwt(token)
        claims = jwt.decode(
            token,
            key.key,
            algorithms=["RS256"],
            audience=config["audience"],
            issuer=config["issuer"],
        )
    except jwt.PyJWTError as error:
        return None, f"jwt: {type(error).__name__}"
    return {"subject": claims.get("sub"), "audiences": claims.get("aud"), "act": claims.get("act")}, ""


VERIFY = {"tokenreview": _tokenreview, "keys": _keys, "jwt": _jwt}


class Authenticated:
    """Every MCP request verified before the MCP server sees it; `/stats` answered here."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["path"] == "/stats":
            return await _answer(send, 200, stats)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        value = _credential(headers)
        try:
            who, why = await anyio.to_thread.run_sync(VERIFY[config["mode"]], value)
        except Exception as error:  # a verifier that failed refuses, as a real one would
            who, why = None, f"verifying failed: {type(error).__name__}"
        if who is None:
            stats["refused"] += 1
            stats["reasons"].append(why)
            return await _answer(send, 401, {"error": why})
        stats["accepted"] += 1
        token = _bearer(value)
        if token and config["mode"] != "keys" and token not in stats["tokens"]:
            stats["tokens"].append(token)
        verified[value] = who
        await self.app(scope, receive, send)


async def _answer(send, status: int, body: dict) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": data})


if __name__ == "__main__":
    app = Authenticated(server.streamable_http_app(host="127.0.0.1"))
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
