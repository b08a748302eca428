package check

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// The README marks each of its ```console blocks with an HTML comment on the
// line before it, so that the transcripts are run and cannot go stale:
//
//	<!-- transcript: plaintext -->               run on the server `make run` starts
//	<!-- transcript: plaintext, fresh store -->  the same, restarted on a new store
//	<!-- transcript: mtls -->                    run on the README's mTLS server
//	<!-- transcript: not run: WHY -->            shown only; WHY says why
//
// A console block without a marker, or with another session, fails the test.
var transcriptMarker = regexp.MustCompile(`^<!-- transcript: (.*?) -->$`)

const notRun = "not run: "

// A transcriptBlock is one marked ```console block of the README.
type transcriptBlock struct {
	session    string // the marker's text
	line       int    // 1-based line of its opening fence
	start, end int    // byte offsets of its body, between the fences
	cmds       []transcriptCmd
}

// A transcriptCmd is one `$ command` of a block and the output shown under
// it.
type transcriptCmd struct {
	line  int // 1-based
	cmd   string
	shown string // trimmed
}

// parseTranscripts returns every ```console block of doc with its marker.
func parseTranscripts(doc string) ([]transcriptBlock, error) {
	var blocks []transcriptBlock
	var cur *transcriptBlock
	prev, off := "", 0
	for i, l := range strings.SplitAfter(doc, "\n") {
		line := strings.TrimSuffix(l, "\n")
		switch {
		case cur == nil && line == "```console":
			m := transcriptMarker.FindStringSubmatch(prev)
			if m == nil {
				return nil, fmt.Errorf("README.md:%d: a ```console block without a <!-- transcript: SESSION --> line before it", i+1)
			}
			cur = &transcriptBlock{session: m[1], line: i + 1, start: off + len(l)}
		case cur != nil && line == "```":
			cur.end = off
			for j := range cur.cmds {
				cur.cmds[j].shown = strings.TrimSpace(cur.cmds[j].shown)
			}
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil && strings.HasPrefix(line, "$ "):
			cur.cmds = append(cur.cmds, transcriptCmd{line: i + 1, cmd: line[2:]})
		case cur != nil && len(cur.cmds) > 0:
			cur.cmds[len(cur.cmds)-1].shown += l
		case cur != nil && strings.TrimSpace(line) != "":
			return nil, fmt.Errorf("README.md:%d: output before the block's first `$ ` command", i+1)
		}
		prev, off = line, off+len(l)
	}
	if cur != nil {
		return nil, fmt.Errorf("README.md:%d: the ```console block never closes", cur.line)
	}
	return blocks, nil
}

// body renders a block's commands with the given outputs, as the README
// lays them out: one blank line between commands.
func (b transcriptBlock) body(outputs []string) string {
	var parts []string
	for i, c := range b.cmds {
		s := "$ " + c.cmd + "\n"
		if out := strings.TrimSpace(outputs[i]); out != "" {
			s += out + "\n"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "\n")
}

// What the README says may differ between its transcripts and a run; the
// README lists the same things next to the transcripts, and
// TestReadmeTranscripts checks that it does.
var (
	// A time as the API (RFC 3339, nanoseconds) and the admin command
	// (seconds) print it.
	transcriptTime = regexp.MustCompile(`\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z\b`)
	// An id the server assigns to a record sent without one and without a
	// requestId: a UUIDv7, random. Ids derived from a requestId (UUIDv8)
	// are the same on every run, and are compared.
	transcriptID = regexp.MustCompile(`\b[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\b`)
	// How a plaintext client's dial of a TLS port ends: the server closes
	// the connection on the client's first bytes, and whether the client
	// reads EOF or a reset depends on whether those bytes were read first.
	transcriptReset = regexp.MustCompile(`read tcp \S+->\S+: read: connection reset by peer`)
)

// normalizer replaces times with <time>, a reset with EOF, and each
// server-assigned id with <id N>, N counting distinct ids in order of first appearance, so an id
// that the README shows twice must come back twice the same.
type normalizer struct{ ids map[string]int }

func (n *normalizer) normalize(s string) string {
	if n.ids == nil {
		n.ids = map[string]int{}
	}
	s = transcriptTime.ReplaceAllString(s, "<time>")
	s = transcriptReset.ReplaceAllString(s, "EOF")
	return transcriptID.ReplaceAllStringFunc(s, func(id string) string {
		if _, ok := n.ids[id]; !ok {
			n.ids[id] = len(n.ids) + 1
		}
		return fmt.Sprintf("<id %d>", n.ids[id])
	})
}

// A byte count with the record count it covers: a ShardInfo's
// "records", "bytes", or a row of `rolloutd admin list --summary` (shard,
// records, bytes, last seq).
var byteCount = []*regexp.Regexp{
	regexp.MustCompile(`"records": "(\d+)",\s*"bytes": "(\d+)"`),
	regexp.MustCompile(`(?m)^\S+ +(\d+) +(\d+) +\d+ +`),
}

// maxTimeBytes is how much a record's stored size can vary with its time:
// created_at is a protobuf Timestamp, whose nanos take no bytes when zero
// and else a tag and a varint of 1 to 5 bytes.
const maxTimeBytes = 6

// alignByteCounts returns got with each byte count that is within
// maxTimeBytes a record of the one shown put back to the one shown, so
// that only a larger difference fails.
func alignByteCounts(shown, got string) string {
	for _, re := range byteCount {
		want, have := re.FindAllStringSubmatch(shown, -1), re.FindAllStringSubmatchIndex(got, -1)
		if len(want) != len(have) {
			continue
		}
		for i := len(have) - 1; i >= 0; i-- {
			h := have[i]
			records, bytes := atoi(got[h[2]:h[3]]), atoi(got[h[4]:h[5]])
			if d := bytes - atoi(want[i][2]); d >= -maxTimeBytes*records && d <= maxTimeBytes*records {
				got = got[:h[4]] + want[i][2] + got[h[5]:]
			}
		}
	}
	return got
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
