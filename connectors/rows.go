package connectors

import "github.com/weirstream/weir/stream"

// JSONRowDecoder decodes JSON objects into rows of a schema, as the file
// source's json format does: declared fields are taken by name (other keys
// are skipped), a missing field or a JSON null is a null, and strings are
// copied, so the input may be reused once Decode returns. Connectors of
// other packages (message values of Kafka or NATS) decode with it.
type JSONRowDecoder struct {
	d *jsonDecoder
	a arena
}

// NewJSONRowDecoder returns a decoder into rows of schema.
func NewJSONRowDecoder(schema *stream.Schema) *JSONRowDecoder {
	return &JSONRowDecoder{d: newJSONDecoder(schema)}
}

// Decode appends row number row (b's current length) of b from the JSON
// object obj. On error b is left as it was; the error names the column
// of obj where decoding stopped but never echoes its values.
func (d *JSONRowDecoder) Decode(obj []byte, b *stream.Batch, row int) error {
	return d.d.decode(obj, b, row, &d.a)
}

// JSONRowEncoder encodes rows as JSON objects, as the file sink's jsonl
// format does: {"field": value, ...} with timestamps as RFC 3339 strings
// with milliseconds and nulls as null.
type JSONRowEncoder struct{ e *rowEncoder }

// NewJSONRowEncoder returns an encoder of rows of schema.
func NewJSONRowEncoder(schema *stream.Schema) *JSONRowEncoder {
	return &JSONRowEncoder{e: newRowEncoder(formatJSON, schema, "")}
}

// AppendRow appends row row of b to dst as one JSON object without a
// trailing newline.
func (e *JSONRowEncoder) AppendRow(dst []byte, b *stream.Batch, row int) []byte {
	dst = e.e.appendRow(dst, b, row)
	return dst[:len(dst)-1]
}
