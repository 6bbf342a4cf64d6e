package inspect_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// browser is headless Chromium driven over the DevTools protocol on a
// pipe (--remote-debugging-pipe: commands in on fd 3, replies out on fd
// 4, each a JSON message ended by a NUL byte): a few commands, with no
// library and no port.
type browser struct {
	t       *testing.T
	cmd     *exec.Cmd
	in      *os.File // our end of fd 3
	session string

	mu      sync.Mutex
	next    int
	waiting map[int]chan cdpReply
}

type cdpReply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
}

func startBrowser(t *testing.T, bin string) *browser {
	t.Helper()
	cmdR, cmdW, err := os.Pipe()
	require.NoError(t, err)
	outR, outW, err := os.Pipe()
	require.NoError(t, err)
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+t.TempDir(), "--remote-debugging-pipe", "--window-size=1400,1800", "--hide-scrollbars", "about:blank")
	cmd.ExtraFiles = []*os.File{cmdR, outW}
	require.NoError(t, cmd.Start())
	cmdR.Close()
	outW.Close()
	b := &browser{t: t, cmd: cmd, in: cmdW, waiting: map[int]chan cdpReply{}}
	go b.read(outR)
	t.Cleanup(func() {
		b.call("Browser.close", nil, nil)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		cmdW.Close()
	})
	var target struct {
		TargetID string `json:"targetId"`
	}
	b.call("Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var att struct {
		SessionID string `json:"sessionId"`
	}
	b.call("Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att)
	b.session = att.SessionID
	return b
}

func (b *browser) read(r *os.File) {
	defer r.Close()
	br := bufio.NewReader(r)
	for {
		msg, err := br.ReadBytes(0)
		if err != nil {
			return
		}
		var m struct {
			ID int `json:"id"`
			cdpReply
		}
		if json.Unmarshal(msg[:len(msg)-1], &m) != nil || m.ID == 0 {
			continue // an event
		}
		b.mu.Lock()
		ch := b.waiting[m.ID]
		delete(b.waiting, m.ID)
		b.mu.Unlock()
		if ch != nil {
			ch <- m.cdpReply
		}
	}
}

// call sends a command (to the page once attached) and decodes its
// result into out.
func (b *browser) call(method string, params any, out any) {
	b.t.Helper()
	if err := b.try(method, params, out); err != nil {
		b.t.Fatalf("%s: %v", method, err)
	}
}

// try is call, returning the browser's error rather than failing on it.
func (b *browser) try(method string, params any, out any) error {
	b.t.Helper()
	b.mu.Lock()
	b.next++
	id := b.next
	ch := make(chan cdpReply, 1)
	b.waiting[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if b.session != "" {
		msg["sessionId"] = b.session
	}
	data, err := json.Marshal(msg)
	require.NoError(b.t, err)
	_, err = b.in.Write(append(data, 0))
	require.NoError(b.t, err, method)
	select {
	case r := <-ch:
		if r.Error != nil {
			return errors.New(r.Error.Message)
		}
		if out != nil {
			require.NoError(b.t, json.Unmarshal(r.Result, out), method)
		}
	case <-time.After(60 * time.Second):
		if method != "Browser.close" {
			b.t.Fatalf("%s: no reply from the browser in 60s", method)
		}
	}
	return nil
}

// eval returns the value of a JavaScript expression in the page.
func (b *browser) eval(expr string) any {
	b.t.Helper()
	v, err := b.evalTry(expr)
	if err != nil {
		b.t.Fatalf("Runtime.evaluate: %v", err)
	}
	return v
}

// evalTry is eval, returning the browser's error: the page may navigate
// while the expression is evaluated.
func (b *browser) evalTry(expr string) (any, error) {
	b.t.Helper()
	var r struct {
		Result struct {
			Value any `json:"value"`
		} `json:"result"`
		ExceptionDetails any `json:"exceptionDetails"`
	}
	if err := b.try("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &r); err != nil {
		return nil, err
	}
	require.Nil(b.t, r.ExceptionDetails, expr)
	return r.Result.Value, nil
}

// navigating reports whether a browser error says the page navigated
// (or its document was replaced) while a command was evaluated in it.
func navigating(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "navigated or closed") || strings.Contains(msg, "context was destroyed") ||
		strings.Contains(msg, "Cannot find context")
}

// open navigates to url and waits until the page has loaded.
func (b *browser) open(url string) {
	b.t.Helper()
	b.call("Page.navigate", map[string]any{"url": url}, nil)
	b.waitFor(`document.readyState === "complete" && location.href === ` + jsString(url))
}

// waitFor polls a JavaScript condition until it holds; a poll that the
// page's navigation cut off is polled again.
func (b *browser) waitFor(cond string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		v, err := b.evalTry(cond)
		if err != nil && !navigating(err) {
			b.t.Fatalf("Runtime.evaluate: %v", err)
		}
		if err == nil && v == true {
			return
		}
		select {
		case <-ctx.Done():
			b.t.Fatalf("waited 30s for %s", cond)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// dom returns the page's HTML as it is now.
func (b *browser) dom() string {
	s, _ := b.eval("document.documentElement.outerHTML").(string)
	return s
}

// screenshot writes the page as a PNG.
func (b *browser) screenshot(file string) {
	b.t.Helper()
	var r struct {
		Data string `json:"data"`
	}
	b.call("Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true}, &r)
	png, err := base64.StdEncoding.DecodeString(r.Data)
	require.NoError(b.t, err)
	require.NoError(b.t, os.WriteFile(file, png, 0o644))
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
