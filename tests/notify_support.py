"""A real webhook for the notification tests: an HTTP server on 127.0.0.1 in a thread, and the
``lagsched_notifiers`` entry of Airflow's own HttpNotifier that posts to it through a Connection."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HTTP = "airflow.providers.http.notifications.HttpNotifier"
#: What the receiver gets: the finding rendered by the notifier's own Jinja templating.
PAYLOAD = {
    "event": "{{ finding.event }}",
    "key": "{{ finding.key }}",
    "text": "{{ finding.summary }}: {{ finding.detail }}",
    "runbook": "{{ finding.runbook }}",
}


def webhook_connection(port: int, **extra: Any) -> str:
    """An ``AIRFLOW_CONN_*`` value: an ``http`` Connection to 127.0.0.1:``port``."""
    return json.dumps({"conn_type": "http", "host": "127.0.0.1", "port": port, "schema": "http", **extra})


class Receiver:
    """A webhook on 127.0.0.1: records each JSON body; answers 500 to the next `fail_next` requests."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.all: list[dict[str, Any]] = []
        self.refused = 0
        self.fail_next = 0
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver.lock:
                    failing = receiver.fail_next > 0
                    if failing:
                        receiver.fail_next -= 1
                        receiver.refused += 1
                    else:
                        receiver.received.append({"path": self.path, **json.loads(body)})
                        receiver.all.append(receiver.received[-1])
                self.send_response(500 if failing else 200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def take(self) -> list[tuple[str, str]]:
        """(event, key) of what arrived since the last take."""
        with self.lock:
            got, self.received = self.received, []
        return [(m["event"], m["key"]) for m in got]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
