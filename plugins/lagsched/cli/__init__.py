"""`lagsched` command line: the pipeline's status and manual overrides, from the deployment's
Connections. The developer's commands (the local stack, the demo, benchmarks) are `lagsched-dev`.

Every subcommand imports its module only when it runs, so ``lagsched --help`` is quick and a
subcommand whose dependencies are broken does not take the others down with it.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["add_delegated", "configure_logging", "main"]


def _delegate(module: str, function: str) -> Callable[[argparse.Namespace], int]:
    """A handler that imports ``module`` when the subcommand runs and calls its ``function(args)``."""

    def handler(args: argparse.Namespace) -> int:
        return int(getattr(importlib.import_module(module), function)(args))

    return handler


def add_delegated(sub: Any, name: str, module: str, chosen: str | None, **parser_kwargs: Any) -> None:
    """A subcommand whose options and body live in ``module`` (``add_arguments(parser)``, ``run(args)``).

    The module is imported only when ``name`` is the ``chosen`` subcommand (its options are needed
    for nothing else).
    """
    parser = sub.add_parser(name, **parser_kwargs)
    if name != chosen:
        return
    importlib.import_module(module).add_arguments(parser)
    parser.set_defaults(func=_delegate(module, "run"))


def configure_logging(*, verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not verbose:
        # Importing Airflow (for its Connections) logs its own start-up at INFO ("Reading the config
        # from ..."): noise ahead of every command's output, unless asked for with -v.
        logging.getLogger("airflow").setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    parser = argparse.ArgumentParser(prog="lagsched", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    add_delegated(
        sub,
        "status",
        "lagsched.cli.status",
        chosen,
        help="topics (lag, time lag, linker_workers, owners, state) and slots with their claims",
        description="The lagsched page's view in a terminal, from the lagsched_mysql and lagsched_redis "
        'Connections (for the local stack: eval "$(lagsched-dev stack env)").',
    )
    add_delegated(
        sub,
        "override",
        "lagsched.cli.override",
        chosen,
        help="pin a topic's linker_workers for a while, list or cancel overrides",
    )
    args = parser.parse_args(argv)
    configure_logging(verbose=args.verbose)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
