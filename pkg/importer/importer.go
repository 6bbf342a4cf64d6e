package importer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"path"
	"path/filepath"
	"strings"

	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/subject"
)

// Format names a transcript format.
type Format string

// The formats, and Auto, which detects one from the content.
const (
	Auto       Format = "auto"
	ClaudeCode Format = "claude-code"
	Codex      Format = "codex"
	Pi         Format = "pi"
	Gemini     Format = "gemini"
	OpenHands  Format = "openhands"
)

// Formats lists the formats a parser exists for, in the order docs/IMPORT.md lists them.
var Formats = []Format{ClaudeCode, Codex, Pi, Gemini, OpenHands}

// ParseFormat checks a format name: one of Formats, or "auto".
func ParseFormat(s string) (Format, error) {
	f := Format(s)
	if f == Auto {
		return f, nil
	}
	for _, g := range Formats {
		if f == g {
			return f, nil
		}
	}
	names := make([]string, 0, len(Formats)+1)
	for _, g := range Formats {
		names = append(names, string(g))
	}
	names = append(names, string(Auto))
	return "", fmt.Errorf("unknown format %q: want one of %s", s, strings.Join(names, ", "))
}

// ErrFormat is wrapped by the error of a file that holds nothing the parser
// understands: not a transcript of the format asked for.
var ErrFormat = errors.New("not a transcript of this format")

// Error is a conversion failure, naming the file and, when known, the
// place in it.
type Error struct {
	Name  string // the file or directory, as given
	Where string // "line 12", "message 3", an event file name; "" for the whole file
	Err   error
}

func (e *Error) Error() string {
	if e.Where == "" {
		return fmt.Sprintf("%s: %v", e.Name, e.Err)
	}
	return fmt.Sprintf("%s: %s: %v", e.Name, e.Where, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Transcript is one session converted from a source file. A file holds one
// transcript, except a Claude Code file that also holds sidechain lines,
// whose subagents become transcripts of their own.
type Transcript struct {
	Name   string // the file or directory, as given
	Format Format
	// Source is the session id the tool gave the conversation ("" when the
	// file carries none).
	Source string
	// Session is the default ctxd session id: Source (or the file name)
	// made valid, with "_agent-<id>" appended for a subagent.
	Session string
	// Agent is the subagent id of a sidechain transcript, "" otherwise.
	Agent   string
	Records []Record
	Report  Report
	// Unsettled is how many of the last Records the tool may still write
	// again: those of Gemini CLI's last model message, which it writes
	// again whole each time its calls, results or tokens change. A
	// following import holds them back until the file goes on past them;
	// an import of the file as it stands publishes them.
	Unsettled int
}

// Record is one ctxd record and where it came from.
type Record struct {
	// ID is stable across conversions of the same file, or of the same file
	// grown: derived from the source's ids, else from the file's session id
	// and the line.
	ID string
	// Where is the place in the file the record came from: "line 12",
	// "message 3" (Gemini's JSON files), or an event file's name.
	Where string

	class string
	// value is the record as a map; nil until Value decodes raw, for a
	// record kept only as bytes.
	value *record.Map
	// raw is the record's JSON made of the source's own bytes where it
	// passes source values through; nil to encode value, or to splice
	// parts.
	raw   []byte
	parts *parts
	// enc is value's encoding, once Size made it: a record does not change
	// once converted.
	enc []byte
}

// Value returns the record: a map of the types pkg/record encodes. A
// record whose bytes are the source's own is decoded from them on first
// use: an import that only publishes never decodes what it passes through.
func (r *Record) Value() *record.Map {
	if r.value == nil && (r.raw != nil || r.parts != nil) {
		b, _ := r.JSON()
		v, err := rawDecoder.Decode(b)
		if err != nil {
			// The bytes were decoded or validated when the file was read.
			panic(fmt.Sprintf("importer: record %s (%s) does not decode: %v", r.ID, r.Where, err))
		}
		r.value = v
	}
	return r.value
}

// rawDecoder decodes a record's own bytes: no limit, they were checked.
var rawDecoder = record.Decoder{MaxBytes: math.MaxInt, MaxDepth: math.MaxInt32}

// JSON returns the record's JSON encoding: the source's own bytes for the
// values the record passes through unchanged, the value encoded otherwise.
// Decoded, it is Value. The bytes may be shared with the record: the
// caller must not change them.
func (r *Record) JSON() ([]byte, error) {
	switch {
	case r.raw != nil:
		return r.raw, nil
	case r.parts != nil:
		return r.parts.json(), nil
	case r.enc != nil:
		return r.enc, nil
	}
	return record.MarshalJSON(r.value)
}

// Size returns the length of the record's JSON, without building it when
// it can. A record kept as a value is encoded, and the encoding kept for
// JSON (so Size must not run concurrently with another call on the
// record): a caller that checks sizes before it sends encodes each
// record once.
func (r *Record) Size() (int, error) {
	switch {
	case r.raw != nil:
		return len(r.raw), nil
	case r.parts != nil:
		return r.parts.size, nil
	case r.enc == nil:
		b, err := record.MarshalJSON(r.value)
		if err != nil {
			return 0, err
		}
		r.enc = b
	}
	return len(r.enc), nil
}

// Class names the kind of a record for reports: its role, "compaction", or
// "metadata" for records that never reach the model context.
func (r *Record) Class() string { return r.class }

func classOf(m *record.Map) string {
	if t, _ := m.String("type"); t == "compaction" {
		return "compaction"
	} else if t == "custom_message" {
		return "custom"
	}
	if role, ok := m.String("role"); ok {
		return role
	}
	return "metadata"
}

// DefaultMaxLine is the longest line a Parser reads unless told
// otherwise: 16 MiB, twice the largest message of the transcripts stream
// (streams/transcripts.stream.json), since a Claude Code line can hold a
// tool's output twice (for the model and for the tool's own display).
const DefaultMaxLine = 16 << 20

// ErrLineTooLong is wrapped by the error of a file with a line longer than
// the Parser's MaxLine.
var ErrLineTooLong = errors.New("line too long")

// DefaultMaxFile is the largest file a Parser reads unless told
// otherwise: 4 GiB. A file is read whole before it is converted (a
// Claude Code file is a tree whose branches are known only at its end),
// so this bounds what an import holds, whatever its input: an endless
// stream of valid lines is refused once it passes the bound.
const DefaultMaxFile = 4 << 30

// ErrFileTooLarge is wrapped by the error of a file larger than the
// Parser's MaxFile.
var ErrFileTooLarge = errors.New("file too large")

// Parser converts transcript files within limits. The zero Parser uses the
// defaults.
type Parser struct {
	// MaxLine is the longest line read, in bytes, its newline not counted;
	// 0 means DefaultMaxLine. A longer line fails the file as soon as it
	// is met: an input without newlines (a device, a binary file) is
	// refused after MaxLine bytes, not read whole.
	MaxLine int
	// MaxFile is the largest file read, in bytes; 0 means DefaultMaxFile.
	// A larger one fails as soon as it is known to be: at once for a file
	// whose size is known, after MaxFile bytes for a stream.
	MaxFile int64
}

func (p Parser) maxLine() int {
	if p.MaxLine <= 0 {
		return DefaultMaxLine
	}
	return p.MaxLine
}

func (p Parser) maxFile() int64 {
	if p.MaxFile <= 0 {
		return DefaultMaxFile
	}
	return p.MaxFile
}

func fileTooLarge(maxFile int64) error {
	return fmt.Errorf("%w: more than %d bytes", ErrFileTooLarge, maxFile)
}

// Parse converts one transcript file with the default Parser.
func Parse(f Format, name string, r io.Reader) ([]*Transcript, error) {
	return Parser{}.Parse(f, name, r)
}

// ParseBytes converts a file's bytes with the default Parser.
func ParseBytes(f Format, name string, data []byte) ([]*Transcript, error) {
	return Parser{}.ParseBytes(f, name, data)
}

// ParseFS converts a transcript kept as a directory with the default
// Parser.
func ParseFS(f Format, fsys fs.FS, name string) ([]*Transcript, error) {
	return Parser{}.ParseFS(f, fsys, name)
}

// Parse converts one transcript file. name is the file's path as the user
// gave it: it appears in reports and errors and, when the content carries
// no session id, it names the source. An OpenHands conversation is a
// directory: use ParseFS.
func (p Parser) Parse(f Format, name string, r io.Reader) ([]*Transcript, error) {
	data, err := readAll(r, p.maxLine(), p.maxFile())
	if err != nil {
		return nil, named(name, err)
	}
	return parse(f, name, data, true)
}

// ParseBytes is Parse of a file's bytes, which the records it returns may
// share: data must not change while they are in use.
func (p Parser) ParseBytes(f Format, name string, data []byte) ([]*Transcript, error) {
	if int64(len(data)) > p.maxFile() {
		return nil, named(name, fileTooLarge(p.maxFile()))
	}
	if err := checkLines(data, p.maxLine()); err != nil {
		return nil, named(name, err)
	}
	return parse(f, name, data, true)
}

// parse converts a file's bytes. With sparse, large message contents that
// pass through unchanged are checked and kept as bytes, not decoded; the
// tests compare it with the full decoding.
func parse(f Format, name string, data []byte, sparse bool) ([]*Transcript, error) {
	var err error
	if f == Auto {
		if f, err = Detect(data); err != nil {
			return nil, named(name, err)
		}
	}
	var ts []*Transcript
	switch f {
	case ClaudeCode:
		ts, err = parseClaudeCode(name, data, sparse)
	case Codex:
		ts, err = parseCodex(name, data)
	case Pi:
		ts, err = parsePi(name, data, sparse)
	case Gemini:
		ts, err = parseGemini(name, data)
	case OpenHands:
		ts, err = parseOpenHandsFile(name, data)
	default:
		_, err = ParseFormat(string(f))
	}
	if err != nil {
		return nil, named(name, err)
	}
	for _, t := range ts {
		t.Name, t.Format = name, f
	}
	return ts, nil
}

// ParseFS converts a transcript kept as a directory: an OpenHands
// conversation (the directory holding events/, or events/ itself). name is
// the directory as the user gave it.
func (p Parser) ParseFS(f Format, fsys fs.FS, name string) ([]*Transcript, error) {
	if f == Auto {
		var err error
		if f, err = DetectFS(fsys); err != nil {
			return nil, &Error{Name: name, Err: err}
		}
	}
	if f != OpenHands {
		return nil, &Error{Name: name, Err: fmt.Errorf("a directory: only an OpenHands conversation is a directory; pass %s's files", f)}
	}
	ts, err := parseOpenHands(fsys, name, p.maxLine(), p.maxFile())
	if err != nil {
		return nil, named(name, err)
	}
	for _, t := range ts {
		t.Name, t.Format = name, f
	}
	return ts, nil
}

// readAll reads r whole, in one allocation when r knows its size (a file),
// and fails as soon as a line is longer than maxLine: what it holds is
// bounded by the input's lines, whatever the input.
func readAll(r io.Reader, maxLine int, maxFile int64) ([]byte, error) {
	var size int64
	switch f := r.(type) {
	case interface{ Len() int }:
		size = int64(f.Len())
	case interface{ Stat() (fs.FileInfo, error) }:
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			size = st.Size()
		}
	}
	if size > maxFile {
		return nil, fileTooLarge(maxFile)
	}
	buf := make([]byte, 0, int(size)+bytes.MinRead)
	n, start := 1, 0 // the line being read, and where it starts in buf
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		k, err := r.Read(buf[len(buf):cap(buf)])
		from := len(buf)
		buf = buf[:len(buf)+k]
		if int64(len(buf)) > maxFile {
			return nil, fileTooLarge(maxFile)
		}
		for {
			i := bytes.IndexByte(buf[from:], '\n')
			if i < 0 {
				break
			}
			if lineLen(buf[start:from+i]) > maxLine {
				return nil, lineTooLong(n, maxLine)
			}
			from += i + 1
			start, n = from, n+1
		}
		if len(buf)-start > maxLine+1 { // one more may be the '\r' of a CRLF
			return nil, lineTooLong(n, maxLine)
		}
		if err == io.EOF {
			if lineLen(buf[start:]) > maxLine {
				return nil, lineTooLong(n, maxLine)
			}
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// checkLines fails when a line of data is longer than maxLine.
func checkLines(data []byte, maxLine int) error {
	for n := 1; len(data) > 0; n++ {
		var line []byte
		line, data, _ = bytes.Cut(data, newline)
		if lineLen(line) > maxLine {
			return lineTooLong(n, maxLine)
		}
	}
	return nil
}

// lineLen is the length of a line without the '\r' of a CRLF end.
func lineLen(line []byte) int {
	if len(line) > 0 && line[len(line)-1] == '\r' {
		return len(line) - 1
	}
	return len(line)
}

func lineTooLong(n, maxLine int) error {
	return &Error{Where: lineWhere(n), Err: fmt.Errorf("%w: more than %d bytes", ErrLineTooLong, maxLine)}
}

// named makes err an *Error naming the file.
func named(name string, err error) error {
	var e *Error
	if errors.As(err, &e) {
		if e.Name == "" {
			e.Name = name
		}
		return e
	}
	return &Error{Name: name, Err: err}
}

// Detect tells a transcript file's format from its content: the first
// lines that name one decide. A line among them that does not decode is
// the error, named by its line (an *Error), rather than a format not
// recognised.
func Detect(data []byte) (Format, error) {
	n, first := firstLine(data)
	v, _, err := decodeLenient(first)
	if _, ok := v.(*record.Map); err != nil || !ok {
		// Not JSON lines: a whole-file JSON value (Gemini's legacy files).
		whole, _, _, werr := decodeWhole(data)
		if wm, ok := whole.(*record.Map); werr == nil && ok {
			if _, ok := wm.Get("messages"); ok {
				return Gemini, nil
			}
			if k, _ := wm.String("kind"); k != "" {
				return "", errors.New("an OpenHands event file: pass the conversation's directory")
			}
		}
		switch {
		case err == nil || werr == nil:
		case errors.Is(err, record.ErrTruncated) && !jsonLines(data):
			// The first line starts a value the next ones go on with.
			return "", werr
		case len(first) > 0 && (first[0] == '{' || first[0] == '['):
			return "", &Error{Where: lineWhere(n), Err: undecodable(err)}
		default:
			return "", &Error{Where: lineWhere(n), Err: fmt.Errorf("format not recognised: the file is neither JSON lines nor a Gemini chat file (not JSON: %v); name it with --from", err)}
		}
		return "", errors.New("format not recognised: the file is neither JSON lines nor a Gemini chat file; name it with --from")
	}
	const lookAhead = 50
	seen := 0
	var found Format
	var bad error
	eachLine(data, func(n int, line []byte) {
		if found != "" || bad != nil || seen >= lookAhead {
			return
		}
		seen++
		v, _, err := decodeLenient(line)
		if err != nil {
			bad = &Error{Where: lineWhere(n), Err: undecodable(err)}
		} else if m, ok := v.(*record.Map); ok {
			found = detectLine(m)
		}
	})
	if found != "" {
		return found, nil
	}
	if bad != nil {
		return "", bad
	}
	return "", fmt.Errorf("format not recognised from the first %d lines: name it with --from", seen)
}

// detectLine tells the format a line belongs to, "" when it cannot.
func detectLine(m *record.Map) Format {
	typ, _ := m.String("type")
	switch {
	case typ == "session":
		return Pi
	case typ == "session_meta" || typ == "response_item" || typ == "event_msg" || typ == "turn_context" || typ == "compacted":
		return Codex
	case has(m, "uuid") || has(m, "parentUuid") || has(m, "leafUuid") || claudeMetadata[typ]:
		return ClaudeCode
	case has(m, "sessionId") && has(m, "projectHash"), has(m, "$set"), has(m, "$rewindTo"):
		return Gemini
	case has(m, "messages") && has(m, "sessionId"):
		return Gemini
	}
	return ""
}

// DetectFS tells the format of a transcript kept as a directory.
func DetectFS(fsys fs.FS) (Format, error) {
	if _, err := openHandsEvents(fsys); err != nil {
		return "", err
	}
	return OpenHands, nil
}

func has(m *record.Map, key string) bool {
	_, ok := m.Get(key)
	return ok
}

// firstLine returns the first line of data that is not blank, and its
// number.
func firstLine(data []byte) (int, []byte) {
	for n := 1; len(data) > 0; n++ {
		var line []byte
		line, data, _ = bytes.Cut(data, newline)
		if line = bytes.TrimSpace(line); len(line) > 0 {
			return n, line
		}
	}
	return 0, nil
}

// lineDecoder decodes one source line or file: no size limit beyond the
// input's (a real line holds a 1 MB image), the default nesting limit, and
// long strings shared with the input, which the parsers keep unchanged.
var lineDecoder = record.Decoder{MaxBytes: math.MaxInt, ShareInput: true}

// SessionID turns a source's session id (or a file name) into a valid ctxd
// session id: characters outside A-Z a-z 0-9 _ - become '-', and an id
// longer than 128 characters keeps its start and a hash of the whole. An
// empty id gives "import".
func SessionID(s string) string {
	if subject.CheckSession(s) == nil {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '-'
		}
	}
	out := string(b)
	if out == "" {
		return "import"
	}
	if len(out) > subject.MaxSessionLen {
		sum := sha256.Sum256([]byte(s))
		out = out[:subject.MaxSessionLen-17] + "-" + hex.EncodeToString(sum[:8])
	}
	return out
}

// AgentSession is the session id of a subagent of session: session +
// "_agent-" + agent, made valid.
func AgentSession(session, agent string) string {
	if agent == "" {
		agent = "sidechain"
	}
	return SessionID(session + "_agent-" + agent)
}

// baseName is a file's name without its directory and extension: the
// source identity of a file that names no session.
func baseName(name string) string {
	b := path.Base(filepath.ToSlash(name))
	return strings.TrimSuffix(b, path.Ext(b))
}
