package ops

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ctxd/ctxd/pkg/store"
)

// Source is what the metrics read when they are scraped.
type Source struct {
	// Stats returns the projections' counters.
	Stats func() store.Stats
	// LastSeq returns the stream's last sequence; nil or an error leaves
	// ctxd_ingest_lag_records out of the scrape.
	LastSeq func(ctx context.Context) (uint64, error)
	// Conn returns the NATS connection; nil leaves ctxd_nats_connected out.
	Conn func() *nats.Conn
}

// Metrics are ctxd's Prometheus metrics, registered in a registry of
// their own (never the global one), with the Go runtime and process
// collectors beside them.
type Metrics struct {
	// Registry holds every metric: serve it at /metrics.
	Registry *prometheus.Registry

	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics registers the metrics that read src.
func NewMetrics(src Source) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ctxd_requests_total",
			Help: "Requests answered, by endpoint and reply code (200, or the error code: 400, 404, 500, 504).",
		}, []string{"endpoint", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ctxd_request_duration_seconds",
			Help:    "Time from a request's arrival to its answer, the wait for min_seq included, by endpoint.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"endpoint"}),
	}
	reg.MustRegister(m.requests, m.duration,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&storeCollector{src: src})
	return m
}

// Observe counts one answered request; it has the shape of
// server.Observer.
func (m *Metrics) Observe(endpoint, code string, d time.Duration) {
	m.requests.WithLabelValues(endpoint, code).Inc()
	m.duration.WithLabelValues(endpoint).Observe(d.Seconds())
}

var (
	descApplied = prometheus.NewDesc("ctxd_records_applied_total",
		"Records taken in by the projections since start: applied, or noted for a session not loaded.", nil, nil)
	descDuplicates = prometheus.NewDesc("ctxd_records_duplicate_total",
		"Records delivered again and ignored.", nil, nil)
	descRejected = prometheus.NewDesc("ctxd_records_rejected_total",
		"Records skipped, by reason: undecodable, too_large, subject, quarantined.", []string{"reason"}, nil)
	descWatermark = prometheus.NewDesc("ctxd_applied_seq",
		"Stream sequence up to which every record is applied.", nil, nil)
	descLag = prometheus.NewDesc("ctxd_ingest_lag_records",
		"The stream's last sequence minus the applied sequence.", nil, nil)
	descLoaded = prometheus.NewDesc("ctxd_sessions_loaded",
		"Sessions whose projection is held in memory.", nil, nil)
	descKnown = prometheus.NewDesc("ctxd_sessions_known",
		"Sessions the projections remember, loaded or by their sequences (not every session of the stream).", nil, nil)
	descBytes = prometheus.NewDesc("ctxd_sessions_loaded_bytes",
		"Estimated bytes of the projections held in memory.", nil, nil)
	descLoads = prometheus.NewDesc("ctxd_session_loads_total",
		"Sessions loaded from the stream.", nil, nil)
	descSnapshotLoads = prometheus.NewDesc("ctxd_session_snapshot_loads_total",
		"Session loads that started from a snapshot of the projection.", nil, nil)
	descEvictions = prometheus.NewDesc("ctxd_evictions_total",
		"Sessions evicted from memory.", nil, nil)
	descFollowerReplies = prometheus.NewDesc("ctxd_follower_replies_total",
		"Requests an instance without the ingest pin answered from its follower (the stream read along), with no probe of the stream.", nil, nil)
	descStreamProbes = prometheus.NewDesc("ctxd_stream_probes_total",
		"Probes of the stream for a session's last record, made by requests an instance answered by reading the session's tail.", nil, nil)
	descFollowerApplied = prometheus.NewDesc("ctxd_follower_applied_seq",
		"Stream sequence up to which the follower applied every record; 0 while none runs (the instance holds the pin).", nil, nil)
	descConnected = prometheus.NewDesc("ctxd_nats_connected",
		"1 while the NATS connection is up, else 0.", nil, nil)
	descReconnects = prometheus.NewDesc("ctxd_nats_reconnects_total",
		"Times the NATS connection reconnected.", nil, nil)
)

// storeCollector reads the store's counters at scrape time.
type storeCollector struct{ src Source }

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descApplied, descDuplicates, descRejected, descWatermark, descLag,
		descLoaded, descKnown, descBytes, descLoads, descSnapshotLoads, descEvictions,
		descFollowerReplies, descStreamProbes, descFollowerApplied, descConnected, descReconnects} {
		ch <- d
	}
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	if c.src.Stats != nil {
		st := c.src.Stats()
		counter := func(d *prometheus.Desc, v uint64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
		}
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
		}
		counter(descApplied, st.Records)
		counter(descDuplicates, st.Duplicates)
		for _, kind := range []string{store.KindUndecodable, store.KindTooLarge, store.KindSubject, store.KindQuarantined} {
			ch <- prometheus.MustNewConstMetric(descRejected, prometheus.CounterValue, float64(st.RejectedBy[kind]), kind)
		}
		gauge(descWatermark, float64(st.Applied))
		gauge(descLoaded, float64(st.Loaded))
		gauge(descKnown, float64(st.Sessions))
		gauge(descBytes, float64(st.Bytes))
		counter(descLoads, st.Loads)
		counter(descSnapshotLoads, st.SnapshotLoads)
		counter(descEvictions, st.Evictions)
		counter(descFollowerReplies, st.FollowerReplies)
		counter(descStreamProbes, st.StreamProbes)
		gauge(descFollowerApplied, float64(st.FollowerApplied))
		if c.src.LastSeq != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			last, err := c.src.LastSeq(ctx)
			cancel()
			if err == nil {
				lag := float64(0)
				if last > st.Applied {
					lag = float64(last - st.Applied)
				}
				gauge(descLag, lag)
			}
		}
	}
	if c.src.Conn != nil {
		if nc := c.src.Conn(); nc != nil {
			up := 0.0
			if nc.IsConnected() {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(descConnected, prometheus.GaugeValue, up)
			ch <- prometheus.MustNewConstMetric(descReconnects, prometheus.CounterValue, float64(nc.Stats().Reconnects))
		}
	}
}
