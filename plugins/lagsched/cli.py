"""`lagsched` command line: the local stack, schema migrations and the tools built on them."""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from collections.abc import Sequence

from lagsched.stack.process import ServiceError


def _stack(args: argparse.Namespace) -> int:
    from lagsched import stack
    from lagsched.stack.config import load
    from lagsched.stack.environment import stack_environment

    cfg = load()
    if args.only_spark_cluster and args.action not in ("up", "down"):
        raise SystemExit("lagsched: --only-spark-cluster goes with `stack up` or `stack down`")
    if args.action == "up" and args.only_spark_cluster:
        statuses = stack.spark_cluster_up(cfg)
    elif args.action == "up":
        statuses = stack.up(cfg, airflow=args.airflow, spark_cluster=args.spark_cluster)
    elif args.action == "down":
        stopped = stack.spark_cluster_down(cfg) if args.only_spark_cluster else stack.down(cfg)
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
        return 0
    elif args.action == "env":
        # For `eval "$(lagsched stack env)"`: contains the local stack's generated password.
        for key, value in stack_environment(cfg).items():
            print(f"export {key}={shlex.quote(value)}")
        return 0
    else:
        statuses = stack.status(cfg)
    width = max(len(s.name) for s in statuses)
    for s in statuses:
        state = "healthy" if s.healthy else ("running, not healthy" if s.running else "stopped")
        print(f"{s.name:<{width}}  {state:<22} {s.detail}")
    print(f"data and logs: {cfg.home}")
    return 0 if args.action != "status" or all(s.healthy for s in statuses[:3]) else 1


def _kafka_tool(args: argparse.Namespace) -> int:
    """Run one of Kafka's own tools against the local stack, its output straight to the terminal."""
    import subprocess

    from lagsched.adapters.kafka_tools import KafkaToolError, tool_command, with_bootstrap
    from lagsched.stack.config import load

    tool_args = list(args.tool_args)
    if tool_args[:1] == ["--"]:
        tool_args = tool_args[1:]
    if not args.no_bootstrap:
        tool_args = with_bootstrap(args.tool, tool_args, load().kafka_bootstrap)
    try:
        argv = tool_command(args.tool, tool_args)
    except KafkaToolError as exc:
        print(f"lagsched: {exc}", file=sys.stderr)
        return 2
    try:
        return subprocess.run(argv, check=False).returncode  # noqa: S603 - the operator's own arguments
    except KeyboardInterrupt:  # the tool got the same SIGINT (one process group) and stopped
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lagsched", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    p_stack = sub.add_parser("stack", help="start, stop or inspect the local Kafka/MariaDB/Redis/Airflow stack")
    p_stack.add_argument("action", choices=["up", "down", "status", "env"])
    p_stack.add_argument("--airflow", action="store_true", help="with `up`: also start `airflow standalone`")
    p_stack.add_argument(
        "--spark-cluster",
        action="store_true",
        help="with `up`: also start a Spark standalone master and workers on loopback (docs/spark-cluster.md)",
    )
    p_stack.add_argument(
        "--only-spark-cluster",
        action="store_true",
        help="with `up` or `down`: start or stop the Spark standalone cluster alone",
    )
    p_stack.set_defaults(func=_stack)

    from lagsched.adapters.kafka_tools import TOOLS

    p_tool = sub.add_parser(
        "kafka-tool",
        help="run one of Kafka's own CLI tools (kafka-<tool>.sh) against the local stack",
        description="Runs Kafka's own tool with the jars `make deps` fetched, e.g. "
        "`lagsched kafka-tool consumer-groups -- --describe --group lagsched.default`. "
        "--bootstrap-server defaults to the local stack's broker.",
    )
    p_tool.add_argument("tool", choices=sorted(TOOLS), help="the tool, named as its kafka-<tool>.sh script")
    p_tool.add_argument(
        "--no-bootstrap", action="store_true", help="do not add --bootstrap-server (for tools that take none)"
    )
    p_tool.add_argument("tool_args", nargs=argparse.REMAINDER, help="the tool's own arguments, after `--`")
    p_tool.set_defaults(func=_kafka_tool)

    from lagsched.sim.cli import add_arguments as add_simulate_arguments
    from lagsched.sim.cli import run as run_simulate

    p_sim = sub.add_parser("simulate", help="run the scaling policies against simulated topics in fast time")
    add_simulate_arguments(p_sim)
    p_sim.set_defaults(func=run_simulate)

    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args))
    except ServiceError as exc:
        print(f"lagsched: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
