package server

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/ctxd/ctxd/pkg/store"
)

// Observer is told of every request the service answers, once, with the
// endpoint's name ("context", "chunk" or "rejected"), the reply's code
// ("200" for a reply, else the error code) and how long it took, the
// wait for min_seq included.
type Observer func(endpoint, code string, d time.Duration)

// codeOK is the code an answer that is not an error counts under.
const codeOK = "200"

// endpointStats counts one endpoint's answers by code, those sent after
// the handler returned (a request that waited for min_seq) included,
// which micro's own num_requests and num_errors cannot see.
type endpointStats struct {
	mu    sync.Mutex
	codes map[string]uint64
}

func (e *endpointStats) add(code string) {
	e.mu.Lock()
	if e.codes == nil {
		e.codes = map[string]uint64{}
	}
	e.codes[code]++
	e.mu.Unlock()
}

// EndpointStats is an endpoint's data in $SRV.STATS.
type EndpointStats struct {
	// Replies counts the requests answered, by code: "200" or the error
	// code, the answers sent after a wait included.
	Replies map[string]uint64 `json:"replies"`
	// Errors counts the answers that were errors.
	Errors uint64 `json:"errors"`
}

func (e *endpointStats) snapshot() EndpointStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := EndpointStats{Replies: make(map[string]uint64, len(e.codes))}
	for c, n := range e.codes {
		out.Replies[c] = n
		if c != codeOK {
			out.Errors += n
		}
	}
	return out
}

// observed is a request that counts its answer: the first Respond or
// Error through it is counted under its endpoint and reported to the
// Observer.
type observed struct {
	micro.Request
	s        *Service
	endpoint string
	start    time.Time
	answered bool // counted: a failed Respond followed by Error counts once
}

func (s *Service) observe(r micro.Request, endpoint string, start time.Time) micro.Request {
	return &observed{Request: r, s: s, endpoint: endpoint, start: start}
}

func (o *observed) done(code string) {
	if o.answered {
		return
	}
	o.answered = true
	o.s.stats(o.endpoint).add(code)
	if o.s.Observe != nil {
		o.s.Observe(o.endpoint, code, time.Since(o.start))
	}
}

func (o *observed) Respond(data []byte, opts ...micro.RespondOpt) error {
	err := o.Request.Respond(data, opts...)
	o.done(codeOK)
	return err
}

func (o *observed) RespondJSON(data any, opts ...micro.RespondOpt) error {
	err := o.Request.RespondJSON(data, opts...)
	o.done(codeOK)
	return err
}

func (o *observed) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	err := o.Request.Error(code, description, data, opts...)
	o.done(code)
	return err
}

// stats returns the endpoint's counters.
func (s *Service) stats(endpoint string) *endpointStats {
	switch endpoint {
	case "context":
		return &s.epStats[0]
	case "chunk":
		return &s.epStats[1]
	default:
		return &s.epStats[2]
	}
}

// contextData is the context endpoint's data in $SRV.STATS: its replies,
// and the projections' counters.
type contextData struct {
	EndpointStats
	store.Stats
	// Instance and Role say whose counters these are: each instance
	// counts what it saw (Service.Instance, Service.Role).
	Instance string `json:"instance,omitempty"`
	Role     string `json:"role,omitempty"`
	// Partitions lists the partitions the instance applies now, on a
	// partitioned stream (Service.Owned).
	Partitions []int `json:"partitions,omitempty"`
}

// rejectedData is the rejected endpoint's data in $SRV.STATS.
type rejectedData struct {
	EndpointStats
	Rejected   uint64            `json:"rejected"`
	RejectedBy map[string]uint64 `json:"rejected_by,omitempty"`
	Instance   string            `json:"instance,omitempty"`
}

// endpointData is the StatsHandler: each endpoint's own counters, the
// projections' under the context endpoint only.
func (s *Service) endpointData(e *micro.Endpoint) any {
	name := ""
	if e != nil {
		name = e.Name
	}
	own := s.stats(name).snapshot()
	switch name {
	case "context":
		d := contextData{EndpointStats: own, Stats: s.proj.Stats(), Instance: s.Instance}
		if s.Role != nil {
			d.Role = s.Role()
		}
		if s.Owned != nil {
			d.Partitions = s.Owned()
			if d.Partitions == nil {
				d.Partitions = []int{}
			}
		}
		return d
	case "rejected":
		st := s.proj.Stats()
		return rejectedData{EndpointStats: own, Rejected: st.Rejected, RejectedBy: st.RejectedBy, Instance: s.Instance}
	default:
		return own
	}
}
