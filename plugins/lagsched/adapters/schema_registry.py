"""A Confluent-compatible schema registry, as typed topics need it: a writer schema by its id.

Any registry speaking Confluent's REST API works the same way (Confluent's own, Apicurio under
``/apis/ccompat/v7``, Karapace, Redpanda's); it is reached only through the
``lagsched_schema_registry`` Connection (`lagsched.connections.schema_registry_params`).

What a failure means decides where a record goes, so the client tells three kinds apart:

=====================================  ===========================  ==============================
the registry's answer                  raised                       what the slot does
=====================================  ===========================  ==============================
404 with error code 40403 (no schema   `UnknownSchemaId`            the record is a dead letter: a
with this id)                                                       registry never reuses an id, so
                                                                    no retry will find one
401, 403                               `ConnectionFailure`,         stops and says so: the
                                       ``permanent=True``           Connection's credentials are
                                                                    wrong, not the record
refused, reset, timed out, 5xx, 429,   `ConnectionFailure`,         rides it through (retries, as a
an answer that is not the API's        ``permanent=False``          Kafka or MySQL outage), records
                                                                    untouched
=====================================  ===========================  ==============================

Schemas are cached by id for the client's life (an id's schema never changes); an unknown id is
not cached, so a registry restored from a backup can still answer it on a later try.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from lagsched.connections import SchemaRegistryParams, where_schema_registry
from lagsched.core.errors import ConnectionFailure, UnknownSchemaId

__all__ = [
    "SCHEMA_TYPES",
    "RegistryClient",
    "SchemaReference",
    "UnknownSchemaId",
    "WriterSchema",
]

#: The registry's schema types (an answer without ``schemaType`` is Avro, as in Confluent's API).
SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")

#: Confluent's error code for "Schema not found" (a 404 of ``GET /schemas/ids/{id}``).
_SCHEMA_NOT_FOUND = 40403
_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
#: Statuses a retry can heal: the registry or what stands in front of it is busy or restarting.
_TRANSIENT_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
#: The most of a registry's error body that goes into a message.
_BODY_CHARS = 300


@dataclass(frozen=True, slots=True)
class SchemaReference:
    """A schema another one refers to by name (Avro named types, JSON Schema ``$ref``s)."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True, slots=True)
class WriterSchema:
    """The schema a record was written with, as the registry holds it under `schema_id`."""

    schema_id: int
    schema_type: str
    text: str
    references: tuple[SchemaReference, ...] = ()

    def parsed(self) -> Any:
        """The schema as JSON (Avro and JSON Schema are JSON documents; a bare Avro type name too)."""
        return json.loads(self.text)


def writer_schema(schema_id: int, answer: Mapping[str, Any]) -> WriterSchema:
    """A `WriterSchema` from the registry's answer to ``GET /schemas/ids/{id}``.

    >>> writer_schema(7, {"schema": '{"type": "string"}'})
    WriterSchema(schema_id=7, schema_type='AVRO', text='{"type": "string"}', references=())
    >>> writer_schema(8, {"schema": "{}", "schemaType": "JSON",
    ...                   "references": [{"name": "a.json", "subject": "a", "version": 2}]}).references
    (SchemaReference(name='a.json', subject='a', version=2),)
    """
    text = answer.get("schema")
    kind = str(answer.get("schemaType") or "AVRO").upper()
    if not isinstance(text, str) or kind not in SCHEMA_TYPES:
        raise ValueError(f"not a schema: {dict(answer)!r:.{_BODY_CHARS}}")
    references = tuple(
        SchemaReference(str(r["name"]), str(r["subject"]), int(r["version"])) for r in answer.get("references") or ()
    )
    return WriterSchema(schema_id, kind, text, references)


class RegistryClient:
    """The registry calls lagsched makes, over plain HTTP(S) from the standard library.

    Thread-safe: a Spark task's decoders share one client, and so its cache.
    """

    def __init__(self, params: SchemaRegistryParams, *, timeout_s: float = 10.0) -> None:
        self.params = params
        self.timeout_s = timeout_s
        self._cache: dict[int, WriterSchema] = {}
        self._lock = threading.Lock()
        self._context = _tls_context(params) if params.uses_tls else None
        self._auth = (
            "Basic " + base64.b64encode(f"{params.username}:{params.password or ''}".encode()).decode()
            if params.username is not None
            else None
        )

    @property
    def cached(self) -> int:
        """How many schemas the client holds (resolved once each)."""
        return len(self._cache)

    def known(self) -> dict[int, WriterSchema]:
        """The schemas resolved so far, by id (no call to the registry)."""
        with self._lock:
            return dict(self._cache)

    def seed(self, schemas: Mapping[int, WriterSchema]) -> None:
        """Take schemas resolved elsewhere (the driver's, for a task): an id never changes its schema."""
        with self._lock:
            for schema_id, found in schemas.items():
                self._cache.setdefault(schema_id, found)

    def schema(self, schema_id: int) -> WriterSchema:
        """The writer schema with id `schema_id`, from the cache or the registry.

        Raises:
            UnknownSchemaId: the registry has no schema with this id.
            ConnectionFailure: the registry could not answer (``permanent`` as the module says).
        """
        found = self._cache.get(schema_id)
        if found is not None:
            return found
        try:
            answer = self._call("GET", f"/schemas/ids/{int(schema_id)}")
        except _NotFound as exc:
            raise UnknownSchemaId(
                f"the schema registry ({where_schema_registry(self.params)}) has no schema with id {schema_id}"
                f"{exc.detail}",
                schema_id=schema_id,
            ) from None
        try:
            found = writer_schema(schema_id, answer)
        except (ValueError, KeyError, TypeError) as exc:
            raise self._failure(f"answered GET /schemas/ids/{schema_id} with {exc}", permanent=False) from None
        with self._lock:
            self._cache[schema_id] = found
        return found

    def register(
        self, subject: str, text: str, schema_type: str = "AVRO", references: Sequence[SchemaReference] = ()
    ) -> int:
        """Register `text` under `subject` (a new version if it is new); its id. For the demo and tests'
        producers and for operators' tools: the slots only read."""
        body: dict[str, Any] = {"schema": text}
        if schema_type.upper() != "AVRO":
            body["schemaType"] = schema_type.upper()
        if references:
            body["references"] = [{"name": r.name, "subject": r.subject, "version": r.version} for r in references]
        answer = self._call("POST", f"/subjects/{quote(subject, safe='')}/versions", body)
        return int(answer["id"])

    def check(self) -> dict[str, Any]:
        """What the Test button and the setup DAG show: the global compatibility level and the subjects."""
        config = self._call("GET", "/config")
        subjects = self._call("GET", "/subjects")
        level = config.get("compatibilityLevel") or config.get("compatibility") if isinstance(config, dict) else None
        return {"compatibility": level or "unknown", "subjects": len(subjects) if isinstance(subjects, list) else 0}

    # ------------------------------------------------------------------------------- HTTP

    def _call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        headers = {"Accept": _CONTENT_TYPE}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = _CONTENT_TYPE
        if self._auth is not None:
            headers["Authorization"] = self._auth
        request = urllib.request.Request(self.params.url + path, data=data, headers=headers, method=method)  # noqa: S310 - the Connection's http(s) URL
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=self._context) as resp:  # noqa: S310
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raise self._http_error(method, path, exc) from None
        except (OSError, ValueError) as exc:  # refused, reset, timed out, DNS, TLS; URLError is an OSError
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise self._failure(
                    f"has a certificate that is not trusted ({reason.verify_message}); check the extra 'ssl' 'ca'",
                    permanent=True,
                ) from None
            raise self._failure(f"could not be reached ({type(reason).__name__}: {reason})", permanent=False) from None
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            raise self._failure(
                f"answered {method} {path} with something that is not JSON ({raw[:80]!r}); is the path right?",
                permanent=False,
            ) from None

    def _http_error(self, method: str, path: str, exc: urllib.error.HTTPError) -> Exception:
        try:
            text = exc.read(_BODY_CHARS * 4).decode(errors="replace")
        except OSError:
            text = ""
        try:
            error = json.loads(text)
        except ValueError:
            error = {}
        code = error.get("error_code") if isinstance(error, dict) else None
        message = (error.get("message") if isinstance(error, dict) else None) or text[:_BODY_CHARS]
        if exc.code == 404 and code == _SCHEMA_NOT_FOUND:
            return _NotFound(f" ({message})" if message else "")
        if exc.code in (401, 403):
            return self._failure(
                f"refused the credentials ({exc.code}: {message}); fix login and password in Admin > Connections",
                permanent=True,
            )
        permanent = exc.code not in _TRANSIENT_STATUSES
        hint = "; is the Connection's schema (the API's path) right?" if exc.code == 404 else ""
        return self._failure(f"answered {method} {path} with {exc.code} ({message}){hint}", permanent=permanent)

    def _failure(self, what: str, *, permanent: bool) -> ConnectionFailure:
        return ConnectionFailure(
            f"Connection {self.params.conn_id!r} ({where_schema_registry(self.params)}): the schema registry {what}",
            conn_id=self.params.conn_id,
            permanent=permanent,
        )


class _NotFound(Exception):
    """A 404 meaning "no such schema" (not "no such path"): turned into `UnknownSchemaId` by the caller."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def _tls_context(params: SchemaRegistryParams) -> ssl.SSLContext:
    tls = dict(params.tls)
    context = ssl.create_default_context(cafile=tls.get("ca"))
    if "cert" in tls:
        context.load_cert_chain(tls["cert"], tls.get("key"))
    return context
