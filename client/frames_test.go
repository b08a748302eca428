package client_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// recordingListener keeps every byte its connections read: what the
// client sent.
type recordingListener struct {
	net.Listener
	mu   sync.Mutex
	sent bytes.Buffer
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &recordingConn{Conn: c, l: l}, nil
}

type recordingConn struct {
	net.Conn
	l *recordingListener
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.l.mu.Lock()
	c.l.sent.Write(p[:n])
	c.l.mu.Unlock()
	return n, err
}

// clientFrames counts the PING and WINDOW_UPDATE frames in what the
// client sent.
func clientFrames(t *testing.T, sent []byte) (pings, windowUpdates int) {
	t.Helper()
	sent, ok := bytes.CutPrefix(sent, []byte(http2.ClientPreface))
	if !ok {
		t.Fatal("no HTTP/2 client preface")
	}
	fr := http2.NewFramer(io.Discard, bytes.NewReader(sent))
	for {
		f, err := fr.ReadFrame()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return pings, windowUpdates
		}
		if err != nil {
			t.Fatalf("frame: %v", err)
		}
		switch f := f.(type) {
		case *http2.PingFrame:
			if !f.IsAck() {
				pings++
			}
		case *http2.WindowUpdateFrame:
			windowUpdates++
		}
	}
}

// The client answers no response with flow-control chatter: with gRPC's
// dynamic windows it sent a WINDOW_UPDATE and a PING after nearly every
// response, which the server must read, and answer (the PING's ack).
func TestCallsSendNoFlowControlChatter(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := &recordingListener{Listener: inner}
	srv := grpc.NewServer()
	rolloutv1.RegisterRolloutServiceServer(srv, newFakeServer("a"))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	defer func() {
		srv.Stop()
		<-done
	}()

	c := newClient(t, lis.Addr().String())
	ctx := ctxFor(t, 30*time.Second)
	const calls = 20
	for i := range calls {
		if _, err := c.Append(ctx, "s", []*rolloutv1.Record{{Id: "r", Content: string(make([]byte, 1024+i))}}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Get(ctx, "s", "r"); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	<-done

	lis.mu.Lock()
	pings, updates := clientFrames(t, lis.sent.Bytes())
	lis.mu.Unlock()
	// One WINDOW_UPDATE opens the connection's window at the start.
	if pings != 0 || updates > 1 {
		t.Errorf("over %d calls the client sent %d PINGs and %d WINDOW_UPDATEs; want none but the connection's first", 2*calls, pings, updates)
	}
}
