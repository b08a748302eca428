package client_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rolloutd/rolloutd/client"
	rolloutd "github.com/rolloutd/rolloutd/internal/server"
)

// The client's copies of the ErrorInfo domain, reasons and metadata key
// are the server's.
func TestReasonsAreTheServers(t *testing.T) {
	for mine, theirs := range map[string]string{
		client.ErrorDomain:            rolloutd.ErrorDomain,
		client.ReasonOutcomeUnknown:   rolloutd.ReasonOutcomeUnknown,
		client.ReasonNotCommitted:     rolloutd.ReasonNotCommitted,
		client.ReasonBackpressure:     rolloutd.ReasonBackpressure,
		client.ReasonRateLimited:      rolloutd.ReasonRateLimited,
		client.ReasonTooLarge:         rolloutd.ReasonTooLarge,
		client.ReasonScanInterrupted:  rolloutd.ReasonScanInterrupted,
		client.MetadataResumeAfterSeq: rolloutd.MetadataResumeAfterSeq,
		client.ShardHeader:            rolloutd.ShardHeader,
		client.ReasonShardDeleted:     rolloutd.ReasonShardDeleted,
		client.ReasonSeqMismatch:      rolloutd.ReasonSeqMismatch,
		client.MetadataLastSeq:        rolloutd.MetadataLastSeq,
		client.ReasonStoreFull:        rolloutd.ReasonStoreFull,
	} {
		if mine != theirs {
			t.Errorf("client has %q, server %q", mine, theirs)
		}
	}
}

// Every reason the server declares (a constant named Reason… in
// internal/server) is declared, with the same value, by this client and by
// the Python client (clients/python/rolloutd/errors.py), so that a new
// reason cannot reach one client only.
func TestEveryServerReasonIsInBothClients(t *testing.T) {
	server := reasonConsts(t, "../internal/server")
	goClient := reasonConsts(t, ".")
	py, err := os.ReadFile("../clients/python/rolloutd/errors.py")
	if err != nil {
		t.Fatal(err)
	}
	pyConsts := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^([A-Z_]+) = "([A-Z_]+)"$`).FindAllStringSubmatch(string(py), -1) {
		pyConsts[m[1]] = m[2]
	}
	if len(server) < 9 {
		t.Fatalf("found %d server reasons (%v); the parse is broken", len(server), server)
	}
	for name, value := range server {
		if goClient[name] != value {
			t.Errorf("server %s = %q; the Go client has %q", name, value, goClient[name])
		}
		if pyConsts[value] != value {
			t.Errorf("server %s = %q; clients/python/rolloutd/errors.py has no %s = %q", name, value, value, value)
		}
	}
}

// reasonConsts parses the non-test Go files of dir and returns its string
// constants named Reason….
func reasonConsts(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if !strings.HasPrefix(n.Name, "Reason") || i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, err := strconv.Unquote(lit.Value)
						if err != nil {
							t.Fatal(err)
						}
						out[n.Name] = v
					}
				}
			}
		}
	}
	return out
}
