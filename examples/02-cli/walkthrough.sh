#!/bin/sh
# Send, look up, reschedule, cancel and receive messages with the delayq CLI.
# Usage: sh walkthrough.sh [HOST:PORT]   (default $DELAYQ_SERVER, else 127.0.0.1:7420)
set -eu
DELAYQ_SERVER=${1:-${DELAYQ_SERVER:-127.0.0.1:7420}}
export DELAYQ_SERVER  # every delayq command reads its --server default from it
topic=example-reminders

alice=$(delayq send --topic "$topic" --delay 1h "call Alice")
bob=$(delayq send --topic "$topic" --delay 1m --key bob "call Bob")
echo "sent: $alice $bob"

alice=$(delayq reschedule "$alice" --delay 1s)   # a rescheduled message gets a new id
echo "rescheduled Alice: $alice"
delayq get "$bob"
delayq cancel "$bob"

echo "receiving for 5 s (Bob was cancelled, so only Alice comes):"
delayq receive --topic "$topic" --group example-crm --count 2 --timeout 5s
delayq stats "$topic"
