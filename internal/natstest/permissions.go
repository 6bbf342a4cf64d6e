package natstest

import (
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
)

// PermissionLog keeps the asynchronous errors a connection is told of:
// pass Handler as its nats.ErrorHandler, then ask Refused.
type PermissionLog struct {
	mu   sync.Mutex
	errs []string
}

// Handler is a nats.ErrorHandler that keeps the error.
func (l *PermissionLog) Handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err.Error())
}

// Refused reports whether an error kept names subj as a permissions
// violation.
func (l *PermissionLog) Refused(subj string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.errs {
		if strings.Contains(strings.ToLower(e), "permissions violation") && strings.Contains(e, `"`+subj+`"`) {
			return true
		}
	}
	return false
}
