"""An official RocketMQ 5 client (rocketmq-python-client) against delayq's
RocketMQ port, unchanged: a producer sends three delay messages due in 2 s,
recalls one, and a simple consumer receives the other two once due, never
early, and acks them.

    ENDPOINT=127.0.0.1:7423 python send_recall_receive.py
"""

from __future__ import annotations

import os
import time

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)

endpoint = os.environ.get("ENDPOINT", "127.0.0.1:7423")
config = ClientConfiguration(endpoint, Credentials())
topic, group = "example-orders", "example-billing"

consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")})
consumer.startup()
producer = Producer(config, (topic,))
producer.startup()
due_s = int(time.time()) + 2  # this client sends delivery times in whole seconds
handles = {}
for n in (1, 2, 3):
    msg = Message()
    msg.topic, msg.body, msg.tag = topic, f"ship #{n}".encode(), "created"
    msg.keys = f"order-{n}"
    msg.delivery_timestamp = due_s
    handles[n] = producer.send(msg).recall_handle
    print(f"sent ship #{n}, due at {due_s}")
producer.recall_message(topic, handles[2])
print("recalled ship #2")

got = []
deadline = time.time() + 20
while len(got) < 2 and time.time() < deadline:
    for m in consumer.receive(32, 15):
        early = time.time() < due_s
        print(f"received {m.body.decode()}{' EARLY' if early else ''}")
        consumer.ack(m)
        got.append(m.body)
producer.shutdown()
consumer.shutdown()
print(f"done: {len(got)} received and acked, 1 recalled")
