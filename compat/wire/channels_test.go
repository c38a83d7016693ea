package wire_test

import (
	"testing"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
)

// The channels a conversation list filters on are the channels a chat
// request may name: the schema lists them twice (protovalidate has no
// shared lists), and this keeps the two alike.
func TestChannelListsAgree(t *testing.T) {
	in := func(m proto.Message) []string {
		fd := m.ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name("channel"))
		rules := proto.GetExtension(fd.Options(), validate.E_Field).(*validate.FieldRules)
		return rules.GetString().GetIn()
	}
	chat := in(&parleyv1.ChatRequest{})
	require.NotEmpty(t, chat)
	require.Equal(t, chat, in(&parleyv1.ListConversationsRequest{}))
}
