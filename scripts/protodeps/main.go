// Command protodeps writes the .proto sources of the schema's third-party
// imports (buf/validate/validate.proto) into a build folder, printed back from
// the file descriptors compiled into the protovalidate Go module that Parley
// already depends on. The buf schema registry is not needed, and no
// third-party file is copied into the repository.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	_ "buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	//lint:ignore SA1019 protoprint, which prints .proto sources, still needs the v1 wrapper.
	"github.com/jhump/protoreflect/desc"
	"github.com/jhump/protoreflect/desc/protoprint"
	"google.golang.org/protobuf/reflect/protoregistry"
)

var files = []string{"buf/validate/validate.proto"}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: protodeps OUTDIR")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "protodeps:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	printer := protoprint.Printer{}
	for _, name := range files {
		fd, err := protoregistry.GlobalFiles.FindFileByPath(name)
		if err != nil {
			return err
		}
		d, err := desc.WrapFile(fd)
		if err != nil {
			return err
		}
		path := filepath.Join(out, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := printer.PrintProtoFile(d, f); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}
