package check

import (
	"strings"
	"testing"
)

// TestTranscriptChecksFire shows the transcript test's own checks failing
// where they should: a console block without a marker, a command it does
// not know, a byte count off by more than a record's time can explain, and
// a server-assigned id that comes back different the second time.
func TestTranscriptChecksFire(t *testing.T) {
	if _, err := parseTranscripts("text\n```console\n$ grpcurl list\n```\n"); err == nil {
		t.Error("a console block without a <!-- transcript: --> line parsed")
	}
	blocks, err := parseTranscripts("<!-- transcript: plaintext -->\n```console\n$ a\nout 1\n\n$ b\n```\n")
	if err != nil || len(blocks) != 1 || len(blocks[0].cmds) != 2 || blocks[0].cmds[0].shown != "out 1" {
		t.Errorf("parsed %+v, %v", blocks, err)
	}
	r := &transcriptRun{t: t, bins: map[string]string{}, ports: map[string]string{}}
	for cmd, known := range map[string]bool{
		"grpcurl -plaintext localhost:50051 list": true,
		"rolloutd admin list --summary":           true,
		"grpc-health-probe -addr localhost:8082":  true,
		"curl localhost:9090/metrics":             false,
		"duckdb -c 'SELECT 1'":                    false,
	} {
		if _, err := r.argv(cmd); (err == nil) != known {
			t.Errorf("argv(%q): %v; known should be %v", cmd, err, known)
		}
	}
	argv, _ := r.argv("rolloutd admin list --summary")
	if got := strings.Join(argv[1:], " "); got != "admin list --addr localhost:"+r.ports["50051"]+" --summary" {
		t.Errorf("admin argv: %s", got)
	}

	shownInfo := `"records": "3",` + "\n" + `  "bytes": "277",`
	for got, same := range map[string]bool{
		`"records": "3",` + "\n" + `  "bytes": "283",`: true,  // 2 bytes a record
		`"records": "3",` + "\n" + `  "bytes": "332",`: false, // the v1 README against v2
	} {
		if (alignByteCounts(shownInfo, got) == shownInfo) != same {
			t.Errorf("byte counts 277 shown, %q printed: equal should be %v", got, same)
		}
	}
	shownRow := "SHARD  RECORDS  BYTES  LAST SEQ\nexp-42-x  1  143  1  x\n"
	if got := alignByteCounts(shownRow, "SHARD  RECORDS  BYTES  LAST SEQ\nexp-42-x  1  198  1  x\n"); got == shownRow {
		t.Error("admin list: 198 bytes passed for 143")
	}

	var shown, run normalizer
	a, b := "01a23235-ca5d-7c1c-83f0-4064cb3611e8", "01a243a8-9a7f-7073-8869-e5ed0ec3b386"
	c := "01a243a8-9b64-7d9f-bd34-ffb751ef2240"
	if shown.normalize(a+" "+a) == run.normalize(b+" "+c) {
		t.Error("an id shown twice matched two different ids")
	}
	if n := (&normalizer{}).normalize("2026-12-01T17:03:42Z 6aa62a40-1fad-854e-945e-f0fff14758a5"); n != "<time> 6aa62a40-1fad-854e-945e-f0fff14758a5" {
		t.Errorf("normalized to %q: times go, derived (UUIDv8) ids stay", n)
	}
	reset := `Failed to dial target host "localhost:50052": read tcp 127.0.0.1:38588->127.0.0.1:50052: read: connection reset by peer`
	if n := (&normalizer{}).normalize(reset); n != `Failed to dial target host "localhost:50052": EOF` {
		t.Errorf("normalized to %q", n)
	}
}
