#!/usr/bin/env bash
# Installs what lagsched needs, idempotently: Debian packages (MariaDB, Redis, a JDK, Maven), the
# Python virtualenv from requirements.lock, and the Kafka broker and Spark connector jars from Maven
# Central. Each step checks what is already there, so a second run downloads nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${VENV:-$ROOT/.venv}
LAGSCHED_HOME=${LAGSCHED_HOME:-$ROOT/.local}
JARS=$LAGSCHED_HOME/jars

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
hash_of() { cat "$@" | sha256sum | cut -c1-16; }

# 1. Debian packages. apt does not start the services (no systemd); `lagsched stack up` does.
need=()
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
command -v mariadb >/dev/null 2>&1 || need+=(mariadb-client)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
if [ ${#need[@]} -gt 0 ]; then
  say "installing Debian packages: ${need[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

# 2. The virtualenv, rebuilt only when requirements.lock or pyproject.toml change.
want=$(hash_of requirements.lock pyproject.toml)
if [ "$(cat "$VENV/.lagsched-stamp" 2>/dev/null)" != "$want" ]; then
  PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
    || { echo "lagsched needs Python 3.11 (found $("$PYTHON" --version)); set PYTHON=" >&2; exit 1; }
  say "creating the virtualenv in $VENV (first time: a few minutes; pyspark builds from source)"
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r requirements.lock
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
  echo "$want" > "$VENV/.lagsched-stamp"
fi

# 3. Jars: the Kafka broker, and Spark's Kafka connector (only what Spark does not ship itself).
want=$(hash_of deps/kafka/pom.xml deps/spark-kafka/pom.xml)
if [ "$(cat "$JARS/.stamp" 2>/dev/null)" != "$want" ]; then
  say "fetching the Kafka broker and Spark connector jars into $JARS"
  rm -rf "$JARS/kafka" "$JARS/spark"
  mvn -q -B -f deps/kafka/pom.xml dependency:copy-dependencies \
    -DoutputDirectory="$JARS/kafka" -DincludeScope=runtime
  mvn -q -B -f deps/spark-kafka/pom.xml dependency:copy-dependencies \
    -DoutputDirectory="$JARS/spark" -DincludeScope=runtime \
    -DincludeArtifactIds=spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2
  echo "$want" > "$JARS/.stamp"
fi
say "dependencies ready"
