package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/pkg/subject"
)

// Statuses of records the projection never takes, beside those of
// projection.Fate.
const (
	// StatusRejected: the record does not decode, or is not a map; the
	// service skips it and lists it as rejected.
	StatusRejected projection.Status = "rejected"
	// StatusQuarantined: the record would take its session past the
	// session bound; the service never applies it.
	StatusQuarantined projection.Status = "quarantined"
	// StatusUnexplained: the view did not run the rules, since the
	// session holds more than a view reads (View.Cut says so); ctxd
	// inspect explains every record.
	StatusUnexplained projection.Status = "unexplained"
)

// Reader reads a session's stored records.
type Reader interface {
	// Records calls fn for each stored record of the session with a
	// stream sequence up to to, in order; to is math.MaxUint64 for all.
	Records(ctx context.Context, session string, to uint64, fn func(seq uint64, data []byte) error) error
}

// Config is what decides a session's context beside its records: the
// service's projection options and limits. With others than the
// service's, a view disagrees with what the service answers.
type Config struct {
	Options projection.Options
	Limits  store.Limits
}

// DefaultConfig is the service's default configuration.
func DefaultConfig() Config {
	return Config{Options: projection.Options{BrowserTools: projection.DefaultBrowserTools}, Limits: store.DefaultLimits()}
}

// View is a session as stored beside its context: every record with what
// the rules made of it, and the context they give.
type View struct {
	Session string
	// At is the sequence the view was asked for: records after it are
	// left out. 0 asks for every record.
	At uint64
	// Seq is the stream sequence of the last record read.
	Seq  uint64
	Rows []Row
	// Messages is the context: projection.Build of the records applied.
	Messages []any
	Dropped  projection.Dropped
	Summary  Summary
	// Cut, when not empty, says why the view holds no fates and no
	// context: the session's records hold more than a view reads. Rows
	// then lists every record by sequence and size, with the status
	// StatusUnexplained, and Messages, Dropped and Summary are empty.
	Cut string
	// Edited, for a view with context edits applied (?edits=, edited.go),
	// says what the edits did to each message they changed, by its index
	// in Messages.
	Edited map[int]string
}

// Row is one stored record and its fate.
type Row struct {
	projection.Fate
	// Size is the stored record's size in bytes.
	Size int
	// Value is the decoded record; nil when it did not decode.
	Value any
	// First is the index in View.Messages of the first message the record
	// gives (Fate.Messages of them).
	First int
}

// Summary sizes a session's context.
type Summary struct {
	Seq           uint64 `json:"seq"`
	Messages      int    `json:"messages"`
	Bytes         int    `json:"bytes"`
	Tokens        int    `json:"tokens"`
	ImagesKept    int    `json:"images_kept"`
	ImagesOmitted int    `json:"images_omitted"`
	UnpairedCalls int    `json:"unpaired_calls"`
	OrphanResults int    `json:"orphan_results"`
}

// Summarize sizes a context: its JSON encoding's length and the input
// tokens render.Estimate gives for it. The messages are only read.
func Summarize(seq uint64, messages []any, d projection.Dropped) Summary {
	body := render.Body{Format: render.Neutral, Fields: record.NewMap("messages", messages)}
	n, _ := record.JSONLen(messages)
	u := render.Estimate(body, n)
	return Summary{
		Seq: seq, Messages: len(messages), Bytes: n, Tokens: u.InputTokens,
		ImagesKept: u.Images, ImagesOmitted: d.ImagesOmitted,
		UnpairedCalls: len(d.UnpairedCalls), OrphanResults: len(d.OrphanResults),
	}
}

// ErrNoSession is returned for a session without records up to the
// sequence asked for.
var ErrNoSession = errors.New("no records")

// ErrTooLong is returned for a session with more records than a view
// lists (Options.MaxRecords).
var ErrTooLong = errors.New("too many records for a view")

// Load reads a session's records up to at (every record when at is 0)
// and explains them: the records the service would apply go through
// projection.Explain, which is projection.Build, so Messages is exactly
// the context as it was at that sequence. Records the service skips
// (undecodable, or quarantined past the session bound, weighed as the
// store weighs them) are listed with the reason and left out.
func Load(ctx context.Context, r Reader, session string, at uint64, cfg Config) (*View, error) {
	if err := subject.CheckSession(session); err != nil {
		return nil, err
	}
	to := at
	if to == 0 {
		to = math.MaxUint64
	}
	dec := cfg.Limits.Decoder()
	v := &View{Session: session, At: at}
	var recs []projection.Record
	var applied []int // index in Rows of each of recs
	var weight int64
	err := r.Records(ctx, session, to, func(seq uint64, data []byte) error {
		row := Row{Size: len(data)}
		row.Seq = seq
		v.Seq = seq
		m, err := dec.Decode(data)
		if err != nil {
			row.Class, row.Status, row.Rule = "undecodable", StatusRejected, err.Error()
			v.Rows = append(v.Rows, row)
			return nil
		}
		row.Value = m
		resets := cfg.Limits.Resets(m, len(data))
		w, err := cfg.Limits.Weigh(weight, len(data), resets)
		if err != nil {
			row.Class, row.Status, row.Rule = projection.Class(m), StatusQuarantined, err.Error()
			v.Rows = append(v.Rows, row)
			return nil
		}
		weight = w
		applied = append(applied, len(v.Rows))
		recs = append(recs, projection.Record{Seq: seq, Value: m})
		v.Rows = append(v.Rows, row)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read session %s: %w", session, err)
	}
	if len(v.Rows) == 0 {
		return nil, fmt.Errorf("session %s: %w", session, ErrNoSession)
	}
	ex := projection.Explain(recs, cfg.Options)
	next := 0
	for i, f := range ex.Fates {
		row := &v.Rows[applied[i]]
		row.Fate = f
		row.First = next
		next += f.Messages
	}
	v.Messages, v.Dropped = ex.Messages, ex.Dropped
	v.Summary = Summarize(v.Seq, v.Messages, v.Dropped)
	return v, nil
}

// MarshalJSON encodes the view for scripts: the session, the sequence,
// the records with their fates (not their contents: read those from the
// stream), the context and the dropped report, and cut when the view
// has no fates and no context (see View.Cut).
func (v *View) MarshalJSON() ([]byte, error) {
	type row struct {
		projection.Fate
		Size  int `json:"size"`
		First int `json:"first_message"`
	}
	msgs, err := record.MarshalJSON(v.Messages)
	if err != nil {
		return nil, fmt.Errorf("encode context: %w", err)
	}
	rows := make([]row, len(v.Rows))
	for i, r := range v.Rows {
		rows[i] = row{Fate: r.Fate, Size: r.Size, First: r.First}
		if r.Fate.Messages == 0 {
			rows[i].First = -1
		}
	}
	return json.Marshal(struct {
		Session  string             `json:"session"`
		At       uint64             `json:"at,omitempty"`
		Seq      uint64             `json:"seq"`
		Summary  Summary            `json:"summary"`
		Records  []row              `json:"records"`
		Messages json.RawMessage    `json:"messages"`
		Dropped  projection.Dropped `json:"dropped"`
		Cut      string             `json:"cut,omitempty"`
	}{v.Session, v.At, v.Seq, v.Summary, rows, msgs, v.Dropped, v.Cut})
}
