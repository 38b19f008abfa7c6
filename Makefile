# Set-up and entry points. Everything a fresh clone needs is installed from here.
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

.PHONY: setup serve test test-long lint proto dashboard manifests system-deps bench-deps k8s-tools rocketmq-java-client rocketmq-python-client rocketmq-go-client bench-engine bench-e2e bench-compare bench-rmq5 bench-rocketmq-smoke bench-paired clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@rm -f $(VENV)/.installed-*; touch $(STAMP)

setup: $(STAMP)

# The embedded default: one shard on 127.0.0.1:7420, data in ./delayq-data.
serve: setup
	$(VENV)/bin/delayq serve $(SERVE_ARGS)

lint: setup
	$(VENV)/bin/ruff check service operator tests bench scripts examples
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

# System packages the tests need (a real redis-server for the comparison benchmark,
# a JDK 17 for Spark and, with Maven, for the RocketMQ Java client's tests, Prometheus
# and promtool for the ops tests: Debian's prometheus, whose daemon is stopped and
# disabled at once, nothing of it left running; tmux for reading delayq top's screen).
system-deps:
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "installing redis-server (Debian package)"; \
	  apt-get update -q >/dev/null && apt-get install -y -q redis-server >/dev/null; }
	@command -v javac >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1 || { \
	  echo "installing a JDK 17 and Maven for Spark and the RocketMQ Java client (Debian packages)"; \
	  apt-get update -q >/dev/null && apt-get install -y -q openjdk-17-jdk-headless maven >/dev/null; }
	@command -v nft >/dev/null 2>&1 || { \
	  echo "installing nftables for the network-fault tests (Debian package)"; \
	  apt-get update -q >/dev/null && apt-get install -y -q nftables >/dev/null; }
	@ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || { \
	  echo "installing libfaketime for the clock-skew test (Debian package)"; \
	  apt-get update -q >/dev/null && apt-get install -y -q libfaketime >/dev/null; }
	@command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || { \
	  echo "installing Prometheus and promtool for the ops tests (Debian package prometheus)"; \
	  apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends prometheus >/dev/null; \
	  { systemctl disable --now prometheus.service || { service prometheus stop; update-rc.d prometheus disable; }; } >/dev/null 2>&1 || true; }
	@command -v tmux >/dev/null 2>&1 || { \
	  echo "installing tmux for the delayq top tests (Debian package)"; \
	  apt-get update -q >/dev/null && apt-get install -y -q tmux >/dev/null; }

# The official RocketMQ 5 Java client of tests/rocketmq: Maven fetches its one shaded jar
# (~27 MB, once, into ~/.cache/delayq-bench) and javac compiles its driver; a no-op when
# up to date. make test runs it in the background; the tests wait for it.
rocketmq-java-client: setup system-deps
	$(PY) -m tests.rocketmq.javaclient

# The Kubernetes tests' control plane (kube-apiserver, etcd, kube-controller-manager,
# kube-scheduler, kubectl, helm), built from the Go module proxy into
# ~/.cache/delayq-k8s/bin. ~8 min from empty Go caches, a no-op when up to date.
k8s-tools:
	bash tests/k8s/tools/build.sh

# The venv of the official RocketMQ 5 Python client for tests/rocketmq (exact pins in
# tests/rocketmq/python/requirements.txt), in ~/.cache/delayq-rocketmq-python: ~45 s
# from PyPI, a no-op when made. Its tests make it themselves when it is missing.
rocketmq-python-client: setup
	$(PY) -m tests.rocketmq.pyclient

# The driver of the official RocketMQ 5 Go client for tests/rocketmq (pinned in
# tests/rocketmq/go/go.mod and go.sum), built by the machine's `go` from the Go module
# proxy into ~/.cache/delayq-rocketmq-go (modules, build cache and binary): a few
# minutes cold, a no-op when up to date. make test runs it in the background; the
# tests wait for it.
rocketmq-go-client: setup
	$(PY) -m tests.rocketmq.goclient

# Every suite at its CI size over TEST_WORKERS xdist workers, the Kubernetes tools
# built in the background meanwhile when due (scripts/test.sh); PYTEST_ARGS go to
# pytest. Prints the 30 slowest tests, each suite's and each phase's wall time.
TEST_WORKERS ?= 3
test:
	@TEST_WORKERS=$(TEST_WORKERS) bash scripts/test.sh $(PYTEST_ARGS)

# The tests that have a long form (marker long) at their long size.
test-long: setup system-deps k8s-tools
	$(VENV)/bin/pytest -q -ra -m long --long $(PYTEST_ARGS)

proto: setup
	$(PY) scripts/gen_proto.py

# The Grafana dashboard (charts/delayq/dashboards/delayq.json), generated as code.
dashboard: setup
	$(PY) scripts/gen_dashboard.py

# manifests/ (CRDs, operator install, example, the dashboard) rendered from charts/delayq.
manifests: dashboard k8s-tools
	$(PY) scripts/render_manifests.py

bench-engine: setup
	$(PY) -m bench.engine $(BENCH_ARGS)

bench-e2e: setup
	$(PY) -m bench.e2e $(BENCH_ARGS)

# The RocketMQ peer of the side-by-side benchmark needs Maven and a JDK 17 (system-deps);
# on first use Maven fetches the broker and the proxy (~100 MB, once, into ~/.cache/delayq-bench) and
# javac compiles its driver.
bench-deps: system-deps

# Everything side by side (every system, then lateness under load), written where
# docs/benchmarks.md shows it: about 25 minutes.
bench-compare: setup bench-deps
	$(PY) -m bench.compare --json docs/compare.json --plot docs/img $(BENCH_ARGS)
	$(PY) -m bench.load --json docs/load.json --plot docs/img $(LOAD_ARGS)

# The official RocketMQ 5 Java client driving delayq's RocketMQ port and a real
# rocketmq-proxy 5.5.0 (local mode), side by side: sends one per request, recalls,
# lateness on the uniform and burst workloads, and the goal (docs/benchmarks.md).
# BENCH_ARGS as bench-compare's, e.g. --quick or --scale 0.3 (about 12 minutes).
bench-rmq5: setup bench-deps
	$(PY) -m bench.compare --systems delayq_rmq5,rocketmq5_proxy $(BENCH_ARGS)

# A quick check of the RocketMQ peers against a real broker and proxy (only when asked).
bench-rocketmq-smoke: setup bench-deps
	DELAYQ_ROCKETMQ_SMOKE=1 $(VENV)/bin/pytest -q tests/bench/test_rocketmq_peer.py tests/bench/test_rmq5.py

bench-paired: setup
	$(PY) -m bench.paired $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
