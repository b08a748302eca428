package server

import (
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// rawH2 is an HTTP/2 client that speaks gRPC's framing by hand, so that a
// test can do what no gRPC client does: declare a large message and never
// finish sending it.
type rawH2 struct {
	t    testing.TB
	conn net.Conn
	fr   *http2.Framer
	wmu  sync.Mutex // fr writes, enc, hbuf, nextID
	enc  *hpack.Encoder
	hbuf bytes.Buffer

	mu      sync.Mutex
	changed *sync.Cond
	nextID  uint32
	connWin int64
	initWin int64
	win     map[uint32]int64
	ended   map[uint32]rawEnd // streams the server ended
	goaway  bool
	readErr error
	done    chan struct{} // the reader exited
}

// rawEnd is how the server ended a stream: with a gRPC status (in
// trailers), or a reset.
type rawEnd struct {
	status *status.Status
	rst    http2.ErrCode
	isRST  bool
}

// dialRawH2 connects to addr (over TLS when cfg is not nil) and sends the
// HTTP/2 preface. The connection is closed when the test ends.
func dialRawH2(t testing.TB, addr string, cfg *tls.Config) *rawH2 {
	t.Helper()
	var conn net.Conn
	var err error
	if cfg != nil {
		cfg = cfg.Clone()
		cfg.NextProtos = []string{"h2"}
		conn, err = tls.Dial("tcp", addr, cfg)
	} else {
		conn, err = net.Dial("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	c := &rawH2{t: t, conn: conn, fr: http2.NewFramer(conn, conn), nextID: 1, connWin: 65535, initWin: 65535,
		win: map[uint32]int64{}, ended: map[uint32]rawEnd{}, done: make(chan struct{})}
	c.changed = sync.NewCond(&c.mu)
	c.enc = hpack.NewEncoder(&c.hbuf)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	go c.read()
	t.Cleanup(c.close)
	return c
}

func (c *rawH2) close() {
	c.conn.Close()
	<-c.done
}

// read handles the server's frames until the connection fails.
func (c *rawH2) read() {
	defer close(c.done)
	for {
		f, err := c.fr.ReadFrame()
		c.mu.Lock()
		if err != nil {
			c.readErr = err
			c.changed.Broadcast()
			c.mu.Unlock()
			return
		}
		var ack func() error
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
					for id := range c.win {
						c.win[id] += int64(v) - c.initWin
					}
					c.initWin = int64(v)
				}
				ack = c.fr.WriteSettingsAck
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				data := f.Data
				ack = func() error { return c.fr.WritePing(true, data) }
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				c.connWin += int64(f.Increment)
			} else {
				c.win[f.StreamID] += int64(f.Increment)
			}
		case *http2.MetaHeadersFrame:
			if st := grpcStatus(f); st != nil {
				c.ended[f.StreamID] = rawEnd{status: st}
			}
		case *http2.RSTStreamFrame:
			if _, ok := c.ended[f.StreamID]; !ok {
				c.ended[f.StreamID] = rawEnd{rst: f.ErrCode, isRST: true}
			}
		case *http2.GoAwayFrame:
			c.goaway = true
		}
		c.changed.Broadcast()
		c.mu.Unlock()
		if ack != nil {
			c.wmu.Lock()
			_ = ack()
			c.wmu.Unlock()
		}
	}
}

// grpcStatus is the gRPC status in a HEADERS frame's fields, if any.
func grpcStatus(f *http2.MetaHeadersFrame) *status.Status {
	code := f.PseudoValue("status")
	if v := headerValue(f, "grpc-status"); v != "" {
		n, _ := strconv.Atoi(v)
		if d := headerValue(f, "grpc-status-details-bin"); d != "" {
			if b, err := base64.RawStdEncoding.DecodeString(d); err == nil {
				var p spb.Status
				if proto.Unmarshal(b, &p) == nil {
					return status.FromProto(&p)
				}
			}
		}
		return status.New(codes.Code(n), headerValue(f, "grpc-message"))
	}
	_ = code
	return nil
}

func headerValue(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.Fields {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

// open starts a gRPC call of method with extra metadata fields
// (name, value, …), and returns its stream id.
func (c *rawH2) open(method string, md ...string) uint32 {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.hbuf.Reset()
	fields := append([]string{":method", "POST", ":scheme", "http", ":path", method, ":authority", "rolloutd",
		"content-type", "application/grpc", "te", "trailers"}, md...)
	for i := 0; i < len(fields); i += 2 {
		_ = c.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	c.mu.Lock()
	id := c.nextID
	c.nextID += 2
	c.win[id] += c.initWin
	c.mu.Unlock()
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true}); err != nil {
		c.t.Fatal(err)
	}
	return id
}

// send sends a gRPC message prefix declaring length, then n bytes of it
// (n ≤ length), as flow control allows; it returns when all are sent, the
// stream has ended, or the timeout passes. It reports the bytes sent.
func (c *rawH2) send(id uint32, length, n int, timeout time.Duration) int {
	prefix := make([]byte, 5)
	binary.BigEndian.PutUint32(prefix[1:], uint32(length))
	data := append(prefix, make([]byte, n)...)
	deadline := time.Now().Add(timeout)
	stop := time.AfterFunc(timeout, func() {
		c.mu.Lock()
		c.changed.Broadcast()
		c.mu.Unlock()
	})
	defer stop.Stop()
	sent := 0
	for sent < len(data) {
		c.mu.Lock()
		for {
			_, ended := c.ended[id]
			if ended || c.readErr != nil || time.Now().After(deadline) {
				c.mu.Unlock()
				return max(sent-5, 0)
			}
			if c.win[id] > 0 && c.connWin > 0 {
				break
			}
			c.changed.Wait()
		}
		chunk := min(int64(len(data)-sent), c.win[id], c.connWin, 16<<10)
		c.win[id] -= chunk
		c.connWin -= chunk
		c.mu.Unlock()
		c.wmu.Lock()
		err := c.fr.WriteData(id, false, data[sent:sent+int(chunk)])
		c.wmu.Unlock()
		if err != nil {
			return max(sent-5, 0)
		}
		sent += int(chunk)
	}
	return max(sent-5, 0)
}

// end is how the server ended stream id, waiting up to timeout; ok is false
// if it has not.
func (c *rawH2) end(id uint32, timeout time.Duration) (rawEnd, bool) {
	stop := time.AfterFunc(timeout, func() {
		c.mu.Lock()
		c.changed.Broadcast()
		c.mu.Unlock()
	})
	defer stop.Stop()
	deadline := time.Now().Add(timeout)
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if e, ok := c.ended[id]; ok {
			return e, true
		}
		if c.readErr != nil || time.Now().After(deadline) {
			return rawEnd{}, false
		}
		c.changed.Wait()
	}
}
