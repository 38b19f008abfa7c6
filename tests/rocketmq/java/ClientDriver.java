/*
 * The official RocketMQ 5 gRPC client (rocketmq-client-java, pom.xml) driven from the
 * command line, one subcommand per scenario, for tests/rocketmq (javaclient.py runs it).
 *
 *   java -cp JAR:CLASSES ClientDriver SCENARIO --endpoint HOST:PORT --topic T [options]
 *
 * Stdout carries only JSON objects, one a line, each with "event" and "ms" (the wall
 * clock, ms, when it happened); stderr the driver's complaints and stack traces, and the
 * client logs to its own file (-Drocketmq.log.root=DIR, else ~/logs/rocketmq). Exit: 0 done,
 * 1 a client call failed, 2 bad arguments, 3 the deadline passed first (everything seen
 * until then is printed; the last line is an "error" event saying why). Run it with
 * --help for the options.
 */

import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientException;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.ProducerBuilder;
import org.apache.rocketmq.client.apis.producer.RecallReceipt;
import org.apache.rocketmq.client.apis.producer.SendReceipt;

public final class ClientDriver {
    static final String USAGE = String.join("\n",
        "usage: ClientDriver SCENARIO --endpoint HOST:PORT --topic TOPIC [options]",
        "",
        "scenarios:",
        "  produce         send --normal N NORMAL and --delay N DELAY messages (due now + --delay-ms);",
        "                  prints 'sent' per message (message_id, recall_handle, sent_ms, due_ms)",
        "  recall          send one DELAY message, wait --recall-after-ms, recall it by its handle;",
        "                  prints 'sent' then 'recalled'",
        "  keep-producing  send DELAY messages (due send time + --delay-ms) for --for-ms, --in-flight",
        "                  at a time, until --stop-file exists; prints 'sent' per acknowledged send,",
        "                  'send_failed' (index, body, error) per failed one and goes on; then 'done'",
        "  simple-consume  SimpleConsumer of --group: receive until --count messages are acked",
        "                  (0: until the deadline), then --linger-ms more; prints 'received', 'acked',",
        "                  'kept' (lapse), 'changed' (change); stops early once --stop-file exists",
        "  push-consume    PushConsumer of --group: its listener fails messages whose body contains",
        "                  'fail' and succeeds the rest; runs until --count successes and --failures",
        "                  failures (0: until the deadline), then --linger-ms more; prints 'consumed'",
        "",
        "options (default):",
        "  --endpoint HOST:PORT      the server's RocketMQ port (required)",
        "  --topic NAME              (required)",
        "  --deadline-ms MS          give up after this long, exit 3 (60000)",
        "  --request-timeout-ms MS   the client's per-call timeout (3000)",
        "  --ssl                     TLS (the client's default; plaintext without this flag)",
        " produce, recall:",
        "  --normal N  --delay N     how many of each kind (produce: 1, 1)",
        "  --delay-ms MS             delivery timestamp = send time + MS (3000)",
        "  --no-topics               no setTopics on the producer: the route is found on first send",
        "  --async                   every send in flight at once (sendAsync; 5.2.0 has no batch send)",
        "  --tag TAG  --keys K1,K2  --prop K=V (repeatable)  --body TEXT (body: TEXT-KIND-INDEX; 'm')",
        "  --recall-after-ms MS      recall: wait before recalling (0)",
        " keep-producing:",
        "  --for-ms MS               how long to keep sending (10000)",
        "  --in-flight N             sends at a time (1: each waits for the one before)",
        "  --interval-ms MS          at most one send begun per MS (0: no pause)",
        "  --stop-file PATH          stop sending once PATH exists (also simple-consume)",
        " simple-consume, push-consume:",
        "  --group NAME              consumer group (required)",
        "  --filter EXPR             tag expression ('*')",
        "  --count K  --linger-ms MS (1, 0)",
        "  --mode ack|lapse|change   simple-consume: ack each; or leave the first one unacked (its",
        "                            invisibility lapses, it comes back with attempt 2, then acked);",
        "                            or changeInvisibleDuration(--change-ms) then ack (ack)",
        "  --invisible-ms MS  --await-ms MS  --batch N  --change-ms MS   (15000, 5000, 16, 20000)",
        "  --failures N              push-consume: failed consumptions to wait for too (0)",
        "  --threads N               push-consume: consumption threads (4)",
        "  --keep-going              simple-consume: a failed receive or ack prints 'receive_failed'",
        "                            or 'ack_failed' and the loop goes on (else: exit 1)");

    /** Bad arguments (exit 2); the client's own IllegalArgumentExceptions are failures. */
    static final class Usage extends RuntimeException {
        private static final long serialVersionUID = 1L;

        Usage(String message) {
            super(message);
        }
    }

    static final PrintStream OUT = System.out;  // the JSON lines; System.out goes to stderr

    static final Set<String> FLAGS = Set.of("no-topics", "async", "ssl", "keep-going");
    static final Set<String> NUMBERS = Set.of("deadline-ms", "request-timeout-ms", "normal",
        "delay", "delay-ms", "recall-after-ms", "count", "linger-ms", "invisible-ms",
        "await-ms", "batch", "change-ms", "failures", "threads", "for-ms", "in-flight",
        "interval-ms");
    static final Set<String> TEXTS = Set.of("endpoint", "topic", "tag", "keys", "prop", "body",
        "group", "filter", "mode", "stop-file");

    final Map<String, List<String>> opts = new HashMap<>();
    final long deadline;

    /** Every option checked here, so that bad arguments fail before any connection. */
    ClientDriver(String[] args, int from) {
        for (int i = from; i < args.length; i++) {
            String name = args[i].substring(Math.min(2, args[i].length()));
            boolean flag = FLAGS.contains(name);
            if (!args[i].startsWith("--") || !flag && !NUMBERS.contains(name) && !TEXTS.contains(name)) {
                throw new Usage("unknown argument: " + args[i]);
            }
            if (!flag && i + 1 == args.length) {
                throw new Usage(args[i] + " needs a value");
            }
            opts.computeIfAbsent(name, k -> new ArrayList<>()).add(flag ? "" : args[++i]);
        }
        need("endpoint");
        need("topic");
        for (String name : opts.keySet()) {
            if (NUMBERS.contains(name)) {
                num(name, 0);
            }
        }
        if (!List.of("ack", "lapse", "change").contains(str("mode", "ack"))) {
            throw new Usage("--mode is ack, lapse or change");
        }
        deadline = System.currentTimeMillis() + num("deadline-ms", 60_000);
    }

    public static void main(String[] args) {
        System.setOut(System.err);
        if (List.of(args).contains("--help") || List.of(args).contains("-h")) {
            OUT.println(USAGE);
            System.exit(0);
        }
        if (args.length == 0) {
            System.err.println(USAGE);
            System.exit(2);
        }
        int status;
        try {
            ClientDriver d = new ClientDriver(args, 1);
            d.watchdog();
            status = d.run(args[0]);
        } catch (Usage e) {
            System.err.println("ClientDriver: " + e.getMessage() + "\n\n" + USAGE);
            status = 2;
        } catch (Exception e) {
            status = fail(e);
        }
        OUT.flush();
        Runtime.getRuntime().halt(status);  // the client's threads need not wind down
    }

    int run(String scenario) throws Exception {
        switch (scenario) {
            case "produce": return produce();
            case "recall": return recall();
            case "keep-producing": return keepProducing();
            case "simple-consume": return simpleConsume();
            case "push-consume": return pushConsume();
            default: throw new Usage("unknown scenario: " + scenario);
        }
    }

    // --- producing ---------------------------------------------------------------------

    int produce() throws Exception {
        Producer producer = producer();
        int normal = (int) num("normal", 1);
        int delay = (int) num("delay", 1);
        List<Sending> sendings = new ArrayList<>();
        for (int i = 0; i < normal + delay; i++) {
            sendings.add(new Sending(i < normal ? "normal" : "delay", i < normal ? i : i - normal));
        }
        if (opts.containsKey("async")) {
            List<CompletableFuture<SendReceipt>> inFlight = new ArrayList<>();
            for (Sending s : sendings) {
                inFlight.add(producer.sendAsync(s.build()));
            }
            for (int i = 0; i < sendings.size(); i++) {
                sendings.get(i).report(inFlight.get(i).get(remaining(), TimeUnit.MILLISECONDS));
            }
        } else {
            for (Sending s : sendings) {
                s.report(producer.send(s.build()));
            }
        }
        emit("done", "sent", sendings.size());
        return 0;
    }

    int recall() throws Exception {
        Producer producer = producer();
        Sending s = new Sending("delay", 0);
        SendReceipt receipt = producer.send(s.build());
        s.report(receipt);
        Thread.sleep(num("recall-after-ms", 0));
        RecallReceipt recalled = producer.recallMessage(str("topic", null), receipt.getRecallHandle());
        emit("recalled", "message_id", recalled.getMessageId().toString());
        return 0;
    }

    /** DELAY messages sent for --for-ms (or until --stop-file exists), --in-flight at a
     * time: each acknowledged send prints 'sent', each failed one 'send_failed', and the
     * sending goes on whatever happens to one send. */
    int keepProducing() throws Exception {
        Producer producer = producer();
        long until = Math.min(deadline, System.currentTimeMillis() + num("for-ms", 10_000));
        int inFlight = (int) Math.max(1, num("in-flight", 1));
        long interval = num("interval-ms", 0);
        Semaphore slots = new Semaphore(inFlight);
        AtomicInteger sent = new AtomicInteger();
        AtomicInteger failed = new AtomicInteger();
        int index = 0;
        while (System.currentTimeMillis() < until && !stopAsked()) {
            if (!slots.tryAcquire(Math.max(1, until - System.currentTimeMillis()), TimeUnit.MILLISECONDS)) {
                break;
            }
            long began = System.currentTimeMillis();
            Sending s = new Sending("delay", index++);
            producer.sendAsync(s.build()).whenComplete((receipt, error) -> {
                if (error == null) {
                    s.report(receipt);
                    sent.incrementAndGet();
                } else {
                    s.failed(error);
                    failed.incrementAndGet();
                }
                slots.release();
            });
            Thread.sleep(Math.max(0, began + interval - System.currentTimeMillis()));
        }
        if (!slots.tryAcquire(inFlight, remaining(), TimeUnit.MILLISECONDS)) {
            emit("error", "message", "deadline passed with sends in flight");
            return 3;
        }
        Map<String, Object> e = event("done");
        e.put("sent", sent.get());
        e.put("failed", failed.get());
        print(e);
        return 0;
    }

    /** Whether --stop-file (if given) exists. */
    boolean stopAsked() {
        return opts.containsKey("stop-file") && Files.exists(Path.of(str("stop-file", null)));
    }

    /** One message to send and, once sent, its 'sent' (or 'send_failed') event. */
    final class Sending {
        final String kind;
        final int index;
        final String body;
        long sentMs;
        long dueMs;

        Sending(String kind, int index) {
            this.kind = kind;
            this.index = index;
            this.body = str("body", "m") + "-" + kind + "-" + index;
        }

        Message build() {
            MessageBuilder b = ClientServiceProvider.loadService().newMessageBuilder()
                .setTopic(str("topic", null))
                .setBody(body.getBytes(StandardCharsets.UTF_8));
            if (opts.containsKey("tag")) {
                b.setTag(str("tag", null));
            }
            if (opts.containsKey("keys")) {
                b.setKeys(str("keys", null).split(","));
            }
            for (String kv : opts.getOrDefault("prop", List.of())) {
                String[] p = kv.split("=", 2);
                b.addProperty(p[0], p.length > 1 ? p[1] : "");
            }
            sentMs = System.currentTimeMillis();
            if (kind.equals("delay")) {
                dueMs = sentMs + num("delay-ms", 3000);
                b.setDeliveryTimestamp(dueMs);
            }
            return b.build();
        }

        void report(SendReceipt r) {
            Map<String, Object> e = event("sent");
            e.put("kind", kind);
            e.put("index", index);
            e.put("body", body);
            e.put("message_id", r.getMessageId().toString());
            e.put("recall_handle", r.getRecallHandle());
            e.put("sent_ms", sentMs);
            e.put("due_ms", kind.equals("delay") ? dueMs : null);
            print(e);
        }

        void failed(Throwable t) {
            Map<String, Object> e = event("send_failed");
            e.put("kind", kind);
            e.put("index", index);
            e.put("body", body);
            e.put("sent_ms", sentMs);
            e.put("due_ms", kind.equals("delay") ? dueMs : null);
            e.put("message", why(t));
            print(e);
        }
    }

    Producer producer() throws Exception {
        ProducerBuilder b = ClientServiceProvider.loadService().newProducerBuilder()
            .setClientConfiguration(config());
        if (!opts.containsKey("no-topics")) {
            b.setTopics(str("topic", null));
        }
        Producer p = b.build();
        emit("started", "client", "producer");
        return p;
    }

    // --- consuming ---------------------------------------------------------------------

    int simpleConsume() throws Exception {
        String mode = str("mode", "ack");
        SimpleConsumer consumer = ClientServiceProvider.loadService().newSimpleConsumerBuilder()
            .setClientConfiguration(config())
            .setConsumerGroup(str("group", null))
            .setSubscriptionExpressions(Map.of(str("topic", null), filter()))
            .setAwaitDuration(Duration.ofMillis(num("await-ms", 5000)))
            .build();
        emit("started", "client", "simple-consumer");
        Duration invisible = Duration.ofMillis(num("invisible-ms", 15_000));
        int count = (int) num("count", 1);
        Set<String> acked = new HashSet<>();
        String kept = null;  // lapse: the message left unacked
        long stopAt = Long.MAX_VALUE;
        boolean keepGoing = opts.containsKey("keep-going");
        while (System.currentTimeMillis() < Math.min(stopAt, deadline) && !stopAsked()) {
            List<MessageView> got;
            try {
                got = consumer.receive((int) num("batch", 16), invisible);
            } catch (ClientException | RuntimeException e) {  // (a gRPC error comes as is)
                if (!keepGoing) {
                    throw e;
                }
                emit("receive_failed", "message", why(e));
                Thread.sleep(Math.min(200, remaining()));  // not a busy loop on a dead address
                continue;
            }
            for (MessageView m : got) {
                String id = m.getMessageId().toString();
                print(view("received", m));
                if (mode.equals("lapse") && kept == null) {
                    kept = id;
                    emit("kept", "message_id", id);
                    continue;
                }
                if (mode.equals("change")) {
                    consumer.changeInvisibleDuration(m, Duration.ofMillis(num("change-ms", 20_000)));
                    emit("changed", "message_id", id);
                }
                try {
                    consumer.ack(m);
                } catch (ClientException | RuntimeException e) {  // (a gRPC error comes as is)
                    if (!keepGoing) {
                        throw e;
                    }
                    Map<String, Object> f = event("ack_failed");
                    f.put("message_id", id);
                    f.put("message", why(e));
                    print(f);
                    continue;
                }
                emit("acked", "message_id", id);
                acked.add(id);
            }
            if (count > 0 && acked.size() >= count && stopAt == Long.MAX_VALUE) {
                stopAt = System.currentTimeMillis() + num("linger-ms", 0);
            }
        }
        return finish(count, acked.size(), "acked");
    }

    int pushConsume() throws Exception {
        int count = (int) num("count", 1);
        int failures = (int) num("failures", 0);
        AtomicInteger successes = new AtomicInteger();
        AtomicInteger failed = new AtomicInteger();
        CountDownLatch enough = new CountDownLatch(count > 0 ? count + failures : Integer.MAX_VALUE);
        PushConsumer consumer = ClientServiceProvider.loadService().newPushConsumerBuilder()
            .setClientConfiguration(config())
            .setConsumerGroup(str("group", null))
            .setSubscriptionExpressions(Map.of(str("topic", null), filter()))
            .setConsumptionThreadCount((int) num("threads", 4))
            .setMessageListener(m -> {
                Map<String, Object> e = view("consumed", m);
                boolean ok = !((String) e.get("body")).contains("fail");
                e.put("result", ok ? "SUCCESS" : "FAILURE");
                print(e);
                if (ok ? successes.incrementAndGet() <= count : failed.incrementAndGet() <= failures) {
                    enough.countDown();
                }
                return ok ? ConsumeResult.SUCCESS : ConsumeResult.FAILURE;
            })
            .build();
        emit("started", "client", "push-consumer");
        if (enough.await(remaining(), TimeUnit.MILLISECONDS)) {
            Thread.sleep(Math.min(num("linger-ms", 0), remaining()));
        }
        consumer.close();
        if (failed.get() < failures) {
            return finish(failures, failed.get(), "failed");
        }
        return finish(count, successes.get(), "succeeded");
    }

    FilterExpression filter() {
        return new FilterExpression(str("filter", "*"));
    }

    Map<String, Object> view(String name, MessageView m) {
        Map<String, Object> e = event(name);
        e.put("message_id", m.getMessageId().toString());
        e.put("topic", m.getTopic());
        e.put("tag", m.getTag().orElse(null));
        e.put("keys", m.getKeys());
        e.put("properties", m.getProperties());
        ByteBuffer body = m.getBody().duplicate();
        byte[] bytes = new byte[body.remaining()];
        body.get(bytes);
        e.put("body", new String(bytes, StandardCharsets.UTF_8));
        e.put("delivery_ms", m.getDeliveryTimestamp().orElse(null));
        e.put("born_ms", m.getBornTimestamp());
        e.put("attempt", m.getDeliveryAttempt());
        return e;
    }

    /** 0 and a "done" event when ``count`` (0: none asked) messages were ``what``, else 3
     * and an "error" event. */
    static int finish(int count, int got, String what) {
        if (count > 0 && got < count) {
            emit("error", "message", "deadline passed with " + got + " of " + count + " " + what);
            return 3;
        }
        emit("done", what, got);
        return 0;
    }

    // --- plumbing ----------------------------------------------------------------------

    ClientConfiguration config() {
        return ClientConfiguration.newBuilder()
            .setEndpoints(str("endpoint", null))
            .enableSsl(opts.containsKey("ssl"))
            .setRequestTimeout(Duration.ofMillis(num("request-timeout-ms", 3000)))
            .build();
    }

    /** Ends the process soon after the deadline, whatever the client is waiting for: a
     * receive begun just before the deadline may take its long poll and a request
     * timeout, then 5 s for the rest. */
    void watchdog() {
        long grace = num("await-ms", 5000) + num("request-timeout-ms", 3000) + 5_000;
        Thread t = new Thread(() -> {
            try {
                Thread.sleep(Math.max(0, deadline - System.currentTimeMillis()) + grace);
            } catch (InterruptedException e) {
                return;
            }
            emit("error", "message", "deadline passed in a client call that did not return");
            OUT.flush();
            Runtime.getRuntime().halt(3);
        }, "deadline");
        t.setDaemon(true);
        t.start();
    }

    /** An "error" event whose message follows the causes down to the root one. */
    static int fail(Exception e) {
        emit("error", "message", why(e));
        System.err.println("ClientDriver failed:");
        e.printStackTrace();
        return 1;
    }

    /** ``e``'s message and its causes', down to the root one. */
    static String why(Throwable e) {
        StringBuilder why = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof ExecutionException || t instanceof CompletionException) {
                continue;  // wrappers that repeat their cause's message
            }
            why.append(why.length() == 0 ? "" : " <- ");
            why.append(t.getClass().getSimpleName()).append(": ").append(t.getMessage());
        }
        return why.toString();
    }

    long remaining() {
        return Math.max(0, deadline - System.currentTimeMillis());
    }

    void need(String name) {
        if (!opts.containsKey(name)) {
            throw new Usage("--" + name + " is required");
        }
    }

    String str(String name, String otherwise) {
        if (otherwise == null) {
            need(name);
        }
        List<String> v = opts.get(name);
        return v == null ? otherwise : v.get(v.size() - 1);
    }

    long num(String name, long otherwise) {
        String v = str(name, String.valueOf(otherwise));
        try {
            return Long.parseLong(v);
        } catch (NumberFormatException e) {
            throw new Usage("--" + name + " takes a number, not " + v);
        }
    }

    // --- JSON lines ----------------------------------------------------------------------

    static Map<String, Object> event(String name) {
        Map<String, Object> e = new LinkedHashMap<>();
        e.put("event", name);
        e.put("ms", System.currentTimeMillis());
        return e;
    }

    static void emit(String name, String key, Object value) {
        Map<String, Object> e = event(name);
        e.put(key, value);
        print(e);
    }

    static void print(Map<String, Object> e) {
        StringBuilder b = new StringBuilder();
        json(b, e);
        synchronized (OUT) {  // the push consumer's threads print too
            OUT.println(b);
            OUT.flush();
        }
    }

    static void json(StringBuilder b, Object v) {
        if (v == null || v instanceof Number || v instanceof Boolean) {
            b.append(v);
        } else if (v instanceof Map) {
            String sep = "{";
            for (Map.Entry<?, ?> kv : ((Map<?, ?>) v).entrySet()) {
                b.append(sep);
                json(b, String.valueOf(kv.getKey()));
                b.append(':');
                json(b, kv.getValue());
                sep = ",";
            }
            b.append(sep.equals("{") ? "{}" : "}");
        } else if (v instanceof Collection) {
            String sep = "[";
            for (Object o : (Collection<?>) v) {
                b.append(sep);
                json(b, o);
                sep = ",";
            }
            b.append(sep.equals("[") ? "[]" : "]");
        } else {
            b.append('"');
            for (char c : v.toString().toCharArray()) {
                if (c == '"' || c == '\\') {
                    b.append('\\').append(c);
                } else if (c < 0x20) {
                    b.append(String.format("\\u%04x", (int) c));
                } else {
                    b.append(c);
                }
            }
            b.append('"');
        }
    }
}
