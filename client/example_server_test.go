package client_test

import (
	"context"
	"log"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob/localstore"
	rserver "github.com/rolloutd/rolloutd/internal/server"
)

// exampleServer starts a rolloutd in this process, on a fresh embedded
// store and a loopback port, for the examples that run; stop shuts it down
// and removes its store.
func exampleServer() (addr string, stop func()) {
	dir, err := os.MkdirTemp("", "rolloutd-example-")
	if err != nil {
		log.Fatal(err)
	}
	store, err := localstore.Open(filepath.Join(dir, "data"))
	if err != nil {
		log.Fatal(err)
	}
	srv, err := rserver.New(rserver.Config{Logger: zap.NewNop(), Registerer: prometheus.NewRegistry(), Store: store,
		DrainDelay: 10 * time.Millisecond, MaxConnectionAge: -1})
	if err != nil {
		log.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	return lis.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		if err := <-served; err != nil {
			log.Print(err)
		}
		if err := store.Close(); err != nil {
			log.Print(err)
		}
		os.RemoveAll(dir)
	}
}
