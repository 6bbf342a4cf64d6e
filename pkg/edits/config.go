package edits

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/ctxd/ctxd/pkg/record"
)

// Defaults and bounds of the edits a request may ask for.
const (
	// DefaultKeepResults is tool_results.keep without one: the most recent
	// results left whole.
	DefaultKeepResults = 3
	// DefaultKeepTurns is thinking.keep_turns without one.
	DefaultKeepTurns = 1
	// DefaultKeepImages is images.keep without one.
	DefaultKeepImages = 3
	// DefaultBatch is images.batch without one: images are replaced ten
	// at a time, so that the body before the latest ones holds for ten
	// steps between changes.
	DefaultBatch = 10
	// MaxCount bounds every count (keep, keep_turns, batch).
	MaxCount = 1 << 30
	// MaxTokens bounds every token figure.
	MaxTokens = 1 << 53
	// MaxExcludeTools bounds the length of exclude_tools.
	MaxExcludeTools = 256
)

// ErrInvalid is wrapped by every error of Parse.
var ErrInvalid = errors.New("invalid edits")

// Config is the edits a request asks for; a nil kind is not applied.
type Config struct {
	ToolResults *ToolResults
	Thinking    *Thinking
	Images      *Images
}

// ToolResults clears the content of old tool results once the context is
// over a number of tokens.
type ToolResults struct {
	// TriggerTokens is trigger_tokens, when HasTrigger; without one the
	// request's budget_tokens is the trigger.
	TriggerTokens uint64
	HasTrigger    bool
	// Keep is how many of the most recent results stay whole.
	Keep int
	// ClearAtLeastTokens is the step of what is cleared: the cleared set
	// changes only when the excess over the trigger crosses a multiple of
	// it, so that the body stays the same between those points.
	ClearAtLeastTokens uint64
	// ExcludeTools names the tools whose results are never cleared.
	ExcludeTools []string
	// ClearInputs also replaces the arguments of a cleared result's call
	// by {}.
	ClearInputs bool
}

// Thinking removes the thinking of older assistant turns.
type Thinking struct {
	// KeepTurns is how many of the last assistant messages keep their
	// thinking.
	KeepTurns int
}

// Images replaces old images by the notice of CONTEXT.md section 5.
type Images struct {
	// Keep is how many of the most recent images stay.
	Keep int
	// Batch is how many are replaced at a time: the count replaced is
	// always a multiple of it.
	Batch int
}

// Parse reads the edits field of a request: a map of kinds (tool_results,
// thinking, images), each a map of its fields, every default filled in.
// Unknown kinds or fields, and values of the wrong type or out of bounds,
// are an error that wraps ErrInvalid and names the field.
func Parse(v any) (*Config, error) {
	m, ok := v.(*record.Map)
	if !ok {
		return nil, fmt.Errorf("%w: edits must be an object, got %s", ErrInvalid, record.TypeName(v))
	}
	c := &Config{}
	for _, kind := range m.Members {
		path := "edits." + kind.Key
		fields, ok := kind.Value.(*record.Map)
		if !ok && isKind(kind.Key) {
			return nil, fmt.Errorf("%w: %s must be an object, got %s", ErrInvalid, path, record.TypeName(kind.Value))
		}
		var err error
		switch kind.Key {
		case "tool_results":
			if c.ToolResults != nil {
				return nil, fmt.Errorf("%w: %s given twice", ErrInvalid, path)
			}
			c.ToolResults, err = parseToolResults(path, fields)
		case "thinking":
			if c.Thinking != nil {
				return nil, fmt.Errorf("%w: %s given twice", ErrInvalid, path)
			}
			c.Thinking = &Thinking{KeepTurns: DefaultKeepTurns}
			err = eachField(path, fields, map[string]func(string, any) error{
				"keep_turns": func(p string, v any) (err error) { c.Thinking.KeepTurns, err = count(p, v); return },
			})
		case "images":
			if c.Images != nil {
				return nil, fmt.Errorf("%w: %s given twice", ErrInvalid, path)
			}
			c.Images = &Images{Keep: DefaultKeepImages, Batch: DefaultBatch}
			err = eachField(path, fields, map[string]func(string, any) error{
				"keep":  func(p string, v any) (err error) { c.Images.Keep, err = count(p, v); return },
				"batch": func(p string, v any) (err error) { c.Images.Batch, err = count(p, v); return },
			})
			if err == nil && c.Images.Batch == 0 {
				err = fmt.Errorf("%w: %s.batch must be at least 1", ErrInvalid, path)
			}
		default:
			return nil, fmt.Errorf("%w: %s: unknown kind (want tool_results, thinking or images)", ErrInvalid, path)
		}
		if err != nil {
			return nil, err
		}
	}
	return c, nil
}

func isKind(k string) bool { return k == "tool_results" || k == "thinking" || k == "images" }

func parseToolResults(path string, m *record.Map) (*ToolResults, error) {
	t := &ToolResults{Keep: DefaultKeepResults}
	err := eachField(path, m, map[string]func(string, any) error{
		"trigger_tokens": func(p string, v any) (err error) {
			t.TriggerTokens, err = tokens(p, v)
			t.HasTrigger = true
			return
		},
		"keep": func(p string, v any) (err error) { t.Keep, err = count(p, v); return },
		"clear_at_least_tokens": func(p string, v any) (err error) {
			t.ClearAtLeastTokens, err = tokens(p, v)
			return
		},
		"exclude_tools": func(p string, v any) error {
			arr, ok := v.([]any)
			if !ok {
				return fmt.Errorf("%w: %s must be an array of tool names, got %s", ErrInvalid, p, record.TypeName(v))
			}
			if len(arr) > MaxExcludeTools {
				return fmt.Errorf("%w: %s has %d names, at most %d", ErrInvalid, p, len(arr), MaxExcludeTools)
			}
			t.ExcludeTools = make([]string, len(arr))
			for i, e := range arr {
				s, ok := e.(string)
				if !ok {
					return fmt.Errorf("%w: %s[%d] must be a string, got %s", ErrInvalid, p, i, record.TypeName(e))
				}
				t.ExcludeTools[i] = s
			}
			return nil
		},
		"clear_inputs": func(p string, v any) error {
			b, ok := v.(bool)
			if !ok {
				return fmt.Errorf("%w: %s must be true or false, got %s", ErrInvalid, p, record.TypeName(v))
			}
			t.ClearInputs = b
			return nil
		},
	})
	return t, err
}

// eachField reads m's members with the readers of their names; a name
// without one is an unknown field, a field given twice an error.
func eachField(path string, m *record.Map, readers map[string]func(string, any) error) error {
	seen := make(map[string]bool, len(m.Members))
	for _, f := range m.Members {
		p := path + "." + f.Key
		read, ok := readers[f.Key]
		if !ok {
			return fmt.Errorf("%w: %s: unknown field", ErrInvalid, p)
		}
		if seen[f.Key] {
			return fmt.Errorf("%w: %s given twice", ErrInvalid, p)
		}
		seen[f.Key] = true
		if err := read(p, f.Value); err != nil {
			return err
		}
	}
	return nil
}

func count(path string, v any) (int, error) {
	n, err := integer(path, v, MaxCount)
	return int(n), err
}

func tokens(path string, v any) (uint64, error) { return integer(path, v, MaxTokens) }

// integer reads a non-negative integer of at most limit.
func integer(path string, v any, limit uint64) (uint64, error) {
	s, ok := record.IntegerString(v)
	if !ok || (len(s) > 0 && s[0] == '-') {
		return 0, fmt.Errorf("%w: %s must be a non-negative integer, got %s", ErrInvalid, path, record.Describe(v))
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > limit {
		return 0, fmt.Errorf("%w: %s must be at most %d, got %s", ErrInvalid, path, limit, record.Describe(v))
	}
	return n, nil
}

// Map returns the config as the request carries it, every default
// written out: Parse reads it back to an equal Config.
func (c *Config) Map() *record.Map {
	m := record.NewMap()
	if t := c.ToolResults; t != nil {
		f := record.NewMap()
		if t.HasTrigger {
			f.Set("trigger_tokens", t.TriggerTokens)
		}
		f.Set("keep", int64(t.Keep))
		f.Set("clear_at_least_tokens", t.ClearAtLeastTokens)
		if t.ExcludeTools != nil {
			names := make([]any, len(t.ExcludeTools))
			for i, s := range t.ExcludeTools {
				names[i] = s
			}
			f.Set("exclude_tools", names)
		}
		f.Set("clear_inputs", t.ClearInputs)
		m.Set("tool_results", f)
	}
	if c.Thinking != nil {
		m.Set("thinking", record.NewMap("keep_turns", int64(c.Thinking.KeepTurns)))
	}
	if c.Images != nil {
		m.Set("images", record.NewMap("keep", int64(c.Images.Keep), "batch", int64(c.Images.Batch)))
	}
	return m
}

// ParseJSON reads the edits field from its JSON text, as a command line
// gives it.
func ParseJSON(data []byte) (*Config, error) {
	v, err := record.Decoder{MaxBytes: 64 << 10, MaxDepth: 8}.DecodeJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%w: not JSON: %w", ErrInvalid, err)
	}
	return Parse(v)
}
