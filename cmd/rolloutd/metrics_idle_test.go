package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestMetricsServerClosesIdleConnections opens keep-alive connections to
// the metrics server, makes one request on each, and leaves them idle:
// the server closes every one after its idle timeout.
func TestMetricsServerClosesIdleConnections(t *testing.T) {
	const conns, idle = 200, 300 * time.Millisecond
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newMetricsServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") }), idle)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		_ = srv.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	}()

	open := make([]net.Conn, 0, conns)
	defer func() {
		for _, c := range open {
			_ = c.Close()
		}
	}()
	for i := range conns {
		c, err := net.Dial("tcp", lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
		if _, err := fmt.Fprintf(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	// Every connection is idle now; each must be closed by the server
	// within its idle timeout, with a margin for a loaded machine.
	deadline := time.Now().Add(idle + 5*time.Second)
	stillOpen := 0
	for _, c := range open {
		_ = c.SetReadDeadline(deadline)
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			stillOpen++
		}
	}
	if stillOpen > 0 {
		t.Fatalf("%d of %d idle keep-alive connections still open %v after their last request (idle timeout %v)", stillOpen, conns, idle+5*time.Second, idle)
	}
}
