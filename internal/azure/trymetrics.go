package azure

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
)

// TryMetrics counts every HTTP try the SDK's pipeline makes, by its status.
// The SDK retries 429 and 503 (Azure's throttling answers) inside its retry
// policy, so an operation that succeeds on its second try looks like any
// other success in rolloutd_blob_operations_total; only a count per try
// shows the throttling.
type TryMetrics struct {
	tries *prometheus.CounterVec
}

// TryStatuses are the values of the status label: the two throttling
// answers apart, every other answer by its class, and "error" for a try
// that got no answer (a reset, a timeout, a refused dial). The set is fixed
// so that the series count stays bounded whatever the service returns.
var TryStatuses = []string{"2xx", "3xx", "4xx", "429", "5xx", "503", "error"}

// NewTryMetrics creates rolloutd_blob_tries_total{status} and registers it
// with reg (nil: not registered). Every status starts at 0, so that a rate
// over the first throttled try is not lost to a series that did not exist
// yet, and so that the series exist on the local-disk store too (where they
// stay 0).
func NewTryMetrics(reg prometheus.Registerer) *TryMetrics {
	m := &TryMetrics{tries: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rolloutd_blob_tries_total",
		Help: "HTTP tries of Azure Blob Storage requests, retries included, by status: 429 and 503 are throttling, " +
			"other answers by class (2xx, 3xx, 4xx, 5xx), error when no answer came. Always 0 on the local store.",
	}, []string{"status"})}
	for _, s := range TryStatuses {
		m.tries.WithLabelValues(s)
	}
	if reg != nil {
		reg.MustRegister(m.tries)
	}
	return m
}

// observe counts one try.
func (m *TryMetrics) observe(resp *http.Response, err error) {
	if m == nil {
		return
	}
	m.tries.WithLabelValues(tryStatus(resp, err)).Inc()
}

// tryStatus is the status label of a try with this outcome.
func tryStatus(resp *http.Response, err error) string {
	if err != nil || resp == nil {
		return "error"
	}
	switch c := resp.StatusCode; {
	case c == http.StatusTooManyRequests:
		return "429"
	case c == http.StatusServiceUnavailable:
		return "503"
	case c >= 200 && c < 300:
		return "2xx"
	case c >= 300 && c < 400:
		return "3xx"
	case c >= 400 && c < 500:
		return "4xx"
	case c >= 500 && c < 600:
		return "5xx"
	default:
		return "error"
	}
}
