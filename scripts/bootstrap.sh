#!/usr/bin/env bash
# Installs what lagsched needs, idempotently: Debian packages (MariaDB, Redis, a JDK, Maven, promtool), the
# Python virtualenv from requirements.lock, and the Kafka broker and tools and the lake's jars for Spark
# from Maven Central. Each step checks what is already there, so a second run downloads nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${VENV:-$ROOT/.venv}
LAGSCHED_HOME=${LAGSCHED_HOME:-$ROOT/.local}
JARS=$LAGSCHED_HOME/jars

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
hash_of() { cat "$@" | sha256sum | cut -c1-16; }

# 1. Debian packages. apt does not start the services (no systemd); `lagsched-dev stack up` does.
need=()
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
command -v mariadb >/dev/null 2>&1 || need+=(mariadb-client)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
# PostgreSQL: Airflow's metadata DB in the local stack (Debian keeps its binaries off PATH).
compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null || need+=(postgresql)
# A real browser for the UI test (Playwright drives it; no browser download).
command -v chromium >/dev/null 2>&1 || need+=(chromium)
# promtool checks the /metrics text and the shipped alert rules (tests/unit/test_metrics_lint.py,
# tests/unit/test_alert_rules.py), and the server itself is the stack's optional Prometheus
# (`lagsched-dev stack up --prometheus`, tests/e2e/test_prometheus.py); Debian ships both in
# `prometheus`. Installed without its recommends (node exporter), and on a machine whose systemd
# starts what apt installs, the server it brings is stopped and disabled again: the stack starts its
# own, on loopback with its data under .local/, never the system's on port 9090.
need_prometheus=false
command -v promtool >/dev/null 2>&1 || need_prometheus=true
[ -x /usr/bin/prometheus ] || command -v prometheus >/dev/null 2>&1 || need_prometheus=true
if [ ${#need[@]} -gt 0 ] || $need_prometheus; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  if [ ${#need[@]} -gt 0 ]; then
    say "installing Debian packages: ${need[*]}"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
  fi
  if $need_prometheus; then
    say "installing Debian package: prometheus (the server and promtool)"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
    if [ -d /run/systemd/system ]; then
      $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
    fi
  fi
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
# The tooling's command: lagsched_dev is not part of the wheel (the runtime only), so its command is
# this checkout's, run from plugins/ of the checkout it was installed from.
if ! grep -qs "$PWD/plugins" "$VENV/bin/lagsched-dev"; then
  cat > "$VENV/bin/lagsched-dev" <<SHIM
#!/usr/bin/env bash
# The developer's command line of the lagsched checkout in $PWD (scripts/bootstrap.sh).
PYTHONPATH="$PWD/plugins\${PYTHONPATH:+:\$PYTHONPATH}" exec "$VENV/bin/python" -m lagsched_dev "\$@"
SHIM
  chmod +x "$VENV/bin/lagsched-dev"
fi

# 3. Jars: the Kafka broker with Kafka's own CLI tools (one classpath), the lake's for Spark
# (Iceberg, its JDBC catalog's driver, S3A), S3Proxy's and the schema registry's (Apicurio). Each set
# is fetched into a temporary folder and swapped in whole, stamped with the hash of its pom and
# options, so a changed pom refetches only its own set and an interrupted fetch never leaves a
# half-filled folder that looks done.
# What Maven has downloaded so far per its log: "<files> files, <MB> MB".
downloaded() {
  grep 'Downloaded from' "$1" 2>/dev/null \
    | sed -nE 's/.*\(([0-9.]+) (B|kB|MB|GB) at .*/\1 \2/p' \
    | awk '{ v = $1; if ($2 == "B") v /= 1e6; else if ($2 == "kB") v /= 1e3; else if ($2 == "GB") v *= 1e3;
             s += v; n++ } END { printf "%d files, %.1f MB", n, s }'
}

# show_downloads <pid> <Maven log> <label>: until <pid> exits, the downloads so far and the elapsed
# time, redrawn in place on a terminal, a plain line every 10 s in a log (CI).
show_downloads() {
  local pid=$1 log=$2 label=$3 start=$SECONDS last=-10 spin='|/-\' i=0
  while kill -0 "$pid" 2>/dev/null; do
    if [ -t 1 ]; then
      printf '\r%s %s %s, %d s   ' "$label" "${spin:i++%4:1}" "$(downloaded "$log")" $((SECONDS - start))
    elif [ $((SECONDS - last)) -ge 10 ]; then
      last=$SECONDS
      printf '%s: %s, %d s\n' "$label" "$(downloaded "$log")" $((SECONDS - start))
    fi
    sleep 0.5
  done
  [ -t 1 ] && printf '\r'
  printf '%s: %s in %d s\n' "$label" "$(downloaded "$log")" $((SECONDS - start))
}

# fetch_jars <folder name> <pom> [extra Maven options]: the pom's runtime dependencies, or with
# GOAL=dependency:copy the artifacts its plugin configuration lists (no dependency resolution).
fetch_jars() {
  local name=$1 pom=$2 goal=${GOAL:-dependency:copy-dependencies}; shift 2
  local want; want=$({ cat "$pom"; echo "$*"; } | sha256sum | cut -c1-16)
  [ "$(cat "$JARS/$name/.stamp" 2>/dev/null)" = "$want" ] && return 0
  say "fetching the $name jars into $JARS/$name"
  rm -rf "$JARS/$name.tmp"
  mkdir -p "$JARS"
  local log="$JARS/$name.fetch.log"
  # Maven's own output goes to a log; the terminal gets a live count of what was downloaded.
  mvn -B -f "$pom" "$goal" \
    -DoutputDirectory="$JARS/$name.tmp" -DincludeScope=runtime "$@" >"$log" 2>&1 &
  local pid=$!
  show_downloads "$pid" "$log" "  $name jars"
  if ! wait "$pid"; then
    echo "fetching the $name jars failed; the end of Maven's log ($log):" >&2
    tail -n 30 "$log" >&2
    return 1
  fi
  rm -f "$log"
  # An application shipped as one archive (the schema registry's) is unpacked in place.
  local archive
  for archive in "$JARS/$name.tmp"/*.tar.gz; do
    [ -e "$archive" ] || continue
    tar -xzf "$archive" -C "$JARS/$name.tmp" && rm -f "$archive"
  done
  echo "$want" > "$JARS/$name.tmp/.stamp"
  # A running broker keeps its open jars (same names, same versions) across the swap.
  rm -rf "$JARS/$name" && mv "$JARS/$name.tmp" "$JARS/$name"
}
fetch_jars kafka deps/kafka/pom.xml
# Spark's Kafka connector of earlier versions: the slots read Kafka with confluent-kafka now.
rm -rf "$JARS/spark"
fetch_jars spark-lake deps/spark-lake/pom.xml \
  -DincludeGroupIds=org.apache.iceberg,org.mariadb.jdbc,org.apache.hadoop,software.amazon.awssdk,software.amazon.eventstream,org.reactivestreams
fetch_jars s3proxy deps/s3proxy/pom.xml
GOAL=dependency:copy fetch_jars schema-registry deps/schema-registry/pom.xml
rm -f "$JARS/.stamp"  # the single stamp of the jar sets before they had one each
say "dependencies ready"
