package server_test

import (
	"testing"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
)

// Every list and map a request carries, at any depth, declares its bound
// (max_items, max_pairs): wire.Bounded refuses an over-long one with one
// violation, where protovalidate would report one per item.
func TestEveryRequestListIsBounded(t *testing.T) {
	t.Parallel()
	_ = parleyv1.File_parley_v1_access_proto
	seen := map[protoreflect.FullName]bool{}
	var walk func(md protoreflect.MessageDescriptor)
	walk = func(md protoreflect.MessageDescriptor) {
		if seen[md.FullName()] || md.ParentFile().Package() != "parley.v1" {
			return
		}
		seen[md.FullName()] = true
		for i := range md.Fields().Len() {
			f := md.Fields().Get(i)
			r, _ := proto.GetExtension(f.Options(), validate.E_Field).(*validate.FieldRules)
			switch {
			case f.IsMap():
				if !r.GetMap().HasMaxPairs() {
					t.Errorf("%s: a map without max_pairs", f.FullName())
				}
				if f.MapValue().Kind() == protoreflect.MessageKind {
					walk(f.MapValue().Message())
				}
				continue
			case f.IsList() && !r.GetRepeated().HasMaxItems():
				t.Errorf("%s: a list without max_items", f.FullName())
			}
			if f.Kind() == protoreflect.MessageKind {
				walk(f.Message())
			}
		}
	}
	protoregistry.GlobalFiles.RangeFilesByPackage("parley.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			for j := range fd.Services().Get(i).Methods().Len() {
				walk(fd.Services().Get(i).Methods().Get(j).Input())
			}
		}
		return true
	})
}
