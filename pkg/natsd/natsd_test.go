package natsd

import (
	"bytes"
	"context"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// open starts s on a free port and closes it when the test ends.
func open(t *testing.T, s *Server) {
	t.Helper()
	s.Port = -1
	require.NoError(t, s.Open())
	t.Cleanup(func() { s.Close() })
}

func connect(t *testing.T, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return nc, js
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestNew(t *testing.T) {
	s := New("dir")
	require.Equal(t, &Server{
		Name:         DefaultName,
		Host:         DefaultHost,
		Port:         DefaultPort,
		StoreDir:     "dir",
		MaxPayload:   DefaultMaxPayload,
		SyncInterval: DefaultSyncInterval,
	}, s)
	require.Empty(t, s.ClientURL(), "no URL before Open")
	require.NoError(t, s.Close(), "Close before Open is a no-op")
}

func TestServer_Open(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "made", "by", "open")
	s := New(dir)
	open(t, s)

	u, err := url.Parse(s.ClientURL())
	require.NoError(t, err)
	require.Equal(t, "nats", u.Scheme)
	require.Equal(t, DefaultHost, u.Hostname())
	port, err := strconv.Atoi(u.Port())
	require.NoError(t, err)
	require.Positive(t, port, "Port -1 picks a free port")

	nc, js := connect(t, s.ClientURL())
	require.Equal(t, int64(DefaultMaxPayload), nc.MaxPayload())

	// JetStream works, with file storage under the store directory.
	ctx := testContext(t)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage})
	require.NoError(t, err)
	ack, err := js.Publish(ctx, "t.a", []byte("hello"))
	require.NoError(t, err)
	require.Equal(t, uint64(1), ack.Sequence)
	m, err := st.GetMsg(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, "hello", string(m.Data))
	_, err = os.Stat(filepath.Join(dir, "jetstream"))
	require.NoError(t, err, "JetStream stores under StoreDir")
}

func TestServer_Close(t *testing.T) {
	dir := t.TempDir()
	s := New(dir)
	s.Port = -1
	require.NoError(t, s.Open())
	first := s.ClientURL()
	_, js := connect(t, first)
	ctx := testContext(t)
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
	require.NoError(t, err)
	_, err = js.Publish(ctx, "t.a", []byte("kept"))
	require.NoError(t, err)

	require.NoError(t, s.Close())
	require.Empty(t, s.ClientURL())
	require.NoError(t, s.Close(), "a second Close is a no-op")

	_, err = nats.Connect(first, nats.NoReconnect())
	require.Error(t, err, "nothing listens after Close")

	// A second Open on the same directory works and keeps what was stored.
	require.NoError(t, s.Open())
	t.Cleanup(func() { s.Close() })
	_, js2 := connect(t, s.ClientURL())
	st, err := js2.Stream(ctx, "T")
	require.NoError(t, err)
	m, err := st.GetMsg(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, "kept", string(m.Data))

	// And a second Server on that directory, once this one is closed.
	require.NoError(t, s.Close())
	other := New(dir)
	open(t, other)
	_, js3 := connect(t, other.ClientURL())
	st, err = js3.Stream(ctx, "T")
	require.NoError(t, err)
	require.Equal(t, uint64(1), st.CachedInfo().State.Msgs)
}

func TestServer_Sync(t *testing.T) {
	tests := []struct {
		name     string
		always   bool
		interval time.Duration
	}{
		{"default interval", false, DefaultSyncInterval},
		{"one second", false, time.Second},
		{"always", true, DefaultSyncInterval},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(t.TempDir())
			s.SyncAlways = tt.always
			s.SyncInterval = tt.interval
			open(t, s)
			cfg := s.ns.JetStreamConfig()
			require.NotNil(t, cfg, "JetStream is enabled")
			require.Equal(t, tt.always, cfg.SyncAlways)
			require.Equal(t, tt.interval, cfg.SyncInterval)

			_, js := connect(t, s.ClientURL())
			ctx := testContext(t)
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
			require.NoError(t, err)
			_, err = js.Publish(ctx, "t.a", []byte("x"))
			require.NoError(t, err)
		})
	}
}

func TestServer_OpenErrors(t *testing.T) {
	t.Run("no store directory", func(t *testing.T) {
		s := New("")
		require.ErrorContains(t, s.Open(), "no store directory")
		require.Empty(t, s.ClientURL())
	})
	t.Run("store directory is a file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		require.NoError(t, os.WriteFile(file, nil, 0o600))
		s := New(filepath.Join(file, "sub"))
		require.ErrorContains(t, s.Open(), "store directory")
		require.Empty(t, s.ClientURL())
	})
}

// One server at a time on a store directory: a second is refused while
// the first runs (two would corrupt the store, and neither would see
// what the other writes), and opens once it has stopped.
func TestServer_StoreInUse(t *testing.T) {
	dir := t.TempDir()
	first := New(dir)
	first.Port = -1
	require.NoError(t, first.Open())
	second := New(dir)
	second.Port = -1
	err := second.Open()
	require.ErrorIs(t, err, ErrStoreInUse)
	require.ErrorContains(t, err, dir)
	require.Empty(t, second.ClientURL())
	require.NoError(t, first.Close())
	require.NoError(t, second.Open())
	require.NoError(t, second.Close())
}

// syncBuffer is a log destination safe for the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestServer_Logger(t *testing.T) {
	var logs syncBuffer
	s := New(t.TempDir())
	s.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	open(t, s)
	require.Contains(t, logs.String(), "level=DEBUG", "routine notices are debug lines")
	require.Contains(t, logs.String(), "Listening for client connections")
}

// A configuration that opens monitoring beyond loopback is refused,
// users or not: NATS's monitoring has no authentication, and lists
// every connection, user, subscription and stream. On loopback it runs.
func TestServer_MonitoringExposed(t *testing.T) {
	users := "authorization { users = [ { user: a, password: pw } ] }\n"
	for conf, exposed := range map[string]bool{
		"http_port: -1\n":                     false, // on the client host: 127.0.0.1 unless set
		"host: 0.0.0.0\nhttp_port: -1\n":      true,
		"http: 0.0.0.0:-1\n":                  true,
		"https: 10.1.2.3:-1\n":                true,
		"host: 0.0.0.0\nhttp: 127.0.0.1:-1\n": false,
		"host: 127.0.0.1\nhttp_port: -1\n":    false,
		"http: localhost:-1\n":                false,
		"host: 0.0.0.0\n":                     false, // no monitoring
	} {
		err := openWith(t, conf+users)
		if exposed {
			require.ErrorIs(t, err, ErrExposed, conf)
			require.ErrorContains(t, err, "monitoring", conf)
			continue
		}
		require.NoError(t, err, conf)
	}
}

// openWith opens a server on a free port with the configuration conf,
// and closes it at once when it opened: the error is Open's.
func openWith(t *testing.T, conf string) error {
	t.Helper()
	file := filepath.Join(t.TempDir(), "server.conf")
	require.NoError(t, os.WriteFile(file, []byte(conf), 0o600))
	s := New(t.TempDir())
	s.Port = -1
	s.ConfigFile = file
	err := s.Open()
	if err == nil {
		s.Close()
	}
	return err
}

// The other listeners a configuration opens (websocket, leafnodes,
// mqtt) serve the same accounts: beyond loopback, each needs the server's
// users or credentials of its own, and a no_auth_user (the server's, or
// the listener's) lets anyone in. The client listener stays on loopback
// here: before this rule, each exposed case opened.
func TestServer_OtherListenersExposed(t *testing.T) {
	users := "authorization { users = [ { user: a, password: pw } ] }\n"
	// The listener the refusal names; "" for a configuration that opens.
	for conf, refused := range map[string]string{
		"websocket { port: -1, no_tls: true }\n":                                  "websocket listener on every interface",
		"websocket { host: 0.0.0.0, port: -1, no_tls: true }\n":                   "websocket listener on 0.0.0.0",
		"websocket { host: 127.0.0.1, port: -1, no_tls: true }\n":                 "",
		"websocket { port: -1, no_tls: true }\n" + users:                          "",
		"websocket { port: -1, no_tls: true, no_auth_user: a }\n" + users:         "websocket listener",
		"websocket { port: -1, no_tls: true, authorization { token: s3cret } }\n": "",
		"leafnodes { port: -1 }\n":                                                "leafnodes listener",
		"leafnodes { host: localhost, port: -1 }\n":                               "",
		"leafnodes { port: -1 }\n" + users:                                        "",
		"leafnodes { port: -1, authorization { user: l, password: pw } }\n":       "",
		"no_auth_user: a\nleafnodes { port: -1 }\n" + users:                       "leafnodes listener",
		"host: 0.0.0.0\nno_auth_user: a\n" + users:                                "would accept anyone on 0.0.0.0",
		"server_name: m\njetstream {}\nmqtt { port: -1 }\n":                       "mqtt listener",
		"server_name: m\njetstream {}\nmqtt { host: 127.0.0.1, port: -1 }\n":      "",
	} {
		err := openWith(t, conf)
		if refused != "" {
			require.ErrorIs(t, err, ErrExposed, conf)
			require.ErrorContains(t, err, refused, conf)
			continue
		}
		require.NoError(t, err, conf)
	}
}

// A stream update writes the stream's configuration file and then its
// checksum; a process killed between the two leaves a store whose
// stream the server skips at its next start. KeepStreamConfig keeps the
// files until the update is done, and Open puts them back when the
// process died before: the stream is there, as before the update.
func TestServer_KeepStreamConfig(t *testing.T) {
	// update makes the store as a server killed during an update of T's
	// configuration leaves it: the new configuration, the old checksum.
	update := func(t *testing.T, s *Server, js jetstream.JetStream) {
		t.Helper()
		ctx := testContext(t)
		dir := filepath.Join(s.storeDir, "jetstream", "$G", "streams", "T")
		oldSum, err := os.ReadFile(filepath.Join(dir, "meta.sum"))
		require.NoError(t, err)
		_, err = js.UpdateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage, Description: "updated"})
		require.NoError(t, err)
		require.NoError(t, s.Close())
		require.NoError(t, os.WriteFile(filepath.Join(dir, "meta.sum"), oldSum, 0o644))
	}
	start := func(t *testing.T) (*Server, jetstream.JetStream) {
		t.Helper()
		s := New(t.TempDir())
		open(t, s)
		_, js := connect(t, s.ClientURL())
		ctx := testContext(t)
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage})
		require.NoError(t, err)
		_, err = js.Publish(ctx, "t.a", []byte("hello"))
		require.NoError(t, err)
		return s, js
	}
	reopen := func(t *testing.T, s *Server) (jetstream.Stream, error) {
		t.Helper()
		var logs syncBuffer
		s.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		open(t, s)
		_, js := connect(t, s.ClientURL())
		return js.Stream(testContext(t), "T")
	}

	t.Run("without a copy the stream is skipped", func(t *testing.T) {
		s, js := start(t)
		update(t, s, js)
		_, err := reopen(t, s)
		require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
	})
	t.Run("the copy is put back", func(t *testing.T) {
		s, js := start(t)
		_, err := s.KeepStreamConfig("T")
		require.NoError(t, err)
		update(t, s, js) // and no drop: the process died
		st, err := reopen(t, s)
		require.NoError(t, err)
		require.Empty(t, st.CachedInfo().Config.Description, "as before the update")
		require.Equal(t, uint64(1), st.CachedInfo().State.Msgs)
		_, err = os.Stat(filepath.Join(s.storeDir, keptDir))
		require.ErrorIs(t, err, os.ErrNotExist, "the copy goes once put back")
		drop, err := s.KeepStreamConfig("T")
		require.NoError(t, err, "a copy can be kept again")
		require.NoError(t, drop())
	})
	t.Run("dropped once the update is done", func(t *testing.T) {
		s, js := start(t)
		drop, err := s.KeepStreamConfig("T")
		require.NoError(t, err)
		_, err = js.UpdateStream(testContext(t), jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage, Description: "updated"})
		require.NoError(t, err)
		require.NoError(t, drop())
		require.NoError(t, drop(), "twice is fine")
		require.NoError(t, s.Close())
		st, err := reopen(t, s)
		require.NoError(t, err)
		require.Equal(t, "updated", st.CachedInfo().Config.Description)
	})
	t.Run("what an interrupted copy left is not put back", func(t *testing.T) {
		s, js := start(t)
		part := filepath.Join(s.storeDir, keptDir+".tmp-1", "$G", "T")
		require.NoError(t, os.MkdirAll(part, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(part, "meta.inf"), []byte("{"), 0o644))
		_, err := js.UpdateStream(testContext(t), jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage, Description: "updated"})
		require.NoError(t, err)
		require.NoError(t, s.Close())
		st, err := reopen(t, s)
		require.NoError(t, err)
		require.Equal(t, "updated", st.CachedInfo().Config.Description)
		_, err = os.Stat(filepath.Dir(filepath.Dir(part)))
		require.ErrorIs(t, err, os.ErrNotExist)
	})
	t.Run("bad names", func(t *testing.T) {
		s, _ := start(t)
		for _, name := range []string{"", "..", "a/b"} {
			_, err := s.KeepStreamConfig(name)
			require.Error(t, err, "%q", name)
		}
		_, err := New(t.TempDir()).KeepStreamConfig("T")
		require.Error(t, err, "not open")
	})
}
