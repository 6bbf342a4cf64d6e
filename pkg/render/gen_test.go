package render_test

import (
	"math/rand/v2"

	"github.com/ctxd/ctxd/internal/sessiongen"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

// newGen returns a generator of random sessions: every shape a record can
// take, hostile ones included, so that the renderers meet every neutral
// context the rules can produce.
func newGen(r *rand.Rand) *sessiongen.Gen {
	return sessiongen.New(r, sessiongen.Rules{Convert: projection.Convert, IsValidCompaction: projection.IsValidCompaction})
}

// genToolName is a tool_calls entry's tool name (CONTEXT.md section 5),
// worked out here, apart from the renderer, for the loss checks.
func genToolName(e *record.Map) string {
	if f, ok := e.Get("function"); ok {
		if fm, ok := f.(*record.Map); ok {
			if n, ok := fm.String("name"); ok {
				return n
			}
		}
	}
	n, _ := e.String("name")
	return n
}
