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
mkdir -p "$CLUSTER_DIR" "$COVEL_HOME"

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

wait_http() {
  for _ in $(seq 1 60); do
    curl -fsS "http://127.0.0.1:$1/api/health" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  echo "web on port $1 did not become healthy; see $CLUSTER_DIR/web-$1.log" >&2
  return 1
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
      start_one "worker-$n" env COVEL_DB_CONN_MAX_AGE=60 "$VENV/bin/celery" -A covel worker -n "covel-$n@%h" -Q turns,jobs,media,worldgen \
        --concurrency 2 --loglevel INFO
    done
    # Exactly one beat: reaps executions whose worker died, expired runtime-job leases, retention.
    start_one beat "$VENV/bin/celery" -A covel beat --schedule "$CLUSTER_DIR/celerybeat-schedule" --loglevel INFO
    if [ -n "$FLOWER_PORT" ]; then
      start_one flower "$VENV/bin/celery" -A covel flower --port="$FLOWER_PORT" --address=127.0.0.1
    fi
    for port in $WEB_PORTS; do wait_http "$port"; done
    echo "cluster up: web on $WEB_PORTS; logs in $CLUSTER_DIR/"
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
