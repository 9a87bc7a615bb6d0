"""``python -m lagsched_dev.sim``: the simulator without the ``lagsched`` command."""

from __future__ import annotations

import argparse
import sys

from lagsched_dev.sim.cli import add_arguments, run


def main(argv: list[str] | None = None) -> int:
    """Parse `argv` (default: sys.argv[1:]) and run the simulation."""
    parser = argparse.ArgumentParser(prog="python -m lagsched_dev.sim", description=run.__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
