package shard

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// fillAll sets every field of m, and of the messages in it, to a value
// other than its default: lists get two elements.
func fillAll(m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			for k := range 2 {
				if fd.Kind() == protoreflect.MessageKind {
					e := l.NewElement()
					fillAll(e.Message(), depth+1)
					l.Append(e)
				} else {
					l.Append(scalarOf(fd, i+k+depth))
				}
			}
		case fd.Kind() == protoreflect.MessageKind:
			fillAll(m.Mutable(fd).Message(), depth+1)
		default:
			m.Set(fd, scalarOf(fd, i+depth))
		}
	}
}

func scalarOf(fd protoreflect.FieldDescriptor, n int) protoreflect.Value {
	n++
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("s")
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte{byte(n)})
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(n))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(n))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(n))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(n))
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(protoreflect.EnumNumber(1))
	}
	panic("fillAll: kind " + fd.Kind().String())
}

// TestCheckpointCopyCopiesEveryField: the checkpoint's copy of the view
// equals a deep clone of it, with every field of the manifest set, and an
// edit of the copy (retire and forget change the retired lists in place;
// the epochs and the tombstone are changed alike) leaves the view as it was.
func TestCheckpointCopyCopiesEveryField(t *testing.T) {
	view := &storagepb.Manifest{}
	fillAll(view.ProtoReflect(), 0)
	view.ProtoReflect().SetUnknown([]byte{0xf8, 0x7f, 0x01})
	was := proto.CloneOf(view)
	next := checkpointCopy(view)
	if !proto.Equal(next, was) {
		t.Fatalf("checkpointCopy lost a field:\n got %v\nwant %v", next, was)
	}
	// Change every element of every list and every message in place.
	next.RetiredRuns[0].Epochs[0]++
	next.RetiredRuns[1].Counts = append(next.RetiredRuns[1].Counts, 9)
	next.RetiredBatches[0].Numbers[0]++
	next.Epochs[0].LastGeneration++
	next.Tombstone.Records++
	next.Generations = append(next.Generations[:1], &storagepb.Generation{Number: 99})
	if !proto.Equal(view, was) {
		t.Fatalf("an edit of the checkpoint's copy changed the view:\n got %v\nwant %v", view, was)
	}
	if next.Generations[0] != view.Generations[0] {
		t.Fatal("the copy does not share the view's generations: the encoder cannot keep their encodings")
	}
}
