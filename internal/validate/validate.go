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
	if id := r.GetId(); id != "" {
		if err := recordID(recordField(i, "id"), id); err != nil {
			return err
		}
	}
	if err := knownEnums("records["+strconv.Itoa(i)+"]", r.ProtoReflect()); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    *float32
	}{
		{"reward", r.Reward},
		{"advantage", r.Advantage},
		{"score", r.Score},
	} {
		if f.v != nil {
			if err := finite(recordField(i, f.name), *f.v); err != nil {
				return err
			}
		}
	}
	for _, f := range []struct {
		name string
		vs   []float32
	}{
		{"output_logprobs", r.GetOutputLogprobs()},
		{"ref_logprobs", r.GetRefLogprobs()},
	} {
		for j, v := range f.vs {
			if err := finite(recordField(i, f.name)+"["+strconv.Itoa(j)+"]", v); err != nil {
				return err
			}
		}
	}
	mask, tokens := r.GetLossMask(), r.GetOutputTokens()
	if len(mask) != 0 && len(mask) != len(tokens) {
		return fieldErr(recordField(i, "loss_mask"), "must be empty or have one byte per output token",
			"got %d bytes for %d output_tokens", len(mask), len(tokens))
	}
	for j, b := range mask {
		if b > 1 {
			return fieldErr(recordField(i, "loss_mask")+"["+strconv.Itoa(j)+"]", "must be 0 or 1", "got %d", b)
		}
	}
	for j, rel := range r.GetRelationships() {
		if err := finite(recordField(i, "relationships")+"["+strconv.Itoa(j)+"].weight", rel.GetWeight()); err != nil {
			return err
		}
	}
	return nil
}

// knownEnums checks that every enum field set in m, and in the messages it
// holds, has a value its enum defines. Proto3 enums are open: a client can
// send any number (role: 99), which decodes without error and would be
// stored as an unknown value no reader can interpret. Fields are checked in
// declaration order, so the first problem is always the same one (within a
// map, whose order is random, any bad entry may be named). path names m in
// errors, such as "records[3]".
func knownEnums(path string, m protoreflect.Message) error {
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
		name := path + "." + string(fd.Name())
		v := m.Get(fd)
		switch {
		case fd.IsMap():
			var err error
			v.Map().Range(func(key protoreflect.MapKey, mv protoreflect.Value) bool {
				err = knownValue(name+"["+strconv.Quote(key.String())+"]", elem, mv)
				return err == nil
			})
			if err != nil {
				return err
			}
		case fd.IsList():
			l := v.List()
			for j := 0; j < l.Len(); j++ {
				if err := knownValue(name+"["+strconv.Itoa(j)+"]", fd, l.Get(j)); err != nil {
					return err
				}
			}
		default:
			if err := knownValue(name, fd, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// knownValue checks one value of field fd (an element, for a list or map).
func knownValue(name string, fd protoreflect.FieldDescriptor, v protoreflect.Value) error {
	switch fd.Kind() {
	case protoreflect.EnumKind:
		if fd.Enum().Values().ByNumber(v.Enum()) == nil {
			return fieldErr(name, "must be a value of "+string(fd.Enum().FullName()), "got %d", v.Enum())
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return knownEnums(name, v.Message())
	}
	return nil
}

func recordField(i int, name string) string {
	return "records[" + strconv.Itoa(i) + "]." + name
}

func finite(field string, v float32) error {
	f := float64(v)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return fieldErr(field, "must be finite", "got %v", f)
	}
	return nil
}
