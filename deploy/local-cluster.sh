#!/usr/bin/env bash
# Local hosted-shape cluster: 2 daphne web processes + 2 Celery workers + Celery beat (+ Flower) on
# the local PostgreSQL and Redis.  Usage: deploy/local-cluster.sh start|stop|status
#
#   WEB_PORTS      "3101 3102"                    ports of the daphne processes
#   DATABASE_URL   postgres://postgres@127.0.0.1:5432/covel_cluster (created if missing)
#   REDIS_URL      redis://127.0.0.1:6379/1
#   FLOWER_PORT    5555 (set to "" to skip Flower)
#   CLUSTER_DIR    .cluster (pid files and logs)
#   SUPERVISE      1: a web, worker or beat process that exits is started again after 2 s (the
#                  restart policy of docker-compose.yml / Kubernetes, README "Faults"); 0: not
#   START_TIMEOUT  60: seconds each process has to come up
#
# `start` fails loudly (exit 1, the process's log tail, everything it started stopped again) when a
# port is already taken, or a web process is not healthy, a worker not ready, beat not running or
# Flower not answering within START_TIMEOUT. Metrics of every process: GET /metrics on any web port
# (PROMETHEUS_MULTIPROC_DIR=$CLUSTER_DIR/metrics, wiped at start).
set -euo pipefail
cd "$(dirname "$0")/.."

WEB_PORTS=${WEB_PORTS:-"3101 3102"}
export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/covel_cluster}
export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/1}
export DJANGO_SETTINGS_MODULE=${DJANGO_SETTINGS_MODULE:-covel.settings.hosted}
export COVEL_HOME=${COVEL_HOME:-$PWD/.cluster/home}
FLOWER_PORT=${FLOWER_PORT-5555}
CLUSTER_DIR=${CLUSTER_DIR:-.cluster}
VENV=${VENV:-.venv}
START_TIMEOUT=${START_TIMEOUT:-60}
mkdir -p "$CLUSTER_DIR" "$COVEL_HOME"
export PROMETHEUS_MULTIPROC_DIR=${PROMETHEUS_MULTIPROC_DIR:-$PWD/$CLUSTER_DIR/metrics}

SUPERVISE=${SUPERVISE:-1}

# Runs "$@" and starts it again whenever it exits, until it gets SIGTERM/SIGINT itself (which it
# forwards to the running command and waits for: a worker's warm shutdown still drains its turns).
supervise() {  # name, command...
  local name=$1; shift
  local child="" rc
  trap 'stopping=1; [ -n "$child" ] && kill -TERM "$child" 2>/dev/null; wait "$child" 2>/dev/null; exit 0' TERM INT
  stopping=0
  while true; do
    "$@" &
    child=$!
    wait "$child" && rc=0 || rc=$?
    [ "$stopping" = 1 ] && exit 0
    echo "$(date -u +%FT%TZ) supervise: $name exited ($rc); starting it again in 2 s"
    child=""
    sleep 2 & wait $! || true  # a background sleep: SIGTERM is handled at once, not after it
  done
}

start_one() {  # name, command...
  local name=$1; shift
  if [ "$SUPERVISE" = 1 ]; then
    nohup bash -c "$(declare -f supervise); supervise \"\$@\"" supervise "$name" "$@" >"$CLUSTER_DIR/$name.log" 2>&1 &
  else
    nohup "$@" >"$CLUSTER_DIR/$name.log" 2>&1 &
  fi
  echo $! >"$CLUSTER_DIR/$name.pid"
  echo "started $name (pid $!$([ "$SUPERVISE" = 1 ] && echo ", supervised"))"
}

fail() {  # name, message: say what did not come up, show its log, stop everything, exit 1
  echo "local-cluster: $1: $2" >&2
  if [ -f "$CLUSTER_DIR/$1.log" ]; then
    echo "---- last lines of $CLUSTER_DIR/$1.log ----" >&2
    tail -n 40 "$CLUSTER_DIR/$1.log" >&2
    echo "----" >&2
  fi
  "$0" stop >/dev/null 2>&1 || true
  echo "local-cluster: start FAILED (everything it started was stopped)" >&2
  exit 1
}

port_free() {  # port: fail when something already listens there (another cluster, a dev server)
  if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
    echo "local-cluster: port $1 is already in use (a cluster still running? deploy/local-cluster.sh stop)" >&2
    exit 1
  fi
}

# A supervised process that died is restarted in a loop; its log says so. Not up means: our pid
# gone, or a restart logged.
alive() {  # name
  local pid; pid=$(cat "$CLUSTER_DIR/$1.pid" 2>/dev/null) || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  ! grep -q "supervise: $1 exited" "$CLUSTER_DIR/$1.log" 2>/dev/null
}

wait_up() {  # name, what, probe command...: poll the probe until it passes, fail loudly otherwise
  local name=$1 what=$2; shift 2
  local deadline=$(( $(date +%s) + START_TIMEOUT ))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    alive "$name" || fail "$name" "exited before it was $what"
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  fail "$name" "not $what after $START_TIMEOUT s"
}

stop_one() {  # name, signal, seconds to wait
  local pidfile="$CLUSTER_DIR/$1.pid"
  [ -f "$pidfile" ] || return 0
  local pid; pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill "-$2" "$pid" 2>/dev/null || true
    for _ in $(seq 1 $(( $3 * 10 ))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && { echo "$1 did not stop in $3 s; killing"; kill -KILL "$pid" 2>/dev/null || true; }
  fi
  rm -f "$pidfile"
  echo "stopped $1"
}

case "${1:-}" in
  start)
    for port in $WEB_PORTS $FLOWER_PORT; do port_free "$port"; done
    rm -rf "$PROMETHEUS_MULTIPROC_DIR" && mkdir -p "$PROMETHEUS_MULTIPROC_DIR"
    db_name=${DATABASE_URL##*/}
    psql "${DATABASE_URL%/*}/postgres" -tAc "SELECT 1 FROM pg_database WHERE datname='$db_name'" | grep -q 1 \
      || psql "${DATABASE_URL%/*}/postgres" -c "CREATE DATABASE \"$db_name\"" >/dev/null
    "$VENV/bin/python" manage.py migrate --noinput -v0
    for port in $WEB_PORTS; do
      # Under ASGI every request runs on its own thread: a persistent connection would outlive it.
      start_one "web-$port" env COVEL_DB_CONN_MAX_AGE=0 "$VENV/bin/daphne" -b 127.0.0.1 -p "$port" \
        --application-close-timeout 20 covel.asgi:application
    done
    for n in 1 2; do
      start_one "worker-$n" env COVEL_DB_CONN_MAX_AGE=60 "$VENV/bin/celery" -A covel --quiet worker -n "covel-$n@%h" \
        -Q turns,jobs,media,worldgen --concurrency 2 --loglevel INFO
    done
    # Exactly one beat: reaps executions whose worker died, expired runtime-job leases, retention.
    start_one beat "$VENV/bin/celery" -A covel --quiet beat --schedule "$CLUSTER_DIR/celerybeat-schedule" --loglevel INFO
    if [ -n "$FLOWER_PORT" ]; then
      start_one flower "$VENV/bin/celery" -A covel flower --port="$FLOWER_PORT" --address=127.0.0.1
    fi
    for n in 1 2; do wait_up "worker-$n" ready grep -q "@[^ ]* ready\." "$CLUSTER_DIR/worker-$n.log"; done
    # Healthy means the database, Redis and migrations are right and a worker consumes every queue.
    for port in $WEB_PORTS; do wait_up "web-$port" healthy curl -fsS "http://127.0.0.1:$port/api/health"; done
    wait_up beat running grep -q "beat: Starting" "$CLUSTER_DIR/beat.log"
    if [ -n "$FLOWER_PORT" ]; then wait_up flower answering curl -fsS "http://127.0.0.1:$FLOWER_PORT/healthcheck"; fi
    echo "cluster up: web on $WEB_PORTS${FLOWER_PORT:+, Flower on http://127.0.0.1:$FLOWER_PORT}; metrics at /metrics; logs in $CLUSTER_DIR/"
    ;;
  stop)
    # Graceful order: stop accepting requests, then let workers drain their turns (warm shutdown),
    # then the dashboard. Connections to the bus and the database close with each process.
    for port in $WEB_PORTS; do stop_one "web-$port" TERM 10; done
    stop_one beat TERM 10
    for n in 1 2; do stop_one "worker-$n" TERM 60; done
    stop_one flower TERM 5
    ;;
  status)
    for f in "$CLUSTER_DIR"/*.pid; do
      [ -e "$f" ] || continue
      name=$(basename "$f" .pid); pid=$(cat "$f")
      if kill -0 "$pid" 2>/dev/null; then echo "$name running (pid $pid)"; else echo "$name dead"; fi
    done
    ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
