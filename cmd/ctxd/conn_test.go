package main

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

func TestCheckInboxPrefix(t *testing.T) {
	for _, ok := range []string{"", "_INBOX_app-a", "_INBOX.app", "a.b.c", "tenant_a.inbox"} {
		require.NoError(t, checkInboxPrefix(ok), ok)
	}
	for _, bad := range []string{".", "a.", ".a", "a..b", "*", ">", "a.*", "a.>", "a*", "a b", "a\tb", "a\nb", "\xff"} {
		err := checkInboxPrefix(bad)
		require.Error(t, err, "%q", bad)
		require.Contains(t, err.Error(), "--inbox-prefix")
	}
}

// FuzzCheckInboxPrefix: a prefix it accepts is one nats.go accepts too,
// and the inboxes made from it are subjects of literal tokens.
func FuzzCheckInboxPrefix(f *testing.F) {
	for _, s := range []string{"", "_INBOX_app-a", "a..b", "a.>", "a b", ".", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if checkInboxPrefix(p) != nil || p == "" {
			return
		}
		var o nats.Options
		require.NoError(t, nats.CustomInboxPrefix(p)(&o), "%q", p)
		inbox := p + "." + nats.NewInbox()[len("_INBOX."):]
		for _, tok := range strings.Split(inbox, ".") {
			require.NotEmpty(t, tok, "%q", inbox)
			require.NotContains(t, []string{"*", ">"}, tok)
			require.False(t, strings.ContainsAny(tok, " \t\r\n"), "%q", inbox)
		}
	})
}
