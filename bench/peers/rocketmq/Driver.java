/*
 * The RocketMQ peer's client for bench.compare: RocketMQ's own Java client (the 4.x-style
 * rocketmq-client 5.5.0), driven by the Python adapter (bench/peers/rocketmq/system.py)
 * over this process' stdin and stdout.
 *
 *   java -cp LIB/*:CLASSES Driver NAMESRV BROKER TOPIC
 *
 * It creates TOPIC on BROKER (8 queues) before anything is sent: an auto-created topic
 * takes fewer queues than the producer's default route names, and the sends to the
 * others are refused until the route refreshes (30 s).
 *
 * Commands (stdin, big-endian, one at a time; each answered by one 'R' frame, n:int then
 * n longs, or an 'E' frame):
 *   'S' n:int  n x (due_ms:long, len:int, body)  schedule: n asynchronous sends, all in
 *       flight at once (the producer's best practice: the client refuses to batch timer
 *       messages), a refused send ("broker busy") sent again and counted.
 *       -> 'R' first_handle resends   (handles first .. first+n-1)
 *   'C' n:int  n x handle:long    cancel: recallMessage (RocketMQ 5.3+) per handle, 64 in
 *       flight  -> 'R' recalled
 *   'P'  ping: a plain sync send, retried every 10 ms until the broker takes it -> 'R'
 *   'Q'  quit.
 * The first 'R' (no values, unasked) says the producer and the consumer have started.
 * Deliveries ('D' frames, written whenever the push consumer is handed a batch):
 *   'D' stamp_us:long n:int  n x (handle:long, due_ms:long, len:int, body)
 * stamp_us is the wall clock (microseconds) when the consumer's thread got the batch,
 * before anything else is done with it. Errors: 'E' message (writeUTF). Nothing else is
 * written to stdout (System.out is pointed at stderr).
 */

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

public final class Driver {
    private static final String HANDLE = "h";
    private static final String DUE = "d";
    private static final long SEND_TIMEOUT_MS = 10_000;
    private static final long GIVE_UP_MS = 120_000; // refused sends with no progress
    private static final int QUEUES = 8;

    private final DataOutputStream out;
    private final DefaultMQProducer producer;
    private final String topic;
    private final ConcurrentHashMap<Long, String> recallHandles = new ConcurrentHashMap<>();
    private final ExecutorService recalls = Executors.newFixedThreadPool(64);
    private final AtomicLong noRecallHandle = new AtomicLong(); // sends that gave none
    private long nextHandle = 0;

    private Driver(String namesrv, String topic) throws Exception {
        this.topic = topic;
        this.out = new DataOutputStream(
            new BufferedOutputStream(new FileOutputStream(FileDescriptor.out), 1 << 16));
        System.setOut(new PrintStream(new FileOutputStream(FileDescriptor.err), true));
        producer = new DefaultMQProducer("bench-producer");
        producer.setNamesrvAddr(namesrv);
        producer.setSendMsgTimeout((int) SEND_TIMEOUT_MS);
        producer.setRetryTimesWhenSendAsyncFailed(0); // resent (and counted) here
        producer.setMaxMessageSize(4 << 20);
        producer.start();
    }

    private static long nowMicros() {
        Instant t = Instant.now();
        return t.getEpochSecond() * 1_000_000L + t.getNano() / 1_000;
    }

    private void startConsumer(String namesrv) throws Exception {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer("bench-consumer");
        consumer.setNamesrvAddr(namesrv);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.setPullBatchSize(256);
        consumer.setConsumeMessageBatchMaxSize(256);
        consumer.setConsumeThreadMin(2);
        consumer.setConsumeThreadMax(2);
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            long stamp = nowMicros();
            deliver(stamp, msgs);
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
    }

    private void deliver(long stamp, List<MessageExt> msgs) {
        List<MessageExt> ours = new ArrayList<>(msgs.size());
        for (MessageExt m : msgs) {
            if (m.getUserProperty(HANDLE) != null) { // not the pings
                ours.add(m);
            }
        }
        if (ours.isEmpty()) {
            return;
        }
        synchronized (out) {
            try {
                out.writeByte('D');
                out.writeLong(stamp);
                out.writeInt(ours.size());
                for (MessageExt m : ours) {
                    out.writeLong(Long.parseLong(m.getUserProperty(HANDLE)));
                    out.writeLong(Long.parseLong(m.getUserProperty(DUE)));
                    byte[] body = m.getBody();
                    out.writeInt(body.length);
                    out.write(body);
                }
                out.flush();
            } catch (IOException e) {
                System.exit(3); // the adapter went away
            }
        }
    }

    private void reply(long... values) throws IOException {
        synchronized (out) {
            out.writeByte('R');
            out.writeInt(values.length);
            for (long v : values) {
                out.writeLong(v);
            }
            out.flush();
        }
    }

    private void error(String text) throws IOException {
        synchronized (out) {
            out.writeByte('E');
            out.writeUTF(text.length() > 2000 ? text.substring(0, 2000) : text);
            out.flush();
        }
    }

    private long schedule(List<Message> msgs) throws Exception {
        long resends = 0;
        long progress = System.currentTimeMillis();
        List<Message> todo = msgs;
        while (!todo.isEmpty()) {
            ConcurrentLinkedQueue<Message> failed = new ConcurrentLinkedQueue<>();
            ConcurrentLinkedQueue<String> why = new ConcurrentLinkedQueue<>();
            CountDownLatch done = new CountDownLatch(todo.size());
            for (Message m : todo) {
                long handle = Long.parseLong(m.getUserProperty(HANDLE));
                producer.send(m, new SendCallback() {
                    @Override
                    public void onSuccess(SendResult r) {
                        try {
                            if (r.getSendStatus() != SendStatus.SEND_OK) {
                                failed.add(m);
                                why.add(r.getSendStatus().toString());
                            } else if (r.getRecallHandle() != null) {
                                recallHandles.put(handle, r.getRecallHandle());
                            } else if (noRecallHandle.getAndIncrement() == 0) { // not recallable
                                System.err.println("sent without a recall handle (due in "
                                    + (m.getDeliverTimeMs() - System.currentTimeMillis())
                                    + " ms): " + r);
                            }
                        } finally {
                            done.countDown();
                        }
                    }

                    @Override
                    public void onException(Throwable e) {
                        failed.add(m);
                        why.add(String.valueOf(e.getMessage()));
                        done.countDown();
                    }
                }, SEND_TIMEOUT_MS);
            }
            done.await();
            if (failed.size() < todo.size()) {
                progress = System.currentTimeMillis();
            } else if (System.currentTimeMillis() - progress > GIVE_UP_MS) {
                throw new IllegalStateException("every send refused for 120 s: " + why.peek());
            }
            if (!failed.isEmpty() && resends == 0) {
                System.err.println("sends refused, sent again: " + why.peek());
            }
            resends += failed.size();
            todo = new ArrayList<>(failed);
            if (!todo.isEmpty()) {
                Thread.sleep(5); // "broker busy": let its send queue drain
            }
        }
        return resends;
    }

    private int cancel(long[] handles) throws Exception {
        List<Future<Boolean>> pending = new ArrayList<>(handles.length);
        for (long h : handles) {
            String recall = recallHandles.remove(h);
            pending.add(recalls.submit(() -> {
                if (recall == null) {
                    return false;
                }
                try {
                    producer.recallMessage(topic, recall);
                    return true;
                } catch (Exception e) {
                    System.err.println("recall refused: " + e);
                    return false;
                }
            }));
        }
        int found = 0;
        for (Future<Boolean> f : pending) {
            found += f.get() ? 1 : 0;
        }
        return found;
    }

    private void ping() throws InterruptedException {
        Message m = new Message(topic, new byte[] {0});
        while (true) {
            try {
                if (producer.send(m, 3_000).getSendStatus() == SendStatus.SEND_OK) {
                    return;
                }
            } catch (Exception e) {
                System.err.println("ping: " + e); // not serving yet
            }
            Thread.sleep(10);
        }
    }

    private static void createTopic(String namesrv, String broker, String topic)
            throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(namesrv);
        admin.start();
        try {
            long deadline = System.currentTimeMillis() + GIVE_UP_MS;
            while (true) {
                try {
                    admin.createAndUpdateTopicConfig(broker, new TopicConfig(topic, QUEUES, QUEUES));
                    return;
                } catch (Exception e) {
                    if (System.currentTimeMillis() > deadline) {
                        throw e;
                    }
                    Thread.sleep(100); // the broker is still starting
                }
            }
        } finally {
            admin.shutdown();
        }
    }

    private void run(String namesrv, String broker) throws Exception {
        DataInputStream in = new DataInputStream(new BufferedInputStream(System.in, 1 << 16));
        createTopic(namesrv, broker, topic);
        ping(); // its route is known before the consumer subscribes
        startConsumer(namesrv);
        reply();
        while (true) {
            int cmd = in.read();
            try {
                switch (cmd) {
                    case 'S': {
                        int n = in.readInt();
                        long first = nextHandle;
                        List<Message> msgs = new ArrayList<>(n);
                        for (int i = 0; i < n; i++) {
                            long due = in.readLong();
                            byte[] body = new byte[in.readInt()];
                            in.readFully(body);
                            Message m = new Message(topic, body);
                            m.setDeliverTimeMs(due);
                            m.putUserProperty(HANDLE, Long.toString(nextHandle++));
                            m.putUserProperty(DUE, Long.toString(due));
                            msgs.add(m);
                        }
                        reply(first, schedule(msgs));
                        break;
                    }
                    case 'C': {
                        long[] handles = new long[in.readInt()];
                        for (int i = 0; i < handles.length; i++) {
                            handles[i] = in.readLong();
                        }
                        reply(cancel(handles));
                        break;
                    }
                    case 'P':
                        ping();
                        reply();
                        break;
                    case 'Q':
                    case -1:
                        System.exit(0);
                        break;
                    default:
                        error("unknown command " + cmd);
                        System.exit(2);
                }
            } catch (Exception e) {
                error(e.toString());
            }
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: Driver NAMESRV BROKER TOPIC");
            System.exit(2);
        }
        new Driver(args[0], args[2]).run(args[0], args[1]);
    }
}
