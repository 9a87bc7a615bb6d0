"""Names users give lagsched: Kafka topic names and registry cluster names. Pure rules.

Example:
    >>> validate_topic_name("orders.v2_eu-west")
    'orders.v2_eu-west'
"""

from __future__ import annotations

import re

from lagsched.core.errors import TopicNameError

__all__ = ["MAX_CLUSTER_NAME", "MAX_TOPIC_NAME", "validate_cluster_name", "validate_topic_name"]

_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
MAX_TOPIC_NAME = 249  # Kafka's limit
MAX_CLUSTER_NAME = 255  # topics.cluster VARCHAR(255)


def validate_topic_name(name: str) -> str:
    """Return ``name`` if Kafka would accept it as a topic name, else raise ``TopicNameError``."""
    if (
        not isinstance(name, str)
        or not 1 <= len(name) <= MAX_TOPIC_NAME
        or not _LEGAL.fullmatch(name)
        or name in {".", ".."}
    ):
        raise TopicNameError(
            f"topic name {name!r} is not legal in Kafka: use 1 to {MAX_TOPIC_NAME} characters from "
            "[a-zA-Z0-9._-], and not '.' or '..'"
        )
    return name


def validate_cluster_name(name: str) -> str:
    """Cluster names label rows only, but follow the same alphabet so they are safe in logs and keys."""
    if not isinstance(name, str) or not name or len(name) > MAX_CLUSTER_NAME or not _LEGAL.fullmatch(name):
        raise TopicNameError(
            f"cluster name {name!r} is not usable: use 1 to {MAX_CLUSTER_NAME} characters from [a-zA-Z0-9._-]"
        )
    return name
