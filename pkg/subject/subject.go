// Package subject names the NATS subjects of the wire contract and checks
// session ids, so that a bad id is refused before it can become another
// subject.
package subject

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
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
// must be 1 to 128 characters of A-Z a-z 0-9 _ -. The error names the
// first character that is not allowed, whole (a non-ASCII one with its
// code point), and its position counted in characters from 1; a byte
// that is not UTF-8 is named as a byte, never printed as a character.
func CheckSession(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty", ErrBadSession)
	}
	pos := 0
	for i, r := range id {
		pos++
		if pos > MaxSessionLen {
			return fmt.Errorf("%w: %d characters, at most %d", ErrBadSession, utf8.RuneCountInString(id), MaxSessionLen)
		}
		if r < utf8.RuneSelf && allowed(byte(r)) {
			continue
		}
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(id[i:]); size == 1 {
				return fmt.Errorf("%w: %q is not valid UTF-8: byte %#02x at character %d", ErrBadSession, truncate(id), id[i], pos)
			}
		}
		return fmt.Errorf("%w: %q has %s at character %d; use only A-Z a-z 0-9 _ -", ErrBadSession, truncate(id), describeRune(r), pos)
	}
	return nil
}

func allowed(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// describeRune quotes a character, with its code point when it is not
// ASCII: 'é' (U+00E9), '\u200b' (U+200B).
func describeRune(r rune) string {
	if r < utf8.RuneSelf {
		return strconv.QuoteRune(r)
	}
	return fmt.Sprintf("%q (%U)", r, r)
}

// truncate cuts s after 40 characters, for an error message; never
// inside a character.
func truncate(s string) string {
	n := 0
	for i := range s {
		if n == 40 {
			return s[:i] + "..."
		}
		n++
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
// subject (transcripts.<session>, or transcripts.<k>.<session> in a
// partitioned stream), checked. Whatever maps a stored subject, or a
// subject filter naming one session's records, to its session goes
// through here.
func SessionOfTranscript(subj string) (string, error) {
	s, _, err := SessionOfStored(subj)
	return s, err
}

// PartitionPrefix is the prefix of the per-partition context endpoints:
// ctxd.p.<partition>.<session>, served by the instance that applies the
// partition's records while it does.
const PartitionPrefix = "ctxd.p."

// Partition returns the partition of a session among p, as the stream's
// subject transform {{partition(p,1)}} computes it: FNV-32a of the
// session id, modulo p. With p <= 1 every session is in partition 0.
func Partition(session string, p int) int {
	if p <= 1 {
		return 0
	}
	h := uint32(2166136261) // FNV-32a offset basis
	for i := 0; i < len(session); i++ {
		h ^= uint32(session[i])
		h *= 16777619 // FNV-32a prime
	}
	return int(h % uint32(p))
}

// Stored returns the subject a session's records are stored on, in a
// stream of p partitions: transcripts.<session> for p <= 1, else
// transcripts.<partition>.<session>. Records are always published to
// transcripts.<session>; the stream's transform stores them here.
func Stored(session string, p int) string {
	if p <= 1 {
		return TranscriptsPrefix + session
	}
	return PartitionFilter(Partition(session, p)) + session
}

// PartitionFilter returns the prefix of a partition's stored subjects,
// transcripts.<k>.; with "*" after it, the filter of its consumer.
func PartitionFilter(k int) string {
	return TranscriptsPrefix + strconv.Itoa(k) + "."
}

// PartitionContext returns the subject a session's context is requested
// on at its partition's owner.
func PartitionContext(session string, p int) (string, error) {
	if err := CheckSession(session); err != nil {
		return "", err
	}
	return PartitionPrefix + strconv.Itoa(Partition(session, p)) + "." + session, nil
}

// SessionOfStored returns the session of a stored subject, of either
// shape: transcripts.<session>, or transcripts.<k>.<session>, with its
// partition k (-1 for the first shape).
func SessionOfStored(subj string) (session string, k int, err error) {
	rest, ok := strings.CutPrefix(subj, TranscriptsPrefix)
	if !ok {
		return "", -1, fmt.Errorf("%w: subject %q is not under %q", ErrBadSession, truncate(subj), TranscriptsPrefix)
	}
	part, id, two := strings.Cut(rest, ".")
	if !two {
		if err := CheckSession(rest); err != nil {
			return "", -1, err
		}
		return rest, -1, nil
	}
	n, err := strconv.Atoi(part)
	if err != nil || n < 0 || strconv.Itoa(n) != part {
		return "", -1, fmt.Errorf("%w: subject %q has %q where a partition number goes", ErrBadSession, truncate(subj), truncate(part))
	}
	if err := CheckSession(id); err != nil {
		return "", -1, err
	}
	return id, n, nil
}
