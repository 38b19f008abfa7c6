#!/bin/sh
# A three-shard cluster on this machine: keyed messages sent through different
# nodes land on their owning shards; one receive fans in from all of them.
# Usage: sh walkthrough.sh [DIR] [BASE_PORT]   (default a temp dir, port 7500)
set -eu
dir=${1:-$(mktemp -d)}
base=${2:-7500}
topic=example-orders
node0=127.0.0.1:$base
node2=127.0.0.1:$((base + 8))  # four ports a node: gRPC, metrics, admin, RocketMQ

delayq cluster up --dir "$dir" --shards 3 --base-port "$base" > "$dir.up.log" 2>&1 &
up=$!
trap 'kill -TERM $up 2>/dev/null; wait $up 2>/dev/null || true' EXIT
i=0
until grep -q '^cluster up: ' "$dir.up.log" 2>/dev/null; do
    i=$((i + 1))
    if [ $i -gt 600 ] || ! kill -0 $up 2>/dev/null; then cat "$dir.up.log"; exit 1; fi
    sleep 0.1
done
grep '^cluster up: ' "$dir.up.log"

for customer in alice bob carol dave erin frank; do
    # any node takes any key: the CLI asks it for the shard map and routes
    id=$(delayq send --server "$node0" --topic "$topic" --key "$customer" --delay 1s "order of $customer")
    echo "sent $customer: $id"
done

echo "receiving through $node2 (every shard's messages, each once):"
delayq receive --server "$node2" --topic "$topic" --group shipping --count 6 --timeout 10s
delayq stats --server "$node0" "$topic" --shards
delayq cluster status --dir "$dir"
