package consumer

import "strings"

// The consumers' blob layout (see the package comment).
const (
	root      = "consumers/"
	nameDir   = "_c/"
	rootNames = root + nameDir
)

// blobName is the name of k's blob. k is normalized.
func blobName(k Key) string {
	return scopeRoot(k.Prefix) + nameDir + k.Name
}

// scopeRoot is the storage prefix of the consumers whose prefix lies under
// prefix: "consumers/" for all, "consumers/<prefix>/" otherwise.
func scopeRoot(prefix string) string {
	if prefix == "" {
		return root
	}
	return root + prefix + "/"
}

// parseBlobName is the inverse of blobName; ok is false for a name that is
// not a consumer's.
func parseBlobName(name string) (Key, bool) {
	rest, ok := strings.CutPrefix(name, root)
	if !ok {
		return Key{}, false
	}
	var k Key
	if n, ok := strings.CutPrefix(rest, nameDir); ok {
		k = Key{Name: n}
	} else {
		i := strings.LastIndex(rest, "/"+nameDir)
		if i <= 0 {
			return Key{}, false
		}
		k = Key{Prefix: rest[:i], Name: rest[i+1+len(nameDir):]}
	}
	nk, err := k.Normalize()
	if err != nil || nk != k {
		return Key{}, false
	}
	return k, true
}
