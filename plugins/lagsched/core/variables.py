"""The Airflow Variables lagsched reads, one way: each is a frozen pydantic model, read by the same steps.

``lagsched_settings`` (`lagsched.core.config`), ``lagsched_clusters`` (`lagsched.core.clusters`),
``lagsched_retention`` (`lagsched.core.retention`) and ``lagsched_table_care``
(`lagsched.core.table_care`) each have one model, built on `VariableModel`, and one parser that runs
`decode` (strict JSON: a syntax error or a key given twice is refused; None or blank is "not set"),
`require_object`, then `validate`. A bad Variable raises one `ConfigError` naming every bad field as
``path = value: what is allowed``, with the bounds of a number spelled out; ``field``, ``value`` and
``allowed`` describe the first. Pure.

Example:
    >>> from pydantic import Field
    >>> class Knobs(VariableModel):
    ...     batch_rows: int = Field(default=5000, ge=100, le=100_000)
    >>> validate(Knobs, require_object(decode('{"batch_rows": 200}', "knobs"), "knobs"), "knobs")
    Knobs(batch_rows=200)
    >>> validate(Knobs, {"batch_rows": 1, "rows": 2}, "knobs")
    Traceback (most recent call last):
    ...
    lagsched.core.errors.ConfigError: invalid knobs: batch_rows = 1: Input should be greater than or equal to 100 \
(allowed: an integer number of rows from 100 to 100,000); rows = 2: unknown field; ...
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, TypeVar

import annotated_types
from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError
from pydantic.fields import FieldInfo

from lagsched.core import variable_json
from lagsched.core.errors import ConfigError
from lagsched.core.names import validate_topic_name
from lagsched.core.variable_json import short_repr

__all__ = [
    "TopicName",
    "VariableModel",
    "config_error",
    "decode",
    "joined",
    "number_text",
    "require_object",
    "validate",
]

TopicName = Annotated[str, AfterValidator(validate_topic_name)]
"""A field holding a legal Kafka topic name (`lagsched.core.names.validate_topic_name`)."""

#: A day in seconds: a duration field's bounds are also given in days from here on.
DAY = 86_400.0

M = TypeVar("M", bound=BaseModel)

#: A field's unit, by the end of its name, for the bounds an error gives (``_s``: seconds, which the
#: numbers say in days too when they reach a day).
_UNITS = {"_days": "days", "_hours": "hours", "_minutes": "minutes", "_rows": "rows", "_mb": "MiB"}


class VariableModel(BaseModel):
    """The base of every Variable's model (and of its nested objects)."""

    # strict: an int field takes only a JSON integer (not true, "50000" or 4.0); a float field takes
    # a JSON number (integers included). allow_inf_nan: NaN and ±Infinity (which Python's json
    # accepts, as the tokens or as an overflowing literal like 1e400) are never a setting.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


def decode(raw: str | bytes | Mapping[str, Any] | None, label: str, *, root: str = "(root)") -> object | None:
    """The Variable's value: None when it is not set (None, or blank text), a mapping as given, else the
    JSON text decoded strictly (`lagsched.core.variable_json.loads`)."""
    if raw is None or isinstance(raw, Mapping):
        return raw
    text = raw.decode() if isinstance(raw, bytes) else raw
    if not text.strip():
        return None
    return variable_json.loads(text, label, root=root)


def require_object(data: object, label: str, *, allowed: str = "a JSON object") -> Mapping[str, Any]:
    """``data`` if it is a JSON object, else the `ConfigError` that says so."""
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"invalid {label}: (root) = {short_repr(data)}: expected {allowed}, got {type(data).__name__}",
            field="(root)",
            value=data,
            allowed=allowed,
        )
    return data


def joined(errors: Sequence[ConfigError], label: str) -> ConfigError:
    """One `ConfigError` listing each of ``errors`` (each ``invalid <label>: ...`` or a bare problem);
    ``field``, ``value`` and ``allowed`` are the first one's."""
    first = errors[0]
    detail = "; ".join(str(e).removeprefix(f"invalid {label}: ") for e in errors)
    return ConfigError(f"invalid {label}: {detail}", field=first.field, value=first.value, allowed=first.allowed)


def validate(model: type[M], data: Mapping[str, Any], label: str, *, prefix: tuple[str, ...] = ()) -> M:
    """``data`` as ``model``, or one `ConfigError` naming every problem (paths under ``prefix``)."""
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        raise config_error(exc, model, label, prefix) from None


def config_error(exc: ValidationError, model: type[BaseModel], label: str, prefix: tuple[str, ...] = ()) -> ConfigError:
    """One `ConfigError` for all of pydantic's errors, each as ``path = value: what is allowed``."""
    parts: list[str] = []
    first_field, first_value, first_allowed = "", None, ""
    for i, err in enumerate(exc.errors(include_url=False)):
        loc = tuple(str(p) for p in err["loc"])
        is_key = bool(loc) and loc[-1] == "[key]"  # a bad dict key, e.g. an illegal topic name
        if is_key:
            loc = loc[:-1]
        path = _path((*prefix, *loc))
        allowed = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            allowed = "unknown field; remove it or fix its spelling (see docs/configuration.md)"
        elif err["type"] != "value_error":  # a relation's message already says what is allowed
            field = field_at(model, loc)
            if field is not None and (bounds := bounds_text(field, loc[-1])):
                allowed = f"{allowed} (allowed: {bounds})"
        value = err.get("input")
        if err["type"] == "missing":
            parts.append(f"{path}: {allowed}")
        elif is_key:
            parts.append(f"{path}: key {short_repr(value)}: {allowed}")
        else:
            parts.append(f"{path} = {short_repr(value)}: {allowed}")
        if i == 0:
            first_field, first_value, first_allowed = path, value, allowed
    return ConfigError(
        f"invalid {label}: " + "; ".join(parts), field=first_field, value=first_value, allowed=first_allowed
    )


def _path(loc: tuple[str, ...]) -> str:
    """``eu.topics[1]``: a field path as the Variable's JSON nests it (an item of a list by its index).

    >>> _path(("eu", "topics", "1")), _path(())
    ('eu.topics[1]', '(root)')
    """
    out = ""
    for part in loc:
        out += f"[{part}]" if part.isdigit() and out else (f".{part}" if out else part)
    return out or "(root)"


def field_at(model: type[BaseModel], loc: tuple[str, ...]) -> FieldInfo | None:
    """The model field `loc` points at (through nested models), or None."""
    current: Any = model
    info: FieldInfo | None = None
    for part in loc:
        if not (isinstance(current, type) and issubclass(current, BaseModel)) or part not in current.model_fields:
            return None
        info = current.model_fields[part]
        current = info.annotation
    return info


def bounds_text(field: FieldInfo, name: str) -> str:
    """``an integer from 1 to 10,000`` for a bounded number field, ``""`` for any other field."""
    annotation = field.annotation
    if annotation in (int, int | None):
        kind = "an integer"
    elif annotation in (float, float | None):
        kind = "a finite number"
    else:
        return ""
    unit = next((u for suffix, u in _UNITS.items() if name.endswith(suffix)), None)
    if unit:
        kind = f"{'an integer number' if kind == 'an integer' else kind} of {unit}"
    low = high = ""
    for meta in field.metadata:
        if isinstance(meta, annotated_types.Ge):
            low = f">= {number_text(meta.ge, name)}"
        elif isinstance(meta, annotated_types.Gt):
            low = f"> {number_text(meta.gt, name)}"
        elif isinstance(meta, annotated_types.Le):
            high = f"<= {number_text(meta.le, name)}"
        elif isinstance(meta, annotated_types.Lt):
            high = f"< {number_text(meta.lt, name)}"
    if low.startswith(">=") and high.startswith("<="):
        text = f"{kind} from {low[3:]} to {high[3:]}"
    else:
        text = " and ".join(part for part in (f"{kind} {low}".rstrip(), high) if part)
    return text + (" or null" if annotation in (int | None, float | None) else "")


def number_text(value: Any, name: str = "") -> str:
    """``1,000``, ``0.5``; a duration field (``*_s``) of a day or more also in days.

    >>> number_text(172800, "sample_ttl_s"), number_text(0.25)
    ('172,800 (2 days)', '0.25')
    """
    text = f"{int(value):,}" if float(value).is_integer() else f"{value:g}"
    if name.endswith("_s") and value >= DAY:
        days = value / DAY
        text += f" ({days:g} day{'s' if days != 1 else ''})"
    return text
