package server

import (
	"net"
	"testing"
)

// The registry finds a connection by its addresses only when they name
// exactly one: a closer for the wrong connection would end another
// client's streams.
func TestConnRegistryFindsOnlyUniqueConnections(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := newConnRegistry()
	tl := reg.listen(lis)
	defer tl.Close()
	client, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := tl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if reg.size() != 1 {
		t.Fatalf("%d connections registered, want 1", reg.size())
	}
	if reg.closer(server.LocalAddr(), server.RemoteAddr()) != nil {
		t.Fatal("found a connection by swapped addresses")
	}
	closeConn := reg.closer(server.RemoteAddr(), server.LocalAddr())
	if closeConn == nil || reg.size() != 0 {
		t.Fatalf("closer found: %t, with %d left registered; want the one connection, taken out", closeConn != nil, reg.size())
	}
	if err := closeConn(); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Read(make([]byte, 1)); err == nil {
		t.Fatal("the client's connection is still open after its closer ran")
	}

	// Two connections with one pair of addresses (an in-process listener):
	// neither is found, and a closed one leaves the registry.
	a := &trackedConn{Conn: server, reg: reg, key: "pipe a b"}
	b := &trackedConn{Conn: server, reg: reg, key: "pipe a b"}
	reg.add(a)
	reg.add(b)
	if reg.closer(fakeAddr("a"), fakeAddr("b")) != nil {
		t.Fatal("found one of two connections with the same addresses")
	}
	_ = a.Close()
	_ = b.Close()
	if reg.size() != 0 {
		t.Fatalf("%d closed connections still registered", reg.size())
	}
}

type fakeAddr string

func (a fakeAddr) Network() string { return "pipe" }
func (a fakeAddr) String() string  { return string(a) }
