// Package spectest loads the context-rule fixtures (records in, expected
// messages out) that the projection, the command line and the integration
// tests all check against.
package spectest

import (
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"testing"

	"github.com/ctxd/ctxd/pkg/record"
)

// Case is one fixture case.
type Case struct {
	File    string // the fixture file's base name
	Name    string
	Rules   string // the CONTEXT.md sections it exercises
	Records []any
	Expect  []any
}

// Dir is the directory of the fixture files.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "pkg", "projection", "testdata", "fixtures")
}

// Cases returns every case of every fixture file, in file order.
func Cases(t testing.TB) []Case {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(Dir(), "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures in %s: %v", Dir(), err)
	}
	sort.Strings(files)
	var out []Case
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		v, err := record.DecodeJSON(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, c := range v.([]any) {
			m := c.(*record.Map)
			name, _ := m.String("name")
			rules, _ := m.String("rules")
			recs, _ := m.Get("records")
			exp, _ := m.Get("expect")
			out = append(out, Case{File: filepath.Base(f), Name: name, Rules: rules, Records: recs.([]any), Expect: exp.([]any)})
		}
	}
	return out
}

// RequireMessages fails the test when two contexts differ structurally,
// printing both as JSON.
func RequireMessages(t testing.TB, want, got []any, msgAndArgs ...any) {
	t.Helper()
	if record.Equal(want, got) {
		return
	}
	w, _ := record.MarshalJSON(want)
	g, _ := record.MarshalJSON(got)
	t.Fatalf("context differs\nwant: %.4000s\n got: %.4000s\n%v", w, g, msgAndArgs)
}
