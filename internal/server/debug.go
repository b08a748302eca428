package server

import (
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DebugHandler serves /metrics from g and, with withPprof, the runtime
// profiles under /debug/pprof/. It is meant for the metrics listener, never
// the public one.
//
// Profiles are off unless asked for: whoever reaches them reads the
// command line, stack traces and heap samples, and can keep the CPU busy
// profiling.
func DebugHandler(g prometheus.Gatherer, withPprof bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	if !withPprof {
		return mux
	}
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
