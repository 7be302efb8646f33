"""The visualizer's HTTP server: on 127.0.0.1 only, started on demand, closable.

It serves, from one folder, the page of a record (`/smc.html?path=NAME`, rendered
from the record file `NAME` of the folder, as genlm-control 0.4.1's URLs read), a
list of the folder's records (`/smc.html`) and the folder's files by name (`/NAME`);
nothing outside the folder, nothing else.
"""

from __future__ import annotations

import errno
import http.server
import threading
import urllib.parse
from pathlib import Path
from typing import Callable

HOST = "127.0.0.1"


def _handler(folder: Path, render: Callable[[Path], str], index: Callable[[Path], str]) -> type:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # quiet: a notebook's output is not a log
            pass

        def _send(self, code: int, body: bytes, kind: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def _file(self, name: str) -> Path | None:
            """`name` as a regular file directly in the folder, or None."""
            if not name or "/" in name or "\\" in name or name in (".", ".."):
                return None
            path = folder / name
            return path if path.is_file() and not path.is_symlink() else None

        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            name = urllib.parse.unquote(url.path.lstrip("/"))
            if name == "smc.html":
                query = urllib.parse.parse_qs(url.query)
                if "path" not in query:  # the folder's records, each linked to its page
                    return self._send(200, index(folder).encode("utf-8"), "text/html; charset=utf-8")
                record = self._file(query["path"][0])
                if record is None:
                    return self._send(404, b"no such record in the served folder", "text/plain; charset=utf-8")
                try:
                    page = render(record)
                except (ValueError, OSError) as exc:
                    return self._send(400, str(exc).encode(), "text/plain; charset=utf-8")
                return self._send(200, page.encode("utf-8"), "text/html; charset=utf-8")
            path = self._file(name)
            if path is None:
                return self._send(404, b"not found", "text/plain; charset=utf-8")
            kind = "application/json" if path.suffix == ".json" else (
                "text/html; charset=utf-8" if path.suffix == ".html" else "application/octet-stream"
            )
            return self._send(200, path.read_bytes(), kind)

    return Handler


class PageServer:
    """A threaded HTTP server for one folder on `127.0.0.1:port` (0: a free port).

    Raises:
        OSError: "Port N is already in use" (or the system's error) when it cannot bind.
    """

    def __init__(self, port: int, folder: Path, render: Callable[[Path], str], index: Callable[[Path], str]):
        try:
            self._server = http.server.ThreadingHTTPServer((HOST, port), _handler(folder, render, index))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, 48, 98):
                raise OSError(exc.errno, f"Port {port} is already in use") from None
            raise
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="genlm-viz", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop serving and release the port (idempotent)."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._server.server_close()
            self._thread = None


__all__ = ["PageServer", "HOST"]
