package main

import (
	"net"
	"testing"
	"time"
)

func TestParseProcAddr(t *testing.T) {
	for _, c := range []struct {
		in   string
		ip   string
		port int
	}{
		{"0100007F:1F90", "127.0.0.1", 8080},
		{"00000000000000000000000001000000:0050", "::1", 80},
		{"0000000000000000FFFF00000100007F:01BB", "127.0.0.1", 443},
	} {
		ip, port, err := parseProcAddr(c.in)
		if err != nil || !ip.Equal(net.ParseIP(c.ip)) || port != c.port {
			t.Errorf("parseProcAddr(%q) = %v, %d, %v; want %s, %d", c.in, ip, port, err, c.ip, c.port)
		}
	}
	for _, bad := range []string{"", "0100007F", "XYZ:1F90", "0100:1F90", "0100007F:XYZ"} {
		if _, _, err := parseProcAddr(bad); err == nil {
			t.Errorf("parseProcAddr(%q): no error", bad)
		}
	}
}

// A connection the client closes first leaves a client-side TIME_WAIT;
// one the server closes first leaves it on the server's side.
func TestCountSocketsSeesTimeWait(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	ep := resolveEndpoint("127.0.0.1", lis.Addr().(*net.TCPAddr).Port)
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func() (client, server net.Conn) {
		c, err := net.Dial("tcp", lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return c, <-accepted
	}
	c1, s1 := dial()
	c2, s2 := dial()
	defer c2.Close()
	defer s2.Close()
	got, err := countSockets(ep)
	if err != nil {
		t.Fatal(err)
	}
	if got.Established != 2 {
		t.Errorf("established = %d, want 2 (%+v)", got.Established, got)
	}
	c1.Close() // client first
	time.Sleep(50 * time.Millisecond)
	s1.Close()
	c3, s3 := dial()
	s3.Close() // server first
	time.Sleep(50 * time.Millisecond)
	c3.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err = countSockets(ep)
		if err != nil {
			t.Fatal(err)
		}
		if (got.TimeWait == 1 && got.ServerTimeWait == 1) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got.TimeWait != 1 || got.ServerTimeWait != 1 || got.Established != 1 {
		t.Errorf("after closes: %+v, want 1 client TIME_WAIT, 1 server TIME_WAIT, 1 established", got)
	}
}
