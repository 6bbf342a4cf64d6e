package integration

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// A bare responder in a process of its own: the baseline of a benchmark
// whose ctxd instances are processes of their own. The responders a
// benchmark runs in its own process share it with the embedded NATS
// servers; a request to one never wakes another process, where one to
// ctxd does. On two cores that alone moves the tail (p99) by 2x, so the
// fair baseline of a ctxd process is a process that does nothing else.
//
// The test binary is the responder's program: run with bareEnv set, its
// TestMain answers requests instead of running tests (runBare).

// bareEnv holds the responder's arguments: URL, subject, queue group and
// the subject its body is set on, tab-separated.
const bareEnv = "CTXD_TEST_BARE_RESPONDER"

// runBare answers every request on the subject with the body last set
// (empty at first) until it is stopped, then exits. A request to the
// body subject sets the body and is answered "ok" once it is set.
func runBare(args string) {
	a := strings.Split(args, "\t")
	if len(a) != 4 {
		fmt.Fprintf(os.Stderr, "bare responder: %d arguments in %s, want 4\n", len(a), bareEnv)
		os.Exit(2)
	}
	url, subject, queue, bodySubject := a[0], a[1], a[2], a[3]
	nc, err := nats.Connect(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bare responder:", err)
		os.Exit(1)
	}
	var body atomic.Pointer[[]byte]
	body.Store(new([]byte))
	if _, err := nc.QueueSubscribe(subject, queue, func(m *nats.Msg) { m.Respond(*body.Load()) }); err != nil {
		fmt.Fprintln(os.Stderr, "bare responder:", err)
		os.Exit(1)
	}
	if _, err := nc.Subscribe(bodySubject, func(m *nats.Msg) {
		data := m.Data
		body.Store(&data)
		m.Respond([]byte("ok"))
	}); err != nil {
		fmt.Fprintln(os.Stderr, "bare responder:", err)
		os.Exit(1)
	}
	if err := nc.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "bare responder:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	<-stop
	nc.Close()
	os.Exit(0)
}

// bareProcess is a bare responder running as a process of its own.
type bareProcess struct {
	nc          *nats.Conn // the benchmark's connection, to set the body
	bodySubject string
}

// startBare runs a bare responder process on the server at url, answering
// subject in queue group queue, and stops it when the test ends.
func startBare(t testing.TB, nc *nats.Conn, url, subject, queue string) *bareProcess {
	t.Helper()
	bodySubject := nats.NewInbox() + ".body"
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), bareEnv+"="+url+"\t"+subject+"\t"+queue+"\t"+bodySubject)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		ready <- line
	}()
	select {
	case line := <-ready:
		require.Equal(t, "ready\n", line, "the bare responder did not start")
	case <-time.After(30 * time.Second):
		t.Fatal("the bare responder did not start within 30 s")
	}
	return &bareProcess{nc: nc, bodySubject: bodySubject}
}

// set makes the responder answer body from its next request on. Its
// subscriptions may not have reached the benchmark's node yet: it asks
// again while nobody answers. Once it is answered, the responder's
// queue subscription, made before, has reached that node too.
func (p *bareProcess) set(t testing.TB, body []byte) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := p.nc.Request(p.bodySubject, body, 10*time.Second)
		if errors.Is(err, nats.ErrNoResponders) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		require.NoError(t, err, "setting the bare responder's body")
		return
	}
}
