"""A second `make demo` starts where the first did: the demo topics' linker_workers go back to 1,
each with a recorded decision, and nothing else is touched (the real MariaDB)."""

from __future__ import annotations

import time
from typing import Any

from test_scaling import add_topic

from lagsched.adapters.decisions import recent_decisions
from lagsched.adapters.topics import load_topics
from lagsched_dev.demo import DEMO_CLUSTER, reset_workers


def test_the_demo_topics_go_back_to_one_worker_with_a_decision_and_the_others_stay(db: Any) -> None:
    add_topic(db, DEMO_CLUSTER, "demo.orders", workers=3)
    add_topic(db, DEMO_CLUSTER, "demo.clicks", workers=1)
    add_topic(db, DEMO_CLUSTER, "payments", workers=4)  # not a demo topic
    add_topic(db, "other", "demo.orders", workers=2)  # another cluster's topic of the same name
    now = time.time()

    reset = reset_workers(db, ["demo.orders", "demo.clicks"], now)

    assert reset == [("demo.orders", 3)]
    workers = {(t.cluster, t.name): t.linker_workers for t in load_topics(db)}
    assert workers == {
        (DEMO_CLUSTER, "demo.orders"): 1,
        (DEMO_CLUSTER, "demo.clicks"): 1,
        (DEMO_CLUSTER, "payments"): 4,
        ("other", "demo.orders"): 2,
    }
    (decision,) = recent_decisions(db, DEMO_CLUSTER)
    assert (decision.topic, decision.previous_linker_workers, decision.linker_workers) == ("demo.orders", 3, 1)
    assert (decision.policy, decision.rule) == ("manual", "demo_reset")
    # Run again (a demo restarted at once): nothing left to reset, no second decision.
    assert reset_workers(db, ["demo.orders", "demo.clicks"], now + 1) == []
    assert len(recent_decisions(db, DEMO_CLUSTER)) == 1
