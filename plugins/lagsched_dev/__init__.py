"""The developer's tooling around lagsched: the local stack, the demo and its load generator, the
benchmarks and the policy simulator. It imports the runtime (`lagsched`), never the reverse
(tests/unit/test_layering.py), so a deployment needs none of it."""
