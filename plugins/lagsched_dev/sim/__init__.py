"""Policy simulator: the real evaluator against simulated topics in fast time.

`lagsched_dev.sim.engine.simulate` runs one trace under one policy; `lagsched_dev.sim.report` runs the grid
and writes the results JSON and plots; `lagsched_dev.sim.cli` is the ``lagsched-dev simulate`` command
(also ``python -m lagsched_dev.sim``). See docs/simulator.md.
"""
