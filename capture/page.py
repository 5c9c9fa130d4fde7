"""The live view page's response headers: a Content-Security-Policy that lets only the page's
own inline script and style run (by their SHA-256, so an injected one does not), fetch only
from this server, show only the stills' blob: URLs, and be framed by no site; and no MIME
sniffing."""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from typing import Final

_SCRIPT_RE: Final = re.compile(r"<script>(.*?)</script>", re.DOTALL)
_STYLE_RE: Final = re.compile(r"<style>(.*?)</style>", re.DOTALL)


def _source_hash(text: str) -> str:
    digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
    return f"'sha256-{digest}'"


@functools.cache
def security_headers(page: str) -> dict[str, str]:
    scripts = " ".join(_source_hash(s) for s in _SCRIPT_RE.findall(page)) or "'none'"
    styles = " ".join(_source_hash(s) for s in _STYLE_RE.findall(page)) or "'none'"
    policy = "; ".join([
        "default-src 'none'",
        f"script-src {scripts}",
        f"style-src {styles}",
        "img-src blob:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ])
    return {
        "Content-Security-Policy": policy,
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }
