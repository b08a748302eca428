package server

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/time/rate"
)

// The error lines one client can make the log write are rate-limited per
// client (ClientOf), so that a client repeating a failing call cannot
// grow the log faster than errorLogRate lines a second, whatever its
// call rate: the access log's sampler bounds lines per message for the
// whole process, which one client could otherwise fill alone, and the
// lines of withheld errors were not sampled at all. A line dropped is
// counted, and the client's next line written says how many were
// (dropped_lines), as does rolloutd_log_lines_dropped_total.
//
// Bound per client: errorLogBurst lines at once, then errorLogRate lines
// a second, each at most maxErrorLineBytes: about 12 KiB/s sustained
// (docs/security.md, "Bounded, attributed logs").
const (
	errorLogRate  = 2
	errorLogBurst = 20
	// maxErrorLineBytes bounds one error line: the error text
	// (maxLoggedError) and the client's strings, each cut to
	// maxLoggedClientString, with the fixed fields; JSON's escapes of control
	// characters can make a line's bytes up to six times its text.
	maxErrorLineBytes = 6 << 10
	// errorLogSweepEvery is how many lines pass between sweeps of idle
	// clients.
	errorLogSweepEvery = 4096
)

// errorLog decides which error lines are written.
type errorLog struct {
	now     func() time.Time
	dropped prometheus.Counter

	mu      sync.Mutex
	clients map[string]*clientLines
	calls   int
	// pending: dropped counts of clients swept while idle, for the next
	// line written for anyone.
	pending []zap.Field
}

type clientLines struct {
	bucket  *rate.Limiter
	dropped int64
}

func newErrorLog() *errorLog {
	return &errorLog{
		now:     time.Now,
		clients: map[string]*clientLines{},
		dropped: newCounter("rolloutd_log_lines_dropped_total",
			"Error log lines not written because their client was over its error-line rate (docs/security.md, \"Bounded, attributed logs\")."),
	}
}

// allow reports whether an error line for client may be written now. If
// so, extra are fields to add to it: how many of the client's lines were
// dropped since its last one, and those of clients that went quiet.
func (l *errorLog) allow(client string) (ok bool, extra []zap.Field) {
	if l == nil {
		return true, nil // no bound (a service built by a test)
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	if l.calls%errorLogSweepEvery == 0 {
		l.sweep(now)
	}
	c, found := l.clients[client]
	if !found {
		c = &clientLines{bucket: rate.NewLimiter(errorLogRate, errorLogBurst)}
		l.clients[client] = c
	}
	if !c.bucket.AllowN(now, 1) {
		c.dropped++
		l.dropped.Inc()
		return false, nil
	}
	extra, l.pending = l.pending, nil
	if c.dropped > 0 {
		extra = append(extra, zap.Int64("dropped_lines", c.dropped))
		c.dropped = 0
	}
	return true, extra
}

// sweep forgets the clients whose bucket is full again (a full bucket is
// a new one), keeping their dropped counts for the next line written, so
// that memory follows the clients active in the last few seconds.
func (l *errorLog) sweep(now time.Time) {
	for k, c := range l.clients {
		if c.bucket.TokensAt(now) < errorLogBurst {
			continue
		}
		if c.dropped > 0 && len(l.pending) < 16 {
			l.pending = append(l.pending, zap.Dict("dropped_by_quiet_client", clientString("client", k), zap.Int64("lines", c.dropped)))
		}
		delete(l.clients, k)
	}
}
