"""`lagsched-dev`: the developer's command line: the local stack, Kafka's own tools, the simulator,
the benchmarks, the demo and its load generator. The runtime's own commands (status, overrides)
are `lagsched` (`lagsched.cli`), which never imports this package.

Every subcommand imports its module only when it runs, so ``lagsched-dev --help`` is quick and a
subcommand whose dependencies are broken does not take the others down with it.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from lagsched.cli import add_delegated, configure_logging
from lagsched_dev.stack.process import ServiceError


class _StackProgress(logging.Handler):
    """Turns the stack's "<service> up ..." log lines into progress: one bar step per service."""

    def __init__(self, progress: Any) -> None:
        super().__init__(logging.INFO)
        self._progress = progress

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        name, _, rest = message.partition(" ")
        if rest.lstrip().startswith("up "):
            self._progress.note("  " + " ".join(message.split()))
            self._progress.advance(detail=f"{name} up")
        else:
            self._progress.note("  " + message)


def start_stack(cfg: Any, *, airflow: bool = False, spark_cluster: bool = False, prometheus: bool = False) -> list[Any]:
    """`lagsched_dev.stack.up` with a progress bar: services started so far, the elapsed time, each one's detail."""
    from lagsched_dev import stack
    from lagsched_dev.progress import Progress
    from lagsched_dev.stack.services import core_services, spark_cluster_services

    total = len(core_services(cfg)) + (1 if airflow else 0) + (1 if prometheus else 0)
    celery = airflow and cfg.airflow_executor == "celery"
    if celery:
        total += 3 + cfg.celery_workers  # scheduler, DAG processor, triggerer, the workers
    if spark_cluster:
        _master, workers = spark_cluster_services(cfg)
        total += 1 + len(workers)
    names = "Kafka, MariaDB, Redis, S3Proxy, schema registry"
    names += (", Airflow" if airflow else "") + (f" with {cfg.celery_workers} Celery workers" if celery else "")
    names += ", Spark cluster" if spark_cluster else ""
    names += ", Prometheus" if prometheus else ""
    logger = logging.getLogger("lagsched_dev.stack")
    with Progress(f"starting {names}", total=total, stream=sys.stdout) as progress:
        progress.tick_every(0.5)
        handler = _StackProgress(progress)
        logger.addHandler(handler)
        # The bar shows the services' lines instead of the log, whatever logging is configured.
        propagate, logger.propagate = logger.propagate, False
        level = logger.level
        logger.setLevel(logging.INFO)
        try:
            return stack.up(cfg, airflow=airflow, spark_cluster=spark_cluster, prometheus=prometheus)
        finally:
            logger.removeHandler(handler)
            logger.propagate = propagate
            logger.setLevel(level)


def _stack(args: argparse.Namespace) -> int:
    from lagsched_dev import stack
    from lagsched_dev.stack.config import load, with_celery
    from lagsched_dev.stack.environment import stack_environment

    cfg = load()
    if args.celery or args.celery_workers is not None:
        try:
            cfg = with_celery(cfg, args.celery_workers)
        except ValueError as exc:
            raise SystemExit(f"lagsched-dev: {exc}") from None
    if args.celery and args.action == "up" and not args.airflow:
        raise SystemExit("lagsched-dev: --celery goes with `stack up --airflow`")
    if args.only_spark_cluster and args.action not in ("up", "down"):
        raise SystemExit("lagsched-dev: --only-spark-cluster goes with `stack up` or `stack down`")
    if args.action == "up" and args.only_spark_cluster:
        statuses = stack.spark_cluster_up(cfg)
    elif args.action == "up":
        statuses = start_stack(cfg, airflow=args.airflow, spark_cluster=args.spark_cluster, prometheus=args.prometheus)
        if args.racks:
            from lagsched_dev.stack import kafka_cluster

            statuses = [*statuses, *kafka_cluster.up(cfg)]
    elif args.action == "down":
        stopped = stack.spark_cluster_down(cfg) if args.only_spark_cluster else stack.down(cfg)
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
        return 0
    elif args.action == "env":
        # For `eval "$(lagsched-dev stack env)"`: contains the local stack's generated password.
        for key, value in stack_environment(cfg).items():
            print(f"export {key}={shlex.quote(value)}")
        return 0
    else:
        statuses = stack.status(cfg)
        if args.racks:
            from lagsched_dev.stack import kafka_cluster

            statuses = [*statuses, *kafka_cluster.status(cfg)]
    width = max(len(s.name) for s in statuses)
    for s in statuses:
        state = "healthy" if s.healthy else ("running, not healthy" if s.running else "stopped")
        print(f"{s.name:<{width}}  {state:<22} {s.detail}")
    print(f"data and logs: {cfg.home}")
    from lagsched_dev.stack.services import core_services

    core = len(core_services(cfg))
    return 0 if args.action != "status" or all(s.healthy for s in statuses[:core]) else 1


def _kafka_tool(args: argparse.Namespace) -> int:
    """Run one of Kafka's own tools against the local stack, its output straight to the terminal."""
    import subprocess

    from lagsched_dev.kafka_tools import KafkaToolError, tool_command, with_bootstrap
    from lagsched_dev.stack.config import load

    tool_args = list(args.tool_args)
    if tool_args[:1] == ["--"]:
        tool_args = tool_args[1:]
    if not args.no_bootstrap:
        tool_args = with_bootstrap(args.tool, tool_args, load().kafka_bootstrap)
    try:
        argv = tool_command(args.tool, tool_args)
    except KafkaToolError as exc:
        print(f"lagsched-dev: {exc}", file=sys.stderr)
        return 2
    try:
        return subprocess.run(argv, check=False).returncode  # noqa: S603 - the operator's own arguments
    except KeyboardInterrupt:  # the tool got the same SIGINT (one process group) and stopped
        return 130


def _bench(args: argparse.Namespace) -> int:
    from lagsched_dev.bench.__main__ import BENCHMARKS
    from lagsched_dev.bench.__main__ import main as run_benchmarks

    known = {name for name, _ in BENCHMARKS}
    unknown = [name for name in args.benchmarks if name not in known]
    if unknown:
        print(f"lagsched-dev bench: unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(sorted(known))}")
        return 2
    return run_benchmarks(list(args.benchmarks))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    parser = argparse.ArgumentParser(prog="lagsched-dev", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    p_stack = sub.add_parser("stack", help="start, stop or inspect the local Kafka/MariaDB/Redis/Airflow stack")
    p_stack.add_argument("action", choices=["up", "down", "status", "env"])
    p_stack.add_argument("--airflow", action="store_true", help="with `up`: also start `airflow standalone`")
    p_stack.add_argument(
        "--celery",
        action="store_true",
        help="with `up --airflow`, `status` or `env`: Airflow with the CeleryExecutor and separate workers "
        "(as LAGSCHED_AIRFLOW_EXECUTOR=celery; docs/celery.md)",
    )
    p_stack.add_argument(
        "--celery-workers",
        type=int,
        metavar="N",
        help="with --celery: how many Celery workers (default 2, as LAGSCHED_CELERY_WORKERS)",
    )
    p_stack.add_argument(
        "--spark-cluster",
        action="store_true",
        help="with `up`: also start a Spark standalone master and workers on loopback (docs/spark-cluster.md)",
    )
    p_stack.add_argument(
        "--prometheus",
        action="store_true",
        help="with `up`: also start a Prometheus server that scrapes /lagsched/metrics and evaluates the shipped "
        "alert rules (docs/prometheus.md)",
    )
    p_stack.add_argument(
        "--only-spark-cluster",
        action="store_true",
        help="with `up` or `down`: start or stop the Spark standalone cluster alone",
    )
    p_stack.add_argument(
        "--racks",
        action="store_true",
        help="with `up` or `status`: also the 3-broker Kafka cluster in racks a, b, c (docs/rack.md); "
        "`down` stops it whenever it runs",
    )
    p_stack.set_defaults(func=_stack)

    from lagsched_dev.kafka_tools import TOOLS

    p_tool = sub.add_parser(
        "kafka-tool",
        help="run one of Kafka's own CLI tools (kafka-<tool>.sh) against the local stack",
        description="Runs Kafka's own tool with the jars `make deps` fetched, e.g. "
        "`lagsched-dev kafka-tool consumer-groups -- --describe --group lagsched.default`. "
        "--bootstrap-server defaults to the local stack's broker.",
    )
    p_tool.add_argument("tool", choices=sorted(TOOLS), help="the tool, named as its kafka-<tool>.sh script")
    p_tool.add_argument(
        "--no-bootstrap", action="store_true", help="do not add --bootstrap-server (for tools that take none)"
    )
    p_tool.add_argument("tool_args", nargs=argparse.REMAINDER, help="the tool's own arguments, after `--`")
    p_tool.set_defaults(func=_kafka_tool)

    add_delegated(
        sub,
        "simulate",
        "lagsched_dev.sim.cli",
        chosen,
        help="run the scaling policies against simulated topics in fast time",
    )

    p_bench = sub.add_parser(
        "bench",
        help="run the benchmarks (all, or the modules named); JSON under bench/results/",
        description="Runs lagsched_dev.bench (as `make bench`); claims and consumer need the local stack running.",
    )
    p_bench.add_argument("benchmarks", nargs="*", help="benchmark modules, e.g. lagsched_dev.bench.assignment")
    p_bench.set_defaults(func=_bench)

    add_delegated(
        sub,
        "demo",
        "lagsched_dev.demo",
        chosen,
        help="start everything, produce uneven traffic and watch lagsched scale (make demo)",
    )
    add_delegated(
        sub,
        "loadgen",
        "lagsched_dev.loadgen",
        chosen,
        help="produce the demo's uneven traffic (one hot topic, trickles, an idle one) to Kafka",
    )

    args = parser.parse_args(argv)
    configure_logging(verbose=args.verbose)
    try:
        return int(args.func(args))
    except ServiceError as exc:
        print(f"lagsched-dev: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
