package localstore

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
)

func TestEscapeSegment(t *testing.T) {
	for seg, want := range map[string]string{
		"abc-1_2.3": "abc-1_2.3",
		"A":         "%41",
		"%41":       "%2541",
		"x~b":       "x%7Eb",
		"é":         "%C3%A9",
		"a b":       "a%20b",
		"...":       "...",
	} {
		if got := escapeSegment(seg); got != want {
			t.Errorf("escapeSegment(%q) = %q, want %q", seg, got, want)
		}
	}
	if got := escapeSegment(strings.Repeat("A", 100)); len(got) != hashedLen || !strings.HasPrefix(got, "~") {
		t.Errorf("a long segment escapes to %q, want a hashed name", got)
	}
}

func FuzzEscapeSegment(f *testing.F) {
	for _, s := range []string{"a", "A", "%41", "x~b", "é", strings.Repeat("Z", 80)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seg string) {
		if strings.Contains(seg, "/") || blob.ValidateName(seg) != nil {
			return
		}
		esc := escapeSegment(seg)
		if len(esc)+len(fileSuffix) > 255 {
			t.Fatalf("escapeSegment(%q) = %d bytes, over NAME_MAX", seg, len(esc))
		}
		if esc == "." || esc == ".." || strings.ContainsAny(esc, "/\\\x00") {
			t.Fatalf("escapeSegment(%q) = %q", seg, esc)
		}
		// Upper case only in %XX: distinct names never clash on a
		// case-insensitive file system.
		for i := 0; i < len(esc); i++ {
			if c := esc[i]; 'A' <= c && c <= 'Z' && (i < 1 || (esc[i-1] != '%' && (i < 2 || esc[i-2] != '%'))) {
				t.Fatalf("escapeSegment(%q) = %q has upper case outside an escape", seg, esc)
			}
		}
		kind, got := parseEntry(esc, true)
		fk, fgot := parseEntry(esc+fileSuffix, false)
		if strings.HasPrefix(esc, hashedMark) {
			if kind != hashedDir || fk != hashedFile {
				t.Fatalf("hashed %q parses as %v/%v", esc, kind, fk)
			}
			return
		}
		if kind != plainDir || got != seg || fk != plainFile || fgot != seg {
			t.Fatalf("escapeSegment(%q) = %q parses back as %v %q / %v %q", seg, esc, kind, got, fk, fgot)
		}
		// A directory name never parses as a file and vice versa.
		if k, _ := parseEntry(esc, false); k != foreign {
			t.Fatalf("file without suffix %q parses as %v", esc, k)
		}
	})
}

func FuzzParseEntry(f *testing.F) {
	for _, s := range []string{"a~b", "%41", "%4a", "~", "~~b", "%", "%4", "a%2Fb~b"} {
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, name string, isDir bool) {
		kind, seg := parseEntry(name, isDir)
		switch kind {
		case plainDir:
			if escapeSegment(seg) != name {
				t.Fatalf("parseEntry(%q) = dir %q, which escapes to %q", name, seg, escapeSegment(seg))
			}
		case plainFile:
			if escapeSegment(seg)+fileSuffix != name {
				t.Fatalf("parseEntry(%q) = file %q, which escapes to %q", name, seg, escapeSegment(seg))
			}
		}
	})
}

func TestHeaderRoundTrip(t *testing.T) {
	a := blob.Attrs{Name: "shards/x/manifest", ETag: "e1", PutID: strings.Repeat("p", 5000), LastModified: time.Unix(0, 1234567890)}
	b, err := encodeHeader(a)
	if err != nil {
		t.Fatal(err)
	}
	h, err := decodeHeader(append(b, "content"...))
	if err != nil {
		t.Fatal(err)
	}
	if h.len != int64(len(b)) || h.attrs.Name != a.Name || h.attrs.ETag != a.ETag || h.attrs.PutID != a.PutID || !h.attrs.LastModified.Equal(a.LastModified) {
		t.Fatalf("decoded %+v (len %d), want %+v (len %d)", h.attrs, h.len, a, len(b))
	}
	for i := range b {
		c := append([]byte{}, b...)
		c[i] ^= 0x40
		if _, err := decodeHeader(c); !errors.Is(err, errCorrupt) {
			t.Fatalf("flipping header byte %d: %v, want errCorrupt", i, err)
		}
	}
	if _, err := decodeHeader(b[:len(b)-1]); !errors.Is(err, errCorrupt) {
		t.Fatalf("short header: %v", err)
	}
}

func FuzzDecodeHeader(f *testing.F) {
	b, _ := encodeHeader(blob.Attrs{Name: "a/b", ETag: "e", PutID: "p"})
	f.Add(b)
	f.Add([]byte(magic))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHeader(b)
		if err != nil {
			if !errors.Is(err, errCorrupt) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		if h.len > int64(len(b)) || h.attrs.ETag == "" {
			t.Fatalf("decoded %+v from %d bytes", h, len(b))
		}
		again, err := encodeHeader(h.attrs)
		if err != nil || string(again) != string(b[:h.len]) {
			t.Fatalf("re-encoding %+v gives %q, want %q (%v)", h.attrs, again, b[:h.len], err)
		}
	})
}

// TestInsideCatchesEscapes bypasses ValidateName to show that the check
// after joining still stops a path from leaving the blob directory.
func TestInsideCatchesEscapes(t *testing.T) {
	s := &Store{blobsDir: filepath.Join(t.TempDir(), "blobs")}
	for _, n := range []string{"../x", "a/../../x", "../../../etc/passwd"} {
		if p, err := s.blobPath(n); !errors.Is(err, blob.ErrInvalidName) {
			t.Errorf("blobPath(%q) = %q, %v, want ErrInvalidName", n, p, err)
		}
		if _, err := s.dirPath(n + "/"); !errors.Is(err, blob.ErrInvalidName) {
			t.Errorf("dirPath(%q) = %v, want ErrInvalidName", n+"/", err)
		}
	}
	// A lone ".." is harmless as a file name: the suffix makes it "..~b".
	if p, err := s.blobPath(".."); err != nil || p != filepath.Join(s.blobsDir, "..~b") {
		t.Errorf("blobPath(..) = %q, %v", p, err)
	}
	if p, err := s.blobPath("a/b"); err != nil || p != filepath.Join(s.blobsDir, "a", "b~b") {
		t.Errorf("blobPath(a/b) = %q, %v", p, err)
	}
}
