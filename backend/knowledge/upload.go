package knowledge

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"unicode/utf8"

	"github.com/parleyhq/parley/backend/apperr"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
)

// MaxUploadBytes bounds a multipart upload: a file of MaxFileBytes and its
// framing.
const MaxUploadBytes = MaxFileBytes + 1<<20

// MaxMessageBytes bounds a DatastoreService message over Connect or gRPC:
// a file of MaxFileBytes as Connect's JSON carries it (base64, four bytes
// for three) and room for the rest. Other services take wire.MaxMessageBytes.
const MaxMessageBytes = (MaxFileBytes+2)/3*4 + 1<<20

// maxNameBytes bounds the "name" field of an upload: 300 characters (the
// schema's limit) of up to 4 bytes each.
const maxNameBytes = 300 * 4

// TooLargeError is an upload whose file is above MaxFileBytes. It unwraps
// to a TooLarge error naming the field "file" (413), and carries the file's
// name for the console's page.
type TooLargeError struct {
	// FileName is the uploaded file's name, when it was read before the
	// limit was hit.
	FileName string
	err      *apperr.Error
}

func (e *TooLargeError) Error() string { return e.err.Error() }
func (e *TooLargeError) Unwrap() error { return e.err }

func tooLarge(name string) error {
	return &TooLargeError{FileName: name, err: &apperr.Error{Code: apperr.TooLarge, Field: "file",
		Message: fmt.Sprintf("file: larger than the %d bytes allowed", MaxFileBytes)}}
}

// ReadUpload reads a multipart/form-data datasource upload into req, as the
// REST API and the console take it: the document in the form field "file"
// (at most MaxFileBytes; its kind is detected from its bytes later, by
// CreateDatasource) and an optional "name". The body is streamed, never
// spooled to disk. Errors are Invalid and name the field; a file that is
// too large is also a *TooLargeError.
func ReadUpload(w http.ResponseWriter, r *http.Request, req *parleyv1.CreateDatasourceRequest) error {
	r.Body = http.MaxBytesReader(w, r.Body, MaxUploadBytes)
	mr, err := r.MultipartReader()
	if err != nil {
		return apperr.InvalidField("body", "malformed multipart form: %v", err)
	}
	var (
		file      []byte
		fileName  string
		name      string
		haveFile  bool
		haveName  bool
		overLimit = func(err error) bool {
			var tooBig *http.MaxBytesError
			return errors.As(err, &tooBig)
		}
	)
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if overLimit(err) {
				return tooLarge(fileName)
			}
			return apperr.InvalidField("body", "malformed multipart form: %v", err)
		}
		switch {
		case part.FormName() == "file" && part.FileName() != "" && !haveFile:
			// Without its folders here, not only in CreateDatasource: a
			// Windows client's whole path (C:\Users\...\report.pdf, which
			// FileName keeps on Linux) was checked against the schema's
			// 300 characters, and a long one refused, though its name fits.
			fileName = baseName(part.FileName())
			// A filename*=UTF-8''%FF parameter is decoded to raw bytes,
			// which Postgres refuses in text.
			if !utf8.ValidString(fileName) {
				return apperr.InvalidField("file", "its file name must be valid UTF-8")
			}
			b, err := io.ReadAll(io.LimitReader(part, MaxFileBytes+1))
			switch {
			case overLimit(err) || len(b) > MaxFileBytes:
				return tooLarge(fileName)
			case err != nil:
				return apperr.InvalidField("file", "could not be read")
			}
			file, haveFile = b, true
		case part.FormName() == "name" && part.FileName() == "" && !haveName:
			b, err := io.ReadAll(io.LimitReader(part, maxNameBytes+1))
			switch {
			case overLimit(err):
				return tooLarge(fileName)
			case err != nil:
				return apperr.InvalidField("name", "could not be read")
			case len(b) > maxNameBytes:
				return apperr.InvalidField("name", "longer than 300 characters")
			case !utf8.Valid(b):
				return apperr.InvalidField("name", "must be valid UTF-8")
			}
			name, haveName = string(b), true
		}
		_ = part.Close()
	}
	if !haveFile {
		return apperr.InvalidField("file", "missing: send the document in the form field \"file\"")
	}
	req.Type, req.File, req.FileName, req.Name = "file", file, fileName, name
	return nil
}
