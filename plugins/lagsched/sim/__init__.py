"""Policy simulator: the real evaluator against simulated topics in fast time.

`lagsched.sim.engine.simulate` runs one trace under one policy; `lagsched.sim.report` runs the grid
and writes the results JSON and plots; `lagsched.sim.cli` is the ``lagsched simulate`` command
(also ``python -m lagsched.sim``). See docs/simulator.md.
"""
