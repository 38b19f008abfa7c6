"""RocketMQ 5's own gRPC front as a ``bench.compare`` system, ``rocketmq5_proxy``: a name
server and ``rocketmq-proxy`` 5.5.0 in local mode (the broker inside the proxy's JVM,
timer wheel at 100 ms, async flush, recall enabled, store under the workdir), the jars
those of the RocketMQ peer (``bench.peers.rocketmq``), driven by the official 5.x Java
client (``Bench5``) exactly as ``delayq_rmq5`` is.

Through gRPC neither topics nor groups are made on first use: ``open`` waits until the
embedded broker has registered with the name server, then makes the topic (accepting
DELAY messages) and the consumer group with RocketMQ's admin tool. The proxy's gRPC
port (and the broker's HA port) bind the wildcard address in 5.5.0 whatever the
config; everything else binds loopback. RSS is the two JVMs'. ``close`` kills them.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import psutil

from bench.adapter import TOPIC, free_port
from bench.peers.rocketmq.system import (
    CLUSTER,
    START_TIMEOUT_S,
    RocketMQServers,
    broker_port,
    jvm,
    wait_port,
)

from .client import GROUP, ClientDriven


class RocketMQ5Proxy(RocketMQServers, ClientDriven):
    name = "rocketmq5_proxy"
    precision_ms = 100

    def open(self, workdir: Path) -> None:
        self.start_namesrv(workdir / "rocketmq5")
        conf = self.write_conf(
            "broker.conf", **self.broker_keys(broker_port()), bindAddress="127.0.0.1"
        )
        grpc_port = free_port()
        proxy_conf = self.dir / "rmq-proxy.json"
        proxy = {
            "rocketMQClusterName": CLUSTER,
            "namesrvAddr": self.namesrv_address,
            "proxyMode": "local",
            "grpcServerPort": grpc_port,
            "remotingListenPort": free_port(),
        }
        proxy_conf.write_text(json.dumps(proxy))
        self.proxy = self._spawn("proxy", [
            *jvm(self.peer, self.home, "1g", "-XX:MaxDirectMemorySize=1g"),
            "org.apache.rocketmq.proxy.ProxyStartup",
            "-pm", "local", "-bc", str(conf), "-pc", str(proxy_conf),
        ])  # fmt: skip
        wait_port(grpc_port, self.proxy, "the proxy", self.dir / "proxy.log")
        self._wait_registered()
        self._admin("updateTopic", "-c", CLUSTER, "-t", TOPIC, "-a", "+message.type=DELAY")
        self._admin("updateSubGroup", "-c", CLUSTER, "-g", GROUP)
        self.endpoint = f"127.0.0.1:{grpc_port}"

    def _admin(self, *args: str) -> str:
        """``mqadmin ARGS -n NAMESRV``'s output; SystemExit when it fails."""
        done = subprocess.run(
            [
                *jvm(self.peer, self.home, "128m"),
                "org.apache.rocketmq.tools.command.MQAdminStartup",
                *args,
                "-n",
                self.namesrv_address,
            ],
            capture_output=True,
            text=True,
            cwd=self.dir,
            timeout=START_TIMEOUT_S,
        )
        if done.returncode != 0:
            raise SystemExit(f"mqadmin {args[0]} failed: {(done.stdout + done.stderr)[-2000:]}")
        return done.stdout

    def _wait_registered(self) -> None:
        """The proxy says it started before its broker has registered (~9 s here)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while "bench-broker" not in self._admin("clusterList"):
            if time.monotonic() > deadline or self.proxy.poll() is not None:
                raise SystemExit(f"the proxy's broker never registered; see {self.dir}")
            time.sleep(0.5)

    def close(self) -> None:
        self.close_client()
        for proc in (self.proxy, self.namesrv):
            if proc.poll() is None:
                proc.kill()  # nothing to keep: a clean broker shutdown takes ~11 s
            proc.wait(30)

    def rss_mb(self) -> float:
        pids = (self.proxy.pid, self.namesrv.pid)
        return float(sum(psutil.Process(p).memory_info().rss for p in pids) / 2**20)

    def disk_bytes(self) -> int:
        return 0

    def restart(self) -> None:
        return None
