package projection

import (
	"math/rand/v2"

	"github.com/ctxd/ctxd/internal/sessiongen"
)

// newGen returns a generator of random sessions under these rules.
func newGen(r *rand.Rand) *sessiongen.Gen {
	return sessiongen.New(r, sessiongen.Rules{Convert: Convert, IsValidCompaction: IsValidCompaction})
}
