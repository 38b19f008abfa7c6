// The official RocketMQ 5 Go client (github.com/apache/rocketmq-clients/golang/v5, pinned
// in go.mod) driven from the command line, one subcommand per scenario, for tests/rocketmq
// (goclient.py builds and runs it).
//
//	clientdriver SCENARIO --endpoint HOST:PORT --topic T [options]
//
// Stdout carries only JSON objects, one a line, each with "event" and "ms" (the wall
// clock, ms, when it happened); stderr the driver's complaints, and the client logs to
// its own file (--log-dir, else ~/logs/rocketmq). Exit: 0 done, 1 a client call failed
// (the last line is an "error" event with the phase and the message), 2 bad arguments,
// 3 the deadline passed first. Run it with --help for the options.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
)

const usage = `usage: clientdriver SCENARIO --endpoint HOST:PORT --topic TOPIC [options]

scenarios:
  produce         send --normal N NORMAL and --delay N DELAY messages (due now + --delay-ms);
                  prints 'sent' per message (message_id, recall_handle, kind, index, due_ms)
  recall          send one DELAY message, wait --recall-after-ms, recall it by its handle
                  (or recall --handle without sending); prints 'sent' then 'recalled'
  simple-consume  SimpleConsumer of --group: receive and ack until --count messages are acked,
                  then go on for --linger-ms; prints 'received', 'acked', 'empty' (a poll that
                  returned nothing), then 'done'

options (default):
  --endpoint HOST:PORT   the server's RocketMQ port (required)
  --topic NAME           (required)
  --deadline-ms MS       give up after this long, exit 3 (60000)
  --log-dir DIR          the client's log directory (~/logs/rocketmq)
  --ssl                  TLS (the client's default; plaintext without this flag)
 produce, recall:
  --normal N  --delay N  how many of each kind (produce: 1, 1)
  --delay-ms MS          delivery timestamp = send time + MS (3000)
  --tag TAG  --keys K1,K2  --prop K=V (repeatable)  --body TEXT (body: TEXT-KIND-INDEX; 'm')
  --recall-after-ms MS   recall: wait before recalling (0)
  --handle H             recall: recall this handle, send nothing
 simple-consume:
  --group NAME           consumer group (required)
  --filter EXPR          tag expression ('*')
  --count K  --linger-ms MS  (1, 0)
  --invisible-ms MS      invisible duration of a receive (15000)
  --await-ms MS          the client's await duration of a receive (5000)
  --batch N              messages per receive (16)
`

var out = struct {
	sync.Mutex
	enc *json.Encoder
}{enc: json.NewEncoder(os.Stdout)}

type event map[string]any

func nowMs() int64 { return time.Now().UnixMilli() }

// emit prints one event line; fields may override "ms".
func emit(name string, fields event) {
	e := event{"event": name, "ms": nowMs()}
	for k, v := range fields {
		e[k] = v
	}
	out.Lock()
	defer out.Unlock()
	if err := out.enc.Encode(e); err != nil {
		fmt.Fprintln(os.Stderr, "clientdriver: writing stdout:", err)
		os.Exit(1)
	}
}

// fail prints an "error" event and exits 1.
func fail(phase string, err error) {
	fmt.Fprintf(os.Stderr, "clientdriver: %s failed: %v\n", phase, err)
	fields := event{"phase": phase, "message": err.Error()}
	var status *rmq.ErrRpcStatus
	if errors.As(err, &status) {
		fields["code"] = status.Code
	}
	emit("error", fields)
	os.Exit(1)
}

func badArgs(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "clientdriver: "+format+"\n\n%s", append(args, usage)...)
	os.Exit(2)
}

type props map[string]string

func (p props) String() string { return fmt.Sprint(map[string]string(p)) }
func (p props) Set(kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok || k == "" {
		return fmt.Errorf("takes KEY=VALUE, not %q", kv)
	}
	p[k] = v
	return nil
}

type options struct {
	endpoint, topic, logDir, tag, keys, body, handle, group, filter    string
	deadlineMs, delayMs, recallAfterMs, lingerMs, invisibleMs, awaitMs int64
	normal, delay, count, batch                                        int
	ssl                                                                bool
	props                                                              props
}

func parse(scenario string, args []string) options {
	o := options{props: props{}}
	fs := flag.NewFlagSet(scenario, flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	fs.Usage = func() {}
	fs.StringVar(&o.endpoint, "endpoint", "", "")
	fs.StringVar(&o.topic, "topic", "", "")
	fs.Int64Var(&o.deadlineMs, "deadline-ms", 60000, "")
	fs.StringVar(&o.logDir, "log-dir", "", "")
	fs.BoolVar(&o.ssl, "ssl", false, "")
	fs.IntVar(&o.normal, "normal", 1, "")
	fs.IntVar(&o.delay, "delay", 1, "")
	fs.Int64Var(&o.delayMs, "delay-ms", 3000, "")
	fs.StringVar(&o.tag, "tag", "", "")
	fs.StringVar(&o.keys, "keys", "", "")
	fs.Var(o.props, "prop", "")
	fs.StringVar(&o.body, "body", "m", "")
	fs.Int64Var(&o.recallAfterMs, "recall-after-ms", 0, "")
	fs.StringVar(&o.handle, "handle", "", "")
	fs.StringVar(&o.group, "group", "", "")
	fs.StringVar(&o.filter, "filter", "*", "")
	fs.IntVar(&o.count, "count", 1, "")
	fs.Int64Var(&o.lingerMs, "linger-ms", 0, "")
	fs.Int64Var(&o.invisibleMs, "invisible-ms", 15000, "")
	fs.Int64Var(&o.awaitMs, "await-ms", 5000, "")
	fs.IntVar(&o.batch, "batch", 16, "")
	if err := fs.Parse(args); err != nil {
		badArgs("%v", err)
	}
	if fs.NArg() > 0 {
		badArgs("unexpected argument %q", fs.Arg(0))
	}
	if o.endpoint == "" {
		badArgs("--endpoint is required")
	}
	if o.topic == "" {
		badArgs("--topic is required")
	}
	if scenario == "simple-consume" && o.group == "" {
		badArgs("--group is required")
	}
	return o
}

func config(o options) *rmq.Config {
	return &rmq.Config{
		Endpoint:      o.endpoint,
		ConsumerGroup: o.group,
		Credentials:   &credentials.SessionCredentials{}, // required, even without ACLs
	}
}

func callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

func startProducer(o options) rmq.Producer {
	// WithTopics: v5.1.4 waits for the server's Settings at Start, for declared topics
	producer, err := rmq.NewProducer(config(o), rmq.WithTopics(o.topic))
	if err != nil {
		fail("start", err)
	}
	if err := producer.Start(); err != nil {
		fail("start", err)
	}
	emit("started", nil)
	return producer
}

func send(producer rmq.Producer, o options, kind string, index int) *rmq.SendReceipt {
	msg := &rmq.Message{Topic: o.topic, Body: []byte(fmt.Sprintf("%s-%s-%d", o.body, kind, index))}
	if o.tag != "" {
		msg.SetTag(o.tag)
	}
	if o.keys != "" {
		msg.SetKeys(strings.Split(o.keys, ",")...)
	}
	for k, v := range o.props {
		msg.AddProperty(k, v)
	}
	sentMs := nowMs()
	fields := event{"kind": kind, "index": index, "sent_ms": sentMs}
	if kind == "delay" {
		due := sentMs + o.delayMs
		msg.SetDelayTimestamp(time.UnixMilli(due))
		fields["due_ms"] = due
	}
	ctx, cancel := callCtx()
	defer cancel()
	receipts, err := producer.Send(ctx, msg)
	if err != nil {
		fail("send", err)
	}
	if len(receipts) != 1 {
		fail("send", fmt.Errorf("%d receipts for one message", len(receipts)))
	}
	fields["message_id"] = receipts[0].MessageID
	fields["recall_handle"] = receipts[0].RecallHandle
	emit("sent", fields)
	return receipts[0]
}

func produce(o options) {
	producer := startProducer(o)
	for i := 0; i < o.normal; i++ {
		send(producer, o, "normal", i)
	}
	for i := 0; i < o.delay; i++ {
		send(producer, o, "delay", i)
	}
	_ = producer.GracefulStop()
	emit("done", event{"sent": o.normal + o.delay})
}

func recall(o options) {
	producer := startProducer(o)
	handle := o.handle
	if handle == "" {
		handle = send(producer, o, "delay", 0).RecallHandle
		time.Sleep(time.Duration(o.recallAfterMs) * time.Millisecond)
	}
	ctx, cancel := callCtx()
	defer cancel()
	id, err := producer.Recall(ctx, o.topic, handle)
	if err != nil {
		fail("recall", err)
	}
	emit("recalled", event{"message_id": id, "recall_handle": handle})
	_ = producer.GracefulStop()
	emit("done", nil)
}

func received(mv *rmq.MessageView, ms int64) event {
	e := event{
		"ms": ms, "message_id": mv.GetMessageId(), "topic": mv.GetTopic(),
		"body": string(mv.GetBody()), "keys": []string{}, "properties": map[string]string{},
		"attempt": mv.GetDeliveryAttempt(),
	}
	if keys := mv.GetKeys(); keys != nil {
		e["keys"] = keys
	}
	if properties := mv.GetProperties(); properties != nil {
		e["properties"] = properties
	}
	if mv.GetTag() != nil {
		e["tag"] = *mv.GetTag()
	}
	if t := mv.GetDeliveryTimestamp(); t != nil {
		e["delivery_ms"] = t.UnixMilli()
	}
	return e
}

func simpleConsume(o options) {
	consumer, err := rmq.NewSimpleConsumer(config(o),
		rmq.WithSimpleAwaitDuration(time.Duration(o.awaitMs)*time.Millisecond),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{
			o.topic: rmq.NewFilterExpression(o.filter),
		}),
	)
	if err != nil {
		fail("start", err)
	}
	if err := consumer.Start(); err != nil {
		fail("start", err)
	}
	emit("started", nil)
	got, acked, empty := 0, 0, 0
	var lingerEnd time.Time
	for {
		if acked >= o.count && lingerEnd.IsZero() {
			lingerEnd = time.Now().Add(time.Duration(o.lingerMs) * time.Millisecond)
		}
		if !lingerEnd.IsZero() && !time.Now().Before(lingerEnd) {
			break
		}
		views, err := consumer.Receive(context.Background(), int32(o.batch),
			time.Duration(o.invisibleMs)*time.Millisecond)
		ms := nowMs()
		if err != nil {
			fail("receive", err)
		}
		if len(views) == 0 {
			empty++
			emit("empty", nil)
		}
		for _, mv := range views {
			got++
			emit("received", received(mv, ms))
			ctx, cancel := callCtx()
			err := consumer.Ack(ctx, mv)
			cancel()
			if err != nil {
				fail("ack", err)
			}
			acked++
			emit("acked", event{"message_id": mv.GetMessageId()})
		}
	}
	_ = consumer.GracefulStop()
	emit("done", event{"received": got, "acked": acked, "empty": empty})
}

func main() {
	if len(os.Args) < 2 {
		badArgs("a scenario is required")
	}
	scenario := os.Args[1]
	if scenario == "--help" || scenario == "-h" {
		fmt.Print(usage)
		return
	}
	run := map[string]func(options){
		"produce": produce, "recall": recall, "simple-consume": simpleConsume,
	}[scenario]
	if run == nil {
		badArgs("unknown scenario: %s", scenario)
	}
	o := parse(scenario, os.Args[2:])
	rmq.EnableSsl = o.ssl
	if o.logDir != "" {
		_ = os.Setenv(rmq.CLIENT_LOG_ROOT, o.logDir)
		rmq.ResetLogger()
	}
	time.AfterFunc(time.Duration(o.deadlineMs)*time.Millisecond, func() {
		fmt.Fprintf(os.Stderr, "clientdriver: %s: the deadline (%d ms) passed\n", scenario, o.deadlineMs)
		emit("error", event{"phase": "deadline", "message": fmt.Sprintf("%s did not finish in %d ms", scenario, o.deadlineMs)})
		os.Exit(3)
	})
	run(o)
}
