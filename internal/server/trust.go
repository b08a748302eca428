package server

import (
	"crypto/x509"
	"sync"
)

// ClientCAs is the client CA bundle in force and its changes:
// *tlsreload.Reloader under mutual TLS.
type ClientCAs interface {
	// VerifyClient verifies a client's certificate chain, leaf first as
	// presented, against the client CAs in force now.
	VerifyClient(chain []*x509.Certificate) error
	// OnReload registers f to be called after each change of the client
	// CAs (or of the rest of the TLS material) was put in force.
	OnReload(f func()) (unregister func())
}

// maxVerdicts bounds clientTrust's cache; past it, the cache starts over.
const maxVerdicts = 4096

// clientTrust answers whether the client CAs in force still trust a
// connection's client certificate. A TLS handshake checks the chain once,
// against the CAs of its moment; after the CAs change, the server re-checks
// established connections through clientTrust. Each verdict is cached per
// leaf certificate (one per connection, or fewer) until the CAs change
// again, so a call pays for a verification once per connection and reload.
type clientTrust struct {
	cas ClientCAs

	mu       sync.Mutex
	gen      uint64                      // counts resets
	verdicts map[*x509.Certificate]error // by leaf, under the CAs of gen
}

func newClientTrust(cas ClientCAs) *clientTrust {
	return &clientTrust{cas: cas, verdicts: map[*x509.Certificate]error{}}
}

// verify returns nil if the client CAs in force trust chain (leaf first).
func (c *clientTrust) verify(chain []*x509.Certificate) error {
	leaf := chain[0]
	c.mu.Lock()
	gen := c.gen
	err, ok := c.verdicts[leaf]
	c.mu.Unlock()
	if ok {
		return err
	}
	err = c.cas.VerifyClient(chain)
	c.mu.Lock()
	defer c.mu.Unlock()
	// A reset since gen may have come from CAs this verdict did not see:
	// then it is not kept.
	if c.gen == gen {
		if len(c.verdicts) >= maxVerdicts {
			clear(c.verdicts)
		}
		c.verdicts[leaf] = err
	}
	return err
}

// reset forgets every verdict: the client CAs changed.
func (c *clientTrust) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	clear(c.verdicts)
}
