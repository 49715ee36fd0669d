"""The HTTP client the test scripts reach an MCP endpoint with: a URL (a server directly) or a
socket path (the sidecar, addressed as localhost), with the project header and, when given,
the caller's token."""

import httpx2


def http_target(target: str, project: str, token: str = "") -> tuple[httpx2.AsyncClient, str]:
    headers = {"X-Capstan-Project": project}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if target.startswith("http"):
        return httpx2.AsyncClient(headers=headers, timeout=30), target
    transport = httpx2.AsyncHTTPTransport(uds=target)
    return httpx2.AsyncClient(transport=transport, headers=headers, timeout=30), "http://localhost/mcp"
