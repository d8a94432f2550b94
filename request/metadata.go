package request

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/rowlease/rowlease/internal/jcs"
	"github.com/rowlease/rowlease/lease"
)

// DefaultMaxMetadata is Config.MaxMetadata's default: 64 KiB.
const DefaultMaxMetadata = 64 << 10

// MetadataTooLargeError reports a message's Metadata larger than
// Config.MaxMetadata: it matches lease.ErrInvalid (400 in httpapi).
// Nothing was written.
type MetadataTooLargeError struct {
	Size  int // the metadata's size, in bytes
	Limit int // Config.MaxMetadata
}

// Error gives the size and the limit.
func (e *MetadataTooLargeError) Error() string {
	return fmt.Sprintf("request: metadata is %d bytes, more than the limit of %d (Config.MaxMetadata); nothing was written",
		e.Size, e.Limit)
}

// Is makes errors.Is(err, lease.ErrInvalid) true.
func (e *MetadataTooLargeError) Is(target error) bool { return target == lease.ErrInvalid }

// Metadata is the JSON object the client sent with the message
// (Message.Metadata: the user, attachments' references, model settings),
// as it was stored with the request; nil when there was none. A resumed
// run, and a run of a queued message, get it back from the request's row.
// It is a copy: the agent may change it.
func (run *Run) Metadata() json.RawMessage {
	if len(run.msg.Metadata) == 0 {
		return nil
	}
	return append(json.RawMessage(nil), run.msg.Metadata...)
}

// checkMetadataSize refuses, before it is parsed and before any SQL,
// metadata larger than Config.MaxMetadata.
func (r *Runner) checkMetadataSize(m json.RawMessage) error {
	if len(m) > r.cfg.MaxMetadata {
		return &MetadataTooLargeError{Size: len(m), Limit: r.cfg.MaxMetadata}
	}
	return nil
}

// fingerprint is a message's default fingerprint: the hex SHA-256 of its
// content, and, when it has metadata, of a NUL byte and the metadata's
// canonical form (RFC 8785: the same object with its members in another
// order, or other white space, is the same message). A message without
// metadata keeps the fingerprint it always had, so stored requests still
// match their resends; the content holds no NUL, so no content alone
// gives a fingerprint with metadata. It refuses metadata that is not one
// JSON object.
func fingerprint(content string, metadata json.RawMessage) (string, error) {
	h := sha256.New()
	h.Write([]byte(content))
	if len(metadata) > 0 {
		canonical, kind, err := jcs.Canonicalize(metadata)
		if err != nil {
			return "", invalid("metadata", "not valid JSON: "+err.Error())
		}
		if kind != jcs.KindObject {
			return "", invalid("metadata", "not a JSON object (got "+kind.String()+")")
		}
		h.Write([]byte{0})
		h.Write(canonical)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
