package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
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
	// Err, when not nil, is the kind of difference: ErrLimit.
	Err error
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s: field %s is %v, need %s", e.Object, e.Field, e.Have, e.Want)
}

// Unwrap returns the kind of difference, if any.
func (e *FieldError) Unwrap() error { return e.Err }

// ErrIncompatible is wrapped by the error EnsureStream or OpenConsumer
// returns for an existing stream or consumer ctxd cannot run on.
var ErrIncompatible = errors.New("incompatible existing stream or consumer")

// ErrLimit is wrapped by the FieldError of a stream limit: max_age,
// max_msgs, max_bytes or max_msgs_per_subject. Once a limit is reached
// the stream deletes its oldest records, and the contexts built from it
// lose them; with discard new (also an ErrLimit) it refuses new records
// instead. A stream with limits is refused unless AllowLimits is given.
var ErrLimit = errors.New("a stream limit deletes or refuses records")

// CheckOption changes how CheckStream and EnsureStream judge an existing
// stream.
type CheckOption func(*checkOptions)

type checkOptions struct {
	allowLimits bool
	accepted    func(*FieldError)
}

// AllowLimits accepts a stream whose limits delete or refuse records
// (ErrLimit). accepted, when not nil, is called with each limit accepted,
// so that it can be told to the operator.
func AllowLimits(accepted func(*FieldError)) CheckOption {
	return func(o *checkOptions) { o.allowLimits, o.accepted = true, accepted }
}

// CheckStream compares an existing stream's configuration with the one
// ctxd wants, field by field, and returns every difference that matters.
// Limits (ErrLimit) are differences unless AllowLimits is given.
func CheckStream(have, want jetstream.StreamConfig, opts ...CheckOption) error {
	var o checkOptions
	for _, opt := range opts {
		opt(&o)
	}
	obj := "stream " + want.Name
	var errs []error
	if !slices.Equal(sorted(have.Subjects), sorted(want.Subjects)) {
		errs = append(errs, &FieldError{obj, "subjects", have.Subjects, fmt.Sprintf("%v", want.Subjects), nil})
	}
	if have.Retention != want.Retention {
		errs = append(errs, &FieldError{obj, "retention", have.Retention, want.Retention.String() + " (other policies delete records)", nil})
	}
	if have.Storage != want.Storage {
		errs = append(errs, &FieldError{obj, "storage", have.Storage, want.Storage.String(), nil})
	}
	if have.Duplicates < MinDuplicateWindow {
		errs = append(errs, &FieldError{obj, "duplicate_window", have.Duplicates, "at least " + MinDuplicateWindow.String(), nil})
	}
	if want.MaxMsgSize > 0 && have.MaxMsgSize > 0 && have.MaxMsgSize < want.MaxMsgSize {
		errs = append(errs, &FieldError{obj, "max_msg_size", have.MaxMsgSize, fmt.Sprintf("at least %d", want.MaxMsgSize), nil})
	}
	if want.AllowDirect && !have.AllowDirect {
		errs = append(errs, &FieldError{obj, "allow_direct", false, "true", nil})
	}
	for _, fe := range limits(obj, have, want) {
		switch {
		case !o.allowLimits:
			errs = append(errs, fe)
		case o.accepted != nil:
			o.accepted(fe)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrIncompatible, errors.Join(errs...))
}

// limits returns a FieldError (wrapping ErrLimit) for each limit of have
// that want does not set: a limit of want is ctxd's own choice.
func limits(obj string, have, want jetstream.StreamConfig) []*FieldError {
	var out []*FieldError
	limit := func(field string, have any, want string) {
		out = append(out, &FieldError{obj, field, have, want, ErrLimit})
	}
	if have.MaxAge > 0 && (want.MaxAge <= 0 || have.MaxAge < want.MaxAge) {
		limit("max_age", have.MaxAge, "0 (no limit): a max age deletes older records")
	}
	if have.MaxMsgs > 0 && (want.MaxMsgs <= 0 || have.MaxMsgs < want.MaxMsgs) {
		limit("max_msgs", have.MaxMsgs, "-1 (no limit): a limit deletes the oldest records past it")
	}
	if have.MaxBytes > 0 && (want.MaxBytes <= 0 || have.MaxBytes < want.MaxBytes) {
		limit("max_bytes", have.MaxBytes, "-1 (no limit): a limit deletes the oldest records past it")
	}
	if have.MaxMsgsPerSubject > 0 && (want.MaxMsgsPerSubject <= 0 || have.MaxMsgsPerSubject < want.MaxMsgsPerSubject) {
		limit("max_msgs_per_subject", have.MaxMsgsPerSubject, "-1 (no limit): a limit deletes a session's oldest records past it")
	}
	if have.Discard != want.Discard {
		limit("discard", discardName(have.Discard), discardName(want.Discard)+": with discard new a stream at a limit refuses new records")
	}
	return out
}

func discardName(d jetstream.DiscardPolicy) string {
	if d == jetstream.DiscardNew {
		return "new"
	}
	return "old"
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// JetStream returns the JetStream API of a connection: the handle the
// package's functions take.
func JetStream(nc *nats.Conn) (jetstream.JetStream, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return js, nil
}

// EnsureStream creates the stream when it is missing and checks it
// (CheckStream, with opts) when it exists.
func EnsureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, opts ...CheckOption) (jetstream.Stream, error) {
	st, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		st, err = js.CreateStream(ctx, want)
		if err != nil {
			return nil, fmt.Errorf("stream %s: create: %w", want.Name, err)
		}
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", want.Name, err)
	}
	if err := CheckStream(st.CachedInfo().Config, want, opts...); err != nil {
		return nil, err
	}
	return st, nil
}

// LastSeq returns the stream's last sequence and the number of records it
// holds, as the server says now.
func LastSeq(ctx context.Context, st jetstream.Stream) (last, msgs uint64, err error) {
	info, err := st.Info(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("stream %s: %w", st.CachedInfo().Config.Name, err)
	}
	return info.State.LastSeq, info.State.Msgs, nil
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

// OpenConsumer opens the durable consumer of the definition cfg on st for
// an Ingest. A missing one is created to start after sequence after (from
// the start when after is 0): the records up to after are already
// handled. An existing one keeps its place in the stream; it is refused
// when its filter subject is not the definition's (the ingest reads every
// record of its subjects) or its ack policy is another than all or none,
// and its ack wait and pinned TTL are updated to the definition's.
//
// An existing consumer without the definition's priority group and
// policy (one made by an earlier ctxd, which let every instance pull and
// split the records between them), or with ack policy all where the
// definition has none (an earlier ctxd acknowledged the records it
// applied), cannot be changed in place: JetStream refuses to add
// priority groups or change the ack policy by an update. It is replaced
// by one that starts after its acknowledged floor, which every record up
// to it has been applied by then. Nothing is lost: a record past the
// floor is delivered again, and applying is idempotent by sequence. An
// instance of the earlier ctxd still consuming from the old one sees it
// deleted.
func OpenConsumer(ctx context.Context, st jetstream.Stream, cfg jetstream.ConsumerConfig, after uint64) (jetstream.Consumer, error) {
	stream := st.CachedInfo().Config.Name
	c, err := st.Consumer(ctx, cfg.Durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		if after > 0 {
			cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
			cfg.OptStartSeq = after + 1
		}
		return createConsumer(ctx, st, cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("consumer %s on stream %s: %w", cfg.Durable, stream, err)
	}
	have := c.CachedInfo().Config
	checked := have
	if replaceableAck(have.AckPolicy, cfg.AckPolicy) {
		checked.AckPolicy = cfg.AckPolicy
	}
	if err := CheckConsumer(checked, cfg); err != nil {
		return nil, err
	}
	if !samePriority(have, cfg) || have.AckPolicy != cfg.AckPolicy {
		return replaceConsumer(ctx, st, c.CachedInfo(), cfg)
	}
	if cfg.AckPolicy == jetstream.AckNonePolicy {
		cfg.AckWait = have.AckWait // nothing waits for an ack
	}
	if have.AckWait != cfg.AckWait || have.PinnedTTL != cfg.PinnedTTL {
		have.AckWait, have.PinnedTTL = cfg.AckWait, cfg.PinnedTTL
		return EnsureConsumer(ctx, st, have)
	}
	return c, nil
}

// replaceableAck reports whether a consumer with the ack policy have,
// one of those ctxd has defined (all, acknowledged in batches after the
// records are applied, or none), can be replaced by one with want, the
// other: JetStream refuses to change an ack policy by an update.
func replaceableAck(have, want jetstream.AckPolicy) bool {
	ours := func(p jetstream.AckPolicy) bool { return p == jetstream.AckAllPolicy || p == jetstream.AckNonePolicy }
	return have != want && ours(have) && ours(want)
}

// samePriority reports whether two consumer configurations have the same
// priority policy and groups.
func samePriority(have, want jetstream.ConsumerConfig) bool {
	return have.PriorityPolicy == want.PriorityPolicy && slices.Equal(have.PriorityGroups, want.PriorityGroups)
}

// createConsumer creates the durable consumer; when another instance
// created it meanwhile with the same priority settings, that one is used.
func createConsumer(ctx context.Context, st jetstream.Stream, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	c, err := st.CreateConsumer(ctx, cfg)
	if err == nil {
		return c, nil
	}
	if other, oerr := st.Consumer(ctx, cfg.Durable); oerr == nil && samePriority(other.CachedInfo().Config, cfg) {
		return other, nil
	}
	return nil, fmt.Errorf("consumer %s on stream %s: %w", cfg.Durable, st.CachedInfo().Config.Name, err)
}

// replaceConsumer deletes an existing consumer and creates the definition
// in its place, starting after the old one's acknowledged floor.
func replaceConsumer(ctx context.Context, st jetstream.Stream, old *jetstream.ConsumerInfo, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	stream := st.CachedInfo().Config.Name
	info, err := st.Consumer(ctx, cfg.Durable)
	if err == nil {
		if fresh, err := info.Info(ctx); err == nil {
			old = fresh
		}
	}
	floor := old.AckFloor.Stream
	if err := st.DeleteConsumer(ctx, cfg.Durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("consumer %s on stream %s: replace it with a pinned one: %w", cfg.Durable, stream, err)
	}
	cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverAllPolicy, 0
	if floor > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = floor + 1
	}
	for try := 1; ; try++ {
		c, err := createConsumer(ctx, st, cfg)
		var apiErr *jetstream.APIError
		if err == nil || try == 5 || !errors.As(err, &apiErr) || apiErr.Code != 500 {
			return c, err
		}
		// The server removes the deleted consumer's store after its
		// reply, under the same name: a create meanwhile can fail in
		// that directory (rename ... o.dat: no such file or directory).
		t := time.NewTimer(time.Duration(try) * 50 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, err
		}
	}
}

// CheckConsumer compares an existing consumer's configuration with the
// definition, in the fields an Ingest relies on, and returns every
// difference.
func CheckConsumer(have, want jetstream.ConsumerConfig) error {
	obj := "consumer " + want.Durable
	var errs []error
	if have.AckPolicy != want.AckPolicy {
		errs = append(errs, &FieldError{obj, "ack_policy", have.AckPolicy, want.AckPolicy.String(), nil})
	}
	if have.FilterSubject != want.FilterSubject {
		errs = append(errs, &FieldError{obj, "filter_subject", fmt.Sprintf("%q", have.FilterSubject), fmt.Sprintf("%q", want.FilterSubject), nil})
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrIncompatible, errors.Join(errs...))
}
