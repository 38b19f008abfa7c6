#!/usr/bin/env bash
# `make test`: set-up, lint and every test suite, each phase timed at the end.
#
# When the Kubernetes tests' binaries are due (tests/k8s/tools/build.sh --check),
# they build in the background from the start; the tests that need them wait for
# that build (tests/k8s/support/controlplane.py) and are handed out last, while the
# other suites run meanwhile. pytest runs over $TEST_WORKERS xdist workers, tests
# that share an expensive fixture in one (tests/support/scheduling.py), and
# prints the 30 slowest tests and each suite's wall time (tests/support/timing.py).
# Once set up, the RocketMQ Java client's jar and drivers (tests/rocketmq's and the
# benchmark's Bench5), and the RocketMQ Go client's driver, are made in the background
# too when due (make rocketmq-java-client, rocketmq-go-client); their tests wait for
# them on their caches' locks (bench/peers/javabuild.py, tests/rocketmq/goclient.py).
# Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}
workers=${TEST_WORKERS:-3}
logs=${DELAYQ_TEST_LOGS:-$HOME/.cache/delayq-k8s}
mkdir -p "$logs"
began=$(date +%s)
report=()

timed() {  # timed NAME COMMAND...: run it, keep its wall time for the report
  local name=$1 start rc=0
  shift
  start=$(date +%s)
  "$@" || rc=$?
  report+=("$(printf '%-10s %5d s' "$name" $(($(date +%s) - start)))")
  return "$rc"
}

build=""
fetch=""
gobuild=""
status="$logs/build.status"
finish_build() {  # stop builds nothing waits for any more (their caches keep what they did)
  for job in $build $fetch $gobuild; do
    if kill -0 "$job" 2>/dev/null; then
      kill -- "-$job" 2>/dev/null || true
    fi
  done
}
trap finish_build EXIT
if bash tests/k8s/tools/build.sh --check; then
  echo "Kubernetes test binaries: up to date"
else
  echo "Kubernetes test binaries: building in the background (log: $logs/build.log)"
  rm -f "$status"
  setsid bash -c '
    start=$(date +%s); rc=0
    bash tests/k8s/tools/build.sh >"$1/build.log" 2>&1 || rc=$?
    echo "$(($(date +%s) - start))" >"$1/build.seconds"
    echo "$rc" >"$1/build.status.part" && mv "$1/build.status.part" "$1/build.status"
  ' build "$logs" &
  build=$!
  export DELAYQ_K8S_BUILD_STATUS=$status
fi

timed setup "$MAKE" --no-print-directory setup system-deps
setsid bash -c '.venv/bin/python -m tests.rocketmq.javaclient && .venv/bin/python -m bench.peers.rocketmq5.client' \
  >"$logs/rocketmq-java-client.log" 2>&1 &
fetch=$!
setsid .venv/bin/python -m tests.rocketmq.goclient >"$logs/rocketmq-go-client.log" 2>&1 &
gobuild=$!
timed lint "$MAKE" --no-print-directory lint
rc=0
timed pytest .venv/bin/pytest -q -ra -n "$workers" --dist loadgroup --no-loadscope-reorder \
  --durations=30 "$@" || rc=$?

if [ -n "$build" ]; then
  if [ -f "$status" ]; then
    report+=("$(printf '%-10s %5d s (in the background)' "k8s build" "$(cat "$logs/build.seconds")")")
    if [ "$(cat "$status")" != 0 ]; then
      echo "the Kubernetes test binaries' build failed: $logs/build.log" >&2
      tail -n 30 "$logs/build.log" >&2
      rc=1
    fi
  else
    report+=("k8s build  stopped: no test waited for it")
  fi
fi
report+=("$(printf '%-10s %5d s' all $(($(date +%s) - began)))")
echo "== make test: wall time per phase =="
printf '%s\n' "${report[@]}"
exit "$rc"
