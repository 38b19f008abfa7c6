/*
 * The bench.compare driver of the official RocketMQ 5 gRPC client (rocketmq-client-java,
 * pom.xml): one Producer and one SimpleConsumer against a RocketMQ 5 gRPC endpoint (delayq's
 * RocketMQ port or a rocketmq-proxy), the same code for both (bench/peers/rocketmq5/client.py
 * runs it).
 *
 *   java -cp JAR:CLASSES Bench5 ENDPOINT TOPIC GROUP IN_FLIGHT CONSUMERS CAPACITY
 *
 * Messages are numbered from 0 in the order sent (at most CAPACITY); message i's body is 200
 * bytes: i (8 bytes, big-endian) and 192 fixed incompressible bytes. Commands on stdin, each a
 * line, the numbers on the next line (space-separated); one JSON line answers each on stdout:
 *
 *   send N      N due times (epoch ms): one DELAY message per request (sendAsync), at most
 *               IN_FLIGHT unanswered; a send the client gave up on is sent again (up to 5
 *               times). {"first", "failed", "resends", "secs", "ack_ms": [send-to-ack ms...]}
 *   recall N    N message numbers: recallMessageAsync of each, IN_FLIGHT at a time.
 *               {"found", "failed", "secs", "error"}
 *   expect N U  N message numbers: wait until each was received or the wall clock passes U
 *               (epoch ms). {"lateness": [receive minus due, ms, of each received],
 *               "lost", "first_ms", "last_ms", "wrong_body", "duplicates", "resurrected"
 *               (recalled and received all the same), "receive_errors", "ack_errors",
 *               "batches": [[messages, receive ms, acks ms] of each receive since the last
 *               expect that brought messages]}
 *   quit        close the clients and exit.
 *
 * CONSUMERS threads each loop receive(32, 30 s) and ack every message with ackAsync (one
 * request each, as the client does), receiving again once the batch is acked; a message is
 * stamped (the wall clock to the µs) right after the receive that brought it returned. Stdout carries only the answers (and a first
 * {"ready": ...} line); the client logs under -Drocketmq.log.root.
 */

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.StringTokenizer;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;

public final class Bench5 {
    static final int BODY = 200;
    static final int MAX_ATTEMPTS = 5;
    static final Duration INVISIBLE = Duration.ofSeconds(30);
    static final byte[] TAIL = new byte[BODY - 8];

    static {
        new Random(0).nextBytes(TAIL);
    }

    final ClientServiceProvider provider = ClientServiceProvider.loadService();
    final String topic;
    final int inFlight;
    final Producer producer;
    final SimpleConsumer consumer;
    final long[] due;
    final String[] handles;
    final boolean[] recalled;
    final AtomicLongArray got;  // Double bits of the receive time; 0: not yet
    int next = 0;
    final AtomicLong wrong = new AtomicLong(), duplicates = new AtomicLong();
    final AtomicLong receiveErrors = new AtomicLong(), ackErrors = new AtomicLong();
    volatile boolean running = true;
    // per receive that brought messages: how many, the receive's ms, its acks' ms
    final ConcurrentLinkedQueue<double[]> batches = new ConcurrentLinkedQueue<>();

    Bench5(String endpoint, String topic, String group, int inFlight, int capacity) throws Exception {
        this.topic = topic;
        this.inFlight = inFlight;
        due = new long[capacity];
        handles = new String[capacity];
        recalled = new boolean[capacity];
        got = new AtomicLongArray(capacity);
        ClientConfiguration config = ClientConfiguration.newBuilder()
            .setEndpoints(endpoint)
            .enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(10))
            .build();
        producer = provider.newProducerBuilder()
            .setClientConfiguration(config)
            .setTopics(topic)
            .build();
        consumer = provider.newSimpleConsumerBuilder()
            .setClientConfiguration(config)
            .setConsumerGroup(group)
            .setAwaitDuration(Duration.ofSeconds(5))
            .setSubscriptionExpressions(Map.of(topic, FilterExpression.SUB_ALL))
            .build();
    }

    static double nowMs() {
        Instant now = Instant.now();
        return now.getEpochSecond() * 1000.0 + now.getNano() / 1e6;
    }

    void receiveLoop() {
        while (running) {
            List<MessageView> views;
            long r0 = System.nanoTime();
            try {
                views = consumer.receive(32, INVISIBLE);
            } catch (Exception e) {
                if (running) {
                    receiveErrors.incrementAndGet();
                    sleep(50);
                }
                continue;
            }
            double at = nowMs();
            long a0 = System.nanoTime();
            CompletableFuture<?>[] acks = new CompletableFuture<?>[views.size()];
            for (int i = 0; i < acks.length; i++) {
                record(views.get(i), at);
                acks[i] = consumer.ackAsync(views.get(i)).whenComplete((ok, e) -> {
                    if (e != null) {
                        ackErrors.incrementAndGet();
                    }
                });
            }
            try {  // the batch acked before the next receive: at most CONSUMERS * 32 unacked
                CompletableFuture.allOf(acks).join();
            } catch (CompletionException e) {
                // counted above
            }
            if (!views.isEmpty()) {
                double acked = (System.nanoTime() - a0) / 1e6;
                batches.add(new double[] {views.size(), (a0 - r0) / 1e6, acked});
            }
        }
    }

    void record(MessageView view, double at) {
        ByteBuffer body = view.getBody();
        if (body.remaining() != BODY) {
            wrong.incrementAndGet();
            return;
        }
        long i = body.getLong(body.position());
        byte[] tail = new byte[BODY - 8];
        body.duplicate().position(body.position() + 8).get(tail);
        if (i < 0 || i >= got.length() || !Arrays.equals(tail, TAIL)) {
            wrong.incrementAndGet();
        } else if (!got.compareAndSet((int) i, 0, Double.doubleToRawLongBits(at))) {
            duplicates.incrementAndGet();
        }
    }

    Message message(int i) {
        ByteBuffer body = ByteBuffer.allocate(BODY).putLong(i).put(TAIL);
        return provider.newMessageBuilder()
            .setTopic(topic)
            .setBody(body.array())
            .setDeliveryTimestamp(due[i])
            .build();
    }

    String send(long[] dues) throws InterruptedException {
        int first = next;
        if (first + dues.length > due.length) {
            throw new IllegalStateException("more messages than CAPACITY " + due.length);
        }
        System.arraycopy(dues, 0, due, first, dues.length);
        next += dues.length;
        Semaphore permits = new Semaphore(inFlight);
        double[] ackMs = new double[dues.length];
        AtomicLong failed = new AtomicLong(), resends = new AtomicLong();
        AtomicReference<String> error = new AtomicReference<>("");
        long t0 = System.nanoTime();
        for (int i = first; i < next; i++) {
            permits.acquire();
            sendOne(i, 1, first, permits, ackMs, failed, resends, error);
        }
        permits.acquire(inFlight);
        double secs = (System.nanoTime() - t0) / 1e9;
        StringBuilder out = new StringBuilder("{\"first\":").append(first)
            .append(",\"failed\":").append(failed.get())
            .append(",\"resends\":").append(resends.get())
            .append(",\"secs\":").append(secs)
            .append(",\"error\":").append(quote(error.get()))
            .append(",\"ack_ms\":[");
        return numbers(out, ackMs, ackMs.length).append("]}").toString();
    }

    void sendOne(int i, int attempt, int first, Semaphore permits, double[] ackMs,
                 AtomicLong failed, AtomicLong resends, AtomicReference<String> error) {
        long t0 = System.nanoTime();
        producer.sendAsync(message(i)).whenComplete((receipt, e) -> {
            if (e == null) {
                handles[i] = receipt.getRecallHandle();
                ackMs[i - first] = (System.nanoTime() - t0) / 1e6;
                permits.release();
            } else if (attempt < MAX_ATTEMPTS) {
                resends.incrementAndGet();
                sendOne(i, attempt + 1, first, permits, ackMs, failed, resends, error);
            } else {
                failed.incrementAndGet();
                error.set(String.valueOf(e));
                permits.release();
            }
        });
    }

    String recall(long[] which) throws InterruptedException {
        Semaphore permits = new Semaphore(inFlight);
        AtomicLong found = new AtomicLong(), failed = new AtomicLong();
        AtomicReference<String> error = new AtomicReference<>("");
        long t0 = System.nanoTime();
        for (long w : which) {
            int i = (int) w;
            permits.acquire();
            producer.recallMessageAsync(topic, handles[i]).whenComplete((receipt, e) -> {
                if (e == null) {
                    synchronized (recalled) {
                        recalled[i] = true;
                    }
                    found.incrementAndGet();
                } else {
                    failed.incrementAndGet();
                    error.set(String.valueOf(e));
                }
                permits.release();
            });
        }
        permits.acquire(inFlight);
        double secs = (System.nanoTime() - t0) / 1e9;
        return "{\"found\":" + found.get() + ",\"failed\":" + failed.get() + ",\"secs\":" + secs
            + ",\"error\":" + quote(error.get()) + "}";
    }

    String expect(long[] which, long untilMs) throws InterruptedException {
        while (System.currentTimeMillis() < untilMs && !allGot(which)) {
            Thread.sleep(10);
        }
        double[] late = new double[which.length];
        int n = 0;
        double first = Double.MAX_VALUE, last = 0;
        for (long w : which) {
            long bits = got.get((int) w);
            if (bits != 0) {
                double at = Double.longBitsToDouble(bits);
                late[n++] = at - due[(int) w];
                first = Math.min(first, at);
                last = Math.max(last, at);
            }
        }
        long resurrected = 0;
        synchronized (recalled) {
            for (int i = 0; i < next; i++) {
                resurrected += recalled[i] && got.get(i) != 0 ? 1 : 0;
            }
        }
        StringBuilder out = new StringBuilder("{\"lost\":").append(which.length - n)
            .append(",\"first_ms\":").append(n > 0 ? first : 0)
            .append(",\"last_ms\":").append(last)
            .append(",\"wrong_body\":").append(wrong.get())
            .append(",\"duplicates\":").append(duplicates.get())
            .append(",\"resurrected\":").append(resurrected)
            .append(",\"receive_errors\":").append(receiveErrors.get())
            .append(",\"ack_errors\":").append(ackErrors.get())
            .append(",\"batches\":[");
        double[] batch;
        for (int b = 0; (batch = batches.poll()) != null; b++) {
            numbers(out.append(b == 0 ? "[" : ",["), batch, 3).append("]");
        }
        out.append("],\"lateness\":[");
        return numbers(out, late, n).append("]}").toString();
    }

    boolean allGot(long[] which) {
        for (long w : which) {
            if (got.get((int) w) == 0) {
                return false;
            }
        }
        return true;
    }

    static StringBuilder numbers(StringBuilder out, double[] values, int n) {
        for (int i = 0; i < n; i++) {
            out.append(i == 0 ? "" : ",").append(Math.round(values[i] * 1000) / 1000.0);
        }
        return out;
    }

    static String quote(String s) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            out.append(c == '"' || c == '\\' ? "\\" + c : c < 0x20 ? " " : String.valueOf(c));
        }
        return out.append('"').toString();
    }

    static long[] longs(String line, int n) {
        long[] out = new long[n];
        StringTokenizer tokens = new StringTokenizer(line == null ? "" : line);
        for (int i = 0; i < n; i++) {
            out[i] = Long.parseLong(tokens.nextToken());
        }
        return out;
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    public static void main(String[] args) throws Exception {
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        if (args.length != 6) {
            System.err.println("usage: Bench5 ENDPOINT TOPIC GROUP IN_FLIGHT CONSUMERS CAPACITY");
            System.exit(2);
        }
        Bench5 bench = new Bench5(args[0], args[1], args[2], Integer.parseInt(args[3]),
            Integer.parseInt(args[5]));
        for (int c = 0; c < Integer.parseInt(args[4]); c++) {
            Thread t = new Thread(bench::receiveLoop, "receive-" + c);
            t.setDaemon(true);
            t.start();
        }
        out.println("{\"ready\":" + System.currentTimeMillis() + "}");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null && !line.equals("quit")) {
            String[] cmd = line.split(" ");
            int n = Integer.parseInt(cmd[1]);
            long[] numbers = longs(in.readLine(), n);
            switch (cmd[0]) {
                case "send" -> out.println(bench.send(numbers));
                case "recall" -> out.println(bench.recall(numbers));
                case "expect" -> out.println(bench.expect(numbers, Long.parseLong(cmd[2])));
                default -> throw new IllegalArgumentException("unknown command " + cmd[0]);
            }
        }
        bench.running = false;
        Thread closer = new Thread(() -> {
            try {
                bench.producer.close();
                bench.consumer.close();
            } catch (Exception e) {
                e.printStackTrace();
            }
        });
        closer.setDaemon(true);
        closer.start();
        closer.join(5000);  // a receive may still wait out its long poll: not worth waiting for
        System.exit(0);
    }
}
