// Package validate checks requests against the rollout.v1 contract: the shard
// and record-id grammars, finite floats and consistent lengths. The server
// calls it before anything touches storage, and the shard writer relies on
// what it guarantees.
//
// Every rejection is a *FieldError that names the field and the rule it broke,
// and matches ErrInvalid under errors.Is. Validators return the first problem
// they find.
//
// Limits that are server configuration (such as the maximum batch size) are
// deliberately not checked here.
package validate

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	"google.golang.org/protobuf/reflect/protoreflect"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// ErrInvalid matches every error this package returns, so that callers can
// map it to one status code with errors.Is.
var ErrInvalid = errors.New("invalid argument")

// FieldError is a request field that broke a rule.
type FieldError struct {
	// Field is the field's path in the request, such as "shard",
	// "records[3].reward" or "records[0].output_logprobs[7]".
	Field string
	// Rule is the rule that was broken, such as "must be finite". It does not
	// depend on the value, so it can be matched or aggregated.
	Rule string
	// Detail describes the offending value, such as "got NaN". It may be empty.
	Detail string
}

// Error returns "field: rule" or "field: rule, detail".
func (e *FieldError) Error() string {
	if e.Detail == "" {
		return e.Field + ": " + e.Rule
	}
	return e.Field + ": " + e.Rule + ", " + e.Detail
}

// Is reports whether target is ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

func fieldErr(field, rule, detailFormat string, args ...any) *FieldError {
	return &FieldError{Field: field, Rule: rule, Detail: fmt.Sprintf(detailFormat, args...)}
}

// AppendRequest checks an Append request: the shard, the request_id (see
// RequestID), a non-empty batch, each record (see Record), and that no two
// records share a non-empty id.
func AppendRequest(req *rolloutv1.AppendRequest) error {
	if err := Shard(req.GetShard()); err != nil {
		return err
	}
	if err := RequestID(req.GetRequestId()); err != nil {
		return err
	}
	records := req.GetRecords()
	if len(records) == 0 {
		return &FieldError{Field: "records", Rule: "must not be empty"}
	}
	seen := make(map[string]int, len(records))
	for i, r := range records {
		if err := Record(i, r); err != nil {
			return err
		}
		id := r.GetId()
		if id == "" {
			continue
		}
		if first, dup := seen[id]; dup {
			return fieldErr(recordField(i, "id"), "must be unique within the request",
				"%q is also records[%d].id", id, first)
		}
		seen[id] = i
	}
	return nil
}

// GetRequest checks a Get request: a valid shard and a valid, non-empty id.
func GetRequest(req *rolloutv1.GetRequest) error {
	if err := Shard(req.GetShard()); err != nil {
		return err
	}
	return recordID("id", req.GetId())
}

// Record checks the record at index i of an Append request; i only names the
// field in errors ("records[i]..."). An empty id is allowed: the server
// assigns one. It checks, in this order, the id grammar, that every enum
// field (role) holds a value the API defines, that reward, advantage, score
// and the logprobs are finite, that loss_mask is empty or holds one 0 or 1
// byte per output token, and that every relationship's weight is finite.
func Record(i int, r *rolloutv1.Record) error {
	if r == nil {
		return &FieldError{Field: "records[" + strconv.Itoa(i) + "]", Rule: "must be set"}
	}
	// Every check names its field as a suffix of records[i], and the
	// path is built only for an error: a valid record costs no strings.
	if err := record(r); err != nil {
		err.Field = "records[" + strconv.Itoa(i) + "]" + err.Field
		return err
	}
	return nil
}

// record is Record's checks, in its order, each error's Field the path
// within the record, such as ".output_logprobs[7]".
func record(r *rolloutv1.Record) *FieldError {
	if id := r.GetId(); id != "" {
		if err := recordID("", id); err != nil {
			return in(".id", err)
		}
	}
	if err := unknownEnum(r.ProtoReflect()); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    *float32
	}{
		{".reward", r.Reward},
		{".advantage", r.Advantage},
		{".score", r.Score},
	} {
		if f.v != nil && !isFinite(*f.v) {
			return notFinite(f.name, *f.v)
		}
	}
	for _, f := range []struct {
		name string
		vs   []float32
	}{
		{".output_logprobs", r.GetOutputLogprobs()},
		{".ref_logprobs", r.GetRefLogprobs()},
	} {
		for j, v := range f.vs {
			if !isFinite(v) {
				return notFinite(f.name+"["+strconv.Itoa(j)+"]", v)
			}
		}
	}
	mask, tokens := r.GetLossMask(), r.GetOutputTokens()
	if len(mask) != 0 && len(mask) != len(tokens) {
		return fieldErr(".loss_mask", "must be empty or have one byte per output token",
			"got %d bytes for %d output_tokens", len(mask), len(tokens))
	}
	for j, b := range mask {
		if b > 1 {
			return fieldErr(".loss_mask["+strconv.Itoa(j)+"]", "must be 0 or 1", "got %d", b)
		}
	}
	for j, rel := range r.GetRelationships() {
		if w := rel.GetWeight(); !isFinite(w) {
			return notFinite(".relationships["+strconv.Itoa(j)+"].weight", w)
		}
	}
	return nil
}

// in is err, a *FieldError, with its Field set to field.
func in(field string, err error) *FieldError {
	fe := err.(*FieldError)
	fe.Field = field
	return fe
}

// unknownEnum checks that every enum field set in m, and in the messages
// it holds, has a value its enum defines. Proto3 enums are open: a client
// can send any number (role: 99), which decodes without error and would be
// stored as an unknown value no reader can interpret. Fields are checked in
// declaration order, so the first problem is always the same one (within a
// map, whose order is random, any bad entry may be named). The error's
// Field is the path within m, such as ".relationships[2].kind", built on
// the way back up, so that a valid message costs no strings.
func unknownEnum(m protoreflect.Message) *FieldError {
	fields := m.Descriptor().Fields()
	for k := 0; k < fields.Len(); k++ {
		fd := fields.Get(k)
		elem := fd
		if fd.IsMap() {
			elem = fd.MapValue()
		}
		if kind := elem.Kind(); kind != protoreflect.EnumKind && kind != protoreflect.MessageKind && kind != protoreflect.GroupKind {
			continue // scalars, such as the token lists, hold no enum
		}
		if !m.Has(fd) {
			continue
		}
		v := m.Get(fd)
		switch {
		case fd.IsMap():
			var err *FieldError
			v.Map().Range(func(key protoreflect.MapKey, mv protoreflect.Value) bool {
				if err = unknownValue(elem, mv); err != nil {
					err.Field = "." + string(fd.Name()) + "[" + strconv.Quote(key.String()) + "]" + err.Field
				}
				return err == nil
			})
			if err != nil {
				return err
			}
		case fd.IsList():
			l := v.List()
			for j := 0; j < l.Len(); j++ {
				if err := unknownValue(fd, l.Get(j)); err != nil {
					err.Field = "." + string(fd.Name()) + "[" + strconv.Itoa(j) + "]" + err.Field
					return err
				}
			}
		default:
			if err := unknownValue(fd, v); err != nil {
				err.Field = "." + string(fd.Name()) + err.Field
				return err
			}
		}
	}
	return nil
}

// unknownValue checks one value of field fd (an element, for a list or
// map); its error's Field is the path below that value.
func unknownValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) *FieldError {
	switch fd.Kind() {
	case protoreflect.EnumKind:
		if fd.Enum().Values().ByNumber(v.Enum()) == nil {
			return fieldErr("", "must be a value of "+string(fd.Enum().FullName()), "got %d", v.Enum())
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return unknownEnum(v.Message())
	}
	return nil
}

func recordField(i int, name string) string {
	return "records[" + strconv.Itoa(i) + "]." + name
}

func isFinite(v float32) bool {
	f := float64(v)
	return !math.IsNaN(f) && !math.IsInf(f, 0)
}

func notFinite(field string, v float32) *FieldError {
	return fieldErr(field, "must be finite", "got %v", float64(v))
}
