package server

import (
	"net"
	"sync"
)

// connRegistry knows the connections the server accepted, so that the send
// deadline can close one (grpc-go has no API to reset one server stream,
// nor to close one connection). grpc-go names a connection to the stats
// handler by its addresses only (stats.ConnTagInfo), so the registry finds
// it by them: for TCP the pair is unique among open connections. Where it
// is not (an in-process listener whose connections share one address),
// closer finds none, and a response that is not taken stays charged until
// its connection ends.
type connRegistry struct {
	mu      sync.Mutex
	pending map[string]map[*trackedConn]struct{} // guarded by mu: accepted, not yet tagged, by addresses
}

func newConnRegistry() *connRegistry {
	return &connRegistry{pending: map[string]map[*trackedConn]struct{}{}}
}

func connAddrs(remote, local net.Addr) string {
	if remote == nil || local == nil {
		return ""
	}
	return remote.Network() + " " + remote.String() + " " + local.String()
}

// listen wraps lis so that the registry knows its connections.
func (r *connRegistry) listen(lis net.Listener) net.Listener {
	return &trackedListener{Listener: lis, reg: r}
}

// closer is the Close of the accepted connection with these addresses, or
// nil when there is not exactly one. It is called once per connection
// (from TagConn); the connection leaves the registry.
func (r *connRegistry) closer(remote, local net.Addr) func() error {
	key := connAddrs(remote, local)
	r.mu.Lock()
	defer r.mu.Unlock()
	conns := r.pending[key]
	if len(conns) != 1 {
		return nil
	}
	for c := range conns {
		r.removeLocked(key, c)
		return c.Conn.Close
	}
	return nil
}

func (r *connRegistry) add(c *trackedConn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.pending[c.key]
	if m == nil {
		m = map[*trackedConn]struct{}{}
		r.pending[c.key] = m
	}
	m[c] = struct{}{}
}

func (r *connRegistry) remove(c *trackedConn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removeLocked(c.key, c)
}

func (r *connRegistry) removeLocked(key string, c *trackedConn) {
	if m := r.pending[key]; m != nil {
		delete(m, c)
		if len(m) == 0 {
			delete(r.pending, key)
		}
	}
}

// size is how many accepted connections are not yet tagged (for tests).
func (r *connRegistry) size() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.pending {
		n += len(m)
	}
	return n
}

type trackedListener struct {
	net.Listener
	reg *connRegistry
}

func (l *trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, reg: l.reg, key: connAddrs(c.RemoteAddr(), c.LocalAddr())}
	l.reg.add(tc)
	return tc, nil
}

// trackedConn leaves the registry when closed: a connection whose
// handshake failed is never tagged.
type trackedConn struct {
	net.Conn
	reg *connRegistry
	key string
}

func (c *trackedConn) Close() error {
	c.reg.remove(c)
	return c.Conn.Close()
}
