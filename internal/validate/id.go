package validate

import "strconv"

// MaxRecordIDBytes is the maximum length of a record id.
const MaxRecordIDBytes = 128

// RecordID checks a record id: 1 to MaxRecordIDBytes characters of
// [A-Za-z0-9._:-]. An empty id is invalid here; Record allows it because the
// server assigns one.
//
// Ids may be "." or ".." and may differ only in case, so they must never be
// used as blob or file names.
func RecordID(id string) error { return recordID("id", id) }

// MaxRequestIDBytes is the maximum length of an Append request_id.
const MaxRequestIDBytes = 128

// RequestID checks an Append request_id: empty (none), or 1 to
// MaxRequestIDBytes characters of [A-Za-z0-9._:-], the record-id grammar.
func RequestID(id string) error {
	if id == "" {
		return nil
	}
	return recordID("request_id", id)
}

func recordID(field, id string) error {
	if id == "" {
		return &FieldError{Field: field, Rule: "required"}
	}
	if len(id) > MaxRecordIDBytes {
		return fieldErr(field, "must be at most "+strconv.Itoa(MaxRecordIDBytes)+" characters", "got %d", len(id))
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !isIDByte(c) {
			return fieldErr(field, "must contain only A-Z, a-z, 0-9, '.', '_', ':' and '-'",
				"got %s at byte %d", quoteByte(c), i)
		}
	}
	return nil
}

func isIDByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '.' || c == '_' || c == ':' || c == '-'
}
