package server

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// maxConsumerSeries bounds the consumers this instance exports metrics
// for: the most recently committed or described ones. Consumer names are
// chosen by clients, so without a bound they would grow /metrics, and
// Prometheus' series, without end.
const maxConsumerSeries = 64

// consumerMetrics are the per-consumer series, rolloutd_consumer_lag_records
// and rolloutd_consumer_commits_total, labelled consumer="<prefix>:<name>"
// (never by shard), for at most max consumers: using one more drops the
// least recently used one's series (counted in
// rolloutd_consumer_series_dropped_total), so a dropped consumer's
// commits counter starts again from 0 when it comes back, which
// Prometheus' rate() reads as a counter reset.
type consumerMetrics struct {
	lag     *prometheus.GaugeVec
	commits *prometheus.CounterVec
	dropped prometheus.Counter
	max     int

	mu   sync.Mutex
	tick uint64
	// used: each exported consumer's label and when it was last used.
	used map[string]uint64
	// tails: for the consumers in used that were described here, the
	// shard tails of the last describe, so that a commit updates the lag
	// without reading a manifest (at most maxLagShards each).
	tails map[string]map[string]tail
}

func newConsumerMetrics() *consumerMetrics {
	return &consumerMetrics{
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rolloutd_consumer_lag_records",
			Help: "Records committed to the shards under a consumer's prefix and not yet past its positions, as this instance last computed it (DescribeConsumer, or a commit after one). For the 64 consumers most recently committed or described here."},
			[]string{"consumer"}),
		commits: newCounterVec("rolloutd_consumer_commits_total",
			"CommitConsumer calls this instance answered with success, by consumer (\"<prefix>:<name>\"), for the 64 most recently used consumers.",
			"consumer"),
		dropped: newCounter("rolloutd_consumer_series_dropped_total",
			"Consumers whose series were dropped from rolloutd_consumer_lag_records and rolloutd_consumer_commits_total to keep them to 64."),
		max:   maxConsumerSeries,
		used:  map[string]uint64{},
		tails: map[string]map[string]tail{},
	}
}

func (m *consumerMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.lag, m.commits, m.dropped}
}

// touch marks label used now, dropping the least recently used consumer's
// series when that makes room. Callers hold m.mu.
func (m *consumerMetrics) touch(label string) {
	m.tick++
	if _, ok := m.used[label]; !ok && len(m.used) >= m.max {
		oldest, at := "", ^uint64(0)
		for l, t := range m.used {
			if t < at {
				oldest, at = l, t
			}
		}
		delete(m.used, oldest)
		delete(m.tails, oldest)
		m.lag.DeleteLabelValues(oldest)
		m.commits.DeleteLabelValues(oldest)
		m.dropped.Inc()
	}
	m.used[label] = m.tick
}

// committed counts a commit of the consumer label.
func (m *consumerMetrics) committed(label string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.touch(label)
	m.commits.WithLabelValues(label).Inc()
}

// setLag sets the consumer label's lag, and keeps tails (when not nil)
// for the commits that follow.
func (m *consumerMetrics) setLag(label string, records uint64, tails map[string]tail) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.touch(label)
	m.lag.WithLabelValues(label).Set(float64(records))
	if tails != nil {
		m.tails[label] = tails
	}
}

// knownTails are the tails of the consumer label's last describe here;
// nil when there was none. The caller must not modify them.
func (m *consumerMetrics) knownTails(label string) map[string]tail {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tails[label]
}

// forget drops a deleted consumer's series.
func (m *consumerMetrics) forget(label string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.used[label]; ok {
		delete(m.used, label)
		delete(m.tails, label)
		m.lag.DeleteLabelValues(label)
		m.commits.DeleteLabelValues(label)
	}
}
