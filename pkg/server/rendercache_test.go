package server

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/workload"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

// A kept reply holds no more memory than it is counted for, is counted
// in what the projection holds, and once the session changes its size
// still sizes the next reply's buffer.
func TestRenderCache_KeepsAndHints(t *testing.T) {
	p := projection.New(projection.Options{})
	p.Apply(1, record.NewMap("role", "user", "content", "hi"))
	req := contextRequest{format: render.Gemini}
	c := renderCache{max: 1 << 20}

	reply, prev := c.get(p, req)
	require.Nil(t, reply)
	require.Zero(t, prev)

	buf := make([]byte, 100, 1000)
	c.put(p, req, buf)
	reply, prev = c.get(p, req)
	require.Equal(t, buf, reply)
	require.Equal(t, 100, cap(reply), "a copy of the reply alone")
	require.Equal(t, 100, prev)
	require.Equal(t, int64(100), p.KeptBytes())

	p.Apply(2, record.NewMap("role", "user", "content", "more"))
	reply, prev = c.get(p, req)
	require.Nil(t, reply)
	require.Equal(t, 100, prev)
	reply, prev = c.get(p, contextRequest{format: render.Anthropic})
	require.Nil(t, reply)
	require.Equal(t, 100, prev)
	require.Less(t, 100, sizeHint(prev))

	// A reply larger than max is not kept.
	c.max = 50
	require.Nil(t, c.put(p, req, make([]byte, 51)))
	require.Equal(t, int64(100), p.KeptBytes())
}

// TestRenderCache_BufferReuse: the buffer of a reply no longer kept serves
// a later reply only once nothing can read it: the request that made it
// has sent it, no rendering reads its state, and no other request was
// handed it. The replies handed out keep their bytes, and every reply is
// a fresh rendering's, as the session grows a turn at a time.
func TestRenderCache_BufferReuse(t *testing.T) {
	for _, mp := range []bool{false, true} {
		p := projection.New(projection.Options{})
		g := workload.New(3, workload.Default.WithScreenshots(8<<10, 10))
		seq := uint64(0)
		step := func() {
			for _, r := range g.Next() {
				seq++
				p.Apply(seq, r)
			}
		}
		for range 30 {
			step()
		}
		req := contextRequest{format: render.Anthropic, msgpack: mp}
		c := &renderCache{max: 1 << 30}
		size := 0
		turn := func(send bool) (*cachedReply, []byte) {
			t.Helper()
			var out []byte
			var r *cachedReply
			var err error
			// The cache's buffer (nil), written over the reply before
			// when nothing reads it, or one of the caller's.
			var dst []byte
			if seq%3 == 0 {
				dst = c.buffer(size)
			}
			if mp {
				out, r, err = c.appendMsgpack(dst, "s", p, req, nil)
			} else {
				out, r, err = c.appendJSON(dst, "s", p, req, nil)
			}
			require.NoError(t, err)
			var want []byte
			if mp {
				want, err = appendRenderedMsgpack(nil, "s", p, req, nil)
			} else {
				want, err = appendRenderedJSON(nil, "s", p, req, nil)
			}
			require.NoError(t, err)
			require.Equal(t, string(want), string(out), "seq %d: the reply is a fresh rendering's", seq)
			size = len(out)
			require.Same(t, r, kept(p)[0])
			if send {
				c.sent(r)
			}
			return r, out
		}

		// Sent, then replaced: its buffer is reused.
		step()
		e1, _ := turn(true)
		step()
		turn(true)
		require.Nil(t, e1.buf, "a reply sent and replaced gives its buffer up")

		// Handed to another request: never reused.
		step()
		e3, out3 := turn(true)
		got, _ := c.get(p, req)
		require.Equal(t, out3, got)
		handed := bytes.Clone(out3)
		step()
		turn(true)
		require.NotNil(t, e3.buf, "a reply handed out keeps its buffer")

		// Not sent by the request that made it (yet): not reused.
		step()
		e5, _ := turn(false)
		step()
		turn(true)
		require.NotNil(t, e5.buf, "a reply not yet sent keeps its buffer")

		// Its state read by a rendering: reused only once it is done.
		step()
		e7, _ := turn(true)
		_, _, done := c.state(p, req, 0)
		step()
		turn(true)
		require.NotNil(t, e7.buf, "a reply whose state is read keeps its buffer")
		done()
		require.Nil(t, e7.buf)

		// Many turns, some replies handed out: those keep their bytes.
		handedOut := map[*byte][]byte{&out3[0]: handed}
		for i := range 60 {
			step()
			turn(i%5 != 4)
			if i%3 == 0 {
				got, _ := c.get(p, req)
				handedOut[&got[0]] = bytes.Clone(got)
				defer func(b []byte, want []byte) {
					require.Equal(t, string(want), string(b), "a reply handed out was written over")
				}(got, handedOut[&got[0]])
			}
		}
		require.Equal(t, string(handed), string(out3), "a reply handed out was written over")
	}
}

// A reply kept as a copy (its buffer much larger than itself) lets the
// buffer it was copied from go: what is kept holds only the memory it is
// counted for in --cache-bytes.
func TestRenderCache_CopyLetsItsBufferGo(t *testing.T) {
	p := projection.New(projection.Options{})
	p.Apply(1, record.NewMap("role", "user", "content", "hi"))
	c := renderCache{max: 1 << 20}
	freed := make(chan struct{})
	func() {
		buf := make([]byte, 100, 1<<20)
		runtime.AddCleanup(&buf[0], func(ch chan struct{}) { close(ch) }, freed)
		require.NotNil(t, c.put(p, contextRequest{format: render.Gemini}, buf))
	}()
	reply, _ := c.get(p, contextRequest{format: render.Gemini})
	require.Len(t, reply, 100, "kept")
	for range 50 {
		runtime.GC()
		select {
		case <-freed:
			runtime.KeepAlive(p) // the kept reply with it
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	runtime.KeepAlive(p)
	t.Fatal("the buffer a kept reply was copied from is still held")
}
