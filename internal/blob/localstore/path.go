package localstore

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
)

// On-disk names. A blob name is split at "/" into segments. Every segment but
// the last becomes a directory, the last one a file with fileSuffix, so the
// blobs "x" (file "x~b") and "x/y" (directory "x", file "y~b") coexist, as on
// Azure, which has no directories.
//
// Each segment is escaped: bytes outside [a-z0-9._-] become %XX (upper-case
// hex). On-disk names are therefore lower-case ASCII apart from the hex
// digits, never contain '~' except in the suffix and the hashed form, and
// two different blob names never map to names that differ only in case or
// Unicode normalization: the layout is safe on case-insensitive and
// normalizing file systems too. Blob names themselves are bytes and are
// compared byte-wise, as on Azure ("a" and "A" are different blobs).
//
// A segment whose escaped form is longer than maxPlainSegment (file systems
// cap a name at 255 bytes) is stored as "~" + hex(SHA-256(segment)); the
// real segment is recovered from the name recorded in the blob's header.
const (
	fileSuffix      = "~b"
	hashedMark      = "~"
	maxPlainSegment = 200
	hashedLen       = 1 + 2*sha256.Size
)

func plainByte(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
}

// escapeSegment maps a name segment to its on-disk directory name.
func escapeSegment(seg string) string {
	var b strings.Builder
	for i := 0; i < len(seg); i++ {
		if c := seg[i]; plainByte(c) {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	if b.Len() > maxPlainSegment {
		sum := sha256.Sum256([]byte(seg))
		return hashedMark + hex.EncodeToString(sum[:])
	}
	return b.String()
}

// unescapeSegment reverses escapeSegment for a plain (not hashed) name.
func unescapeSegment(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case plainByte(c):
			b.WriteByte(c)
		case c == '%' && i+2 < len(s):
			v, err := hex.DecodeString(s[i+1 : i+3])
			if err != nil || s[i+1:i+3] != strings.ToUpper(s[i+1:i+3]) || plainByte(v[0]) {
				return "", false
			}
			b.WriteByte(v[0])
			i += 2
		default:
			return "", false
		}
	}
	return b.String(), b.Len() > 0
}

// entryKind classifies a directory entry of the blob tree.
type entryKind int

const (
	foreign    entryKind = iota // not ours: ignored
	plainDir                    // seg is the segment
	hashedDir                   // segment must be read from a blob below
	plainFile                   // seg is the segment
	hashedFile                  // segment must be read from the header
)

// parseEntry classifies an on-disk name found in the blob tree.
func parseEntry(name string, isDir bool) (kind entryKind, seg string) {
	base, file := strings.CutSuffix(name, fileSuffix)
	if file == isDir {
		return foreign, ""
	}
	if strings.HasPrefix(base, hashedMark) {
		if len(base) != hashedLen {
			return foreign, ""
		}
		if _, err := hex.DecodeString(base[1:]); err != nil {
			return foreign, ""
		}
		if file {
			return hashedFile, ""
		}
		return hashedDir, ""
	}
	seg, ok := unescapeSegment(base)
	if !ok || len(base) > maxPlainSegment {
		return foreign, ""
	}
	if file {
		return plainFile, seg
	}
	return plainDir, seg
}

// dirPath maps a name prefix ending in "/" (or "") to its directory.
func (s *Store) dirPath(dirPrefix string) (string, error) {
	parts := []string{s.blobsDir}
	if dirPrefix != "" {
		for _, seg := range strings.Split(strings.TrimSuffix(dirPrefix, "/"), "/") {
			parts = append(parts, escapeSegment(seg))
		}
	}
	return s.inside(filepath.Join(parts...), dirPrefix)
}

// blobPath maps a valid blob name to its file.
func (s *Store) blobPath(name string) (string, error) {
	segs := strings.Split(name, "/")
	parts := make([]string, 0, len(segs)+1)
	parts = append(parts, s.blobsDir)
	for _, seg := range segs {
		parts = append(parts, escapeSegment(seg))
	}
	parts[len(parts)-1] += fileSuffix
	return s.inside(filepath.Join(parts...), name)
}

// inside is the last line of defence against a name escaping the root:
// whatever ValidateName and escaping let through, the joined path must lie
// under the blob directory.
func (s *Store) inside(p, name string) (string, error) {
	rel, err := filepath.Rel(s.blobsDir, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) ||
		!strings.HasPrefix(p, s.blobsDir) {
		return "", fmt.Errorf("localstore: name %q maps outside the data directory: %w", name, errInvalidName)
	}
	return p, nil
}
