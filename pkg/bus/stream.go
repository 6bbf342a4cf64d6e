package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// MinDuplicateWindow is the shortest de-duplication window the wire
// contract allows.
const MinDuplicateWindow = 2 * time.Minute

// FieldError says which field of an existing stream or consumer is not
// what ctxd needs.
type FieldError struct {
	Object string // "stream TRANSCRIPTS"
	Field  string // the field's JSON name, as in streams/*.json
	Have   any
	Want   string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s: field %s is %v, need %s", e.Object, e.Field, e.Have, e.Want)
}

// ErrIncompatible is wrapped by the error EnsureStream returns for an
// existing stream ctxd cannot run on.
var ErrIncompatible = errors.New("incompatible existing stream")

// CheckStream compares an existing stream's configuration with the one
// ctxd wants, field by field, and returns every difference that matters.
func CheckStream(have, want jetstream.StreamConfig) error {
	obj := "stream " + want.Name
	var errs []error
	if !slices.Equal(sorted(have.Subjects), sorted(want.Subjects)) {
		errs = append(errs, &FieldError{obj, "subjects", have.Subjects, fmt.Sprintf("%v", want.Subjects)})
	}
	if have.Retention != want.Retention {
		errs = append(errs, &FieldError{obj, "retention", have.Retention, want.Retention.String() + " (other policies delete records)"})
	}
	if have.Storage != want.Storage {
		errs = append(errs, &FieldError{obj, "storage", have.Storage, want.Storage.String()})
	}
	if have.Duplicates < MinDuplicateWindow {
		errs = append(errs, &FieldError{obj, "duplicate_window", have.Duplicates, "at least " + MinDuplicateWindow.String()})
	}
	if want.MaxMsgSize > 0 && have.MaxMsgSize > 0 && have.MaxMsgSize < want.MaxMsgSize {
		errs = append(errs, &FieldError{obj, "max_msg_size", have.MaxMsgSize, fmt.Sprintf("at least %d", want.MaxMsgSize)})
	}
	if want.AllowDirect && !have.AllowDirect {
		errs = append(errs, &FieldError{obj, "allow_direct", false, "true"})
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrIncompatible, errors.Join(errs...))
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// EnsureStream creates the stream when it is missing and checks it when it
// exists.
func EnsureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig) (jetstream.Stream, error) {
	st, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		st, err = js.CreateStream(ctx, want)
		if err != nil {
			return nil, fmt.Errorf("create stream %s: %w", want.Name, err)
		}
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up stream %s: %w", want.Name, err)
	}
	if err := CheckStream(st.CachedInfo().Config, want); err != nil {
		return nil, err
	}
	return st, nil
}

// EnsureConsumer creates the durable consumer, or updates it to the
// definition when it exists.
func EnsureConsumer(ctx context.Context, st jetstream.Stream, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	c, err := st.CreateOrUpdateConsumer(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("consumer %s on stream %s: %w", cfg.Durable, st.CachedInfo().Config.Name, err)
	}
	return c, nil
}
