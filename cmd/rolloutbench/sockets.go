package main

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// endpoint is the blob service's address, for counting this machine's TCP
// connections to it.
type endpoint struct {
	Host string
	IPs  []net.IP
	Port int
}

func (e *endpoint) String() string {
	if e == nil {
		return "none"
	}
	return net.JoinHostPort(e.Host, strconv.Itoa(e.Port))
}

// sockets counts TCP connections to the endpoint, by state, from the client
// side: the remote address is the endpoint. The blob service's own half of
// a loopback connection has the endpoint as its local address and is not
// counted.
type sockets struct {
	TimeWait    int `json:"time_wait"`
	Established int `json:"established"`
	Other       int `json:"other"`
	// ServerTimeWait counts TIME_WAIT sockets on the blob service's side
	// (local port = the endpoint's), which exist here only when the
	// service runs on this machine (Azurite): a connection that the
	// service closed first (its keep-alive timeout, say) leaves its
	// TIME_WAIT there, not on the client.
	ServerTimeWait int `json:"server_time_wait"`
}

// raise makes s the most of s and o, count by count (ESTABLISHED and both
// TIME_WAITs).
func (s *sockets) raise(o sockets) {
	s.TimeWait = max(s.TimeWait, o.TimeWait)
	s.Established = max(s.Established, o.Established)
	s.ServerTimeWait = max(s.ServerTimeWait, o.ServerTimeWait)
}

// TCP states as /proc/net/tcp prints them (include/net/tcp_states.h).
const (
	tcpEstablished = 0x01
	tcpTimeWait    = 0x06
)

// countSockets parses /proc/net/tcp and /proc/net/tcp6. They list every
// socket of the network namespace, TIME_WAIT ones included, so a rolloutd
// running beside the bench on this machine is counted too.
func countSockets(ep *endpoint) (sockets, error) {
	var s sockets
	if ep == nil {
		return s, fmt.Errorf("no blob endpoint")
	}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if err := scanProcNet(f, ep, &s); err != nil {
			return s, err
		}
	}
	return s, nil
}

func scanProcNet(file string, ep *endpoint, s *sockets) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	first := true
	for sc.Scan() {
		if first { // header
			first = false
			continue
		}
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 {
			continue
		}
		st, err := strconv.ParseUint(fields[3], 16, 8)
		if err != nil {
			continue
		}
		ip, port, err := parseProcAddr(fields[2])
		if err != nil || port != ep.Port || !ep.matches(ip) {
			if st == tcpTimeWait {
				if lip, lport, err := parseProcAddr(fields[1]); err == nil && lport == ep.Port && ep.matches(lip) {
					s.ServerTimeWait++
				}
			}
			continue
		}
		switch st {
		case tcpTimeWait:
			s.TimeWait++
		case tcpEstablished:
			s.Established++
		default:
			s.Other++
		}
	}
	return sc.Err()
}

func (e *endpoint) matches(ip net.IP) bool {
	if len(e.IPs) == 0 {
		return true
	}
	for _, want := range e.IPs {
		if want.Equal(ip) {
			return true
		}
	}
	return false
}

// parseProcAddr parses "0100007F:1F90": the address as the kernel stores it
// (32-bit words in host byte order; little-endian here) and the port in hex.
func parseProcAddr(s string) (net.IP, int, error) {
	a, p, ok := strings.Cut(s, ":")
	if !ok {
		return nil, 0, fmt.Errorf("bad address %q", s)
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return nil, 0, err
	}
	raw, err := hex.DecodeString(a)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return nil, 0, fmt.Errorf("bad address %q", s)
	}
	ip := make(net.IP, len(raw))
	for w := 0; w < len(raw); w += 4 {
		ip[w], ip[w+1], ip[w+2], ip[w+3] = raw[w+3], raw[w+2], raw[w+1], raw[w]
	}
	return ip, int(port), nil
}

// resolveEndpoint turns a blob service URL's host:port into an endpoint.
func resolveEndpoint(host string, port int) *endpoint {
	ep := &endpoint{Host: host, Port: port}
	if ip := net.ParseIP(host); ip != nil {
		ep.IPs = []net.IP{ip}
		return ep
	}
	if ips, err := net.LookupIP(host); err == nil {
		ep.IPs = ips
	}
	return ep
}
