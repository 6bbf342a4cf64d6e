package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/natsd"
	"github.com/ctxd/ctxd/streams"
)

// authServer runs the embedded server with a configuration file holding
// conf, and returns its client URL.
func authServer(t *testing.T, conf string) string {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "server.conf")
	require.NoError(t, os.WriteFile(file, []byte(conf), 0o600))
	srv := natsd.New(filepath.Join(dir, "js"))
	srv.Port = -1
	srv.ConfigFile = file
	require.NoError(t, srv.Open())
	t.Cleanup(func() { srv.Close() })
	return srv.ClientURL()
}

// ensureStream creates TRANSCRIPTS through a connection with opts.
func ensureStream(t *testing.T, url string, opts ...nats.Option) {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	def, err := streams.Transcripts()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = bus.EnsureStream(ctx, js, def)
	require.NoError(t, err)
}

// publishWith runs ctxd publish with the extra flags, one record.
func publishWith(t *testing.T, env map[string]string, flags ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	e := &env_{stdin: strings.NewReader(`{"role":"user","content":"hi"}` + "\n"), stdout: &out, stderr: &errOut, getenv: func(k string) string { return env[k] }}
	code := run(context.Background(), e.env(), append([]string{"publish", "--session", "a1"}, flags...))
	return code, out.String(), errOut.String()
}

// env_ builds an env.
type env_ struct {
	stdin          *strings.Reader
	stdout, stderr *bytes.Buffer
	getenv         func(string) string
}

func (e *env_) env() *env {
	return &env{stdin: e.stdin, stdout: e.stdout, stderr: e.stderr, getenv: e.getenv}
}

func TestAuth_UserPassword(t *testing.T) {
	url := authServer(t, `authorization { users = [ {user: alice, password: "s3cret pw"} ] }`)
	ensureStream(t, url, nats.UserInfo("alice", "s3cret pw"))

	code, out, errOut := publishWith(t, nil, "--nats", url, "--user", "alice", "--password", "s3cret pw")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "1\n", out)

	// From the environment, as every flag.
	code, _, errOut = publishWith(t, map[string]string{"CTXD_USER": "alice", "CTXD_PASSWORD": "s3cret pw"}, "--nats", url)
	require.Equal(t, 0, code, errOut)

	code, _, errOut = publishWith(t, nil, "--nats", url, "--user", "alice", "--password", "wrong")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "Authorization Violation")
	require.NotContains(t, errOut, "wrong")

	// In the URL: the error does not repeat the password.
	u := strings.Replace(url, "nats://", "nats://alice:badpass@", 1)
	code, _, errOut = publishWith(t, nil, "--nats", u)
	require.Equal(t, 1, code)
	require.NotContains(t, errOut, "badpass")
	require.Contains(t, errOut, "alice:xxxxx@")
}

func TestAuth_Token(t *testing.T) {
	url := authServer(t, `authorization { token: "t0ken-123" }`)
	ensureStream(t, url, nats.Token("t0ken-123"))
	code, _, errOut := publishWith(t, nil, "--nats", url, "--token", "t0ken-123")
	require.Equal(t, 0, code, errOut)
	code, _, _ = publishWith(t, nil, "--nats", url)
	require.Equal(t, 1, code)
}

func TestAuth_NKey(t *testing.T) {
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	seed, err := kp.Seed()
	require.NoError(t, err)
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	require.NoError(t, os.WriteFile(seedFile, seed, 0o600))
	url := authServer(t, fmt.Sprintf(`authorization { users = [ {nkey: %s} ] }`, pub))
	opt, err := nats.NkeyOptionFromSeed(seedFile)
	require.NoError(t, err)
	ensureStream(t, url, opt)

	code, _, errOut := publishWith(t, nil, "--nats", url, "--nkey", seedFile)
	require.Equal(t, 0, code, errOut)
	code, _, _ = publishWith(t, nil, "--nats", url)
	require.Equal(t, 1, code)
}

// TestAuth_Creds: decentralized auth, an operator, an account with
// JetStream and a user whose credentials file ctxd reads.
func TestAuth_Creds(t *testing.T) {
	okp, _ := nkeys.CreateOperator()
	opub, _ := okp.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	ojwt, err := oc.Encode(okp)
	require.NoError(t, err)

	sysKP, _ := nkeys.CreateAccount()
	sysPub, _ := sysKP.PublicKey()
	sysJWT, err := jwt.NewAccountClaims(sysPub).Encode(okp)
	require.NoError(t, err)

	akp, _ := nkeys.CreateAccount()
	apub, _ := akp.PublicKey()
	ac := jwt.NewAccountClaims(apub)
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	ajwt, err := ac.Encode(okp)
	require.NoError(t, err)

	ukp, _ := nkeys.CreateUser()
	upub, _ := ukp.PublicKey()
	uc := jwt.NewUserClaims(upub)
	uc.IssuerAccount = apub
	ujwt, err := uc.Encode(akp)
	require.NoError(t, err)
	useed, _ := ukp.Seed()
	creds, err := jwt.FormatUserConfig(ujwt, useed)
	require.NoError(t, err)
	dir := t.TempDir()
	credsFile := filepath.Join(dir, "user.creds")
	require.NoError(t, os.WriteFile(credsFile, creds, 0o600))
	opFile := filepath.Join(dir, "op.jwt")
	require.NoError(t, os.WriteFile(opFile, []byte(ojwt), 0o600))

	url := authServer(t, fmt.Sprintf(`
operator: %q
system_account: %s
resolver: MEMORY
resolver_preload: { %s: %q, %s: %q }
`, opFile, sysPub, sysPub, sysJWT, apub, ajwt))
	ensureStream(t, url, nats.UserCredentials(credsFile))

	code, _, errOut := publishWith(t, nil, "--nats", url, "--creds", credsFile)
	require.Equal(t, 0, code, errOut)
	code, _, _ = publishWith(t, nil, "--nats", url)
	require.Equal(t, 1, code)
}

// TestAuth_TLS: a server that requires client certificates; ctxd gives
// its certificate and trusts the server's CA.
func TestAuth_TLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCA(t)
	writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", ca.Raw)
	srvCert, srvKey := newLeaf(t, ca, caKey, "server", true)
	writePEM(t, filepath.Join(dir, "server.pem"), "CERTIFICATE", srvCert)
	writeKey(t, filepath.Join(dir, "server-key.pem"), srvKey)
	cliCert, cliKey := newLeaf(t, ca, caKey, "ctxd", false)
	writePEM(t, filepath.Join(dir, "client.pem"), "CERTIFICATE", cliCert)
	writeKey(t, filepath.Join(dir, "client-key.pem"), cliKey)

	url := authServer(t, fmt.Sprintf(`tls { cert_file: %q, key_file: %q, ca_file: %q, verify: true }`,
		filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"), filepath.Join(dir, "ca.pem")))
	url = strings.Replace(url, "nats://", "tls://", 1)
	ensureStream(t, url, nats.ClientCert(filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")), nats.RootCAs(filepath.Join(dir, "ca.pem")))

	code, _, errOut := publishWith(t, nil, "--nats", url, "--tls-cert", filepath.Join(dir, "client.pem"),
		"--tls-key", filepath.Join(dir, "client-key.pem"), "--tls-ca", filepath.Join(dir, "ca.pem"))
	require.Equal(t, 0, code, errOut)
	code, _, _ = publishWith(t, nil, "--nats", url, "--tls-ca", filepath.Join(dir, "ca.pem"))
	require.Equal(t, 1, code, "no client certificate")
	code, _, errOut = publishWith(t, nil, "--nats", url, "--tls-cert", filepath.Join(dir, "client.pem"))
	require.Equal(t, 2, code, "a certificate without its key is a usage error")
	_ = errOut
}

// TestAuth_Context: a natscli context names the URL and credentials.
func TestAuth_Context(t *testing.T) {
	url := authServer(t, `authorization { users = [ {user: bob, password: pw} ] }`)
	ensureStream(t, url, nats.UserInfo("bob", "pw"))
	cfgHome := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(cfgHome, "nats", "context"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(cfgHome, "nats", "context", "prod.json"),
		[]byte(fmt.Sprintf(`{"description":"test","url":%q,"user":"bob","password":"pw"}`, url)), 0o600))
	env := map[string]string{"XDG_CONFIG_HOME": cfgHome}
	code, _, errOut := publishWith(t, env, "--context", "prod")
	require.Equal(t, 0, code, errOut)
	// A flag given wins over the context.
	code, _, _ = publishWith(t, env, "--context", "prod", "--password", "nope")
	require.Equal(t, 1, code)
	code, _, errOut = publishWith(t, env, "--context", "nosuch")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "nosuch")
}

// TestServe_RedactsCredentials: the ready line and the log never show a
// password given in the URL.
func TestServe_RedactsCredentials(t *testing.T) {
	url := authServer(t, `authorization { users = [ {user: carol, password: "hunter2"} ] }`)
	u := strings.Replace(url, "nats://", "nats://carol:hunter2@", 1)
	var out, errOut syncBuf
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		done <- run(ctx, &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }},
			[]string{"serve", "--nats", u, "--log-format", "json"})
	}()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "ctxd ready") }, 30*time.Second, 10*time.Millisecond, errOut.String())
	cancel()
	require.Equal(t, 0, <-done)
	require.NotContains(t, out.String()+errOut.String(), "hunter2")
	require.Contains(t, out.String(), "ctxd ready nats://carol:xxxxx@")
	require.Contains(t, errOut.String(), `"msg":"stream open"`, "json logs")
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return cert, key
}

func newLeaf(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, server bool) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.DNSNames = []string{"localhost"}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	return der, key
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
}

func writeKey(t *testing.T, path string, key *ecdsa.PrivateKey) {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	writePEM(t, path, "EC PRIVATE KEY", der)
}

// TestAuth_InboxPrefix: on a server whose users may subscribe only to
// their own inbox prefix, ctxd serves as its user with --inbox-prefix,
// and an application publishes and fetches contexts with its own;
// without the prefix a command, or serve, says at once that the server
// refuses its inbox, and a prefix that is not a subject is a usage error.
func TestAuth_InboxPrefix(t *testing.T) {
	url := authServer(t, `authorization { users = [
  { user: svc, password: pw, permissions: {
      subscribe: { allow: ["_INBOX_svc.>", "ctxd.>", "$SRV.>", "$JS.EVENT.ADVISORY.API"] } } }
  { user: app, password: pw, permissions: {
      publish: { allow: ["transcripts.>", "ctxd.context.>", "ctxd.chunk.>"] }
      subscribe: { allow: ["_INBOX_app.>"] } } }
] }`)
	code, _, errOut := runCmd(t, "", "serve", "--nats", url, "--user", "svc", "--password", "pw")
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut, "refuses this connection's inbox subscription: _INBOX.")
	require.Contains(t, errOut, "--inbox-prefix sets it")

	ctx, cancel := context.WithCancel(context.Background())
	var out, serveErr syncBuf
	done := make(chan int)
	go func() {
		done <- run(ctx, &env{stdin: strings.NewReader(""), stdout: &out, stderr: &serveErr, getenv: func(string) string { return "" }},
			[]string{"serve", "--nats", url, "--user", "svc", "--password", "pw", "--inbox-prefix", "_INBOX_svc"})
	}()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "ctxd ready") }, 30*time.Second, 10*time.Millisecond, serveErr.String())

	code, got, errOut := publishWith(t, nil, "--nats", url, "--user", "app", "--password", "pw", "--inbox-prefix", "_INBOX_app")
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, "1\n", got)
	code, got, errOut = runCmdEnv(t, map[string]string{"CTXD_USER": "app", "CTXD_PASSWORD": "pw", "CTXD_INBOX_PREFIX": "_INBOX_app"}, "", "context", "a1", "--min-seq", "1", "--nats", url)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, got, `"content":"hi"`)

	code, _, errOut = publishWith(t, nil, "--nats", url, "--user", "app", "--password", "pw")
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut, "refuses this connection's inbox subscription: _INBOX.")
	require.Contains(t, errOut, "--inbox-prefix")
	for _, bad := range []string{"_INBOX.>", "a..b", ".a", "a.", "a b", "*"} {
		code, _, errOut = publishWith(t, nil, "--nats", url, "--user", "app", "--password", "pw", "--inbox-prefix", bad)
		require.Equal(t, exitUsage, code, bad)
		require.Contains(t, errOut, fmt.Sprintf("--inbox-prefix %q", bad))
	}

	cancel()
	require.Equal(t, 0, <-done)
	require.NotContains(t, serveErr.String(), "ermissions violation", "ctxd subscribes only where its user may")
}
