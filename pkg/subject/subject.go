// Package subject names the NATS subjects of the wire contract and checks
// session ids, so that a bad id is refused before it can become another
// subject.
package subject

import (
	"errors"
	"fmt"
	"strings"
)

// Subject prefixes of the wire contract.
const (
	TranscriptsPrefix = "transcripts."
	ContextPrefix     = "ctxd.context."
	// MaxSessionLen is the longest session id accepted.
	MaxSessionLen = 128
)

// ErrBadSession is wrapped by every session id error.
var ErrBadSession = errors.New("invalid session id")

// CheckSession returns an error naming what is wrong with a session id: it
// must be 1 to 128 characters of A-Z a-z 0-9 _ -.
func CheckSession(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty", ErrBadSession)
	}
	if len(id) > MaxSessionLen {
		return fmt.Errorf("%w: %d characters, at most %d", ErrBadSession, len(id), MaxSessionLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			continue
		}
		return fmt.Errorf("%w: %q has %q at position %d; use only A-Z a-z 0-9 _ -", ErrBadSession, truncate(id), rune(id[i]), i+1)
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// Transcript returns the subject records of a session are published to.
func Transcript(session string) (string, error) {
	if err := CheckSession(session); err != nil {
		return "", err
	}
	return TranscriptsPrefix + session, nil
}

// Context returns the subject a session's context is requested on.
func Context(session string) (string, error) {
	if err := CheckSession(session); err != nil {
		return "", err
	}
	return ContextPrefix + session, nil
}

// SessionOf returns the session id of a subject under prefix, checked.
func SessionOf(subj, prefix string) (string, error) {
	id, ok := strings.CutPrefix(subj, prefix)
	if !ok {
		return "", fmt.Errorf("%w: subject %q is not under %q", ErrBadSession, truncate(subj), prefix)
	}
	if err := CheckSession(id); err != nil {
		return "", err
	}
	return id, nil
}

// SessionOfTranscript returns the session id of a stored record's
// subject (transcripts.<session>), checked. Whatever maps a stored subject,
// or a subject filter naming one session's records, to its session goes
// through here.
func SessionOfTranscript(subj string) (string, error) {
	return SessionOf(subj, TranscriptsPrefix)
}
