"""A Hugging Face hub on loopback, for `HF_ENDPOINT`: one repo whose commits each serve a real
checkpoint folder, through the two routes `huggingface_hub.snapshot_download` and
`rigs.sources.hub_commit` take (the model info of a revision; a file at a commit, HEAD and GET).
`main` can move to the next commit when the first file is downloaded: a push during a sweep."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


class FakeHub:
    def __init__(self, repo: str, checkpoint: Path, commits: list[str], *, push: bool) -> None:
        self.repo, self.checkpoint, self.commits = repo, checkpoint, commits
        self.main = commits[0]
        self.push = push  # main moves to the next commit at the first download
        self.downloads: list[str] = []  # the commit of every file served
        self.files = sorted(p.name for p in checkpoint.iterdir() if p.is_file())
        self._lock = threading.Lock()

    def commit_of(self, revision: str) -> str | None:
        if revision == "main":
            return self.main
        return revision if revision in self.commits else None

    def downloaded(self, commit: str) -> None:
        with self._lock:
            self.downloads.append(commit)
            if self.push and len(self.downloads) == 1:
                self.main = self.commits[self.commits.index(self.main) + 1]


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    info_prefix = f"/api/models/{hub.repo}/revision/"
    file_prefix = f"/{hub.repo}/resolve/"

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            pass

        def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            for name, value in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _missing(self) -> None:
            body = json.dumps({"error": "Revision Not Found"}).encode()
            self._reply(404, body, {"X-Error-Code": "RevisionNotFound"})

        def do_GET(self) -> None:
            path = unquote(urlsplit(self.path).path)
            if path.startswith(info_prefix):
                commit = hub.commit_of(path.removeprefix(info_prefix))
                if commit is None:
                    return self._missing()
                siblings = [{"rfilename": name} for name in hub.files]
                body = {"id": hub.repo, "modelId": hub.repo, "sha": commit, "siblings": siblings}
                return self._reply(200, json.dumps(body).encode(), {})
            if path.startswith(file_prefix):
                revision, _, name = path.removeprefix(file_prefix).partition("/")
                commit = hub.commit_of(revision)
                if commit is None or name not in hub.files:
                    return self._missing()
                data = (hub.checkpoint / name).read_bytes()
                if self.command == "GET":
                    hub.downloaded(commit)
                etag = f'"{hashlib.sha256(data).hexdigest()}"'
                return self._reply(200, data, {"X-Repo-Commit": commit, "ETag": etag})
            return self._missing()

        do_HEAD = do_GET

    return Handler


@contextmanager
def serve_hub(hub: FakeHub) -> Iterator[str]:
    """The hub on a free loopback port; yields its URL (HF_ENDPOINT)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
