package client_test

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// freeAddr is a loopback address nothing listens on (for now).
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// cutProxy forwards TCP connections to a server. Armed, it cuts the
// connection that carries the next response: when the server starts to
// answer a call (the first HEADERS or DATA frame of an HTTP/2 stream), the
// proxy closes both sides instead of forwarding it. Everything the client
// sent has then reached the server, and the server has finished the call,
// so an Append cut this way was committed, and its answer lost.
type cutProxy struct {
	lis    net.Listener
	target string
	armed  atomic.Bool
	cuts   atomic.Int32

	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
	// gate, when set (holdAfterCut), holds every connection accepted after
	// a cut until it is closed: the test acts between an attempt and its
	// resend.
	gate chan struct{}
	done chan struct{}
}

// holdAfterCut makes the proxy hold the connections accepted after its
// cut (the client's resend reconnects) until the returned release is
// called.
func (p *cutProxy) holdAfterCut() (release func()) {
	g := make(chan struct{})
	p.mu.Lock()
	p.gate = g
	p.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(g) }) }
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{lis: lis, target: target, done: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *cutProxy) Addr() string { return p.lis.Addr().String() }

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		gate := p.gate
		p.mu.Unlock()
		if gate != nil && p.cuts.Load() > 0 {
			select {
			case <-gate:
			case <-p.done:
				c.Close()
				return
			}
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			_, _ = io.Copy(s, c)
			s.Close()
			c.Close()
		}()
		go func() {
			defer p.wg.Done()
			p.serverToClient(s, c)
			s.Close()
			c.Close()
		}()
	}
}

// serverToClient forwards HTTP/2 frames from s to c until it is armed and
// a response starts.
func (p *cutProxy) serverToClient(s, c net.Conn) {
	var head [9]byte
	for {
		if _, err := io.ReadFull(s, head[:]); err != nil {
			return
		}
		length := int(head[0])<<16 | int(head[1])<<8 | int(head[2])
		typ, stream := head[3], binary.BigEndian.Uint32(head[5:9])&0x7fffffff
		if stream != 0 && (typ == 0 || typ == 1) && p.armed.CompareAndSwap(true, false) {
			p.cuts.Add(1)
			return
		}
		body := make([]byte, length)
		if _, err := io.ReadFull(s, body); err != nil {
			return
		}
		if _, err := c.Write(append(head[:], body...)); err != nil {
			return
		}
	}
}

func (p *cutProxy) close() {
	close(p.done)
	p.lis.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
